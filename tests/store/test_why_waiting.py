"""Why queued work is not running (``jobledger.planning.waiting.why_waiting``), on both stores:
every reason the store can tell, in the words SPEC §7 gives."""

from __future__ import annotations

from datetime import timedelta

from jobledger import Queue, Rate
from jobledger.planning.waiting import limit_words, rate_words, why_waiting

from .helpers import claim, enqueue, make_job

MINUTE = 60_000


def _codes(store, occurrence) -> list[str]:
    return [reason.code for reason in why_waiting(store, store.get_occurrence(occurrence.id))]


def test_pause_and_queue_limits(store, clock, authority):
    make_job(store, authority, "j", queue="q")
    store.declare_queue(Queue("q", concurrency=1, rate=Rate(2, timedelta(minutes=1))), actor="ops")
    # equally due: claimed in occurrence id order (SPEC §2)
    first, second, third = sorted(
        (enqueue(store, "j", clock(), key) for key in "abc"), key=lambda o: o.id
    )
    assert _codes(store, first) == ["ready"]
    claim(store)
    [reason] = why_waiting(store, store.get_occurrence(second.id))
    assert (reason.code, reason.text) == (
        "queue_concurrency",
        "queue at its concurrency limit (1 running)",
    )
    store.declare_queue(Queue("q", concurrency=5, rate=Rate(2, timedelta(minutes=1))), actor="ops")
    claim(store)
    now = clock()
    [rate] = why_waiting(store, store.get_occurrence(third.id))
    window = now - now % MINUTE + MINUTE
    assert rate.code == "queue_rate" and rate.until == window
    assert rate.text.startswith("rate limit: next window at ")
    store.pause_queue("q", reason="incident 7", actor="alice")
    codes = _codes(store, third)
    assert codes == ["queue_paused", "queue_rate"]
    paused = why_waiting(store, store.get_occurrence(third.id), when=lambda ms: "T")[0]
    assert paused.text == "queue paused by alice at T: incident 7"


def test_partition_limits(store, clock, authority):
    make_job(store, authority, "j", queue="p")
    store.declare_queue(Queue("p", partition_concurrency=1), actor="ops")
    first, second = sorted(
        (enqueue(store, "j", clock(), key, partition="customer:42") for key in "ab"),
        key=lambda o: o.id,
    )
    assert claim(store).id == first.id
    [reason] = why_waiting(store, store.get_occurrence(second.id))
    assert reason.text == "partition customer:42 at its limit (1 running)"
    make_job(store, authority, "k", queue="r")
    store.declare_queue(Queue("r", partition_rate=Rate(1, timedelta(minutes=1))), actor="ops")
    third, fourth = sorted(
        (enqueue(store, "k", clock(), key, partition="customer:7") for key in "cd"),
        key=lambda o: o.id,
    )
    assert claim(store, queues=["r"]).id == third.id
    codes = _codes(store, fourth)
    assert "partition_rate" in codes, codes
    [rate] = [
        r for r in why_waiting(store, store.get_occurrence(fourth.id)) if r.code == "partition_rate"
    ]
    now = clock()
    assert rate.until == now - now % MINUTE + MINUTE


def test_not_due_disabled_and_settled(store, clock, authority):
    make_job(store, authority, "j")
    later = enqueue(store, "j", clock(), "later", available_at=clock() + MINUTE)
    [reason] = why_waiting(store, later, when=lambda ms: str(ms))
    assert (reason.code, reason.text) == ("not_due", f"not due until {clock() + MINUTE}")
    store.update_job("j", expected_revision=1, patch={"enabled": False})
    assert _codes(store, later) == ["job_disabled", "not_due"]
    store.update_job("j", expected_revision=2, patch={"enabled": True})
    clock.advance(MINUTE)
    running = claim(store)
    assert why_waiting(store, running) == []


def test_limits_in_words():
    queue = Queue(
        "q",
        concurrency=5,
        worker_concurrency=2,
        partition_concurrency=1,
        rate=Rate(10, timedelta(minutes=1)),
        partition_rate=Rate(3, timedelta(seconds=90)),
    )
    assert limit_words(queue) == [
        "concurrency 5",
        "per worker 2",
        "per partition 1",
        "rate 10/1m",
        "partition rate 3/1m30s",
    ]
    assert rate_words(Rate(1, timedelta(days=1, milliseconds=5))) == "1/1d5ms"
    assert limit_words(Queue("free")) == []
