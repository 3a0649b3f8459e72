"""The kill harness: real worker processes SIGKILLed at random instants, then every promise checked.

One run (:func:`run_chaos`), seeded so it can be repeated:

1. A store (a SQLite file, or a database on a *private* PostgreSQL cluster — see
   :mod:`tests.slow.chaos.pgcluster` — so restarting the server never touches the shared one) gets a
   backlog: ``work`` occurrences that sleep 0–20 ms, ``flaky`` ones that fail their first attempt,
   ``doomed`` ones that always fail; every worker also declares two ``every=`` schedules.
2. ``workers`` processes (:mod:`tests.slow.chaos.chaos_worker`: ``App.run_worker`` with the
   planner on) drain it. Over ``rounds`` rounds, at random instants, one worker is SIGKILLed and
   replaced; more work is enqueued now and then; on PostgreSQL random backends are terminated
   (``pg_terminate_backend``, the pool's and the liveness sessions) and the server is restarted
   mid-drain (``pg_ctl restart``, alternately ``-m immediate`` — a crash and recovery — and
   ``-m fast``).
   *Session-cut runs* (PostgreSQL; ``session_cuts`` set) kill nobody: for each cadence in turn,
   one live worker has all its backends terminated (``pg_terminate_backend`` from a separate
   connection) every that many seconds — a flapping network or pooler — while the others keep
   working and reaping. None of those workers is gone, so nothing may be reaped or run again.
   *Clock-step runs* (``clock_steps`` set; :mod:`tests.slow.chaos.clocksteps`) kill nobody either:
   every worker's store clock is the system clock plus an offset the harness writes, and live
   workers' clocks are stepped 2 h forward and 1 h back, and back again, several times.
3. The survivors are stopped gracefully, and fresh workers without a planner drain what is left
   (in a clock-step run, on a clock as far forward as any worker's went: work placed at a
   stepped worker's "now" is due then).
4. :func:`verify` reads the store, the audit log and the side-effect file and lists every
   violation (see its docstring); :func:`measure` computes the figures.

Nothing here trusts the workers' own accounts: the side effects are written by the handlers to a
file the store never sees, and the audit log is read straight from the tables.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jobledger

from . import recovery
from .checks import TERMINAL, measure, read_evidence, verify
from .clocksteps import (
    HOUR_MS,
    clock_path,
    clock_problems,
    mark_live_events,
    set_clock,
    step_clocks,
    stepped_summary,
)
from .pgcluster import PrivateCluster

WORKER = Path(__file__).with_name("chaos_worker.py")


@dataclass
class ChaosConfig:
    store: str = "sqlite"
    seed: int = 1
    workers: int = 3
    rounds: int = 8
    round_min_s: float = 0.6
    round_max_s: float = 1.6
    backlog: int = 1_200
    flaky: int = 40
    doomed: int = 20
    extra_every: int = 3  # enqueue more work every this many rounds
    extra: int = 200
    concurrency: int = 2
    prefetch: int | None = 8  # None: the default, adaptive prefetch
    lease_s: float = 15.0
    reap_s: float = 2.0  # WorkerOptions.reap_interval's default
    poll_s: float = 1.0  # WorkerOptions.poll_interval's default
    backend_kill_rate: float = 0.5  # PostgreSQL: chance per round of terminating backends
    restart_rounds: tuple[int, ...] = (3, 6)  # PostgreSQL: restart the server in these rounds
    final_workers: int = 2
    drain_timeout_s: float = 120.0
    work_ms: tuple[int, int] = (0, 20)  # how long each ``work`` handler sleeps
    # PostgreSQL session-cut run (see the module docstring): seconds between two cuts of the
    # victim's backends, one phase per cadence, each ``cut_phase_s`` long; more work per phase.
    session_cuts: tuple[float, ...] = ()
    cut_phase_s: float = 5.0
    # Clock-step run (see the module docstring): cycles of one worker's clock stepped forward
    # and another's back, each held ``clock_phase_s`` then stepped back to the system clock.
    clock_steps: int = 0
    clock_forward_ms: int = 2 * HOUR_MS
    clock_back_ms: int = HOUR_MS
    clock_phase_s: float = 3.0
    clock_slow_ms: int = 5_000  # one ``work`` this long per worker, enqueued at each step
    # Recovery scenario (tests/slow/chaos/recovery.py): max_attempts=1 jobs, adjudicate-policy jobs,
    # and work under a partition limit removed and restored every round.
    once: int = 0
    charges: int = 0
    limited: int = 0

    @classmethod
    def preset(cls, name: str, store: str, seed: int) -> ChaosConfig:
        if name == "short":
            return cls(store=store, seed=seed)
        if name == "long":
            return cls(
                store=store,
                seed=seed,
                workers=4,
                rounds=60,
                backlog=10_000,
                flaky=400,
                doomed=200,
                extra=500,
                restart_rounds=(10, 20, 30, 40, 50),
                drain_timeout_s=600.0,
            )
        if name in ("cuts", "cuts-long"):
            long = name == "cuts-long"
            return cls(
                store=store,
                seed=seed,
                rounds=0,
                backlog=800,
                extra=1_500 if long else 250,
                work_ms=(10, 100),
                session_cuts=(0.2, 0.5, 1.0, 2.0)
                if not long
                else (0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0),
                cut_phase_s=30.0 if long else 4.0,
            )
        if name in ("clock", "clock-long"):
            long = name == "clock-long"
            return cls(
                store=store,
                seed=seed,
                rounds=0,
                backlog=3_000 if long else 600,
                extra=600 if long else 150,
                work_ms=(5, 60),
                # A short lease, and handlers longer than it at each step (``clock_slow_ms``):
                # leases expire in the forward-stepped worker's eyes, and on the system clock
                # those the backward-stepped worker holds through its phase (it renews them
                # from an hour ago, and a renewal never shortens a lease, so they do not move).
                lease_s=3.0,
                clock_steps=24 if long else 3,
                clock_phase_s=4.0,
            )
        if name in ("recovery", "recovery-long"):
            long = name == "recovery-long"
            # Kills with the default (adaptive) prefetch and fast handlers, so every victim holds
            # claims it never started; no server restarts or backend kills (other runs do them).
            return cls(
                store=store,
                seed=seed,
                rounds=30 if long else 5,
                round_min_s=0.15,  # after the round's work arrived (recovery.before_round)
                round_max_s=0.5,
                backlog=4_000 if long else 400,
                flaky=40 if long else 10,
                doomed=20 if long else 6,
                extra=400 if long else 100,
                concurrency=4,
                prefetch=None,
                work_ms=(0, 3),
                backend_kill_rate=0.0,
                restart_rounds=(),
                once=4_000 if long else 600,
                charges=600 if long else 100,
                limited=400 if long else 80,
                drain_timeout_s=600.0 if long else 90.0,
            )
        raise ValueError(f"unknown preset {name!r}")


@dataclass
class Kill:
    owner: str
    pid: int
    round: int
    at: float  # time.monotonic()
    at_ms: int  # the system clock, epoch ms (to compare with store instants)


@dataclass
class RunLog:
    kills: list[Kill] = field(default_factory=list)
    backend_kills: Counter[str] = field(default_factory=Counter)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    enqueued: dict[str, str] = field(default_factory=dict)  # occurrence id -> kind
    spawned: list[str] = field(default_factory=list)
    worker_failures: list[str] = field(default_factory=list)
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    stops: dict[str, int] = field(default_factory=dict)  # owner -> epoch ms its stop was asked
    # session-cut runs: cadence (s) -> (victim, cuts made, backends terminated)
    session_cuts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # clock-step runs: every step made (owner, step_ms, offset_ms, at_ms), and the newest audit
    # event written while every worker still lived (takeovers up to it were from live owners)
    clock_steps: list[dict[str, Any]] = field(default_factory=list)
    live_through_event: int | None = None
    # recovery scenario: each partition-limit change, and what it found wrong at once
    limit_toggles: list[dict[str, Any]] = field(default_factory=list)
    recovery_problems: list[str] = field(default_factory=list)
    clock_exposure: list[dict[str, int]] = field(default_factory=list)  # per cycle, see clocksteps


class WorkerProcess:
    def __init__(self, harness: Harness, owner: str, *, planner: bool) -> None:
        self.owner = owner
        config = harness.config
        self.summary_path = harness.workdir / f"{owner}.summary.json"
        self.ready_path = harness.workdir / f"{owner}.ready"
        settings = {
            "target": harness.target,
            "owner": owner,
            "effects": str(harness.effects_path),
            "planner": planner,
            "concurrency": config.concurrency,
            "prefetch": config.prefetch,
            "lease_s": config.lease_s,
            "reap_s": config.reap_s,
            "poll_s": config.poll_s,
            "summary": str(self.summary_path),
            "ready": str(self.ready_path),
            "store_options": {"pool_max_size": 4} if config.store == "postgres" else {},
        }
        if config.clock_steps:
            settings["clock_file"] = clock_path(harness, owner)
        self.log_path = harness.workdir / f"{owner}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(settings)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=harness.workdir,
            )


class Harness:
    def __init__(self, config: ChaosConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.rng = random.Random(config.seed)
        self.log = RunLog()
        self.effects_path = workdir / "effects.jsonl"
        self.cluster: PrivateCluster | None = None
        self.target = ""
        self._serial = 0
        self.running: dict[str, WorkerProcess] = {}
        self.clock_offsets: dict[str, int] = {}  # clock-step runs: owner -> offset (ms)
        self.limits_on = False  # recovery scenario: the partition limit stands

    # -- setup -----------------------------------------------------------------------------

    def open_target(self) -> None:
        if self.config.store == "sqlite":
            self.target = str(self.workdir / "store" / "chaos.sqlite3")
        elif self.config.store == "postgres":
            self.cluster = PrivateCluster.create()
            self.target = self.cluster.database("chaos")
        else:
            raise ValueError(f"unknown store {self.config.store!r}")

    def admin(self) -> jobledger.App:
        return jobledger.App(self.target, name="chaos-admin", authorize=jobledger.allow_all)

    def seed_backlog(self, app: jobledger.App) -> None:
        config = self.config
        app.ensure_job("work", "work", max_attempts=32)
        app.ensure_job("flaky", "flaky", max_attempts=32)
        app.ensure_job("doomed", "doomed", max_attempts=2)
        self.enqueue(app, "work", self.work(config.backlog))
        self.enqueue(app, "flaky", [{"fail_first": True} for _ in range(config.flaky)])
        self.enqueue(app, "doomed", [{"fatal": index % 2 == 0} for index in range(config.doomed)])

    def work(self, n: int) -> list[dict[str, int]]:
        low, high = self.config.work_ms
        return [{"ms": self.rng.randint(low, high)} for _ in range(n)]

    def enqueue(self, app: jobledger.App, job_id: str, payloads: list[Any]) -> None:
        for start in range(0, len(payloads), 1_000):
            chunk = payloads[start : start + 1_000]
            for attempt in range(40):  # the server may be restarting
                try:
                    occurrences = app.enqueue_many(job_id, chunk)
                    break
                except jobledger.SchedulerError as exc:
                    if exc.code != "SCHEDULER_STORAGE_UNAVAILABLE" or attempt == 39:
                        raise
                    # A lost COMMIT may have committed: enqueue_many without keys is not
                    # idempotent, so only retry what certainly did not commit.
                    if (exc.details or {}).get("commitState") != "not_committed":
                        raise
                    time.sleep(0.25)
            for occurrence in occurrences:
                self.log.enqueued[occurrence.id] = job_id

    # -- workers ---------------------------------------------------------------------------

    def spawn(self, *, planner: bool = True) -> WorkerProcess:
        self._serial += 1
        owner = f"w{self._serial}"
        if self.config.clock_steps:
            # Planners start on the system clock; the final drain on the furthest one stepped to.
            set_clock(self, owner, 0 if planner else self.config.clock_forward_ms)
        worker = WorkerProcess(self, owner, planner=planner)
        self.running[owner] = worker
        self.log.spawned.append(owner)
        return worker

    def kill(self, round_index: int) -> None:
        owner = self.rng.choice(sorted(self.running))
        worker = self.running.pop(owner)
        if worker.process.poll() is not None:
            self.log.worker_failures.append(
                f"{owner} had exited on its own with {worker.process.returncode}"
            )
        worker.process.send_signal(signal.SIGKILL)
        at, at_ms = time.monotonic(), jobledger.system_clock()
        worker.process.wait(30)
        self.log.kills.append(Kill(owner, worker.process.pid, round_index, at, at_ms))

    def stop_all(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
            w.ready_path.exists() or w.process.poll() is not None for w in self.running.values()
        ):
            time.sleep(0.05)
        for owner, worker in self.running.items():
            if worker.process.poll() is None:
                self.log.stops[owner] = jobledger.system_clock()
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for owner, worker in self.running.items():
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
                self.log.worker_failures.append(f"{owner} did not stop within {timeout_s} s")
                continue
            if worker.process.returncode != 0:
                self.log.worker_failures.append(
                    f"{owner} exited with {worker.process.returncode}: "
                    + worker.log_path.read_text(errors="replace")[-2000:]
                )
            elif worker.summary_path.exists():
                self.log.summaries[owner] = json.loads(worker.summary_path.read_text())
        self.running.clear()

    def wait_until_running(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(
            w.ready_path.exists() for w in self.running.values()
        ):
            time.sleep(0.05)

    def check_alive(self) -> None:
        for owner, worker in list(self.running.items()):
            if worker.process.poll() is not None:
                self.log.worker_failures.append(
                    f"{owner} exited on its own with {worker.process.returncode}: "
                    + worker.log_path.read_text(errors="replace")[-2000:]
                )
                del self.running[owner]
                self.spawn()

    # -- PostgreSQL faults -----------------------------------------------------------------

    def terminate_backends(self) -> None:
        assert self.cluster is not None
        try:
            rows = self.cluster.execute(
                "SELECT pid, application_name FROM pg_stat_activity "
                "WHERE datname = 'chaos' AND application_name LIKE 'jobledger%' "
                "AND pid <> pg_backend_pid()"
            )
        except Exception:  # the server may be coming back up
            return
        if not rows:
            return
        for pid, name in self.rng.sample(rows, k=min(len(rows), self.rng.randint(1, 3))):
            try:
                self.cluster.execute(f"SELECT pg_terminate_backend({int(pid)})")  # type: ignore[call-overload]
            except Exception:
                continue
            self.log.backend_kills[str(name)] += 1

    def restart_server(self) -> None:
        assert self.cluster is not None
        mode = "immediate" if len(self.log.restarts) % 2 == 0 else "fast"
        began_ms = jobledger.system_clock()
        down = self.cluster.restart(mode, down_s=self.rng.uniform(0.2, 1.5))
        self.log.restarts.append({"mode": mode, "down_s": round(down, 3), "at_ms": began_ms})

    def cut_sessions(self, app: jobledger.App) -> None:
        """The session-cut phases (see the module docstring): no kills, only cut sessions."""
        assert self.cluster is not None
        import psycopg

        with psycopg.connect(self.cluster.url("chaos"), autocommit=True) as admin:
            for index, cadence in enumerate(self.config.session_cuts):
                victim = self.running[sorted(self.running)[index % len(self.running)]]
                cuts = terminated = 0
                phase_end = time.monotonic() + self.config.cut_phase_s
                while time.monotonic() < phase_end:
                    time.sleep(cadence)
                    self.check_alive()
                    ports = _local_ports(victim.process.pid)
                    rows = admin.execute(
                        "SELECT pid, client_port FROM pg_stat_activity "
                        "WHERE datname = 'chaos' AND application_name LIKE 'jobledger%%' "
                        "AND pid <> pg_backend_pid()"
                    ).fetchall()
                    pids = [pid for pid, port in rows if port in ports]
                    for pid in pids:
                        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    cuts += 1
                    terminated += len(pids)
                    self.log.backend_kills["session_cut"] += len(pids)
                self.log.session_cuts[str(cadence)] = {
                    "victim": victim.owner,
                    "cuts": cuts,
                    "backends_terminated": terminated,
                }
                self.enqueue(app, "work", self.work(self.config.extra))

    # -- the run ---------------------------------------------------------------------------

    def non_terminal(self, store: jobledger.Store) -> int:
        return sum(c.count for c in store.count_occurrences() if c.status not in TERMINAL)

    def run(self) -> None:
        config = self.config
        began = time.monotonic()
        self.open_target()
        app = self.admin()
        try:
            self.seed_backlog(app)
            recovery.seed(self, app)
            for _ in range(config.workers):
                self.spawn()
            self.log.phases["setup_s"] = time.monotonic() - began
            chaos_began = time.monotonic()
            if config.session_cuts:
                self.wait_until_running()
                self.cut_sessions(app)
            if config.clock_steps:
                self.wait_until_running()
                step_clocks(self, app)
            for round_index in range(1, config.rounds + 1):
                recovery.before_round(self, app)
                time.sleep(self.rng.uniform(config.round_min_s, config.round_max_s))
                self.check_alive()
                self.kill(round_index)
                self.spawn()
                if config.store == "postgres":
                    if self.rng.random() < config.backend_kill_rate:
                        self.terminate_backends()
                    if round_index in config.restart_rounds:
                        self.restart_server()
                if round_index % config.extra_every == 0:
                    self.enqueue(app, "work", self.work(config.extra))
                recovery.toggle_limits(self, app)
            recovery.finish_limits(self, app)
            self.check_alive()
            self.log.phases["chaos_s"] = time.monotonic() - chaos_began
            if config.clock_steps:
                mark_live_events(self)
            stop_began = time.monotonic()
            self.stop_all()
            self.log.phases["graceful_stop_s"] = time.monotonic() - stop_began
            drain_began = time.monotonic()
            for _ in range(config.final_workers):
                self.spawn(planner=False)
            deadline = time.monotonic() + config.drain_timeout_s
            while True:
                try:
                    left = self.non_terminal(app.store)
                except jobledger.SchedulerError:
                    left = -1
                if left == 0 or time.monotonic() > deadline:
                    break
                self.check_alive()
                time.sleep(0.2)
            self.log.phases["final_drain_s"] = time.monotonic() - drain_began
            self.stop_all()
        finally:
            for worker in self.running.values():
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
            app.close()
        self.log.phases["total_s"] = time.monotonic() - began

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.remove()
            self.cluster = None


def run_chaos(config: ChaosConfig, workdir: Path) -> dict[str, Any]:
    """Run one seeded chaos run in ``workdir``; return the report (``problems`` empty = pass)."""
    workdir.mkdir(parents=True, exist_ok=True)
    # The admin connection pool sees every server restart; its warnings are expected noise.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    harness = Harness(config, workdir)
    try:
        harness.run()
        evidence = read_evidence(harness)
        problems, facts = verify(harness, evidence)
        if config.clock_steps:
            problems += clock_problems(harness, facts)
        more, scenario = recovery.check(harness, evidence)
        problems += more
        facts.update(scenario)
        timing = measure(harness, evidence)
    finally:
        harness.close()
    log = harness.log
    return {
        "config": asdict(config),
        "rounds": config.rounds,
        "kills": len(log.kills),
        "workers_started": len(log.spawned),
        "backend_terminations": dict(log.backend_kills),
        "server_restarts": log.restarts,
        "session_cuts": log.session_cuts,
        "clock_steps": len(log.clock_steps),
        **(stepped_summary(harness) if config.clock_steps else {}),
        "enqueued_by_harness": len(log.enqueued),
        **facts,
        **timing,
        "worker_summaries": log.summaries,
        "phases_s": {k: round(v, 1) for k, v in log.phases.items()},
        "problems": problems,
    }


def _local_ports(pid: int) -> set[int]:
    """The local TCP ports of process ``pid``'s sockets (its connections to the server): its
    socket inodes from ``/proc/<pid>/fd``, their ports from ``/proc/<pid>/net/tcp{,6}``."""
    inodes: set[str] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        for fd in fd_dir.iterdir():
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return set()
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def default_workdir(tag: str) -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"jobledger-chaos-{tag}-"))
