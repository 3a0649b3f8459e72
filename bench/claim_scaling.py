"""How the SQLite claim path scales with queue size and with processes on one file.

Two measurements, both on a real SQLite file with the default store settings (WAL,
synchronous=FULL, 5 s busy timeout) and the real system clock:

(a) latency: with N queued occurrences already in the file, time ``claim_next`` and the
    following ``settle`` for ``--cycles`` cycles; the queue stays ~N long throughout.
(b) drain: ``--drain`` occurrences drained to empty by 1 process and by ``--processes``
    processes sharing the file; throughput is total claim+settle cycles per second of wall time.

Variants of (a): ``current`` (the store as installed) and ``analyzed`` (current, after
``ANALYZE`` has written planner statistics to the file: the claim queries pin their index, so
the two should match).

    python3 bench/claim_scaling.py                        # everything, defaults
    python3 bench/claim_scaling.py --sizes 1000,10000 --cycles 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import jobledger

AUTHORITY = {"principal": {"type": "user", "id": "bench"}}
JOB_ID = "bench-job"
LEASE_MS = 60_000
BATCH = 10_000  # the most enqueue_batch takes in one call


def now_ms() -> int:
    return jobledger.system_clock()


def open_bench_store(path: Path) -> Any:
    return jobledger.open_store(str(path))


def populate(path: Path, count: int) -> None:
    """Create the job and ``count`` queued occurrences, all due, through ``enqueue_batch``
    (10,000 per transaction, with their events, exactly as an application enqueues them)."""
    store = open_bench_store(path)
    try:
        job = store.get_job(JOB_ID) or store.create_job(
            id=JOB_ID, kind="bench", authority=AUTHORITY, payload={"n": 1}
        )
        start = store.now() - count  # all due already, distinct scheduled_for
        for first in range(0, count, BATCH):
            store.enqueue_batch(
                [
                    jobledger.EnqueueRequest(
                        job_id=job.id, scheduled_for=start + index, trigger_key=f"bench-{index}"
                    )
                    for index in range(first, min(count, first + BATCH))
                ]
            )
        store._connection.raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        store.close()


def cycle(store: Any, owner: str, work_ms: float = 0.0) -> bool:
    """One claim_next + settle (with ``work_ms`` of handler time between); False when idle."""
    claimed = store.claim_next(owner_id=owner, lease_ms=LEASE_MS)
    if claimed is None:
        return False
    if work_ms:
        time.sleep(work_ms / 1000)  # a handler doing I/O: holds no database lock
    store.settle(occurrence_id=claimed.id, owner_id=owner, fence=claimed.fence, outcome="succeeded")
    return True


def batch_cycle(store: Any, owner: str, batch: int, work_ms: float = 0.0) -> int:
    """One claim_batch of up to ``batch`` + one settle_batch; returns how many were drained.

    The handlers run one after another (``work_ms`` each), as one thread would run them.
    """
    claimed = store.claim_batch(owner_id=owner, lease_ms=LEASE_MS, limit=batch)
    if not claimed:
        return 0
    if work_ms:
        time.sleep(work_ms * len(claimed) / 1000)
    settled = store.settle_batch(
        [
            jobledger.Settlement(
                occurrence_id=occurrence.id,
                owner_id=owner,
                fence=occurrence.fence,
                outcome="succeeded",
            )
            for occurrence in claimed
        ]
    )
    lost = [item for item in settled if isinstance(item, jobledger.LeaseLost)]
    if lost:
        raise lost[0]
    return len(claimed)


def drain_step(store: Any, owner: str, batch: int, work_ms: float) -> int:
    """Occurrences drained by one step: per-call API when ``batch`` is 1, batch API otherwise."""
    if batch == 1:
        return 1 if cycle(store, owner, work_ms) else 0
    return batch_cycle(store, owner, batch, work_ms)


def measure_latency(path: Path, cycles: int, variant: str) -> dict[str, Any]:
    store = open_bench_store(path)
    try:
        if variant == "analyzed":
            store._connection.raw.execute("ANALYZE")
        claim_ms: list[float] = []
        cycle_ms: list[float] = []
        for _ in range(5):  # warm the page cache and statement cache
            cycle(store, "warmup")
        started = time.perf_counter()
        for _ in range(cycles):
            t0 = time.perf_counter()
            claimed = store.claim_next(owner_id="bench", lease_ms=LEASE_MS)
            t1 = time.perf_counter()
            assert claimed is not None, "queue ran dry; use fewer --cycles"
            store.settle(
                occurrence_id=claimed.id,
                owner_id="bench",
                fence=claimed.fence,
                outcome="succeeded",
            )
            t2 = time.perf_counter()
            claim_ms.append((t1 - t0) * 1000)
            cycle_ms.append((t2 - t0) * 1000)
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    return {
        "cycles": cycles,
        "claim_mean_ms": statistics.fmean(claim_ms),
        "claim_median_ms": statistics.median(claim_ms),
        "cycle_mean_ms": statistics.fmean(cycle_ms),
        "cycle_median_ms": statistics.median(cycle_ms),
        "cycle_p95_ms": statistics.quantiles(cycle_ms, n=20)[-1],
        "cycles_per_s": cycles / elapsed,
    }


def drain_worker(
    path: str, owner: str, start: Any, result_path: str, work_ms: float, batch: int
) -> None:
    """Drain until empty; write counts (and any error) as JSON to ``result_path``."""
    report: dict[str, Any] = {"owner": owner, "claimed": 0, "errors": []}
    try:
        opened = time.perf_counter()
        store = open_bench_store(Path(path))
        try:
            report["open_s"] = time.perf_counter() - opened
            start.wait()
            t0 = time.perf_counter()
            report["started_at"] = t0
            while drained := drain_step(store, owner, batch, work_ms):
                if report["claimed"] == 0:
                    report["first_claim_s"] = time.perf_counter() - t0
                report["claimed"] += drained
            report["seconds"] = time.perf_counter() - t0
        finally:
            store.close()
    except Exception as exc:
        report["errors"].append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    Path(result_path).write_text(json.dumps(report))


def measure_drain(
    directory: Path, count: int, processes: int, work_ms: float = 0.0, batch: int = 1
) -> dict[str, Any]:
    path = directory / f"drain-{processes}.sqlite3"
    populate(path, count)
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    workers = []
    results = []
    for index in range(processes):
        result_path = directory / f"drain-{processes}-{index}.json"
        results.append(result_path)
        worker = context.Process(
            target=drain_worker,
            args=(str(path), f"w{index}", start, str(result_path), work_ms, batch),
        )
        worker.start()
        workers.append(worker)
    time.sleep(1.0)  # let every process import jobledger and open the store
    t0 = time.perf_counter()
    start.set()
    for worker in workers:
        worker.join(timeout=600)
    elapsed = time.perf_counter() - t0
    reports = [json.loads(p.read_text()) for p in results]
    errors = [e for r in reports for e in r["errors"]]
    claimed = sum(r["claimed"] for r in reports)
    with sqlite3.connect(path) as conn:
        succeeded = conn.execute(
            "SELECT count(*) FROM occurrences WHERE status = 'succeeded'"
        ).fetchone()[0]
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {
        "processes": processes,
        "work_ms": work_ms,
        "batch": batch,
        "occurrences": count,
        "claimed": claimed,
        "succeeded": succeeded,
        "per_process": [r["claimed"] for r in reports],
        "first_claim_s": [round(r.get("first_claim_s", -1), 4) for r in reports],
        "open_s": [round(r.get("open_s", -1), 4) for r in reports],
        "errors": errors,
        "seconds": elapsed,
        "cycles_per_s": claimed / elapsed,
    }


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="queued occurrences")
    parser.add_argument("--cycles", type=int, default=500, help="claim+settle cycles per size")
    parser.add_argument("--variants", default="current,analyzed", help="latency variants to run")
    parser.add_argument("--drain", type=int, default=4000, help="occurrences per drain run")
    parser.add_argument("--processes", type=int, default=4, help="processes for the drain")
    parser.add_argument(
        "--work-ms",
        default="0,2",
        help="simulated handler time between claim and settle, one drain pair per value",
    )
    parser.add_argument(
        "--batch",
        default="1,16",
        help="drain batch sizes: 1 loops claim_next/settle, N loops claim_batch/settle_batch",
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-drain", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    base = Path(tempfile.mkdtemp(prefix="jobledger-bench-", dir=args.dir))
    directory = base / "db"  # the store wants a private (0700) directory of its own
    results: dict[str, Any] = {"machine": machine(), "latency": [], "drain": []}
    print(f"# {results['machine']}")
    try:
        if not args.skip_latency:
            print(
                f"{'variant':<10} {'queued':>8} {'claim ms (mean/median)':>24} "
                f"{'cycle ms (mean/median/p95)':>28} {'cycles/s':>9}"
            )
            for size in sizes:
                for variant in variants:
                    # a fresh file per variant, so every variant sees the same ~size queue
                    path = directory / f"latency-{size}-{variant}.sqlite3"
                    populate(path, size)
                    cycles = args.cycles
                    row = {"variant": variant, "queued": size}
                    row.update(measure_latency(path, cycles, variant))
                    results["latency"].append(row)
                    print(
                        f"{variant:<10} {size:>8} "
                        f"{row['claim_mean_ms']:>11.3f} / {row['claim_median_ms']:<10.3f} "
                        f"{row['cycle_mean_ms']:>9.3f} / {row['cycle_median_ms']:.3f} / "
                        f"{row['cycle_p95_ms']:<8.3f} {row['cycles_per_s']:>9.0f}",
                        flush=True,
                    )
                    for suffix in ("", "-wal", "-shm"):
                        Path(f"{path}{suffix}").unlink(missing_ok=True)
        if not args.skip_drain:
            print(
                f"\n{'batch':>5} {'work ms':>7} {'processes':>9} {'drained':>8} {'seconds':>8} "
                f"{'cycles/s':>9}  per process"
            )
            batches = [int(b) for b in args.batch.split(",") if b]
            for batch in batches:
                for work_ms in [float(w) for w in args.work_ms.split(",") if w]:
                    for processes in sorted({1, args.processes}):
                        row = measure_drain(directory, args.drain, processes, work_ms, batch)
                        results["drain"].append(row)
                        print(
                            f"{batch:>5} {work_ms:>7g} {processes:>9} {row['succeeded']:>8} "
                            f"{row['seconds']:>8.2f} "
                            f"{row['cycles_per_s']:>9.0f}  {row['per_process']} first claim "
                            f"after {row['first_claim_s']} s",
                            flush=True,
                        )
                        for error in row["errors"]:
                            print(f"  error: {error.splitlines()[0]}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
