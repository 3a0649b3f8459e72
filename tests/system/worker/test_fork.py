"""Fork safety (issue 32 item 3, SPEC §14): an App used before ``os.fork()`` — as gunicorn
``--preload`` or multiprocessing's fork start method use it — keeps working in the child and in
the parent, on both stores, whatever its first use was. The child never sends anything on a
connection of the parent's (on PostgreSQL the parent's sessions — pool and LISTEN — are the same
backends afterwards), and a driver error is never reported as a corrupt store.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.testing import run_until_idle

WAIT = timedelta(seconds=20)


@pytest.fixture
def app(any_target: str) -> Iterator[jobledger.App]:
    made = jobledger.App(any_target, name="forked", authorize=jobledger.allow_all)

    @made.handler("echo")
    def echo(ctx: jobledger.JobContext) -> Any:
        return {"echo": ctx.payload, "pid": os.getpid()}

    with made:
        yield made


def declare(app: jobledger.App) -> None:
    app.queue("mail", concurrency=2)
    app.ensure_job("echo", "echo", queue="mail")


def enqueue(app: jobledger.App) -> None:
    declare(app)
    app.enqueue("echo", payload="before")


def result_wait(app: jobledger.App) -> None:
    declare(app)
    occurrence = app.enqueue("echo", payload="before")
    with pytest.raises(TimeoutError):  # a real wait: subscribed (PostgreSQL: LISTEN on done)
        app.result(occurrence.id, timeout=timedelta(milliseconds=50))
    run_until_idle(app)
    assert app.result(occurrence.id, timeout=WAIT)["echo"] == "before"


def flow(app: jobledger.App) -> None:
    declare(app)
    with app.flow() as built:
        first = built.enqueue("echo", payload="parent")
        built.enqueue("echo", payload="child", after=[first])
    run_until_idle(app)


def listen(app: jobledger.App) -> None:
    declare(app)
    store = app.store
    store.work_signal.watch()
    hearing = getattr(store, "listener", None)
    ready = hearing.connected if hearing is not None else store.wake_file.watching  # type: ignore[attr-defined]
    assert ready.wait(20)


FIRST_USES: dict[str, Callable[[jobledger.App], None]] = {
    "declarations": declare,
    "enqueue": enqueue,
    "result_wait": result_wait,
    "flow": flow,
    "listen": listen,
}


def use(app: jobledger.App, who: str) -> None:
    """Everything a process does with the app after the fork: declarations again (an import
    of the app module), an enqueue, a flow, running them, a result wait, a wake-up."""
    declare(app)
    single = app.enqueue("echo", payload=who)
    with app.flow() as built:
        parent = built.enqueue("echo", payload=f"{who}-parent")
        child = built.enqueue("echo", payload=f"{who}-child", after=[parent])
    run_until_idle(app, limit=20)
    for occurrence in (single, parent, child):
        found = app.result(occurrence.id, timeout=WAIT)
        assert found["pid"] == os.getpid(), found
    seen = app.store.work_signal.generation
    app.enqueue("echo", payload=f"{who}-wake")  # this process's signal hears its own enqueue
    assert app.store.work_signal.generation != seen
    run_until_idle(app, limit=5)


def sessions(target: str) -> set[int]:
    """PostgreSQL: the server processes of every session on the test's database (none on
    SQLite)."""
    if not target.startswith("postgresql://"):
        return set()
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(row[0]) for row in rows}


@pytest.mark.parametrize("first_use", sorted(FIRST_USES))
def test_an_app_used_before_fork_works_in_the_child_and_the_parent(
    app: jobledger.App, first_use: str, any_target: str, tmp_path
) -> None:
    FIRST_USES[first_use](app)
    parents = sessions(any_target)
    report = tmp_path / "child.txt"
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's teardown
        code = 0
        try:
            use(app, "child")
            app.close()
            report.write_text("ok")
        except BaseException:
            report.write_text(traceback.format_exc())
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert report.read_text() == "ok"
    assert os.waitstatus_to_exitcode(status) == 0
    # Every session the parent had (pool and LISTEN connections) is still there: the child
    # neither used nor ended one (closing an inherited connection sends a Terminate).
    assert parents <= sessions(any_target)
    use(app, "parent")
    assert parents <= sessions(any_target)
    assert app.store.verify().ok


def wait_for_child(pid: int, timeout_s: float) -> int | None:
    """The child's exit code, or ``None`` (and the child killed) if it hangs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_fork_while_another_thread_is_inside_a_transaction_leaves_the_child_working(
    app: jobledger.App, any_target: str, tmp_path
) -> None:
    """A web server forks whenever it likes: another thread of the parent may be in the
    middle of a write at that instant (holding the store's lock, a pooled connection, SQLite's
    write lock). The child's store is its own — locks, connections — and simply waits for the
    parent's transaction like any other process would."""
    declare(app)
    inside, finish = threading.Event(), threading.Event()

    def hold(tx: Any) -> None:
        inside.set()
        assert finish.wait(30)

    holder = threading.Thread(target=app.store._write, args=(hold,), daemon=True)  # type: ignore[attr-defined]
    holder.start()
    assert inside.wait(20)
    parents = sessions(any_target)
    report = tmp_path / "child.txt"
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            use(app, "child")
            app.close()
            report.write_text("ok")
        except BaseException:
            report.write_text(traceback.format_exc())
            code = 1
        finally:
            os._exit(code)
    finish.set()
    holder.join(20)
    code = wait_for_child(pid, 60)
    assert code is not None, "the child hung on a lock or connection of the parent's"
    assert report.read_text() == "ok"
    assert code == 0
    assert parents <= sessions(any_target)
    use(app, "parent")


def test_a_driver_error_is_never_reported_as_a_corrupt_store() -> None:
    """What a connection shared by two processes (or closed under a call) raises is the
    driver's complaint, not the database's verdict: storage unavailable, never DATA_CORRUPT."""
    import sqlite3

    import psycopg

    from jobledger.store.postgres import connection as pg
    from jobledger.store.sqlite import connection as lite

    for exc in (
        sqlite3.ProgrammingError("Cannot operate on a closed database."),
        sqlite3.InterfaceError("bad parameter or other API misuse"),
    ):
        mapped = lite.storage_failure(exc, phase="write", commit_state="unknown")
        assert mapped is not None and mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE", exc
    for exc in (
        psycopg.ProgrammingError("the last operation didn't produce records"),
        psycopg.InterfaceError('server sent data ("D" message) without prior row description'),
    ):
        mapped = pg.storage_failure(exc, phase="write", commit_state="unknown")
        assert mapped is not None and mapped.code == "SCHEDULER_STORAGE_UNAVAILABLE", exc


def test_a_child_never_gives_up_the_parents_liveness_lock(app: jobledger.App, any_target: str):
    """A worker's liveness lock (SQLite: an ``flock`` on a file; PostgreSQL: a session advisory
    lock) held when the process forks stays the parent's: the child closing its copy neither
    unlocks nor unlinks it (SQLite) nor ends or unlocks the parent's session (PostgreSQL) — else
    the parent's worker would look dead and its leases be taken over while it runs."""
    handle = app.store.hold_owner_lock("web-worker")
    parents = sessions(any_target)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            handle.close()
            app.store.hold_owner_lock("child-worker").close()  # the child's own: fine
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    assert wait_for_child(pid, 30) == 0
    try:
        assert handle.held
        assert parents <= sessions(any_target)
        if not any_target.startswith("postgresql://"):
            from pathlib import Path

            from jobledger.store.sqlite.liveness import owner_held

            assert owner_held(Path(any_target), "web-worker")
        else:
            import psycopg

            with psycopg.connect(any_target, autocommit=True) as conn:
                [(locks,)] = conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND l.granted "
                    "AND d.datname = current_database()"
                ).fetchall()
            assert locks == 1  # the parent's, still held
    finally:
        handle.close()
