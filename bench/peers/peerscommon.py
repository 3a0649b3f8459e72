"""What the three peer drivers share: settings, the quiet-machine wait, /proc sampling, the
burn-down clock, spawning and stopping a worker, and the one-JSON-line output.

Nothing here knows a particular queue: a driver hands :func:`burndown` the worker command and a
``remaining()`` function that counts unfinished tasks on the driver's own connection.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: Where databases, logs and results go. Outside the repository on purpose.
DEFAULT_SCRATCH = Path(os.environ.get("PEERSBENCH_SCRATCH", "/tmp/jobledger-peersbench"))

#: The bench role's connection (trust auth on 127.0.0.1); setup.sh creates role and database.
PG_URL = os.environ.get("PEERSBENCH_PG", "postgresql://peersbench@127.0.0.1:5432/peersbench")
#: A superuser connection to the same database, for VACUUM/CHECKPOINT and server settings.
PG_ADMIN_URL = os.environ.get(
    "PEERSBENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/peersbench"
)
#: Per-library schemas in the one database.
PROCRASTINATE_SCHEMA = "procrastinate"
JOBLEDGER_SCHEMA = "jlbench"

POLL_INTERVAL_S = 0.05  # the burn-down poller's period, as in docs/peers-perf
DEFAULT_N = 10_000
DEFAULT_BATCH = 1_000
DEFAULT_LOAD_THRESHOLD = 0.7
DEFAULT_MAX_WAIT_S = 180.0

CLK_TCK = os.sysconf("SC_CLK_TCK")


def wall() -> float:
    """Epoch seconds, for comparison with the timestamps the stores themselves write."""
    return time.time()  # noqa: TID251 - compared with timestamps written by the stores


def venv_bin(name: str) -> str:
    """An executable of the venv this interpreter runs in (``bench/peers/.venv``)."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    fallback = HERE / ".venv" / "bin" / name
    if fallback.exists():
        return str(fallback)
    raise SystemExit(f"{name} not found next to {sys.executable}; run bench/peers/setup.sh")


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment for a spawned worker: the app modules in bench/peers are importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


# -- the quiet machine ------------------------------------------------------------------------


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_quiet(threshold: float, max_wait: float, enabled: bool = True) -> dict[str, Any]:
    """Wait until the 1-minute load average is below ``threshold`` (at most ``max_wait`` s)."""
    began = time.monotonic()
    load = loadavg()
    while enabled and load >= threshold and time.monotonic() - began < max_wait:
        time.sleep(2.0)
        load = loadavg()
    return {
        "enabled": enabled,
        "threshold": threshold,
        "load_at_start": load,
        "waited_s": round(time.monotonic() - began, 2),
        "quiet": load < threshold,
    }


# -- /proc sampling ---------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from 3 (state) on


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process, all its threads (utime, stime), in seconds."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in children:
                found.append(int(child))
                stack.append(int(child))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU of ``pid`` (every thread) plus any live child processes, plus reaped children."""
    total = 0.0
    try:
        fields = _stat_fields(pid)
        total += (sum(int(fields[i]) for i in (11, 12, 13, 14))) / CLK_TCK
    except OSError:
        return float("nan")
    for child in descendants(pid):
        with contextlib.suppress(OSError):  # it may have exited meanwhile
            total += process_cpu_seconds(child)
    return total


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; busy excludes idle and iowait."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return total - idle, total


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(busy / total, 3) if total > 0 else None


# -- workers ----------------------------------------------------------------------------------


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 60.0) -> dict[str, Any]:
    """SIGINT (graceful for all three workers), then SIGTERM and SIGKILL if it will not exit."""
    began = time.monotonic()
    how = "sigint"
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            how = "sigterm"
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                how = "sigkill"
                proc.kill()
                proc.wait()
    else:
        how = "already-exited"
    return {"how": how, "returncode": proc.returncode, "stop_s": round(time.monotonic() - began, 3)}


def spawn(
    cmd: Sequence[str], env: dict[str, str], log_path: Path, stdout_path: Path | None = None
) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stderr = log_path.open("ab")
    stdout = stdout_path.open("wb") if stdout_path is not None else stderr
    try:
        return subprocess.Popen(
            list(cmd),
            env=env,
            cwd=str(HERE),
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    finally:
        stderr.close()
        if stdout is not stderr:
            stdout.close()


def burndown(
    cmd: Sequence[str],
    env: dict[str, str],
    remaining: Callable[[], int],
    n: int,
    log_path: Path,
    *,
    timeout_s: float,
    stdout_path: Path | None = None,
    pyspy_out: Path | None = None,
    before_spawn: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Spawn the worker and time it until ``remaining()`` reads 0 (polled every 50 ms).

    The clock starts just before the spawn and stops at the first poll that reads 0. Worker CPU
    is read from /proc at that moment, before the worker is stopped (gracefully, SIGINT).
    ``before_spawn`` runs right before the clock starts (e.g. to read the database clock).
    """
    mark = before_spawn() if before_spawn is not None else None
    ticks0 = machine_ticks()
    wall0 = wall()
    t0 = time.perf_counter()
    proc = spawn(cmd, env, log_path, stdout_path)
    profiler = None
    if pyspy_out is not None:
        profiler = subprocess.Popen(
            [venv_bin("py-spy"), "record", "--pid", str(proc.pid), "--rate", "250", "--threads",
             "--idle", "--format", "raw", "--output", str(pyspy_out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    poll_costs: list[float] = []
    elapsed = None
    failure = None
    next_poll = t0 + POLL_INTERVAL_S
    while True:
        pause = next_poll - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        next_poll += POLL_INTERVAL_S
        a = time.perf_counter()
        left = remaining()
        b = time.perf_counter()
        poll_costs.append(b - a)
        if left == 0:
            elapsed = b - t0
            break
        if proc.poll() is not None:
            failure = f"worker exited with {proc.returncode} with {left} tasks left"
            break
        if b - t0 > timeout_s:
            failure = f"timeout after {timeout_s} s with {left} tasks left"
            break
    worker_cpu = tree_cpu_seconds(proc.pid) if proc.poll() is None else float("nan")
    ticks1 = machine_ticks()
    stopped = stop_process(proc)
    if profiler is not None:
        try:
            profiler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            profiler.kill()
    return {
        "ok_drained": failure is None,
        "failure": failure,
        "elapsed_s": None if elapsed is None else round(elapsed, 4),
        "rate": None if not elapsed else round(n / elapsed, 1),
        "spawn_wall": wall0,
        "spawn_mark": mark,
        "worker_pid": proc.pid,
        "worker_cpu_s": round(worker_cpu, 3),
        "worker_cpu_per_task_ms": round(worker_cpu * 1000 / n, 4) if n else None,
        "machine_busy": busy_share(ticks0, ticks1),
        "polls": len(poll_costs),
        "poll_ms_mean": round(statistics.fmean(poll_costs) * 1000, 3) if poll_costs else None,
        "stop": stopped,
    }


def add_timing(result: dict[str, Any], n: int, first_start: float | None, own_end: float | None):
    """Startup (spawn → first task start) and the steady rate after it, from store timestamps
    (``first_start``/``own_end`` in seconds since the spawn)."""
    result["startup_s"] = None if first_start is None else round(first_start, 3)
    result["own_end_s"] = None if own_end is None else round(own_end, 3)
    elapsed = result.get("elapsed_s")
    if first_start is not None and elapsed and elapsed > first_start:
        result["steady_rate"] = round(n / (elapsed - first_start), 1)
    else:
        result["steady_rate"] = None


# -- timing a loop ----------------------------------------------------------------------------


class Timed:
    """Wall and CPU time of the enclosed block (the driver's own process)."""

    def __enter__(self) -> Timed:
        self._t0 = time.perf_counter()
        self._c0 = time.process_time()
        self._ticks0 = machine_ticks()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self._t0
        self.cpu = time.process_time() - self._c0
        self.busy = busy_share(self._ticks0, machine_ticks())

    def record(self, n: int) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed, 4),
            "rate": round(n / self.elapsed, 1) if self.elapsed else None,
            "driver_cpu_s": round(self.cpu, 3),
            "per_call_ms": round(self.elapsed * 1000 / n, 4) if n else None,
            "per_call_cpu_ms": round(self.cpu * 1000 / n, 4) if n else None,
            "machine_busy": self.busy,
        }


def chunks(total: int, size: int) -> list[int]:
    sizes = [size] * (total // size)
    if total % size:
        sizes.append(total % size)
    return sizes


# -- command line and output ------------------------------------------------------------------


def base_parser(description: str, steps: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("step", choices=list(steps))
    parser.add_argument("--n", type=int, default=DEFAULT_N, help="tasks (default 10,000)")
    parser.add_argument(
        "--concurrency", "--workers", type=int, default=1, help="worker concurrency (burndown)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH, help="tasks per batch (enqueue-batch)"
    )
    parser.add_argument("--run", default="1", help="run label recorded with the result")
    parser.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH)
    parser.add_argument("--out", type=Path, default=None, help="append the JSON line here too")
    parser.add_argument("--load-threshold", type=float, default=DEFAULT_LOAD_THRESHOLD)
    parser.add_argument("--max-wait", type=float, default=DEFAULT_MAX_WAIT_S)
    parser.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="give up a burn-down after this many s"
    )
    parser.add_argument("--pyspy", type=Path, default=None, help="py-spy raw output (burndown)")
    return parser


def quiet(args: argparse.Namespace) -> dict[str, Any]:
    return wait_quiet(args.load_threshold, args.max_wait, enabled=not args.no_wait)


def record(args: argparse.Namespace, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "measurement",
        "run": args.run,
        "step": args.step,
        "n": args.n,
        "at": round(wall(), 3),
    }
    base.update(fields)
    return base


def emit(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print the result as one JSON line (the last line of stdout); append it to ``--out``."""
    line = json.dumps(result, sort_keys=False, default=str)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as handle:
            handle.write(line + "\n")
    print(line, flush=True)
    return 0 if result.get("ok", False) or result.get("na", False) else 1


def remove_sqlite_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal", "-writelock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def log_path(args: argparse.Namespace, system: str) -> Path:
    name = f"{system}-{args.step}-c{args.concurrency}-r{args.run}.log"
    return args.scratch / "logs" / name


# -- machine facts ----------------------------------------------------------------------------

PACKAGES = ("huey", "procrastinate", "psycopg", "psycopg-binary", "psycopg-pool", "jobledger",
            "py-spy")  # fmt: skip
PG_SETTINGS = (
    "server_version", "synchronous_commit", "fsync", "full_page_writes", "wal_sync_method",
    "wal_level", "shared_buffers", "checkpoint_timeout", "max_wal_size", "autovacuum",
    "max_connections",
)  # fmt: skip


def _first_line(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip() if ":" in line else line.split("=", 1)[1]
    except OSError:
        return None
    return None


def _mount_of(path: Path) -> dict[str, str] | None:
    best: tuple[str, str, str] | None = None
    target = str(path.resolve())
    for line in Path("/proc/mounts").read_text().splitlines():
        device, point, fstype = line.split()[:3]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[1])):
            best = (device, point, fstype)
    return None if best is None else {"device": best[0], "mount": best[1], "fstype": best[2]}


def _git(*argv: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), *argv], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def machine_facts(scratch: Path) -> dict[str, Any]:
    """CPU, memory, OS, Python, SQLite, PostgreSQL settings, package versions, jobledger commit."""
    import platform
    import sqlite3
    from importlib import metadata

    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    postgres: dict[str, Any] = {}
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            postgres["version"] = conn.execute("SELECT version()").fetchone()[0]
            for name in PG_SETTINGS:
                postgres[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    except Exception as exc:
        postgres["error"] = repr(exc)
    try:
        import jobledger

        jobledger_file = jobledger.__file__
    except Exception as exc:  # a checkout mid-edit may not import; the peers still run
        jobledger_file = f"import failed: {exc!r}"
    status = _git("status", "--porcelain", "--", "src", "pyproject.toml")
    mem = _first_line("/proc/meminfo", "MemTotal")
    scratch.mkdir(parents=True, exist_ok=True)
    worker_help = subprocess.run(
        [venv_bin("jobledger"), "worker", "--help"], capture_output=True, text=True, check=False
    ).stdout
    return {
        "cpu_model": _first_line("/proc/cpuinfo", "model name"),
        "cpus": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "os": (_first_line("/etc/os-release", "PRETTY_NAME") or "").strip('"') or None,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "postgres": postgres,
        "packages": packages,
        "jobledger_file": jobledger_file,
        "jobledger_commit": _git("rev-parse", "HEAD"),
        "jobledger_commit_short": _git("rev-parse", "--short", "HEAD"),
        "jobledger_src_dirty": None if status is None else bool(status),
        "jobledger_worker_options": sorted(set(re.findall(r"--[a-z][a-z-]+", worker_help))),
        "scratch": str(scratch),
        "scratch_mount": _mount_of(scratch),
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
    }


if __name__ == "__main__":
    # python peerscommon.py [SCRATCH]: print the machine facts as JSON
    print(json.dumps(machine_facts(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SCRATCH)))
