"""The SQLite claim lane (schema v4) stays index-driven and flat, and claims come in v4's order.

Only work a claim may take is in the claim index: ``jobledger_occurrences_ready`` holds ready
rows (due, admitted, of enabled jobs) per (queue, kind) in claim order; waiting rows (not yet
due), held rows (their partition at its limit) and running rows have indexes of their own, each
read only by the query that needs it. Speed itself is measured in ``bench/``; these tests pin
what makes it fast:

* the shape of ``EXPLAIN QUERY PLAN`` of every claim-path query, with and without ``ANALYZE``
  statistics (anyone may run ``ANALYZE`` or ``PRAGMA optimize`` on the file): its partial
  index, no full scan of occurrences, no temporary B-tree sort; the picked rows are leased by
  rowid (``seq``);
* the work a claim does, counted deterministically in SQLite VM steps (a progress handler
  called on every instruction): the same behind one row as behind 25 000 rows of a paused
  queue, of a partition at its limit, of lower priority in the same lane, not yet due, of
  another workspace, of another kind, of a disabled job, of settled history or of live leases;
* that claims come in the reference's order: priority (larger first), then the due instant
  (``lease_expires_at`` for an expired running claim, ``available_at`` otherwise), the slot
  (``scheduled_for``) and the occurrence id — across queues and kinds, in batches too.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger import Queue
from jobledger.store.operations.claims import EXPIRED_BATCH
from jobledger.store.sqlite.store import QUERIES, SQLiteStore
from jobledger.testing import FakeClock, temp_store

READY = "jobledger_occurrences_ready"
READY_WORKSPACE = "jobledger_occurrences_ready_workspace"
WAITING = "jobledger_occurrences_waiting"
HELD = "jobledger_occurrences_held"
LEASES = "jobledger_occurrences_leases"
RUNNING = "jobledger_occurrences_running"
LANES = "jobledger_occurrences_lanes"
BY_SEQ = "SEARCH occurrences USING INTEGER PRIMARY KEY (rowid=?)"
# A direct read of the occurrences table, under its alias or its name.
OCCURRENCES_ACCESS = re.compile(r"^(SCAN|SEARCH) (o|occurrences)\b")
NOW = FakeClock()()
SMALL, LARGE = 1, 25_000


def _authority(workspace: str | None = None) -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": "tester"}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


def _create_jobs(store: SQLiteStore) -> None:
    """mail and bulk in workspace ws-1, sms in none, mail again in ws-2, a disabled mail job in
    ws-1; a paused queue and a queue that admits one occurrence per partition at a time."""
    store.create_job(id="job-mail", kind="mail", authority=_authority("ws-1"))
    store.create_job(id="job-sms", kind="sms", authority=_authority())
    store.create_job(id="job-bulk", kind="bulk", authority=_authority("ws-1"))
    store.create_job(id="job-mail-ws2", kind="mail", authority=_authority("ws-2"))
    store.create_job(id="job-off", kind="mail", authority=_authority("ws-1"))
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})
    store.declare_queue(Queue("limited", partition_concurrency=1), actor="test")
    store.pause_queue("paused", reason="test", actor="test")


# Rows as the store writes them, ``count`` at once (one INSERT … SELECT): kind, workspace and
# runnable copied from the job, the job's authority by id; instants ``due + i``.
INSERT_ROWS = """
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
   attempt, max_attempts, fence, lease_owner, lease_expires_at, authority_id, payload_json,
   result_json, created_at, updated_at, settled_at, kind, workspace_id, runnable,
   queue, priority, partition_key, gate, adjudicate, started_at)
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
SELECT :prefix || i, j.job_id, j.revision, :prefix || i, :due + i, :available + i, :status,
       :attempt, 3, :attempt,
       CASE WHEN :status = 'running' THEN 'gone' END,
       CASE WHEN :status = 'running' THEN :lease + i END,
       j.authority_id, 'null', CASE WHEN :status = 'succeeded' THEN 'null' END, :due, :due,
       CASE WHEN :status IN ('succeeded', 'dead_letter', 'cancelled') THEN :due END,
       j.kind, json_extract(a.authority_json, '$.workspaceId'), j.enabled,
       :queue, :priority, :partition_key, :gate, 0,
       -- running rows started their handlers (an unstarted claim is given back, not swept)
       CASE WHEN :status = 'running' THEN :due END
FROM n, jobs AS j JOIN jobledger_authorities AS a ON a.authority_id = j.authority_id
WHERE j.job_id = :job_id
"""


_BATCHES = itertools.count()


def _rows(raw: sqlite3.Connection, job_id: str, count: int, **columns: Any) -> None:
    status = columns.get("status", "queued")
    due = columns.pop("due", NOW - 1_000_000)
    params = {
        "prefix": f"{job_id}-{next(_BATCHES)}-",
        "job_id": job_id,
        "count": count,
        "due": due,
        "available": due,
        "status": status,
        "attempt": 0 if status == "queued" else 1,
        "lease": None,
        "queue": "default",
        "priority": 0,
        "partition_key": None,
        "gate": 0,
        **columns,
    }
    raw.execute(INSERT_ROWS, params)


# -- plans -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanNode:
    id: int
    parent: int
    detail: str


class Plan:
    """``EXPLAIN QUERY PLAN`` output."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.nodes = [PlanNode(int(r["id"]), int(r["parent"]), str(r["detail"])) for r in rows]

    def occurrence_accesses(self) -> list[str]:
        return [node.detail for node in self.nodes if OCCURRENCES_ACCESS.match(node.detail)]

    def text(self) -> str:
        return "\n".join(f"{n.id:>4} {n.parent:>4} {n.detail}" for n in self.nodes)


@pytest.fixture(params=["mixed", "queued-only"])
def populated_store(request: pytest.FixtureRequest) -> Any:
    """A store with 3 000 rows: in every status, gate, queue, priority and partition ("mixed"),
    or a fresh ready backlog ("queued-only"). The two shapes matter once ANALYZE has run: the
    planner's statistics differ, and so do its mistakes."""
    with temp_store(FakeClock(NOW)) as store:
        _create_jobs(store)
        raw = store._connection.raw
        raw.execute("BEGIN IMMEDIATE")
        if request.param == "mixed":
            for index, job in enumerate(("job-mail", "job-sms", "job-bulk", "job-mail-ws2")):
                _rows(raw, job, 300, status="queued", queue=f"q{index % 2}", priority=index - 1)
                _rows(raw, job, 150, status="retry_wait", gate=1, available=NOW + 60_000)
                _rows(raw, job, 100, status="queued", queue="limited", partition_key="p", gate=2)
                _rows(raw, job, 100, status="running", lease=NOW - 500, queue="limited")
                _rows(raw, job, 50, status="succeeded")
            _rows(raw, "job-off", 200, status="queued")
        else:
            for job in ("job-mail", "job-sms", "job-bulk", "job-mail-ws2"):
                _rows(raw, job, 750, status="queued")
        raw.execute("COMMIT")
        yield store


def _explain(store: SQLiteStore, name: str, params: dict[str, Any]) -> Plan:
    sql = QUERIES[name]
    wanted = {key: value for key, value in params.items() if f":{key}" in sql}
    rows = store._connection.raw.execute("EXPLAIN QUERY PLAN " + sql, wanted)
    return Plan(rows.fetchall())


PARAMS: dict[str, Any] = {
    "now": NOW,
    "queue": "default",
    "kind": "mail",
    "workspace_id": "ws-1",
    "partition_key": "p",
    "owner_id": "gone",
    "limit": 10,
    "cap": 5,
    "ids": "[1, 2]",
    "starts": "[1]",
    "lease_expires_at": NOW + 60_000,
    "lease_ms": 60_000,
    "gate": 0,
}
# query: (the index every read of occurrences must use, what each read may be; None: only
# that every read uses the index)
PLANS: dict[str, tuple[str, list[str] | None]] = {
    # the skip scans: the first lane is the index's first entry, each next one a seek to the
    # next kind of the same queue or the first lane of the next queue
    "ready_lanes": (READY, None),
    "ready_lanes_in_workspace": (READY_WORKSPACE, None),
    "ready_probe": (READY, [f"SEARCH occurrences USING INDEX {READY} (queue=? AND kind=?)"]),
    "ready_probe_in_workspace": (
        READY_WORKSPACE,
        [
            f"SEARCH occurrences USING INDEX {READY_WORKSPACE} "
            "(workspace_id=? AND queue=? AND kind=?)"
        ],
    ),
    "next_ready": (READY, [f"SEARCH occurrences USING INDEX {READY} (queue=? AND kind=?)"]),
    "expired_leases": (
        LEASES,
        [f"SEARCH occurrences USING INDEX {LEASES} (lease_expires_at<?)"],
    ),
    "waiting_due": (WAITING, [f"SEARCH occurrences USING INDEX {WAITING} (available_at<?)"]),
    "best_held": (
        HELD,
        [f"SEARCH occurrences USING INDEX {HELD} (queue=? AND partition_key=?)"],
    ),
    "held_partitions": (
        HELD,
        [
            f"SEARCH occurrences USING INDEX {HELD} (queue=?)",
            f"SEARCH o USING INDEX {HELD} (queue=? AND partition_key>?)",
        ],
    ),
    # the limits' counts are shared queries (no INDEXED BY): their plan must hold on its own
    "count_running_in_queue": (
        RUNNING,
        [f"SEARCH occurrences USING INDEX {RUNNING} (queue=?)"],
    ),
    "count_running_of_owner_in_queue": (
        RUNNING,
        [f"SEARCH occurrences USING INDEX {RUNNING} (queue=? AND lease_owner=?)"],
    ),
    "count_lane_occupancy": (
        LANES,
        [f"SEARCH occurrences USING INDEX {LANES} (queue=? AND partition_key=?)"],
    ),
    # the picked rows are leased, and staged rows moved, by rowid
    "apply_claims": ("INTEGER PRIMARY KEY", [BY_SEQ]),
    "set_gate": ("INTEGER PRIMARY KEY", [BY_SEQ]),
}
HELPER_SCANS = re.compile(
    r"^(SCAN (lanes|parts|running|occupying|CONSTANT ROW|\(subquery-\d+\))"
    r"|SCAN json_each VIRTUAL TABLE)"
)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_claim_path_queries_read_their_index_without_sorting(
    populated_store: SQLiteStore, name: str, analyzed: bool
) -> None:
    store = populated_store
    raw = store._connection.raw
    if analyzed:
        raw.execute("ANALYZE")
        assert raw.execute("SELECT COUNT(*) AS n FROM sqlite_stat1").fetchone()["n"]
    index, expected = PLANS[name]
    plan = _explain(store, name, PARAMS)
    accesses = plan.occurrence_accesses()
    assert accesses, plan.text()
    if expected is not None:
        assert accesses == expected, plan.text()
    for detail in accesses:
        assert f"INDEX {index}" in detail or f"USING {index}" in detail, plan.text()
    assert not any("TEMP B-TREE" in node.detail for node in plan.nodes), plan.text()
    # nothing else is read: no other table, no automatic index
    others = [
        n.detail
        for n in plan.nodes
        if n.detail.startswith(("SCAN", "SEARCH")) and n.detail not in accesses
    ]
    assert all(HELPER_SCANS.match(d) for d in others), plan.text()


def test_every_claim_query_of_its_own_pins_its_index() -> None:
    """``INDEXED BY`` keeps the plans above even where statistics would tempt SQLite away
    (the counts are shared with PostgreSQL and hold their plan unpinned)."""
    for name, (index, _) in PLANS.items():
        if name.startswith("count_") or index == "INTEGER PRIMARY KEY":
            continue
        assert set(re.findall(r"INDEXED BY (\w+)", QUERIES[name])) == {index}, name


# -- claims stay flat --------------------------------------------------------------------------


class _StepCounter:
    """Counts SQLite VM instructions on a connection (claims run on the write connection)."""

    def __init__(self, raw: sqlite3.Connection) -> None:
        self._raw = raw
        self.steps = 0

    def _step(self) -> int:
        self.steps += 1
        return 0

    def __enter__(self) -> _StepCounter:
        self.steps = 0
        self._raw.set_progress_handler(self._step, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._raw.set_progress_handler(None, 1)


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
# Setups whose rows are in the ready index, and the workspace they are in.
READY_IN_FRONT = {
    "paused-queue": "ws-1",
    "lower-priority": "ws-1",
    "another-workspace": "ws-2",
    "another-kind": "ws-1",
}
# The claims measured.
CLAIMS: dict[str, dict[str, Any]] = {
    "lane": {"queues": ["default"], "kinds": ["mail"]},
    "kind": {"job_kind": "mail"},
    "kinds": {"kinds": ["mail", "sms"]},
    "kind-in-workspace": {"job_kind": "mail", "workspace_id": "ws-1"},
    "workspace": {"workspace_id": "ws-1"},
    "any": {},
}


def _build_flat_file(path: Path, setup: str, rows_in_front: int) -> dict[str, str]:
    """A closed database file: the wanted rows, and ``rows_in_front`` rows of ``setup``."""
    store = jobledger.open_store(path, clock=FakeClock(NOW), synchronous="NORMAL")
    assert isinstance(store, SQLiteStore)
    try:
        _create_jobs(store)
        # the sms row is a little less overdue than the mail row, so claims of both take mail
        wanted = {}
        for kind, job, due in (("mail", "job-mail", NOW - 1_000), ("sms", "job-sms", NOW - 900)):
            occurrence = store.enqueue_occurrence(job_id=job, scheduled_for=due, trigger_key="w")
            wanted[kind] = occurrence.id
        raw = store._connection.raw
        raw.execute("BEGIN IMMEDIATE")
        job, columns = IN_FRONT[setup]
        _rows(raw, job, rows_in_front, **columns)
        if setup == "held-partition":
            _rows(raw, "job-mail", 1, status="running", lease=NOW + 60_000, **columns)
        raw.execute("COMMIT")
    finally:
        store.close()
    return wanted


FlatFile = Callable[[str, int, Path], tuple[Path, dict[str, str]]]


@pytest.fixture(scope="module")
def flat_file(tmp_path_factory: pytest.TempPathFactory) -> FlatFile:
    """Build each (setup, size) file once; hand every test its own copy."""
    built: dict[tuple[str, int], tuple[Path, dict[str, str]]] = {}

    def copy(setup: str, size: int, directory: Path) -> tuple[Path, dict[str, str]]:
        if (setup, size) not in built:
            source = tmp_path_factory.mktemp("flat") / "db" / f"{setup}-{size}.sqlite"
            built[(setup, size)] = (source, _build_flat_file(source, setup, size))
        source, wanted = built[(setup, size)]
        directory.mkdir(mode=0o700)
        target = directory / "copy.sqlite"
        shutil.copyfile(source, target)
        target.chmod(0o600)
        return target, wanted

    return copy


def _takes_front(setup: str, claim: str) -> bool:
    """Whether a claim rightly takes a row in front (more overdue, same priority, visible)."""
    return claim in {
        "another-kind": {"any", "workspace"},  # bulk rows in ws-1
        "another-workspace": {"any", "kind", "kinds", "lane"},  # mail rows in ws-2
    }.get(setup, set())


def _open(path: Path, *, analyzed: bool) -> SQLiteStore:
    store = jobledger.open_store(path, clock=FakeClock(NOW), synchronous="NORMAL")
    assert isinstance(store, SQLiteStore)
    if analyzed:
        store._connection.raw.execute("ANALYZE")
    return store


FLAT_CASES = [
    pytest.param(setup, claim, id=f"{setup}-{claim}") for setup in IN_FRONT for claim in CLAIMS
]


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize(("setup", "claim"), FLAT_CASES)
def test_a_claim_does_the_same_work_whatever_stands_in_front(
    flat_file: FlatFile, setup: str, claim: str, analyzed: bool, tmp_path: Path
) -> None:
    measured = []
    for size in (SMALL, LARGE):
        path, wanted = flat_file(setup, size, tmp_path / str(size))
        store = _open(path, analyzed=analyzed)
        try:
            with _StepCounter(store._connection.raw) as counter:
                claimed = store.claim_next(owner_id="w", lease_ms=60_000, **CLAIMS[claim])
        finally:
            store.close()
        assert claimed is not None
        if _takes_front(setup, claim):
            assert claimed.job_id == IN_FRONT[setup][0]
        else:
            assert claimed.id == wanted["mail"]
        measured.append(counter.steps)
    small, large = measured
    # The same VM program over the same few index entries: equal, and far below the number of
    # rows in front (reading each of them would cost several steps per row).
    assert small == large, f"{small} steps behind {SMALL} row(s) in front, {large} behind {LARGE}"
    assert large < 5_000


# query: (setup, parameters, rows it returns): each read on its own, behind SMALL and LARGE rows
QUERY_CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "best_held": ("held-partition", {"queue": "limited", "partition_key": "p", "limit": 1}, 1),
    "held_partitions": ("held-partition", {"queue": "limited"}, 1),
    "count_lane_occupancy": (
        "held-partition",
        {"queue": "limited", "partition_key": "p", "cap": 1},
        1,
    ),
    "next_ready": ("lower-priority", {"queue": "default", "kind": "mail", "now": NOW}, 1),
    "waiting_due": ("not-yet-due", {"now": NOW, "limit": 1_000}, 0),
    "expired_leases": ("live-leases-of-another-kind", {"now": NOW, "limit": 1_000}, 0),
    "ready_probe": (
        "lower-priority",
        {"queue": "default", "kind": "mail", "now": NOW, "limit": 1},
        1,
    ),
    "ready_probe_in_workspace": (
        "another-workspace",
        {"workspace_id": "ws-1", "queue": "default", "kind": "mail", "now": NOW, "limit": 1},
        1,
    ),
    "ready_lanes_in_workspace": ("another-workspace", {"workspace_id": "ws-1"}, 1),
}


@pytest.mark.parametrize("name", sorted(QUERY_CASES))
def test_each_claim_query_reads_the_same_behind_any_backlog(
    flat_file: FlatFile, name: str, tmp_path: Path
) -> None:
    setup, params, returned = QUERY_CASES[name]
    measured = []
    for size in (SMALL, LARGE):
        path, _ = flat_file(setup, size, tmp_path / str(size))
        conn = sqlite3.connect(path)
        try:
            with _StepCounter(conn) as counter:
                found = conn.execute(QUERIES[name], params).fetchall()
        finally:
            conn.close()
        assert len(found) == returned, (name, size, found)
        measured.append(counter.steps)
    assert measured[0] == measured[1], f"{name}: {measured[0]} steps, then {measured[1]}"


@pytest.mark.parametrize(
    ("setup", "size"),
    [("another-kind", SMALL), ("another-kind", LARGE)],
)
def test_the_lane_skip_scan_reads_one_entry_per_lane(
    flat_file: FlatFile, setup: str, size: int, tmp_path: Path
) -> None:
    """ready_lanes is a skip scan: a few index entries per lane found, whatever their depth."""
    path, _ = flat_file(setup, size, tmp_path / "db")
    conn = sqlite3.connect(path)
    try:
        with _StepCounter(conn) as counter:
            lanes = conn.execute(QUERIES["ready_lanes"]).fetchall()
    finally:
        conn.close()
    assert lanes == [("default", "bulk"), ("default", "mail"), ("default", "sms")]
    assert counter.steps < 1_000, f"{counter.steps} steps to find {len(lanes)} lanes"


def _claim_behind_expired_leases(path: Path, expired: int) -> tuple[int, str, str]:
    store = jobledger.open_store(path, clock=FakeClock(NOW), synchronous="NORMAL")
    assert isinstance(store, SQLiteStore)
    try:
        _create_jobs(store)
        wanted = store.enqueue_occurrence(job_id="job-mail", scheduled_for=NOW, trigger_key="w")
        raw = store._connection.raw
        raw.execute("BEGIN IMMEDIATE")
        _rows(raw, "job-bulk", expired, status="running", lease=NOW - 500_000)
        raw.execute("COMMIT")
        with _StepCounter(raw) as counter:
            claimed = store.claim_next(owner_id="w", lease_ms=60_000, job_kind="mail")
        assert claimed is not None
        (still,) = raw.execute(
            "SELECT COUNT(*) FROM occurrences WHERE kind = 'bulk' AND lease_owner = 'gone'"
        ).fetchone()
        assert still == expired  # not this claim's to take: left for a claim of bulk
        return counter.steps, claimed.id, wanted.id
    finally:
        store.close()


def test_the_lazy_sweep_reads_at_most_its_batch_of_expired_leases(tmp_path: Path) -> None:
    """Expired leases of another kind are read by every claim (the sweep dead-letters the
    final ones, whoever claims), but never more than EXPIRED_BATCH of them."""
    measured = []
    for expired in (EXPIRED_BATCH, 4 * EXPIRED_BATCH):
        steps, claimed, wanted = _claim_behind_expired_leases(
            tmp_path / str(expired) / "db.sqlite", expired
        )
        assert claimed == wanted
        measured.append(steps)
    assert measured[0] == measured[1], measured


# -- order -------------------------------------------------------------------------------------


INSERT_ONE = """
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
   attempt, max_attempts, fence, lease_owner, lease_expires_at, authority_id, payload_json,
   result_json, created_at, updated_at, settled_at, kind, workspace_id, runnable, queue,
   priority, gate, adjudicate, started_at)
SELECT :occurrence_id, j.job_id, j.revision, :occurrence_id, :scheduled_for, :available_at,
       :status, :attempt, :max_attempts, :attempt,
       CASE WHEN :status = 'running' THEN 'previous-owner' END,
       CASE WHEN :status = 'running' THEN :lease_expires_at END,
       j.authority_id, 'null', CASE WHEN :status = 'succeeded' THEN 'null' END, :now, :now,
       CASE WHEN :status IN ('succeeded', 'dead_letter') THEN :now END,
       j.kind, json_extract(a.authority_json, '$.workspaceId'), j.enabled, :queue, :priority,
       :gate, 0,
       -- running rows started their handlers: expired ones are reclaimed or swept
       CASE WHEN :status = 'running' THEN :now END
FROM jobs AS j JOIN jobledger_authorities AS a ON a.authority_id = j.authority_id
WHERE j.job_id = :job_id
"""
JOBS = ["job-mail", "job-sms", "job-bulk", "job-mail-ws2", "job-off"]


def _claim_order(
    rows: list[dict[str, Any]], now: int, jobs: set[str], queues: set[str] | None
) -> list[str]:
    """v4's claim order over ``jobs`` (and ``queues``), computed in Python from the rows."""
    eligible = []
    for row in rows:
        if row["job_id"] not in jobs or row["attempt"] >= row["max_attempts"]:
            continue
        if queues is not None and row["queue"] not in queues:
            continue
        if row["status"] in ("queued", "retry_wait"):
            due = row["available_at"]
        elif row["status"] == "running":
            due = row["lease_expires_at"]
        else:
            continue
        if due <= now:
            eligible.append(
                (-row["priority"], due, row["scheduled_for"], row["occurrence_id"], row)
            )
    return [entry[-1]["occurrence_id"] for entry in sorted(eligible, key=lambda e: e[:4])]


ORDER_CLAIMS: dict[str, tuple[dict[str, Any], set[str], set[str] | None]] = {
    # claim arguments, the jobs and queues whose rows they take (never the disabled job-off's)
    "any-kind": ({}, {"job-mail", "job-sms", "job-bulk", "job-mail-ws2"}, None),
    "two-kinds": ({"kinds": ["mail", "sms"]}, {"job-mail", "job-sms", "job-mail-ws2"}, None),
    "one-kind": ({"job_kind": "sms"}, {"job-sms"}, None),
    "workspace": ({"workspace_id": "ws-1"}, {"job-mail", "job-bulk"}, None),
    "kind-in-workspace": ({"job_kind": "mail", "workspace_id": "ws-1"}, {"job-mail"}, None),
    "two-queues": (
        {"queues": ["default", "urgent"]},
        {"job-mail", "job-sms", "job-bulk", "job-mail-ws2"},
        {"default", "urgent"},
    ),
    "queue-and-kinds": (
        {"queues": ["urgent"], "kinds": ["mail"]},
        {"job-mail", "job-mail-ws2"},
        {"urgent"},
    ),
}


@pytest.mark.parametrize("batch", [1, 7], ids=["claim_next", "claim_batch"])
@pytest.mark.parametrize("claims", sorted(ORDER_CLAIMS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claims_come_in_priority_then_due_order(seed: int, claims: str, batch: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock(NOW)
    arguments, jobs, queues = ORDER_CLAIMS[claims]
    with temp_store(clock, synchronous="NORMAL") as store:
        _create_jobs(store)
        rows = []
        for index in range(400):
            status = rng.choice(["queued", "retry_wait", "running", "succeeded", "dead_letter"])
            max_attempts = rng.choice([1, 2, 3])
            attempt = 0 if status == "queued" else rng.randint(1, max_attempts)
            available_at = NOW + rng.randint(-6, 2) * 1_000
            rows.append(
                {
                    "occurrence_id": f"occ-{seed}-{index:04d}",
                    "job_id": rng.choice(JOBS),
                    # few distinct instants and priorities: ties are common
                    "scheduled_for": NOW + rng.randint(-5, 5) * 1_000,
                    "available_at": available_at,
                    "lease_expires_at": NOW + rng.randint(-6, 2) * 1_000,
                    "status": status,
                    "attempt": attempt,
                    "max_attempts": max_attempts,
                    "queue": rng.choice(["default", "urgent", "later"]),
                    "priority": rng.choice([-1, 0, 0, 2]),
                    # not yet due rows wait; due ones are ready, or wait for a claim to stage them
                    "gate": 1 if available_at > NOW else rng.choice([0, 1]),
                    "now": NOW,
                }
            )
        raw = store._connection.raw
        raw.execute("BEGIN IMMEDIATE")
        raw.executemany(INSERT_ONE, rows)
        raw.execute("COMMIT")
        seqs = dict(raw.execute("SELECT occurrence_id, seq FROM occurrences").fetchall())
        for row in rows:
            row["seq"] = seqs[row["occurrence_id"]]
        expected = _claim_order(rows, NOW, jobs, queues)
        assert len(expected) > 10  # the mix really exercises the ordering

        claimed: list[str] = []
        while True:
            if batch == 1:
                one = store.claim_next(owner_id="w", lease_ms=60_000, **arguments)
                taken = [] if one is None else [one]
            else:
                taken = store.claim_batch(owner_id="w", lease_ms=60_000, limit=batch, **arguments)
            if not taken:
                break
            claimed.extend(occurrence.id for occurrence in taken)
        assert claimed == expected

        # Every running row whose *final* attempt's lease expired was dead-lettered, not
        # claimed, whatever the claim asked for.
        final_expired = {
            r["occurrence_id"]
            for r in rows
            if r["status"] == "running"
            and r["lease_expires_at"] <= NOW
            and r["attempt"] >= r["max_attempts"]
        }
        for occurrence_id in final_expired:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence is not None and occurrence.status == "dead_letter"
