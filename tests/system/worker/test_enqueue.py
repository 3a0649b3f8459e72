"""App.enqueue / enqueue_many / ensure_job / cancel on both stores (issue 8).

One call makes one occurrence; idempotency only when asked for, with a key; many in one
transaction, all or nothing; jobs declared idempotently at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock, run_until_idle

from .conftest import AUTHORITY


@pytest.fixture
def app(any_store: jobledger.Store) -> Iterator[jobledger.App]:
    with jobledger.App(any_store, name="shop", authorize=jobledger.allow_all) as app:
        app.create_job("mail", "send_mail")
        yield app


def total(store: jobledger.Store) -> int:
    return sum(count.count for count in store.count_occurrences())


# -- one call, one occurrence ---------------------------------------------------------------


@pytest.mark.timeout(300)  # 10,000 fsync'd commits: about 25 s on PostgreSQL on a busy 2-core box
def test_ten_thousand_enqueues_in_one_millisecond_make_ten_thousand_occurrences(
    app: jobledger.App, clock: FakeClock
):
    # Before issue 8 the default trigger key was manual:<ms>: calls in the same millisecond
    # merged, and raised SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH when their payloads differed.
    start = clock()
    made = [app.enqueue("mail", payload={"to": f"user-{n}@example.com"}) for n in range(10_000)]
    assert clock() == start  # the FakeClock never moved: all in one millisecond
    assert {o.scheduled_for for o in made} == {start}
    assert len({o.id for o in made}) == 10_000
    assert len({o.trigger_key for o in made}) == 10_000
    assert not any(o.deduplicated for o in made)
    assert app.store.count_occurrences(job_id="mail") == [
        jobledger.OccurrenceCount(kind="send_mail", status="queued", count=10_000)
    ]
    assert app.store.get_occurrence(made[1234].id).payload == {"to": "user-1234@example.com"}


def test_the_same_payload_twice_is_still_two_occurrences(app: jobledger.App):
    first = app.enqueue("mail", payload={"to": "ada@example.com"})
    second = app.enqueue("mail", payload={"to": "ada@example.com"})
    assert first.id != second.id
    assert total(app.store) == 2


# -- idempotency keys ------------------------------------------------------------------------


def test_the_same_key_is_the_same_occurrence(app: jobledger.App, clock: FakeClock):
    first = app.enqueue("mail", payload={"order": 42}, key="order-42")
    assert (first.trigger_key, first.deduplicated) == ("key:order-42", False)
    clock.advance(timedelta(minutes=5))
    again = app.enqueue("mail", payload={"order": 42}, key="order-42")
    assert (again.id, again.deduplicated) == (first.id, True)
    later = app.enqueue("mail", payload={"order": 42}, key="order-42", delay=timedelta(hours=1))
    assert (later.id, later.deduplicated) == (first.id, True)  # once per key, whatever the time
    same_job_payload = app.enqueue("mail", key="order-42")  # the job's payload: not compared
    assert same_job_payload.id == first.id
    assert app.enqueue("mail", payload={"order": 43}, key="order-43").id != first.id
    assert total(app.store) == 2
    enqueued = app.store.events(occurrence_id=first.id, event_type="occurrence_enqueued")
    assert len(enqueued) == 1


def test_a_key_reused_with_another_payload_is_refused(app: jobledger.App):
    first = app.enqueue("mail", payload={"order": 42}, key="order-42")
    with pytest.raises(jobledger.IdempotencyPayloadMismatch) as raised:
        app.enqueue("mail", payload={"order": 99}, key="order-42")
    assert raised.value.code == "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"
    assert raised.value.details == {"jobId": "mail", "triggerKey": "key:order-42"}
    assert total(app.store) == 1
    assert app.store.get_occurrence(first.id).payload == {"order": 42}


def test_keys_belong_to_their_job(app: jobledger.App):
    app.create_job("sms", "send_sms")
    mail = app.enqueue("mail", payload={"n": 1}, key="k-1")
    sms = app.enqueue("sms", payload={"n": 2}, key="k-1")
    assert mail.id != sms.id
    assert not sms.deduplicated


@pytest.mark.parametrize("key", ["", " ", "x" * 201, 42])
def test_a_bad_key_is_refused(app: jobledger.App, key: object):
    with pytest.raises(jobledger.InvalidArgument):
        app.enqueue("mail", payload={}, key=key)
    assert total(app.store) == 0


def test_keys_work_across_enqueue_and_enqueue_many(app: jobledger.App):
    single = app.enqueue("mail", payload={"n": 1}, key="a")
    many = app.enqueue_many("mail", [{"n": 1}, {"n": 2}], keys=["a", "b"])
    assert [(o.deduplicated, o.id == single.id) for o in many] == [(True, True), (False, False)]
    again = app.enqueue("mail", payload={"n": 2}, key="b")
    assert (again.id, again.deduplicated) == (many[1].id, True)
    with pytest.raises(jobledger.IdempotencyPayloadMismatch):
        app.enqueue("mail", payload={"n": 3}, key="b")
    assert total(app.store) == 2


def test_a_key_mismatch_in_enqueue_many_writes_nothing(app: jobledger.App):
    app.enqueue("mail", payload={"n": 1}, key="a")
    with pytest.raises(jobledger.IdempotencyPayloadMismatch) as raised:
        app.enqueue_many("mail", [{"n": 2}, {"n": 9}], keys=["b", "a"])
    assert raised.value.details == {"jobId": "mail", "triggerKey": "key:a", "index": 1}
    assert total(app.store) == 1  # "b" must not have been written


def test_enqueue_many_keys_must_match_the_payloads(app: jobledger.App):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        app.enqueue_many("mail", [{"n": 1}, {"n": 2}], keys=["only-one"])
    assert raised.value.details == {"field": "keys"}
    assert total(app.store) == 0


# -- enqueue_many ----------------------------------------------------------------------------


def test_enqueue_many_makes_one_occurrence_per_payload_in_one_transaction(
    app: jobledger.App, clock: FakeClock
):
    made = app.enqueue_many("mail", [{"n": n} for n in range(50)], delay=timedelta(seconds=10))
    assert [o.payload for o in made] == [{"n": n} for n in range(50)]
    assert len({o.id for o in made}) == 50
    assert {o.scheduled_for for o in made} == {clock() + 10_000}
    assert all(o.trigger_key.startswith("enqueue:") for o in made)
    # The single call's events, one per occurrence.
    events = app.store.events(job_id="mail", event_type="occurrence_enqueued", limit=100)
    assert sorted(e.occurrence_id for e in events) == sorted(o.id for o in made)
    with_job_payload = app.enqueue_many("mail", [jobledger.UNSET], at_ms=clock())
    assert with_job_payload[0].payload is None  # the job's own payload


def test_enqueue_many_takes_at_most_ten_thousand(app: jobledger.App):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        app.enqueue_many("mail", [{"n": n} for n in range(10_001)])
    assert raised.value.details == {"count": 10_001, "limit": 10_000}
    assert total(app.store) == 0
    made = app.enqueue_many("mail", [{"n": n} for n in range(10_000)])
    assert len({o.id for o in made}) == 10_000
    assert total(app.store) == 10_000


def test_enqueue_many_is_all_or_nothing(app: jobledger.App, clock: FakeClock):
    with pytest.raises(jobledger.NotFound):
        app.enqueue_many("no-such-job", [{"n": 1}, {"n": 2}])
    with pytest.raises(jobledger.InvalidArgument) as raised:
        app.enqueue_many("mail", [{"n": 1}, {"bad": float("nan")}, {"n": 3}])
    assert raised.value.details["index"] == 1
    assert total(app.store) == 0


def test_a_batch_with_one_bad_job_id_writes_nothing(app: jobledger.App, clock: FakeClock):
    requests = [
        jobledger.EnqueueRequest(job_id="mail", scheduled_for=clock(), trigger_key=f"t{n}")
        for n in range(5)
    ]
    requests.insert(3, jobledger.EnqueueRequest("no-such-job", clock(), "t-bad"))
    with pytest.raises(jobledger.NotFound) as raised:
        app.store.enqueue_batch(requests)
    assert raised.value.details["index"] == 3
    assert total(app.store) == 0
    assert app.store.events(job_id="mail", event_type="occurrence_enqueued") == []


def test_a_disabled_job_refuses_the_whole_batch(app: jobledger.App):
    app.ensure_job("mail", "send_mail", enabled=False)
    with pytest.raises(jobledger.JobDisabled):
        app.enqueue_many("mail", [{"n": 1}])
    with pytest.raises(jobledger.JobDisabled):
        app.enqueue("mail", payload={"n": 1})
    assert total(app.store) == 0


# -- ensure_job ------------------------------------------------------------------------------


def test_ensure_job_is_idempotent(app: jobledger.App):
    first = app.ensure_job("digest", "send_digest", payload={"hour": 2}, max_attempts=5)
    assert (first.revision, first.kind, first.max_attempts) == (1, "send_digest", 5)
    assert first.authority["principal"] == {"type": "app", "id": "shop"}
    for _ in range(3):
        again = app.ensure_job("digest", "send_digest", payload={"hour": 2}, max_attempts=5)
        assert again.revision == 1
        assert again == first
    assert [e.type for e in app.store.history(job_id="digest")] == ["job_created"]


def test_ensure_job_updates_to_a_changed_declaration_with_cas(app: jobledger.App):
    app.handler("send_digest")(lambda ctx: ctx.job.payload)
    app.ensure_job("digest", "send_digest", payload={"hour": 2})
    before = app.enqueue("digest")
    changed = app.ensure_job("digest", "send_digest", payload={"hour": 3})
    assert (changed.revision, changed.payload) == (2, {"hour": 3})
    assert app.ensure_job("digest", "send_digest", payload={"hour": 3}).revision == 2
    types = [e.type for e in reversed(app.store.history(job_id="digest"))]
    assert types.count("job_updated") == 1
    after = app.enqueue("digest")
    results = {r.occurrence.id: r for r in run_until_idle(app)}
    # A new default payload does not make the backlog stale (SPEC §14): both run, on the
    # job as it is now.
    assert (results[before.id].status, results[before.id].result) == ("succeeded", {"hour": 3})
    assert (results[after.id].status, results[after.id].result) == ("succeeded", {"hour": 3})
    # A new authority does: the occurrence enqueued under it is not run with the new one.
    stale = app.enqueue("digest")
    app.ensure_job("digest", "send_digest", payload={"hour": 3}, authority=AUTHORITY)
    [result] = run_until_idle(app)
    assert (result.occurrence.id, result.error["code"]) == (
        stale.id,
        "SCHEDULER_RUNTIME_STALE_REVISION",
    )


def test_ensure_job_can_change_every_field(app: jobledger.App):
    app.ensure_job("j", "k1")
    job = app.ensure_job(
        "j",
        "k2",
        payload=[1],
        authority=AUTHORITY,
        max_attempts=7,
        enabled=False,
    )
    assert (job.revision, job.kind, job.payload, job.max_attempts, job.enabled) == (
        2,
        "k2",
        [1],
        7,
        False,
    )
    assert job.authority["principal"] == AUTHORITY["principal"]


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_a_queued_or_waiting_occurrence(app: jobledger.App, clock: FakeClock):
    queued = app.enqueue("mail", payload={"n": 1})
    cancelled = app.cancel(queued.id, reason="customer unsubscribed")
    assert cancelled.status == "cancelled"
    assert cancelled.last_error == {
        "code": "cancelled",
        "message": "customer unsubscribed",
        "actor": "app:shop",
    }
    [event] = app.store.events(occurrence_id=queued.id, event_type="occurrence_cancelled")
    assert event.data["actor"] == "app:shop"
    assert event.data["reason"] == "customer unsubscribed"
    assert event.data["previousStatus"] == "queued"

    app.handler("send_mail")(lambda ctx: 1 / 0)
    waiting = app.enqueue("mail", payload={"n": 2})
    [failed] = run_until_idle(app)
    assert failed.status == "retry_wait"
    assert app.cancel(waiting.id, reason="gave up", actor="ops:ada").status == "cancelled"
    clock.advance(timedelta(hours=1))
    assert list(run_until_idle(app)) == []  # cancelled occurrences are never claimed
    with pytest.raises(jobledger.Conflict) as raised:
        app.cancel(waiting.id, reason="again")
    assert raised.value.code == "SCHEDULER_CANCEL_CONFLICT"
    assert raised.value.details["status"] == "cancelled"
    with pytest.raises(jobledger.NotFound):
        app.cancel("occ_missing", reason="x")


# -- refusing what a backend would ignore ------------------------------------------------------


def test_app_refuses_a_clock_for_a_store_it_was_given(any_store: jobledger.Store):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.App(any_store, clock=FakeClock())
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"field": "clock"}


@pytest.mark.postgres
@pytest.mark.parametrize(
    "option", [{"busy_timeout_ms": 1000}, {"synchronous": "NORMAL"}], ids=["busy", "sync"]
)
def test_open_store_refuses_sqlite_options_for_postgres(postgres_database_url, option):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.open_store(postgres_database_url, **option)
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert raised.value.details == {"fields": sorted(option)}


def test_open_store_refuses_postgres_options_for_sqlite(tmp_path: Path):
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.open_store(tmp_path / "db" / "s.sqlite3", pool_max_size=4)
    assert raised.value.details == {"fields": ["pool_max_size"]}
    assert not (tmp_path / "db" / "s.sqlite3").exists()


def test_an_unsafe_path_raises_its_own_exception_class(tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    os.symlink(real, link, target_is_directory=True)
    with pytest.raises(jobledger.UnsafePath) as raised:
        jobledger.open_store(link / "jobs.sqlite3")
    assert raised.value.code == "SCHEDULER_UNSAFE_PATH"
    assert isinstance(raised.value, jobledger.SchedulerError)
    assert list(real.iterdir()) == []


def test_an_operator_disabling_a_job_is_not_undone_by_the_next_start(app: jobledger.App):
    """Issue 32 item 4 (jobs): a job an operator disabled (dashboard, `jobledger job disable`)
    was enabled again by the next process whose ensure_job declares enabled=True."""
    app.handler("send_digest")(lambda ctx: None)
    app.ensure_job("digest", "send_digest", max_attempts=3)
    job = app.store.get_job("digest")
    assert job is not None and job.operator_fields == ()
    app.store.update_job(
        "digest", expected_revision=job.revision, patch={"enabled": False}, actor="ops:alice"
    )
    assert app.store.get_job("digest").operator_fields == ("enabled",)  # type: ignore[union-attr]
    # The next process starts with the same declaration: nothing is written.
    again = app.ensure_job("digest", "send_digest", max_attempts=3)
    assert (again.enabled, again.revision) == (False, job.revision + 1)
    # A deploy changes another field: applied; the operator's `enabled` still stands.
    changed = app.ensure_job("digest", "send_digest", max_attempts=5)
    assert (changed.enabled, changed.max_attempts) == (False, 5)
    assert changed.declared is not None and changed.declared["max_attempts"] == 5
    # A deploy that changes `enabled` in code takes it back.
    app.ensure_job("digest", "send_digest", max_attempts=5, enabled=False)
    retaken = app.ensure_job("digest", "send_digest", max_attempts=5, enabled=True)
    assert retaken.enabled is True and retaken.operator_fields == ()
    sources = [
        e.data.get("source", "operator")
        for e in reversed(app.store.history(job_id="digest"))
        if e.type == "job_updated"
    ]
    assert sources == ["operator", "declaration", "declaration"]  # step 5 recorded, no event


def test_handler_options_that_are_not_part_of_the_job_write_nothing(any_store):
    """Issue 32 item 1: adding handler options that do not change the job (retry, timeout) is
    an unchanged declaration; a new on_lost_lease is a change, and the backlog still runs."""
    first = jobledger.App(any_store, name="shop", authorize=jobledger.allow_all)
    first.handler("charge")(lambda ctx: "ok")
    job = first.ensure_job("charge", "charge")
    queued = first.enqueue("charge")
    second = jobledger.App(any_store, name="shop", authorize=jobledger.allow_all)
    second.handler(
        "charge", retry=jobledger.FixedBackoff(timedelta(seconds=1)), timeout=timedelta(seconds=5)
    )(lambda ctx: "ok")
    assert second.ensure_job("charge", "charge").revision == job.revision
    third = jobledger.App(any_store, name="shop", authorize=jobledger.allow_all)
    third.handler("charge", on_lost_lease="adjudicate")(lambda ctx: "ok")
    assert third.ensure_job("charge", "charge").revision == job.revision + 1
    [result] = run_until_idle(third)
    assert (result.occurrence.id, result.status) == (queued.id, "succeeded")
