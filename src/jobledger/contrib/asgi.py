"""An in-process worker for the lifetime of an ASGI application (FastAPI, Starlette, any server
that speaks the ASGI lifespan protocol).

::

    from fastapi import FastAPI
    from jobledger.contrib.asgi import lifespan

    jobs = jobledger.App("postgresql://app@db/app", authorize=jobledger.allow_all)
    api = FastAPI(lifespan=lifespan(jobs, concurrency=4))

On startup a worker for ``jobs`` (:meth:`App.worker <jobledger.App.worker>`, with the given
:class:`~jobledger.WorkerOptions` or their fields as keywords) starts in a thread of its own and
runs beside the application's request handlers; startup returns once its slots run. On shutdown
it stops gracefully — no new claims, running handlers get ``grace_period`` to finish and settle,
then unfinished leases are handed back — before the server exits. The server owns the signals
(the worker installs none). The worker is ``app.state.jobledger_worker`` for the application's
own code (its ``summary``, ``running``).

To combine it with a lifespan of your own, enter :func:`running_worker` inside it::

    @contextlib.asynccontextmanager
    async def my_lifespan(api):
        async with running_worker(jobs, concurrency=4):
            yield

Run one such worker per server process (``gunicorn -w 4`` makes four); the server forks before
the lifespan starts, so each process's worker and connections are its own (docs/runtime.md).
Nothing here imports a web framework.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..app import App
from ..engine.options import WorkerOptions
from ..engine.worker import Worker
from ..errors import InvalidArgument, SchedulerError

__all__ = ["lifespan", "running_worker"]

logger = logging.getLogger("jobledger.worker")

# How long startup waits for the worker's slots to run before it fails the startup.
START_TIMEOUT_S = 30.0


@contextlib.asynccontextmanager
async def running_worker(
    app: App, options: WorkerOptions | None = None, **settings: Any
) -> AsyncIterator[Worker]:
    """A worker of ``app`` running in a thread while the block runs; stopped gracefully (and
    waited for, off the event loop) when it ends. Startup errors — bad settings, no handlers —
    raise here, so the server fails its startup instead of serving without a worker."""
    if not isinstance(app, App):
        raise InvalidArgument("app must be a jobledger.App")
    worker = app.worker(options, **settings)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(install_signal_handlers=False)
        except BaseException as exc:  # reported below: at startup, or logged at shutdown
            failure.append(exc)
            logger.exception("the in-process worker stopped with an error")

    thread = threading.Thread(target=run, name="jobledger-asgi-worker", daemon=True)
    thread.start()
    started = await asyncio.to_thread(_wait_started, worker, thread)
    if not started:
        worker.stop()
        await asyncio.to_thread(thread.join, START_TIMEOUT_S)
        if failure:
            raise failure[0]
        raise SchedulerError("The in-process worker did not start in time")
    try:
        yield worker
    finally:
        worker.stop()
        # The graceful shutdown (grace period, handing leases back) runs in the worker's
        # thread; wait for it without blocking the event loop the application still runs.
        await asyncio.to_thread(thread.join)


def _wait_started(worker: Worker, thread: threading.Thread) -> bool:
    """True once the worker's slots run; False if its thread ended first or time ran out."""
    deadline = START_TIMEOUT_S
    step = 0.05
    waited = 0.0
    while waited < deadline:
        if worker.wait_until_running(step):
            return True
        if not thread.is_alive():
            return False
        waited += step
    return False


def lifespan(
    app: App, options: WorkerOptions | None = None, **settings: Any
) -> Callable[[Any], AbstractAsyncContextManager[None]]:
    """An ASGI ``lifespan`` (``FastAPI(lifespan=…)``, ``Starlette(lifespan=…)``) that runs a
    worker of ``app`` from startup to shutdown; see the module docstring. The worker is set as
    ``state.jobledger_worker`` on an application that has a ``state`` (Starlette, FastAPI)."""
    if not isinstance(app, App):
        raise InvalidArgument("app must be a jobledger.App")
    if options is not None and not isinstance(options, WorkerOptions):
        raise InvalidArgument("options must be a jobledger.WorkerOptions")
    checked = (options or WorkerOptions()).with_changes(**settings) if settings else options

    @contextlib.asynccontextmanager
    async def run(asgi_app: Any) -> AsyncIterator[None]:
        async with running_worker(app, checked) as worker:
            state = getattr(asgi_app, "state", None)
            if state is not None:
                state.jobledger_worker = worker
            yield

    return run
