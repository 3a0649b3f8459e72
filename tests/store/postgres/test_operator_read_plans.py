"""Every operator read of occurrences stays on its index on PostgreSQL (schema v5) and reads the
same rows behind 1 and 25,000 rows of history or backlog, with and without planner statistics:
listing pages, counts (each stopping at its cap), dead letters, what is due, prune's walk. No
sequential scan of occurrences, no sort of occurrences rows below a LIMIT."""

from __future__ import annotations

from typing import Any

import pytest

from jobledger.store.postgres.connection import WRITE_PLANNER_SETTINGS
from jobledger.store.postgres.tx import QUERIES
from tests.store.postgres.test_query_plan import (
    LARGE,
    NOW,
    RUNNING,
    SMALL,
    STATS,
    WAITING,
    _assert_index_plan,
    _grow,
    _never_analyzed,
    _rows_read,
    wanted,
)

__all__ = ["wanted"]

STATUS = "jobledger_occurrences_status"
JOB = "jobledger_occurrences_job"
DEAD = "jobledger_occurrences_dead_letters"
DEAD_JOB = "jobledger_occurrences_dead_letters_job"
OUTCOME_UNKNOWN = "jobledger_occurrences_outcome_unknown"
QUEUE = "jobledger_occurrences_queue"
PARTITION = "jobledger_occurrences_partition"
KEYS = "jobledger_keys_key"
PKEY = {"occurrences_pkey", "occurrences_seq_key"}
LIMIT, CAP = 11, 50
BASE: dict[str, Any] = {
    "now": NOW,
    "before_seq": 2**62,
    "limit": LIMIT,
    "cap": CAP,
    "after_kind": "",
    "after_seq": 0,
}
# query: (parameters, the indexes it may read occurrences through, rows it may read)
PROBES: dict[str, tuple[dict[str, Any], set[str], int]] = {
    "list_occurrences_all": ({}, {"occurrences_seq_key"}, LIMIT),
    "list_occurrences_by_status_kind": ({"status": "queued", "kind": "mail"}, {STATUS}, LIMIT),
    "list_occurrences_by_job": ({"job_id": "job-mail"}, {JOB}, LIMIT),
    "seqs_by_status_kind": ({"status": "succeeded", "kind": "mail"}, {STATUS}, LIMIT),
    "job_rows_scan": ({"job_id": "job-mail"}, {JOB}, LIMIT),
    # finding work (issue 32): a queue's, a partition's, an idempotency key's
    "list_occurrences_by_queue": ({"queue": "default"}, {QUEUE}, LIMIT),
    "queue_rows_scan": ({"queue": "default"}, {QUEUE}, LIMIT),
    "list_occurrences_by_partition": ({"partition": "p"}, {PARTITION}, LIMIT),
    "partition_rows_scan": ({"partition": "p"}, {PARTITION}, LIMIT),
    # a key's rows (one per job at most) through the key index, each by its id, then sorted
    "list_occurrences_by_key": ({"trigger_key": "key:order-21"}, {KEYS, "occurrences_pkey"}, 1),
    "key_rows_scan": ({"trigger_key": "key:order-21"}, {KEYS, "occurrences_pkey"}, 1),
    # a tag's: a backward range of jobledger_tags' primary key, each row by its seq
    "list_occurrences_by_tag": ({"tag": "customer:21"}, {"occurrences_seq_key"}, LIMIT),
    "tag_rows_scan": ({"tag": "customer:21"}, {"occurrences_seq_key"}, LIMIT),
    "kinds_in_status": ({"status": "queued"}, {STATUS}, 10),
    "count_status_by_kind": ({"status": "queued"}, {STATUS}, 10 + 4 * CAP),
    "count_recent_of_job": ({"job_id": "job-mail"}, {JOB}, CAP),
    "list_dead_letters": ({}, {DEAD}, LIMIT),
    "list_dead_letters_by_job": ({"job_id": "job-mail"}, {DEAD_JOB}, LIMIT),
    # the outcome-unknown dead letters' own index: the other dead letters are never read
    "adjudication_candidates": ({}, {OUTCOME_UNKNOWN}, LIMIT),
    "prunable_walk": ({}, {"occurrences_seq_key"}, LIMIT),
    "due_waiting": ({}, {WAITING}, LIMIT),
    "lease_holders": ({}, {RUNNING, "jobledger_occurrences_leases"}, 10),
}


def _explain(admin, name: str, params: dict[str, Any], *, analyze: bool) -> dict[str, Any]:
    """As the store's read transactions plan: with WRITE_PLANNER_SETTINGS (reads take them)."""
    options = "ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON" if analyze else "FORMAT JSON"
    with admin.transaction(force_rollback=True):
        admin.execute("SET LOCAL search_path TO jobledger")
        for setting in WRITE_PLANNER_SETTINGS:
            admin.execute(f"SET LOCAL {setting}")
        row = admin.execute(f"EXPLAIN ({options}) " + QUERIES[name], params).fetchone()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


SETUPS = ["settled-history", "lower-priority", "another-kind"]


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("setup", SETUPS)
def test_operator_reads_stay_on_their_index_and_flat(admin, wanted, setup, stats):
    from tests.store.postgres.test_query_plan import IN_FRONT

    job_id, columns = IN_FRONT[setup]
    read: dict[str, list[int]] = {name: [] for name in PROBES}
    # Some dead letters (of another job): what the dead-letter pages read.
    _grow(admin, "job-bulk", 1, 200, status="dead_letter")
    first = 1
    for size in (SMALL, LARGE):
        _grow(admin, job_id, first, size, **columns)
        first = size + 1
        if stats == "analyzed":
            admin.execute("ANALYZE jobledger.occurrences")
        else:
            assert _never_analyzed(admin)
        for name, (params, indexes, most) in PROBES.items():
            arguments = {**BASE, **params}
            planned = _explain(admin, name, arguments, analyze=False)
            executed = _explain(admin, name, arguments, analyze=True)
            for plan in (planned, executed):
                if name in ("due_waiting", "lease_holders", "adjudication_candidates") and not (
                    _scans_any(plan)
                ):
                    continue
                # grouped by owner: a sort of the running rows only; the candidates: of dead
                # letters; a key's: of its rows
                if name in (
                    "lease_holders",
                    "adjudication_candidates",
                    "list_occurrences_by_key",
                    "key_rows_scan",
                ):
                    assert {n["Index Name"] for n in _scans_of(plan)} <= indexes, plan
                    continue
                try:
                    _assert_index_plan(plan, indexes | PKEY, ordered=False)
                except AssertionError as exc:
                    raise AssertionError(f"{name} ({setup}, {stats}, {size}): {exc}") from exc
            read[name].append(_rows_read(executed))
    for name, (small, large) in read.items():
        assert large <= max(small, PROBES[name][2]), (
            f"{name}: {small} rows behind {SMALL}, {large} behind {LARGE}"
        )


def _scans_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.store.postgres.test_query_plan import _scans

    return _scans(plan)


def _scans_any(plan: dict[str, Any]) -> bool:
    from tests.store.postgres.test_query_plan import _reads_occurrences

    return _reads_occurrences(plan)
