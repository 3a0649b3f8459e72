-- jobledger schema v5 (SQLite): what deploys, crashes and operators need. docs/schema.md lists
-- every column and index with the reason it exists.
--
-- occurrences.started_at  when the handler of the current attempt began (NULL while the attempt
--                         is only claimed, e.g. buffered ahead of a free slot): crash recovery
--                         gives a never-started attempt back instead of spending it, and an
--                         outcome-unknown case says when its handler began.

ALTER TABLE occurrences ADD COLUMN started_at INTEGER CHECK (started_at IS NULL OR started_at >= 0);

-- Flows after a fix (SPEC §14): a requeue that revived the children its dead letter had
-- cancelled; the dead letter's earlier outcome then no longer decides them (revive.py).
ALTER TABLE jobledger_requeues ADD COLUMN revived_children INTEGER NOT NULL DEFAULT 0
  CHECK (revived_children IN (0, 1));

-- Declarations vs operators (SPEC §14): the declaration last applied from code (app.queue), so
-- an unchanged one is not applied again over what an operator set; and which limits an
-- operator set (`jobledger queue set`), which stand until an operator changes them.
ALTER TABLE jobledger_queues ADD COLUMN declared_json TEXT
  CHECK (declared_json IS NULL OR json_valid(declared_json));
ALTER TABLE jobledger_queues ADD COLUMN operator_set_json TEXT NOT NULL DEFAULT '[]'
  CHECK (json_valid(operator_set_json));

-- The same for jobs: the declaration last applied from code (ensure_job) and the fields an
-- operator set (`jobledger job update|enable|disable`, the dashboard), which stand against it.
ALTER TABLE jobs ADD COLUMN declared_json TEXT
  CHECK (declared_json IS NULL OR json_valid(declared_json));
ALTER TABLE jobs ADD COLUMN operator_set_json TEXT NOT NULL DEFAULT '[]'
  CHECK (json_valid(operator_set_json));

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
-- Operator reads and prune at any size (docs/schema.md, "Version 5: operator reads"). Listing
-- pages go newest first by seq (the rowid: insertion order), so each listing index ends in the
-- rowid and a page is one index range, whatever the table holds; counts are bounded walks of
-- the status index (status, kind). The status index replaces v4's (status, created_at): it
-- changes on the same writes as before, and serves a kind's pages too (one range per status),
-- so v4's kind index is dropped: an enqueue writes one index fewer. The job index changes only
-- when a row is inserted or deleted. The two dead-letter indexes hold dead letters only, most recently
-- settled first: a row enters them when it dead-letters and leaves when it is requeued or
-- pruned. jobledger_keys_occurrence lets a prune (and a job removal) find the key of an
-- occurrence it deletes without reading every key: one entry per key, written with the key.
DROP INDEX jobledger_occurrences_status;
CREATE INDEX jobledger_occurrences_status ON occurrences(status, kind);
DROP INDEX jobledger_occurrences_kind;
DROP INDEX jobledger_occurrences_job;
CREATE INDEX jobledger_occurrences_job ON occurrences(job_id);
CREATE INDEX jobledger_occurrences_dead_letters ON occurrences(settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter';
CREATE INDEX jobledger_occurrences_dead_letters_job
  ON occurrences(job_id, settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter';
CREATE INDEX jobledger_keys_occurrence ON jobledger_keys(occurrence_id);

-- Crash recovery and adjudication per lost attempt (issue 30, items 1, 5 and 6).
--
-- A lease that was running when this rung is applied may have started its handler under v4 (a
-- v4 worker marked nothing): count it as started, so recovery never re-runs it as unstarted.
UPDATE occurrences SET started_at = updated_at WHERE status = 'running';

-- jobledger_adjudications is rebuilt (SQLite cannot change a primary key in place): one row per
-- decided case, a case being one lost attempt (occurrence_id, expected_fence) — a re-run granted
-- by not_applied that is lost again is a new case, decidable on its own. started_at: when the
-- lost attempt's handler began (NULL: unknown, a case of a v4 store). Nothing points at this
-- table; its rows are kept.
CREATE TABLE jobledger_adjudications_v5 (
  occurrence_id       TEXT NOT NULL REFERENCES occurrences(occurrence_id) ON DELETE RESTRICT,
  job_id              TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  request_id          TEXT NOT NULL UNIQUE,
  decision            TEXT NOT NULL CHECK (decision IN ('applied', 'not_applied')),
  evidence_digest     TEXT NOT NULL,
  expected_attempt    INTEGER NOT NULL CHECK (expected_attempt >= 1),
  expected_fence      INTEGER NOT NULL CHECK (expected_fence >= 1),
  reason              TEXT NOT NULL,
  actor               TEXT NOT NULL,
  status              TEXT NOT NULL CHECK (status IN ('pending', 'applied')),
  created_at          INTEGER NOT NULL CHECK (created_at >= 0),
  applied_at          INTEGER,
  retry_outcome_json  TEXT CHECK (retry_outcome_json IS NULL OR json_valid(retry_outcome_json)),
  retry_settled_at    INTEGER,
  started_at          INTEGER CHECK (started_at IS NULL OR started_at >= 0),
  PRIMARY KEY (occurrence_id, expected_fence),
  CHECK ((status = 'pending') = (applied_at IS NULL))
);

INSERT INTO jobledger_adjudications_v5
  (occurrence_id, job_id, request_id, decision, evidence_digest, expected_attempt,
   expected_fence, reason, actor, status, created_at, applied_at, retry_outcome_json,
   retry_settled_at, started_at)
SELECT occurrence_id, job_id, request_id, decision, evidence_digest, expected_attempt,
       expected_fence, reason, actor, status, created_at, applied_at, retry_outcome_json,
       retry_settled_at, NULL
FROM jobledger_adjudications;

DROP TABLE jobledger_adjudications;

ALTER TABLE jobledger_adjudications_v5 RENAME TO jobledger_adjudications;

-- Operator reads by event type and of open adjudication cases (issue 25, the reads round).
--
-- jobledger_events_type: the log by type, newest first (`jobledger history --type`, a job page's
-- job_created / job_updated / schedule_slots_skipped). Without it a page of a rare type walked
-- the whole log (or a job's whole history) to find none. One more index entry per event: an
-- enqueue writes one event, so one more B-tree insert per occurrence (docs/benchmarks.md, the
-- reads round, measured that cost).
-- jobledger_occurrences_outcome_unknown: the outcome-unknown dead letters, most recently
-- settled first — what `adjudication_candidates` walks for the open cases (`explain`,
-- `/adjudication`, `/metrics`), instead of every dead letter. A row enters it when it
-- dead-letters with an outcome-unknown error and leaves when it is decided (settled or run
-- again), requeued or pruned; the LIKE is the query's own term, so the planner proves it.
CREATE INDEX jobledger_events_type ON events(event_type, event_id DESC);
CREATE INDEX jobledger_occurrences_outcome_unknown ON occurrences(settled_at DESC, occurrence_id)
  WHERE status = 'dead_letter' AND last_error_json LIKE '%_OUTCOME_UNKNOWN"%';
-- Finding one customer's work (issue 32, item 7; docs/schema.md "Version 5: finding work").
-- Operators list occurrences by queue, by partition and by idempotency key, newest first, each
-- page one backward range of an index ending in the rowid (seq). The queue index gets an entry
-- per occurrence at insert (a row's queue never changes); the partition index holds only rows
-- enqueued with a partition. jobledger_keys_key finds a key's occurrences across jobs (the
-- primary key leads with job_id): one entry per idempotency key, written with the key.
CREATE INDEX jobledger_occurrences_queue ON occurrences(queue);
CREATE INDEX jobledger_occurrences_partition ON occurrences(partition_key)
  WHERE partition_key IS NOT NULL;
CREATE INDEX jobledger_keys_key ON jobledger_keys(trigger_key);

-- Tags, metadata and progress (issue 32, item 11; docs/schema.md "Version 5: finding work").
-- occurrences.tags_json      the tags given at enqueue (a JSON list of distinct strings), NULL
--                            for none; jobledger_tags holds one row per (tag, occurrence seq),
--                            so a tag's occurrences are one backward range of its primary key.
--                            No foreign key (it would make every deleted occurrence search
--                            the table): prune and job removal delete a row's tags with it.
-- occurrences.meta_json      the metadata object given at enqueue, NULL for none.
-- occurrences.progress_json  the last progress its handler reported (ctx.progress), fenced as a
--                            renewal: only the current lease holder writes it.
ALTER TABLE occurrences ADD COLUMN tags_json TEXT
  CHECK (tags_json IS NULL OR json_valid(tags_json));
ALTER TABLE occurrences ADD COLUMN meta_json TEXT
  CHECK (meta_json IS NULL OR json_valid(meta_json));
ALTER TABLE occurrences ADD COLUMN progress_json TEXT
  CHECK (progress_json IS NULL OR json_valid(progress_json));
CREATE TABLE jobledger_tags (
  tag  TEXT NOT NULL,
  seq  INTEGER NOT NULL,
  PRIMARY KEY (tag, seq)
) WITHOUT ROWID;
