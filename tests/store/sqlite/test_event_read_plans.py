"""Every page of the event log is a range of an index on SQLite (schema v5): the whole log, one
occurrence's events, one job's, one type's (with or without a job), backwards (``before_id``)
and forwards (``after_id``). With and without ``ANALYZE``: no scan of the log filtered by what
a page asks for, no temporary B-tree sorting events. (Before the reads round, a type, an
occurrence or a ``before_id`` walked the log from its newest event: the oldest occurrence's
page of a million-occurrence store read 1.6 M events, a job page's ``job_updated`` a job's
whole history.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobledger.store.sqlite.store import QUERIES, SQLiteStore
from jobledger.testing import FakeClock, temp_store
from tests.store.sqlite.test_query_plan import NOW, Plan

PK = "SEARCH events USING INTEGER PRIMARY KEY"
BY_OCCURRENCE = "SEARCH events USING INDEX scheduler_events_occurrence"
BY_JOB = "SEARCH events USING INDEX scheduler_events_job"
BY_TYPE = "SEARCH events USING INDEX jobledger_events_type"
PARAMS: dict[str, Any] = {
    "occurrence_id": "occ-7",
    "job_id": "job-a",
    "event_type": "job_updated",
    "before_id": 2_000,
    "after_id": 10,
    "limit": 51,
}
PLANS: dict[str, str] = {
    "history_page": f"{PK} (rowid>? AND rowid<?)",
    "history_page_by_occurrence": (
        f"{BY_OCCURRENCE} (occurrence_id=? AND event_id>? AND event_id<?)"
    ),
    "history_page_by_job": f"{BY_JOB} (job_id=? AND event_id>? AND event_id<?)",
    "history_page_by_type": f"{BY_TYPE} (event_type=? AND event_id>? AND event_id<?)",
    "history_page_by_job_type": f"{BY_TYPE} (event_type=? AND event_id>? AND event_id<?)",
    "history_after": f"{PK} (rowid>?)",
    "history_after_by_occurrence": f"{BY_OCCURRENCE} (occurrence_id=? AND event_id>?)",
    "history_after_by_job": f"{BY_JOB} (job_id=? AND event_id>?)",
    "history_after_by_type": f"{BY_TYPE} (event_type=? AND event_id>?)",
    "history_after_by_job_type": f"{BY_TYPE} (event_type=? AND event_id>?)",
}


@pytest.fixture
def logged_store() -> Iterator[SQLiteStore]:
    """Two jobs with their job_created events and 3,000 occurrence events between them."""
    with temp_store(FakeClock(NOW)) as store:
        authority = {"principal": {"type": "service", "id": "t"}}
        for job in ("job-a", "job-b"):
            store.create_job(id=job, kind="k", authority=authority)
        raw = store._connection.raw
        # Three events for each of 1,000 occurrences (not written: the plans need only the
        # events' statistics, so the foreign key is off while they are inserted).
        raw.execute("PRAGMA foreign_keys = OFF")
        raw.execute("BEGIN IMMEDIATE")
        raw.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
            "INSERT INTO events (job_id, occurrence_id, event_type, occurred_at, data_json) "
            "SELECT CASE i % 2 WHEN 0 THEN 'job-a' ELSE 'job-b' END, 'occ-' || (i / 3), "
            "CASE i % 3 WHEN 0 THEN 'occurrence_enqueued' WHEN 1 THEN 'occurrence_claimed' "
            "ELSE 'occurrence_succeeded' END, :now, '{}' FROM n",
            {"now": NOW},
        )
        raw.execute("COMMIT")
        raw.execute("PRAGMA foreign_keys = ON")
        yield store


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-stats", "analyzed"])
@pytest.mark.parametrize("name", sorted(PLANS))
def test_event_pages_are_index_ranges(logged_store: SQLiteStore, name: str, analyzed: bool) -> None:
    raw = logged_store._connection.raw
    if analyzed:
        raw.execute("ANALYZE")
    sql = QUERIES[name]
    wanted = {key: value for key, value in PARAMS.items() if f":{key}" in sql}
    plan = Plan(raw.execute("EXPLAIN QUERY PLAN " + sql, wanted).fetchall())
    accesses = [node.detail for node in plan.nodes if node.detail.startswith(("SCAN", "SEARCH"))]
    assert accesses == [PLANS[name]], plan.text()
    assert not any("TEMP B-TREE" in node.detail for node in plan.nodes), plan.text()


def test_every_events_page_query_is_pinned() -> None:
    """A page query added later is held to an index too."""
    pages = {name for name in QUERIES if name.startswith(("history_page", "history_after"))}
    assert pages == set(PLANS)
