-- jobledger schema v5 on PostgreSQL: the same logical change as the SQLite rung of the same
-- number (see its header). Unqualified names: the store runs this with search_path set to its
-- schema.

ALTER TABLE occurrences ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);
