"""Enqueue: deterministic identity, deduplication, payload binding, once-per-trigger (§3.5)."""

from __future__ import annotations

import re

import pytest

from jobledger import derive_occurrence_identity, normalize_authority

from .helpers import enqueue, make_job, raises_code, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def test_enqueue_creates_a_queued_occurrence(store, clock, authority):
    make_job(store, authority, "job-a", payload={"to": "a"}, max_attempts=4)
    scheduled = clock() + 60_000
    occurrence = enqueue(store, "job-a", scheduled, "agenda:daily")
    expected_id, expected_key = derive_occurrence_identity(
        job_id="job-a", job_revision=1, scheduled_for=scheduled, trigger_key="agenda:daily"
    )
    assert re.fullmatch(r"occ_[0-9a-f]{64}", occurrence.id)
    assert occurrence.id == expected_id
    assert occurrence.idempotency_key == expected_key
    assert occurrence.deduplicated is False
    assert occurrence.job_id == "job-a"
    assert occurrence.job_revision == 1
    assert occurrence.trigger_key == "agenda:daily"
    assert occurrence.scheduled_for == scheduled
    assert occurrence.available_at == scheduled
    assert occurrence.status == "queued"
    assert (occurrence.attempt, occurrence.fence, occurrence.max_attempts) == (0, 0, 4)
    assert occurrence.lease_owner is None
    assert occurrence.lease_expires_at is None
    assert occurrence.payload == {"to": "a"}
    assert occurrence.authority == normalize_authority(authority)
    assert occurrence.last_error is None
    assert occurrence.result is None
    assert occurrence.created_at == occurrence.updated_at == clock()
    assert occurrence.settled_at is None
    stored = store.get_occurrence(occurrence.id)
    assert stored == occurrence
    assert stored.deduplicated is False
    [event] = store.history(occurrence_id=occurrence.id)
    assert event.type == "occurrence_enqueued"
    assert event.job_id == "job-a"
    assert event.owner_id is None
    assert event.fence is None
    assert event.occurred_at == clock()
    assert event.data == {
        "jobRevision": 1,
        "scheduledFor": scheduled,
        "triggerKey": "agenda:daily",
    }


def test_identity_matches_the_reference_vector(store, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", 1_700_000_000_000, "agenda:daily")
    digest = "446d76bcd5745d299bb10199ea7e6822aa628b68173303c1a22b74e1cc0a71d3"
    assert occurrence.id == f"occ_{digest}"
    assert occurrence.idempotency_key == f"scheduler:v1:{digest}"


def test_injection_looking_identifiers_are_plain_data(store, authority):
    job_id = "job'; DROP TABLE jobs; --"
    make_job(store, authority, job_id)
    occurrence = enqueue(store, job_id, 5, "key'\"")
    assert store.get_occurrence(occurrence.id).job_id == job_id
    assert store.get_job(job_id) is not None


def test_available_at_may_differ_from_scheduled_for(store, clock, authority):
    make_job(store, authority, "job-a")
    early = enqueue(store, "job-a", clock() + 10_000, "early", available_at=clock() - 5)
    assert early.available_at == clock() - 5
    assert early.scheduled_for == clock() + 10_000


def test_same_firing_is_deduplicated_without_a_second_event(store, store_factory, clock, authority):
    make_job(store, authority, "job-a")
    first = enqueue(store, "job-a", clock(), "t")
    clock.advance(10)
    again = enqueue(store, "job-a", clock() - 10, "t", available_at=clock() + 99_999)
    assert again.deduplicated is True
    assert again.id == first.id
    assert again.available_at == first.available_at  # a duplicate never moves availability
    assert again.created_at == first.created_at
    other_handle = enqueue(store_factory(), " job-a ", clock() - 10, " t ")
    assert other_handle.deduplicated is True
    assert other_handle.id == first.id
    assert types(store.history(job_id="job-a")) == ["occurrence_enqueued", "job_created"]
    assert len(store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")) == 1


def test_dedup_returns_the_current_state(store, clock, authority):
    make_job(store, authority, "job-a")
    first = enqueue(store, "job-a", clock(), "t")
    claimed = store.claim_occurrence(occurrence_id=first.id, owner_id="w1", lease_ms=500)
    again = enqueue(store, "job-a", clock(), "t")
    assert again.deduplicated is True
    assert again.status == "running"
    assert again.fence == claimed.fence == 1
    assert again.lease_owner == "w1"


def test_different_scheduled_for_or_trigger_key_is_a_new_occurrence(store, clock, authority):
    make_job(store, authority, "job-a")
    a = enqueue(store, "job-a", clock(), "t")
    b = enqueue(store, "job-a", clock() + 1, "t")
    c = enqueue(store, "job-a", clock(), "u")
    assert len({a.id, b.id, c.id}) == 3
    assert not (b.deduplicated or c.deduplicated)


def test_job_revision_change_gives_a_new_identity(store, clock, authority):
    make_job(store, authority, "job-a", payload={"v": 1})
    first = enqueue(store, "job-a", clock(), "t")
    store.update_job("job-a", expected_revision=1, patch={"payload": {"v": 2}})
    second = enqueue(store, "job-a", clock(), "t")
    assert second.deduplicated is False
    assert second.id != first.id
    assert second.job_revision == 2
    assert second.payload == {"v": 2}
    assert store.get_occurrence(first.id).payload == {"v": 1}
    listed = store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")
    assert {o.id for o in listed} == {first.id, second.id}


def test_enqueue_snapshots_job_fields(store, clock, authority):
    make_job(store, authority, "job-a", payload={"v": 1}, max_attempts=2)
    occurrence = enqueue(store, "job-a", clock(), "t")
    other = {"principal": {"type": "agent", "id": "x"}, "workspaceId": "ws"}
    store.update_job(
        "job-a",
        expected_revision=1,
        patch={"payload": {"v": 9}, "max_attempts": 7, "authority": other},
    )
    stored = store.get_occurrence(occurrence.id)
    assert stored.payload == {"v": 1}
    assert stored.max_attempts == 7  # changed by issue 32: a new max_attempts follows (SPEC §14)
    assert stored.authority == normalize_authority(authority)


def test_payload_override_is_stored_and_bound_to_identity(store, clock, authority):
    make_job(store, authority, "job-a", payload={"default": True})
    occurrence = enqueue(store, "job-a", clock(), "t", payload={"override": 1})
    assert occurrence.payload == {"override": 1}
    again = enqueue(store, "job-a", clock(), "t", payload={"override": 1})
    assert again.deduplicated is True
    assert again.id == occurrence.id
    assert len(store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")) == 1
    with raises_code("SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH") as info:
        enqueue(store, "job-a", clock(), "t", payload={"override": 2})
    assert info.value.details == {"jobId": "job-a", "triggerKey": "t"}
    assert "different payload" in info.value.message
    with raises_code("SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"):
        enqueue(store, "job-a", clock(), "t")  # the job's payload differs from the override
    assert store.get_occurrence(occurrence.id).payload == {"override": 1}
    assert types(store.history(occurrence_id=occurrence.id)) == ["occurrence_enqueued"]


def test_null_payload_override_is_an_override(store, clock, authority):
    make_job(store, authority, "job-a", payload={"default": True})
    occurrence = enqueue(store, "job-a", clock(), "t", payload=None)
    assert occurrence.payload is None
    with raises_code("SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"):
        enqueue(store, "job-a", clock(), "t")


def test_payload_comparison_is_canonical(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t", payload={"b": 1, "a": [1.0, 2]})
    again = enqueue(store, "job-a", clock(), "t", payload={"a": [1, 2], "b": 1})
    assert again.deduplicated is True


def test_enqueue_missing_job_is_not_found(store, clock):
    with raises_code("SCHEDULER_NOT_FOUND"):
        enqueue(store, "ghost", clock(), "t")
    assert store.history() == []


def test_enqueue_disabled_job_is_refused(store, clock, authority):
    make_job(store, authority, "job-a", enabled=False)
    with raises_code("SCHEDULER_JOB_DISABLED"):
        enqueue(store, "job-a", clock(), "t")
    assert store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t") == []
    store.update_job("job-a", expected_revision=1, patch={"enabled": True})
    assert enqueue(store, "job-a", clock(), "t").status == "queued"


BAD_ENQUEUE = [
    ("job_id", ""),
    ("job_id", "a\x00b"),
    ("job_id", 3),
    ("scheduled_for", -1),
    ("scheduled_for", True),
    ("scheduled_for", "1700000000000"),
    ("scheduled_for", 1.5),
    ("scheduled_for", 2**53),
    ("scheduled_for", None),
    ("trigger_key", ""),
    ("trigger_key", "t" * 257),
    ("trigger_key", None),
    ("available_at", -5),
    ("available_at", False),
    ("available_at", "now"),
    ("payload", float("nan")),
    ("payload", {"a": {1, 2}}),
]


@pytest.mark.parametrize("once", [False, True])
@pytest.mark.parametrize(("field", "value"), BAD_ENQUEUE)
def test_enqueue_rejects_invalid_arguments(store, clock, authority, field, value, once):
    make_job(store, authority, "job-a")
    arguments = {"job_id": "job-a", "scheduled_for": clock(), "trigger_key": "t", field: value}
    operation = store.enqueue_occurrence_once_per_trigger if once else store.enqueue_occurrence
    with raises_code(INVALID):
        operation(**arguments)
    assert types(store.history()) == ["job_created"]


def test_once_per_trigger_inserts_then_returns_the_existing_one(store, clock, authority):
    make_job(store, authority, "job-a", payload={"v": 1})
    first = store.enqueue_occurrence_once_per_trigger(
        job_id="job-a", scheduled_for=clock(), trigger_key="loop:1"
    )
    assert first.deduplicated is False
    assert first.status == "queued"
    # The job changes (new revision, new payload, then disabled): still the same occurrence.
    store.update_job("job-a", expected_revision=1, patch={"payload": {"v": 2}})
    store.update_job("job-a", expected_revision=2, patch={"enabled": False})
    again = store.enqueue_occurrence_once_per_trigger(
        job_id="job-a", scheduled_for=clock() + 5_000, trigger_key="loop:1", payload={"x": 1}
    )
    assert again.deduplicated is True
    assert again.id == first.id
    assert again.job_revision == 1
    assert again.payload == {"v": 1}
    assert types(store.history(occurrence_id=first.id)) == ["occurrence_enqueued"]


def test_once_per_trigger_behaves_like_enqueue_when_none_exists(store, clock, authority):
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.enqueue_occurrence_once_per_trigger(
            job_id="ghost", scheduled_for=clock(), trigger_key="t"
        )
    make_job(store, authority, "job-a", enabled=False)
    with raises_code("SCHEDULER_JOB_DISABLED"):
        store.enqueue_occurrence_once_per_trigger(
            job_id="job-a", scheduled_for=clock(), trigger_key="t"
        )
    store.update_job("job-a", expected_revision=1, patch={"enabled": True})
    created = store.enqueue_occurrence_once_per_trigger(
        job_id="job-a",
        scheduled_for=clock(),
        trigger_key="t",
        available_at=clock() + 7,
        payload=[1],
    )
    expected_id, _ = derive_occurrence_identity(
        job_id="job-a", job_revision=2, scheduled_for=clock(), trigger_key="t"
    )
    assert created.id == expected_id
    assert created.available_at == clock() + 7
    assert created.payload == [1]
    assert types(store.history(occurrence_id=created.id)) == ["occurrence_enqueued"]


def test_once_per_trigger_returns_an_occurrence_made_by_plain_enqueue(store, clock, authority):
    make_job(store, authority, "job-a")
    plain = enqueue(store, "job-a", clock(), "t")
    once = store.enqueue_occurrence_once_per_trigger(
        job_id="job-a", scheduled_for=clock() + 1, trigger_key="t"
    )
    assert once.deduplicated is True
    assert once.id == plain.id


def test_once_per_trigger_with_two_rows_is_data_corrupt(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t")
    enqueue(store, "job-a", clock() + 1, "t")
    with raises_code("SCHEDULER_DATA_CORRUPT"):
        store.enqueue_occurrence_once_per_trigger(
            job_id="job-a", scheduled_for=clock() + 2, trigger_key="t"
        )


def test_list_occurrences_by_trigger_orders_and_limits(store, clock, authority):
    make_job(store, authority, "job-a")
    make_job(store, authority, "job-b")
    created = []
    for index in range(4):
        created.append(enqueue(store, "job-a", 1_000 + index, "t"))
        clock.advance(1)
    same_instant = [enqueue(store, "job-a", 9_000 + index, "t") for index in range(3)]
    enqueue(store, "job-a", 1, "other")
    enqueue(store, "job-b", 1, "t")
    expected = [o.id for o in created] + sorted(o.id for o in same_instant)

    def listed(limit):
        return [
            o.id
            for o in store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t", limit=limit)
        ]

    assert [o.id for o in store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t")] == (
        expected[:2]
    )
    assert listed(5) == expected[:5]
    assert listed(500) == expected
    assert listed(0) == expected[:1]
    assert listed(-3) == expected[:1]
    assert listed(1.5) == expected[:2]  # a non-integer falls back to the default, 2
    assert listed(3.0) == expected[:3]
    assert all(
        not o.deduplicated
        for o in store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t", limit=10)
    )
    assert store.list_occurrences_by_trigger(job_id="nobody", trigger_key="t") == []


def test_list_occurrences_by_trigger_clamps_at_200(store, clock, authority):
    make_job(store, authority, "job-a")
    for index in range(205):
        enqueue(store, "job-a", index, "t")
    assert (
        len(store.list_occurrences_by_trigger(job_id="job-a", trigger_key="t", limit=10_000)) == 200
    )


def test_list_occurrences_by_trigger_rejects_invalid_identifiers(store):
    with raises_code(INVALID):
        store.list_occurrences_by_trigger(job_id="", trigger_key="t")
    with raises_code(INVALID):
        store.list_occurrences_by_trigger(job_id="j", trigger_key="a\tb")


def test_get_occurrence(store):
    assert store.get_occurrence("occ_missing") is None
    with raises_code(INVALID):
        store.get_occurrence("")


def test_enqueue_bumps_the_work_signal(store, clock, authority):
    make_job(store, authority, "job-a")
    before = store.work_signal.generation
    enqueue(store, "job-a", clock(), "t")
    assert store.work_signal.generation > before
