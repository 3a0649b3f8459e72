"""The test-database supply itself: a killed run's databases never break or clutter a later one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psycopg

from tests.store import pg_support


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
