-- jobledger schema v4 (SQLite): a claim lane shaped for queues, priorities and limits; one
-- occurrence per idempotency key under any concurrency; what results, snoozes, outcome-unknown
-- adjudication, dependencies, caller-owned transactions and traces need. docs/schema.md lists
-- every index with the query that needs it.
--
-- occurrences is rebuilt (SQLite cannot change a CHECK constraint or a primary key in place):
--   seq              INTEGER PRIMARY KEY: every index ends in this rowid instead of a 68-character
--                    id; occurrence_id stays the public identity (UNIQUE);
--   idempotency_key  is gone: it is 'scheduler:v1:' || substr(occurrence_id, 5), the same digest;
--   authority_id     points at jobledger_authorities: a job's authority is stored once, not
--                    once per occurrence;
--   queue, priority, partition_key   SPEC §7 (snapshotted from the job at enqueue, or given);
--   gate             0 ready, 1 waiting (not yet due, or due but not yet admitted to a limited
--                    partition), 2 held (due, its partition at its limit): only ready rows are in
--                    the claim index, so a claim never walks work it may not take;
--   adjudicate       1 when a lost lease must become an outcome-unknown dead letter (SPEC §9);
--   snoozes          how often a handler snoozed this occurrence (capped);
--   pending_parents, on_parent_failure   dependencies (SPEC §10): a 'blocked' occurrence waits
--                    for that many parents;
--   result_read_at   when result() first returned the result (prune keeps unread results);
--   trace_json       the trace context of the enqueue (OpenTelemetry), when tracing is on.
-- The migration runs with foreign keys off (the rebuild drops the table that events, requeues
-- and the new tables point at) and checks every foreign key before it commits.

CREATE TABLE jobledger_authorities (
  authority_id    INTEGER PRIMARY KEY,
  authority_json  TEXT NOT NULL UNIQUE CHECK (json_valid(authority_json))
);

INSERT INTO jobledger_authorities (authority_json)
SELECT authority_json FROM jobs
UNION
SELECT authority_json FROM occurrences;

ALTER TABLE jobs ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
  CHECK (priority BETWEEN -100 AND 100);
ALTER TABLE jobs ADD COLUMN on_lost_lease TEXT NOT NULL DEFAULT 'retry'
  CHECK (on_lost_lease IN ('retry', 'adjudicate'));
-- The newest revision that changed how the job runs: an update of queue or priority alone makes
-- a new revision but leaves run_revision, so live occurrences are not stale (SPEC §7).
ALTER TABLE jobs ADD COLUMN run_revision INTEGER NOT NULL DEFAULT 1 CHECK (run_revision >= 1);
ALTER TABLE jobs ADD COLUMN authority_id INTEGER
  REFERENCES jobledger_authorities(authority_id) ON DELETE RESTRICT;

UPDATE jobs
SET run_revision = revision,
    authority_id = (
      SELECT a.authority_id FROM jobledger_authorities AS a
      WHERE a.authority_json = jobs.authority_json
    );

CREATE TABLE jobledger_occurrences_v4 (
  seq               INTEGER PRIMARY KEY,
  occurrence_id     TEXT NOT NULL UNIQUE,
  job_id            TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  job_revision      INTEGER NOT NULL CHECK (job_revision >= 1),
  trigger_key       TEXT NOT NULL,
  scheduled_for     INTEGER NOT NULL CHECK (scheduled_for >= 0),
  available_at      INTEGER NOT NULL CHECK (available_at >= 0),
  status            TEXT NOT NULL CHECK (
    status IN (
      'blocked', 'queued', 'running', 'retry_wait', 'succeeded', 'dead_letter', 'cancelled'
    )
  ),
  attempt           INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
  max_attempts      INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 32),
  fence             INTEGER NOT NULL DEFAULT 0 CHECK (fence >= 0),
  lease_owner       TEXT,
  lease_expires_at  INTEGER,
  authority_id      INTEGER NOT NULL
    REFERENCES jobledger_authorities(authority_id) ON DELETE RESTRICT,
  payload_json      TEXT NOT NULL CHECK (json_valid(payload_json)),
  last_error_json   TEXT CHECK (last_error_json IS NULL OR json_valid(last_error_json)),
  result_json       TEXT CHECK (result_json IS NULL OR json_valid(result_json)),
  created_at        INTEGER NOT NULL CHECK (created_at >= 0),
  updated_at        INTEGER NOT NULL CHECK (updated_at >= 0),
  settled_at        INTEGER,
  kind              TEXT NOT NULL,
  workspace_id      TEXT,
  runnable          INTEGER NOT NULL CHECK (runnable IN (0, 1)),
  queue             TEXT NOT NULL,
  priority          INTEGER NOT NULL CHECK (priority BETWEEN -100 AND 100),
  partition_key     TEXT,
  gate              INTEGER NOT NULL CHECK (gate IN (0, 1, 2)),
  adjudicate        INTEGER NOT NULL CHECK (adjudicate IN (0, 1)),
  snoozes           INTEGER NOT NULL DEFAULT 0 CHECK (snoozes >= 0),
  pending_parents   INTEGER NOT NULL DEFAULT 0 CHECK (pending_parents >= 0),
  on_parent_failure TEXT CHECK (on_parent_failure IS NULL OR on_parent_failure IN ('cancel', 'run')),
  result_read_at    INTEGER,
  trace_json        TEXT CHECK (trace_json IS NULL OR json_valid(trace_json)),
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
  ),
  CHECK ((status = 'blocked') = (pending_parents > 0))
);

-- Rows keep their order (seq follows the old rowid order, which is insertion order); live rows
-- that are not yet due wait for the claim's staging, the others are ready.
INSERT INTO jobledger_occurrences_v4 (
  seq, occurrence_id, job_id, job_revision, trigger_key, scheduled_for, available_at, status,
  attempt, max_attempts, fence, lease_owner, lease_expires_at, authority_id, payload_json,
  last_error_json, result_json, created_at, updated_at, settled_at, kind, workspace_id,
  runnable, queue, priority, partition_key, gate, adjudicate
)
SELECT o.rowid, o.occurrence_id, o.job_id, o.job_revision, o.trigger_key, o.scheduled_for,
       o.available_at, o.status, o.attempt, o.max_attempts, o.fence, o.lease_owner,
       o.lease_expires_at, a.authority_id, o.payload_json, o.last_error_json, o.result_json,
       o.created_at, o.updated_at, o.settled_at, o.kind, o.workspace_id, o.runnable,
       'default', 0, NULL,
       CASE
         WHEN o.status IN ('queued', 'retry_wait')
          AND o.available_at > CAST(strftime('%s', 'now') AS INTEGER) * 1000 THEN 1
         ELSE 0
       END,
       0
FROM occurrences AS o
JOIN jobledger_authorities AS a ON a.authority_json = o.authority_json
ORDER BY o.rowid;

DROP TABLE occurrences;

ALTER TABLE jobledger_occurrences_v4 RENAME TO occurrences;

-- Listing and counting for operators, newest first (the rowid breaks ties). Neither index names
-- a column a claim or a settle changes, except status.
CREATE INDEX jobledger_occurrences_job ON occurrences(job_id, created_at);
CREATE INDEX jobledger_occurrences_status ON occurrences(status, created_at);
CREATE INDEX jobledger_occurrences_kind ON occurrences(kind, created_at);
-- Claims: ready rows only — due, admitted, of enabled jobs — per (queue, kind), larger
-- priority first, then due order. A claim probes the lanes it may take from and stops after
-- the rows it takes, whatever waits, is held, runs, is paused or is settled elsewhere.
CREATE INDEX jobledger_occurrences_ready ON occurrences(
  queue, kind, priority DESC, available_at, scheduled_for
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1;
CREATE INDEX jobledger_occurrences_ready_workspace ON occurrences(
  workspace_id, queue, kind, priority DESC, available_at, scheduled_for
) WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    AND workspace_id IS NOT NULL;
-- Staging: waiting rows by due instant (a claim moves the due ones to ready or held).
CREATE INDEX jobledger_occurrences_waiting ON occurrences(available_at)
  WHERE status IN ('queued', 'retry_wait') AND gate = 1;
-- Held rows of a partition at its limit, in claim order: promoted one slot at a time.
CREATE INDEX jobledger_occurrences_held ON occurrences(
  queue, partition_key, priority DESC, available_at, scheduled_for
) WHERE status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1;
-- Running rows by lease expiry: a claim's probe for expired leases (reclaims, and the final or
-- outcome-unknown ones that become dead letters) reads only what has expired.
CREATE INDEX jobledger_occurrences_leases ON occurrences(lease_expires_at)
  WHERE status = 'running';
-- Running rows per queue and owner: the counts behind concurrency and worker_concurrency, and
-- the reaper's look-up of a dead owner's leases.
CREATE INDEX jobledger_occurrences_running ON occurrences(queue, lease_owner)
  WHERE status = 'running';
-- What occupies a partition: running rows and ready (admitted) ones.
CREATE INDEX jobledger_occurrences_lanes ON occurrences(queue, partition_key)
  WHERE partition_key IS NOT NULL
    AND (status = 'running' OR (status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1));

-- One occurrence per idempotency key (a 'key:' trigger, or any once-per-trigger enqueue), however
-- many processes enqueue it at once: the key row is inserted first, and a second transaction
-- waits for it (or finds it) instead of inserting a second occurrence.
CREATE TABLE jobledger_keys (
  job_id         TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  trigger_key    TEXT NOT NULL,
  -- Deferred: a key is taken (its row inserted) before the occurrence it names is written.
  occurrence_id  TEXT NOT NULL REFERENCES occurrences(occurrence_id) ON DELETE RESTRICT
    DEFERRABLE INITIALLY DEFERRED,
  PRIMARY KEY (job_id, trigger_key)
) WITHOUT ROWID;

-- Keys used before v4: the oldest occurrence of each (by creation, then insertion) answers
-- later enqueues of the key.
INSERT INTO jobledger_keys (job_id, trigger_key, occurrence_id)
SELECT job_id, trigger_key, occurrence_id
FROM (
  SELECT job_id, trigger_key, occurrence_id,
         ROW_NUMBER() OVER (PARTITION BY job_id, trigger_key ORDER BY created_at, seq) AS n
  FROM occurrences
  WHERE substr(trigger_key, 1, 4) = 'key:'
)
WHERE n = 1;

-- Queue declarations (SPEC §7): limits, and the pause state (not part of a declaration).
CREATE TABLE jobledger_queues (
  name                   TEXT PRIMARY KEY NOT NULL,
  concurrency            INTEGER CHECK (concurrency IS NULL OR concurrency >= 1),
  worker_concurrency     INTEGER CHECK (worker_concurrency IS NULL OR worker_concurrency >= 1),
  partition_concurrency  INTEGER CHECK (
    partition_concurrency IS NULL OR partition_concurrency >= 1
  ),
  rate_limit             INTEGER CHECK (rate_limit IS NULL OR rate_limit >= 1),
  rate_per_ms            INTEGER CHECK (rate_per_ms IS NULL OR rate_per_ms >= 1000),
  partition_rate_limit   INTEGER CHECK (partition_rate_limit IS NULL OR partition_rate_limit >= 1),
  partition_rate_per_ms  INTEGER CHECK (
    partition_rate_per_ms IS NULL OR partition_rate_per_ms >= 1000
  ),
  paused                 INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
  paused_reason          TEXT,
  paused_at              INTEGER,
  paused_by              TEXT,
  revision               INTEGER NOT NULL CHECK (revision >= 1),
  created_at             INTEGER NOT NULL CHECK (created_at >= 0),
  updated_at             INTEGER NOT NULL CHECK (updated_at >= 0),
  CHECK ((rate_limit IS NULL) = (rate_per_ms IS NULL)),
  CHECK ((partition_rate_limit IS NULL) = (partition_rate_per_ms IS NULL)),
  CHECK ((paused = 1) = (paused_at IS NOT NULL))
) WITHOUT ROWID;

-- Claims per rate window, one row per rate-limited queue ('' partition) or partition; windows
-- are aligned to the epoch (window_start = now - now % per). wake_at: when held rows of a
-- partition whose window ran out may be admitted again.
CREATE TABLE jobledger_rate_windows (
  queue          TEXT NOT NULL,
  partition_key  TEXT NOT NULL,
  window_start   INTEGER NOT NULL CHECK (window_start >= 0),
  claims         INTEGER NOT NULL CHECK (claims >= 0),
  wake_at        INTEGER,
  PRIMARY KEY (queue, partition_key)
) WITHOUT ROWID;
CREATE INDEX jobledger_rate_windows_wake ON jobledger_rate_windows(wake_at)
  WHERE wake_at IS NOT NULL;

-- Dependencies (SPEC §10): an edge per (parent, child), found from the parent when it settles.
CREATE TABLE jobledger_dependencies (
  parent_seq  INTEGER NOT NULL REFERENCES occurrences(seq) ON DELETE RESTRICT,
  child_seq   INTEGER NOT NULL REFERENCES occurrences(seq) ON DELETE RESTRICT,
  PRIMARY KEY (parent_seq, child_seq)
) WITHOUT ROWID;
CREATE INDEX jobledger_dependencies_child ON jobledger_dependencies(child_seq, parent_seq);

-- Outcome-unknown adjudication (SPEC §9): at most one decision per occurrence.
CREATE TABLE jobledger_adjudications (
  occurrence_id       TEXT PRIMARY KEY NOT NULL
    REFERENCES occurrences(occurrence_id) ON DELETE RESTRICT,
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
  CHECK ((status = 'pending') = (applied_at IS NULL))
);

-- This store's identity, made once (a caller's connection must be on this very store, SPEC §8).
CREATE TABLE jobledger_store (
  store_id    TEXT PRIMARY KEY NOT NULL,
  created_at  INTEGER NOT NULL CHECK (created_at >= 0)
);
INSERT INTO jobledger_store (store_id, created_at)
VALUES (lower(hex(randomblob(16))), CAST(strftime('%s', 'now') AS INTEGER) * 1000);

-- Liveness generations: a worker bumps its generation each time it takes its liveness lock
-- (again), so another worker calls it gone only if the lock stayed free and the generation did
-- not move between two looks (PostgreSQL; SQLite's lock files cannot flap).
CREATE TABLE jobledger_liveness (
  owner_id    TEXT PRIMARY KEY NOT NULL,
  generation  INTEGER NOT NULL CHECK (generation >= 1),
  taken_at    INTEGER NOT NULL CHECK (taken_at >= 0)
) WITHOUT ROWID;
