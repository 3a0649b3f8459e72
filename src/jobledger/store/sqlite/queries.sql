-- SQLite dialect of the store operations. One named block per operation; the PostgreSQL
-- dialect (../postgres/queries.sql) defines exactly the same names.

-- name: get_job
SELECT * FROM jobs WHERE job_id = :job_id

-- name: insert_job
INSERT INTO jobs
  (job_id, kind, trigger_json, payload_json, authority_json,
   enabled, revision, max_attempts, created_at, updated_at)
VALUES
  (:job_id, :kind, :trigger_json, :payload_json, :authority_json,
   :enabled, 1, :max_attempts, :now, :now)

-- name: update_job
UPDATE jobs
SET kind = :kind,
    trigger_json = :trigger_json,
    payload_json = :payload_json,
    authority_json = :authority_json,
    enabled = :enabled,
    revision = :next_revision,
    max_attempts = :max_attempts,
    updated_at = :now
WHERE job_id = :job_id AND revision = :expected_revision

-- name: insert_event
INSERT INTO events
  (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
VALUES
  (:job_id, :occurrence_id, :event_type, :occurred_at, :owner_id, :fence, :data_json)

-- name: get_occurrence
SELECT * FROM occurrences WHERE occurrence_id = :occurrence_id

-- name: get_occurrence_by_key
SELECT * FROM occurrences WHERE idempotency_key = :idempotency_key

-- name: insert_occurrence
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at)
VALUES
  (:occurrence_id, :job_id, :job_revision, :idempotency_key, :trigger_key,
   :scheduled_for, :available_at, 'queued', 0, :max_attempts, 0,
   NULL, NULL, :authority_json, :payload_json,
   NULL, NULL, :now, :now, NULL)
ON CONFLICT (idempotency_key) DO NOTHING

-- name: list_occurrences_by_trigger
SELECT * FROM occurrences
WHERE job_id = :job_id AND trigger_key = :trigger_key
ORDER BY created_at, occurrence_id
LIMIT :limit

-- name: select_expired_final_leases
SELECT occurrence_id, job_id, lease_owner, fence, attempt, max_attempts
FROM occurrences
WHERE status = 'running'
  AND lease_expires_at <= :now
  AND attempt >= max_attempts
ORDER BY lease_expires_at, occurrence_id
LIMIT :limit

-- name: dead_letter_expired_lease
UPDATE occurrences
SET status = 'dead_letter',
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = :error_json,
    updated_at = :now,
    settled_at = :now
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND lease_expires_at <= :now
  AND attempt >= max_attempts

-- name: claim_next_candidate
-- The reference sorts every due row on a CASE expression. Here each status is its own
-- index-ordered probe of scheduler_occurrences_claim (status, available_at, lease_expires_at,
-- scheduled_for, occurrence_id) that stops at the first eligible row; the outer query picks the
-- earliest of at most three rows. lease_expires_at is NULL for every queued/retry_wait row (a
-- table CHECK), so adding it to their ORDER BY keeps the order and lets the index supply it.
-- Running rows are ordered by lease expiry; there are only as many as there are live claims.
-- INDEXED BY and CROSS JOIN pin the plan: once ANALYZE statistics exist, SQLite would otherwise
-- sort every due row or scan occurrences (measured: 0.5 ms -> 20-32 ms per claim at 100k).
SELECT * FROM (
  SELECT * FROM (
    SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner,
           o.available_at AS due_at, o.scheduled_for
    FROM occurrences AS o INDEXED BY scheduler_occurrences_claim
    CROSS JOIN jobs AS j ON j.job_id = o.job_id
    WHERE o.status = 'queued' AND o.available_at <= :now
      AND o.attempt < o.max_attempts AND j.enabled = 1
      AND (:job_kind IS NULL OR j.kind = :job_kind)
      AND (:workspace_id IS NULL
           OR json_extract(j.authority_json, '$.workspaceId') = :workspace_id)
    ORDER BY o.available_at, o.lease_expires_at, o.scheduled_for, o.occurrence_id
    LIMIT 1
  )
  UNION ALL
  SELECT * FROM (
    SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner,
           o.available_at AS due_at, o.scheduled_for
    FROM occurrences AS o INDEXED BY scheduler_occurrences_claim
    CROSS JOIN jobs AS j ON j.job_id = o.job_id
    WHERE o.status = 'retry_wait' AND o.available_at <= :now
      AND o.attempt < o.max_attempts AND j.enabled = 1
      AND (:job_kind IS NULL OR j.kind = :job_kind)
      AND (:workspace_id IS NULL
           OR json_extract(j.authority_json, '$.workspaceId') = :workspace_id)
    ORDER BY o.available_at, o.lease_expires_at, o.scheduled_for, o.occurrence_id
    LIMIT 1
  )
  UNION ALL
  SELECT * FROM (
    SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner,
           o.lease_expires_at AS due_at, o.scheduled_for
    FROM occurrences AS o INDEXED BY scheduler_occurrences_claim
    CROSS JOIN jobs AS j ON j.job_id = o.job_id
    WHERE o.status = 'running' AND o.lease_expires_at <= :now
      AND o.attempt < o.max_attempts AND j.enabled = 1
      AND (:job_kind IS NULL OR j.kind = :job_kind)
      AND (:workspace_id IS NULL
           OR json_extract(j.authority_json, '$.workspaceId') = :workspace_id)
    ORDER BY o.lease_expires_at, o.scheduled_for, o.occurrence_id
    LIMIT 1
  )
)
ORDER BY due_at, scheduled_for, occurrence_id
LIMIT 1

-- name: claim_target_candidate
SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner
FROM occurrences AS o JOIN jobs AS j ON j.job_id = o.job_id
WHERE o.occurrence_id = :occurrence_id
  AND j.enabled = 1
  AND o.attempt < o.max_attempts
  AND (
    (o.status IN ('queued', 'retry_wait') AND o.available_at <= :now)
    OR
    (o.status = 'running' AND o.lease_expires_at <= :now)
  )

-- name: apply_claim
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = :owner_id,
    lease_expires_at = :lease_expires_at,
    updated_at = :now,
    settled_at = NULL
WHERE occurrence_id = :occurrence_id
  AND fence = :expected_fence
  AND attempt < max_attempts
  AND (
    (status IN ('queued', 'retry_wait') AND available_at <= :now)
    OR
    (status = 'running' AND lease_expires_at <= :now)
  )
RETURNING *

-- name: renew_lease
UPDATE occurrences
SET lease_expires_at = MAX(lease_expires_at, :lease_expires_at),
    updated_at = :now
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND lease_expires_at > :now
RETURNING *

-- name: settle_occurrence
UPDATE occurrences
SET status = :status,
    available_at = :available_at,
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = :last_error_json,
    result_json = :result_json,
    updated_at = :now,
    settled_at = :settled_at
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND lease_expires_at > :now
RETURNING *

-- name: requeue_dead_letter
UPDATE occurrences
SET status = 'retry_wait',
    available_at = :now,
    max_attempts = attempt + 1,
    updated_at = :now,
    settled_at = NULL
WHERE occurrence_id = :occurrence_id
  AND status = 'dead_letter'
  AND fence = :expected_fence
RETURNING *

-- name: insert_requeue
INSERT INTO jobledger_requeues
  (occurrence_id, job_id, expected_fence, attempt, previous_max_attempts, max_attempts,
   previous_error_json, reason, actor, requested_at)
VALUES
  (:occurrence_id, :job_id, :expected_fence, :attempt, :previous_max_attempts, :max_attempts,
   :previous_error_json, :reason, :actor, :now)
RETURNING requeue_id

-- name: history_all
SELECT * FROM events ORDER BY event_id DESC LIMIT :limit

-- name: history_by_occurrence
SELECT * FROM events WHERE occurrence_id = :occurrence_id ORDER BY event_id DESC LIMIT :limit

-- name: history_by_job
SELECT * FROM events WHERE job_id = :job_id ORDER BY event_id DESC LIMIT :limit

-- name: history_by_occurrence_and_job
SELECT * FROM events
WHERE occurrence_id = :occurrence_id AND job_id = :job_id
ORDER BY event_id DESC LIMIT :limit

-- name: list_dead_letters
SELECT * FROM occurrences WHERE status = 'dead_letter'
ORDER BY settled_at DESC, occurrence_id LIMIT :limit

-- name: list_dead_letters_by_job
SELECT * FROM occurrences WHERE status = 'dead_letter' AND job_id = :job_id
ORDER BY settled_at DESC, occurrence_id LIMIT :limit

-- name: release_lease
UPDATE occurrences
SET status = 'retry_wait',
    attempt = attempt - 1,
    available_at = :now,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = :now
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND lease_expires_at > :now
RETURNING *
