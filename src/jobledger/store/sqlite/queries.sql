-- SQLite's own text for the queries whose SQL differs from PostgreSQL's (the rest are in
-- ../queries.sql). ../postgres/queries.sql defines exactly the same names.
--
-- Claims read jobledger_occurrences_ready: live rows of enabled jobs only, per kind, in due
-- order (the due instant is the lease expiry for a running row, available_at otherwise).
-- INDEXED BY pins the plan: once ANALYZE statistics exist, SQLite could otherwise prefer an
-- index that makes a claim walk every row of the kind (query-plan tests guard this).

-- name: select_expired_final_leases
SELECT occurrence_id, job_id, lease_owner, fence, attempt, max_attempts, kind
FROM occurrences INDEXED BY jobledger_occurrences_final_leases
WHERE status = 'running' AND attempt >= max_attempts
  AND lease_expires_at <= :now
ORDER BY lease_expires_at, occurrence_id
LIMIT :limit

-- name: claim_candidates
-- One kind; the store merges the kinds it asks for in Python.
SELECT occurrence_id, job_id, status, fence, lease_owner, scheduled_for,
       (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) AS due_at
FROM occurrences INDEXED BY jobledger_occurrences_ready
WHERE kind = :kind
  AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
  AND (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) <= :now
  AND attempt < max_attempts
ORDER BY (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
         scheduled_for, occurrence_id
LIMIT :limit

-- name: claim_candidates_in_workspace
SELECT occurrence_id, job_id, status, fence, lease_owner, scheduled_for,
       (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) AS due_at
FROM occurrences INDEXED BY jobledger_occurrences_ready_workspace
WHERE workspace_id = :workspace_id AND kind = :kind
  AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
  AND workspace_id IS NOT NULL
  AND (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) <= :now
  AND attempt < max_attempts
ORDER BY (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
         scheduled_for, occurrence_id
LIMIT :limit

-- name: live_kinds
-- The distinct kinds with live work, found by skipping through the claim index one kind at a
-- time (O(kinds · log n)), for claims that name no kind.
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT kind FROM occurrences INDEXED BY jobledger_occurrences_ready
          WHERE status IN ('queued', 'retry_wait', 'running') AND runnable = 1
          ORDER BY kind LIMIT 1)
  UNION ALL
  SELECT (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready
          WHERE o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
            AND o.kind > kinds.kind
          ORDER BY o.kind LIMIT 1)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL

-- name: live_kinds_in_workspace
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT kind FROM occurrences INDEXED BY jobledger_occurrences_ready_workspace
          WHERE workspace_id = :workspace_id
            AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
            AND workspace_id IS NOT NULL
          ORDER BY kind LIMIT 1)
  UNION ALL
  SELECT (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready_workspace
          WHERE o.workspace_id = :workspace_id
            AND o.status IN ('queued', 'retry_wait', 'running') AND o.runnable = 1
            AND o.workspace_id IS NOT NULL
            AND o.kind > kinds.kind
          ORDER BY o.kind LIMIT 1)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL

-- name: oldest_due
-- The most overdue claimable occurrence of one kind (what the next claim of that kind takes).
SELECT occurrence_id, job_id, status, scheduled_for,
       (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) AS due_at
FROM occurrences INDEXED BY jobledger_occurrences_ready
WHERE kind = :kind
  AND status IN ('queued', 'retry_wait', 'running') AND runnable = 1
  AND (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END) <= :now
ORDER BY (CASE WHEN status = 'running' THEN lease_expires_at ELSE available_at END),
         scheduled_for, occurrence_id
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

-- name: apply_claims
-- Lease every picked row in one statement (:ids is a JSON array of occurrence ids). The claim
-- conditions are checked again, so a row that changed since it was picked is left alone. The
-- unary + keeps SQLite from reading the status index for them (a walk of every live row)
-- instead of looking the ids up by primary key.
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = :owner_id,
    lease_expires_at = :lease_expires_at,
    updated_at = :now,
    settled_at = NULL
WHERE occurrence_id IN (SELECT value FROM json_each(:ids))
  AND attempt < max_attempts
  AND (
    (+status IN ('queued', 'retry_wait') AND available_at <= :now)
    OR
    (+status = 'running' AND lease_expires_at <= :now)
  )
RETURNING *

-- name: insert_events
-- Many events in one statement: :rows is a JSON array of objects with the insert_event fields
-- (jobledger builds it; the JSON functions unpack it inside SQLite).
INSERT INTO events
  (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
SELECT json_extract(r.value, '$.job_id'), json_extract(r.value, '$.occurrence_id'),
       json_extract(r.value, '$.event_type'), json_extract(r.value, '$.occurred_at'),
       json_extract(r.value, '$.owner_id'), json_extract(r.value, '$.fence'),
       json_extract(r.value, '$.data_json')
FROM json_each(:rows) AS r
ORDER BY r.key

-- name: insert_occurrences_from_jobs
-- insert_occurrence_from_job for many firings in one statement (:rows as for insert_events);
-- returns the ids it inserted (a firing that exists, or whose job changed, returns nothing).
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, idempotency_key, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_json, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable)
SELECT json_extract(r.value, '$.occurrence_id'), j.job_id, j.revision,
       json_extract(r.value, '$.idempotency_key'), json_extract(r.value, '$.trigger_key'),
       json_extract(r.value, '$.scheduled_for'), json_extract(r.value, '$.available_at'),
       'queued', 0, j.max_attempts, 0,
       NULL, NULL, j.authority_json,
       COALESCE(json_extract(r.value, '$.payload_json'), j.payload_json),
       NULL, NULL, json_extract(r.value, '$.now'), json_extract(r.value, '$.now'), NULL,
       j.kind, json_extract(r.value, '$.workspace_id'), 1
FROM json_each(:rows) AS r
JOIN jobs AS j
  ON j.job_id = json_extract(r.value, '$.job_id')
 AND j.revision = json_extract(r.value, '$.job_revision')
 AND j.enabled = 1
WHERE true
ORDER BY r.key
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING occurrence_id
