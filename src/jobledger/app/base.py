"""The App's foundation: its store, handlers and defaults (the other parts build on it)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .. import contract
from ..clock import Clock
from ..engine.handlers import Authorizer, Handler
from ..engine.isolation import ProcessHandler, normalize_isolation
from ..engine.retry import DEFAULT_BACKOFF, BackoffPolicy
from ..engine.runtime import Runtime
from ..errors import InvalidArgument
from ..store import Store, abandon_after_fork, open_store, reset_after_fork
from .tracing import TracingGate

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


__all__ = ["MAX_KEY_LENGTH", "AppBase", "H"]

H = TypeVar("H", bound=Handler)
# Idempotency keys become trigger keys "key:<key>"; the identifier limit is 256.
MAX_KEY_LENGTH = 200


class AppBase:
    """What every part of :class:`~jobledger.App` shares: the store (opened on first use), the
    handlers registered with :meth:`handler`, and the defaults they imply."""

    def __init__(
        self,
        target: str | Path | Store,
        *,
        name: str = "jobledger",
        clock: Clock | None = None,
        authorize: Authorizer | None = None,
        retry_policy: BackoffPolicy = DEFAULT_BACKOFF,
        store_options: Mapping[str, Any] | None = None,
        shared_file: bool = False,
        tracing: bool | TracerProvider = True,
    ) -> None:
        given_store = isinstance(target, Store)
        if shared_file is not False and (given_store or type(shared_file) is not bool):
            raise InvalidArgument(
                "shared_file=True applies when App opens a SQLite file from a path; pass it to "
                "open_store for a store you open yourself",
                details={"field": "shared_file"},
            )
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
        if shared_file:
            # SPEC §8: the app's own tables may live in the store's SQLite file (open_store
            # refuses it for PostgreSQL, as any SQLite-only option).
            self._store_options["shared_file"] = True
        self._store: Store | None = target if isinstance(target, Store) else None
        self._owns_store = self._store is None
        self._lock = threading.Lock()
        self._handlers: dict[str, tuple[Handler, BackoffPolicy | None, timedelta | None]] = {}
        # What becomes of a lost lease, per kind (SPEC §9): the default of the jobs this app
        # declares for the kind.
        self._lost_lease_policies: dict[str, str] = {}
        self._runtimes: list[Runtime] = []
        # OpenTelemetry spans for enqueues and attempts (docs/observability.md).
        self._tracing = TracingGate(tracing)
        reset_after_fork(self)  # its _after_fork_in_child runs in a forked child

    def _after_fork_in_child(self) -> None:
        """In a forked child (gunicorn ``--preload``): a new lock (a parent thread may have held
        it), and none of the parent's runtimes — their threads are gone, and closing them here
        would give back leases the parent's worker holds (the store resets itself)."""
        self._lock = threading.Lock()
        abandon_after_fork(*self._runtimes)
        self._runtimes = []

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

    def __enter__(self) -> Self:
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
        on_lost_lease: str = "retry",
        isolation: str = "thread",
    ) -> Callable[[H], H]:
        """Decorator: handle jobs of ``kind`` with the decorated function (sync or async).

        ``retry`` is the kind's backoff policy; ``timeout`` its time limit per attempt (past it
        the attempt fails as a retryable ``SCHEDULER_RUNTIME_TIMEOUT``). ``on_lost_lease``:
        ``"retry"`` runs an attempt whose worker was lost again; ``"adjudicate"`` makes it an
        outcome-unknown dead letter waiting for an operator's decision (SPEC §9) — the default
        for the jobs this app declares for the kind (``Job.on_lost_lease``). ``isolation``:
        ``"thread"`` runs the handler in the worker's process (on its slot's thread);
        ``"process"`` runs each attempt in a child process that is killed at the time limit (or
        when the lease is lost), so a handler that ignores cancellation cannot keep a slot; it
        must be a module-level function, gets an
        :class:`~jobledger.engine.isolation.IsolatedContext` (snapshots, no store) and returns
        JSON (``docs/runtime.md``).
        """
        key = Runtime.normalize_kind(kind)  # a bad kind fails when the decorator is made
        Runtime.check_timeout(timeout)
        policy = contract.normalize_lost_lease_policy(on_lost_lease)
        mode = normalize_isolation(isolation)

        def register(function: H) -> H:
            Runtime.check_handler(key, function, self._handlers)
            handler: Handler = ProcessHandler(key, function) if mode == "process" else function
            self._handlers[key] = (handler, retry, timeout)
            self._lost_lease_policies[key] = policy
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

    def lost_lease_policy(self, kind: str, given: str | None = None) -> str:
        """``given``, else the policy of this app's handler for ``kind``, else ``"retry"``."""
        if given is not None:
            return contract.normalize_lost_lease_policy(given)
        if not isinstance(kind, str):
            return "retry"  # not a kind: the store refuses it, with its coded error
        return self._lost_lease_policies.get(kind, "retry")
