"""PostgreSQL connection discipline: the pool, one transaction per operation, and error mapping.

This module is the single boundary where psycopg exceptions become jobledger errors
(:func:`storage_failure`). Every operation runs in its own transaction on a pooled connection:

* The transaction opens with one round trip that sends ``BEGIN``, ``SET LOCAL search_path`` and
  reads the database clock, so nothing depends on session state (PgBouncer's transaction mode
  hands each transaction to whichever server connection is free).
* Writes run in READ COMMITTED: claims lock their candidate row (``FOR UPDATE SKIP LOCKED``) and
  every state change is a guarded ``UPDATE … WHERE <expected state>``, so a concurrent writer
  can only make a guard miss, never corrupt a row.
* A serialization failure, deadlock or unique-key race aborts the transaction; because the
  whole body runs inside it, running the body again from the start is safe, and it is retried a
  few times before ``SCHEDULER_STORAGE_UNAVAILABLE`` (retryable) is raised.
* A lost connection rolls back on the server. Before ``COMMIT`` is sent the failure is reported
  as ``commitState: "not_committed"``; during ``COMMIT`` as ``"unknown"``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import psycopg
import psycopg_pool
from psycopg import pq
from psycopg.rows import DictRow, dict_row

from ...errors import (
    DataCorrupt,
    SchedulerError,
    StorageUnavailable,
    StoreClosed,
    StoreMisconfigured,
)
from .. import forks
from .names import redact_url, validate_schema_name

__all__ = [
    "PgConnection",
    "PostgresPool",
    "open_failure",
    "redact_url",
    "storage_failure",
    "validate_schema_name",
]

T = TypeVar("T")
PgConnection = psycopg.Connection[DictRow]

# The body of a write is run at most this many times when the server aborts it for a
# serialization failure, a deadlock or a unique-key race with a concurrent transaction.
TRANSACTION_ATTEMPTS = 4
_CONFLICT_STATES = frozenset({"40001", "40P01", "23505"})
# Failures that waiting and retrying will not cure: disk full, out of memory, I/O error, data
# corruption, a read-only server (a standby), missing privileges.
_PERMANENT_STATES = frozenset({"53100", "53200", "58030", "XX001", "XX002", "25006", "42501"})
_CLOCK_SQL = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms"


def _sqlstate(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else None


def is_conflict(exc: BaseException) -> bool:
    """A transient conflict with another transaction: the body may be run again."""
    return _sqlstate(exc) in _CONFLICT_STATES


def _connection_lost(exc: BaseException, conn: PgConnection | None) -> bool:
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return False
    state = _sqlstate(exc)
    if state is not None and (state.startswith("08") or state in ("57P01", "57P02", "57P03")):
        return True
    if conn is not None and (conn.closed or conn.pgconn.status == pq.ConnStatus.BAD):
        return True
    # A driver-side failure without a SQLSTATE (a protocol desynchronisation, e.g. a connection
    # used from two processes after os.fork()) leaves the connection unusable: discard it.
    return isinstance(exc, psycopg.DatabaseError | psycopg.InterfaceError) and state is None


def storage_failure(exc: BaseException, *, phase: str, commit_state: str) -> SchedulerError | None:
    """Translate a psycopg failure into a jobledger error, or ``None`` if it is not one.

    ``details`` carries ``phase`` (open/read/write), ``storageCode`` (the SQLSTATE, or the
    exception class when the connection failed without one), ``commitState`` and ``retryable``.
    Server messages are not copied into the jobledger message; the psycopg exception is kept
    as ``__cause__`` (it never contains the connection password).
    """
    if not isinstance(exc, psycopg.Error):
        return None
    state = _sqlstate(exc)
    code = state or type(exc).__name__
    error: SchedulerError
    if isinstance(exc, psycopg_pool.PoolTimeout):
        error = StorageUnavailable.during(
            "No PostgreSQL connection became free in time; raise pool_max_size or pool_timeout",
            phase=phase,
            storage_code="POOL_TIMEOUT",
            commit_state=commit_state,
            retryable=True,
        )
    elif is_conflict(exc):
        error = StorageUnavailable.during(
            "PostgreSQL kept aborting the transaction for conflicts with concurrent writers",
            phase=phase,
            storage_code=code,
            commit_state=commit_state,
            retryable=True,
        )
    elif (
        isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        or state in _PERMANENT_STATES
        # No SQLSTATE: the server never judged the data; the driver failed (a protocol
        # error). That is a storage outage on a discarded connection, never data corruption.
        or state is None
    ):
        retryable = state not in _PERMANENT_STATES
        error = StorageUnavailable.during(
            "Scheduler storage is unavailable (PostgreSQL connection lost or server refused)"
            if retryable
            else "Scheduler storage is unavailable (PostgreSQL cannot store the change)",
            phase=phase,
            storage_code=code,
            commit_state=commit_state,
            retryable=retryable,
        )
    elif isinstance(exc, psycopg.DatabaseError):
        error = DataCorrupt(
            "PostgreSQL rejected the operation; the schema or its contents are not what "
            "jobledger wrote",
            details={"phase": phase, "storageCode": code, "commitState": commit_state},
        )
    else:
        error = StorageUnavailable.during(
            "Scheduler storage is unavailable",
            phase=phase,
            storage_code=code,
            commit_state=commit_state,
            retryable=False,
        )
    error.__cause__ = exc
    return error


# -- why a connection could not be made -------------------------------------------------------
#
# libpq reports a failed connection without a SQLSTATE (psycopg's OperationalError carries none),
# so the server's reason is read from its message; a SQLSTATE is used where there is one. Only
# reasons that waiting cannot cure are misconfigurations; everything else (a timeout, "the
# database system is starting up", too many clients, a connection lost later) stays
# SCHEDULER_STORAGE_UNAVAILABLE, which callers may retry.

_MISCONFIGURED_STATES = {
    "3D000": "no_such_database",  # invalid_catalog_name
    "28P01": "authentication_failed",  # invalid_password
    "28000": "authentication_failed",  # invalid_authorization_specification (pg_hba, no login)
}
_MISCONFIGURED_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r'database "[^"]*" does not exist'), "no_such_database"),
    (re.compile(r'role "[^"]*" does not exist'), "no_such_role"),
    (
        re.compile(
            r"authentication failed|no password supplied|no pg_hba\.conf entry"
            r"|is not permitted to log in|password is required"
        ),
        "authentication_failed",
    ),
    (
        re.compile(r"Connection refused|\.s\.PGSQL\.\d+\S* failed: No such file"),
        "server_not_listening",
    ),
    (re.compile(r"server does not support SSL"), "ssl_not_supported"),
    (
        re.compile(
            r"failed to resolve host|could not translate host name|Name or service not known"
        ),
        "unknown_host",
    ),
)


# Reasons that may just as well be an outage: nothing listens at the address (a server that is
# down or restarting refuses connections exactly as a wrong port does).
_MAYBE_AN_OUTAGE = frozenset({"server_not_listening"})


def _connection_problem(exc: BaseException) -> str | None:
    """Which misconfiguration made this connection attempt fail, or ``None``."""
    state = _sqlstate(exc)
    if state is not None:
        return _MISCONFIGURED_STATES.get(state)
    if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, psycopg_pool.PoolTimeout):
        return None
    text = str(exc)
    for pattern, problem in _MISCONFIGURED_MESSAGES:
        if pattern.search(text):
            return problem
    return None


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) and value else None


def _where(exc: BaseException, url: str) -> dict[str, str]:
    """Host, port, database and user of the attempt — never the password. libpq's own record
    of the attempt (defaults and environment applied) first, else what the URL says."""
    pgconn = getattr(exc, "pgconn", None)
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        given = {}
    facts = {}
    for key, attribute, option in (
        ("host", "host", "host"),
        ("port", "port", "port"),
        ("database", "db", "dbname"),
        ("user", "user", "user"),
    ):
        value = _text(getattr(pgconn, attribute, None)) or _text(given.get(option))
        if value is not None:
            facts[key] = value
    return facts


def _misconfigured_message(problem: str, facts: dict[str, str]) -> str:
    host = facts.get("host", "localhost")
    server = f"{host}:{facts['port']}" if "port" in facts else host
    database, user = facts.get("database", "?"), facts.get("user", "?")
    if problem == "no_such_database":
        return (
            f'PostgreSQL at {server} has no database "{database}": fix the database name in '
            f"the URL, or create it (CREATE DATABASE)"
        )
    if problem == "no_such_role":
        return (
            f'PostgreSQL at {server} has no role "{user}": fix the user name in the URL, or '
            "create the role (CREATE ROLE … LOGIN)"
        )
    if problem == "authentication_failed":
        return (
            f'PostgreSQL at {server} refused to authenticate role "{user}": check the user and '
            "password (URL, ~/.pgpass or $PGPASSWORD) and the server's pg_hba.conf"
        )
    if problem == "server_not_listening":
        return (
            f"Nothing accepts PostgreSQL connections at {server}: check the host and port in "
            "the URL, and that the server is running there"
        )
    if problem == "ssl_not_supported":
        return (
            f"PostgreSQL at {server} does not support SSL, which the URL requires: change "
            "sslmode in the URL, or enable SSL on the server"
        )
    return f'PostgreSQL host "{host}" is unknown: check the host name in the URL'


def open_failure(exc: BaseException, url: str) -> SchedulerError | None:
    """What a failure to open the store at ``url`` becomes: ``SCHEDULER_STORE_MISCONFIGURED``
    when the URL or the server's set-up is wrong (see :func:`_connection_problem`), else as
    :func:`storage_failure` maps it. The message and details name the host, port, database and
    user, and the URL with its password redacted; the psycopg exception stays the cause."""
    problem = _connection_problem(exc)
    if problem is None:
        return storage_failure(exc, phase="open", commit_state="not_committed")
    facts = _where(exc, url)
    if problem in _MAYBE_AN_OUTAGE:
        # A refused connection is a wrong host or port, or a server that is down or restarting:
        # the two cannot be told apart from here, so it stays retryable, and says both.
        outage = storage_failure(exc, phase="open", commit_state="not_committed")
        error: SchedulerError = StorageUnavailable(
            _misconfigured_message(problem, facts) + " (if it is restarting, repeat when it is up)",
            details={
                **((outage.details or {}) if outage is not None else {}),
                "problem": problem,
                "target": redact_url(url),
                **facts,
            },
        )
        error.__cause__ = exc
        return error
    error = StoreMisconfigured(
        _misconfigured_message(problem, facts),
        details={
            "problem": problem,
            "target": redact_url(url),
            **facts,
            "phase": "open",
            "retryable": False,
        },
    )
    error.__cause__ = exc
    return error


class _Retry(Exception):
    def __init__(self, cause: psycopg.Error, *, stale: bool) -> None:
        super().__init__("retry")
        self.cause = cause
        self.stale = stale


def connection_kwargs(*, connect_timeout: int, prepare_threshold: int | None) -> dict[str, Any]:
    return {
        "autocommit": True,  # transactions are explicit: BEGIN … COMMIT sent by PostgresPool
        "row_factory": dict_row,
        "connect_timeout": connect_timeout,
        "prepare_threshold": prepare_threshold,
        "application_name": "jobledger",
    }


# No user code ever runs inside a jobledger transaction, so one that sits idle this long belongs
# to a frozen or partitioned client; the server ends it and releases its row locks.
IDLE_IN_TRANSACTION_TIMEOUT = "60s"


# How the pool's write transactions plan (see begin_sql).
WRITE_PLANNER_SETTINGS: Final = ("enable_bitmapscan = off", "enable_seqscan = off")


def begin_sql(schema: str, *, read_only: bool, planner: tuple[str, ...] = ()) -> str:
    """One round trip: open the transaction, scope its settings to it, read the database clock.

    ``planner`` settings are scoped to the transaction too. The store's write transactions pass
    :data:`WRITE_PLANNER_SETTINGS`: every query they run is an ordered index probe with a LIMIT
    (or a look-up by key), and without statistics — a never-analysed table after a bulk load is
    normal — the planner would otherwise read every expired lease through a bitmap, or the whole
    table, and sort them to take the first few. Both stay possible where no index applies
    (the settings only make them the last resort); the store's read transactions take them too
    (operators' pages and capped counts are index ranges as well); migrations, which read whole
    tables, do not take them.
    """
    mode = "ISOLATION LEVEL REPEATABLE READ, READ ONLY" if read_only else "READ WRITE"
    settings = "".join(f"SET LOCAL {setting}; " for setting in planner)
    return (
        f'BEGIN {mode}; SET LOCAL search_path TO "{schema}"; '
        f"SET LOCAL idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT}'; "
        f"{settings}SELECT {_CLOCK_SQL}"
    )


def execute_begin(conn: PgConnection, sql: str) -> int:
    cursor = conn.execute(sql)
    while cursor.nextset():
        pass
    row = cursor.fetchone()
    assert row is not None
    return int(row["now_ms"])


def rollback_quietly(conn: PgConnection) -> bool:
    """Roll back; True when the connection is verifiably idle (outside a transaction) after."""
    try:
        if conn.closed or conn.pgconn.status == pq.ConnStatus.BAD:
            return False
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error:
        return False
    return conn.info.transaction_status == pq.TransactionStatus.IDLE


class PostgresPool:
    """A psycopg connection pool that runs one function per transaction.

    ``transaction(body)`` calls ``body(conn, db_now_ms)`` inside an open transaction and returns
    ``(result, notify)`` from it: when ``notify`` is true, ``NOTIFY <channel>`` is sent with the
    ``COMMIT`` so listeners wake only for work that actually committed.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        channel: str,
        min_size: int,
        max_size: int,
        pool_timeout: float,
        connect_timeout: int,
        prepare_threshold: int | None,
    ) -> None:
        self.schema = schema
        self.channel = channel
        self._pool_timeout = pool_timeout
        self._closed = False
        self._lock = threading.Lock()
        self._begin_write = begin_sql(schema, read_only=False, planner=WRITE_PLANNER_SETTINGS)
        # Reads take the same settings: every operator read is an index range with a LIMIT (a
        # page, a count up to its cap), and a never-analysed table must not make it a bitmap
        # or a sequential scan that sorts a job's or a status's every row.
        self._begin_read = begin_sql(schema, read_only=True, planner=WRITE_PLANNER_SETTINGS)
        self._conninfo = conninfo
        self._sizes = (min_size, max_size)
        self._connect_timeout = connect_timeout
        self._prepare_threshold = prepare_threshold
        # Every connection this pool opened, so that a forked child can disown them (forks.py).
        self._made: weakref.WeakSet[PgConnection] = weakref.WeakSet()
        self._pool: psycopg_pool.ConnectionPool[PgConnection] = self._new_pool()
        self._pool.open(wait=True, timeout=max(float(connect_timeout), 1.0))
        self._pid = os.getpid()

    def _new_pool(self) -> psycopg_pool.ConnectionPool[PgConnection]:
        return psycopg_pool.ConnectionPool(
            self._conninfo,
            connection_class=psycopg.Connection[DictRow],
            kwargs=connection_kwargs(
                connect_timeout=self._connect_timeout, prepare_threshold=self._prepare_threshold
            ),
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            timeout=self._pool_timeout,
            name=f"jobledger-{self.schema}",
            open=False,
            configure=self._made.add,
        )

    def after_fork_in_child(self) -> None:
        """In a forked child: disown every inherited connection (the parent's sessions stay
        untouched) and start a new pool, opened by the first call (forks.py)."""
        inherited = self._pool
        for conn in list(self._made):
            with contextlib.suppress(Exception):
                forks.disown_socket(conn.pgconn.socket)
        forks.abandon(inherited, *self._made)
        self._made = weakref.WeakSet()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        if not self._closed:
            self._pool = self._new_pool()
            self._opening = True

    _opening = False

    def _connection(self, timeout: float) -> Any:
        """A connection from the pool (a pool made after a fork opens here, once)."""
        if self._opening:
            with self._lock:
                if self._opening:
                    self._pool.open(wait=False)
                    self._opening = False
        return self._pool.connection(timeout=timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    def assert_open(self) -> None:
        if self._closed:
            raise StoreClosed("Scheduler store is closed")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._pid == os.getpid():
            self._pool.close(timeout=5.0)

    def stats(self) -> dict[str, int]:
        return dict(self._pool.get_stats())

    def transaction(
        self, body: Callable[[PgConnection, int], tuple[T, bool]], *, read_only: bool = False
    ) -> T:
        """Run ``body`` in one transaction, retrying it whole after a transient conflict."""
        phase = "read" if read_only else "write"
        stale_retries = 0
        attempt = 0
        while True:
            self.assert_open()
            attempt += 1
            try:
                return self._attempt(body, read_only=read_only, phase=phase)
            except _Retry as retry:
                if retry.stale:
                    # An idle pooled connection had died (server restart, idle timeout,
                    # pg_terminate_backend): nothing ran on it, so take a fresh one.
                    stale_retries += 1
                    attempt -= 1
                    self._pool.check()
                    if stale_retries <= 2:
                        continue
                elif attempt < TRANSACTION_ATTEMPTS:
                    time.sleep(random.uniform(0.001, 0.005) * attempt)
                    continue
                mapped = storage_failure(retry.cause, phase=phase, commit_state="not_committed")
                assert mapped is not None
                raise mapped from retry.cause

    def statement(self, sql: str, params: dict[str, Any]) -> list[DictRow]:
        """Run one self-contained statement as its own transaction (autocommit): one round trip.

        For statements that name their tables with the schema and read the clock themselves.
        The statement commits as it completes, so a failure leaves the outcome unknown
        (``commitState: "unknown"``) unless the server answered with an error; callers use it
        only for idempotent writes they can check by reading back.
        """
        self.assert_open()
        try:
            with self._connection(self._pool_timeout) as conn:
                try:
                    rows: list[DictRow] = conn.execute(sql, params).fetchall()
                    return rows
                except psycopg.Error as exc:
                    rollback_quietly(conn)
                    raise self._failure(exc, conn, stage="commit", phase="write") from exc
        except psycopg.Error as exc:  # no connection was checked out (pool timeout or closed)
            raise self._failure(exc, None, stage="connect", phase="write") from exc

    def _attempt(
        self,
        body: Callable[[PgConnection, int], tuple[T, bool]],
        *,
        read_only: bool,
        phase: str,
    ) -> T:
        stage = "connect"
        try:
            with self._connection(self._pool_timeout) as conn:
                # Failures are classified (and rolled back) *inside* the ``with``: once it exits,
                # the pool may already have handed this connection to another thread, whose
                # transaction a late ROLLBACK would silently end.
                try:
                    stage = "begin"
                    begin = self._begin_read if read_only else self._begin_write
                    now_ms = execute_begin(conn, begin)
                    stage = "body"
                    try:
                        result, notify = body(conn, now_ms)
                    except BaseException:
                        rollback_quietly(conn)
                        raise
                    stage = "commit"
                    conn.execute(f"NOTIFY {self.channel}; COMMIT" if notify else "COMMIT")
                    return result
                except psycopg.Error as exc:
                    if stage != "body":
                        rollback_quietly(conn)
                    raise self._failure(exc, conn, stage=stage, phase=phase) from exc
        except psycopg.Error as exc:  # no connection was checked out (pool timeout or closed)
            raise self._failure(exc, None, stage=stage, phase=phase) from exc

    def _failure(
        self, exc: psycopg.Error, conn: PgConnection | None, *, stage: str, phase: str
    ) -> Exception:
        """What a psycopg failure at ``stage`` becomes: a retry, or a jobledger error."""
        if self._closed:  # closed by another thread while this call waited or ran
            return StoreClosed("Scheduler store is closed")
        lost = _connection_lost(exc, conn)
        if stage == "begin" and lost:
            return _Retry(exc, stale=True)
        if stage in ("body", "begin") and is_conflict(exc):
            return _Retry(exc, stale=False)
        # Only a connection lost while COMMIT was in flight leaves the outcome unknown; a
        # server that answered with an error, or a failure before COMMIT, rolled it back. Either
        # way a failure at COMMIT is never retried here: the caller decides after reading back.
        commit_state = "unknown" if stage == "commit" and lost else "not_committed"
        mapped = storage_failure(exc, phase=phase, commit_state=commit_state)
        assert mapped is not None
        return mapped
