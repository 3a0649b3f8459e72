-- jobledger schema v5 on PostgreSQL: the same logical change as the SQLite rung of the same
-- number (see its header). Unqualified names: the store runs this with search_path set to its
-- schema.

ALTER TABLE occurrences ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);

-- Flows after a fix (SPEC §14): a requeue that revived the children its dead letter had
-- cancelled; the dead letter's earlier outcome then no longer decides them (revive.py).
ALTER TABLE jobledger_requeues ADD COLUMN revived_children SMALLINT NOT NULL DEFAULT 0
  CHECK (revived_children IN (0, 1));

-- Declarations vs operators (SPEC §14): the declaration last applied from code (app.queue), so
-- an unchanged one is not applied again over what an operator set; and which limits an
-- operator set (`jobledger queue set`), which stand until an operator changes them.
ALTER TABLE jobledger_queues ADD COLUMN declared_json TEXT;
ALTER TABLE jobledger_queues ADD COLUMN operator_set_json TEXT NOT NULL DEFAULT '[]';

-- The same for jobs: the declaration last applied from code (ensure_job) and the fields an
-- operator set (`jobledger job update|enable|disable`, the dashboard), which stand against it.
ALTER TABLE jobs ADD COLUMN declared_json TEXT;
ALTER TABLE jobs ADD COLUMN operator_set_json TEXT NOT NULL DEFAULT '[]';
