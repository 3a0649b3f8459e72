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

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from . import contract
from .clock import Clock
from .durations import choose_ms, epoch_ms_from
from .engine.handlers import Authorizer, Handler
from .engine.heartbeat import HeartbeatDriver
from .engine.observe import Observer
from .engine.options import DEFAULT_LEASE, LeaseOptions, WorkerOptions
from .engine.retry import DEFAULT_BACKOFF, BackoffPolicy
from .engine.runtime import Runtime
from .engine.watchdog import Watchdog
from .engine.worker import Service, Worker, WorkerSummary
from .errors import InvalidArgument
from .models import UNSET, EnqueueRequest, Event, Job, Occurrence
from .planning.declare import ScheduleOptions, declare_schedule
from .store import Store, open_store
from .store.ensure import ensure_job

if TYPE_CHECKING:
    from .planning.explain import Explanation
    from .planning.planner import PlanReport

__all__ = ["App"]

H = TypeVar("H", bound=Handler)
# Idempotency keys become trigger keys "key:<key>"; the identifier limit is 256.
MAX_KEY_LENGTH = 200


class App:
    """Handlers plus a store: the shortest path from "a function" to "durable background work".

    ``target`` is anything :func:`jobledger.open_store` accepts (opened on first use and closed
    by :meth:`close`, with ``store_options`` passed on) or an open :class:`~jobledger.Store`
    (left open; it keeps its own clock and options, so ``clock``/``store_options`` are refused
    with it). ``clock`` is used for "now" in :meth:`enqueue` and for retry instants, and is passed
    to the store the app opens; without one, "now" is the store's (on PostgreSQL, the database
    clock, so machines whose clocks disagree still enqueue at the same instants).
    """

    def __init__(
        self,
        target: str | Path | Store,
        *,
        name: str = "jobledger",
        clock: Clock | None = None,
        authorize: Authorizer | None = None,
        retry_policy: BackoffPolicy = DEFAULT_BACKOFF,
        store_options: Mapping[str, Any] | None = None,
    ) -> None:
        given_store = isinstance(target, Store)
        if given_store and clock is not None:
            raise InvalidArgument(
                "a store given to App keeps its own clock: pass clock= to open_store instead",
                details={"field": "clock"},
            )
        if given_store and store_options:
            raise InvalidArgument(
                "store_options apply only when App opens the store from a path or URL",
                details={"field": "store_options"},
            )
        if clock is not None and not callable(clock):
            raise InvalidArgument("clock must be a callable returning epoch ms")
        self.name = contract.normalize_identifier(name, "name")
        self.clock: Clock | None = clock
        self.authorize = authorize
        self.retry_policy = retry_policy
        self._target = target
        self._store_options = dict(store_options or {})
        self._store: Store | None = target if isinstance(target, Store) else None
        self._owns_store = self._store is None
        self._lock = threading.Lock()
        self._handlers: dict[str, tuple[Handler, BackoffPolicy | None, timedelta | None]] = {}
        self._runtimes: list[Runtime] = []

    # -- store -------------------------------------------------------------------------------

    @property
    def target(self) -> str | Path | Store:
        """What the app was given: a path or URL it opens, or an open store."""
        return self._target

    @property
    def store_options(self) -> dict[str, Any]:
        """The options the app passes to :func:`jobledger.open_store` (a copy)."""
        return dict(self._store_options)

    @property
    def store(self) -> Store:
        """The store, opened on first use."""
        with self._lock:
            if self._store is None:
                self._store = open_store(self._target, clock=self.clock, **self._store_options)  # type: ignore[arg-type]
            return self._store

    def close(self) -> None:
        """Stop runtimes and close the store if this app opened it. Idempotent."""
        with self._lock:
            runtimes, self._runtimes = self._runtimes, []
            store = self._store
            if self._owns_store:
                self._store = None
        for runtime in runtimes:
            runtime.close()
        if store is not None and self._owns_store:
            store.close()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now(self) -> int:
        return self.store.now() if self.clock is None else self.clock()

    # -- handlers ----------------------------------------------------------------------------

    def handler(
        self,
        kind: str,
        *,
        retry: BackoffPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> Callable[[H], H]:
        """Decorator: handle jobs of ``kind`` with the decorated function (sync or async).

        ``retry`` is the kind's backoff policy; ``timeout`` its time limit per attempt (past it
        the attempt fails as a retryable ``SCHEDULER_RUNTIME_TIMEOUT``).
        """
        key = Runtime.normalize_kind(kind)  # a bad kind fails when the decorator is made
        Runtime.check_timeout(timeout)

        def register(function: H) -> H:
            Runtime.check_handler(key, function, self._handlers)
            self._handlers[key] = (function, retry, timeout)
            return function

        return register

    @property
    def kinds(self) -> frozenset[str]:
        """The job kinds this app has handlers for."""
        return frozenset(self._handlers)

    # -- jobs --------------------------------------------------------------------------------

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
        max_attempts: int = contract.DEFAULT_MAX_ATTEMPTS,
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

    def ensure_job(
        self,
        id: str,
        kind: str,
        *,
        payload: Any = None,
        authority: dict[str, Any] | None = None,
        trigger: Any = None,
        max_attempts: int = contract.DEFAULT_MAX_ATTEMPTS,
        enabled: bool = True,
    ) -> Job:
        """Create the job, or bring it to exactly this definition; idempotent.

        For declaring jobs at start-up: the same declaration again changes nothing (no new
        revision); a changed one updates the job with compare-and-swap on its revision (so
        occurrences enqueued under the old definition are not run with the new one).
        """
        wanted = {
            "kind": kind,
            "trigger": {} if trigger is None else trigger,
            "payload": payload,
            "authority": self.default_authority() if authority is None else authority,
            "enabled": enabled,
            "max_attempts": max_attempts,
        }
        return ensure_job(self.store, id, wanted)

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get_job(job_id)

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        return self.store.get_occurrence(occurrence_id)

    def history(
        self, *, occurrence_id: str | None = None, job_id: str | None = None, limit: int = 50
    ) -> list[Event]:
        """Audit events, newest first."""
        return self.store.history(occurrence_id=occurrence_id, job_id=job_id, limit=limit)

    # -- enqueue -----------------------------------------------------------------------------

    def _instant(
        self,
        at: datetime | None,
        at_ms: int | None,
        delay: timedelta | None,
        delay_ms: int | None,
    ) -> int:
        given = [
            n
            for n, v in (("at", at), ("at_ms", at_ms), ("delay", delay), ("delay_ms", delay_ms))
            if v is not None
        ]
        if len(given) > 1:
            raise InvalidArgument(
                f"pass one of at, at_ms, delay, delay_ms (got {', '.join(given)})"
            )
        if at is not None:
            if not isinstance(at, datetime):
                raise InvalidArgument(
                    "at must be an aware datetime; pass at_ms=<epoch ms> for a number"
                )
            return epoch_ms_from(at, "at")
        if at_ms is not None:
            return contract.normalize_epoch_ms(at_ms, "at_ms")
        offset = choose_ms(delay, delay_ms, "delay", default_ms=0)
        assert offset is not None
        return self._now() + offset

    @staticmethod
    def _trigger_key(key: str | None) -> tuple[str, bool]:
        """The occurrence's trigger key and whether it is once-per-key (idempotent)."""
        if key is None:
            return f"enqueue:{uuid.uuid4().hex}", False
        text = contract.normalize_identifier(key, "key", max_length=MAX_KEY_LENGTH)
        return f"key:{text}", True

    def enqueue(
        self,
        job_id: str,
        *,
        payload: Any = UNSET,
        key: str | None = None,
        at: datetime | None = None,
        at_ms: int | None = None,
        delay: timedelta | None = None,
        delay_ms: int | None = None,
    ) -> Occurrence:
        """Enqueue a run of ``job_id``: now, at ``at`` (an aware datetime), or ``delay`` from now.

        Every call makes a new occurrence, unless ``key`` is given: an idempotency key (an order
        id, a request id) — the first call with a key makes the occurrence, every later call
        with the same key returns that same occurrence with ``deduplicated=True`` (and raises
        ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH`` if its payload differs). ``payload`` defaults
        to the job's. ``at_ms``/``delay_ms`` take epoch/duration milliseconds instead.
        """
        scheduled_for = self._instant(at, at_ms, delay, delay_ms)
        trigger_key, once = self._trigger_key(key)
        if once:
            [occurrence] = self.store.enqueue_batch(
                [
                    EnqueueRequest(
                        job_id=job_id,
                        scheduled_for=scheduled_for,
                        trigger_key=trigger_key,
                        payload=payload,
                        once_per_trigger=True,
                        match_payload=True,
                    )
                ]
            )
            return occurrence
        return self.store.enqueue_occurrence(
            job_id=job_id, scheduled_for=scheduled_for, trigger_key=trigger_key, payload=payload
        )

    def enqueue_many(
        self,
        job_id: str,
        payloads: Iterable[Any],
        *,
        keys: Sequence[str] | None = None,
        at: datetime | None = None,
        at_ms: int | None = None,
        delay: timedelta | None = None,
        delay_ms: int | None = None,
    ) -> list[Occurrence]:
        """Enqueue one occurrence per payload, all in one transaction (at most 10,000).

        The same rules as :meth:`enqueue` for each: a new occurrence per payload, or with
        ``keys`` (one per payload) the once-per-key rule. Pass ``jobledger.UNSET`` as a payload
        to use the job's own. Either every occurrence is written, or none.
        """
        if isinstance(payloads, (str, bytes, Mapping)) or not isinstance(payloads, Iterable):
            raise InvalidArgument(
                "payloads must be a list of payloads", details={"field": "payloads"}
            )
        items = list(payloads)
        if keys is not None and (not isinstance(keys, (list, tuple)) or len(keys) != len(items)):
            raise InvalidArgument("keys must have one key per payload", details={"field": "keys"})
        if len(items) > contract.MAX_ENQUEUE_BATCH:
            raise InvalidArgument(
                f"enqueue_many takes at most {contract.MAX_ENQUEUE_BATCH} payloads per call",
                details={"count": len(items), "limit": contract.MAX_ENQUEUE_BATCH},
            )
        scheduled_for = self._instant(at, at_ms, delay, delay_ms)
        requests: list[EnqueueRequest] = []
        for index, payload in enumerate(items):
            trigger_key, once = self._trigger_key(None if keys is None else keys[index])
            requests.append(
                EnqueueRequest(
                    job_id=job_id,
                    scheduled_for=scheduled_for,
                    trigger_key=trigger_key,
                    payload=payload,
                    once_per_trigger=once,
                    match_payload=once,
                )
            )
        return self.store.enqueue_batch(requests)

    def cancel(self, occurrence_id: str, *, reason: str, actor: str | None = None) -> Occurrence:
        """Cancel a queued, waiting or running occurrence (audited; see
        :meth:`Store.cancel_occurrence <jobledger.Store.cancel_occurrence>`)."""
        return self.store.cancel_occurrence(
            occurrence_id=occurrence_id, actor=actor or f"app:{self.name}", reason=reason
        )

    # -- schedules ---------------------------------------------------------------------------

    def schedule(
        self,
        job_id: str,
        kind: str,
        *,
        authority: dict[str, Any] | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> Job:
        """Declare a scheduled job (``cron``, ``every`` or ``at``: exactly one); idempotent.

        The options are :class:`~jobledger.planning.declare.ScheduleOptions` (``timezone``,
        ``anchor``, ``payload``, ``misfire``, ``misfire_grace``, ``catch_up_limit``, ``jitter``,
        ``nonexistent``, ``ambiguous``, ``max_attempts``, ``enabled``), as
        :func:`~jobledger.planning.declare.declare_schedule` takes them; ``authority`` defaults
        to :meth:`default_authority`. The same declaration again changes nothing; a changed one
        updates the job (CAS), and planning restarts from the edit (``docs/schedules.md``).
        """
        return declare_schedule(
            self.store,
            job_id,
            kind,
            authority=self.default_authority() if authority is None else authority,
            **options,
        )

    def plan(self) -> PlanReport:
        """One planner pass now (a worker runs them on its own schedule)."""
        from .planning.planner import Planner

        return Planner(self.store, clock=self.clock).tick()

    def explain(self, job_id: str, *, count: int = 5) -> Explanation:
        """When will ``job_id`` fire next, and why didn't it fire (``docs/schedules.md``)."""
        from .planning.explain import explain

        return explain(self.store, job_id, count=count)

    # -- running -----------------------------------------------------------------------------

    def runtime(
        self,
        *,
        owner_id: str | None = None,
        lease: timedelta | None = None,
        renew_interval: timedelta | None = None,
        heartbeat: HeartbeatDriver | None = None,
        watchdog: Watchdog | None = None,
        observer: Observer | None = None,
    ) -> Runtime:
        """A :class:`Runtime` with this app's handlers (``authorize`` must have been given)."""
        leases = LeaseOptions(DEFAULT_LEASE if lease is None else lease, renew_interval)
        runtime = Runtime(
            self.store,
            authorize=self.authorize,
            owner_id=owner_id,
            leases=leases,
            clock=self.clock,
            heartbeat=heartbeat,
            retry_policy=self.retry_policy,
            watchdog=watchdog,
            observer=observer,
        )
        for kind, (function, retry, timeout) in self._handlers.items():
            runtime.register_handler(kind, function, retry=retry, timeout=timeout)
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
        options: WorkerOptions | None = None,
        *,
        heartbeat: HeartbeatDriver | None = None,
        observer: Observer | None = None,
        **settings: Any,
    ) -> Worker:
        """A :class:`Worker` over a new :meth:`runtime` (not started).

        Settings are a :class:`~jobledger.WorkerOptions` or its fields as keywords
        (``app.worker(concurrency=4, prefetch=32)``). With ``metrics_port`` the worker serves
        Prometheus metrics (a :class:`~jobledger.metrics.PrometheusObserver` unless ``observer``
        is given) for as long as it runs.
        """
        base = options or WorkerOptions()
        resolved = base.with_changes(**settings) if settings else base
        services: list[Service] = []
        if resolved.metrics_port is not None:
            metrics = _metrics_module()
            if observer is None:
                observer = metrics.PrometheusObserver()
            services.append(
                metrics.MetricsService(
                    self.store,
                    host=resolved.metrics_host,
                    port=resolved.metrics_port,
                    observer=observer if isinstance(observer, metrics.PrometheusObserver) else None,
                )
            )
        runtime = self.runtime(
            owner_id=resolved.owner_id,
            lease=resolved.lease,
            renew_interval=resolved.renew_interval,
            heartbeat=heartbeat,
            observer=observer,
        )
        return Worker(
            runtime, resolved.with_changes(owner_id=runtime.owner_id), services=services
        )

    def run_worker(
        self,
        options: WorkerOptions | None = None,
        *,
        install_signal_handlers: bool = True,
        observer: Observer | None = None,
        **settings: Any,
    ) -> WorkerSummary:
        """Run a worker in this thread until SIGTERM/SIGINT (or ``worker.stop()``)."""
        worker = self.worker(options, observer=observer, **settings)
        return worker.run(install_signal_handlers=install_signal_handlers)


def _metrics_module() -> ModuleType:
    """:mod:`jobledger.metrics`, or a coded error when its extra is not installed (for
    ``metrics_port``)."""
    try:
        from . import metrics
    except ImportError as exc:
        raise InvalidArgument(
            "metrics_port needs prometheus-client: pip install 'jobledger[metrics]'",
            details={"field": "metrics_port"},
        ) from exc
    return metrics
