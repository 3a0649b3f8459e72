"""The per-queue read model's queries (``Store.queue_depths``) stay on their index and read the
same rows behind 1,000 and 25,000 rows of backlog on PostgreSQL, with and without planner
statistics: each count stops at its cap."""

from __future__ import annotations

from typing import Any

import pytest

from jobledger.store.postgres.tx import QUERIES
from tests.store.postgres.test_query_plan import (
    HELD,
    IN_FRONT,
    LARGE,
    NOW,
    READY,
    SMALL,
    STATS,
    WAITING,
    _assert_index_plan,
    _grow,
    _never_analyzed,
    _pages,
    _rows_read,
    wanted,
)

__all__ = ["wanted"]

CAP = 50
STATUS = "jobledger_occurrences_status"
# query: (parameters, the indexes it may read occurrences through, whether in index order)
PROBES: dict[str, tuple[dict[str, Any], set[str], bool]] = {
    "count_ready_in_queue": ({"queue": "default", "cap": CAP}, {READY}, True),
    "count_held_in_queue": ({"queue": "limited", "cap": CAP}, {HELD}, True),
    "waiting_by_queue": ({"cap": CAP}, {WAITING}, True),
    "blocked_by_queue": ({"cap": CAP}, {STATUS}, False),
    "held_queues": ({}, {HELD}, True),
}


def _explain(admin, name: str, params: dict[str, Any], *, analyze: bool) -> dict[str, Any]:
    """As the store's read transactions plan: no planner settings (the write transactions'
    ones do not apply to reads)."""
    options = "ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        row = admin.execute(f"EXPLAIN ({options}) " + QUERIES[name], params).fetchone()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


SETUPS = ["held-partition", "lower-priority", "not-yet-due", "paused-queue", "settled-history"]


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("setup", SETUPS)
def test_depth_queries_stay_on_their_index_and_flat(admin, wanted, setup, stats):
    job_id, columns = IN_FRONT[setup]
    read: dict[str, list[int]] = {name: [] for name in PROBES}
    first = 1
    for size in (SMALL, LARGE):
        _grow(admin, job_id, first, size, **columns)
        first = size + 1
        if stats == "analyzed":
            admin.execute("ANALYZE jobledger.occurrences")
        else:
            assert _never_analyzed(admin)
        for name, (params, indexes, ordered) in PROBES.items():
            arguments = {"now": NOW, **params}
            _assert_index_plan(
                _explain(admin, name, arguments, analyze=False), indexes, ordered=ordered
            )
            executed = _explain(admin, name, arguments, analyze=True)
            _assert_index_plan(executed, indexes, ordered=ordered)
            assert _pages(executed) <= 4 * CAP, (name, size, _pages(executed))
            read[name].append(_rows_read(executed))
    for name, (small, large) in read.items():
        assert small == large <= CAP + 5, (
            f"{name}: {small} rows behind {SMALL}, {large} behind {LARGE}"
        )
