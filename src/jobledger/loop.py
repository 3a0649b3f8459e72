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

                self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def run(
        self,
        awaitable: Awaitable[T],
        on_cancel: Callable[[Callable[[], None]], None] | None = None,
    ) -> T:
        """Run ``awaitable`` on the loop and wait for it.

        ``on_cancel`` receives a function that cancels the task; the runtime registers it with
        the job context so a lost lease or an abandoned attempt cancels the coroutine. A
        cancelled task raises :class:`concurrent.futures.CancelledError` here.
        """
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(
            _await(awaitable), self._ensure()
        )
        if on_cancel is not None:

            def cancel() -> None:
                future.cancel()

            on_cancel(cancel)
        return future.result()

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
