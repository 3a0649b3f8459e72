"""claim_batch(limit=k) is exactly k claim_next calls at one instant: a differential test.

Two files get the same random history (jobs of two kinds in two workspaces, a disabled job,
queued and future occurrences, expired leases to reclaim, final attempts to dead-letter). One
then takes a single ``claim_batch``, the other the same number of ``claim_next`` calls; the
claims, every occurrence row and the whole event log (ids included) must come out identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobledger
from jobledger.testing import FakeClock

AUTHORITY: dict[str, Any] = {"principal": {"type": "user", "id": "u1"}}
JOBS = [
    ("job-a", "email", "ws-1", 3),
    ("job-b", "sms", "ws-2", 1),
    ("job-c", "email", "ws-2", 2),
    ("job-off", "email", "ws-1", 3),
]

history_step = st.one_of(
    st.tuples(st.just("enqueue"), st.sampled_from(JOBS), st.integers(-500, 200)),
    st.tuples(st.just("claim"), st.integers(1, 400), st.none()),
    st.tuples(st.just("advance"), st.integers(1, 300), st.none()),
)
filters = st.fixed_dictionaries(
    {},
    optional={
        "job_kind": st.sampled_from(["email", "sms"]),
        "workspace_id": st.sampled_from(["ws-1", "ws-2"]),
    },
)


def _build(path: Path, steps: list[tuple[str, Any, Any]]) -> tuple[jobledger.Store, FakeClock]:
    clock = FakeClock()
    store = jobledger.open_store(str(path), clock=clock)
    for job_id, kind, workspace, attempts in JOBS:
        store.create_job(
            id=job_id,
            kind=kind,
            authority={**AUTHORITY, "workspaceId": workspace},
            max_attempts=attempts,
        )
    for index, (action, first, second) in enumerate(steps):
        if action == "enqueue":
            job_id = first[0]
            if job_id == "job-off":
                continue  # disabled below; it keeps the one occurrence enqueued at the end
            store.enqueue_occurrence(
                job_id=job_id, scheduled_for=clock() + second, trigger_key=f"t{index}"
            )
        elif action == "claim":
            store.claim_next(owner_id="previous", lease_ms=first)  # expires later: a reclaim
        else:
            clock.advance(first)
    store.enqueue_occurrence(job_id="job-off", scheduled_for=clock() - 1000, trigger_key="off")
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})
    clock.advance(150)
    return store, clock


def _state(store: jobledger.Store, ids: list[str]) -> tuple[Any, ...]:
    return tuple(store.get_occurrence(key) for key in ids), tuple(store.history(limit=200))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.lists(history_step, min_size=1, max_size=25),
    limit=st.integers(1, 12),
    where=filters,
)
def test_claim_batch_equals_claim_next_repeated(tmp_path_factory, steps, limit, where):
    directory = tmp_path_factory.mktemp("twins")
    batched, _ = _build(directory / "a" / "db.sqlite3", steps)
    one_by_one, _ = _build(directory / "b" / "db.sqlite3", steps)
    try:
        ids = [event.occurrence_id for event in batched.history(limit=200)]
        ids = sorted({key for key in ids if key is not None})
        assert _state(batched, ids) == _state(one_by_one, ids)

        claims = batched.claim_batch(owner_id="w1", lease_ms=1_000, limit=limit, **where)
        singles = []
        for _ in range(limit):
            claimed = one_by_one.claim_next(owner_id="w1", lease_ms=1_000, **where)
            if claimed is None:
                break
            singles.append(claimed)
        assert claims == singles
        assert _state(batched, ids) == _state(one_by_one, ids)
    finally:
        batched.close()
        one_by_one.close()
