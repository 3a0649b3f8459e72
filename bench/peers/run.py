"""Run the whole side-by-side measurement, interleaved, and append one JSON line per result.

    bash bench/peers/run_side_by_side.sh                      # 3 runs × everything + kill checks
    bash bench/peers/run_side_by_side.sh --n 500 --runs 1 --no-wait --killtests 0   # smoke test
    python bench/peers/summarize.py                           # the tables

Each run, in this order, with the system order rotated by one every run so no system always
goes first (huey, procrastinate, jobledger-sqlite, jobledger-postgres):

1. ``enqueue`` for every system;
2. ``enqueue-batch`` for every system (Huey records "n/a");
3. ``burndown`` at each ``--concurrency`` (default 1, 4, 8), every system at one concurrency
   before the next.

Then ``--killtests`` rounds (default 3) of the jobledger kill check on SQLite and PostgreSQL.
Every measurement is a fresh interpreter running a driver (bench_huey.py,
bench_procrastinate.py, bench_jobledger.py); the driver waits for the 1-minute load average to
drop below ``--load-threshold`` right before its timed part (at most ``--max-wait`` s).

The results file (default ``<scratch>/results/side-by-side.jsonl``) gets a ``session`` line
with the machine facts first, then one ``measurement`` line per step; lines from earlier
sessions are kept (summarize.py shows the latest session unless told otherwise).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import peerscommon as common

SYSTEMS = (
    "huey",
    "procrastinate",
    "jobledger-sqlite",
    "jobledger-postgres",
    "jobledger-sqlite-normal",
)
STEPS = ("enqueue", "enqueue-batch", "burndown", "killtest")
DRIVERS = {
    "huey": ["bench_huey.py"],
    "procrastinate": ["bench_procrastinate.py"],
    "jobledger-sqlite": ["bench_jobledger.py", "--store", "sqlite"],
    "jobledger-postgres": ["bench_jobledger.py", "--store", "postgres"],
    "jobledger-sqlite-normal": ["bench_jobledger.py", "--store", "sqlite-normal"],
}
STORES = {
    "huey": "sqlite",
    "procrastinate": "postgres",
    "jobledger-sqlite": "sqlite",
    "jobledger-postgres": "postgres",
    "jobledger-sqlite-normal": "sqlite-normal",
}


def csv(kind: type, choices: tuple[str, ...] | None = None) -> Any:
    def parse(text: str) -> list[Any]:
        values = [kind(part.strip()) for part in text.split(",") if part.strip()]
        if choices is not None:
            for value in values:
                if value not in choices:
                    raise argparse.ArgumentTypeError(f"{value!r} is not one of {choices}")
        return values

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=common.DEFAULT_N, help="tasks per measurement")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=csv(int), default=[1, 4, 8], help="e.g. 1,4,8")
    parser.add_argument("--batch-size", type=int, default=common.DEFAULT_BATCH)
    parser.add_argument("--systems", type=csv(str, SYSTEMS), default=list(SYSTEMS))
    parser.add_argument("--steps", type=csv(str, STEPS), default=list(STEPS))
    parser.add_argument("--killtests", type=int, default=3, help="kill-check rounds (0 = none)")
    parser.add_argument("--kill-concurrency", type=int, default=4)
    parser.add_argument("--scratch", type=Path, default=common.DEFAULT_SCRATCH)
    parser.add_argument("--results", type=Path, default=None, help="JSON lines file to append")
    parser.add_argument("--load-threshold", type=float, default=common.DEFAULT_LOAD_THRESHOLD)
    parser.add_argument("--max-wait", type=float, default=common.DEFAULT_MAX_WAIT_S)
    parser.add_argument("--no-wait", action="store_true", help="skip the quiet-machine wait")
    parser.add_argument("--timeout", type=float, default=900.0, help="per burn-down, seconds")
    parser.add_argument(
        "--jobledger-worker-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="extra `jobledger worker` arguments, shell-split, repeatable "
        "(write --jobledger-worker-arg='--prefetch 8')",
    )
    parser.add_argument("--python", default=sys.executable, help="interpreter for the drivers")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)
    if args.results is None:
        args.results = args.scratch / "results" / "side-by-side.jsonl"
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, str, int | None, str]]:
    """(system, step, concurrency, run label) in execution order."""
    items: list[tuple[str, str, int | None, str]] = []
    systems = list(args.systems)
    for run in range(1, args.runs + 1):
        shift = (run - 1) % len(systems)
        order = systems[shift:] + systems[:shift]
        for step in ("enqueue", "enqueue-batch"):
            if step in args.steps:
                items.extend((system, step, None, str(run)) for system in order)
        if "burndown" in args.steps:
            for concurrency in args.concurrency:
                items.extend((system, "burndown", concurrency, str(run)) for system in order)
    if "killtest" in args.steps:
        stores = [s for s in ("jobledger-sqlite", "jobledger-postgres") if s in args.systems]
        for index in range(1, args.killtests + 1):
            items.extend(
                (store, "killtest", args.kill_concurrency, f"k{index}") for store in stores
            )
    return items


def command(
    args: argparse.Namespace, system: str, step: str, concurrency: int | None, run: str
) -> list[str]:
    cmd = [args.python, *DRIVERS[system][:1], step, *DRIVERS[system][1:]]
    cmd += ["--n", str(args.n), "--run", run, "--scratch", str(args.scratch)]
    cmd += ["--batch-size", str(args.batch_size), "--timeout", str(args.timeout)]
    cmd += ["--load-threshold", str(args.load_threshold), "--max-wait", str(args.max_wait)]
    if args.no_wait:
        cmd.append("--no-wait")
    if concurrency is not None:
        cmd += ["--concurrency", str(concurrency)]
    if system.startswith("jobledger"):
        cmd += [f"--jobledger-worker-arg={item}" for item in args.jobledger_worker_arg]
    return cmd


def run_one(cmd: list[str], timeout: float) -> tuple[dict[str, Any] | None, str]:
    try:
        done = subprocess.run(
            cmd, cwd=str(common.HERE), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        return None, f"driver timed out after {timeout} s: {exc}"
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line), done.stderr[-2000:]
            except json.JSONDecodeError:
                break
    return None, f"exit {done.returncode}: {done.stderr[-2000:]}"


def describe(result: dict[str, Any]) -> str:
    if result.get("na"):
        return "n/a"
    if result.get("step") == "killtest":
        return (
            f"re-run {result.get('rerun_started_after_kill_s')} s after the kill, "
            f"final {result.get('final', {}).get('status')}"
        )
    rate = result.get("rate")
    return f"{rate:,.0f}/s" if isinstance(rate, int | float) else "-"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    items = plan(args)
    if args.dry_run:
        for system, step, concurrency, run in items:
            print(shlex.join(command(args, system, step, concurrency, run)))
        return 0
    session = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    args.results.parent.mkdir(parents=True, exist_ok=True)
    facts_run = subprocess.run(
        [args.python, "peerscommon.py", str(args.scratch)],
        cwd=str(common.HERE),
        capture_output=True,
        text=True,
        check=True,
    )
    header = {
        "type": "session",
        "session": session,
        "facts": json.loads(facts_run.stdout),
        "options": {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in vars(args).items()
        },
        "plan": len(items),
    }
    with args.results.open("a") as out:
        out.write(json.dumps(header) + "\n")
    print(f"session {session}: {len(items)} measurements -> {args.results}", flush=True)
    failures = 0
    began = time.monotonic()
    for index, (system, step, concurrency, run) in enumerate(items, 1):
        cmd = command(args, system, step, concurrency, run)
        # a generous cap on the driver: waits, prefill, the drain, checks
        result, stderr = run_one(cmd, timeout=args.timeout + args.max_wait + 1800)
        if result is None:
            result = {
                "type": "measurement",
                "system": system.split("-")[0],
                "store": STORES[system],
                "step": step,
                "concurrency": concurrency,
                "run": run,
                "n": args.n,
                "ok": False,
                "error": stderr,
            }
        result["session"] = session
        result["seq"] = index
        result["command"] = cmd[1:]
        with args.results.open("a") as out:
            out.write(json.dumps(result, default=str) + "\n")
        ok = bool(result.get("ok"))
        failures += not ok
        c = "" if concurrency is None or step == "killtest" else f" c={concurrency}"
        print(
            f"[{index}/{len(items)} {time.monotonic() - began:6.0f}s] run {run} {system} {step}{c}:"
            f" {describe(result)}{'' if ok else '  FAILED ' + str(result.get('error', ''))[:300]}",
            flush=True,
        )
        if not ok and args.fail_fast:
            break
    print(f"done: {failures} failed; python summarize.py {args.results}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
