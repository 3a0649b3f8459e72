-- jobledger schema v5 (SQLite): what deploys, crashes and operators need. docs/schema.md lists
-- every column and index with the reason it exists.
--
-- occurrences.started_at  when the handler of the current attempt began (NULL while the attempt
--                         is only claimed, e.g. buffered ahead of a free slot): crash recovery
--                         gives a never-started attempt back instead of spending it, and an
--                         outcome-unknown case says when its handler began.

ALTER TABLE occurrences ADD COLUMN started_at INTEGER CHECK (started_at IS NULL OR started_at >= 0);

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
