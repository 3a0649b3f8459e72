"""A private PostgreSQL cluster for tests that restart or break the server.

The shared server at 127.0.0.1:5432 is used by everyone's tests, so anything that restarts a
server, fills its disk or stalls its commits runs against a cluster of its own: ``initdb`` into
a temporary directory, started with ``pg_ctl`` on a free loopback port with trust
authentication, stopped and removed afterwards. PostgreSQL refuses to run as root, so when the
tests run as root the cluster belongs to the ``postgres`` system user (``runuser``).

    with PrivateCluster.create() as cluster:
        url = cluster.database("chaos")
        ...
        cluster.restart(mode="immediate")     # a crash and recovery, mid-drain
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["ClusterUnavailable", "PrivateCluster", "find_pg_bin"]


class ClusterUnavailable(RuntimeError):
    """No private cluster can be made here (no PostgreSQL binaries, or no user to run them)."""


def find_pg_bin() -> Path | None:
    override = os.environ.get("JOBLEDGER_PG_BIN")
    candidates = [override] if override else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateCluster:
    """One throw-away PostgreSQL cluster (see the module docstring)."""

    def __init__(self, bin_dir: Path, root: Path, port: int, user: str | None) -> None:
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = port
        self._user = user  # run the server binaries as this system user (None: as ourselves)
        self.restarts = 0

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    def create(cls, *, settings: dict[str, str] | None = None) -> PrivateCluster:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise ClusterUnavailable("no PostgreSQL server binaries (initdb) found")
        user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise ClusterUnavailable("running as root and there is no postgres user") from exc
            user = "postgres"
        root = Path(tempfile.mkdtemp(prefix="jobledger-pg-"))
        if user is not None:
            shutil.chown(root, user=user)
        cluster = cls(bin_dir, root, _free_port(), user)
        try:
            cluster._run(
                "initdb",
                "-D",
                str(cluster.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
            extra = {
                "listen_addresses": "'127.0.0.1'",
                "port": str(cluster.port),
                "unix_socket_directories": f"'{root}'",
                "shared_buffers": "32MB",
                "max_connections": "100",
                "fsync": "on",
                "synchronous_commit": "on",
                **(settings or {}),
            }
            with (cluster.data / "postgresql.conf").open("a") as conf:
                for key, value in extra.items():
                    conf.write(f"{key} = {value}\n")
            cluster.start()
        except BaseException:
            cluster.remove()
            raise
        return cluster

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        command = [str(self.bin_dir / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise ClusterUnavailable(
                f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )
        return done.stdout

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast", *, down_s: float = 0.0) -> float:
        """Stop (``fast``: clean; ``immediate``: a crash, recovered on start) and start again,
        staying down ``down_s``; returns how long the server was unreachable (seconds)."""
        began = time.monotonic()
        self.stop(mode)
        if down_s > 0:
            time.sleep(down_s)
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- databases -------------------------------------------------------------------------

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        """Create database ``name`` and return its URL."""
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(sql)
            return list(cursor.fetchall()) if cursor.description else []
