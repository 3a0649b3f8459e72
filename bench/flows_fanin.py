"""Fan-in settle cost (SPEC §10): settling a parent costs the same whatever the fan-in's size.

For each size N, on a fresh store: N ``leaf`` occurrences joined into one result — in groups of
at most 1,000 parents per join (SPEC §10's limit), then one final join after the groups (for
N ≤ 1,000, one join directly). Every leaf is claimed in batches of ``--batch`` and settled
with ``settle_batch``; each settle batch is timed. Then the same N leaves *without* any join
are settled the same way on another fresh store: the baseline.

Reported per size: mean settle cost per parent (ms) over all batches, over the first and the
last tenth of the batches (a cost growing with the parents already settled, or with the number
still pending, would show there), the overhead over the baseline, and that each join became
claimable exactly once — after its last parent.

    python bench/flows_fanin.py                                   # SQLite: 100, 1,000, 10,000
    python bench/flows_fanin.py --postgres postgresql://postgres@127.0.0.1:5432/postgres
    python bench/flows_fanin.py --sizes 1000,10000 --json results.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import jobledger
from jobledger import EnqueueRequest, Settlement

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

AUTHORITY = {"principal": {"type": "user", "id": "bench"}}
GROUP = 1_000  # SPEC §10: at most 1,000 parents per child
ENQUEUE_CHUNK = 10_000


def build(store: jobledger.Store, size: int, *, joined: bool) -> list[str]:
    """``size`` leaves (and, if ``joined``, their joins); returns the join ids."""
    store.create_job(id="leaf", kind="leaf", authority=AUTHORITY)
    store.create_job(id="join", kind="join", authority=AUTHORITY)
    now = store.now()
    leaves: list[str] = []
    for start in range(0, size, ENQUEUE_CHUNK):
        batch = [
            EnqueueRequest("leaf", now, f"leaf-{i}")
            for i in range(start, min(size, start + ENQUEUE_CHUNK))
        ]
        leaves += [occurrence.id for occurrence in store.enqueue_batch(batch)]
    if not joined:
        return []
    groups = [tuple(leaves[i : i + GROUP]) for i in range(0, size, GROUP)]
    joins = [
        occurrence.id
        for occurrence in store.enqueue_batch(
            [EnqueueRequest("join", now, f"group-{i}", after=g) for i, g in enumerate(groups)]
        )
    ]
    if len(joins) > 1:
        [final] = store.enqueue_batch([EnqueueRequest("join", now, "final", after=tuple(joins))])
        joins.append(final.id)
    return joins


def settle_all(store: jobledger.Store, batch: int) -> list[float]:
    """Claim every leaf in batches and settle each batch; the seconds each settle took."""
    timings: list[float] = []
    while True:
        claimed = store.claim_batch(owner_id="bench", lease_ms=600_000, limit=batch, kinds=["leaf"])
        if not claimed:
            return timings
        settlements = [
            Settlement(o.id, "bench", o.fence, "succeeded", result={"n": 1}) for o in claimed
        ]
        started = time.perf_counter()
        store.settle_batch(settlements)
        timings.append((time.perf_counter() - started) / len(claimed))


def summarize(timings: list[float]) -> dict[str, float]:
    tenth = max(1, len(timings) // 10)
    return {
        "mean_ms": statistics.fmean(timings) * 1000,
        "median_ms": statistics.median(timings) * 1000,
        "first_tenth_ms": statistics.fmean(timings[:tenth]) * 1000,
        "last_tenth_ms": statistics.fmean(timings[-tenth:]) * 1000,
    }


def one_size(open_fresh: Any, size: int, batch: int) -> dict[str, Any]:
    with open_fresh() as store:
        joins = build(store, size, joined=True)
        timings = settle_all(store, batch)
        states = [store.get_occurrence(j).status for j in joins]  # type: ignore[union-attr]
        unblocked = [
            sum(1 for e in store.history(occurrence_id=j) if e.type == "occurrence_unblocked")
            for j in joins
        ]
    # the group joins are queued now; the final one (if any) waits for them
    assert unblocked[: len(joins) - (len(joins) > 1)] == [1] * (len(joins) - (len(joins) > 1))
    assert states[-1] == ("blocked" if len(joins) > 1 else "queued")
    with open_fresh() as store:
        build(store, size, joined=False)
        baseline = settle_all(store, batch)
    flows, plain = summarize(timings), summarize(baseline)
    return {
        "parents": size,
        "joins": len(joins),
        "settle_per_parent": flows,
        "baseline_per_parent": plain,
        "overhead_ms": flows["mean_ms"] - plain["mean_ms"],
    }


def on_postgres(url: str, size: int, batch: int) -> dict[str, Any]:
    """:func:`one_size` on fresh schemas of the database at ``url`` (dropped afterwards)."""
    import psycopg

    schemas: list[str] = []

    def open_fresh() -> jobledger.Store:
        schemas.append(f"bench_flows_{uuid.uuid4().hex[:12]}")
        return jobledger.open_store(url, schema=schemas[-1], listen=False)

    try:
        row = one_size(open_fresh, size, batch)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    row["store"] = "postgres"
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--batch", type=int, default=100, help="claims/settles per transaction")
    parser.add_argument("--postgres", default=None, help="measure on this PostgreSQL URL instead")
    parser.add_argument("--dir", default=None, help="where the SQLite files go")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="jobledger-flows-", dir=args.dir))
    results: dict[str, Any] = {"machine": machine(), "batch": args.batch, "sizes": []}
    print(json.dumps(results["machine"]))
    try:
        for size in sizes:
            if args.postgres:
                row = on_postgres(args.postgres, size, args.batch)
            else:
                row = one_size(
                    lambda: jobledger.open_store(workdir / f"{uuid.uuid4().hex}.db"),
                    size,
                    args.batch,
                )
                row["store"] = "sqlite"
            results["sizes"].append(row)
            flows, plain = row["settle_per_parent"], row["baseline_per_parent"]
            print(
                f"{row['store']:8} parents {size:>6,} ({row['joins']} joins): settle "
                f"{flows['mean_ms']:.3f} ms/parent (first tenth {flows['first_tenth_ms']:.3f}, "
                f"last tenth {flows['last_tenth_ms']:.3f}); without joins "
                f"{plain['mean_ms']:.3f} ms/parent; overhead {row['overhead_ms']:+.3f} ms"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
