-- jobledger schema v3 (SQLite): everyday operations, schedules and operator records.
--
-- occurrences is rebuilt, because SQLite cannot change a CHECK constraint in place: the status
-- list gains 'cancelled' (terminal), and three columns copied from the job make every claim a
-- walk of an index that holds only claimable rows of the kinds asked for:
--   kind          the job's kind (kept equal to jobs.kind while the occurrence is live);
--   workspace_id  the job authority's workspaceId (likewise);
--   runnable      1 while the job is enabled, 0 while it is disabled (likewise).
-- The store's update_job keeps them in step in the same transaction that changes the job.
-- The migration runs with foreign keys off (the rebuild drops the table that events and
-- requeues point at) and checks every foreign key before it commits.

CREATE TABLE jobledger_occurrences_v3 (
  occurrence_id    TEXT PRIMARY KEY NOT NULL,
  job_id           TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  job_revision     INTEGER NOT NULL CHECK (job_revision >= 1),
  idempotency_key  TEXT NOT NULL,
  trigger_key      TEXT NOT NULL,
  scheduled_for    INTEGER NOT NULL CHECK (scheduled_for >= 0),
  available_at     INTEGER NOT NULL CHECK (available_at >= 0),
  status           TEXT NOT NULL CHECK (
    status IN ('queued', 'running', 'retry_wait', 'succeeded', 'dead_letter', 'cancelled')
  ),
  attempt           INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts      INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 32),
  fence             INTEGER NOT NULL DEFAULT 0 CHECK (fence >= 0),
  lease_owner       TEXT,
  lease_expires_at  INTEGER,
  authority_json    TEXT NOT NULL CHECK (json_valid(authority_json)),
  payload_json      TEXT NOT NULL CHECK (json_valid(payload_json)),
  last_error_json   TEXT CHECK (
    last_error_json IS NULL OR json_valid(last_error_json)
  ),
  result_json       TEXT CHECK (result_json IS NULL OR json_valid(result_json)),
  created_at        INTEGER NOT NULL CHECK (created_at >= 0),
  updated_at        INTEGER NOT NULL CHECK (updated_at >= 0),
  settled_at        INTEGER,
  kind              TEXT NOT NULL,
  workspace_id      TEXT,
  runnable          INTEGER NOT NULL CHECK (runnable IN (0, 1)),
  CHECK (attempt <= max_attempts),
  CHECK (
    (status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    OR
    (status <> 'running' AND lease_owner IS NULL AND lease_expires_at IS NULL)
  ),
  CHECK (
    (status IN ('succeeded', 'dead_letter', 'cancelled') AND settled_at IS NOT NULL)
    OR
    (status NOT IN ('succeeded', 'dead_letter', 'cancelled') AND settled_at IS NULL)
  )
);

INSERT INTO jobledger_occurrences_v3
SELECT o.occurrence_id, o.job_id, o.job_revision, o.idempotency_key, o.trigger_key,
       o.scheduled_for, o.available_at, o.status, o.attempt, o.max_attempts, o.fence,
       o.lease_owner, o.lease_expires_at, o.authority_json, o.payload_json,
       o.last_error_json, o.result_json, o.created_at, o.updated_at, o.settled_at,
       j.kind, json_extract(j.authority_json, '$.workspaceId'), j.enabled
FROM occurrences AS o JOIN jobs AS j ON j.job_id = o.job_id;

DROP TABLE occurrences;

ALTER TABLE jobledger_occurrences_v3 RENAME TO occurrences;

CREATE UNIQUE INDEX scheduler_occurrences_idempotency
  ON occurrences(idempotency_key);
CREATE INDEX scheduler_occurrences_job
  ON occurrences(job_id, created_at, occurrence_id);
-- Listing and counting for operators: by status, and by kind then status.
CREATE INDEX jobledger_occurrences_status
  ON occurrences(status, created_at, occurrence_id);
CREATE INDEX jobledger_occurrences_kind
  ON occurrences(kind, status, created_at, occurrence_id);
-- Claims: only live rows of enabled jobs, per kind, in due order (the due instant is the lease
-- expiry for a running row, a reclaim, and available_at otherwise). A claim probes one kind at a
-- time and stops after the rows it takes, however many rows of other kinds, of disabled jobs or
-- of settled history the table holds.
CREATE INDEX jobledger_occurrences_ready
  ON occurrences(
    kind,
    (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
    scheduled_for,
    occurrence_id
  )
  WHERE status IN ('queued', 'retry_wait', 'running') AND runnable = 1;
CREATE INDEX jobledger_occurrences_ready_workspace
  ON occurrences(
    workspace_id,
    kind,
    (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
    scheduled_for,
    occurrence_id
  )
  WHERE status IN ('queued', 'retry_wait', 'running') AND runnable = 1
    AND workspace_id IS NOT NULL;
-- Running final attempts only, by lease expiry: the sweep every claim makes for final attempts
-- whose lease expired reads exactly those, however many other leases have expired (those are
-- reclaimed through the ready index instead).
CREATE INDEX jobledger_occurrences_final_leases
  ON occurrences(lease_expires_at, occurrence_id)
  WHERE status = 'running' AND attempt >= max_attempts;

-- The planner's durable progress, one row per job whose trigger is a jobledger schedule, written
-- by create_job/update_job in the transaction that writes the job revision.
CREATE TABLE jobledger_schedules (
  job_id           TEXT PRIMARY KEY NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  job_revision     INTEGER NOT NULL CHECK (job_revision >= 1),
  planned_through  INTEGER NOT NULL CHECK (planned_through >= 0),
  next_due_at      INTEGER CHECK (next_due_at IS NULL OR next_due_at >= 0),
  last_slot        INTEGER CHECK (last_slot IS NULL OR last_slot >= 0),
  skips_json       TEXT NOT NULL CHECK (json_valid(skips_json)),
  updated_at       INTEGER NOT NULL CHECK (updated_at >= 0)
);
CREATE INDEX jobledger_schedules_due
  ON jobledger_schedules(next_due_at)
  WHERE next_due_at IS NOT NULL;

-- Workers that announced themselves: who they are, what they run, when they were last seen.
CREATE TABLE jobledger_workers (
  worker_id     TEXT PRIMARY KEY NOT NULL,
  hostname      TEXT NOT NULL,
  pid           INTEGER NOT NULL CHECK (pid >= 0),
  started_at    INTEGER NOT NULL CHECK (started_at >= 0),
  last_seen_at  INTEGER NOT NULL CHECK (last_seen_at >= 0),
  stopped_at    INTEGER CHECK (stopped_at IS NULL OR stopped_at >= 0),
  info_json     TEXT NOT NULL CHECK (json_valid(info_json))
);

-- Operator actions whose subject no longer exists (a removed job, pruned history): the events
-- table cannot hold them, since every event points at a job.
CREATE TABLE jobledger_audit (
  audit_id     INTEGER PRIMARY KEY AUTOINCREMENT,
  occurred_at  INTEGER NOT NULL CHECK (occurred_at >= 0),
  action       TEXT NOT NULL,
  actor        TEXT NOT NULL,
  subject      TEXT,
  data_json    TEXT NOT NULL CHECK (json_valid(data_json))
);

-- Settlements per minute, per kind and per settling owner, counted in the transactions that make
-- them, so throughput and failure rates over the last hours cost one small range read. The owner
-- is part of the key so that workers on PostgreSQL never wait for each other's counter rows.
CREATE TABLE jobledger_throughput (
  minute         INTEGER NOT NULL CHECK (minute >= 0),
  kind           TEXT NOT NULL,
  owner_id       TEXT NOT NULL,
  succeeded      INTEGER NOT NULL CHECK (succeeded >= 0),
  retried        INTEGER NOT NULL CHECK (retried >= 0),
  dead_lettered  INTEGER NOT NULL CHECK (dead_lettered >= 0),
  PRIMARY KEY (minute, kind, owner_id)
) WITHOUT ROWID;
