"""Operators' reads of occurrences (schema v5): pages newest first by insertion order under
every filter, capped counts that say they are capped, and prune's set-based batches — on both
stores."""

from __future__ import annotations

import pytest

from jobledger.store.operations import listing

from .helpers import claim, enqueue, fail, make_job, raises_code, succeed

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def _seed(store, clock, authority):
    """Jobs a (kind mail), b (kind sms) and c (kind mail); 12 occurrences enqueued in turn, a
    quarter of them settled (succeeded) and one dead-lettered. Returns the ids, oldest first."""
    make_job(store, authority, "job-a", kind="mail")
    make_job(store, authority, "job-b", kind="sms")
    make_job(store, authority, "job-c", kind="mail", max_attempts=1)
    ids = []
    for i in range(12):
        job = ("job-a", "job-b", "job-c")[i % 3]
        ids.append(enqueue(store, job, clock(), f"k{i}").id)
    for occurrence_id in (ids[0], ids[4], ids[8]):
        running = store.claim_occurrence(occurrence_id=occurrence_id, owner_id="w", lease_ms=100)
        succeed(store, running)
    running = store.claim_occurrence(occurrence_id=ids[2], owner_id="w", lease_ms=100)
    fail(store, running)
    return ids


def _all_pages(store, **filters):
    pages, cursor = [], None
    while True:
        page = store.list_occurrences(limit=2, cursor=cursor, **filters)
        pages.append([o.id for o in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return pages


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"status": "queued"},
        {"status": "succeeded"},
        {"kind": "mail"},
        {"kind": "mail", "status": "queued"},
        {"job_id": "job-a"},
        {"job_id": "job-a", "status": "queued"},
        {"job_id": "job-c", "kind": "mail", "status": "dead_letter"},
    ],
    ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "none",
)
def test_pages_are_newest_first_under_every_filter(store, clock, authority, filters):
    ids = _seed(store, clock, authority)
    everything = {o.id: o for o in store.list_occurrences(limit=100).items}
    assert list(everything) == ids[::-1]  # insertion order, newest first
    expected = [
        i
        for i in ids[::-1]
        if ("status" not in filters or everything[i].status == filters["status"])
        and ("kind" not in filters or everything[i].kind == filters["kind"])
        and ("job_id" not in filters or everything[i].job_id == filters["job_id"])
    ]
    pages = _all_pages(store, **filters)
    assert [i for page in pages for i in page] == expected
    assert all(len(page) == 2 for page in pages[:-1])


def test_a_job_page_with_a_filter_walks_a_bounded_number_of_rows(
    store, clock, authority, monkeypatch
):
    ids = _seed(store, clock, authority)
    monkeypatch.setattr(listing, "JOB_SCAN", 2)
    # job-a holds ids 0, 3, 6, 9 (0 succeeded): each page looks at two of its rows at most, so a
    # page may be short and still have a cursor; walking them all finds every match.
    first = store.list_occurrences(job_id="job-a", status="succeeded", limit=5)
    assert first.items == () and first.next_cursor is not None
    pages = _all_pages(store, job_id="job-a", status="succeeded")
    assert [i for page in pages for i in page] == [ids[0]]


def test_cursors_old_and_bad(store, clock, authority):
    ids = _seed(store, clock, authority)
    page = store.list_occurrences(limit=3)
    assert page.next_cursor is not None and page.next_cursor.startswith("s")
    # A cursor of the earlier form (created_at.occurrence_id) pages on from that occurrence.
    newest = store.get_occurrence(ids[-1])
    older = store.list_occurrences(limit=2, cursor=f"{newest.created_at}.{newest.id}")
    assert [o.id for o in older.items] == [ids[-2], ids[-3]]
    for bad in ("s", "x12", "12", f"s{2**63}", 12):
        with raises_code(INVALID):
            store.list_occurrences(cursor=bad)


def test_capped_counts_say_so(store, clock, authority):
    _seed(store, clock, authority)
    exact = {(c.kind, c.status): c.count for c in store.count_occurrences()}
    assert exact == {
        ("mail", "queued"): 5,
        ("mail", "succeeded"): 2,
        ("mail", "dead_letter"): 1,
        ("sms", "queued"): 3,
        ("sms", "succeeded"): 1,
    }
    capped = store.count_occurrences(cap=2)
    assert {(c.kind, c.status): (c.count, c.capped) for c in capped} == {
        ("mail", "queued"): (2, True),
        ("mail", "succeeded"): (2, True),
        ("mail", "dead_letter"): (1, False),
        ("sms", "queued"): (2, True),
        ("sms", "succeeded"): (1, False),
    }
    assert all(not c.capped for c in store.count_occurrences(cap=1000))
    # A job's capped counts are those of its newest occurrences.
    job = store.count_occurrences(job_id="job-a", cap=3)
    assert {(c.status, c.count, c.capped) for c in job} == {("queued", 3, True)}
    whole = store.count_occurrences(job_id="job-a", cap=4)
    assert {(c.status, c.count) for c in whole} == {("queued", 3), ("succeeded", 1)}
    for bad in (0, -1, 1_000_001, 2.5, "10", True):
        with raises_code(INVALID):
            store.count_occurrences(cap=bad)


def test_prune_in_batches_removes_what_points_at_the_rows(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    ids = [enqueue(store, "job-a", clock(), f"key:{i}").id for i in range(7)]
    for occurrence_id in ids[:6]:
        running = store.claim_occurrence(occurrence_id=occurrence_id, owner_id="w", lease_ms=99)
        if occurrence_id == ids[5]:
            fail(store, running)
        else:
            succeed(store, running)
    clock.advance(1_000)
    reports = []
    report = store.prune(before=clock(), actor="ops", batch_size=2, on_batch=reports.append)
    assert report.occurrences == 6 and report.by_status == {"succeeded": 5, "dead_letter": 1}
    # In insertion order, whatever the status: the dead letter rides in the third batch.
    assert [r.occurrences for r in reports] == [2, 2, 2] and report.batches == 3
    assert [r.by_status for r in reports][2] == {"succeeded": 1, "dead_letter": 1}
    assert report.events == 6 * 3
    assert [o.id for o in store.list_occurrences().items] == [ids[6]]  # live work stays
    assert [r.data["occurrences"] for r in store.audit_log()] == [2, 2, 2]
    assert store.audit_log()[0].data["statuses"] == {"dead_letter": 1, "succeeded": 1}
    # The keys went with their occurrences: the key enqueues again, a new occurrence.
    again = enqueue(store, "job-a", clock(), "key:0")
    assert not again.deduplicated
    assert claim(store).id in (ids[6], again.id)


def test_prune_leaves_rows_settled_after_the_cutoff(store, clock, authority):
    make_job(store, authority, "job-a")
    old = enqueue(store, "job-a", clock(), "old")
    young = enqueue(store, "job-a", clock(), "young")
    succeed(store, store.claim_occurrence(occurrence_id=old.id, owner_id="w", lease_ms=99))
    clock.advance(500)
    cutoff = clock()
    clock.advance(500)
    succeed(store, store.claim_occurrence(occurrence_id=young.id, owner_id="w", lease_ms=99))
    report = store.prune(before=cutoff, actor="ops")
    assert report.occurrences == 1
    assert store.get_occurrence(old.id) is None
    assert store.get_occurrence(young.id) is not None


def test_prune_walks_past_live_rows_and_stops_at_the_cutoff(store, clock, authority):
    make_job(store, authority, "job-a")
    live = enqueue(store, "job-a", clock(), "live")  # the oldest row, still queued
    settled = [enqueue(store, "job-a", clock(), f"s{i}") for i in range(3)]
    for occurrence in settled:
        succeed(
            store, store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=9)
        )
    clock.advance(1_000)
    cutoff = clock()
    late = enqueue(store, "job-a", clock(), "late")  # created after the cutoff: the walk ends
    succeed(store, store.claim_occurrence(occurrence_id=late.id, owner_id="w", lease_ms=9))
    clock.advance(1_000)
    report = store.prune(before=cutoff, actor="ops", batch_size=1)
    assert report.occurrences == 3 and report.batches == 3
    assert store.get_occurrence(live.id) is not None
    assert store.get_occurrence(late.id) is not None
    assert all(store.get_occurrence(o.id) is None for o in settled)
    # what prune keeps by status: only the statuses asked for go
    again = store.prune(before=clock(), actor="ops", statuses=["dead_letter"])
    assert again.occurrences == 0 and store.get_occurrence(late.id) is not None
