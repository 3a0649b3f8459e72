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
-- An upgrade from v3 or older inserts key rows in this same transaction, and their foreign key
-- is deferred: PostgreSQL refuses an index on a table with pending trigger events, so check
-- those rows now.
SET CONSTRAINTS ALL IMMEDIATE;
CREATE INDEX jobledger_keys_occurrence ON jobledger_keys (occurrence_id);

-- Crash recovery and adjudication per lost attempt (issue 30, items 1, 5 and 6; see the SQLite
-- rung's section for the reasons).
UPDATE occurrences SET started_at = updated_at WHERE status = 'running';

ALTER TABLE jobledger_adjudications DROP CONSTRAINT jobledger_adjudications_pkey;
ALTER TABLE jobledger_adjudications ADD PRIMARY KEY (occurrence_id, expected_fence);
ALTER TABLE jobledger_adjudications
  ADD COLUMN started_at BIGINT CHECK (started_at IS NULL OR started_at >= 0);

-- Operator reads by event type and of open adjudication cases (issue 25, the reads round; see
-- the SQLite rung's section of the same name).
CREATE INDEX jobledger_events_type ON events (event_type, event_id DESC);
CREATE INDEX jobledger_occurrences_outcome_unknown
  ON occurrences (settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter' AND last_error_json LIKE '%_OUTCOME_UNKNOWN"%';
-- Finding one customer's work (issue 32, item 7): see the SQLite rung's section of the same
-- name (seq is named at the end of each listing index, as PostgreSQL does not add it).
-- "seq > 0" always holds (an identity from 1); only the listing queries, which say it, prove
-- it: with statistics the planner would otherwise take these for a claim's or a depth count's
-- held rows of a queue or partition and filter them, instead of the held index.
CREATE INDEX jobledger_occurrences_queue ON occurrences (queue, seq) WHERE seq > 0;
CREATE INDEX jobledger_occurrences_partition ON occurrences (partition_key, seq)
  WHERE partition_key IS NOT NULL AND seq > 0;
CREATE INDEX jobledger_keys_key ON jobledger_keys (trigger_key);

-- Tags, metadata and progress (issue 32, item 11): see the SQLite rung's section of the same
-- name.
ALTER TABLE occurrences ADD COLUMN tags_json TEXT;
ALTER TABLE occurrences ADD COLUMN meta_json TEXT;
ALTER TABLE occurrences ADD COLUMN progress_json TEXT;
CREATE TABLE jobledger_tags (
  tag  TEXT NOT NULL,
  seq  BIGINT NOT NULL,
  PRIMARY KEY (tag, seq)
);
