"""Lost connections, conflicts and storage failures map to coded errors and leave no half-write."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import psycopg
import pytest

import jobledger
from jobledger.errors import StorageUnavailable, StoreMisconfigured
from jobledger.store.postgres import connection as pg_connection
from jobledger.store.postgres import store as pg_store
from tests.store.helpers import raises_code
from tests.store.pg_support import ADMIN_URL

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _kill_store_connections(admin) -> int:
    row = admin.execute(
        "SELECT count(pg_terminate_backend(pid, 5000)) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()
    return int(row["n"])


@pytest.fixture
def kill_after(monkeypatch, admin):
    """Terminate the store's backend right after the named query ran inside the transaction."""

    def arm(query_name: str) -> None:
        original = pg_store._PostgresTx._execute

        def execute(self, query, params, **options):
            cursor = original(self, query, params, **options)
            if query == query_name:
                pid = self._conn.info.backend_pid
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            return cursor

        monkeypatch.setattr(pg_store._PostgresTx, "_execute", execute)

    return arm


def test_a_connection_lost_mid_write_commits_nothing(open_pg, admin, kill_after, monkeypatch):
    store = open_pg()
    kill_after("insert_job")  # the job row is written, its job_created event not yet
    with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as lost:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    details = lost.value.details
    assert details["commitState"] == "not_committed"
    assert details["phase"] == "write"
    assert details["retryable"] is True
    assert isinstance(lost.value.__cause__, psycopg.OperationalError)
    assert admin.execute("SELECT count(*) AS n FROM jobledger.jobs").fetchone()["n"] == 0
    assert admin.execute("SELECT count(*) AS n FROM jobledger.events").fetchone()["n"] == 0
    monkeypatch.undo()
    job = store.create_job(id="j", kind="k", authority=AUTHORITY)  # the store recovered
    assert job.revision == 1


def test_a_connection_lost_mid_claim_leaves_the_occurrence_queued(open_pg, admin, kill_after):
    store = open_pg()
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    kill_after("apply_claims")
    with raises_code("SCHEDULER_STORAGE_UNAVAILABLE"):
        store.claim_next(owner_id="w", lease_ms=1000)
    row = admin.execute(
        "SELECT status, attempt, fence FROM jobledger.occurrences WHERE occurrence_id = %s",
        (occurrence.id,),
    ).fetchone()
    assert row == {"status": "queued", "attempt": 0, "fence": 0}
    assert [e.type for e in store.history(occurrence_id=occurrence.id)] == ["occurrence_enqueued"]


def test_a_connection_lost_during_commit_is_reported_unknown(open_pg, admin, monkeypatch):
    store = open_pg()
    original = psycopg.Connection.execute

    def execute(self, query, params=None, **kwargs):
        if query == "COMMIT":
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (self.info.backend_pid,))
        return original(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    bodies = {"n": 0}
    original_execute = pg_store._PostgresTx._execute

    def count_bodies(self, query, params, **options):
        if query == "insert_job":
            bodies["n"] += 1
        return original_execute(self, query, params, **options)

    monkeypatch.setattr(pg_store._PostgresTx, "_execute", count_bodies)
    with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as lost:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    assert lost.value.details["commitState"] == "unknown"
    assert lost.value.details["retryable"] is True
    # The outcome of a COMMIT in flight is unknown, so the body must not be run again: a retry
    # could apply a non-idempotent change twice.
    assert bodies["n"] == 1
    monkeypatch.undo()
    assert store.get_job("j") is None  # here the server never saw the COMMIT


def test_a_failed_transaction_is_rolled_back_before_its_connection_is_returned(
    open_pg, monkeypatch
):
    """A late ROLLBACK on a connection already back in the pool would end another thread's
    transaction (and its remaining statements would then autocommit one by one)."""
    store = open_pg()
    pool = store._pool
    events: list[str] = []
    original_rollback = pg_connection.rollback_quietly
    original_putconn = pool._pool.putconn

    def rollback(conn):
        events.append("rollback")
        return original_rollback(conn)

    def putconn(conn):
        events.append("returned")
        return original_putconn(conn)

    monkeypatch.setattr(pg_connection, "rollback_quietly", rollback)
    monkeypatch.setattr(pool._pool, "putconn", putconn)
    # A server error while the transaction opens (stage "begin", not a conflict, not lost).
    monkeypatch.setattr(pool, "_begin_read", "BEGIN READ ONLY; SELECT 1 / 0 AS now_ms")
    with raises_code("SCHEDULER_DATA_CORRUPT"):
        store.get_job("j")
    assert events == ["rollback", "returned"]
    monkeypatch.undo()
    assert store.get_job("j") is None  # the connection came back clean


def test_stale_pooled_connections_are_replaced_transparently(open_pg, admin):
    store = open_pg(pool_min_size=3, pool_max_size=3)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    assert _kill_store_connections(admin) >= 1  # e.g. a server restart while the store idles
    assert store.get_job("j") is not None
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    assert store.claim_next(owner_id="w", lease_ms=1000) is not None


def test_reads_report_a_lost_connection_too(open_pg, kill_after):
    store = open_pg()
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    kill_after("get_job")
    with pytest.raises(StorageUnavailable) as lost:
        store.get_job("j")
    assert lost.value.details["phase"] == "read"


@pytest.mark.parametrize(
    "error_class", [psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected]
)
def test_conflicts_retry_the_whole_body_then_succeed(open_pg, monkeypatch, admin, error_class):
    store = open_pg()
    original = pg_store._PostgresTx._execute
    failures = {"left": 2}

    def execute(self, query, params, **options):
        cursor = original(self, query, params, **options)
        if query == "insert_event" and failures["left"] > 0:
            failures["left"] -= 1
            raise error_class("simulated conflict")
        return cursor

    monkeypatch.setattr(pg_store._PostgresTx, "_execute", execute)
    job = store.create_job(id="j", kind="k", authority=AUTHORITY)
    assert job.revision == 1
    assert admin.execute("SELECT count(*) AS n FROM jobledger.events").fetchone()["n"] == 1


@pytest.mark.parametrize(
    ("error_class", "state"),
    [(psycopg.errors.SerializationFailure, "40001"), (psycopg.errors.DeadlockDetected, "40P01")],
)
def test_persistent_conflicts_become_retryable_storage_errors(
    open_pg, monkeypatch, admin, error_class, state
):
    store = open_pg()
    attempts = {"n": 0}

    def execute(self, query, params, **options):
        attempts["n"] += 1
        raise error_class("simulated conflict")

    monkeypatch.setattr(pg_store._PostgresTx, "_execute", execute)
    with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as failed:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    assert failed.value.details == {
        "phase": "write",
        "storageCode": state,
        "commitState": "not_committed",
        "retryable": True,
    }
    assert attempts["n"] == pg_connection.TRANSACTION_ATTEMPTS
    assert admin.execute("SELECT count(*) AS n FROM jobledger.jobs").fetchone()["n"] == 0


def test_a_real_deadlock_is_resolved_by_retrying(open_pg, pg_url, admin, monkeypatch):
    """Two transactions lock two jobs in opposite orders; PostgreSQL aborts one, it retries."""
    store = open_pg()
    store.create_job(id="a", kind="k", authority=AUTHORITY)
    store.create_job(id="b", kind="k", authority=AUTHORITY)
    barrier = threading.Barrier(2, timeout=10)
    original = pg_store._PostgresTx._execute
    first_pass: set[str] = set()
    bodies: list[str] = []

    def execute(self, query, params, **options):
        if query == "get_job":
            bodies.append(threading.current_thread().name)
        if query == "get_job" and threading.current_thread().name not in first_pass:
            first_pass.add(threading.current_thread().name)
            me = params["job_id"]
            other = "b" if me == "a" else "a"
            self._conn.execute("SELECT 1 FROM jobledger.jobs WHERE job_id = %s FOR UPDATE", (me,))
            barrier.wait()
            self._conn.execute(
                "SELECT 1 FROM jobledger.jobs WHERE job_id = %s FOR UPDATE", (other,)
            )
        return original(self, query, params, **options)

    monkeypatch.setattr(pg_store._PostgresTx, "_execute", execute)
    results: dict[str, object] = {}

    def update(job_id: str) -> None:
        try:
            results[job_id] = store.update_job(
                job_id, expected_revision=1, patch={"payload": job_id}
            )
        except BaseException as exc:
            results[job_id] = exc

    threads = [threading.Thread(target=update, args=(j,), name=f"t-{j}") for j in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert {k: getattr(v, "revision", v) for k, v in results.items()} == {"a": 2, "b": 2}
    # update_job reads the job twice per body: the winner ran one body; the deadlock victim's
    # first body read it once before it was aborted, and it ran again (more than once if the
    # retry met the winner's locks again on a loaded machine).
    winner, victim = sorted([bodies.count("t-a"), bodies.count("t-b")])
    assert winner == 2
    assert victim >= 3


@pytest.mark.parametrize(
    ("exc", "code", "retryable"),
    [
        (psycopg.errors.DiskFull("x"), "53100", False),
        (psycopg.errors.AdminShutdown("x"), "57P01", True),
        (psycopg.errors.ReadOnlySqlTransaction("x"), "25006", False),
        (psycopg.errors.InsufficientPrivilege("x"), "42501", False),
        (psycopg.errors.QueryCanceled("x"), "57014", True),
        (psycopg.OperationalError("server closed the connection"), "OperationalError", True),
        (psycopg.InterfaceError("the connection is closed"), "InterfaceError", True),
        # Driver errors without a SQLSTATE (a connection shared across os.fork()) are outages.
        (psycopg.DatabaseError("lost synchronization with server"), "DatabaseError", True),
        (psycopg.InternalError("unexpected message type"), "InternalError", True),
        (psycopg.ProgrammingError("no result available"), "ProgrammingError", True),
    ],
)
def test_storage_failures_are_mapped_with_their_code(exc, code, retryable):
    mapped = pg_connection.storage_failure(exc, phase="write", commit_state="not_committed")
    assert mapped is not None and mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE"
    assert mapped.details == {
        "phase": "write",
        "storageCode": code,
        "commitState": "not_committed",
        "retryable": retryable,
    }
    assert mapped.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.DatabaseError("lost synchronization with server"),
        psycopg.InternalError("unexpected message type"),
    ],
)
def test_a_driver_error_without_sqlstate_discards_the_connection(exc):
    assert pg_connection._connection_lost(exc, None)
    assert not pg_connection._connection_lost(psycopg.errors.CheckViolation("x"), None)


def test_a_violated_constraint_is_data_corruption_not_a_crash():
    mapped = pg_connection.storage_failure(
        psycopg.errors.CheckViolation("x"), phase="write", commit_state="not_committed"
    )
    assert mapped is not None and mapped.code == "SCHEDULER_DATA_CORRUPT"
    assert mapped.details["storageCode"] == "23514"
    assert pg_connection.storage_failure(ValueError("x"), phase="write", commit_state="x") is None


def test_an_exhausted_pool_times_out_as_storage_unavailable(open_pg):
    store = open_pg(pool_min_size=1, pool_max_size=1, pool_timeout=0.2)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store._pool._pool.connection():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as starved:
            store.get_job("j")
        assert starved.value.details["storageCode"] == "POOL_TIMEOUT"
        assert starved.value.details["retryable"] is True
    finally:
        release.set()
        holder.join()
    assert store.get_job("j") is not None


# -- a misconfiguration is not an outage ---------------------------------------------------------
#
# Changed rule: a closed port at open used to be SCHEDULER_STORAGE_UNAVAILABLE ("repeat the
# command when the store is reachable"), like a missing database, a missing role and refused
# credentials. They are SCHEDULER_STORE_MISCONFIGURED now; STORAGE_UNAVAILABLE is kept for
# outages that waiting can cure.

SECRET = "hunter2-secret"


def _url_with_password(*, user: str = "postgres", port: int = 5432, database: str = "test") -> str:
    base, _, _ = ADMIN_URL.partition("://")
    host = ADMIN_URL.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]
    return f"{base}://{user}:{SECRET}@{host}:{port}/{database}?password={SECRET}"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _refused(url: str, problem: str) -> jobledger.SchedulerError:
    with raises_code("SCHEDULER_STORE_MISCONFIGURED") as refused:
        jobledger.open_store(url, listen=False, connect_timeout=5)
    error = refused.value
    assert isinstance(error, StoreMisconfigured)
    assert error.details is not None and error.details["problem"] == problem
    assert error.details["retryable"] is False and error.details["phase"] == "open"
    shown = f"{error} {error.details!r} {error.to_dict()!r}"
    assert SECRET not in shown
    assert error.details["target"] == pg_connection.redact_url(url)
    assert isinstance(error.__cause__, psycopg.Error)
    return error


def test_a_missing_database_is_a_misconfiguration():
    name = f"jobledger_missing_{uuid.uuid4().hex[:8]}"
    error = _refused(_url_with_password(database=name), "no_such_database")
    assert f'has no database "{name}"' in error.message
    assert error.details["database"] == name


def test_a_missing_role_is_a_misconfiguration():
    role = f"jobledger_nobody_{uuid.uuid4().hex[:8]}"
    error = _refused(_url_with_password(user=role), "no_such_role")
    assert f'has no role "{role}"' in error.message
    assert error.details["user"] == role


def test_a_role_that_may_not_log_in_is_refused_credentials():
    role = f"jobledger_nologin_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} NOLOGIN")
        try:
            error = _refused(_url_with_password(user=role), "authentication_failed")
        finally:
            admin.execute(f"DROP ROLE {role}")
    assert f'refused to authenticate role "{role}"' in error.message


def test_a_closed_port_says_where_but_stays_retryable():
    """Nothing listening is a wrong host or port, or a server that is down or restarting: the
    message names the address and both causes, and the error stays a retryable outage (a worker
    started while its server restarts must not give up)."""
    port = _closed_port()
    with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as refused:
        jobledger.open_store(_url_with_password(port=port), listen=False, connect_timeout=5)
    error = refused.value
    assert f":{port}" in error.message and "check the host and port" in error.message
    assert "restarting" in error.message
    assert error.details is not None and error.details["problem"] == "server_not_listening"
    assert error.details["retryable"] is True
    assert SECRET not in f"{error} {error.details!r} {error.to_dict()!r}"


def test_an_unknown_host_is_a_misconfiguration():
    url = f"postgresql://postgres:{SECRET}@jobledger-no-such-host.invalid:5432/test"
    error = _refused(url, "unknown_host")
    assert "jobledger-no-such-host.invalid" in error.message


def test_a_server_that_does_not_answer_is_an_outage():
    """A listener that never answers (a hung server, a dropped network): a timeout, which
    waiting may cure — SCHEDULER_STORAGE_UNAVAILABLE, retryable."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test"
        with raises_code("SCHEDULER_STORAGE_UNAVAILABLE") as unavailable:
            jobledger.open_store(url, listen=False, connect_timeout=1)
    assert unavailable.value.details["phase"] == "open"
    assert unavailable.value.details["retryable"] is True
    assert SECRET not in str(unavailable.value)


@pytest.mark.parametrize(
    ("exc", "problem"),
    [
        (psycopg.errors.InvalidPassword("x"), "authentication_failed"),
        (psycopg.errors.InvalidCatalogName("x"), "no_such_database"),
        (psycopg.errors.InvalidAuthorizationSpecification("x"), "authentication_failed"),
        (
            psycopg.OperationalError(
                'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
                'password authentication failed for user "app"'
            ),
            "authentication_failed",
        ),
        (
            psycopg.OperationalError(
                'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
                'no pg_hba.conf entry for host "10.0.0.5", user "app", database "jobs"'
            ),
            "authentication_failed",
        ),
        (
            psycopg.OperationalError(
                'connection failed: connection to server on socket "/run/postgresql/.s.PGSQL.5433"'
                " failed: No such file or directory"
            ),
            "server_not_listening",
        ),
        (psycopg.OperationalError("connection failed: timeout expired"), None),
        (
            psycopg.OperationalError(
                "connection failed: FATAL:  the database system is starting up"
            ),
            None,
        ),
        (psycopg.OperationalError("FATAL:  sorry, too many clients already"), None),
        (psycopg.errors.AdminShutdown("x"), None),
    ],
)
def test_what_counts_as_a_misconfiguration(exc, problem):
    mapped = pg_connection.open_failure(exc, f"postgresql://app:{SECRET}@db/jobs")
    assert mapped is not None
    if problem is None:
        assert mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE"
    elif problem == "server_not_listening":
        assert mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE"
        assert mapped.details is not None and mapped.details["problem"] == problem
    else:
        assert mapped.code == "SCHEDULER_STORE_MISCONFIGURED"
        assert mapped.details is not None and mapped.details["problem"] == problem
        assert mapped.details["user"] == "app" and mapped.details["database"] == "jobs"
    assert SECRET not in f"{mapped} {mapped.details!r}"


def test_closed_store_refuses_calls(open_pg):
    store = open_pg()
    store.close()
    store.close()
    with raises_code("SCHEDULER_STORE_CLOSED"):
        store.get_job("j")
    with raises_code("SCHEDULER_STORE_CLOSED"):
        store.create_job(id="j", kind="k", authority=AUTHORITY)
    with raises_code("SCHEDULER_STORE_CLOSED"):
        store.schema_info()
    with raises_code("SCHEDULER_STORE_CLOSED"):
        store.now()


def test_a_call_waiting_for_a_connection_when_the_store_closes_gets_store_closed(open_pg):
    store = open_pg(pool_min_size=1, pool_max_size=1, pool_timeout=30)
    outcome: list[BaseException] = []
    waiting = threading.Event()

    def call() -> None:
        waiting.set()
        try:
            store.get_job("j")
        except BaseException as exc:
            outcome.append(exc)

    with store._pool._pool.connection():  # the only connection is busy
        thread = threading.Thread(target=call)
        thread.start()
        assert waiting.wait(5)
        deadline = time.monotonic() + 5
        while store.pool_stats().get("requests_waiting", 0) < 1:
            assert time.monotonic() < deadline, "the call never waited for the pool"
            time.sleep(0.01)
        closer = threading.Thread(target=store.close)
        closer.start()
        thread.join(10)
    closer.join(10)
    assert not thread.is_alive() and not closer.is_alive()
    assert len(outcome) == 1
    assert getattr(outcome[0], "code", None) == "SCHEDULER_STORE_CLOSED"
