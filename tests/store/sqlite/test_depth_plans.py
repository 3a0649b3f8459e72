"""The per-queue read model's queries (``Store.queue_depths``, ``occurrence_gate``) read their
index and stop at their cap on SQLite, with and without statistics: looking at a queue costs
the same behind any backlog."""

from __future__ import annotations

import pytest

from jobledger.store.sqlite.store import SQLiteStore
from tests.store.sqlite.test_query_plan import (
    HELD,
    LANES,
    PARAMS,
    READY,
    WAITING,
    _explain,
    populated_store,
)

__all__ = ["populated_store"]

STATUS = "jobledger_occurrences_status"
PLANS = {
    "count_ready_in_queue": [f"SEARCH occurrences USING INDEX {READY} (queue=?)"],
    "count_held_in_queue": [f"SEARCH occurrences USING INDEX {HELD} (queue=?)"],
    "waiting_by_queue": [f"SCAN occurrences USING INDEX {WAITING}"],
    "blocked_by_queue": [f"SEARCH occurrences USING INDEX {STATUS} (status=?)"],
    "held_queues": [
        f"SCAN occurrences USING INDEX {HELD}",
        f"SEARCH o USING INDEX {HELD} (queue>?)",
    ],
    "count_partition_running": [
        f"SEARCH occurrences USING INDEX {LANES} (queue=? AND partition_key=?)"
    ],
}


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_depth_queries_read_their_index(
    populated_store: SQLiteStore, name: str, analyzed: bool
) -> None:
    raw = populated_store._connection.raw
    if analyzed:
        raw.execute("ANALYZE")
    plan = _explain(populated_store, name, PARAMS)
    assert plan.occurrence_accesses() == PLANS[name], plan.text()
    # The only sorting is the grouping of at most :cap rows, never an ORDER BY of the backlog.
    sorts = [node.detail for node in plan.nodes if "TEMP B-TREE" in node.detail]
    assert sorts in ([], ["USE TEMP B-TREE FOR GROUP BY"]), plan.text()
