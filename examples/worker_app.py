"""A small App for `jobledger worker examples.worker_app:app`.

The store comes from $JOBLEDGER_STORE (default: jobs/ledger.sqlite3). Try:

    export JOBLEDGER_STORE=jobs/ledger.sqlite3
    jobledger create-job --id greet-ada --kind greet --principal user:ada \\
        --payload '{"name": "Ada"}'
    jobledger enqueue greet-ada --at "$(date +%s)000" --trigger-key manual:1
    jobledger worker examples.worker_app:app      # Ctrl-C to stop gracefully
    jobledger history --job greet-ada
"""

import os

import jobledger

app = jobledger.App(
    os.environ.get("JOBLEDGER_STORE", "jobs/ledger.sqlite3"),
    name="example-worker",
    authorize=jobledger.allow_all,
)


@app.handler("greet")
def greet(ctx: jobledger.JobContext) -> dict[str, str]:
    return {"greeting": f"Hello, {ctx.payload['name']}!"}
