"""The application façade: register handlers, create jobs, enqueue work, run a worker.

::

    app = jobledger.App("jobs.sqlite3", authorize=jobledger.allow_all)

    @app.handler("send_email")
    def send_email(ctx: jobledger.JobContext) -> dict:
        ...

    app.create_job("welcome-42", "send_email", payload={"to": "ada@example.com"})
    app.enqueue("welcome-42", delay=timedelta(minutes=5))
    app.run_worker(concurrency=4)

:class:`App` adds conveniences only — datetimes and timedeltas where the kernel takes epoch ms,
a default authority naming the app, a lazily opened store — and never changes the kernel's
rules. ``authorize`` is still required to *run* work (not to enqueue it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from .clock import Clock
from .errors import InvalidArgument
from .handlers import Authorizer, Handler, epoch_ms_from
from .heartbeat import HeartbeatDriver
from .models import Event, Job, Occurrence
from .retry import DEFAULT_BACKOFF, BackoffPolicy, duration_ms
from .runtime import DEFAULT_LEASE_MS, Runtime
from .store import UNSET, Store, open_store
from .worker import DEFAULT_GRACE_PERIOD, DEFAULT_POLL_INTERVAL, Worker, WorkerSummary

__all__ = ["App"]

H = TypeVar("H", bound=Handler)


class App:
    """Handlers plus a store: the shortest path from "a function" to "durable background work".

    ``target`` is anything :func:`jobledger.open_store` accepts (opened on first use and closed
    by :meth:`close`) or an open :class:`~jobledger.Store` (left open). ``clock`` is used for
    "now" in :meth:`enqueue`, for retry instants, and is passed to the store it opens; without
    one, "now" is the store's (on PostgreSQL, the database clock, so machines whose clocks
    disagree still enqueue at the same instants).
    """

    def __init__(
        self,
        target: str | Path | Store,
        *,
        name: str = "jobledger",
        clock: Clock | None = None,
        authorize: Authorizer | None = None,
        retry_policy: BackoffPolicy = DEFAULT_BACKOFF,
        store_options: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.clock: Clock | None = clock
        self.authorize = authorize
        self.retry_policy = retry_policy
        self._target = target
        self._store_clock = clock
        self._store_options = dict(store_options or {})
        self._store: Store | None = target if isinstance(target, Store) else None
        self._owns_store = self._store is None
        self._lock = threading.Lock()
        self._handlers: dict[str, tuple[Handler, BackoffPolicy | None]] = {}
        self._runtimes: list[Runtime] = []

    # -- store -------------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The store, opened on first use."""
        with self._lock:
            if self._store is None:
                if isinstance(self._target, Store):  # pragma: no cover - set in __init__
                    self._store = self._target
                else:
                    self._store = open_store(
                        self._target, clock=self._store_clock, **self._store_options
                    )
            return self._store

    def close(self) -> None:
        """Stop runtimes' event loops and close the store if this app opened it. Idempotent."""
        with self._lock:
            runtimes, self._runtimes = self._runtimes, []
            store, self._store = self._store, None
        for runtime in runtimes:
            runtime.close()
        if store is not None and self._owns_store:
            store.close()
        elif store is not None:
            self._store = store

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- handlers ----------------------------------------------------------------------------

    def handler(self, kind: str, *, retry: BackoffPolicy | None = None) -> Callable[[H], H]:
        """Decorator: handle jobs of ``kind`` with the decorated function (sync or async)."""
        key = Runtime.normalize_kind(kind)  # a bad kind fails when the decorator is made

        def register(function: H) -> H:
            Runtime.check_handler(key, function, self._handlers)
            self._handlers[key] = (function, retry)
            return function

        return register

    # -- jobs and occurrences ----------------------------------------------------------------

    def default_authority(self) -> dict[str, Any]:
        """``{"principal": {"type": "app", "id": <app name>}}``: who asked, when nobody else did."""
        return {"principal": {"type": "app", "id": self.name}}

    def create_job(
        self,
        id: str,
        kind: str,
        *,
        payload: Any = None,
        authority: dict[str, Any] | None = None,
        trigger: Any = None,
        max_attempts: int = 3,
        enabled: bool = True,
    ) -> Job:
        """Create a job (revision 1); ``authority`` defaults to :meth:`default_authority`."""
        return self.store.create_job(
            id=id,
            kind=kind,
            authority=self.default_authority() if authority is None else authority,
            trigger=trigger,
            payload=payload,
            enabled=enabled,
            max_attempts=max_attempts,
        )

    def enqueue(
        self,
        job_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | int | None = None,
        trigger_key: str | None = None,
        payload: Any = UNSET,
    ) -> Occurrence:
        """Enqueue one firing of ``job_id`` at ``at`` (aware datetime or epoch ms), ``delay``
        from now (timedelta or ms), or now.

        Occurrence identity is deterministic: the same job revision, instant and
        ``trigger_key`` give the same occurrence (``deduplicated=True`` the second time). The
        key defaults to ``f"manual:{scheduled_for}"`` — so two enqueues for the same
        millisecond are one occurrence; pass a key (an order id, a request id) to make separate
        firings distinct or to make retries of your own enqueue call idempotent.
        """
        if at is not None and delay is not None:
            raise InvalidArgument("enqueue takes at or delay, not both")
        if at is not None:
            scheduled_for = epoch_ms_from(at, "at")
        else:
            now = self.store.now() if self.clock is None else self.clock()
            scheduled_for = now + (0 if delay is None else duration_ms(delay, "delay"))
        key = f"manual:{scheduled_for}" if trigger_key is None else trigger_key
        return self.store.enqueue_occurrence(
            job_id=job_id,
            scheduled_for=scheduled_for,
            trigger_key=key,
            available_at=scheduled_for,
            payload=payload,
        )

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get_job(job_id)

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        return self.store.get_occurrence(occurrence_id)

    def history(
        self, *, occurrence_id: str | None = None, job_id: str | None = None, limit: int = 50
    ) -> list[Event]:
        """Audit events, newest first."""
        return self.store.history(occurrence_id=occurrence_id, job_id=job_id, limit=limit)

    # -- running -----------------------------------------------------------------------------

    def runtime(
        self,
        *,
        owner_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_interval_ms: int | None = None,
        heartbeat: HeartbeatDriver | None = None,
    ) -> Runtime:
        """A :class:`Runtime` with this app's handlers (``authorize`` must have been given)."""
        runtime = Runtime(
            self.store,
            authorize=self.authorize,
            owner_id=owner_id,
            lease_ms=lease_ms,
            renew_interval_ms=renew_interval_ms,
            clock=self.clock,
            heartbeat=heartbeat,
            retry_policy=self.retry_policy,
        )
        for kind, (function, retry) in self._handlers.items():
            runtime.register_handler(kind, function, retry=retry)
        with self._lock:
            self._runtimes.append(runtime)
        return runtime

    def _discard_runtime(self, runtime: Runtime) -> None:
        """Close ``runtime`` and stop tracking it (for short-lived runtimes such as
        :func:`jobledger.testing.run_until_idle`'s, so a long-lived app does not pile them up)."""
        runtime.close()
        with self._lock:
            if runtime in self._runtimes:
                self._runtimes.remove(runtime)

    def worker(
        self,
        *,
        concurrency: int = 1,
        poll_interval: int | timedelta = DEFAULT_POLL_INTERVAL,
        grace_period: int | timedelta = DEFAULT_GRACE_PERIOD,
        job_kind: str | None = None,
        owner_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_interval_ms: int | None = None,
        heartbeat: HeartbeatDriver | None = None,
    ) -> Worker:
        """A :class:`Worker` over a new :meth:`runtime` (not started)."""
        runtime = self.runtime(
            owner_id=owner_id,
            lease_ms=lease_ms,
            renew_interval_ms=renew_interval_ms,
            heartbeat=heartbeat,
        )
        return Worker(
            runtime,
            concurrency=concurrency,
            poll_interval=poll_interval,
            grace_period=grace_period,
            job_kind=job_kind,
        )

    def run_worker(
        self,
        *,
        concurrency: int = 1,
        poll_interval: int | timedelta = DEFAULT_POLL_INTERVAL,
        grace_period: int | timedelta = DEFAULT_GRACE_PERIOD,
        job_kind: str | None = None,
        owner_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        install_signal_handlers: bool = True,
    ) -> WorkerSummary:
        """Run a worker in this thread until SIGTERM/SIGINT (or ``worker.stop()``)."""
        worker = self.worker(
            concurrency=concurrency,
            poll_interval=poll_interval,
            grace_period=grace_period,
            job_kind=job_kind,
            owner_id=owner_id,
            lease_ms=lease_ms,
        )
        return worker.run(install_signal_handlers=install_signal_handlers)
