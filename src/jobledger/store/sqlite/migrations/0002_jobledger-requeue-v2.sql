CREATE TABLE jobledger_requeues (
  requeue_id             INTEGER PRIMARY KEY AUTOINCREMENT,
  occurrence_id          TEXT NOT NULL REFERENCES occurrences(occurrence_id) ON DELETE RESTRICT,
  job_id                 TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE RESTRICT,
  expected_fence         INTEGER NOT NULL CHECK (expected_fence >= 1),
  attempt                INTEGER NOT NULL CHECK (attempt >= 1),
  previous_max_attempts  INTEGER NOT NULL CHECK (previous_max_attempts BETWEEN 1 AND 32),
  max_attempts           INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 32),
  previous_error_json    TEXT CHECK (
    previous_error_json IS NULL OR json_valid(previous_error_json)
  ),
  reason                 TEXT NOT NULL,
  actor                  TEXT NOT NULL,
  requested_at           INTEGER NOT NULL CHECK (requested_at >= 0)
);

CREATE INDEX jobledger_requeues_occurrence
  ON jobledger_requeues(occurrence_id, requeue_id DESC);
