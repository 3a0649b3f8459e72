CREATE TABLE migrations (
  version     INTEGER PRIMARY KEY NOT NULL,
  name        TEXT NOT NULL UNIQUE,
  checksum    TEXT NOT NULL,
  applied_at  INTEGER NOT NULL CHECK (applied_at >= 0)
);

CREATE TABLE jobs (
  job_id          TEXT PRIMARY KEY NOT NULL,
  kind            TEXT NOT NULL,
  trigger_json    TEXT NOT NULL CHECK (json_valid(trigger_json)),
  payload_json    TEXT NOT NULL CHECK (json_valid(payload_json)),
  authority_json  TEXT NOT NULL CHECK (json_valid(authority_json)),
  enabled         INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  revision        INTEGER NOT NULL CHECK (revision >= 1),
  max_attempts    INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 32),
  created_at      INTEGER NOT NULL CHECK (created_at >= 0),
  updated_at      INTEGER NOT NULL CHECK (updated_at >= 0)
);

CREATE TABLE occurrences (
  occurrence_id    TEXT PRIMARY KEY NOT NULL,
  job_id           TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  job_revision     INTEGER NOT NULL CHECK (job_revision >= 1),
  idempotency_key  TEXT NOT NULL,
  trigger_key      TEXT NOT NULL,
  scheduled_for    INTEGER NOT NULL CHECK (scheduled_for >= 0),
  available_at     INTEGER NOT NULL CHECK (available_at >= 0),
  status           TEXT NOT NULL CHECK (
    status IN ('queued', 'running', 'retry_wait', 'succeeded', 'dead_letter')
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
  CHECK (attempt <= max_attempts),
  CHECK (
    (status = 'running' AND lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    OR
    (status <> 'running' AND lease_owner IS NULL AND lease_expires_at IS NULL)
  ),
  CHECK (
    (status IN ('succeeded', 'dead_letter') AND settled_at IS NOT NULL)
    OR
    (status NOT IN ('succeeded', 'dead_letter') AND settled_at IS NULL)
  )
);

CREATE UNIQUE INDEX scheduler_occurrences_idempotency
  ON occurrences(idempotency_key);
CREATE INDEX scheduler_occurrences_claim
  ON occurrences(status, available_at, lease_expires_at, scheduled_for, occurrence_id);
CREATE INDEX scheduler_occurrences_job
  ON occurrences(job_id, created_at, occurrence_id);

CREATE TABLE events (
  event_id       INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id         TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  occurrence_id  TEXT REFERENCES occurrences(occurrence_id) ON DELETE RESTRICT,
  event_type     TEXT NOT NULL,
  occurred_at    INTEGER NOT NULL CHECK (occurred_at >= 0),
  owner_id       TEXT,
  fence          INTEGER,
  data_json      TEXT NOT NULL CHECK (json_valid(data_json))
);

CREATE INDEX scheduler_events_occurrence
  ON events(occurrence_id, event_id DESC);
CREATE INDEX scheduler_events_job
  ON events(job_id, event_id DESC);
