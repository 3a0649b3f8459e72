"""A closed store: reads refuse, writes validate first and then refuse; close is idempotent."""

from __future__ import annotations

import pytest

from jobledger import Settlement

from .helpers import claim, enqueue, make_job, raises_code

CLOSED = "SCHEDULER_STORE_CLOSED"
INVALID = "SCHEDULER_INVALID_ARGUMENT"

READS = {
    "get_job": lambda s: s.get_job("job-a"),
    "get_job_invalid_id": lambda s: s.get_job(""),
    "get_occurrence": lambda s: s.get_occurrence("occ_x"),
    "get_occurrence_invalid_id": lambda s: s.get_occurrence(""),
    "list_occurrences_by_trigger": lambda s: s.list_occurrences_by_trigger(
        job_id="job-a", trigger_key="t"
    ),
    "list_occurrences_by_trigger_invalid": lambda s: s.list_occurrences_by_trigger(
        job_id="", trigger_key=""
    ),
    "history": lambda s: s.history(),
    "history_invalid_limit": lambda s: s.history(limit=0),
    "list_dead_letters": lambda s: s.list_dead_letters(job_id="job-a"),
    "list_dead_letters_invalid_limit": lambda s: s.list_dead_letters(limit="5"),
    "schema_info": lambda s: s.schema_info(),
}


def _writes(valid: bool):
    bad = "" if not valid else None

    def ident(value):
        return bad if bad is not None else value

    return {
        "create_job": lambda s, a: s.create_job(id=ident("job-z"), kind="k", authority=a),
        "update_job": lambda s, a: s.update_job(
            ident("job-a"), expected_revision=1, patch={"enabled": False}
        ),
        "enqueue_occurrence": lambda s, a: s.enqueue_occurrence(
            job_id=ident("job-a"), scheduled_for=0, trigger_key="t2"
        ),
        "enqueue_occurrence_once_per_trigger": lambda s, a: s.enqueue_occurrence_once_per_trigger(
            job_id=ident("job-a"), scheduled_for=0, trigger_key="t3"
        ),
        "claim_next": lambda s, a: s.claim_next(owner_id=ident("w1"), lease_ms=1_000),
        "claim_batch": lambda s, a: s.claim_batch(owner_id=ident("w1"), lease_ms=1_000, limit=2),
        "settle_batch": lambda s, a: s.settle_batch(
            [Settlement(occurrence_id=ident("occ_x"), owner_id="w1", fence=1, outcome="succeeded")]
        ),
        "settle_batch_empty": lambda s, a: s.settle_batch([] if valid else [None]),
        "claim_occurrence": lambda s, a: s.claim_occurrence(
            occurrence_id=ident("occ_x"), owner_id="w1", lease_ms=1_000
        ),
        "renew": lambda s, a: s.renew(
            occurrence_id=ident("occ_x"), owner_id="w1", fence=1, lease_ms=1_000
        ),
        "settle": lambda s, a: s.settle(
            occurrence_id=ident("occ_x"), owner_id="w1", fence=1, outcome="succeeded"
        ),
        "requeue_dead_letter": lambda s, a: s.requeue_dead_letter(
            occurrence_id=ident("occ_x"), expected_fence=1, reason="r", actor="a"
        ),
    }


@pytest.fixture
def closed(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t")
    store.close()
    return store


@pytest.mark.parametrize("name", sorted(READS))
def test_reads_on_a_closed_store_raise_store_closed(closed, name):
    with raises_code(CLOSED) as info:
        READS[name](closed)
    assert info.value.message == "Scheduler store is closed"


@pytest.mark.parametrize("name", sorted(_writes(True)))
def test_writes_on_a_closed_store_raise_store_closed(closed, authority, name):
    with raises_code(CLOSED):
        _writes(True)[name](closed, authority)


@pytest.mark.parametrize("name", sorted(_writes(False)))
def test_writes_on_a_closed_store_validate_arguments_first(closed, authority, name):
    with raises_code(INVALID):
        _writes(False)[name](closed, authority)


def test_close_is_idempotent(store):
    store.close()
    store.close()
    with raises_code(CLOSED):
        store.history()


def test_closing_one_handle_leaves_others_open(store, store_factory, clock, authority):
    make_job(store, authority, "job-a")
    other = store_factory()
    other.close()
    assert store.get_job("job-a") is not None
    enqueue(store, "job-a", clock(), "t")
    assert claim(store).fence == 1


def test_context_manager_returns_the_store_and_closes_it(store_factory, clock, authority):
    with store_factory() as opened:
        make_job(opened, authority, "job-a")
        assert opened.get_job("job-a").id == "job-a"
    with raises_code(CLOSED):
        opened.get_job("job-a")
    with raises_code(CLOSED):
        opened.claim_next(owner_id="w1", lease_ms=1_000)
    reopened = store_factory()
    assert reopened.get_job("job-a").id == "job-a"


def test_context_manager_closes_on_error(store_factory):
    with pytest.raises(RuntimeError), store_factory() as opened:
        raise RuntimeError("boom")
    with raises_code(CLOSED):
        opened.history()


def test_data_survives_close_and_reopen(store, store_factory, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    running = claim(store, "w1")
    store.close()
    reopened = store_factory()
    assert reopened.get_occurrence(occurrence.id) == running
    reopened.settle(occurrence_id=occurrence.id, owner_id="w1", fence=1, outcome="succeeded")
    assert reopened.get_occurrence(occurrence.id).status == "succeeded"
