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
