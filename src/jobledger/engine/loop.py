"""One asyncio event loop on a daemon thread, where a runtime runs its ``async def`` handlers.

Sync code (a worker slot thread, or a test calling :meth:`Runtime.run_next`) submits a coroutine
and blocks until it finishes; many slots can wait on the same loop at once, so async handlers run
concurrently with each other while sync handlers run on their own threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["EventLoopThread"]

T = TypeVar("T")

START_TIMEOUT_S = 10.0
# How often a caller waiting for a coroutine checks that the loop is still running.
LIVENESS_CHECK_S = 0.25


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


class EventLoopThread:
    """Starts lazily on first use; :meth:`close` stops it (idempotent)."""

    def __init__(self, name: str = "jobledger-asyncio") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=serve, name=self._name, daemon=True)
                thread.start()
                if not ready.wait(START_TIMEOUT_S):  # pragma: no cover - a wedged interpreter
                    loop.call_soon_threadsafe(loop.stop)
                    raise RuntimeError("the jobledger event loop thread did not start")
                self._thread, self._loop = thread, loop
            return self._loop

    def run(
        self,
        awaitable: Awaitable[T],
        on_cancel: Callable[[Callable[[], None]], None] | None = None,
    ) -> T:
        """Run ``awaitable`` on the loop and wait for it.

        ``on_cancel`` receives a function that cancels the task; the runtime registers it with
        the job context so a lost lease or an abandoned attempt cancels the coroutine. A
        cancelled task raises :class:`concurrent.futures.CancelledError` here, as does a loop
        that stops (:meth:`close`) before the task finished — even one scheduled too late for
        ``close`` to see, which would otherwise leave this call waiting forever.
        """
        loop = self._ensure()
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            _await(awaitable), loop
        )
        if on_cancel is not None:

            def cancel() -> None:
                future.cancel()

            on_cancel(cancel)
        while True:
            try:
                return future.result(timeout=LIVENESS_CHECK_S)
            except TimeoutError:
                if not loop.is_running():
                    future.cancel()
                    raise concurrent.futures.CancelledError(
                        "the event loop stopped before the coroutine finished"
                    ) from None

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            asyncio.get_running_loop().stop()

        def stop() -> None:
            loop.create_task(shutdown())

        loop.call_soon_threadsafe(stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state: Any = "running" if self._loop is not None else "idle"
        return f"EventLoopThread({state})"
