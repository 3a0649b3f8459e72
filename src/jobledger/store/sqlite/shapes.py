"""SQLite catalog shapes per schema version: each table's columns and the indexes it must have.

:mod:`.schema` verifies a file against these (with the ``sqlite_master`` fingerprint) before it
trusts the file or upgrades it.
"""

from __future__ import annotations

__all__ = ["COLUMNS", "INDEXES", "Columns"]

# (name, declared type, notnull, pk) per column, in order, per table.
Columns = tuple[tuple[str, str, int, int], ...]

_V1_COLUMNS: dict[str, Columns] = {
    "migrations": (
        ("version", "INTEGER", 1, 1),
        ("name", "TEXT", 1, 0),
        ("checksum", "TEXT", 1, 0),
        ("applied_at", "INTEGER", 1, 0),
    ),
    "jobs": (
        ("job_id", "TEXT", 1, 1),
        ("kind", "TEXT", 1, 0),
        ("trigger_json", "TEXT", 1, 0),
        ("payload_json", "TEXT", 1, 0),
        ("authority_json", "TEXT", 1, 0),
        ("enabled", "INTEGER", 1, 0),
        ("revision", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
    ),
    "occurrences": (
        ("occurrence_id", "TEXT", 1, 1),
        ("job_id", "TEXT", 1, 0),
        ("job_revision", "INTEGER", 1, 0),
        ("idempotency_key", "TEXT", 1, 0),
        ("trigger_key", "TEXT", 1, 0),
        ("scheduled_for", "INTEGER", 1, 0),
        ("available_at", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("fence", "INTEGER", 1, 0),
        ("lease_owner", "TEXT", 0, 0),
        ("lease_expires_at", "INTEGER", 0, 0),
        ("authority_json", "TEXT", 1, 0),
        ("payload_json", "TEXT", 1, 0),
        ("last_error_json", "TEXT", 0, 0),
        ("result_json", "TEXT", 0, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
        ("settled_at", "INTEGER", 0, 0),
    ),
    "events": (
        ("event_id", "INTEGER", 0, 1),
        ("job_id", "TEXT", 1, 0),
        ("occurrence_id", "TEXT", 0, 0),
        ("event_type", "TEXT", 1, 0),
        ("occurred_at", "INTEGER", 1, 0),
        ("owner_id", "TEXT", 0, 0),
        ("fence", "INTEGER", 0, 0),
        ("data_json", "TEXT", 1, 0),
    ),
}
_V2_COLUMNS: dict[str, Columns] = {
    **_V1_COLUMNS,
    "jobledger_requeues": (
        ("requeue_id", "INTEGER", 0, 1),
        ("occurrence_id", "TEXT", 1, 0),
        ("job_id", "TEXT", 1, 0),
        ("expected_fence", "INTEGER", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("previous_max_attempts", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("previous_error_json", "TEXT", 0, 0),
        ("reason", "TEXT", 1, 0),
        ("actor", "TEXT", 1, 0),
        ("requested_at", "INTEGER", 1, 0),
    ),
}
_V3_COLUMNS: dict[str, Columns] = {
    **_V2_COLUMNS,
    "occurrences": (
        *_V1_COLUMNS["occurrences"],
        ("kind", "TEXT", 1, 0),
        ("workspace_id", "TEXT", 0, 0),
        ("runnable", "INTEGER", 1, 0),
    ),
    "jobledger_schedules": (
        ("job_id", "TEXT", 1, 1),
        ("job_revision", "INTEGER", 1, 0),
        ("planned_through", "INTEGER", 1, 0),
        ("next_due_at", "INTEGER", 0, 0),
        ("last_slot", "INTEGER", 0, 0),
        ("skips_json", "TEXT", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
    ),
    "jobledger_workers": (
        ("worker_id", "TEXT", 1, 1),
        ("hostname", "TEXT", 1, 0),
        ("pid", "INTEGER", 1, 0),
        ("started_at", "INTEGER", 1, 0),
        ("last_seen_at", "INTEGER", 1, 0),
        ("stopped_at", "INTEGER", 0, 0),
        ("info_json", "TEXT", 1, 0),
    ),
    "jobledger_audit": (
        ("audit_id", "INTEGER", 0, 1),
        ("occurred_at", "INTEGER", 1, 0),
        ("action", "TEXT", 1, 0),
        ("actor", "TEXT", 1, 0),
        ("subject", "TEXT", 0, 0),
        ("data_json", "TEXT", 1, 0),
    ),
    "jobledger_throughput": (
        ("minute", "INTEGER", 1, 1),
        ("kind", "TEXT", 1, 2),
        ("owner_id", "TEXT", 1, 3),
        ("succeeded", "INTEGER", 1, 0),
        ("retried", "INTEGER", 1, 0),
        ("dead_lettered", "INTEGER", 1, 0),
    ),
}
_V4_COLUMNS: dict[str, Columns] = {
    **_V3_COLUMNS,
    "jobs": (
        *_V1_COLUMNS["jobs"],
        ("queue", "TEXT", 1, 0),
        ("priority", "INTEGER", 1, 0),
        ("on_lost_lease", "TEXT", 1, 0),
        ("run_revision", "INTEGER", 1, 0),
        ("authority_id", "INTEGER", 0, 0),
    ),
    "occurrences": (
        ("seq", "INTEGER", 0, 1),
        ("occurrence_id", "TEXT", 1, 0),
        ("job_id", "TEXT", 1, 0),
        ("job_revision", "INTEGER", 1, 0),
        ("trigger_key", "TEXT", 1, 0),
        ("scheduled_for", "INTEGER", 1, 0),
        ("available_at", "INTEGER", 1, 0),
        ("status", "TEXT", 1, 0),
        ("attempt", "INTEGER", 1, 0),
        ("max_attempts", "INTEGER", 1, 0),
        ("fence", "INTEGER", 1, 0),
        ("lease_owner", "TEXT", 0, 0),
        ("lease_expires_at", "INTEGER", 0, 0),
        ("authority_id", "INTEGER", 1, 0),
        ("payload_json", "TEXT", 1, 0),
        ("last_error_json", "TEXT", 0, 0),
        ("result_json", "TEXT", 0, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
        ("settled_at", "INTEGER", 0, 0),
        ("kind", "TEXT", 1, 0),
        ("workspace_id", "TEXT", 0, 0),
        ("runnable", "INTEGER", 1, 0),
        ("queue", "TEXT", 1, 0),
        ("priority", "INTEGER", 1, 0),
        ("partition_key", "TEXT", 0, 0),
        ("gate", "INTEGER", 1, 0),
        ("adjudicate", "INTEGER", 1, 0),
        ("snoozes", "INTEGER", 1, 0),
        ("pending_parents", "INTEGER", 1, 0),
        ("on_parent_failure", "TEXT", 0, 0),
        ("result_read_at", "INTEGER", 0, 0),
        ("trace_json", "TEXT", 0, 0),
    ),
    "jobledger_authorities": (
        ("authority_id", "INTEGER", 0, 1),
        ("authority_json", "TEXT", 1, 0),
    ),
    "jobledger_keys": (
        ("job_id", "TEXT", 1, 1),
        ("trigger_key", "TEXT", 1, 2),
        ("occurrence_id", "TEXT", 1, 0),
    ),
    "jobledger_queues": (
        ("name", "TEXT", 1, 1),
        ("concurrency", "INTEGER", 0, 0),
        ("worker_concurrency", "INTEGER", 0, 0),
        ("partition_concurrency", "INTEGER", 0, 0),
        ("rate_limit", "INTEGER", 0, 0),
        ("rate_per_ms", "INTEGER", 0, 0),
        ("partition_rate_limit", "INTEGER", 0, 0),
        ("partition_rate_per_ms", "INTEGER", 0, 0),
        ("paused", "INTEGER", 1, 0),
        ("paused_reason", "TEXT", 0, 0),
        ("paused_at", "INTEGER", 0, 0),
        ("paused_by", "TEXT", 0, 0),
        ("revision", "INTEGER", 1, 0),
        ("created_at", "INTEGER", 1, 0),
        ("updated_at", "INTEGER", 1, 0),
    ),
    "jobledger_rate_windows": (
        ("queue", "TEXT", 1, 1),
        ("partition_key", "TEXT", 1, 2),
        ("window_start", "INTEGER", 1, 0),
        ("claims", "INTEGER", 1, 0),
        ("wake_at", "INTEGER", 0, 0),
    ),
    "jobledger_dependencies": (
        ("parent_seq", "INTEGER", 1, 1),
        ("child_seq", "INTEGER", 1, 2),
    ),
    "jobledger_adjudications": (
        ("occurrence_id", "TEXT", 1, 1),
        ("job_id", "TEXT", 1, 0),
        ("request_id", "TEXT", 1, 0),
        ("decision", "TEXT", 1, 0),
        ("evidence_digest", "TEXT", 1, 0),
        ("expected_attempt", "INTEGER", 1, 0),
        ("expected_fence", "INTEGER", 1, 0),
        ("reason", "TEXT", 1, 0),
        ("actor", "TEXT", 1, 0),
        ("status", "TEXT", 1, 0),
        ("created_at", "INTEGER", 1, 0),
        ("applied_at", "INTEGER", 0, 0),
        ("retry_outcome_json", "TEXT", 0, 0),
        ("retry_settled_at", "INTEGER", 0, 0),
    ),
    "jobledger_store": (
        ("store_id", "TEXT", 1, 1),
        ("created_at", "INTEGER", 1, 0),
    ),
    "jobledger_liveness": (
        ("owner_id", "TEXT", 1, 1),
        ("generation", "INTEGER", 1, 0),
        ("taken_at", "INTEGER", 1, 0),
    ),
}
# v5 (SPEC §14, issue-driven additions; see the migration's header for each column's reason).
_V5_COLUMNS: dict[str, Columns] = {
    **_V4_COLUMNS,
    "occurrences": (
        *_V4_COLUMNS["occurrences"],
        ("started_at", "INTEGER", 0, 0),
        # Tags, metadata and progress (issue 32): see the migration's section.
        ("tags_json", "TEXT", 0, 0),
        ("meta_json", "TEXT", 0, 0),
        ("progress_json", "TEXT", 0, 0),
    ),
    "jobledger_tags": (
        ("tag", "TEXT", 1, 1),
        ("seq", "INTEGER", 1, 2),
    ),
    # Flows after a fix (revive_children): see the migration's section.
    "jobledger_requeues": (
        *_V4_COLUMNS["jobledger_requeues"],
        ("revived_children", "INTEGER", 1, 0),
    ),
    # Declarations vs operators: see the migration's section.
    "jobledger_queues": (
        *_V4_COLUMNS["jobledger_queues"],
        ("declared_json", "TEXT", 0, 0),
        ("operator_set_json", "TEXT", 1, 0),
    ),
    "jobs": (
        *_V4_COLUMNS["jobs"],
        ("declared_json", "TEXT", 0, 0),
        ("operator_set_json", "TEXT", 1, 0),
    ),
    # Crash recovery and adjudication per lost attempt (issue 30): one row per decided case
    # (occurrence, fence of the lost attempt), and when that attempt's handler began.
    "jobledger_adjudications": (
        *(
            (name, kind, notnull, 2 if name == "expected_fence" else pk)
            for name, kind, notnull, pk in _V4_COLUMNS["jobledger_adjudications"]
        ),
        ("started_at", "INTEGER", 0, 0),
    ),
}
COLUMNS: dict[int, dict[str, Columns]] = {
    1: _V1_COLUMNS,
    2: _V2_COLUMNS,
    3: _V3_COLUMNS,
    4: _V4_COLUMNS,
    5: _V5_COLUMNS,
}

_V1_INDEXES = (
    "scheduler_events_job",
    "scheduler_events_occurrence",
    "scheduler_occurrences_claim",
    "scheduler_occurrences_idempotency",
    "scheduler_occurrences_job",
)
_V2_INDEXES = ("jobledger_requeues_occurrence", *_V1_INDEXES)
_V3_INDEXES = (
    "jobledger_occurrences_final_leases",
    "jobledger_occurrences_kind",
    "jobledger_occurrences_ready",
    "jobledger_occurrences_ready_workspace",
    "jobledger_occurrences_status",
    "jobledger_requeues_occurrence",
    "jobledger_schedules_due",
    "scheduler_events_job",
    "scheduler_events_occurrence",
    "scheduler_occurrences_idempotency",
    "scheduler_occurrences_job",
)
_V4_INDEXES = (
    "jobledger_dependencies_child",
    "jobledger_occurrences_held",
    "jobledger_occurrences_job",
    "jobledger_occurrences_kind",
    "jobledger_occurrences_lanes",
    "jobledger_occurrences_leases",
    "jobledger_occurrences_ready",
    "jobledger_occurrences_ready_workspace",
    "jobledger_occurrences_running",
    "jobledger_occurrences_status",
    "jobledger_occurrences_waiting",
    "jobledger_rate_windows_wake",
    "jobledger_requeues_occurrence",
    "jobledger_schedules_due",
    "scheduler_events_job",
    "scheduler_events_occurrence",
)
_V5_INDEXES = tuple(
    sorted(
        (
            *(name for name in _V4_INDEXES if name != "jobledger_occurrences_kind"),
            "jobledger_events_type",
            "jobledger_keys_occurrence",
            "jobledger_occurrences_dead_letters",
            "jobledger_occurrences_dead_letters_job",
            "jobledger_occurrences_outcome_unknown",
            # finding work (issue 32): by queue, partition and idempotency key
            "jobledger_keys_key",
            "jobledger_occurrences_partition",
            "jobledger_occurrences_queue",
        )
    )
)
INDEXES: dict[int, tuple[str, ...]] = {
    1: _V1_INDEXES,
    2: _V2_INDEXES,
    3: _V3_INDEXES,
    4: _V4_INDEXES,
    5: _V5_INDEXES,
}
