"""Every operator read of occurrences is a range of an index on SQLite (schema v5): the CLI's and
the dashboard's pages, counts, dead letters, what is due, and prune's walk. With and without
``ANALYZE`` statistics: no full scan of occurrences, no temporary B-tree sorting them (the only
sort allowed is the GROUP BY of a bounded count)."""

from __future__ import annotations

from typing import Any

import pytest

from jobledger.store.sqlite.store import SQLiteStore
from tests.store.sqlite.test_query_plan import NOW, WAITING, _explain, populated_store

__all__ = ["populated_store"]

STATUS = "jobledger_occurrences_status"
JOB = "jobledger_occurrences_job"
DEAD = "jobledger_occurrences_dead_letters"
DEAD_JOB = "jobledger_occurrences_dead_letters_job"
OUTCOME_UNKNOWN = "jobledger_occurrences_outcome_unknown"
RUNNING = "jobledger_occurrences_running"
QUEUE = "jobledger_occurrences_queue"
PARTITION = "jobledger_occurrences_partition"
KEYS = "jobledger_keys_key"
BY_SEQ = "SEARCH occurrences USING INTEGER PRIMARY KEY (rowid=?)"

PARAMS: dict[str, Any] = {
    "now": NOW,
    "status": "queued",
    "kind": "mail",
    "job_id": "job-mail",
    "before_seq": 2**62,
    "limit": 51,
    "cap": 1000,
    "seqs": "[1, 2, 3]",
    "after_kind": "",
    "after_seq": 0,
    "queue": "limited",
    "partition": "p",
    "trigger_key": "key:order-21",
    "tag": "customer:21",
}
# query: every access to occurrences it may make
PLANS: dict[str, list[str]] = {
    "list_occurrences_all": ["SEARCH occurrences USING INTEGER PRIMARY KEY (rowid<?)"],
    "list_occurrences_by_status_kind": [
        f"SEARCH occurrences USING INDEX {STATUS} (status=? AND kind=? AND rowid<?)"
    ],
    "list_occurrences_by_job": [f"SEARCH occurrences USING INDEX {JOB} (job_id=? AND rowid<?)"],
    "seqs_by_status_kind": [
        f"SEARCH occurrences USING COVERING INDEX {STATUS} (status=? AND kind=? AND rowid<?)"
    ],
    "job_rows_scan": [f"SEARCH occurrences USING INDEX {JOB} (job_id=? AND rowid<?)"],
    # finding work (issue 32): a queue's, a partition's, a key's (one row per job at most)
    "list_occurrences_by_queue": [f"SEARCH occurrences USING INDEX {QUEUE} (queue=? AND rowid<?)"],
    "queue_rows_scan": [f"SEARCH occurrences USING INDEX {QUEUE} (queue=? AND rowid<?)"],
    "list_occurrences_by_partition": [
        f"SEARCH occurrences USING INDEX {PARTITION} (partition_key=? AND rowid<?)"
    ],
    # a tag's: a backward range of jobledger_tags' primary key, each row by its seq
    "list_occurrences_by_tag": ["SEARCH o USING INTEGER PRIMARY KEY (rowid=?)"],
    "tag_rows_scan": ["SEARCH o USING INTEGER PRIMARY KEY (rowid=?)"],
    "partition_rows_scan": [
        f"SEARCH occurrences USING INDEX {PARTITION} (partition_key=? AND rowid<?)"
    ],
    "kinds_in_status": [
        f"SEARCH occurrences USING COVERING INDEX {STATUS} (status=?)",
        f"SEARCH o USING COVERING INDEX {STATUS} (status=? AND kind>?)",
    ],
    "count_status_by_kind": [
        f"SEARCH occurrences USING COVERING INDEX {STATUS} (status=?)",
        f"SEARCH o USING COVERING INDEX {STATUS} (status=? AND kind>?)",
    ],
    "count_recent_of_job": [f"SEARCH occurrences USING INDEX {JOB} (job_id=?)"],
    "occurrences_by_seqs": [BY_SEQ],
    "list_dead_letters": [f"SCAN occurrences USING INDEX {DEAD}"],
    "list_dead_letters_by_job": [f"SEARCH occurrences USING INDEX {DEAD_JOB} (job_id=?)"],
    "adjudication_candidates": [f"SCAN o USING INDEX {OUTCOME_UNKNOWN}"],
    "prunable_walk": ["SEARCH occurrences USING INTEGER PRIMARY KEY (rowid>?)"],
    "due_waiting": [f"SEARCH occurrences USING INDEX {WAITING} (available_at<?)"],
    "lease_holders": [f"SCAN occurrences USING INDEX {RUNNING}"],
}


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_operator_reads_are_index_ranges(
    populated_store: SQLiteStore, name: str, analyzed: bool
) -> None:
    if analyzed:
        populated_store._connection.raw.execute("ANALYZE")
    plan = _explain(populated_store, name, PARAMS)
    accesses = plan.occurrence_accesses()
    # "SEARCH c ..." (the capped count's inner range) is the same index range per kind.
    accesses = [a for a in accesses if not a.startswith("SEARCH c ")]
    assert accesses == PLANS[name], plan.text()
    for node in plan.nodes:
        assert not node.detail.startswith("SCAN occurrences") or "INDEX" in node.detail, plan.text()
    sorts = [node.detail for node in plan.nodes if "TEMP B-TREE" in node.detail]
    assert sorts in ([], ["USE TEMP B-TREE FOR GROUP BY"]), plan.text()


# A key's rows: through jobledger_keys_key (one entry per job that used the key), each
# occurrence by its unique id; the sort is of those few rows, never of occurrences.
KEY_PLAN = [
    f"SEARCH k USING INDEX {KEYS} (trigger_key=?)",
    "SEARCH o USING INDEX sqlite_autoindex_occurrences_1 (occurrence_id=? AND rowid<?)",
    "USE TEMP B-TREE FOR ORDER BY",
]


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", ["list_occurrences_by_key", "key_rows_scan"])
def test_a_keys_occurrences_are_found_through_the_key_index(
    populated_store: SQLiteStore, name: str, analyzed: bool
) -> None:
    if analyzed:
        populated_store._connection.raw.execute("ANALYZE")
    plan = _explain(populated_store, name, PARAMS)
    assert [node.detail for node in plan.nodes] == KEY_PLAN, plan.text()


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", ["list_occurrences_by_tag", "tag_rows_scan"])
def test_a_tags_occurrences_are_a_range_of_the_tag_table(
    populated_store: SQLiteStore, name: str, analyzed: bool
) -> None:
    if analyzed:
        populated_store._connection.raw.execute("ANALYZE")
    plan = _explain(populated_store, name, PARAMS)
    assert [node.detail for node in plan.nodes] == [
        "SEARCH t USING PRIMARY KEY (tag=? AND seq<?)",
        "SEARCH o USING INTEGER PRIMARY KEY (rowid=?)",
    ], plan.text()
