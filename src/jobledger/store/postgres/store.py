"""The PostgreSQL store: the same semantics as SQLite for many workers on many machines.

Open it with :func:`jobledger.open_store` and a ``postgresql://`` URL. Differences from SQLite
are operational, never semantic:

* Instants come from the **database clock** unless a clock is injected, so the lease a worker
  on one machine takes and the expiry check a worker on another machine makes use the same
  clock; node clock skew cannot let two owners hold one occurrence.
* Claims lock their candidate with ``FOR UPDATE SKIP LOCKED``, so concurrent workers each take a
  different row instead of queueing behind one.
* Enqueues send ``NOTIFY`` with their commit; with ``listen=True`` a listener thread bumps
  :attr:`work_signal` for work enqueued by any process. It starts when something first waits
  on the signal (a worker with nothing to do), so a process that only enqueues never runs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg

from ...clock import Clock
from ...contract import normalize_identifier, scalar_text
from ...durations import ms_from_timedelta
from ...errors import InvalidArgument, SchedulerError, StorageUnavailable
from ...models import UNSET, Occurrence, SchemaInfo, VerifyReport
from .. import common, forks, inputs
from ..base import OwnerLockHandle
from ..caller import CallerLink
from ..ledger import LedgerStore, Row, Tx, validate_clock_reading
from ..migrations import SchemaOutcome
from ..operations.firings import (
    enqueued_event_data,
    firing_of,
    insert_params,
    new_occurrence,
)
from ..settle_signal import SettleSignal, encode_ids
from . import caller as caller_module
from . import schema as schema_module
from .connection import (
    PgConnection,
    PostgresPool,
    connection_kwargs,
    open_failure,
    redact_url,
    validate_schema_name,
)
from .listener import NotificationListener
from .liveness import (
    LIVENESS_CONFIRM,
    AdvisoryOwnerLock,
    FreeSample,
    liveness_key,
    sample_free,
)
from .tx import FAST_PATHS, LOCKS, QUERIES
from .tx import PostgresTx as _PostgresTx

__all__ = ["DEFAULT_SCHEMA", "QUERIES", "PostgresStore"]

T = TypeVar("T")
DEFAULT_SCHEMA = "jobledger"
_URL_PREFIXES = ("postgresql://", "postgres://")
# How long a reading of the database clock is carried forward locally (see PostgresStore.now).
CLOCK_RESYNC_S = 5.0


def _option_int(value: object, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer between {low} and {high}")
    return value


def _option_seconds(value: object, name: str) -> float:
    if type(value) not in (int, float) or not 0 < float(value) <= 3600:  # type: ignore[arg-type]
        raise InvalidArgument(f"{name} must be a number of seconds between 0 and 3600")
    return float(value)  # type: ignore[arg-type]


class PostgresStore(LedgerStore):
    """A :class:`~jobledger.store.base.Store` on a PostgreSQL schema shared by many processes."""

    def __init__(
        self,
        *,
        pool: PostgresPool,
        clock: Clock | None,
        target: str,
        schema: str,
        listener: NotificationListener | None,
        conninfo: str = "",
        connect_timeout: int = 10,
        schema_outcome: SchemaOutcome | None = None,
    ) -> None:
        self._pool = pool
        self._clock = clock
        self._target = target
        self.schema = schema
        self.channel = pool.channel
        # "jobledger_done_" has the length of "jobledger_work_", so the name fits as well.
        self.done_channel = "jobledger_done_" + pool.channel.removeprefix("jobledger_work_")
        self.listener = listener
        self.done_listener: NotificationListener | None = None
        # What this open did to the schema (created, upgraded, or found it done by another).
        self.schema_outcome = schema_outcome
        self._conninfo = conninfo
        self._connect_timeout = connect_timeout
        self._clock_lock = threading.Lock()
        self._clock_base: tuple[int, float] | None = None  # (database ms, local monotonic s)
        # owner id -> when its liveness lock was first seen free, and its generation then
        self._liveness_lock = threading.Lock()
        self._free_since: dict[str, FreeSample] = {}
        self._liveness_confirm_ms = ms_from_timedelta(LIVENESS_CONFIRM, "LIVENESS_CONFIRM")
        self._one_statement_enqueue = FAST_PATHS["enqueue_in_one_statement"].replace(
            "{schema}", schema
        )
        forks.register(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: never a connection of the parent's (forks.py). The pool and the
        LISTEN connections are disowned and replaced by ones this process opens on first use;
        signals and locks are new (their waiters and holders were the parent's threads)."""
        self._pool.after_fork_in_child()
        for listener in (self.listener, self.done_listener):
            if listener is not None:
                listener.disown_in_child()
        self._clock_lock = threading.Lock()
        self._liveness_lock = threading.Lock()
        self._free_since = {}
        self._work_signal = None
        self._settle_signal = None
        self.done_listener = None
        if self.listener is not None:
            listener = NotificationListener(
                self._conninfo,
                channel=self.channel,
                signal=self.work_signal,
                connect_timeout=self._connect_timeout,
            )
            self.work_signal.feed_from(listener.start)
            self.listener = listener

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        migrate: bool = True,
        schema: str = DEFAULT_SCHEMA,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        pool_timeout: float = 30.0,
        listen: bool = True,
        connect_timeout: int = 10,
        prepare_threshold: int | None = 5,
    ) -> PostgresStore:
        """Connect, verify (creating or upgrading unless ``migrate=False``) and return a store.

        ``clock``: ``None`` (the default) reads every instant from the database clock; a
        callable returning epoch ms overrides it (tests). ``schema``: where jobledger's tables
        live. ``pool_min_size``/``pool_max_size``: connections kept open / allowed — one per
        concurrent store call. ``pool_timeout``: seconds a call waits for a free connection.
        ``listen``: run a LISTEN thread on one extra connection once something waits for work
        (turn off behind PgBouncer in transaction mode). ``connect_timeout``: seconds per
        connection attempt.
        ``prepare_threshold``: psycopg's automatic server-side prepared statements (``None``
        turns them off, for PgBouncer before 1.21).
        """
        if not isinstance(url, str) or not url.startswith(_URL_PREFIXES):
            raise InvalidArgument("PostgreSQL target must be a postgresql:// URL")
        if clock is not None and not callable(clock):
            raise InvalidArgument("clock must be a function")
        if type(migrate) is not bool:
            raise InvalidArgument("migrate must be a boolean")
        if type(listen) is not bool:
            raise InvalidArgument("listen must be a boolean")
        name = validate_schema_name(schema)
        min_size = _option_int(pool_min_size, "pool_min_size", 0, 1000)
        max_size = _option_int(pool_max_size, "pool_max_size", 1, 1000)
        if max_size < max(min_size, 1):
            raise InvalidArgument("pool_max_size must be at least pool_min_size and 1")
        timeout = _option_seconds(pool_timeout, "pool_timeout")
        connect = _option_int(connect_timeout, "connect_timeout", 1, 3600)
        if prepare_threshold is not None:
            _option_int(prepare_threshold, "prepare_threshold", 0, 1_000_000)
        scalar_text(url, "PostgreSQL URL")  # libpq takes UTF-8: refuse before parsing
        target = redact_url(url)
        try:
            psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error:
            raise InvalidArgument(f"not a valid PostgreSQL URL: {target}") from None
        if clock is not None:
            validate_clock_reading(clock())

        channel = f"jobledger_work_{name}"
        pool: PostgresPool | None = None
        listener: NotificationListener | None = None
        try:
            with psycopg.Connection[Any].connect(
                url, **connection_kwargs(connect_timeout=connect, prepare_threshold=None)
            ) as conn:
                outcome = schema_module.ensure_schema(
                    conn, schema=name, clock=clock, migrate=migrate
                )
            pool = PostgresPool(
                url,
                schema=name,
                channel=channel,
                min_size=min_size,
                max_size=max_size,
                pool_timeout=timeout,
                connect_timeout=connect,
                prepare_threshold=prepare_threshold,
            )
            store = cls(
                pool=pool,
                clock=clock,
                target=target,
                schema=name,
                listener=None,
                conninfo=url,
                connect_timeout=connect,
                schema_outcome=outcome,
            )
            if listen:
                listener = NotificationListener(
                    url, channel=channel, signal=store.work_signal, connect_timeout=connect
                )
                # Started by the first wait for work (a worker), not here: a process that
                # only enqueues would otherwise wake for its own NOTIFYs.
                store.work_signal.feed_from(listener.start)
                store.listener = listener
        except BaseException as exc:
            if listener is not None:
                listener.stop()
            if pool is not None:
                pool.close()
            if isinstance(exc, SchedulerError):
                raise
            mapped = open_failure(exc, url)
            if mapped is None:
                raise
            raise mapped from exc
        return store

    # -- engine hooks ---------------------------------------------------------------------

    def _assert_open(self) -> None:
        self._pool.assert_open()

    def _write(self, body: Callable[[Tx], T]) -> T:
        woke: list[bool] = []

        def transaction(conn: PgConnection, db_now: int) -> tuple[T, bool]:
            tx = _PostgresTx(conn, self._clock, db_now)
            woke.clear()  # a retried transaction starts over
            result = body(tx)
            if tx.settled:  # delivered with the COMMIT, and only if it commits
                conn.execute(
                    "SELECT pg_notify(%(channel)s, %(ids)s)",
                    {"channel": self.done_channel, "ids": encode_ids(tx.settled)},
                )
            woke.append(tx.wakes)
            return result, tx.wakes

        result = self._pool.transaction(transaction)
        if any(woke):
            # This process's idle workers at once (the NOTIFY reaches the others, and this
            # process's listener too, a round trip later).
            self.work_signal.notify()
        return result

    def _read(self, body: Callable[[Tx], T]) -> T:
        def transaction(conn: PgConnection, db_now: int) -> tuple[T, bool]:
            return body(_PostgresTx(conn, self._clock, db_now)), False

        return self._pool.transaction(transaction, read_only=True)

    def _in_caller_transaction(
        self,
        link: CallerLink,
        body: Callable[[Tx], T],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> T:
        if link.dialect != "postgres":
            raise caller_module.another_store(link.driver, "this store is PostgreSQL")
        return caller_module.run_in_caller_transaction(
            link,
            schema=self.schema,
            channel=self.channel,
            store_id=self._own_store_id(),
            clock=self._clock,
            make_tx=_PostgresTx,
            body=body,
            loop=loop,
        )

    def _take_locks(self, tx: Tx, *, shared: Sequence[str], exclusive: Sequence[str]) -> None:
        """Transaction-scoped advisory locks on lock names (hashed with the schema, since
        advisory keys are database-wide), shared ones first then exclusive ones, each group in
        the order given: the callers take queues before owners before partitions, each sorted,
        so transactions never wait on each other in a cycle (docs/postgres.md)."""
        assert isinstance(tx, _PostgresTx)
        if shared:
            tx.lock(LOCKS["lock_keys_shared"], [self._lock_key(name) for name in shared])
        if exclusive:
            tx.lock(LOCKS["lock_keys"], [self._lock_key(name) for name in exclusive])
            tx.catch_up_clock(LOCKS["clock_after_locks"])

    def _lock_key(self, name: str) -> int:
        digest = hashlib.sha256(f"jobledger:{self.schema}:{name}".encode()).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    def _probe_ready(
        self,
        tx: Tx,
        *,
        now: int,
        lanes: Sequence[tuple[str, str, int]],
        workspace: str | None,
    ) -> list[Row]:
        # Every lane in one statement: a LATERAL probe per (queue, kind), locked with SKIP
        # LOCKED, merged in claim order.
        params: dict[str, Any] = {
            "queues": [queue for queue, _, _ in lanes],
            "kinds": [kind for _, kind, _ in lanes],
            "rooms": [room for _, _, room in lanes],
            "now": now,
        }
        if workspace is None:
            return tx.all("ready_probe", params)
        return tx.all("ready_probe_in_workspace", {**params, "workspace_id": workspace})

    # -- owner liveness ---------------------------------------------------------------------

    def hold_owner_lock(self, owner_id: str) -> OwnerLockHandle:
        """Hold a session advisory lock on a connection of its own (see ``liveness.py``)."""
        owner = normalize_identifier(owner_id, "ownerId")
        self._assert_open()
        try:
            return AdvisoryOwnerLock(
                self._conninfo,
                schema=self.schema,
                owner_id=owner,
                connect_timeout=self._connect_timeout,
                clock=self._clock,
            )
        except (psycopg.Error, RuntimeError) as exc:
            raise common.liveness_lock_unavailable(exc) from None

    def owner_gone(self, owner_id: str) -> bool:
        owner = normalize_identifier(owner_id, "ownerId")
        self._assert_open()
        key = liveness_key(self.schema, owner)
        # A write (READ COMMITTED) transaction, though it writes nothing: the generation must be
        # read after the lock was taken, not from a snapshot taken before it.
        generation, now = self._pool.transaction(
            lambda conn, db_now: (
                (sample_free(conn, owner, key), db_now if self._clock is None else self._clock()),
                False,
            ),
        )
        # Free once is not gone yet: a live worker whose session ended takes its lock back
        # within LIVENESS_REFRESH (see liveness.py). Gone = free at two samples CONFIRM apart
        # with the same generation: nobody took the lock in between.
        with self._liveness_lock:
            if generation is None:
                self._free_since.pop(owner, None)
                return False
            seen = FreeSample(now, generation)
            first = self._free_since.setdefault(owner, seen)
            if first.generation != generation:
                # Taken back (and lost again) since the first sample: it lives. Start over.
                self._free_since[owner] = seen
                return False
            if not first.confirms(seen, self._liveness_confirm_ms):
                return False
            del self._free_since[owner]
            return True

    def verify(self) -> VerifyReport:
        """The schema catalog, every stored authority and every occurrence's
        ``occurrence_enqueued`` event (PostgreSQL enforces the rest)."""
        self._assert_open()

        def transaction(conn: PgConnection, db_now: int) -> tuple[VerifyReport, bool]:
            report = schema_module.verify_database(conn, self.schema)
            tx = _PostgresTx(conn, self._clock, db_now)
            return self._with_enqueue_events(report, tx, ()), False

        return self._pool.transaction(transaction, read_only=True)

    # -- the database clock, without a round trip per reading -------------------------------

    def now(self) -> int:
        """The store's current instant: the injected clock, else the database clock.

        Reading the database clock costs a round trip, and callers such as ``App.enqueue`` ask
        for it on every call; so the reading is taken at most every ``CLOCK_RESYNC_S`` seconds
        and carried forward on this machine's monotonic clock in between (it drifts by
        microseconds per second, and a resync corrects it). Leases and due times are still
        decided inside each transaction with the database clock itself; this value only places
        new work (``scheduled_for``, a retry's instant) on the database's time line.
        """
        self._assert_open()
        if self._clock is not None:
            return validate_clock_reading(self._clock())
        with self._clock_lock:
            base = self._clock_base
            elapsed = time.monotonic() - base[1] if base is not None else None
            if base is not None and elapsed is not None and elapsed < CLOCK_RESYNC_S:
                return base[0] + int(elapsed * 1000)
        reading = self._read(lambda tx: tx.now())
        with self._clock_lock:
            self._clock_base = (reading, time.monotonic())
        return reading

    # -- the one-round-trip enqueue ----------------------------------------------------------

    def enqueue_occurrence(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
        trace_context: Mapping[str, str] | None = None,
    ) -> Occurrence:
        """As :meth:`Store.enqueue_occurrence`; when the job's revision is known (it was used
        before by this store), a new firing costs one round trip (``enqueue_in_one_statement``);
        anything else takes the general transaction."""
        request = inputs.normalize_enqueue(
            job_id,
            scheduled_for,
            trigger_key,
            available_at,
            payload,
            once_per_trigger=False,
            queue=queue,
            priority=priority,
            partition=partition,
            trace_context=trace_context,
        )
        meta = self._cached_job(request.job_id)
        if meta is not None and meta.enabled:
            firing = firing_of(request, meta)
            try:
                found = self._pool.statement(
                    self._one_statement_enqueue,
                    {
                        **insert_params(firing, None if self._clock is None else self._clock()),
                        "data_json": enqueued_event_data(firing),
                        "channel": self.channel,
                    },
                )
            except StorageUnavailable:
                # The outcome may be unknown; the general path below is idempotent and reads
                # back whatever committed.
                found = []
            if found:
                self.work_signal.notify()
                return new_occurrence(firing, int(found[0]["created_at"]))
        return self._enqueue_requests([request])[0]

    def schema_info(self) -> SchemaInfo:
        self._assert_open()
        return self._pool.transaction(
            lambda conn, _now: (schema_module.read_schema_info(conn), False), read_only=True
        )

    @property
    def settle_signal(self) -> SettleSignal:
        """As on every store; with ``listen=True`` settles in other processes wake waiters too
        (a second LISTEN connection, on the ``done`` channel, opened by the first wait)."""
        with self._clock_lock:  # one signal, one listener, whichever thread asks first
            return self._make_settle_signal()

    def _make_settle_signal(self) -> SettleSignal:
        if self._settle_signal is None:
            signal = self._settle_signal = SettleSignal()
            if self.listener is not None:
                listener = NotificationListener(
                    self._conninfo,
                    channel=self.done_channel,
                    signal=signal,
                    connect_timeout=self._connect_timeout,
                    on_payload=signal.notify_payload,
                )
                self.done_listener = listener
                signal.feed_from(listener.start)
        return self._settle_signal

    def close(self) -> None:
        if self.listener is not None:
            self.listener.stop()
        if self.done_listener is not None:
            self.done_listener.stop()
        self._pool.close()

    @property
    def closed(self) -> bool:
        return self._pool.closed

    def pool_stats(self) -> dict[str, int]:
        """psycopg_pool's counters (connections open, in use, waiting, …) for monitoring."""
        return self._pool.stats()

    def __enter__(self) -> PostgresStore:
        return self

    def __repr__(self) -> str:
        return f"PostgresStore({self._target!r}, schema={self.schema!r})"
