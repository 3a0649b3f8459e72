"""The PostgreSQL store's transaction handle: the store's named queries on one open transaction,
and what a commit must announce (NOTIFY for claimable work and for settled occurrences)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg

from ...clock import Clock
from ..ledger import Row, validate_clock_reading
from ..sql import load_queries, load_store_queries
from ..tx import table_parameter
from .connection import PgConnection

__all__ = ["FAST_PATHS", "LOCKS", "QUERIES", "PostgresTx"]

QUERIES = load_store_queries(Path(__file__).with_name("queries.sql"), pyformat=True)
FAST_PATHS = load_queries(Path(__file__).with_name("fast_paths.sql"))
LOCKS = load_queries(Path(__file__).with_name("locks.sql"))
# A committed row from one of these makes work claimable now: its transaction sends NOTIFY.
_WAKING_QUERIES = frozenset(
    {
        "insert_occurrence_from_job",
        "insert_occurrences_from_jobs",
        "release_lease",
        "requeue_dead_letter",
        "expire_lease",
        # A parent settled for blocked children (SPEC §10); sent even when they still wait for
        # other parents, a wake that finds nothing.
        "release_children",
        "adjudicate_not_applied",
        # A queue's partition limits were removed: its held rows became ready.
        "release_held_partitions",
    }
)
# A committed row from one of these may have made an occurrence terminal: its transaction sends
# NOTIFY on the store's "done" channel, which wakes result waiters in every process (SPEC §9).
_SETTLING_QUERIES = frozenset(
    {
        "settle_occurrence",
        "dead_letter_expired_lease",
        "cancel_occurrence",
        "adjudicate_applied",
    }
)
# The same, for statements whose returned rows name the occurrences they made terminal: children
# cancelled because a parent failed (SPEC §10).
_SETTLING_ROW_QUERIES = frozenset({"cancel_children"})


class PostgresTx:
    """:class:`~jobledger.store.ledger.Tx` over one open transaction on a pooled connection."""

    __slots__ = ("_clock", "_conn", "_db_now", "settled", "wakes")

    def __init__(self, conn: PgConnection, clock: Clock | None, db_now: int) -> None:
        self._conn = conn
        self._clock = clock
        self._db_now = db_now
        self.wakes = False
        # Occurrences a settling statement changed: named in the NOTIFY sent with the COMMIT.
        self.settled: list[str] = []

    def _execute(
        self,
        query: str,
        params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
        *,
        many: bool = False,
    ) -> psycopg.Cursor[Any]:
        """Every statement of the store goes through here (one place to observe them)."""
        if many:
            cursor = self._conn.cursor()
            # psycopg pipelines executemany: one round trip for the whole batch.
            cursor.executemany(QUERIES[query], params or [], returning=True)
        else:
            cursor = self._conn.execute(QUERIES[query], params or {})
            if cursor.rowcount > 0:
                if query in _WAKING_QUERIES:
                    self.wakes = True
                elif query in _SETTLING_QUERIES and isinstance(params, Mapping):
                    self.settled.append(str(params["occurrence_id"]))
        return cursor

    def wake(self) -> None:
        self.wakes = True

    def lock(self, statement: str, keys: Sequence[int]) -> None:
        """Take advisory locks (``locks.sql``) on ``keys``, in that order."""
        self._conn.execute(statement, {"keys": list(keys)}).fetchall()

    def catch_up_clock(self, statement: str) -> None:
        """Move this transaction's database "now" to the clock as it reads now (never back):
        after waiting for a lock, the instant the transaction began is stale."""
        row = self._conn.execute(statement).fetchone()
        if row is not None:
            self._db_now = max(self._db_now, int(row["now_ms"]))

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        row: Row | None = self._execute(query, params).fetchone()
        return row

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        rows: list[Row] = self._execute(query, params).fetchall()
        if query in _SETTLING_ROW_QUERIES:
            self.settled += [str(row["occurrence_id"]) for row in rows]
        return rows

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        return self._execute(query, params).rowcount

    def many(self, query: str, params: Sequence[Mapping[str, Any]]) -> None:
        if params:
            self._execute(query, params, many=True)

    def rows_many(self, query: str, params: Sequence[Mapping[str, Any]]) -> list[Row | None]:
        if not params:
            return []
        cursor = self._execute(query, params, many=True)
        found: list[Row | None] = []
        while True:
            found.append(cursor.fetchone())
            if not cursor.nextset():
                break
        if any(row is not None for row in found):
            if query in _WAKING_QUERIES:
                self.wakes = True
            elif query in _SETTLING_QUERIES:
                self.settled += [
                    str(item["occurrence_id"])
                    for item, row in zip(params, found, strict=True)
                    if row is not None
                ]
        return found

    def id_list(self, values: Sequence[str] | Sequence[int]) -> object:
        return list(values)

    def table(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, object]:
        return table_parameter(rows)

    def now(self) -> int:
        """The injected clock, else the database clock read when this transaction began."""
        return validate_clock_reading(self._db_now if self._clock is None else self._clock())
