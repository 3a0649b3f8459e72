"""The PostgreSQL dialect names exactly the operations the SQLite dialect names, and plans well."""

from __future__ import annotations

from pathlib import Path

import jobledger.store.postgres.store as pg_store
import jobledger.store.sqlite.store as sqlite_store
from jobledger.store.common import load_queries

STORE_DIR = Path(pg_store.__file__).parent.parent


def test_query_names_match_the_sqlite_dialect():
    postgres = load_queries(STORE_DIR / "postgres" / "queries.sql")
    sqlite = load_queries(STORE_DIR / "sqlite" / "queries.sql")
    assert sorted(postgres) == sorted(sqlite)
    assert pg_store.QUERIES.keys() == sqlite_store.QUERIES.keys()


def test_migrations_have_the_same_numbers_and_names():
    def names(dialect: str) -> list[str]:
        return sorted(p.name for p in (STORE_DIR / dialect / "migrations").glob("*.sql"))

    assert names("postgres") == names("sqlite")


def test_claim_candidate_locks_and_skips_locked_rows():
    sql = pg_store.QUERIES["claim_next_candidate"]
    assert "FOR UPDATE OF o SKIP LOCKED" in sql
    assert "RETURNING *" in pg_store.QUERIES["apply_claim"]


def _plan(admin, name: str, params: dict) -> str:
    admin.execute("SET search_path TO jobledger")
    admin.execute("SET enable_seqscan TO off")  # tiny tables: ask what the planner *can* use
    rows = admin.execute("EXPLAIN " + pg_store.QUERIES[name], params).fetchall()
    return "\n".join(row["QUERY PLAN"] for row in rows)


def test_claim_next_candidate_walks_the_claim_index(admin):
    plan = _plan(admin, "claim_next_candidate", {"now": 5, "job_kind": None, "workspace_id": None})
    assert "scheduler_occurrences_claim" in plan
    assert "Sort" not in plan  # the index supplies the order; LIMIT 1 stops at the first row


def test_expired_final_leases_use_the_lease_index(admin):
    plan = _plan(admin, "select_expired_final_leases", {"now": 5, "limit": 100})
    assert "scheduler_occurrences_lease" in plan


def test_dead_letters_use_their_index(admin):
    plan = _plan(admin, "list_dead_letters", {"limit": 50})
    assert "scheduler_occurrences_dead_letter" in plan
