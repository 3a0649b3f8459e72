"""What OpenTelemetry tracing costs an enqueue and an attempt, and what it costs when it is off.

Each mode runs in a fresh interpreter (whether ``opentelemetry`` has been imported is part of
what is measured), the modes interleaved over ``--rounds`` rounds; the median round is reported.

* ``off`` — ``App(tracing=False)``;
* ``not loaded`` — the default (``tracing=True``) in a process that never imported OpenTelemetry:
  the shape of every application that does not use it;
* ``api, no provider`` — OpenTelemetry's API imported, no tracer provider configured (a library
  pulled it in, nobody set it up);
* ``sdk, sampled out`` — an SDK provider that samples nothing (``ALWAYS_OFF``): non-recording
  spans, the trace context still stored;
* ``sdk, recording`` — an SDK provider recording every span into a ``BatchSpanProcessor`` whose
  exporter drops them (what an application exporting traces pays in-process).

Figures per mode: ``App.enqueue`` µs per call, ``App.enqueue_many`` µs per occurrence (batches of
``--batch``), attempts µs each (``run_until_idle``: claim, handler, settle) — these end-to-end
figures carry the machine's noise — and the tracing work alone, with no store call: ``send ns``,
an enqueue's (``TracingGate.send`` entered and left, the span described), ``process ns``, an
attempt's (the runtime observer's ``started`` and ``finished``).

    python bench/tracing_overhead.py                       # SQLite file, synchronous=NORMAL
    python bench/tracing_overhead.py --postgres postgresql://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine

MODES = ("off", "not loaded", "api, no provider", "sdk, sampled out", "sdk, recording")

CHILD = textwrap.dedent(
    """
    import json, sys, time
    mode, target, one, many, batch, attempts, sync = sys.argv[1:8]
    one, many, batch, attempts = int(one), int(many), int(batch), int(attempts)
    if mode != "not loaded" and mode != "off":
        from opentelemetry import trace
    if mode.startswith("sdk"):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor, SpanExporter, SpanExportResult,
        )
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = TracerProvider(sampler=ALWAYS_OFF if "sampled out" in mode else ALWAYS_ON)
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        trace.set_tracer_provider(provider)
    import jobledger
    from jobledger.testing import run_until_idle

    options = {"synchronous": sync} if not target.startswith("postgresql") else {}
    app = jobledger.App(target, authorize=jobledger.allow_all, tracing=mode != "off",
                        store_options=options)
    app.handler("noop")(lambda ctx: None)
    app.ensure_job("bench", "noop", max_attempts=1)
    app.enqueue("bench")
    run_until_idle(app)
    t0 = time.perf_counter()
    for i in range(one):
        app.enqueue("bench", payload={"n": i})
    enqueue_us = (time.perf_counter() - t0) / one * 1e6
    t0 = time.perf_counter()
    for start in range(0, many, batch):
        app.enqueue_many("bench", [{"n": start + i} for i in range(batch)])
    many_us = (time.perf_counter() - t0) / many * 1e6
    while len(run_until_idle(app, limit=10_000)) == 10_000:  # drain: time attempts on a fresh queue
        pass
    for i in range(attempts):
        app.enqueue("bench", payload={"n": i})
    t0 = time.perf_counter()
    ran = run_until_idle(app, limit=attempts)
    attempt_us = (time.perf_counter() - t0) / attempts * 1e6
    assert len(ran) == attempts
    # The tracing work alone, no store call: an enqueue's send span (or the off check), and an
    # attempt's process span started and ended by the runtime's observer.
    loops = 20_000
    gate = app._tracing
    last = list(ran)[-1]
    t0 = time.perf_counter_ns()
    for _ in range(loops):
        with gate.send("bench", None) as sending:
            if sending is not None:
                sending.sent([last.occurrence])
    gate_ns = (time.perf_counter_ns() - t0) / loops
    observer = app.runtime().observer
    t0 = time.perf_counter_ns()
    for _ in range(loops):
        observer.started(last.occurrence)
        observer.finished(last.occurrence, last, 0.0)
    span_ns = (time.perf_counter_ns() - t0) / loops
    loaded = any(m.startswith("opentelemetry") for m in sys.modules)
    app.close()
    print(json.dumps({"enqueue_us": enqueue_us, "many_us": many_us, "attempt_us": attempt_us,
                      "gate_ns": gate_ns, "span_ns": span_ns, "otel_loaded": loaded}))
    """
)


def run_mode(mode: str, target: str, args: argparse.Namespace) -> dict[str, object]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            mode,
            target,
            str(args.one),
            str(args.many),
            str(args.batch),
            str(args.attempts),
            args.synchronous,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode}: {done.stderr}")
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--one", type=int, default=2000, help="single enqueues per round")
    parser.add_argument("--many", type=int, default=10_000, help="occurrences by enqueue_many")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--attempts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--synchronous", default="NORMAL", choices=("FULL", "NORMAL"))
    parser.add_argument("--postgres", default=None, help="a database URL (dropped and remade)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    print(machine())
    rounds: dict[str, list[dict[str, object]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="jobledger-bench-") as directory:
        for round_index in range(args.rounds):
            for mode in MODES:
                if args.postgres:
                    target = args.postgres
                    _reset_postgres(target)
                else:
                    target = str(Path(directory) / f"{round_index}-{MODES.index(mode)}.sqlite3")
                rounds[mode].append(run_mode(mode, target, args))
    results = {}
    header = (
        f"{'mode':<18} {'enqueue µs':>11} {'many µs/occ':>12} {'attempt µs':>11} {'send ns':>9}"
        f" {'process ns':>9}  otel loaded"
    )
    print(header)
    for mode in MODES:
        runs = rounds[mode]
        row = {
            key: statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]
            for key in ("enqueue_us", "many_us", "attempt_us")
        }
        row["gate_ns"] = statistics.median(float(r["gate_ns"]) for r in runs)  # type: ignore[arg-type]
        row["span_ns"] = statistics.median(float(r["span_ns"]) for r in runs)  # type: ignore[arg-type]
        row["otel_loaded"] = bool(runs[0]["otel_loaded"])
        results[mode] = row
        print(
            f"{mode:<18} {row['enqueue_us']:>11.1f} {row['many_us']:>12.1f} "
            f"{row['attempt_us']:>11.1f} {row['gate_ns']:>9.0f} {row['span_ns']:>9.0f}"
            f"  {row['otel_loaded']}"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"machine": machine(), "args": vars(args) | {"json": None}, "results": results},
                indent=2,
                default=str,
            )
        )
    return 0


def _reset_postgres(url: str) -> None:
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


if __name__ == "__main__":
    raise SystemExit(main())
