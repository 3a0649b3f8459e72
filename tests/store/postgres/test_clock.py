"""Without an injected clock every instant comes from the database clock, not the node's."""

from __future__ import annotations

from tests.store.helpers import raises_code

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _db_now(admin) -> int:
    row = admin.execute("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS n")
    return int(row.fetchone()["n"])


def test_leases_are_computed_from_the_database_clock(open_pg, admin, monkeypatch):
    # A node clock far in the past must not matter: jobledger never reads it here.
    import jobledger.clock

    monkeypatch.setattr(jobledger.clock, "system_clock", lambda: 1_000)
    store = open_pg(clock=None)
    before = _db_now(admin)
    job = store.create_job(id="j", kind="k", authority=AUTHORITY)
    occurrence = store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    claimed = store.claim_next(owner_id="w", lease_ms=60_000)
    after = _db_now(admin)
    assert claimed is not None and claimed.id == occurrence.id
    assert before <= job.created_at <= after
    assert before + 60_000 <= claimed.lease_expires_at <= after + 60_000
    assert before <= claimed.updated_at <= after
    migration = store.schema_info().migration
    assert migration.applied_at == 1_700_000_000_000  # the template was migrated with a fake clock


def test_an_occurrence_due_in_the_database_future_is_not_claimable(open_pg, admin):
    store = open_pg(clock=None)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    store.enqueue_occurrence(job_id="j", scheduled_for=_db_now(admin) + 60_000, trigger_key="t")
    assert store.claim_next(owner_id="w", lease_ms=1_000) is None
    store.enqueue_occurrence(job_id="j", scheduled_for=_db_now(admin) - 1, trigger_key="t")
    assert store.claim_next(owner_id="w", lease_ms=1_000) is not None


def test_a_lease_expires_by_the_database_clock(open_pg, admin):
    store = open_pg(clock=None)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    store.enqueue_occurrence(job_id="j", scheduled_for=0, trigger_key="t")
    first = store.claim_next(owner_id="w1", lease_ms=1)
    assert first is not None
    while _db_now(admin) <= first.lease_expires_at:
        pass
    second = store.claim_next(owner_id="w2", lease_ms=60_000)
    assert second is not None and second.fence == first.fence + 1
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.settle(occurrence_id=first.id, owner_id="w1", fence=first.fence, outcome="succeeded")
    assert [e.type for e in store.history(occurrence_id=first.id, limit=2)] == [
        "occurrence_reclaimed",
        "occurrence_claimed",
    ]


def test_an_injected_clock_still_wins(open_pg, clock):
    store = open_pg()  # the fixture injects the fake clock
    job = store.create_job(id="j", kind="k", authority=AUTHORITY)
    assert job.created_at == clock()


def test_store_now_reads_the_database_clock(open_pg, admin, monkeypatch):
    import jobledger.clock

    monkeypatch.setattr(jobledger.clock, "system_clock", lambda: 1_000)
    store = open_pg(clock=None)
    before = _db_now(admin)
    now = store.now()
    assert before <= now <= _db_now(admin)


def test_app_enqueues_at_the_database_clock_without_a_clock(open_pg, admin, monkeypatch):
    import jobledger
    import jobledger.clock

    monkeypatch.setattr(jobledger.clock, "system_clock", lambda: 1_000)
    store = open_pg(clock=None)
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    app = jobledger.App(store, authorize=jobledger.allow_all)
    before = _db_now(admin)
    occurrence = app.enqueue("j")
    assert before <= occurrence.scheduled_for <= _db_now(admin)
