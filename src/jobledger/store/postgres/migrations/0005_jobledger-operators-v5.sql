-- jobledger schema v5 on PostgreSQL: the same logical change as the SQLite rung of the same
-- number (see its header). Unqualified names: the store runs this with search_path set to its
-- schema.

ALTER TABLE occurrences ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);

-- Crash recovery and adjudication per lost attempt (issue 30, items 1, 5 and 6; see the SQLite
-- rung's section for the reasons).
UPDATE occurrences SET started_at = updated_at WHERE status = 'running';

ALTER TABLE jobledger_adjudications DROP CONSTRAINT jobledger_adjudications_pkey;
ALTER TABLE jobledger_adjudications ADD PRIMARY KEY (occurrence_id, expected_fence);
ALTER TABLE jobledger_adjudications
  ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);
