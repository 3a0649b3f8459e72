-- jobledger schema v5 on PostgreSQL: the same logical change as the SQLite rung of the same
-- number (see its header). Unqualified names: the store runs this with search_path set to its
-- schema.

ALTER TABLE occurrences ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);

-- Claim order among equal rows (SPEC §2, §7): priority, due instant, slot, then the occurrence
-- id in byte order (COLLATE "C", as the reference and SQLite compare it), not the insertion
-- order seq gave v4. The claim lane's indexes end in it, so claims still read them in order.
DROP INDEX jobledger_occurrences_ready;
CREATE INDEX jobledger_occurrences_ready ON occurrences (
  queue, kind, priority DESC, available_at, scheduled_for, occurrence_id COLLATE "C"
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1 AND priority >= -100;
DROP INDEX jobledger_occurrences_ready_workspace;
CREATE INDEX jobledger_occurrences_ready_workspace ON occurrences (
  workspace_id, queue, kind, priority DESC, available_at, scheduled_for, occurrence_id COLLATE "C"
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    AND workspace_id IS NOT NULL;
DROP INDEX jobledger_occurrences_held;
CREATE INDEX jobledger_occurrences_held ON occurrences (
  queue, partition_key, priority DESC, available_at, scheduled_for, occurrence_id COLLATE "C"
) WHERE status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1;
