"""PostgreSQL claims (schema v4) stay on their partial indexes, and flat, with or without planner
statistics.

Every claim-path query is an index probe whose leading columns are bound by equality (or a
range on the one column its partial index orders by), so its plan should not depend on what
the planner knows about the table — and a table that was never ``ANALYZE``d is the normal state
after a bulk load (autovacuum is off on the test server, and may be late anywhere). These tests
build 1 000 and then 25 000 rows of a paused queue, of a partition at its limit, of lower
priority in the same lane, not yet due, of another workspace, of another kind, of a disabled
job, of settled history or of live leases in front of the wanted rows, and check, once on a
never-analysed table and once after ``ANALYZE``:

* the plan: index scans on the intended partial index, never a sequential or bitmap scan of
  occurrences, no sort below a probe's ``LIMIT`` (a sort of the backlog);
* the work, from ``EXPLAIN (ANALYZE, BUFFERS, TIMING OFF)`` in a rolled-back transaction: the
  rows the occurrences scans read (returned or filtered away) are the same at both sizes, and
  the pages touched stay few. Never wall time.

Two groups of queries are held to their plan by tests of their own, because the planner once
chose otherwise: the workspace probes (the plain ready index, filtering the workspace: the
ready index's predicate now names a clause only the other probes state) and the expired-lease
sweep (a bitmap scan and a sort of every expired lease without statistics, the running-rows
index and a sort with stale ones: write transactions turn bitmap scans off, and the running
index's predicate names a clause the sweep does not state). The explains run with the store's
write-transaction settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from jobledger import Queue
from jobledger.store.operations.claims import EXPIRED_BATCH
from jobledger.store.postgres.connection import WRITE_PLANNER_SETTINGS
from jobledger.store.postgres.store import QUERIES

NOW = 1_700_000_000_000
SMALL, LARGE = 1_000, 25_000
READY = "jobledger_occurrences_ready"
READY_WORKSPACE = "jobledger_occurrences_ready_workspace"
WAITING = "jobledger_occurrences_waiting"
HELD = "jobledger_occurrences_held"
LEASES = "jobledger_occurrences_leases"
RUNNING = "jobledger_occurrences_running"
LANES = "jobledger_occurrences_lanes"
BY_SEQ = "occurrences_seq_key"
STATS = ["never-analyzed", "analyzed"]


def _authority(workspace: str | None = None) -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": "tester"}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


# What stands in front of the wanted rows: (job, row columns). Every one of these rows is more
# overdue than the wanted ones (or, where it waits, of higher priority).
IN_FRONT: dict[str, tuple[str, dict[str, Any]]] = {
    "paused-queue": ("job-mail", {"queue": "paused"}),
    # a partition at its limit: one running row occupies it, the rest are held
    "held-partition": (
        "job-mail",
        {"queue": "limited", "partition_key": "p", "gate": 2, "priority": 5},
    ),
    "lower-priority": ("job-mail", {"priority": -1}),
    "not-yet-due": ("job-mail", {"gate": 1, "available": NOW + 3_600_000, "priority": 5}),
    "another-workspace": ("job-mail-ws2", {}),
    "another-kind": ("job-bulk", {}),
    "a-disabled-job": ("job-off", {}),
    "settled-history": ("job-mail", {"status": "succeeded"}),
    "live-leases-of-another-kind": ("job-bulk", {"status": "running", "lease": NOW + 60_000}),
}

INSERT_ROWS = """
INSERT INTO jobledger.occurrences
  (occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
   attempt, max_attempts, fence, lease_owner, lease_expires_at, authority_id, payload_json,
   result_json, created_at, updated_at, settled_at, kind, workspace_id, runnable,
   queue, priority, partition_key, gate, adjudicate)
SELECT %(prefix)s || g, j.job_id, j.revision, %(prefix)s || g, %(due)s + g,
       %(available)s + g, %(status)s, %(attempt)s, 3, %(attempt)s,
       CASE WHEN %(status)s = 'running' THEN 'gone' END,
       CASE WHEN %(status)s = 'running' THEN %(lease)s::bigint + g END,
       j.authority_id, 'null', CASE WHEN %(status)s = 'succeeded' THEN 'null' END,
       %(due)s, %(due)s,
       CASE WHEN %(status)s IN ('succeeded', 'dead_letter', 'cancelled') THEN %(due)s::bigint END,
       j.kind, a.authority_json::json ->> 'workspaceId', j.enabled,
       %(queue)s, %(priority)s, %(partition_key)s, %(gate)s, 0
FROM generate_series(%(first)s::int, %(last)s::int) AS g, jobledger.jobs AS j
JOIN jobledger.jobledger_authorities AS a ON a.authority_id = j.authority_id
WHERE j.job_id = %(job_id)s
"""


def _grow(admin, job_id: str, first: int, last: int, **columns: Any) -> None:
    """Rows ``first..last`` of one kind of backlog, in one INSERT … SELECT."""
    due = NOW - 1_000_000
    params: dict[str, Any] = {
        "prefix": f"{job_id}-{columns.get('status', 'queued')}-",
        "job_id": job_id,
        "first": first,
        "last": last,
        "due": due,
        "available": due,
        "status": "queued",
        "lease": None,
        "queue": "default",
        "priority": 0,
        "partition_key": None,
        "gate": 0,
        **columns,
    }
    params["attempt"] = 0 if params["status"] == "queued" else 1
    admin.execute(INSERT_ROWS, params)


@pytest.fixture
def wanted(open_pg, admin) -> dict[str, Any]:
    """Five jobs (mail in ws-1 and ws-2, bulk in ws-1, sms in none, a disabled mail job in
    ws-1), a paused queue, a queue admitting one occurrence per partition, and three due mail
    occurrences in ws-1: what the probes below must find."""
    store = open_pg()
    store.create_job(id="job-mail", kind="mail", authority=_authority("ws-1"))
    store.create_job(id="job-sms", kind="sms", authority=_authority())
    store.create_job(id="job-bulk", kind="bulk", authority=_authority("ws-1"))
    store.create_job(id="job-mail-ws2", kind="mail", authority=_authority("ws-2"))
    store.create_job(id="job-off", kind="mail", authority=_authority("ws-1"))
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})
    store.declare_queue(Queue("limited", partition_concurrency=1), actor="test")
    store.pause_queue("paused", reason="test", actor="test")
    ids = [
        store.enqueue_occurrence(
            job_id="job-mail", scheduled_for=NOW - 1_000 + i, trigger_key=f"w-{i}"
        ).id
        for i in range(3)
    ]
    seqs = [
        row["seq"]
        for row in admin.execute(
            "SELECT seq FROM jobledger.occurrences WHERE occurrence_id = ANY(%s) ORDER BY seq",
            (ids,),
        ).fetchall()
    ]
    return {"ids": ids, "seqs": seqs}


def _never_analyzed(admin) -> bool:
    """No statistics at all: never analysed or vacuumed (reltuples -1), autovacuum off."""
    (autovacuum,) = admin.execute("SHOW autovacuum").fetchone().values()
    (reltuples,) = (
        admin.execute(
            "SELECT reltuples FROM pg_class WHERE oid = 'jobledger.occurrences'::regclass"
        )
        .fetchone()
        .values()
    )
    return autovacuum == "off" and reltuples == -1


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a plan, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes that read occurrences (not the one that updates them)."""
    return [
        node
        for node in _nodes(plan)
        if node.get("Relation Name") == "occurrences" and node["Node Type"] != "ModifyTable"
    ]


def _reads_occurrences(plan: dict[str, Any]) -> bool:
    return bool(_scans(plan))


def _explain(admin, name: str, params: dict[str, Any], *, analyze: bool) -> dict[str, Any]:
    options = "ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    # ANALYZE executes the query (its FOR UPDATE, an UPDATE): in a transaction that rolls back
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        for setting in WRITE_PLANNER_SETTINGS:  # as the store's write transactions plan
            admin.execute(f"SET LOCAL {setting}")
        row = admin.execute(f"EXPLAIN ({options}) " + QUERIES[name], params).fetchone()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def _assert_index_plan(plan: dict[str, Any], indexes: set[str], *, ordered: bool) -> None:
    """Every read of occurrences is an index scan on one of ``indexes`` (``ordered``: in the
    index's order, so never a bitmap scan); no sort of occurrences rows except above a LIMIT."""
    scans = _scans(plan)
    assert scans, plan
    for scan in scans:
        if scan["Node Type"] == "Bitmap Heap Scan" and not ordered:
            (bitmap,) = scan["Plans"]
            assert bitmap["Node Type"] == "Bitmap Index Scan", scan
            assert bitmap["Index Name"] in indexes, bitmap["Index Name"]
            continue
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan["Node Type"]
        assert scan["Index Name"] in indexes, scan["Index Name"]
    # A sort may order what the probes returned (the merge over lanes), never the occurrences
    # below a probe's LIMIT: that would read and sort the whole backlog of a lane.
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
        (
            node["Actual Rows"]
            + node.get("Rows Removed by Filter", 0)
            + node.get("Rows Removed by Index Recheck", 0)
        )
        * node["Actual Loops"]
        for node in _scans(plan)
    )


def _pages(plan: dict[str, Any]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _probes(wanted: dict[str, Any]) -> dict[str, tuple[dict[str, Any], set[str], int]]:
    """query: (parameters, the index it must read occurrences through, pages it may touch)."""
    return {
        "ready_lanes": ({}, {READY}, 16),
        "ready_lanes_in_workspace": ({"workspace_id": "ws-1"}, {READY_WORKSPACE}, 16),
        # two lanes at once, each with its own room
        "ready_probe": (
            {"queues": ["default", "default"], "kinds": ["mail", "sms"], "rooms": [2, 2]},
            {READY},
            16,
        ),
        "ready_probe_in_workspace": (
            {"queues": ["default"], "kinds": ["mail"], "rooms": [2], "workspace_id": "ws-1"},
            {READY_WORKSPACE},
            16,
        ),
        "next_ready": ({"queue": "default", "kind": "mail"}, {READY}, 16),
        "expired_leases": ({"limit": EXPIRED_BATCH}, {LEASES}, 16),
        "waiting_due": ({"limit": 1_000}, {WAITING}, 16),
        "best_held": ({"queue": "limited", "partition_key": "p", "limit": 1}, {HELD}, 16),
        "held_partitions": ({"queue": "limited"}, {HELD}, 16),
        "count_running_in_queue": ({"queue": "limited", "cap": 1}, {RUNNING}, 16),
        "count_running_of_owner_in_queue": (
            {"queue": "limited", "owner_id": "gone", "cap": 1},
            {RUNNING},
            16,
        ),
        "count_lane_occupancy": ({"queue": "limited", "partition_key": "p", "cap": 1}, {LANES}, 16),
        # the picked rows are leased by seq (pages: the row versions and every index entry)
        "apply_claims": (
            {"ids": wanted["seqs"][:2], "starts": [], "owner_id": "w", "lease_ms": 60_000},
            {BY_SEQ},
            128,
        ),
    }


WORKSPACE_PROBES = ("ready_lanes_in_workspace", "ready_probe_in_workspace")


def _measure(
    admin,
    wanted: dict[str, Any],
    setup: str,
    stats: str,
    names: tuple[str, ...] | None = None,
) -> dict[str, list[int]]:
    """Grow the backlog to SMALL then LARGE rows; at each size check every probe's plan and
    record the rows it read (and bound its pages)."""
    job_id, columns = IN_FRONT[setup]
    probes = _probes(wanted)
    read: dict[str, list[int]] = {name: [] for name in names or probes}
    first = 1
    for size in (SMALL, LARGE):
        _grow(admin, job_id, first, size, **columns)
        if setup == "held-partition" and first == 1:
            occupying = {**columns, "status": "running", "gate": 0, "lease": NOW + 60_000}
            _grow(admin, "job-mail", 0, 0, **occupying)
        first = size + 1
        if stats == "analyzed":
            admin.execute("ANALYZE jobledger.occurrences")
        else:
            assert _never_analyzed(admin)
        for name, counts in read.items():
            params, indexes, pages = probes[name]
            arguments = {"now": NOW, **params}
            ordered = name != "apply_claims"
            planned = _explain(admin, name, arguments, analyze=False)
            executed = _explain(admin, name, arguments, analyze=True)
            _assert_index_plan(planned, indexes, ordered=ordered)
            _assert_index_plan(executed, indexes, ordered=ordered)
            assert _pages(executed) <= pages, (name, size, _pages(executed), executed)
            counts.append(_rows_read(executed))
    return read


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("setup", sorted(IN_FRONT))
def test_claim_queries_stay_on_their_index_and_flat(admin, wanted, setup, stats):
    read = _measure(admin, wanted, setup, stats, tuple(_probes(wanted)))
    for name, (small, large) in read.items():
        assert small == large, f"{name}: {small} rows read behind {SMALL}, {large} behind {LARGE}"

    # and the workspace probe returns the wanted rows, never one from the front
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        found = admin.execute(
            QUERIES["ready_probe_in_workspace"],
            {
                "queues": ["default"],
                "kinds": ["mail"],
                "rooms": [2],
                "workspace_id": "ws-1",
                "now": NOW,
            },
        ).fetchall()
    assert [row["occurrence_id"] for row in found] == wanted["ids"][:2]


@pytest.mark.parametrize(
    ("setup", "stats"), [("another-workspace", STATS[0]), ("lower-priority", STATS[1])]
)
def test_workspace_probes_read_the_workspace_index(admin, wanted, setup, stats):
    """Behind another workspace's backlog without statistics (the index read and the work),
    and behind a lower priority backlog with statistics (the index read)."""
    read = _measure(admin, wanted, setup, stats, WORKSPACE_PROBES)
    for name, (small, large) in read.items():
        assert small == large, f"{name}: {small} rows read behind {SMALL}, {large} behind {LARGE}"


SWEEPS = {
    # (query, what piles up: job and row columns, statistics taken before the pile)
    "expired-leases-never-analyzed": (
        "expired_leases",
        ("job-bulk", {"status": "running", "lease": NOW - 500_000}),
        None,
    ),
    "expired-leases-analyzed": (
        "expired_leases",
        ("job-bulk", {"status": "running", "lease": NOW - 500_000}),
        "after",
    ),
    # statistics taken while nothing ran: the planner believes there are no running rows
    "expired-leases-stale-statistics": (
        "expired_leases",
        ("job-bulk", {"status": "running", "lease": NOW - 500_000}),
        "before",
    ),
    "due-waiting-rows-never-analyzed": (
        "waiting_due",
        ("job-mail", {"gate": 1, "priority": 5}),
        None,
    ),
    "due-waiting-rows-analyzed": ("waiting_due", ("job-mail", {"gate": 1, "priority": 5}), "after"),
}


@pytest.mark.parametrize("case", list(SWEEPS))
def test_a_sweep_reads_one_batch_in_index_order(admin, wanted, case):
    """Expired leases a claim may not take (another kind) and due waiting rows are read by
    every claim, up to a batch of them, in index order: never the whole pile, never sorted."""
    name, (job_id, columns), analyze = SWEEPS[case]
    batch = EXPIRED_BATCH if name == "expired_leases" else 1_000
    index = LEASES if name == "expired_leases" else WAITING
    if analyze == "before":
        _grow(admin, "job-mail", 1, SMALL)
        admin.execute("ANALYZE jobledger.occurrences")
    read = []
    first = 1
    for size in (2 * batch, LARGE):
        _grow(admin, job_id, first, size, **columns)
        first = size + 1
        if analyze == "after":
            admin.execute("ANALYZE jobledger.occurrences")
        elif analyze is None:
            assert _never_analyzed(admin)
        plan = _explain(admin, name, {"now": NOW, "limit": batch}, analyze=True)
        _assert_index_plan(plan, {index}, ordered=True)
        read.append(_rows_read(plan))
    assert read == [batch, batch]


@pytest.mark.parametrize("stats", STATS)
def test_a_claim_over_several_lanes_sorts_only_what_the_probes_return(admin, wanted, stats):
    _grow(admin, "job-bulk", 1, LARGE)
    if stats == "analyzed":
        admin.execute("ANALYZE jobledger.occurrences")
    params = {
        "queues": ["default", "default"],
        "kinds": ["bulk", "mail"],
        "rooms": [5, 5],
        "now": NOW,
    }
    plan = _explain(admin, "ready_probe", params, analyze=True)
    _assert_index_plan(plan, {READY}, ordered=True)
    assert plan["Node Type"] == "Sort"  # the merge of the lanes, in claim order
    # each lane's probe stops at its room (mail has only three rows)
    assert _rows_read(plan) == 5 + 3
    assert plan["Actual Rows"] == 8


def test_explain_runs_in_a_rolled_back_transaction(admin, wanted):
    """The ANALYZE form executes FOR UPDATE and UPDATE; nothing of it stays."""
    params = {"queues": ["default"], "kinds": ["mail"], "rooms": [1], "now": NOW}
    _explain(admin, "ready_probe", params, analyze=True)
    _explain(
        admin,
        "apply_claims",
        {"ids": wanted["seqs"], "starts": [], "owner_id": "w", "lease_ms": 0, "now": NOW},
        analyze=True,
    )
    assert admin.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    statuses = admin.execute(
        "SELECT DISTINCT status FROM jobledger.occurrences WHERE seq = ANY(%s)", (wanted["seqs"],)
    ).fetchall()
    assert statuses == [{"status": "queued"}]
