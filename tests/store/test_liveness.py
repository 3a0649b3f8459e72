"""Owner liveness: a worker's lock lives exactly as long as it does, and only a dead owner's
leases are ended early.

A real death needs a real process: ``_hold_in_child`` takes the lock in a child process that
registers the worker the way ``Worker`` does, then is SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import psycopg
import pytest

import jobledger
from jobledger.store.postgres.liveness import LIVENESS_CONFIRM, LIVENESS_REFRESH
from jobledger.testing import FakeClock

CONFIRM_MS = LIVENESS_CONFIRM // timedelta(milliseconds=1)

_CHILD = textwrap.dedent(
    """
    import os, sys, time
    import jobledger
    store = jobledger.open_store(sys.argv[1])
    lock = store.hold_owner_lock(sys.argv[2])
    store.register_worker(
        worker_id=sys.argv[2], hostname="h", pid=os.getpid(), info={"liveness": lock.kind}
    )
    # the backend that holds the lock (PostgreSQL), for the test to wait on its end
    backend = getattr(getattr(lock, "_conn", None), "info", None)
    print("holding", getattr(backend, "backend_pid", 0), flush=True)
    time.sleep(600)
    """
)


def _target(store: jobledger.Store, request: pytest.FixtureRequest, backend: str) -> str:
    if backend == "sqlite":
        return store.target
    return str(request.getfixturevalue("postgres_database_url"))


def _hold_in_child(target: str, owner: str) -> tuple[subprocess.Popen[str], int]:
    """The child and the PostgreSQL backend pid holding its lock (0 on SQLite)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, target, owner],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    said, backend = child.stdout.readline().split()
    assert said == "holding"
    return child, int(backend)


def _kill(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)


def _wait_for_the_backend_to_end(url: str, backend: int) -> None:
    """The server ends a killed client's session when it notices the closed socket, which under
    load is not at once: wait for that (the condition the test depends on), not for a time."""
    deadline = time.monotonic() + 120
    with psycopg.connect(url, autocommit=True) as admin:
        while True:
            row = admin.execute(
                "SELECT (SELECT count(*) FROM pg_locks WHERE pid = %(pid)s)"
                " + (SELECT count(*) FROM pg_stat_activity WHERE pid = %(pid)s)",
                {"pid": backend},
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            assert time.monotonic() < deadline, f"backend {backend} still holds its locks"
            time.sleep(0.02)


def test_an_owner_that_never_took_a_lock_is_not_known_to_be_gone(store, clock: FakeClock):
    assert store.owner_gone("nobody") is False
    clock.advance(timedelta(minutes=5))
    assert store.owner_gone("nobody") is False


def test_a_live_owner_is_never_gone(store, store_factory, clock: FakeClock):
    lock = store.hold_owner_lock("alive")
    store.register_worker(worker_id="alive", hostname="h", pid=1, info={"liveness": lock.kind})
    other = store_factory()
    for _ in range(3):
        assert other.owner_gone("alive") is False
        clock.advance(timedelta(seconds=5))
    lock.close()


def test_a_second_holder_of_the_same_owner_lock_is_refused(store, store_factory):
    lock = store.hold_owner_lock("only-one")
    with pytest.raises(jobledger.StorageUnavailable):
        store_factory().hold_owner_lock("only-one")
    lock.close()


def test_a_killed_owner_is_gone(store, store_factory, backend, request, clock: FakeClock):
    target = _target(store, request, backend)
    child, holder = _hold_in_child(target, "victim")
    other = store_factory()
    assert other.owner_gone("victim") is False
    _kill(child)
    if backend == "postgres":
        _wait_for_the_backend_to_end(target, holder)
        # The lock is free now; it must stay free for CONFIRM first.
        assert other.owner_gone("victim") is False
        clock.advance(timedelta(milliseconds=CONFIRM_MS - 1))
        assert other.owner_gone("victim") is False
        clock.advance(timedelta(milliseconds=1))
    assert other.owner_gone("victim") is True


@pytest.mark.postgres
def test_a_live_worker_whose_session_ended_is_not_reaped(
    postgres_database_url: str, clock: FakeClock
):
    """A terminated backend (or a server restart) frees the lock while the worker lives: it
    takes the lock back within LIVENESS_REFRESH, well inside the confirmation window."""
    assert LIVENESS_REFRESH * 2 < LIVENESS_CONFIRM
    with (
        jobledger.open_store(postgres_database_url, clock=clock) as worker_store,
        jobledger.open_store(postgres_database_url, clock=clock) as reaper,
    ):
        lock = worker_store.hold_owner_lock("w")
        worker_store.register_worker(
            worker_id="w", hostname="h", pid=1, info={"liveness": lock.kind}
        )
        pid = lock._conn.info.backend_pid  # type: ignore[attr-defined]
        with reaper._pool._pool.connection() as admin:  # type: ignore[attr-defined]
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        assert reaper.owner_gone("w") is False  # free, seen once
        lock.refresh()  # the worker's next liveness check: a new session, the lock again
        assert lock.held
        clock.advance(LIVENESS_CONFIRM * 2)
        assert reaper.owner_gone("w") is False
        lock.close()


def _terminate(reaper: jobledger.Store, lock: object) -> None:
    pid = lock._conn.info.backend_pid  # type: ignore[attr-defined]
    with reaper._pool._pool.connection() as admin:  # type: ignore[attr-defined]
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


@pytest.mark.postgres
def test_a_live_worker_whose_sessions_are_cut_again_and_again_is_not_reaped(
    postgres_database_url: str, clock: FakeClock
):
    """Issue 17 (2): free at both samples is not gone when the lock was taken back (and lost
    again) in between — the generation moved. Without it, a worker cut every half second was
    reaped while alive and its work ran twice."""
    with (
        jobledger.open_store(postgres_database_url, clock=clock) as worker_store,
        jobledger.open_store(postgres_database_url, clock=clock) as reaper,
    ):
        lock = worker_store.hold_owner_lock("w")
        worker_store.register_worker(
            worker_id="w", hostname="h", pid=1, info={"liveness": lock.kind}
        )
        first = lock.generation  # type: ignore[attr-defined]
        for _ in range(4):
            _terminate(reaper, lock)
            # Every sample sees the lock free, each CONFIRM after the last…
            assert reaper.owner_gone("w") is False
            clock.advance(LIVENESS_CONFIRM * 2)
            lock.refresh()  # …but the worker took it back in between, every time.
            assert lock.held
        assert lock.generation == first + 4  # type: ignore[attr-defined]
        _terminate(reaper, lock)
        assert reaper.owner_gone("w") is False
        # Now it stays free with the same generation: gone, after CONFIRM and not before.
        clock.advance(timedelta(milliseconds=CONFIRM_MS - 1))
        assert reaper.owner_gone("w") is False
        clock.advance(timedelta(milliseconds=1))
        assert reaper.owner_gone("w") is True
        lock.close()


@pytest.mark.postgres
def test_each_take_of_the_lock_bumps_the_owner_generation(postgres_database_url, clock):
    with jobledger.open_store(postgres_database_url, clock=clock) as store:
        lock = store.hold_owner_lock("gen")
        assert lock.generation == 1  # type: ignore[attr-defined]
        lock.close()
        clock.advance(timedelta(seconds=3))
        again = store.hold_owner_lock("gen")
        # A new life of the same owner id goes on from the last generation, never back to 1:
        # a reaper's sample from the old life cannot match the new one.
        assert again.generation == 2  # type: ignore[attr-defined]
        with store._pool._pool.connection() as conn:  # type: ignore[attr-defined]
            row = conn.execute(
                "SELECT generation, taken_at FROM jobledger.jobledger_liveness "
                "WHERE owner_id = 'gen'"
            ).fetchone()
        assert (row["generation"], row["taken_at"]) == (2, clock())
        again.close()


@pytest.mark.postgres
def test_an_owner_registered_without_a_lock_is_never_gone(postgres_database_url, clock):
    with jobledger.open_store(postgres_database_url, clock=clock) as store:
        store.register_worker(worker_id="old", hostname="h", pid=1, info={"liveness": "none"})
        assert store.owner_gone("old") is False
        clock.advance(LIVENESS_CONFIRM * 2)
        assert store.owner_gone("old") is False
