"""Scheduled work you can watch: the README's first command runs this app.

    jobledger worker examples.demo:app          # from the repository root; Ctrl-C to stop

It declares three scheduled jobs when it is imported and a handler for each:

* ``demo-heartbeat`` fires every 5 seconds;
* ``demo-minutely`` fires at the start of every minute (a cron expression) and reports what the
  store has seen so far;
* ``demo-hello`` fires once, 3 seconds after the worker starts.

The store is ``$JOBLEDGER_DB`` if set, else the embedded SQLite file the ``jobledger`` command
uses by default (``~/.local/share/jobledger/jobledger.sqlite3`` on Linux), so in another
terminal these look at the same store:

    jobledger --app examples.demo:app stats
    jobledger --app examples.demo:app explain demo-heartbeat
    jobledger --app examples.demo:app history --follow
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jobledger

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

app = jobledger.App(
    jobledger.default_store_target(),  # $JOBLEDGER_DB, else the default file
    name="demo",
    authorize=jobledger.allow_all,  # no authorization policy in a demo: say so explicitly
)


@app.handler("demo.heartbeat")
def heartbeat(ctx: jobledger.JobContext) -> dict[str, Any]:
    slot = ctx.occurrence.scheduled_time  # scheduled_for (epoch ms) as an aware UTC datetime
    print(f"[demo] heartbeat for the {slot:%H:%M:%S} slot (attempt {ctx.attempt})", flush=True)
    return {"slot": slot.isoformat()}


@app.handler("demo.report")
def report(ctx: jobledger.JobContext) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in app.store.count_occurrences():
        counts[row.status] = counts.get(row.status, 0) + row.count
    # "running" counts every claimed occurrence: this report's own, and any the worker claimed
    # ahead of a free slot (its prefetch), so a worker with one slot can show two.
    summary = ", ".join(
        f"{n} claimed (running or taken ahead)" if status == "running" else f"{n} {status}"
        for status, n in sorted(counts.items())
    )
    minute = ctx.occurrence.scheduled_time
    print(f"[demo] minute report at {minute:%H:%M:%S}: {summary}", flush=True)
    return counts


@app.handler("demo.hello")
def hello(ctx: jobledger.JobContext) -> str:
    print(
        "[demo] hello: this one-off job was scheduled 3 s after start. In another terminal try "
        "`jobledger stats` and `jobledger explain demo-heartbeat`",
        flush=True,
    )
    return "hello"


# Declaring is idempotent: the same declaration again changes nothing, so restarting the worker
# keeps each schedule's progress (slots missed while it was down are coalesced into one).
app.schedule("demo-heartbeat", "demo.heartbeat", every=timedelta(seconds=5))
app.schedule("demo-minutely", "demo.report", cron="* * * * *")
# A new instant on every start: the job is updated (revision + 1) and fires once more.
app.schedule(
    "demo-hello",
    "demo.hello",
    at=EPOCH + timedelta(milliseconds=app.store.now() + 3000),
)
