"""The named queries: one shared text where the dialects agree, one per dialect where they
really differ, the same names in both stores. (Query plans: ``test_query_plan.py``; that every
name runs on both stores: ``tests/store/test_query_coverage.py``.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import jobledger.store.postgres.tx as pg_store
import jobledger.store.sqlite.store as sqlite_store
from jobledger.store.migrations import LADDER
from jobledger.store.sql import SHARED_QUERIES, load_queries, load_store_queries

STORE_DIR = Path(pg_store.__file__).parent.parent
SQLITE_FILE = STORE_DIR / "sqlite" / "queries.sql"
POSTGRES_FILE = STORE_DIR / "postgres" / "queries.sql"


def _normalized(sql: str) -> str:
    """A query's text with placeholders and whitespace made comparable across dialects."""
    sql = re.sub(r"%\(([a-z_][a-z0-9_]*)\)s", r":\1", sql)
    return re.sub(r"\s+", " ", sql).strip()


def test_every_query_name_resolves_in_both_dialects():
    assert sqlite_store.QUERIES.keys() == pg_store.QUERIES.keys()
    assert sqlite_store.QUERIES == load_store_queries(SQLITE_FILE, pyformat=False)
    assert pg_store.QUERIES == load_store_queries(POSTGRES_FILE, pyformat=True)


def test_shared_blocks_come_from_the_shared_file_once():
    shared = load_queries(SHARED_QUERIES)
    assert SHARED_QUERIES == STORE_DIR / "queries.sql"
    assert shared
    sqlite_own = load_queries(SQLITE_FILE)
    postgres_own = load_queries(POSTGRES_FILE)
    # a name lives in the shared file or in the dialect files, never in both
    assert not shared.keys() & sqlite_own.keys()
    assert not shared.keys() & postgres_own.keys()
    assert sqlite_store.QUERIES.keys() == shared.keys() | sqlite_own.keys()
    for name, sql in shared.items():
        # SQLite runs the shared text as written; PostgreSQL with psycopg placeholders
        assert sqlite_store.QUERIES[name] == sql, name
        assert pg_store.QUERIES[name] == re.sub(r"(?<![:\w]):([a-z_][a-z0-9_]*)", r"%(\1)s", sql)
        assert ":" not in re.sub(r"::|'[^']*'", "", pg_store.QUERIES[name]), name
    # each name appears once in its file (the loader refuses duplicates)
    for path in (SHARED_QUERIES, SQLITE_FILE, POSTGRES_FILE):
        names = re.findall(r"^--\s*name:\s*(\S+)\s*$", path.read_text("utf-8"), re.MULTILINE)
        assert len(names) == len(set(names)), path


def test_dialect_files_hold_the_same_names_and_only_texts_that_differ():
    sqlite_own = load_queries(SQLITE_FILE)
    postgres_own = load_queries(POSTGRES_FILE)
    assert sorted(sqlite_own) == sorted(postgres_own)
    same = [
        name
        for name in sqlite_own
        if _normalized(sqlite_own[name]) == _normalized(postgres_own[name])
    ]
    assert same == [], f"identical in both dialects, belongs in store/queries.sql: {same}"


def test_the_loader_refuses_a_name_defined_twice(tmp_path):
    twice = tmp_path / "twice.sql"
    twice.write_text("-- name: a\nSELECT 1\n\n-- name: a\nSELECT 2\n", "utf-8")
    with pytest.raises(ValueError, match="duplicate query name 'a'"):
        load_queries(twice)
    shared_name = next(iter(load_queries(SHARED_QUERIES)))
    clash = tmp_path / "clash.sql"
    clash.write_text(f"-- name: {shared_name}\nSELECT 1\n", "utf-8")
    with pytest.raises(ValueError, match="both shared and in"):
        load_store_queries(clash, pyformat=False)


def test_comments_inside_blocks_are_not_sent():
    for queries in (sqlite_store.QUERIES, pg_store.QUERIES):
        for name, sql in queries.items():
            assert not any(line.lstrip().startswith("--") for line in sql.splitlines()), name


def test_migrations_have_the_same_numbers_and_names():
    def names(dialect: str) -> list[str]:
        return sorted(p.name for p in (STORE_DIR / dialect / "migrations").glob("*.sql"))

    assert names("postgres") == names("sqlite")
    assert names("sqlite") == [f"{version:04d}_{name}.sql" for version, name in LADDER]
    assert names("sqlite")[:4] == [
        "0001_scheduler-kernel-v1.sql",
        "0002_jobledger-requeue-v2.sql",
        "0003_jobledger-everyday-v3.sql",
        "0004_jobledger-queues-v4.sql",
    ]


def test_postgres_claims_lock_and_skip_locked_rows():
    for name in ("ready_probe", "ready_probe_in_workspace"):
        sql = pg_store.QUERIES[name]
        assert "FOR UPDATE OF o SKIP LOCKED" in sql, name
        # every lane asked for in one statement, each with its own room
        assert "unnest(%(queues)s::text[], %(kinds)s::text[], %(rooms)s::int[])" in sql, name
        assert "LIMIT lane.room" in sql, name
    for name in ("expired_leases", "waiting_due", "best_held"):
        assert "FOR UPDATE SKIP LOCKED" in pg_store.QUERIES[name], name
    assert "FOR UPDATE OF o" in pg_store.QUERIES["claim_target"]
    assert "seq = ANY(%(ids)s::bigint[])" in pg_store.QUERIES["apply_claims"]
    assert "RETURNING *" in pg_store.QUERIES["apply_claims"]


# Every claim-path query of the SQLite store names its partial index: with ANALYZE statistics
# SQLite could otherwise prefer one that walks rows the claim may not take.
SQLITE_PINNED = {
    "ready_lanes": "jobledger_occurrences_ready",
    "ready_lanes_in_workspace": "jobledger_occurrences_ready_workspace",
    "ready_probe": "jobledger_occurrences_ready",
    "ready_probe_in_workspace": "jobledger_occurrences_ready_workspace",
    "next_ready": "jobledger_occurrences_ready",
    "expired_leases": "jobledger_occurrences_leases",
    "waiting_due": "jobledger_occurrences_waiting",
    "best_held": "jobledger_occurrences_held",
    "held_partitions": "jobledger_occurrences_held",
}


def test_sqlite_claims_pin_their_index():
    for name, index in SQLITE_PINNED.items():
        sql = sqlite_store.QUERIES[name]
        pinned = set(re.findall(r"INDEXED BY (\w+)", sql))
        assert pinned == {index}, name
    # apply_claims looks its rows up by rowid (seq), never through a status index
    by_seq = "WHERE seq IN (SELECT value FROM json_each(:ids))"
    assert by_seq in sqlite_store.QUERIES["apply_claims"]


def _plan(admin, name: str, params: dict[str, Any]) -> str:
    admin.execute("SET search_path TO jobledger")
    admin.execute("SET enable_seqscan TO off")  # tiny tables: ask what the planner *can* use
    rows = admin.execute("EXPLAIN " + pg_store.QUERIES[name], params).fetchall()
    return "\n".join(row["QUERY PLAN"] for row in rows)


@pytest.mark.parametrize(
    ("name", "params", "index"),
    [
        ("expired_leases", {"now": 5, "limit": 100}, "jobledger_occurrences_leases"),
        ("waiting_due", {"now": 5, "limit": 100}, "jobledger_occurrences_waiting"),
        (
            "best_held",
            {"queue": "q", "partition_key": "p", "limit": 10},
            "jobledger_occurrences_held",
        ),
    ],
)
def test_claim_sweeps_use_their_partial_index(admin, name, params, index):
    assert index in _plan(admin, name, params)


def test_dead_letters_use_their_index(admin):
    # v5: dead letters have their own partial index in the reference's order (settled_at DESC)
    plan = _plan(admin, "list_dead_letters", {"limit": 50})
    assert "jobledger_occurrences_dead_letters" in plan
