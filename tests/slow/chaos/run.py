"""Run the kill harness from a shell: one command, one seed.

    python -m tests.slow.chaos.run --store sqlite --seed 7 --short
    python -m tests.slow.chaos.run --store both --seed 7 --long --json chaos-report.json
    python -m tests.slow.chaos.run --store postgres --cuts        # session cuts, 0.2-2 s cadences
    python -m tests.slow.chaos.run --store sqlite --clock         # clock steps, +2 h and -1 h
    python -m tests.slow.chaos.run --store both --recovery        # buffered claims, limits toggled

Prints a summary per store (kills, restarts, re-runs, the kill-to-re-run times and every
violation found) and exits 1 if any promise was broken. ``--keep`` leaves the work directory
(store, side-effect file, worker logs) for inspection.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from .harness import ChaosConfig, default_workdir, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.slow.chaos.run", description=__doc__)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seed", type=int, default=1)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--short", dest="preset", action="store_const", const="short")
    size.add_argument("--long", dest="preset", action="store_const", const="long")
    size.add_argument(
        "--cuts",
        dest="preset",
        action="store_const",
        const="cuts",
        help="PostgreSQL: cut a live worker's sessions at 0.2-2 s cadences (no kills)",
    )
    size.add_argument("--cuts-long", dest="preset", action="store_const", const="cuts-long")
    size.add_argument(
        "--clock",
        dest="preset",
        action="store_const",
        const="clock",
        help="step live workers' clocks 2 h forward and 1 h back, and back (no kills)",
    )
    size.add_argument("--clock-long", dest="preset", action="store_const", const="clock-long")
    size.add_argument(
        "--recovery",
        dest="preset",
        action="store_const",
        const="recovery",
        help="kills with the default prefetch: max_attempts=1 and adjudicate jobs, partition "
        "limits removed and restored",
    )
    size.add_argument("--recovery-long", dest="preset", action="store_const", const="recovery-long")
    parser.add_argument("--rounds", type=int, help="override the preset's number of rounds")
    parser.add_argument("--json", type=Path, help="write the reports here")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args(argv)
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    reports = []
    failed = False
    for store in stores:
        config = ChaosConfig.preset(args.preset or "short", store, args.seed)
        if args.rounds is not None:
            config.rounds = args.rounds
        workdir = default_workdir(store)
        try:
            report = run_chaos(config, workdir)
        finally:
            if not args.keep:
                shutil.rmtree(workdir, ignore_errors=True)
        report["workdir"] = str(workdir) if args.keep else None
        reports.append(report)
        failed = failed or bool(report["problems"])
        shown = {k: v for k, v in report.items() if k not in ("config", "worker_summaries")}
        print(json.dumps({"store": store, **shown}, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(reports, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
