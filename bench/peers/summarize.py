"""Markdown tables from run.py's JSON lines: ratios first, then every measurement.

    python bench/peers/summarize.py                                   # latest session, default file
    python bench/peers/summarize.py /tmp/jobledger-peersbench/results/side-by-side.jsonl
    python bench/peers/summarize.py results.jsonl --session 20261130T195400   # or --all-sessions

Ratios are jobledger ÷ peer on tasks per second (above 1 = jobledger faster): jobledger on
SQLite against Huey, jobledger on PostgreSQL against Procrastinate, per step and concurrency,
from the medians; "per run" is the range of the ratios of the same run (the runs interleave).
"Spread" is (max − min) / median over the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import peerscommon as common

PAIRS = (
    ("sqlite", ("huey", "sqlite"), "Huey", ("jobledger", "sqlite"), "jobledger (SQLite)"),
    (
        "postgres",
        ("procrastinate", "postgres"),
        "Procrastinate",
        ("jobledger", "postgres"),
        "jobledger (PG)",
    ),
)
LABELS = {
    ("huey", "sqlite"): "Huey (SQLite)",
    ("procrastinate", "postgres"): "Procrastinate (PG)",
    ("jobledger", "sqlite"): "jobledger (SQLite)",
    ("jobledger", "postgres"): "jobledger (PG)",
    ("jobledger", "sqlite-normal"): "jobledger (SQLite, NORMAL)",
}
# jobledger on SQLite at synchronous=NORMAL (durable against a process crash, not power loss),
# against Huey as shipped: reported beside the headline, never in it.
NORMAL = ("jobledger", "sqlite-normal")
ORDER = list(LABELS)


def load(paths: list[Path]) -> list[dict[str, Any]]:
    lines = []
    for path in paths:
        for raw in path.read_text().splitlines():
            if raw.strip():
                lines.append(json.loads(raw))
    return lines


def median(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, int | float)]
    return statistics.median(values) if values else None


def spread(values: list[float]) -> float | None:
    values = [v for v in values if isinstance(v, int | float)]
    mid = median(values)
    if len(values) < 2 or not mid:
        return None
    return (max(values) - min(values)) / mid


def num(value: Any, digits: int = 0, unit: str = "") -> str:
    if not isinstance(value, int | float):
        return "—"
    return f"{value:,.{digits}f}{unit}"


def pct(value: Any) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def ratio(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}×"


def run_key(record: dict[str, Any]) -> tuple[int, str]:
    label = str(record.get("run"))
    return (0, f"{int(label):06d}") if label.isdigit() else (1, label)


class Results:
    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for record in records:
            key = (
                record.get("system"),
                record.get("store"),
                record.get("step"),
                record.get("concurrency") if record.get("step") == "burndown" else None,
            )
            self.groups[key].append(record)
        for group in self.groups.values():
            group.sort(key=run_key)

    def get(self, system: tuple[str, str], step: str, c: int | None = None) -> list[dict[str, Any]]:
        return self.groups.get((*system, step, c), [])

    def good(self, system: tuple[str, str], step: str, c: int | None = None) -> list[dict]:
        return [r for r in self.get(system, step, c) if r.get("ok") and not r.get("na")]

    def rate(self, system: tuple[str, str], step: str, c: int | None = None) -> float | None:
        return median([r.get("rate") for r in self.good(system, step, c)])

    def na(self, system: tuple[str, str], step: str) -> bool:
        return any(r.get("na") for r in self.get(system, step))

    def concurrencies(self) -> list[int]:
        return sorted({k[3] for k in self.groups if k[2] == "burndown" and k[3] is not None})

    def per_run_ratios(
        self, mine: tuple[str, str], peer: tuple[str, str], step: str, c: int | None
    ) -> list[float]:
        theirs = {r["run"]: r.get("rate") for r in self.good(peer, step, c)}
        ratios = []
        for record in self.good(mine, step, c):
            other = theirs.get(record["run"])
            if isinstance(other, int | float) and other and record.get("rate"):
                ratios.append(record["rate"] / other)
        return ratios


def headline(res: Results) -> list[str]:
    out = [
        "### Headline: jobledger ÷ peer (tasks/s, medians)",
        "",
        "| step | Huey (SQLite) | jobledger (SQLite) | **ratio** | per run |"
        " Procrastinate (PG) | jobledger (PG) | **ratio** | per run |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows: list[tuple[str, str, int | None]] = [
        ("enqueue, one call at a time", "enqueue", None),
        ("enqueue, batches", "enqueue-batch", None),
    ]
    rows += [(f"burn-down, concurrency {c}", "burndown", c) for c in res.concurrencies()]
    for label, step, c in rows:
        cells = [label]
        for _, peer, _, mine, _ in PAIRS:
            theirs = res.rate(peer, step, c)
            ours = res.rate(mine, step, c)
            per_run = res.per_run_ratios(mine, peer, step, c)
            peer_cell = "n/a" if res.na(peer, step) else num(theirs)
            value = ours / theirs if ours and theirs else None
            cells += [
                peer_cell,
                num(ours),
                f"**{ratio(value)}**" if value is not None else "—",
                f"{min(per_run):.2f}–{max(per_run):.2f}" if per_run else "—",
            ]
        out.append("| " + " | ".join(cells) + " |")
    # each side's best burn-down, whatever the concurrency
    cells = ["best burn-down (any concurrency)"]
    for _, peer, _, mine, _ in PAIRS:
        best_peer = max(
            ((res.rate(peer, "burndown", c) or 0, c) for c in res.concurrencies()), default=(0, 0)
        )
        best_mine = max(
            ((res.rate(mine, "burndown", c) or 0, c) for c in res.concurrencies()), default=(0, 0)
        )
        value = best_mine[0] / best_peer[0] if best_peer[0] and best_mine[0] else None
        cells += [
            f"{num(best_peer[0])} (C={best_peer[1]})" if best_peer[0] else "—",
            f"{num(best_mine[0])} (C={best_mine[1]})" if best_mine[0] else "—",
            f"**{ratio(value)}**" if value is not None else "—",
            "",
        ]
    out.append("| " + " | ".join(cells) + " |")
    out += ["", 'Ratio above 1: jobledger is faster. "per run": the range of same-run ratios.']
    return out


def sizes(res: Results, step: str) -> str:
    found = sorted({r.get("n") for r in res.records if r.get("step") == step and r.get("n")})
    return " / ".join(f"{n:,}" for n in found) or "N"


def enqueue_table(res: Results, step: str) -> list[str]:
    title = "one call per task" if step == "enqueue" else "batches"
    out = [
        f"### {'Enqueue' if step == 'enqueue' else 'Batch enqueue'} of {sizes(res, step)} tasks:"
        f" {title}",
        "",
        "| system | call | tasks/s (median) | runs | spread | driver CPU (median) |"
        " per task | per task CPU |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for system in ORDER:
        records = res.get(system, step)
        if not records:
            continue
        if any(r.get("na") for r in records):
            reason = next(r.get("reason", "") for r in records if r.get("na"))
            out.append(f"| {LABELS[system]} | n/a ({reason}) | n/a | | | | | |")
            continue
        good = res.good(system, step)
        rates = [r.get("rate") for r in good]
        runs = ", ".join(num(r.get("rate")) if r.get("ok") else "FAILED" for r in records)
        call = next((r.get("call") for r in records if r.get("call")), "")
        out.append(
            f"| {LABELS[system]} | `{call}` | **{num(median(rates))}** | {runs} |"
            f" {pct(spread(rates))} |"
            f" {num(median([r.get('driver_cpu_s') for r in good]), 2, ' s')} |"
            f" {num(median([r.get('per_call_ms') for r in good]), 3, ' ms')} |"
            f" {num(median([r.get('per_call_cpu_ms') for r in good]), 3, ' ms')} |"
        )
    return out


def workers(res: Results) -> list[str]:
    top = (res.concurrencies() or [None])[-1]
    found = set()
    for record in res.records:
        wanted = record.get("step") == "burndown" and record.get("concurrency") == top
        if wanted and record.get("worker"):
            label = LABELS.get((record.get("system"), record.get("store")), "?")
            found.add(f"{label}: `{record['worker']}`")
    return sorted(found)


def burndown_table(res: Results) -> list[str]:
    out = [
        f"### Burn-down of {sizes(res, 'burndown')} already-enqueued no-op tasks",
        "",
        "| system | concurrency | tasks/s (median) | runs | spread | elapsed | startup |"
        " steady tasks/s | worker CPU | CPU / task | machine busy | poll |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system in ORDER:
        for c in res.concurrencies():
            records = res.get(system, "burndown", c)
            if not records:
                continue
            good = res.good(system, "burndown", c)
            rates = [r.get("rate") for r in good]
            runs = ", ".join(num(r.get("rate")) if r.get("ok") else "FAILED" for r in records)

            def med(field: str, good: list[dict[str, Any]] = good) -> float | None:
                return median([r.get(field) for r in good])

            out.append(
                f"| {LABELS[system]} | {c} | **{num(median(rates))}** | {runs} |"
                f" {pct(spread(rates))} | {num(med('elapsed_s'), 2, ' s')} |"
                f" {num(med('startup_s'), 2, ' s')} | {num(med('steady_rate'))} |"
                f" {num(med('worker_cpu_s'), 2, ' s')} |"
                f" {num(med('worker_cpu_per_task_ms'), 2, ' ms')} |"
                f" {num(med('machine_busy'), 2)} | {num(med('poll_ms_mean'), 2, ' ms')} |"
            )
    out += [
        "",
        "Workers (at the highest concurrency): " + "; ".join(workers(res)),
        "",
        "Elapsed: spawn of the worker process → first 50 ms poll (own connection) that finds no"
        " unfinished task. Startup: spawn → first task start as the store recorded it."
        " Steady: N / (elapsed − startup). Worker CPU: user + system of the worker process,"
        " all threads, from /proc at the end of the drain. Machine busy: share of all cores"
        " busy over the drain. Poll: mean cost of one poll.",
    ]
    return out


def kill_table(res: Results) -> list[str]:
    records = [r for r in res.records if r.get("step") == "killtest"]
    if not records:
        return []
    out = [
        "### Kill checks (jobledger): worker SIGKILLed mid-task, a new worker started at once",
        "",
        "| store | run | lease expired after kill | re-run started after kill |"
        " succeeded after kill | final | handler starts / ends | `occurrence_succeeded` events |"
        " occurrences | ok |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |",
    ]
    for record in sorted(records, key=lambda r: (r.get("store"), run_key(r))):
        final = record.get("final") or {}
        out.append(
            f"| {record.get('store')} | {record.get('run')} |"
            f" {num(record.get('lease_expired_after_kill_s'), 2, ' s')} |"
            f" {num(record.get('rerun_started_after_kill_s'), 2, ' s')} |"
            f" {num(record.get('succeeded_after_kill_s'), 2, ' s')} |"
            f" `{final.get('status')}`, attempt {final.get('attempt')},"
            f" fence {final.get('fence')} |"
            f" {record.get('handler_starts')} / {record.get('handler_ends')} |"
            f" {(record.get('event_counts') or {}).get('occurrence_succeeded')} |"
            f" {record.get('occurrences')} | {'yes' if record.get('ok') else 'NO'} |"
        )
    return out


def normal_table(res: Results) -> list[str]:
    if not any(key[:2] == NORMAL for key in res.groups):
        return []
    out = [
        "### SQLite at `synchronous=NORMAL` (WAL: durable against process crashes, not power"
        " loss) ÷ Huey as shipped, and ÷ jobledger at FULL",
        "",
        "| step | Huey (SQLite) | jobledger (FULL) | jobledger (NORMAL) | **NORMAL ÷ Huey** |"
        " per run | NORMAL ÷ FULL |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    huey, full = ("huey", "sqlite"), ("jobledger", "sqlite")
    rows: list[tuple[str, str, int | None]] = [
        ("enqueue, one call at a time", "enqueue", None),
        ("enqueue, batches", "enqueue-batch", None),
    ]
    rows += [(f"burn-down, concurrency {c}", "burndown", c) for c in res.concurrencies()]
    for label, step, c in rows:
        theirs, ours, at_full = (
            res.rate(huey, step, c),
            res.rate(NORMAL, step, c),
            res.rate(full, step, c),
        )
        per_run = res.per_run_ratios(NORMAL, huey, step, c)
        value = ours / theirs if ours and theirs else None
        against_full = ours / at_full if ours and at_full else None
        out.append(
            f"| {label} | {'n/a' if res.na(huey, step) else num(theirs)} | {num(at_full)} |"
            f" {num(ours)} | {f'**{ratio(value)}**' if value is not None else '—'} |"
            f" {f'{min(per_run):.2f}–{max(per_run):.2f}' if per_run else '—'} |"
            f" {ratio(against_full)} |"
        )
    return out


def setup_table(session: dict[str, Any] | None, res: Results) -> list[str]:
    if session is None:
        return []
    facts = session.get("facts", {})
    options = session.get("options", {})
    pg = facts.get("postgres", {})
    packages = facts.get("packages", {})
    pragmas = {}
    for record in res.records:
        if record.get("pragmas") and record.get("step") in ("enqueue", "burndown"):
            pragmas.setdefault(LABELS.get((record.get("system"), record.get("store"))),
                               record["pragmas"])  # fmt: skip
    loads = [r["quiet"]["load_at_start"] for r in res.records if r.get("quiet")]
    waits = [r["quiet"]["waited_s"] for r in res.records if r.get("quiet")]
    pg_settings = ", ".join(
        f"`{k}={pg[k]}`"
        for k in ("synchronous_commit", "fsync", "wal_sync_method", "full_page_writes",
                  "shared_buffers", "checkpoint_timeout", "max_wal_size", "autovacuum")
        if k in pg
    )  # fmt: skip
    commit = facts.get("jobledger_commit_short")
    where = facts.get("scratch_mount") or {}
    mount = f"{where.get('device')} ({where.get('fstype')}, mounted at {where.get('mount')})"
    memory = facts.get("memory") or ""
    if memory.endswith(" kB") and memory[:-3].strip().isdigit():
        memory = f"{int(memory[:-3]) / 1024**2:.0f} GiB"
    dirty = " + uncommitted changes in src/" if facts.get("jobledger_src_dirty") else ""
    imported = facts.get("jobledger_file") or "?"
    if imported.endswith("/jobledger/__init__.py"):
        imported = imported[: -len("/jobledger/__init__.py")]
    rows = [
        ("session", f"{session.get('session')}: N = {options.get('n')}, runs = "
                    f"{options.get('runs')}, batch = {options.get('batch_size')}"),
        ("machine", f"{facts.get('cpus')} × `{facts.get('cpu_model')}`, {memory},"
                    f" Linux {facts.get('kernel')}, {facts.get('os')}"),
        ("scratch", f"`{facts.get('scratch')}` on {mount}"),
        ("Python / SQLite", f"CPython {facts.get('python')}, SQLite {facts.get('sqlite')}"),
        ("PostgreSQL", f"{pg.get('server_version', pg.get('error'))}; {pg_settings}"),
        ("packages", ", ".join(f"{k} {v}" for k, v in packages.items() if v)),
        ("jobledger", f"commit `{commit}`{dirty}, imported from `{imported}`; worker options"
                      f" {', '.join(facts.get('jobledger_worker_options') or [])};"
                      f" extra worker args {options.get('jobledger_worker_arg') or 'none'}"),
        ("SQLite pragmas observed", "; ".join(
            f"{k}: " + ", ".join(f"`{name}={value}`" for name, value in v.items())
            for k, v in pragmas.items()
        ) or "—"),
        ("quiet machine", f"wait {'off' if options.get('no_wait') else 'on'}: 1-min load below"
                          f" {options.get('load_threshold')} (max {options.get('max_wait')} s);"
                          f" timed steps started at load {num(min(loads, default=None), 2)}–"
                          f"{num(max(loads, default=None), 2)}, waited up to"
                          f" {num(max(waits, default=None), 0, ' s')}"),
    ]  # fmt: skip
    out = ["### Setup", "", "| item | value |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in rows]
    return out


def problems(res: Results) -> list[str]:
    bad = [r for r in res.records if not r.get("ok") and not r.get("na")]
    if not bad:
        return ["All measurements passed their checks."]
    out = [f"### Failed checks ({len(bad)})", ""]
    for record in bad:
        detail = record.get("error") or record.get("failure") or json.dumps(record.get("checks"))
        out.append(
            f"- run {record.get('run')} {record.get('system')} ({record.get('store')})"
            f" {record.get('step')} c={record.get('concurrency')}: {str(detail)[:400]}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "results",
        nargs="*",
        type=Path,
        default=[common.DEFAULT_SCRATCH / "results" / "side-by-side.jsonl"],
    )
    parser.add_argument("--session", default=None, help="this session only (default: latest)")
    parser.add_argument("--all-sessions", action="store_true", help="pool every session")
    args = parser.parse_args(argv)
    lines = load(args.results)
    sessions = [line for line in lines if line.get("type") == "session"]
    measurements = [line for line in lines if line.get("type") == "measurement"]
    header = None
    if not args.all_sessions and sessions:
        wanted = args.session or sessions[-1]["session"]
        header = next((s for s in sessions if s["session"] == wanted), None)
        measurements = [m for m in measurements if m.get("session") == wanted]
    elif sessions:
        header = sessions[-1]
    if not measurements:
        print("no measurements found", file=sys.stderr)
        return 1
    res = Results(measurements)
    title = "## jobledger side by side with Huey (SQLite) and Procrastinate (PostgreSQL)"
    blocks = [
        [title],
        headline(res),
        normal_table(res),
        enqueue_table(res, "enqueue"),
        enqueue_table(res, "enqueue-batch"),
        burndown_table(res),
        kill_table(res),
        setup_table(header, res),
        problems(res),
    ]
    print("\n\n".join("\n".join(block) for block in blocks if block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
