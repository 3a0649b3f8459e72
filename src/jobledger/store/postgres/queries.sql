-- PostgreSQL's own text for the queries whose SQL differs from SQLite's (the rest are in
-- ../queries.sql). ../sqlite/queries.sql defines exactly the same names. Parameters are
-- psycopg's named placeholders, written natively here. Tables are unqualified: every
-- transaction sets search_path to the store's schema.
--
-- Claims lock their rows with FOR UPDATE SKIP LOCKED, so concurrent workers each take different
-- rows instead of queueing behind one; rows another transaction is settling are skipped too.

-- name: select_expired_final_leases
SELECT occurrence_id, job_id, lease_owner, fence, attempt, max_attempts, kind
FROM occurrences
WHERE status = 'running' AND attempt >= max_attempts
  AND lease_expires_at <= %(now)s
ORDER BY lease_expires_at, occurrence_id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: claim_candidates
-- Every kind asked for at once: one index probe per kind (LATERAL), merged in due order.
SELECT c.* FROM unnest(%(kinds)s::text[]) AS k(kind)
CROSS JOIN LATERAL (
  SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.scheduled_for,
         (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END)
           AS due_at
  FROM occurrences AS o
  WHERE o.kind = k.kind
    AND o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
    AND (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END)
        <= %(now)s
    AND o.attempt < o.max_attempts
  ORDER BY (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END),
           o.scheduled_for, o.occurrence_id
  LIMIT %(limit)s
  FOR UPDATE OF o SKIP LOCKED
) AS c
ORDER BY c.due_at, c.scheduled_for, c.occurrence_id
LIMIT %(limit)s

-- name: claim_candidates_in_workspace
SELECT c.* FROM unnest(%(kinds)s::text[]) AS k(kind)
CROSS JOIN LATERAL (
  SELECT o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.scheduled_for,
         (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END)
           AS due_at
  FROM occurrences AS o
  WHERE o.workspace_id = %(workspace_id)s AND o.kind = k.kind
    AND o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
    AND o.workspace_id IS NOT NULL
    AND (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END)
        <= %(now)s
    AND o.attempt < o.max_attempts
  ORDER BY (CASE WHEN o.status = 'running' THEN o.lease_expires_at ELSE o.available_at END),
           o.scheduled_for, o.occurrence_id
  LIMIT %(limit)s
  FOR UPDATE OF o SKIP LOCKED
) AS c
ORDER BY c.due_at, c.scheduled_for, c.occurrence_id
LIMIT %(limit)s

-- name: apply_claims
-- Lease every picked (and locked) row in one statement (%(ids)s is a text array).
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = %(owner_id)s,
    lease_expires_at = %(lease_expires_at)s,
    updated_at = %(now)s,
    settled_at = NULL
WHERE occurrence_id = ANY(%(ids)s::text[])
  AND attempt < max_attempts
  AND (
    (status IN ('queued', 'retry_wait') AND available_at <= %(now)s)
    OR
    (status = 'running' AND lease_expires_at <= %(now)s)
  )
RETURNING *

-- name: insert_events
-- Many events in one statement: %(rows)s is a JSON array of objects with the insert_event fields
-- (one text parameter, cheaper than an array per column). json_to_recordset parses it once into
-- typed columns (->> per field would parse each object again); rows go in in array order.
INSERT INTO events
  (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
SELECT e.job_id, e.occurrence_id, e.event_type, e.occurred_at, e.owner_id, e.fence, e.data_json
FROM ROWS FROM (
  json_to_recordset(%(rows)s::json)
    AS (job_id text, occurrence_id text, event_type text, occurred_at bigint, owner_id text,
        fence bigint, data_json text)
) WITH ORDINALITY
  AS e(job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json, position)
ORDER BY e.position

-- name: insert_occurrences_from_jobs
-- insert_occurrence_from_job for many firings in one statement (%(rows)s as for insert_events);
-- returns the ids it inserted (a firing that exists, or whose job changed, returns nothing).
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable)
SELECT e.occurrence_id, j.job_id, j.revision, e.idempotency_key,
       e.trigger_key, e.scheduled_for,
       e.available_at, 'queued', 0, j.max_attempts, 0,
       NULL, NULL, j.authority_json, COALESCE(e.payload_json, j.payload_json),
       NULL, NULL, e.now, e.now, NULL,
       j.kind, e.workspace_id, 1
FROM ROWS FROM (
  json_to_recordset(%(rows)s::json)
    AS (occurrence_id text, idempotency_key text, trigger_key text, scheduled_for bigint,
        available_at bigint, payload_json text, now bigint, workspace_id text, job_id text,
        job_revision bigint)
) WITH ORDINALITY
  AS e(occurrence_id, idempotency_key, trigger_key, scheduled_for, available_at, payload_json,
       now, workspace_id, job_id, job_revision, position)
JOIN jobs AS j
  ON j.job_id = e.job_id
 AND j.revision = e.job_revision
 AND j.enabled = 1
ORDER BY e.position
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING occurrence_id

-- name: live_kinds
-- The distinct kinds with live work, by skipping through the claim index (O(kinds · log n)).
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT kind FROM occurrences
          WHERE status IN ('queued', 'retry_wait', 'running') AND runnable = 1
          ORDER BY kind LIMIT 1)
  UNION ALL
  SELECT (SELECT o.kind FROM occurrences AS o
          WHERE o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
            AND o.kind > kinds.kind
          ORDER BY o.kind LIMIT 1)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL

-- name: live_kinds_in_workspace
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT kind FROM occurrences
          WHERE workspace_id = %(workspace_id)s
            AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
            AND workspace_id IS NOT NULL
          ORDER BY kind LIMIT 1)
  UNION ALL
  SELECT (SELECT o.kind FROM occurrences AS o
          WHERE o.workspace_id = %(workspace_id)s
            AND o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
            AND o.workspace_id IS NOT NULL
            AND o.kind > kinds.kind
          ORDER BY o.kind LIMIT 1)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL

-- name: oldest_due
SELECT occurrence_id, job_id, status, scheduled_for,
       (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) AS due_at
FROM occurrences
WHERE kind = %(kind)s
  AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
  AND (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) <= %(now)s
ORDER BY (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
         scheduled_for, occurrence_id
LIMIT 1

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
