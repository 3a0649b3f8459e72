"""The test-database supply itself: a killed run's databases never break or clutter a later one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.store import pg_support

ROOT = Path(__file__).resolve().parents[3]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _exists(name: str) -> bool:
    with psycopg.connect(pg_support.ADMIN_URL, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_databases_left_by_a_killed_run_are_swept_and_live_ones_kept():
    suffix = uuid.uuid4().hex[:12]
    host = pg_support.HOST_TAG
    dead_template = f"jobledger_tpl_{host}_{_dead_pid()}_{suffix}"
    dead_clone = f"jobledger_t_{host}_{_dead_pid()}_{suffix}"
    live_clone = f"jobledger_t_{host}_{os.getpid()}_{suffix}"
    other_host = f"jobledger_t_{'0' * 8 if host != '0' * 8 else '1' * 8}_{_dead_pid()}_{suffix}"
    names = [dead_template, dead_clone, live_clone, other_host]
    for name in names:
        pg_support._admin_execute(f'CREATE DATABASE "{name}"')
    try:
        dropped = pg_support.sweep_orphaned_databases()
        assert {dead_template, dead_clone} <= set(dropped)
        assert not _exists(dead_template) and not _exists(dead_clone)
        assert _exists(live_clone), "a database of a running process was dropped"
        assert _exists(other_host), "a database another machine may still use was dropped"
    finally:
        for name in names:
            pg_support._drop(name)


def test_new_names_are_attributable_to_this_process():
    name = pg_support.new_database_name()
    assert len(name) <= 63 and name.startswith("jobledger_t_")
    assert not pg_support.orphaned(name)


def test_connecting_retries_a_refused_connection():
    calls: list[str] = []
    pauses: list[float] = []
    connection = object()

    def flaky_connect(url: str, **options: object) -> object:
        calls.append(url)
        if len(calls) <= 2:
            raise psycopg.OperationalError("connection failed: server closed the connection")
        return connection

    got = pg_support.connect_with_retry(
        "postgresql://h/db", connect=flaky_connect, sleep=pauses.append, autocommit=True
    )
    assert got is connection
    assert calls == ["postgresql://h/db"] * 3
    assert pauses == [0.1, 0.2]


def test_connecting_gives_up_after_the_last_attempt():
    calls: list[str] = []

    def refused(url: str, **options: object) -> object:
        calls.append(url)
        raise psycopg.OperationalError("connection refused")

    with pytest.raises(psycopg.OperationalError):
        pg_support.connect_with_retry("postgresql://h/db", connect=refused, sleep=lambda _: None)
    assert len(calls) == pg_support.CONNECT_ATTEMPTS


def test_the_sweep_survives_one_refused_connection(monkeypatch):
    """One refused connection used to fail the sweep, and with it the session fixture that
    every PostgreSQL test needs: each of them errored in setup."""
    real_connect = psycopg.connect
    refusals: list[str] = []

    def refuse_once(*args: object, **options: object) -> object:
        if not refusals:
            refusals.append("refused")
            raise psycopg.OperationalError("connection failed: too many clients already")
        return real_connect(*args, **options)

    monkeypatch.setattr(psycopg, "connect", refuse_once)
    assert isinstance(pg_support.sweep_orphaned_databases(), list)
    assert refusals == ["refused"]


def test_an_unreachable_server_is_one_line(monkeypatch):
    monkeypatch.setattr(pg_support, "ADMIN_URL", "postgresql://postgres:pw-s3cret@127.0.0.1:1/x")
    monkeypatch.setattr(pg_support, "CONNECT_ATTEMPTS", 1)
    reason = pg_support.postgres_unreachable()
    assert reason is not None and "\n" not in reason
    assert reason.startswith(
        "PostgreSQL at postgresql://postgres:***@127.0.0.1:1/x is not reachable"
    )
    assert "s3cret" not in reason


@pytest.mark.parametrize("workers", ["0", "1"], ids=["no-xdist", "xdist"])
def test_a_run_without_the_server_stops_with_one_line(tmp_path, workers):
    """A session whose PostgreSQL is down used to error every [postgres] test in setup, with
    ~30k lines of tracebacks; now it stops before the first test, with the reason."""
    closed = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            workers,
            "tests/store/postgres/test_clock.py",
        ],
        cwd=ROOT,
        env={**os.environ, "JOBLEDGER_TEST_PG_ADMIN": closed},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.INTERRUPTED, output
    assert f"PostgreSQL at {closed} is not reachable: " in output
    assert "Traceback" not in output and "ERROR" not in output, output
    assert "no tests ran" in output
    assert len(output.splitlines()) < 12, output
