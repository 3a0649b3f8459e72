"""The SQLite claim path stays index-driven, and its order is the reference's.

The reference sorts every due occurrence on a ``CASE`` expression, so a claim costs O(queue).
``claim_next_candidate`` instead probes ``scheduler_occurrences_claim`` once per status and stops
at the first eligible row. Speed itself is measured in ``bench/claim_scaling.py``; these tests
pin what makes it fast — the shape of ``EXPLAIN QUERY PLAN`` — and check that the faster query
still claims in the reference order: (due instant, scheduled_for, occurrence_id), where the due
instant is ``lease_expires_at`` for an expired running claim and ``available_at`` otherwise.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobledger import derive_occurrence_identity
from jobledger.store.sqlite.store import QUERIES
from jobledger.testing import FakeClock, temp_store

CLAIM_INDEX = "scheduler_occurrences_claim"
AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
# A direct read of the occurrences table, under its alias or its name.
OCCURRENCES_ACCESS = re.compile(r"^(SCAN|SEARCH) (o|occurrences)\b")

INSERT_ROW = """
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at)
VALUES
  (:occurrence_id, :job_id, 1, :idempotency_key, :trigger_key,
   :scheduled_for, :available_at, :status, :attempt, :max_attempts, :fence,
   :lease_owner, :lease_expires_at,
   (SELECT authority_json FROM jobs WHERE job_id = :job_id), 'null',
   NULL, :result_json, :created_at, :created_at, :settled_at)
"""


@dataclass(frozen=True)
class PlanNode:
    id: int
    parent: int
    detail: str


class Plan:
    """``EXPLAIN QUERY PLAN`` output as a tree."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.nodes = [PlanNode(int(r["id"]), int(r["parent"]), str(r["detail"])) for r in rows]
        self.by_id = {node.id: node for node in self.nodes}

    def children(self, node_id: int) -> list[PlanNode]:
        return [node for node in self.nodes if node.parent == node_id]

    def subtree(self, node_id: int) -> Iterator[PlanNode]:
        for child in self.children(node_id):
            yield child
            yield from self.subtree(child.id)

    def occurrence_accesses(self) -> list[PlanNode]:
        return [node for node in self.nodes if OCCURRENCES_ACCESS.match(node.detail)]

    def text(self) -> str:
        return "\n".join(f"{n.id:>4} {n.parent:>4} {n.detail}" for n in self.nodes)


def _row(
    *,
    job_id: str,
    index: int,
    status: str,
    scheduled_for: int,
    available_at: int,
    lease_expires_at: int | None = None,
    attempt: int = 0,
    max_attempts: int = 3,
    created_at: int,
) -> dict[str, Any]:
    trigger_key = f"t-{index}"
    occurrence_id, key = derive_occurrence_identity(
        job_id=job_id, job_revision=1, scheduled_for=scheduled_for, trigger_key=trigger_key
    )
    terminal = status in ("succeeded", "dead_letter")
    return {
        "occurrence_id": occurrence_id,
        "job_id": job_id,
        "idempotency_key": key,
        "trigger_key": trigger_key,
        "scheduled_for": scheduled_for,
        "available_at": available_at,
        "status": status,
        "attempt": attempt,
        "max_attempts": max_attempts,
        "fence": attempt,
        "lease_owner": "previous-owner" if status == "running" else None,
        "lease_expires_at": lease_expires_at if status == "running" else None,
        "result_json": "null" if status == "succeeded" else None,
        "created_at": created_at,
        "settled_at": created_at if terminal else None,
    }


def _insert(store: Any, rows: list[dict[str, Any]]) -> None:
    raw = store._connection.raw
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany(INSERT_ROW, rows)
    raw.execute("COMMIT")


@pytest.fixture(params=["mixed", "queued-only"])
def populated_store(request) -> Iterator[tuple[Any, FakeClock]]:
    """A store with 500 rows: in every status ("mixed"), or a fresh backlog ("queued-only").

    The two shapes matter once ANALYZE has run: the planner's statistics differ, and so do its
    mistakes.
    """
    clock = FakeClock()
    now = clock()
    with temp_store(clock) as store:
        store.create_job(id="job-a", kind="mail", authority=AUTHORITY)
        rows = []
        statuses = (
            ["queued", "retry_wait", "running", "succeeded", "dead_letter"]
            if request.param == "mixed"
            else ["queued"]
        )
        for index in range(500):
            status = statuses[index % len(statuses)]
            rows.append(
                _row(
                    job_id="job-a",
                    index=index,
                    status=status,
                    scheduled_for=now - 10_000 + index,
                    available_at=now - 5_000 + index * 20,
                    lease_expires_at=now - 1_000 + index * 10,
                    attempt=0 if status == "queued" else 1,
                    created_at=now - 20_000,
                )
            )
        _insert(store, rows)
        yield store, clock


def _explain(store: Any, name: str, params: dict[str, Any]) -> Plan:
    rows = store._connection.raw.execute("EXPLAIN QUERY PLAN " + QUERIES[name], params)
    return Plan(rows.fetchall())


def _analyze(store: Any) -> None:
    store._connection.raw.execute("ANALYZE")


FILTERS = [
    pytest.param({"job_kind": None, "workspace_id": None}, id="unfiltered"),
    pytest.param({"job_kind": "mail", "workspace_id": "ws-1"}, id="filtered"),
]


def _assert_index_only(plan: Plan) -> None:
    accesses = plan.occurrence_accesses()
    assert accesses, plan.text()
    for node in accesses:
        assert node.detail.startswith("SEARCH"), f"full scan of occurrences:\n{plan.text()}"
        assert f"USING INDEX {CLAIM_INDEX} (status=?" in node.detail or (
            f"USING COVERING INDEX {CLAIM_INDEX} (status=?" in node.detail
        ), f"occurrences read without {CLAIM_INDEX} bounded by status:\n{plan.text()}"


# With sqlite_stat1 present (anyone may run ANALYZE or PRAGMA optimize on the file, and the
# store still opens it) SQLite 3.40 would abandon the probes: on the "mixed" table it put the
# one-row jobs table in the outer loop and sorted every due queued row; on the "queued-only"
# table it read the running branch with a full SCAN of occurrences. Each branch therefore pins
# ``INDEXED BY scheduler_occurrences_claim`` and ``CROSS JOIN jobs``; the analyzed cases below
# keep that pin honest (measured without it: 0.8 ms -> 32 ms per claim at 100k queued).


@pytest.mark.parametrize(
    "analyzed",
    [False, True],
    ids=["no-stats", "analyzed"],
)
@pytest.mark.parametrize("filters", FILTERS)
def test_claim_next_candidate_probes_the_claim_index(populated_store, filters, analyzed):
    store, clock = populated_store
    if analyzed:
        _analyze(store)
    plan = _explain(store, "claim_next_candidate", {"now": clock(), **filters})

    _assert_index_only(plan)
    assert len(plan.occurrence_accesses()) == 3, plan.text()

    # queued and retry_wait: a range probe (status=? AND available_at<?) whose index order is
    # the ORDER BY, so nothing inside that branch sorts its rows.
    probes = [n for n in plan.occurrence_accesses() if "available_at<?" in n.detail]
    assert len(probes) == 2, plan.text()
    for probe in probes:
        branch = plan.by_id[probe.parent]
        assert branch.detail.startswith(("CO-ROUTINE", "MATERIALIZE", "SUBQUERY")), plan.text()
        sorts = [n for n in plan.subtree(branch.id) if "TEMP B-TREE" in n.detail]
        assert sorts == [], f"the {branch.detail} branch sorts its rows:\n{plan.text()}"

    # The only other sorts allowed: the running branch (one row per live claim) and the final
    # merge, which orders the at most three single-row branch results.
    running = next(n for n in plan.occurrence_accesses() if "available_at" not in n.detail)
    running_branch = running.parent
    for node in plan.nodes:
        if "TEMP B-TREE" not in node.detail or node.parent == running_branch:
            continue
        siblings = [n.detail for n in plan.children(node.parent) if n is not node]
        assert any(d.startswith("SCAN (subquery") for d in siblings), (
            f"a sort over table rows outside the running branch:\n{plan.text()}"
        )


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
def test_select_expired_final_leases_reads_running_rows_through_the_claim_index(
    populated_store, analyzed
):
    store, clock = populated_store
    if analyzed:
        _analyze(store)
    plan = _explain(store, "select_expired_final_leases", {"now": clock(), "limit": 100})

    _assert_index_only(plan)
    # Only running rows are visited (status=? on the index's first column); sorting them by
    # lease expiry is bounded by the number of live claims, not by the queue.
    assert len(plan.occurrence_accesses()) == 1, plan.text()


# -- order -------------------------------------------------------------------------------------


def _reference_order(rows: list[dict[str, Any]], now: int, enabled_jobs: set[str]) -> list[str]:
    """The reference's candidate order, computed in Python from the inserted rows."""
    eligible = []
    for row in rows:
        if row["job_id"] not in enabled_jobs or row["attempt"] >= row["max_attempts"]:
            continue
        if row["status"] in ("queued", "retry_wait"):
            due = row["available_at"]
        elif row["status"] == "running":
            due = row["lease_expires_at"]
        else:
            continue
        if due <= now:
            eligible.append((due, row["scheduled_for"], row["occurrence_id"]))
    return [occurrence_id for *_, occurrence_id in sorted(eligible)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claim_order_matches_the_reference_order(seed):
    rng = random.Random(seed)
    clock = FakeClock()
    now = clock()
    with temp_store(clock) as store:
        store.create_job(id="job-on", kind="mail", authority=AUTHORITY)
        store.create_job(id="job-off", kind="mail", authority=AUTHORITY)
        store.update_job("job-off", expected_revision=1, patch={"enabled": False})
        rows = []
        for index in range(200):
            status = rng.choice(["queued", "retry_wait", "running", "succeeded", "dead_letter"])
            max_attempts = rng.choice([1, 2, 3])
            attempt = 0 if status == "queued" else rng.randint(1, max_attempts)
            rows.append(
                _row(
                    # few distinct instants, so ties on due and scheduled_for are common
                    job_id="job-off" if rng.random() < 0.1 else "job-on",
                    index=index,
                    status=status,
                    scheduled_for=now + rng.randint(-5, 5) * 1_000,
                    available_at=now + rng.randint(-6, 2) * 1_000,
                    lease_expires_at=now + rng.randint(-6, 2) * 1_000,
                    attempt=attempt,
                    max_attempts=max_attempts,
                    created_at=now - 60_000,
                )
            )
        _insert(store, rows)
        expected = _reference_order(rows, now, {"job-on"})
        assert len(expected) > 40  # the mix really exercises the ordering

        claimed = []
        while (occurrence := store.claim_next(owner_id="w", lease_ms=60_000)) is not None:
            claimed.append(occurrence.id)
        assert claimed == expected

        # Every running row whose *final* attempt's lease expired was dead-lettered, not claimed.
        final_expired = {
            r["occurrence_id"]
            for r in rows
            if r["status"] == "running"
            and r["lease_expires_at"] <= now
            and r["attempt"] >= r["max_attempts"]
        }
        for occurrence_id in final_expired:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence is not None and occurrence.status == "dead_letter"
