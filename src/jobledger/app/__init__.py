"""The application façade: declare jobs and schedules, enqueue work, run a worker.

::

    app = jobledger.App("jobs.sqlite3", authorize=jobledger.allow_all)

    @app.handler("send_email", timeout=timedelta(seconds=30))
    def send_email(ctx: jobledger.JobContext) -> dict:
        ...

    app.ensure_job("welcome", "send_email")
    app.enqueue("welcome", payload={"to": "ada@example.com"})          # a new occurrence each call
    app.enqueue("welcome", payload={"to": "bob@example.com"}, key="signup-42")   # idempotent
    app.schedule("digest", "send_email", cron="30 2 * * *", timezone="America/New_York")
    app.run_worker(concurrency=4)

:class:`App` adds conveniences only — datetimes and timedeltas where the kernel takes epoch ms, a
default authority naming the app, a lazily opened store — and never changes the kernel's rules.
``authorize`` is still required to *run* work (not to enqueue it).
"""

from __future__ import annotations

from .enqueue import EnqueueMethods
from .enqueue_async import AsyncEnqueueMethods
from .flows import FlowMethods
from .jobs import JobMethods
from .queues import QueueMethods
from .results import ResultMethods
from .running import RunningMethods
from .schedules import ScheduleMethods

__all__ = ["App"]


class App(
    JobMethods,
    AsyncEnqueueMethods,
    FlowMethods,
    EnqueueMethods,
    QueueMethods,
    ScheduleMethods,
    RunningMethods,
    ResultMethods,
):
    """Handlers plus a store: the shortest path from "a function" to "durable background work".

    ``target`` is anything :func:`jobledger.open_store` accepts (opened on first use and closed
    by :meth:`close`, with ``store_options`` passed on) or an open :class:`~jobledger.Store`
    (left open; it keeps its own clock and options, so ``clock``/``store_options`` are refused
    with it). ``clock`` is used for "now" in :meth:`enqueue` and for retry instants, and is passed
    to the store the app opens; without one, "now" is the store's (on PostgreSQL, the database
    clock, so machines whose clocks disagree still enqueue at the same instants).
    ``shared_file=True`` (SQLite) lets the application's own tables live in the store's file,
    so they and :meth:`enqueue` ``(..., conn=app.connect())`` commit in one transaction
    (SPEC §8, docs/transactions.md). ``tracing``: OpenTelemetry spans for enqueues and
    attempts — ``True`` once the application configured a global tracer provider, a
    ``TracerProvider`` to use that one, ``False`` never (``docs/observability.md``).
    """
