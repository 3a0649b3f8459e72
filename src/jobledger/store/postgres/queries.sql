-- PostgreSQL dialect of the store operations: exactly the same block names as
-- ../sqlite/queries.sql (a test checks it). Parameters are psycopg's named placeholders, written
-- natively, so a literal percent sign would have to be doubled (none is needed here). Tables are
-- unqualified: every transaction sets search_path to the store's schema. Comments inside a block
-- are sent to the server with it.

-- name: get_job
SELECT * FROM jobs WHERE job_id = %(job_id)s

-- name: insert_job
INSERT INTO jobs
  (job_id, kind, trigger_json, payload_json, authority_json,
   enabled, revision, max_attempts, created_at, updated_at)
VALUES
  (%(job_id)s, %(kind)s, %(trigger_json)s, %(payload_json)s, %(authority_json)s,
   %(enabled)s, 1, %(max_attempts)s, %(now)s, %(now)s)

-- name: update_job
UPDATE jobs
SET kind = %(kind)s,
    trigger_json = %(trigger_json)s,
    payload_json = %(payload_json)s,
    authority_json = %(authority_json)s,
    enabled = %(enabled)s,
    revision = %(next_revision)s,
    max_attempts = %(max_attempts)s,
    updated_at = %(now)s
WHERE job_id = %(job_id)s AND revision = %(expected_revision)s

-- name: insert_event
INSERT INTO events
  (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
VALUES
  (%(job_id)s, %(occurrence_id)s, %(event_type)s, %(occurred_at)s, %(owner_id)s, %(fence)s,
   %(data_json)s)

-- name: get_occurrence
SELECT * FROM occurrences WHERE occurrence_id = %(occurrence_id)s

-- name: get_occurrence_by_key
SELECT * FROM occurrences WHERE idempotency_key = %(idempotency_key)s

-- name: insert_occurrence
-- Two processes enqueuing the same firing: the second INSERT waits for the first transaction,
-- then does nothing, and the following read (a new READ COMMITTED snapshot) sees its row.
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at)
VALUES
  (%(occurrence_id)s, %(job_id)s, %(job_revision)s, %(idempotency_key)s, %(trigger_key)s,
   %(scheduled_for)s, %(available_at)s, 'queued', 0, %(max_attempts)s, 0,
   NULL, NULL, %(authority_json)s, %(payload_json)s,
   NULL, NULL, %(now)s, %(now)s, NULL)
ON CONFLICT (idempotency_key) DO NOTHING

-- name: list_occurrences_by_trigger
SELECT * FROM occurrences
WHERE job_id = %(job_id)s AND trigger_key = %(trigger_key)s
ORDER BY created_at, occurrence_id
LIMIT %(limit)s

-- name: select_expired_final_leases
-- Rows another transaction is dead-lettering (or settling) right now are skipped, not waited
-- for: the next claim picks up whatever is left.
SELECT occurrence_id, job_id, lease_owner, fence, attempt, max_attempts
FROM occurrences
WHERE status = 'running'
  AND lease_expires_at <= %(now)s
  AND attempt >= max_attempts
ORDER BY lease_expires_at, occurrence_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: dead_letter_expired_lease
UPDATE occurrences
SET status = 'dead_letter',
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = %(error_json)s,
    updated_at = %(now)s,
    settled_at = %(now)s
WHERE occurrence_id = %(occurrence_id)s
  AND status = 'running'
  AND lease_owner = %(owner_id)s
  AND fence = %(fence)s
  AND lease_expires_at <= %(now)s
  AND attempt >= max_attempts

-- name: claim_next_candidate
-- One ordered walk of scheduler_occurrences_claim (due instant, scheduled_for, id) that stops at
-- the first eligible row nobody else holds: FOR UPDATE SKIP LOCKED lets many workers claim at
-- once without queueing behind each other's candidate; apply_claim then updates the locked row.
-- The job conditions are a per-row subquery on purpose: written as a join, the planner (with
-- statistics from a still-empty table) may fetch every due row of the job and sort them, which
-- costs O(queue length) per claim instead of O(1).
SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner,
       CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END AS due_at,
       o.scheduled_for
FROM occurrences AS o
WHERE o.status IN ('queued', 'retry_wait', 'running')
  AND (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END)
      <= %(now)s
  AND o.attempt < o.max_attempts
  AND (
    SELECT j.enabled = 1
       AND (%(job_kind)s::text IS NULL OR j.kind = %(job_kind)s::text)
       AND (%(workspace_id)s::text IS NULL
            OR (j.authority_json::json ->> 'workspaceId') = %(workspace_id)s::text)
    FROM jobs AS j WHERE j.job_id = o.job_id
  )
ORDER BY (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END),
         o.scheduled_for, o.occurrence_id
LIMIT 1
FOR UPDATE OF o SKIP LOCKED

-- name: claim_target_candidate
-- A plain FOR UPDATE: a concurrent claim of the same row makes this wait, and READ COMMITTED
-- then re-checks the conditions on the claimed row, which no longer qualifies.
SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner
FROM occurrences AS o JOIN jobs AS j ON j.job_id = o.job_id
WHERE o.occurrence_id = %(occurrence_id)s
  AND j.enabled = 1
  AND o.attempt < o.max_attempts
  AND (
    (o.status IN ('queued', 'retry_wait') AND o.available_at <= %(now)s)
    OR
    (o.status = 'running' AND o.lease_expires_at <= %(now)s)
  )
FOR UPDATE OF o

-- name: apply_claim
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = %(owner_id)s,
    lease_expires_at = %(lease_expires_at)s,
    updated_at = %(now)s,
    settled_at = NULL
WHERE occurrence_id = %(occurrence_id)s
  AND fence = %(expected_fence)s
  AND attempt < max_attempts
  AND (
    (status IN ('queued', 'retry_wait') AND available_at <= %(now)s)
    OR
    (status = 'running' AND lease_expires_at <= %(now)s)
  )
RETURNING *

-- name: renew_lease
UPDATE occurrences
SET lease_expires_at = GREATEST(lease_expires_at, %(lease_expires_at)s),
    updated_at = %(now)s
WHERE occurrence_id = %(occurrence_id)s
  AND status = 'running'
  AND lease_owner = %(owner_id)s
  AND fence = %(fence)s
  AND lease_expires_at > %(now)s
RETURNING *

-- name: settle_occurrence
UPDATE occurrences
SET status = %(status)s,
    available_at = %(available_at)s,
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = %(last_error_json)s,
    result_json = %(result_json)s,
    updated_at = %(now)s,
    settled_at = %(settled_at)s
WHERE occurrence_id = %(occurrence_id)s
  AND status = 'running'
  AND lease_owner = %(owner_id)s
  AND fence = %(fence)s
  AND lease_expires_at > %(now)s
RETURNING *

-- name: requeue_dead_letter
UPDATE occurrences
SET status = 'retry_wait',
    available_at = %(now)s,
    max_attempts = attempt + 1,
    updated_at = %(now)s,
    settled_at = NULL
WHERE occurrence_id = %(occurrence_id)s
  AND status = 'dead_letter'
  AND fence = %(expected_fence)s
RETURNING *

-- name: insert_requeue
INSERT INTO jobledger_requeues
  (occurrence_id, job_id, expected_fence, attempt, previous_max_attempts, max_attempts,
   previous_error_json, reason, actor, requested_at)
VALUES
  (%(occurrence_id)s, %(job_id)s, %(expected_fence)s, %(attempt)s, %(previous_max_attempts)s,
   %(max_attempts)s, %(previous_error_json)s, %(reason)s, %(actor)s, %(now)s)
RETURNING requeue_id

-- name: history_all
SELECT * FROM events ORDER BY event_id DESC LIMIT %(limit)s

-- name: history_by_occurrence
SELECT * FROM events WHERE occurrence_id = %(occurrence_id)s
ORDER BY event_id DESC LIMIT %(limit)s

-- name: history_by_job
SELECT * FROM events WHERE job_id = %(job_id)s ORDER BY event_id DESC LIMIT %(limit)s

-- name: history_by_occurrence_and_job
SELECT * FROM events
WHERE occurrence_id = %(occurrence_id)s AND job_id = %(job_id)s
ORDER BY event_id DESC LIMIT %(limit)s

-- name: list_dead_letters
SELECT * FROM occurrences WHERE status = 'dead_letter'
ORDER BY settled_at DESC, occurrence_id LIMIT %(limit)s

-- name: list_dead_letters_by_job
SELECT * FROM occurrences WHERE status = 'dead_letter' AND job_id = %(job_id)s
ORDER BY settled_at DESC, occurrence_id LIMIT %(limit)s

-- name: release_lease
UPDATE occurrences
SET status = 'retry_wait',
    attempt = attempt - 1,
    available_at = %(now)s,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = %(now)s
WHERE occurrence_id = %(occurrence_id)s
  AND status = 'running'
  AND lease_owner = %(owner_id)s
  AND fence = %(fence)s
  AND lease_expires_at > %(now)s
RETURNING *
