"""Every page of the event log stays on its index on PostgreSQL (schema v5) and reads the same
rows behind 1,000 and 25,000 events, with and without planner statistics: the whole log, one
occurrence's events, one job's, one type's (with or without a job), backwards and forwards.
(Before the reads round a job's events of a rare type, ``job_updated``, walked the log's
primary key backwards: 0.26 s per type at a million occurrences.)"""

from __future__ import annotations

from typing import Any

import pytest

from jobledger.store.postgres.connection import WRITE_PLANNER_SETTINGS
from jobledger.store.postgres.store import QUERIES
from tests.store.postgres.test_query_plan import NOW, STATS, _nodes

SMALL, LARGE = 1_000, 25_000
LIMIT = 11
PKEY = "events_pkey"
BY_OCCURRENCE = "scheduler_events_occurrence"
BY_JOB = "scheduler_events_job"
BY_TYPE = "jobledger_events_type"
BASE: dict[str, Any] = {
    "occurrence_id": None,
    "job_id": None,
    "event_type": None,
    "before_id": None,
    "after_id": None,
    "limit": LIMIT,
}
# query: (parameters, the indexes it may read events through). Half the log is job-a's: with
# statistics that say so, walking the primary key back to a page of job-a's is as short as its
# index (the rows-read check holds either way).
PROBES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "history_page": ({}, {PKEY}),
    "history_page_by_occurrence": ({"occurrence_id": "occ-7"}, {BY_OCCURRENCE}),
    "history_page_by_job": ({"job_id": "job-a"}, {BY_JOB, PKEY}),
    "history_page_by_type": ({"event_type": "job_updated"}, {BY_TYPE}),
    "history_page_by_job_type": ({"job_id": "job-a", "event_type": "job_updated"}, {BY_TYPE}),
    "history_after": ({"after_id": 0}, {PKEY}),
    "history_after_by_occurrence": ({"occurrence_id": "occ-7", "after_id": 0}, {BY_OCCURRENCE}),
    "history_after_by_job": ({"job_id": "job-a", "after_id": 0}, {BY_JOB, PKEY}),
    "history_after_by_type": ({"event_type": "job_updated", "after_id": 0}, {BY_TYPE}),
    "history_after_by_job_type": (
        {"job_id": "job-a", "event_type": "job_updated", "after_id": 0},
        {BY_TYPE},
    ),
}


def _grow(admin, first: int, last: int) -> None:
    """Occurrence events ``first..last`` (three per occurrence, two jobs), newer than every
    job-level event; the occurrences themselves are not written (the foreign key is not
    checked: only the log's plans matter here)."""
    with admin.transaction():
        admin.execute("SET LOCAL session_replication_role = replica")
        admin.execute(
            "INSERT INTO jobledger.events (job_id, occurrence_id, event_type, occurred_at, "
            "data_json) SELECT CASE i %% 2 WHEN 0 THEN 'job-a' ELSE 'job-b' END, "
            "'occ-' || (i / 3), CASE i %% 3 WHEN 0 THEN 'occurrence_enqueued' "
            "WHEN 1 THEN 'occurrence_claimed' ELSE 'occurrence_succeeded' END, %(now)s, '{}' "
            "FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i",
            {"now": NOW, "first": first, "last": last},
        )


def _explain(admin, name: str, params: dict[str, Any]) -> dict[str, Any]:
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        for setting in WRITE_PLANNER_SETTINGS:
            admin.execute(f"SET LOCAL {setting}")
        row = admin.execute(
            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) " + QUERIES[name], params
        ).fetchone()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def _event_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [node for node in _nodes(plan) if node.get("Relation Name") == "events"]


@pytest.mark.parametrize("stats", STATS)
def test_event_pages_stay_on_their_index_and_flat(open_pg, admin, stats: str) -> None:
    store = open_pg()
    authority = {"principal": {"type": "service", "id": "t"}}
    for job in ("job-a", "job-b"):
        store.create_job(id=job, kind="k", authority=authority)
        store.update_job(job, expected_revision=1, patch={"enabled": False})
    read: dict[str, list[int]] = {name: [] for name in PROBES}
    first = 1
    for size in (SMALL, LARGE):
        _grow(admin, first, size)
        first = size + 1
        if stats == "analyzed":
            admin.execute("ANALYZE jobledger.events")
        for name, (params, indexes) in PROBES.items():
            plan = _explain(admin, name, {**BASE, **params})
            scans = _event_scans(plan)
            assert scans, plan
            for scan in scans:
                assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), (name, plan)
                assert scan["Index Name"] in indexes, (name, size, stats, plan)
            assert not any(node["Node Type"] == "Sort" for node in _nodes(plan)), (name, plan)
            read[name].append(
                sum(
                    (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
                    * node["Actual Loops"]
                    for node in scans
                )
            )
    for name, (small, large) in read.items():
        assert large <= max(small, LIMIT), (
            f"{name}: {small} events read at {SMALL}, {large} at {LARGE}"
        )


def test_every_events_page_query_is_probed() -> None:
    pages = {name for name in QUERIES if name.startswith(("history_page", "history_after"))}
    assert pages == set(PROBES)
