"""The SQLite claim path stays index-driven and flat, and its order is the reference's.

The reference sorts every due occurrence on a ``CASE`` expression, so a claim costs O(queue).
Here a claim probes ``jobledger_occurrences_ready`` — live rows of enabled jobs only, keyed by
kind and then the due instant — once per kind, and stops after the rows it takes. Speed itself
is measured in ``bench/``; these tests pin what makes it fast:

* the shape of ``EXPLAIN QUERY PLAN`` of every claim-path query, with and without ``ANALYZE``
  statistics (anyone may run ``ANALYZE`` or ``PRAGMA optimize`` on the file): the intended
  index, no full scan, no temporary B-tree sort;
* the work a claim does, counted deterministically in SQLite VM steps (a progress handler
  called on every instruction): the same with 1 000 or 50 000 rows of another kind, of a
  disabled job or of another workspace in front of the wanted ones;
* that the claims still come in the reference order: (due instant, scheduled_for,
  occurrence_id), where the due instant is ``lease_expires_at`` for an expired running claim and
  ``available_at`` otherwise — across kinds, too.
"""

from __future__ import annotations

import random
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import jobledger
from jobledger import derive_occurrence_identity
from jobledger.store.sqlite.store import QUERIES, SQLiteStore
from jobledger.testing import FakeClock, temp_store

READY = "jobledger_occurrences_ready"
READY_WORKSPACE = "jobledger_occurrences_ready_workspace"
LEASES = "jobledger_occurrences_final_leases"
# A direct read of the occurrences table, under its alias or its name.
OCCURRENCES_ACCESS = re.compile(r"^(SCAN|SEARCH) (o|occurrences)\b")


def _authority(workspace: str | None = None) -> dict[str, Any]:
    authority: dict[str, Any] = {"principal": {"type": "user", "id": "tester"}}
    if workspace is not None:
        authority["workspaceId"] = workspace
    return authority


# kind, workspace_id and runnable are copied from the job, as the store does.
INSERT_ROW = """
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable)
SELECT :occurrence_id, j.job_id, j.revision, :idempotency_key, :trigger_key,
       :scheduled_for, :available_at, :status, :attempt, :max_attempts, :fence,
       :lease_owner, :lease_expires_at, j.authority_json, 'null',
       NULL, :result_json, :created_at, :created_at, :settled_at,
       j.kind, json_extract(j.authority_json, '$.workspaceId'), j.enabled
FROM jobs AS j WHERE j.job_id = :job_id
"""


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
    terminal = status in ("succeeded", "dead_letter", "cancelled")
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


def _insert(store: SQLiteStore, rows: Iterator[dict[str, Any]] | list[dict[str, Any]]) -> None:
    raw = store._connection.raw
    raw.execute("BEGIN IMMEDIATE")
    raw.executemany(INSERT_ROW, rows)
    raw.execute("COMMIT")


JOBS = ["job-mail", "job-sms", "job-bulk", "job-mail-ws2", "job-off"]


def _create_jobs(store: SQLiteStore) -> None:
    """mail and bulk in workspace ws-1, sms in none, mail again in ws-2, and a disabled mail
    job in ws-1."""
    store.create_job(id="job-mail", kind="mail", authority=_authority("ws-1"))
    store.create_job(id="job-sms", kind="sms", authority=_authority())
    store.create_job(id="job-bulk", kind="bulk", authority=_authority("ws-1"))
    store.create_job(id="job-mail-ws2", kind="mail", authority=_authority("ws-2"))
    store.create_job(id="job-off", kind="mail", authority=_authority("ws-1"))
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})


# -- plans -------------------------------------------------------------------------------------


@pytest.fixture(params=["mixed", "queued-only"])
def populated_store(request: pytest.FixtureRequest) -> Iterator[tuple[SQLiteStore, FakeClock]]:
    """A store with 2 000 rows over five jobs: in every status ("mixed"), or a fresh backlog
    ("queued-only"). The two shapes matter once ANALYZE has run: the planner's statistics
    differ, and so do its mistakes."""
    clock = FakeClock()
    now = clock()
    with temp_store(clock) as store:
        _create_jobs(store)
        statuses = (
            ["queued", "retry_wait", "running", "succeeded", "dead_letter", "cancelled"]
            if request.param == "mixed"
            else ["queued"]
        )
        rows = []
        for index in range(2_000):
            status = statuses[index % len(statuses)]
            rows.append(
                _row(
                    job_id=JOBS[index % len(JOBS)],
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


def _explain(store: SQLiteStore, name: str, params: dict[str, Any]) -> Plan:
    rows = store._connection.raw.execute("EXPLAIN QUERY PLAN " + QUERIES[name], params)
    return Plan(rows.fetchall())


# query: (parameters, the index every read of occurrences must use, what each read may be)
PLANS: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "claim_candidates": (
        {"kind": "mail", "limit": 10},
        READY,
        [f"SEARCH occurrences USING INDEX {READY} (kind=? AND <expr><?)"],
    ),
    "claim_candidates_in_workspace": (
        {"kind": "mail", "workspace_id": "ws-1", "limit": 10},
        READY_WORKSPACE,
        [
            f"SEARCH occurrences USING INDEX {READY_WORKSPACE} "
            "(workspace_id=? AND kind=? AND <expr><?)"
        ],
    ),
    "oldest_due": (
        {"kind": "mail"},
        READY,
        [f"SEARCH occurrences USING INDEX {READY} (kind=? AND <expr><?)"],
    ),
    # The skip-scan: the first kind is the index's first entry (a scan that LIMIT 1 stops at
    # once, since the index order is the ORDER BY), each next one a seek past the previous.
    "live_kinds": (
        {},
        READY,
        [
            f"SCAN occurrences USING INDEX {READY}",
            f"SEARCH o USING INDEX {READY} (kind>?)",
        ],
    ),
    "live_kinds_in_workspace": (
        {"workspace_id": "ws-1"},
        READY_WORKSPACE,
        [
            f"SEARCH occurrences USING INDEX {READY_WORKSPACE} (workspace_id=?)",
            f"SEARCH o USING INDEX {READY_WORKSPACE} (workspace_id=? AND kind>?)",
        ],
    ),
    "select_expired_final_leases": (
        {"limit": 100},
        LEASES,
        [f"SEARCH occurrences USING INDEX {LEASES} (lease_expires_at<?)"],
    ),
}


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_claim_path_queries_read_their_index_without_sorting(
    populated_store: tuple[SQLiteStore, FakeClock], name: str, analyzed: bool
) -> None:
    store, clock = populated_store
    if analyzed:
        store._connection.raw.execute("ANALYZE")
        assert store._connection.raw.execute("SELECT COUNT(*) AS n FROM sqlite_stat1").fetchone()[
            "n"
        ]
    params, index, expected = PLANS[name]
    plan = _explain(store, name, {"now": clock(), **params})
    accesses = plan.occurrence_accesses()
    assert accesses == expected, plan.text()
    for detail in accesses:
        assert f"INDEX {index}" in detail, plan.text()
    assert not any("TEMP B-TREE" in node.detail for node in plan.nodes), plan.text()
    # nothing else is read: no other table, no automatic index
    others = [
        n.detail
        for n in plan.nodes
        if n.detail.startswith(("SCAN", "SEARCH")) and n.detail not in accesses
    ]
    assert all(d == "SCAN kinds" or d == "SCAN CONSTANT ROW" for d in others), plan.text()


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
def test_leasing_the_picked_rows_looks_them_up_by_primary_key(
    populated_store: tuple[SQLiteStore, FakeClock], analyzed: bool
) -> None:
    """The claim's UPDATE of the rows it picked (``:ids``, a JSON array) must find them by
    ``occurrence_id``, not walk the live rows through the status index and test each one."""
    store, clock = populated_store
    if analyzed:
        store._connection.raw.execute("ANALYZE")
    params = {"ids": '["a", "b"]', "owner_id": "w", "lease_expires_at": clock(), "now": clock()}
    plan = _explain(store, "apply_claims", params)
    assert plan.occurrence_accesses() == [
        "SEARCH occurrences USING INDEX sqlite_autoindex_occurrences_1 (occurrence_id=?)"
    ], plan.text()


def test_every_claim_query_pins_its_index() -> None:
    """``INDEXED BY`` keeps the plans above even where statistics would tempt SQLite away."""
    for name, (_, index, _) in PLANS.items():
        assert f"INDEXED BY {index}" in QUERIES[name], name


# -- claims stay flat --------------------------------------------------------------------------


class _StepCounter:
    """Counts SQLite VM instructions on the store's write connection (claims are writes)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._raw = store._connection.raw
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


# What stands in front of the wanted rows: (job, status). Every one of these rows is more
# overdue than the wanted rows.
IN_FRONT = {
    "another-kind": ("job-bulk", "queued"),
    "a-disabled-job": ("job-off", "queued"),
    "another-workspace": ("job-mail-ws2", "queued"),
    "settled-history": ("job-mail", "succeeded"),
    "live-leases-of-another-kind": ("job-bulk", "running-live"),
    "expired-leases-of-another-kind": ("job-bulk", "running-expired"),
}
# The claims measured, with the occurrence each must take (None: the row in front).
CLAIMS: dict[str, dict[str, Any]] = {
    "kind": {"job_kind": "mail"},
    "kinds": {"kinds": ["mail", "sms"]},
    "kind-in-workspace": {"job_kind": "mail", "workspace_id": "ws-1"},
    "workspace": {"workspace_id": "ws-1"},
    "any": {},
}


NOW = FakeClock()()


def _build_flat_file(path: Path, setup: str, rows_in_front: int) -> dict[str, str]:
    """A closed database file: the wanted rows, and ``rows_in_front`` more overdue rows."""
    store = jobledger.open_store(path, clock=FakeClock(NOW), synchronous="NORMAL")
    assert isinstance(store, SQLiteStore)
    try:
        _create_jobs(store)
        # the sms row is a little less overdue than the mail row, so claims of both take mail
        wanted = {}
        for kind, job, due in (("mail", "job-mail", NOW - 1_000), ("sms", "job-sms", NOW - 900)):
            occurrence = store.enqueue_occurrence(job_id=job, scheduled_for=due, trigger_key="w")
            wanted[kind] = occurrence.id
        job, status = IN_FRONT[setup]
        lease = {"running-live": NOW + 60_000, "running-expired": NOW - 500_000}.get(status)
        due = NOW - 1_000_000
        _insert(
            store,
            (
                {
                    "occurrence_id": f"front-{index:06d}",
                    "job_id": job,
                    "idempotency_key": f"front-{index:06d}",
                    "trigger_key": f"front-{index:06d}",
                    "scheduled_for": due + index,
                    "available_at": due + index,
                    "status": "running" if lease is not None else status,
                    "attempt": 0 if status == "queued" else 1,
                    "max_attempts": 3,
                    "fence": 0 if status == "queued" else 1,
                    "lease_owner": None if lease is None else "gone",
                    "lease_expires_at": lease,
                    "result_json": "null" if status == "succeeded" else None,
                    "created_at": due,
                    "settled_at": due if status == "succeeded" else None,
                }
                for index in range(rows_in_front)
            ),
        )
    finally:
        store.close()
    return wanted


@pytest.fixture(scope="module")
def flat_file(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str, int, Path], tuple[Path, dict[str, str]]]:
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


def _expected_claim(setup: str, claim: str, wanted: dict[str, str]) -> str | None:
    """The id a claim must return; ``None`` when a row in front is (rightly) more overdue."""
    takes_front = {
        # bulk rows (in ws-1): claims that name no kind
        "another-kind": {"any", "workspace"},
        "expired-leases-of-another-kind": {"any", "workspace"},
        # mail rows in ws-2: claims of mail outside a workspace
        "another-workspace": {"any", "kind", "kinds"},
    }.get(setup, set())
    if claim in takes_front:
        return None
    return wanted["mail"]


@pytest.mark.parametrize("claim", sorted(CLAIMS))
@pytest.mark.parametrize("setup", IN_FRONT)
def test_a_claim_does_the_same_work_whatever_stands_in_front(
    flat_file: Callable[[str, int, Path], tuple[Path, dict[str, str]]],
    setup: str,
    claim: str,
    tmp_path: Path,
) -> None:
    measured = []
    for size in (1_000, 50_000):
        path, wanted = flat_file(setup, size, tmp_path / str(size))
        store = jobledger.open_store(path, clock=FakeClock(NOW), synchronous="NORMAL")
        assert isinstance(store, SQLiteStore)
        try:
            with _StepCounter(store) as counter:
                claimed = store.claim_next(owner_id="w", lease_ms=60_000, **CLAIMS[claim])
        finally:
            store.close()
        assert claimed is not None
        expected = _expected_claim(setup, claim, wanted)
        if expected is None:
            assert claimed.job_id == IN_FRONT[setup][0]
        else:
            assert claimed.id == expected
        measured.append(counter.steps)
    small, large = measured
    # The same VM program over the same few index entries: equal, and far below the number of
    # rows in front (reading each of them would cost several steps per row).
    assert small == large, f"{small} steps with 1 000 rows in front, {large} with 50 000"
    assert large < 1_000


# -- order -------------------------------------------------------------------------------------


def _reference_order(rows: list[dict[str, Any]], now: int, jobs: set[str]) -> list[str]:
    """The reference's candidate order over ``jobs``, computed in Python from the rows."""
    eligible = []
    for row in rows:
        if row["job_id"] not in jobs or row["attempt"] >= row["max_attempts"]:
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


ORDER_CLAIMS: dict[str, tuple[dict[str, Any], set[str]]] = {
    # claim arguments, and the jobs whose rows they take (never the disabled job-off's)
    "any-kind": ({}, {"job-mail", "job-sms", "job-bulk", "job-mail-ws2"}),
    "two-kinds": ({"kinds": ["mail", "sms"]}, {"job-mail", "job-sms", "job-mail-ws2"}),
    "one-kind": ({"job_kind": "sms"}, {"job-sms"}),
    "workspace": ({"workspace_id": "ws-1"}, {"job-mail", "job-bulk"}),
    "kind-in-workspace": ({"job_kind": "mail", "workspace_id": "ws-1"}, {"job-mail"}),
}


@pytest.mark.parametrize("batch", [1, 7], ids=["claim_next", "claim_batch"])
@pytest.mark.parametrize("claims", sorted(ORDER_CLAIMS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claim_order_matches_the_reference_order(seed: int, claims: str, batch: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    now = clock()
    arguments, jobs = ORDER_CLAIMS[claims]
    with temp_store(clock, synchronous="NORMAL") as store:
        _create_jobs(store)
        rows = []
        for index in range(400):
            status = rng.choice(["queued", "retry_wait", "running", "succeeded", "dead_letter"])
            max_attempts = rng.choice([1, 2, 3])
            attempt = 0 if status == "queued" else rng.randint(1, max_attempts)
            rows.append(
                _row(
                    job_id=rng.choice(JOBS),
                    index=index,
                    # few distinct instants, so ties on due and scheduled_for are common
                    scheduled_for=now + rng.randint(-5, 5) * 1_000,
                    available_at=now + rng.randint(-6, 2) * 1_000,
                    lease_expires_at=now + rng.randint(-6, 2) * 1_000,
                    status=status,
                    attempt=attempt,
                    max_attempts=max_attempts,
                    created_at=now - 60_000,
                )
            )
        _insert(store, rows)
        expected = _reference_order(rows, now, jobs)
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
            and r["lease_expires_at"] <= now
            and r["attempt"] >= r["max_attempts"]
        }
        for occurrence_id in final_expired:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence is not None and occurrence.status == "dead_letter"
