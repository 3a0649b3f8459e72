"""Claim cost under filters, behind a backlog the claim must not see, on SQLite and PostgreSQL.

For each scenario and each backlog size, a fresh store gets ``size`` due occurrences that the
claim must skip, all due *before* the ``--cycles`` occurrences it should take, then times
``claim_next`` + ``settle`` cycles of the wanted ones:

* ``kind`` — the backlog belongs to a job of another kind; the claim asks for ``kinds={"mail"}``;
* ``disabled`` — the backlog belongs to a disabled job of the same kind;
* ``workspace`` — the backlog is in another workspace; the claim passes ``workspace_id``;
* ``paused`` — the backlog is in a paused queue; the claim names no queue;
* ``queue`` — the backlog is in another queue; the claim passes ``queues={"default"}``;
* ``partition`` — the backlog is in one partition at its limit (``partition_concurrency=1``,
  one occurrence of it running), all due before the wanted ones in other partitions;
* ``priority`` — the backlog is due first but at a lower priority than the wanted ones.

A claim that walked the backlog would grow ~100× from 1k to 100k; a flat one does not move.
``--analyze`` runs ``ANALYZE`` after filling (what autovacuum does on PostgreSQL by default):
without planner statistics PostgreSQL may choose the kind lane for a workspace claim and filter
the other workspace's rows one by one (``docs/benchmarks.md``).

    python bench/claim_filters.py                                   # SQLite, 1k and 100k
    python bench/claim_filters.py --postgres postgresql://postgres@127.0.0.1:5432/test
    python bench/claim_filters.py --sizes 1000,30000 --cycles 200 --json out.json
    python bench/claim_filters.py --postgres postgresql://postgres@127.0.0.1:5432/test --analyze
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jobledger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

BATCH = 10_000
LEASE_MS = 60_000
SCENARIOS = ("kind", "disabled", "workspace", "paused", "queue", "partition", "priority")


def authority(workspace: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {"principal": {"type": "user", "id": "bench"}}
    if workspace is not None:
        found["workspaceId"] = workspace
    return found


def enqueue(store: Any, job_id: str, count: int, first_due: int, **lane: Any) -> None:
    """``count`` due occurrences of ``job_id``; ``lane``: queue, priority or partition (a
    callable of the index gives a value per occurrence)."""
    for start in range(0, count, BATCH):
        store.enqueue_batch(
            [
                jobledger.EnqueueRequest(
                    job_id=job_id,
                    scheduled_for=first_due + index,
                    trigger_key=f"t{index}",
                    **{k: v(index) if callable(v) else v for k, v in lane.items()},
                )
                for index in range(start, min(count, start + BATCH))
            ]
        )


def prepare_queues(store: Any, scenario: str, size: int, cycles: int) -> dict[str, Any]:
    """The queue scenarios (SPEC §7): what the claim must skip is paused, elsewhere, held or
    of a lower priority."""
    now = store.now()
    backlog_due, wanted_due = now - 10 * (size + cycles), now - 5 * cycles
    store.create_job(id="noise", kind="mail", authority=authority(None))
    store.create_job(id="wanted", kind="mail", authority=authority(None))
    if scenario in ("paused", "queue"):
        enqueue(store, "noise", size, backlog_due, queue="bulk")
        enqueue(store, "wanted", cycles, wanted_due)
        if scenario == "paused":
            store.pause_queue("bulk", reason="bench", actor="bench")
            return {"kinds": {"mail"}}
        return {"kinds": {"mail"}, "queues": {"default"}}
    if scenario == "partition":
        store.declare_queue(jobledger.Queue(name="tenants", partition_concurrency=1), actor="bench")
        enqueue(store, "noise", size + 1, backlog_due, queue="tenants", partition="big")
        occupant = store.claim_next(owner_id="occupant", lease_ms=86_400_000, kinds={"mail"})
        assert occupant is not None
        assert occupant.partition == "big", occupant
        enqueue(
            store,
            "wanted",
            cycles,
            wanted_due,
            queue="tenants",
            partition=lambda index: f"small-{index}",
        )
        return {"kinds": {"mail"}}
    enqueue(store, "noise", size, backlog_due, priority=-10)
    enqueue(store, "wanted", cycles, wanted_due, priority=10)
    return {"kinds": {"mail"}}


def prepare(store: Any, scenario: str, size: int, cycles: int) -> dict[str, Any]:
    """Fill the store; return the claim's filter arguments."""
    if scenario in ("paused", "queue", "partition", "priority"):
        return prepare_queues(store, scenario, size, cycles)
    now = store.now()
    backlog_due, wanted_due = now - 10 * (size + cycles), now - 5 * cycles
    if scenario == "kind":
        store.create_job(id="noise", kind="report", authority=authority(None))
        store.create_job(id="wanted", kind="mail", authority=authority(None))
        enqueue(store, "noise", size, backlog_due)
        enqueue(store, "wanted", cycles, wanted_due)
        return {"kinds": {"mail"}}
    if scenario == "disabled":
        store.create_job(id="noise", kind="mail", authority=authority(None))
        store.create_job(id="wanted", kind="mail", authority=authority(None))
        enqueue(store, "noise", size, backlog_due)
        enqueue(store, "wanted", cycles, wanted_due)
        job = store.get_job("noise")
        store.update_job("noise", expected_revision=job.revision, patch={"enabled": False})
        return {"kinds": {"mail"}}
    store.create_job(id="noise", kind="mail", authority=authority("team-a"))
    store.create_job(id="wanted", kind="mail", authority=authority("team-b"))
    enqueue(store, "noise", size, backlog_due)
    enqueue(store, "wanted", cycles, wanted_due)
    return {"kinds": {"mail"}, "workspace_id": "team-b"}


def analyze(target: str, options: dict[str, Any]) -> None:
    """Write planner statistics for the filled store, as autovacuum would."""
    if "schema" in options:
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute(f'ANALYZE "{options["schema"]}".occurrences')
    else:
        with sqlite3.connect(target) as conn:
            conn.execute("ANALYZE")
        conn.close()


def measure(
    target: str, options: dict[str, Any], scenario: str, size: int, cycles: int, *, stats: bool
) -> dict:
    with jobledger.open_store(target, **options) as store:
        filters = prepare(store, scenario, size, cycles)
        if stats:
            analyze(target, options)
        claim_ms: list[float] = []
        for _ in range(cycles):
            t0 = time.perf_counter()
            claimed = store.claim_next(owner_id="bench", lease_ms=LEASE_MS, **filters)
            claim_ms.append((time.perf_counter() - t0) * 1000)
            assert claimed is not None, "the wanted occurrences ran out"
            assert claimed.job_id == "wanted", claimed
            store.settle(
                occurrence_id=claimed.id, owner_id="bench", fence=claimed.fence, outcome="succeeded"
            )
        left = store.claim_next(owner_id="bench", lease_ms=LEASE_MS, **filters)
        # Only the lower-priority backlog is claimable once the wanted ones ran.
        assert left is None or (scenario == "priority" and left.job_id == "noise"), left
    return {
        "scenario": scenario,
        "backlog": size,
        "analyzed": stats,
        "cycles": cycles,
        "claim_mean_ms": statistics.fmean(claim_ms),
        "claim_median_ms": statistics.median(claim_ms),
        "claim_p95_ms": statistics.quantiles(claim_ms, n=20)[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000", help="backlog sizes to skip")
    parser.add_argument("--cycles", type=int, default=300, help="claims timed per measurement")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--postgres", default=None, help="also measure on this PostgreSQL URL")
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--analyze", action="store_true", help="write planner statistics after filling"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    scenarios = [s for s in args.scenarios.split(",") if s]
    base = Path(tempfile.mkdtemp(prefix="jobledger-filters-", dir=args.dir))
    rows: list[dict[str, Any]] = []
    statistics_note = "ANALYZE after filling" if args.analyze else "none"
    print(f"# {machine()}; planner statistics: {statistics_note}")
    print(f"{'store':<9}{'scenario':<10}{'backlog':>8} {'claim ms mean / median / p95':>30}")
    try:
        for scenario in scenarios:
            for size in sizes:
                stores: list[tuple[str, str, dict[str, Any]]] = []
                if not args.skip_sqlite:
                    path = base / f"{scenario}-{size}" / "filters.sqlite3"
                    stores.append(("sqlite", str(path), {}))
                if args.postgres:
                    schema = f"jl_filters_{scenario}_{size}"
                    stores.append(("postgres", args.postgres, {"schema": schema}))
                for name, target, options in stores:
                    measured = measure(
                        target, options, scenario, size, args.cycles, stats=args.analyze
                    )
                    row = {"store": name, **measured}
                    rows.append(row)
                    print(
                        f"{name:<9}{scenario:<10}{size:>8} {row['claim_mean_ms']:>12.3f} / "
                        f"{row['claim_median_ms']:.3f} / {row['claim_p95_ms']:.3f}",
                        flush=True,
                    )
                    if name == "postgres":
                        import psycopg

                        with psycopg.connect(target, autocommit=True) as conn:
                            conn.execute(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
