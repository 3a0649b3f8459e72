"""LISTEN/NOTIFY: a latency hint that wakes idle workers in other processes."""

from __future__ import annotations

import threading
import time

from jobledger.store.postgres.listener import NotificationListener

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def _listening(open_pg):
    """A store whose LISTEN thread runs (a worker starts it by waiting for work)."""
    listening = open_pg(listen=True)
    assert listening.listener is not None
    listening.work_signal.watch()
    assert listening.listener.connected.wait(10)
    return listening


def _listener_connections(admin) -> int:
    return admin.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'jobledger-listener'"
        " AND datname = current_database()"
    ).fetchone()["n"]


def test_the_listener_starts_with_the_first_wait_for_work_not_before(open_pg, admin):
    store = open_pg(listen=True)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    time.sleep(0.2)
    assert store.listener is not None and not store.listener.connected.is_set()
    assert _listener_connections(admin) == 0  # a process that only enqueues never listens
    store.work_signal.wait(store.work_signal.generation, 0.0)
    assert store.listener.connected.wait(10)
    assert _wait_for(lambda: _listener_connections(admin) == 1)
    store.work_signal.watch()  # idempotent: still one listener
    time.sleep(0.2)
    assert _listener_connections(admin) == 1


def test_a_listener_never_started_closes_cleanly_and_stays_stopped(open_pg):
    store = open_pg(listen=True)
    listener = store.listener
    assert listener is not None
    store.close()
    listener.start()  # too late: a stopped listener stays stopped
    assert listener._thread.ident is None


def test_an_enqueue_elsewhere_bumps_the_listeners_work_signal(open_pg):
    listening = _listening(open_pg)
    producer = open_pg(listen=False)
    producer.create_job(id="j", kind="k", authority=AUTHORITY)
    seen = listening.work_signal.generation

    woke = threading.Event()

    def wait() -> None:
        if listening.work_signal.wait(seen, 10.0) != seen:
            woke.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    producer.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    waiter.join()
    assert woke.is_set()


def test_no_notification_without_new_work(open_pg):
    listening = _listening(open_pg)
    producer = open_pg(listen=False)
    producer.create_job(id="j", kind="k", authority=AUTHORITY)
    producer.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    assert _wait_for(lambda: listening.work_signal.generation >= 2)
    settled = listening.work_signal.generation
    producer.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")  # deduplicated
    claimed = producer.claim_next(owner_id="w", lease_ms=1000)
    producer.settle(occurrence_id=claimed.id, owner_id="w", fence=1, outcome="succeeded")
    time.sleep(0.3)
    assert listening.work_signal.generation == settled


def test_a_requeue_and_a_release_notify(open_pg, clock):
    listening = _listening(open_pg)
    producer = open_pg(listen=False)
    producer.create_job(id="j", kind="k", authority=AUTHORITY, max_attempts=1)
    producer.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    assert _wait_for(lambda: listening.work_signal.generation >= 2)
    claimed = producer.claim_next(owner_id="w", lease_ms=1000)
    before = listening.work_signal.generation
    producer.release_lease(occurrence_id=claimed.id, owner_id="w", fence=1, reason="shutdown")
    assert _wait_for(lambda: listening.work_signal.generation > before)
    claimed = producer.claim_next(owner_id="w", lease_ms=1000)
    producer.settle(occurrence_id=claimed.id, owner_id="w", fence=2, outcome="failed")
    before = listening.work_signal.generation
    producer.requeue_dead_letter(occurrence_id=claimed.id, expected_fence=2, reason="r", actor="op")
    assert _wait_for(lambda: listening.work_signal.generation > before)


def test_listen_false_opens_no_listener_connection(open_pg, admin):
    store = open_pg(listen=False)
    assert store.listener is None
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    store.work_signal.wait(store.work_signal.generation, 0.0)
    assert _listener_connections(admin) == 0
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")  # NOTIFY still sent
    assert store.claim_next(owner_id="w", lease_ms=1000) is not None


def test_the_listener_reconnects_after_its_connection_dies(open_pg, admin):
    listening = _listening(open_pg)
    listener = listening.listener
    old_pid = listener.backend_pid
    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (old_pid,))
    assert _wait_for(lambda: listener.connections >= 2 and listener.connected.is_set())
    assert listener.backend_pid != old_pid
    producer = open_pg(listen=False)
    producer.create_job(id="j", kind="k", authority=AUTHORITY)
    before = listening.work_signal.generation
    producer.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    assert _wait_for(lambda: listening.work_signal.generation > before)


def test_close_stops_the_listener_promptly(open_pg, admin):
    listening = _listening(open_pg)
    listener = listening.listener
    started = time.monotonic()
    listening.close()
    assert time.monotonic() - started < 2.0
    assert not listener._thread.is_alive()
    assert _wait_for(
        lambda: (
            admin.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE pid = %s", (listener.backend_pid,)
            ).fetchone()["n"]
            == 0
        )
    )


def test_the_listener_keeps_retrying_an_unreachable_server():
    from jobledger.store.ledger import WorkSignal

    listener = NotificationListener(
        "postgresql://postgres@127.0.0.1:1/nothing",
        channel="jobledger_work_x",
        signal=WorkSignal(),
        connect_timeout=1,
    )
    listener.start()
    time.sleep(0.3)
    assert not listener.connected.is_set()
    listener.stop()
    assert not listener._thread.is_alive()


def test_stop_never_hangs_or_closes_the_pipe_under_a_thread_stuck_connecting(monkeypatch):
    """A connect that blocks (an unreachable host) must not hold up close(), and the wake-up pipe
    must stay open until the thread itself is done with it."""
    import os

    import psycopg

    from jobledger.store.ledger import WorkSignal
    from jobledger.store.postgres import listener as listener_module

    entered = threading.Event()
    release = threading.Event()

    def connect(*args, **kwargs):
        entered.set()
        release.wait(10)
        raise psycopg.OperationalError("simulated connect timeout")

    monkeypatch.setattr(listener_module.psycopg, "connect", connect)
    listener = NotificationListener(
        "postgresql://postgres@127.0.0.1:5432/x",
        channel="jobledger_work_x",
        signal=WorkSignal(),
        connect_timeout=10,
    )
    listener.start()
    assert entered.wait(5)
    started = time.monotonic()
    listener.stop(timeout_s=0.2)
    assert time.monotonic() - started < 1.0
    assert listener._thread.is_alive()
    os.fstat(listener._wake_read)  # still open: the stuck thread will select() on it
    release.set()
    listener._thread.join(5)
    assert not listener._thread.is_alive()
    assert listener._pipe_open is False
