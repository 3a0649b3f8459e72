-- jobledger schema v5 (SQLite): what deploys, crashes and operators need. docs/schema.md lists
-- every column and index with the reason it exists.
--
-- occurrences.started_at  when the handler of the current attempt began (NULL while the attempt
--                         is only claimed, e.g. buffered ahead of a free slot): crash recovery
--                         gives a never-started attempt back instead of spending it, and an
--                         outcome-unknown case says when its handler began.

ALTER TABLE occurrences ADD COLUMN started_at INTEGER CHECK (started_at IS NULL OR started_at >= 0);

-- Claim order among equal rows (SPEC §2, §7): priority, due instant, slot, then the occurrence
-- id, as the reference orders its claims (not the insertion order the rowid gave v4). The claim
-- lane's indexes end in occurrence_id, so claims still read them in order with no sort.
DROP INDEX jobledger_occurrences_ready;
CREATE INDEX jobledger_occurrences_ready ON occurrences(
  queue, kind, priority DESC, available_at, scheduled_for, occurrence_id
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1;
DROP INDEX jobledger_occurrences_ready_workspace;
CREATE INDEX jobledger_occurrences_ready_workspace ON occurrences(
  workspace_id, queue, kind, priority DESC, available_at, scheduled_for, occurrence_id
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    AND workspace_id IS NOT NULL;
DROP INDEX jobledger_occurrences_held;
CREATE INDEX jobledger_occurrences_held ON occurrences(
  queue, partition_key, priority DESC, available_at, scheduled_for, occurrence_id
) WHERE status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1;
