"""A small App whose work is enqueued by hand: ``jobledger worker examples.worker_app:app``.

The store is ``$JOBLEDGER_DB`` if set, else the ``jobledger`` command's default store. Try, from
the repository root:

    jobledger db init
    jobledger job add greet-ada --kind greet --payload '{"name": "Ada"}'
    jobledger enqueue greet-ada
    jobledger worker examples.worker_app:app --until-idle
    jobledger history --job greet-ada
"""

import jobledger

app = jobledger.App(
    jobledger.default_store_target(),  # $JOBLEDGER_DB, else the default file
    name="example-worker",
    authorize=jobledger.allow_all,
)


@app.handler("greet")
def greet(ctx: jobledger.JobContext) -> dict[str, str]:
    return {"greeting": f"Hello, {ctx.payload['name']}!"}
