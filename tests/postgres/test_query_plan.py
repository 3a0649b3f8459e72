"""PostgreSQL claims stay on the claim index, and flat, however much stands in front.

``claim_candidates`` probes ``jobledger_occurrences_ready`` once per kind (a LATERAL subquery
with its own ``LIMIT`` and ``FOR UPDATE SKIP LOCKED``) and sorts only the few rows the probes
return. These tests build 1 000 and then 50 000 rows of another kind, of a disabled job or of
another workspace in front of the wanted ones, run ``ANALYZE``, and check

* the plan (``EXPLAIN``, no execution): index scans on the intended index, never a sequential or
  bitmap scan of occurrences, no sort below a probe's ``LIMIT`` (a sort of the backlog);
* the rows the probe reads (``EXPLAIN (ANALYZE, TIMING OFF)`` in a rolled-back transaction: row
  counts, not time): the same few at both sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobledger.store.postgres.store import QUERIES

NOW = 1_700_000_000_000
READY = "jobledger_occurrences_ready"
READY_WORKSPACE = "jobledger_occurrences_ready_workspace"
SIZES = (1_000, 50_000)


def _authority(workspace: str) -> dict[str, Any]:
    return {"principal": {"type": "user", "id": "tester"}, "workspaceId": workspace}


# What stands in front of the wanted rows: (job, status); every row is more overdue.
IN_FRONT = {
    "another-kind": ("job-bulk", "queued"),
    "a-disabled-job": ("job-off", "queued"),
    "another-workspace": ("job-mail-ws2", "queued"),
}

# query: (parameters, the indexes it may read occurrences through, the rows it may read)
PROBES: dict[str, tuple[dict[str, Any], set[str], int]] = {
    "claim_candidates": ({"kinds": ["mail"], "limit": 1}, {READY}, 1),
    "claim_candidates_in_workspace": (
        {"kinds": ["mail"], "workspace_id": "ws-1", "limit": 1},
        # Not pinned on PostgreSQL: with the workspace filter unselective the planner may take
        # the per-kind index and filter, which stays bounded while the front rows are not
        # this kind in another workspace (where it takes the workspace index).
        {READY_WORKSPACE, READY},
        1,
    ),
    "oldest_due": ({"kind": "mail"}, {READY}, 1),
    "live_kinds": ({}, {READY}, 3),
}

INSERT_ROWS = """
INSERT INTO jobledger.occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   created_at, updated_at, kind, workspace_id, runnable)
SELECT 'front-' || g, j.job_id, j.revision, 'front-' || g, 'front-' || g,
       %(due)s + g, %(due)s + g, %(status)s, %(attempt)s, 3, %(attempt)s,
       CASE WHEN %(status)s = 'running' THEN 'gone' END,
       CASE WHEN %(status)s = 'running' THEN %(due)s + g END,
       j.authority_json, 'null', 0, 0,
       j.kind, j.authority_json::json ->> 'workspaceId', j.enabled
FROM generate_series(%(first)s::int, %(last)s::int) AS g, jobledger.jobs AS j
WHERE j.job_id = %(job_id)s
"""


@pytest.fixture
def wanted(open_pg) -> list[str]:
    """Four jobs (mail in ws-1 and ws-2, bulk in ws-1, a disabled mail job in ws-1) and three
    due mail occurrences in ws-1: what the claims below must find."""
    store = open_pg()
    store.create_job(id="job-mail", kind="mail", authority=_authority("ws-1"))
    store.create_job(id="job-bulk", kind="bulk", authority=_authority("ws-1"))
    store.create_job(id="job-mail-ws2", kind="mail", authority=_authority("ws-2"))
    store.create_job(id="job-off", kind="mail", authority=_authority("ws-1"))
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})
    return [
        store.enqueue_occurrence(
            job_id="job-mail", scheduled_for=NOW - 1_000 + i, trigger_key=f"w-{i}"
        ).id
        for i in range(3)
    ]


def _grow(admin, job_id: str, status: str, first: int, last: int) -> None:
    admin.execute(
        INSERT_ROWS,
        {
            "due": NOW - 1_000_000,
            "status": status,
            "attempt": 1 if status == "running" else 0,
            "first": first,
            "last": last,
            "job_id": job_id,
        },
    )
    admin.execute("ANALYZE jobledger.occurrences")


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _reads_occurrences(plan: dict[str, Any]) -> bool:
    return any(node.get("Relation Name") == "occurrences" for node in _nodes(plan))


def _explain(admin, name: str, params: dict[str, Any], *, analyze: bool) -> dict[str, Any]:
    options = "ANALYZE, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    # ANALYZE executes the query (and its FOR UPDATE): inside a transaction that rolls back
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        row = admin.execute(f"EXPLAIN ({options}) " + QUERIES[name], params).fetchone()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def _assert_index_plan(plan: dict[str, Any], indexes: set[str]) -> None:
    scans = [node for node in _nodes(plan) if node.get("Relation Name") == "occurrences"]
    assert scans, plan
    for scan in scans:
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan["Node Type"]
        assert scan["Index Name"] in indexes, scan["Index Name"]
    # A sort may order what the probes returned (the merge over kinds), never the occurrences
    # below a probe's LIMIT: that would read and sort the whole backlog of the kind.
    for node in _nodes(plan):
        if node["Node Type"] in ("Sort", "Incremental Sort") and _reads_occurrences(node):
            limits = [
                below
                for below in _nodes(node)
                if below["Node Type"] == "Limit" and _reads_occurrences(below)
            ]
            assert limits, f"a sort over occurrences rows: {node}"


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the occurrences scans produced or filtered away, over every loop."""
    return sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in _nodes(plan)
        if node.get("Relation Name") == "occurrences"
    )


@pytest.mark.parametrize("setup", sorted(IN_FRONT))
def test_claim_probes_stay_on_the_claim_index_and_flat(admin, wanted, setup):
    job_id, status = IN_FRONT[setup]
    read: dict[str, list[int]] = {name: [] for name in PROBES}
    first = 1
    for size in SIZES:
        _grow(admin, job_id, status, first, size)
        first = size + 1
        for name, (params, indexes, bound) in PROBES.items():
            arguments = {"now": NOW, **params}
            _assert_index_plan(_explain(admin, name, arguments, analyze=False), indexes)
            executed = _explain(admin, name, arguments, analyze=True)
            _assert_index_plan(executed, indexes)
            assert _rows_read(executed) <= bound, (name, size, executed)
            read[name].append(_rows_read(executed))
    for name, (small, large) in read.items():
        assert small == large, f"{name}: {small} rows read with 1 000 in front, {large} with 50 000"

    # and the probe returns the wanted row, not one from the front
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        found = admin.execute(
            QUERIES["claim_candidates_in_workspace"],
            {"kinds": ["mail"], "workspace_id": "ws-1", "now": NOW, "limit": 2},
        ).fetchall()
    assert [row["occurrence_id"] for row in found] == wanted[:2]


def test_a_claim_over_several_kinds_sorts_only_what_the_probes_return(admin, wanted):
    _grow(admin, "job-bulk", "queued", 1, SIZES[-1])
    params = {"kinds": ["bulk", "mail"], "now": NOW, "limit": 5}
    plan = _explain(admin, "claim_candidates", params, analyze=True)
    _assert_index_plan(plan, {READY})
    assert plan["Node Type"] == "Limit"
    (merge,) = plan["Plans"]
    assert merge["Node Type"] == "Sort"
    # each kind's probe stops at `limit` rows (mail has only three); the merge keeps five
    assert _rows_read(plan) == 5 + 3
    assert merge["Actual Rows"] == 5


def test_the_expired_final_lease_sweep_stays_flat(admin, wanted):
    read = []
    first = 1
    for size in SIZES:
        _grow(admin, "job-bulk", "running", first, size)
        first = size + 1
        plan = _explain(
            admin, "select_expired_final_leases", {"now": NOW, "limit": 100}, analyze=True
        )
        read.append(_rows_read(plan))
    assert read[0] == read[1], f"the sweep read {read[0]} rows, then {read[1]}"


def test_explain_runs_in_a_rolled_back_transaction(admin, wanted):
    """The ANALYZE form executes FOR UPDATE; nothing of it stays (no lock, no change)."""
    _explain(admin, "claim_candidates", {"kinds": ["mail"], "now": NOW, "limit": 1}, analyze=True)
    assert admin.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
