-- jobledger schema v5 on PostgreSQL: the same logical change as the SQLite rung of the same
-- number (see its header). Unqualified names: the store runs this with search_path set to its
-- schema.

ALTER TABLE occurrences ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);

-- Operator reads and prune at any size: see the SQLite rung's section of the same name (seq is
-- named at the end of each listing index, as PostgreSQL does not add it).
DROP INDEX jobledger_occurrences_status;
CREATE INDEX jobledger_occurrences_status ON occurrences (status, kind, seq);
DROP INDEX jobledger_occurrences_kind;
DROP INDEX jobledger_occurrences_job;
CREATE INDEX jobledger_occurrences_job ON occurrences (job_id, seq);
CREATE INDEX jobledger_occurrences_dead_letters
  ON occurrences (settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter';
-- "job_id IS NOT NULL" always holds (the column is NOT NULL); only a query naming a job proves
-- it, so the list of every dead letter cannot take this index and sort what it reads.
CREATE INDEX jobledger_occurrences_dead_letters_job
  ON occurrences (job_id, settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter' AND job_id IS NOT NULL;
CREATE INDEX jobledger_keys_occurrence ON jobledger_keys (occurrence_id);
