-- SQLite's own text for the queries whose SQL differs from PostgreSQL's (the rest are in
-- ../queries.sql). ../postgres/queries.sql defines exactly the same names.
--
-- The claim lane (schema v4, docs/schema.md): ready rows per (queue, kind) in claim order in
-- jobledger_occurrences_ready; waiting rows by due instant; held rows per partition; running rows
-- by lease expiry. INDEXED BY pins each plan: once ANALYZE statistics exist, SQLite could
-- otherwise prefer an index that makes a claim walk rows it may not take (query-plan tests
-- guard this). SQLite has one writer at a time, so a claim needs no locks of its own.

-- name: upsert_authority
-- An authority envelope is stored once (its canonical JSON is unique); a no-op update makes the
-- existing row's id come back too.
INSERT INTO jobledger_authorities (authority_json) VALUES (:authority_json)
ON CONFLICT (authority_json) DO UPDATE SET authority_json = excluded.authority_json
RETURNING authority_id

-- name: authorities_by_id
SELECT authority_id, authority_json FROM jobledger_authorities
WHERE authority_id IN (SELECT value FROM json_each(:ids))

-- name: expired_leases
-- Running rows whose lease has expired, oldest first: reclaims, and the final or outcome-unknown
-- ones that become dead letters.
SELECT seq, occurrence_id, job_id, status, fence, lease_owner, attempt, max_attempts, adjudicate,
       kind, queue, partition_key, priority, scheduled_for, lease_expires_at, workspace_id,
       runnable, updated_at, started_at
FROM occurrences INDEXED BY jobledger_occurrences_leases
WHERE status = 'running' AND lease_expires_at <= :now
ORDER BY lease_expires_at, seq
LIMIT :limit

-- name: waiting_due
-- Staging: waiting rows that are due now, oldest first.
SELECT seq, queue, kind, partition_key, workspace_id, runnable
FROM occurrences INDEXED BY jobledger_occurrences_waiting
WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND available_at <= :now
ORDER BY available_at
LIMIT :limit

-- name: set_gate
UPDATE occurrences SET gate = :gate
WHERE seq IN (SELECT value FROM json_each(:ids)) AND +status IN ('queued', 'retry_wait')

-- name: best_held
-- A partition's held rows in claim order (the next ones to admit).
SELECT seq FROM occurrences INDEXED BY jobledger_occurrences_held
WHERE queue = :queue AND partition_key = :partition_key
  AND status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id
LIMIT :limit

-- name: held_partitions
-- The distinct partitions of a queue with held rows, by skipping through the held index.
WITH RECURSIVE parts(partition_key) AS (
  SELECT (SELECT partition_key FROM occurrences INDEXED BY jobledger_occurrences_held
          WHERE queue = :queue AND status IN ('queued', 'retry_wait') AND gate = 2
            AND runnable = 1
          ORDER BY partition_key LIMIT 1)
  UNION ALL
  SELECT (SELECT o.partition_key FROM occurrences AS o INDEXED BY jobledger_occurrences_held
          WHERE o.queue = :queue AND o.status IN ('queued', 'retry_wait') AND o.gate = 2
            AND o.runnable = 1 AND o.partition_key > parts.partition_key
          ORDER BY o.partition_key LIMIT 1)
  FROM parts WHERE parts.partition_key IS NOT NULL
)
SELECT partition_key FROM parts WHERE partition_key IS NOT NULL

-- name: ready_lanes
-- The (queue, kind) lanes that hold ready rows, by skipping through the claim index one lane at
-- a time (O(lanes · log n)), for claims that do not name both their queues and kinds. Each step
-- seeks the next kind in the same queue, else the first lane of the next queue: a row-value
-- comparison (queue, kind) > (…) would seek on queue alone and walk the lane it leaves.
WITH RECURSIVE lanes(queue, kind) AS (
  SELECT * FROM (
    SELECT queue, kind FROM occurrences INDEXED BY jobledger_occurrences_ready
    WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    ORDER BY queue, kind LIMIT 1
  )
  UNION ALL
  SELECT
    -- the next kind in this queue, else the first lane of the next queue
    COALESCE(
    (SELECT o.queue FROM occurrences AS o INDEXED BY jobledger_occurrences_ready
     WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue = lanes.queue AND o.kind > lanes.kind
     ORDER BY o.kind LIMIT 1),
    (SELECT o.queue FROM occurrences AS o INDEXED BY jobledger_occurrences_ready
     WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue > lanes.queue
     ORDER BY o.queue, o.kind LIMIT 1)),
    COALESCE(
    (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready
     WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue = lanes.queue AND o.kind > lanes.kind
     ORDER BY o.kind LIMIT 1),
    (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready
     WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue > lanes.queue
     ORDER BY o.queue, o.kind LIMIT 1))
  FROM lanes WHERE lanes.queue IS NOT NULL
)
SELECT queue, kind FROM lanes WHERE queue IS NOT NULL

-- name: ready_lanes_in_workspace
WITH RECURSIVE lanes(queue, kind) AS (
  SELECT * FROM (
    SELECT queue, kind FROM occurrences INDEXED BY jobledger_occurrences_ready_workspace
    WHERE workspace_id = :workspace_id AND workspace_id IS NOT NULL
      AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    ORDER BY queue, kind LIMIT 1
  )
  UNION ALL
  SELECT
    -- the next kind in this queue, else the first lane of the next queue
    COALESCE(
    (SELECT o.queue FROM occurrences AS o INDEXED BY jobledger_occurrences_ready_workspace
     WHERE o.workspace_id = :workspace_id AND o.workspace_id IS NOT NULL AND o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue = lanes.queue AND o.kind > lanes.kind
     ORDER BY o.kind LIMIT 1),
    (SELECT o.queue FROM occurrences AS o INDEXED BY jobledger_occurrences_ready_workspace
     WHERE o.workspace_id = :workspace_id AND o.workspace_id IS NOT NULL AND o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue > lanes.queue
     ORDER BY o.queue, o.kind LIMIT 1)),
    COALESCE(
    (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready_workspace
     WHERE o.workspace_id = :workspace_id AND o.workspace_id IS NOT NULL AND o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue = lanes.queue AND o.kind > lanes.kind
     ORDER BY o.kind LIMIT 1),
    (SELECT o.kind FROM occurrences AS o INDEXED BY jobledger_occurrences_ready_workspace
     WHERE o.workspace_id = :workspace_id AND o.workspace_id IS NOT NULL AND o.status IN ('queued', 'retry_wait') AND o.gate = 0
       AND o.runnable = 1 AND o.queue > lanes.queue
     ORDER BY o.queue, o.kind LIMIT 1))
  FROM lanes WHERE lanes.queue IS NOT NULL
)
SELECT queue, kind FROM lanes WHERE queue IS NOT NULL

-- name: ready_probe
-- One lane, in claim order; the store merges the lanes it probes in Python.
SELECT seq, occurrence_id, job_id, status, fence, lease_owner, queue, kind, priority,
       available_at AS due_at, scheduled_for, partition_key
FROM occurrences INDEXED BY jobledger_occurrences_ready
WHERE queue = :queue AND kind = :kind
  AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
  AND available_at <= :now AND attempt < max_attempts
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id
LIMIT :limit

-- name: ready_probe_in_workspace
SELECT seq, occurrence_id, job_id, status, fence, lease_owner, queue, kind, priority,
       available_at AS due_at, scheduled_for, partition_key
FROM occurrences INDEXED BY jobledger_occurrences_ready_workspace
WHERE workspace_id = :workspace_id AND workspace_id IS NOT NULL
  AND queue = :queue AND kind = :kind
  AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
  AND available_at <= :now AND attempt < max_attempts
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id
LIMIT :limit

-- name: next_ready
-- The next row a claim of one lane would take (for operators: stats, metrics, explain).
SELECT occurrence_id, job_id, status, queue, kind, priority, scheduled_for,
       available_at AS due_at
FROM occurrences INDEXED BY jobledger_occurrences_ready
WHERE queue = :queue AND kind = :kind
  AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
  AND available_at <= :now
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id
LIMIT 1

-- name: claim_target
-- A targeted claim's row: the conditions are checked by the store, which reads it first.
SELECT o.seq, o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.attempt,
       o.max_attempts, o.available_at, o.lease_expires_at, o.gate, o.queue, o.kind,
       o.partition_key, o.priority, o.scheduled_for, o.adjudicate, o.runnable,
       o.updated_at, o.started_at,
       j.enabled
FROM occurrences AS o JOIN jobs AS j ON j.job_id = o.job_id
WHERE o.occurrence_id = :occurrence_id

-- name: apply_claims
-- Lease every picked row in one statement (:ids is a JSON array of seqs). The claim conditions
-- are checked again, so a row that changed since it was picked is left alone. The unary + keeps
-- SQLite from reading a status index for them instead of looking the seqs up by rowid.
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = :owner_id,
    lease_expires_at = (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) + :lease_ms,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = NULL,
    started_at = CASE WHEN seq IN (SELECT value FROM json_each(:starts))
      THEN (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) ELSE NULL END
WHERE seq IN (SELECT value FROM json_each(:ids))
  AND attempt < max_attempts
  AND (
    (+status IN ('queued', 'retry_wait') AND +gate = 0 AND available_at <= :now)
    OR
    (+status = 'running' AND lease_expires_at <= :now AND started_at IS NOT NULL)
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
  (occurrence_id, job_id, job_revision, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_id, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable, queue, priority, partition_key, gate, adjudicate, trace_json,
   tags_json, meta_json)
SELECT r.occurrence_id, j.job_id, j.revision, r.trigger_key,
       r.scheduled_for, r.available_at, 'queued', 0, j.max_attempts, 0,
       NULL, NULL, j.authority_id, COALESCE(r.payload_json, j.payload_json),
       NULL, NULL, r.now, r.now, NULL,
       j.kind, r.workspace_id, 1,
       COALESCE(r.queue, j.queue), COALESCE(r.priority, j.priority), r.partition_key,
       CASE
         WHEN r.available_at > r.now THEN 1
         WHEN r.partition_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM jobledger_queues AS q
           WHERE q.name = COALESCE(r.queue, j.queue)
             AND (q.partition_concurrency IS NOT NULL OR q.partition_rate_limit IS NOT NULL)
         ) THEN 1
         ELSE 0
       END,
       CASE WHEN j.on_lost_lease = 'adjudicate' THEN 1 ELSE 0 END,
       r.trace_json, r.tags_json, r.meta_json
FROM (
  SELECT e.key AS position,
         json_extract(e.value, '$.occurrence_id') AS occurrence_id,
         json_extract(e.value, '$.job_id') AS job_id,
         json_extract(e.value, '$.job_revision') AS job_revision,
         json_extract(e.value, '$.trigger_key') AS trigger_key,
         json_extract(e.value, '$.scheduled_for') AS scheduled_for,
         json_extract(e.value, '$.available_at') AS available_at,
         json_extract(e.value, '$.payload_json') AS payload_json,
         json_extract(e.value, '$.now') AS now,
         json_extract(e.value, '$.workspace_id') AS workspace_id,
         json_extract(e.value, '$.queue') AS queue,
         json_extract(e.value, '$.priority') AS priority,
         json_extract(e.value, '$.partition_key') AS partition_key,
         json_extract(e.value, '$.trace_json') AS trace_json,
         json_extract(e.value, '$.tags_json') AS tags_json,
         json_extract(e.value, '$.meta_json') AS meta_json
  FROM json_each(:rows) AS e
) AS r
JOIN jobs AS j
  ON j.job_id = r.job_id
 AND j.revision = r.job_revision
 AND j.enabled = 1
WHERE true
ORDER BY r.position
ON CONFLICT (occurrence_id) DO NOTHING
RETURNING occurrence_id, seq, queue, priority

-- name: count_ready_in_queue
-- Ready rows of a queue, bounded by :cap (the claim index, led by the queue).
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences INDEXED BY jobledger_occurrences_ready
  WHERE queue = :queue AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
  LIMIT :cap
)

-- name: count_held_in_queue
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences INDEXED BY jobledger_occurrences_held
  WHERE queue = :queue AND status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
  LIMIT :cap
)

-- name: held_queues
-- Queues with held rows, skipping through the held index one queue at a time.
WITH RECURSIVE found(queue) AS (
  SELECT (SELECT queue FROM occurrences INDEXED BY jobledger_occurrences_held
          WHERE status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
          ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT o.queue FROM occurrences AS o INDEXED BY jobledger_occurrences_held
          WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 2 AND o.runnable = 1
            AND o.queue > found.queue
          ORDER BY o.queue LIMIT 1)
  FROM found WHERE found.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL

-- name: waiting_by_queue
-- The :cap earliest-due waiting rows, counted per queue: a walk of the waiting index that stops
-- at the cap (past it, every count is a lower bound). Named, because the status index would
-- read every queued row and sort them.
SELECT queue, COUNT(*) AS n FROM (
  SELECT queue FROM occurrences INDEXED BY jobledger_occurrences_waiting
  WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND runnable = 1
  ORDER BY available_at
  LIMIT :cap
) AS waiting
GROUP BY queue

-- name: blocked_by_queue
-- At most :cap blocked rows (waiting for parents), counted per queue, through the status index
-- (pinned: with statistics SQLite would scan the table until it found :cap of them).
SELECT queue, COUNT(*) AS n FROM (
  SELECT queue FROM occurrences INDEXED BY jobledger_occurrences_status
  WHERE status = 'blocked'
  LIMIT :cap
) AS blocked
GROUP BY queue

-- name: store_identity
-- This store's id, made once with the schema (a caller's connection must be on this very store).
SELECT store_id FROM jobledger_store

-- name: occurrences_by_ids
-- What linking a child needs of it and of its parents (SPEC §10); no lock needed: one writer at
-- a time, so no parent settles between this read and the commit.
SELECT * FROM occurrences
WHERE occurrence_id IN (SELECT value FROM json_each(:ids))

-- name: parents_with_blocked_children
-- Which of these just-terminal occurrences (by seq) have a blocked child: one primary-key probe
-- per parent, so settling work that has no children costs one cheap probe per batch; and
-- whether each was requeued (then its earlier outcome may have decided its children already).
SELECT DISTINCT d.parent_seq,
       EXISTS (
         SELECT 1 FROM jobledger_requeues AS r
         JOIN occurrences AS p ON p.occurrence_id = r.occurrence_id
         WHERE p.seq = d.parent_seq
       ) AS requeued
FROM jobledger_dependencies AS d
JOIN occurrences AS c ON c.seq = d.child_seq
WHERE d.parent_seq IN (SELECT value FROM json_each(:ids)) AND c.status = 'blocked'

-- name: release_children
-- These parents (by seq) are decided and count for their blocked children: each child waits
-- for as many parents fewer as it has among them (edges found through the primary key,
-- grouped per child: O(edges of these parents), whatever else a child waits for); the last one
-- makes it queued, due at the later of its due instant and now, through staging (gate 1).
UPDATE occurrences
SET pending_parents = pending_parents - s.n,
    status = CASE WHEN pending_parents = s.n THEN 'queued' ELSE 'blocked' END,
    available_at = CASE
      WHEN pending_parents = s.n AND available_at < :now THEN :now ELSE available_at END,
    gate = 1,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
FROM (
  SELECT d.child_seq, COUNT(*) AS n FROM jobledger_dependencies AS d
  WHERE d.parent_seq IN (SELECT value FROM json_each(:ids))
  GROUP BY d.child_seq
) AS s
WHERE occurrences.seq = s.child_seq AND occurrences.status = 'blocked'
RETURNING occurrences.seq, occurrences.occurrence_id, occurrences.job_id, occurrences.status,
          occurrences.updated_at

-- ===========================================================================================
-- operator reads and prune (store/operations/listing.py, admin.py): rows by seq, and a prune
-- batch's deletes, one statement per table for the whole batch (:seqs, a JSON array).

-- name: occurrences_by_seqs
SELECT * FROM occurrences WHERE seq IN (SELECT value FROM json_each(:seqs)) ORDER BY seq DESC

-- name: delete_keys_of_seqs
-- A key is removed with the occurrence it names (a later enqueue of the key makes a new one).
DELETE FROM jobledger_keys
WHERE occurrence_id IN (
  SELECT o.occurrence_id FROM occurrences AS o WHERE o.seq IN (SELECT value FROM json_each(:seqs))
)

-- name: delete_tags_of_seqs
-- A row's tags go with it: its (tag, seq) pairs, each a probe of the primary key.
DELETE FROM jobledger_tags
WHERE (tag, seq) IN (
  SELECT t.value, o.seq FROM occurrences AS o, json_each(o.tags_json) AS t
  WHERE o.seq IN (SELECT value FROM json_each(:seqs)) AND o.tags_json IS NOT NULL
)

-- name: delete_dependencies_of_seqs
DELETE FROM jobledger_dependencies WHERE parent_seq IN (SELECT value FROM json_each(:seqs))

-- name: delete_dependents_of_seqs
DELETE FROM jobledger_dependencies WHERE child_seq IN (SELECT value FROM json_each(:seqs))

-- name: delete_adjudications_of_seqs
DELETE FROM jobledger_adjudications
WHERE occurrence_id IN (
  SELECT o.occurrence_id FROM occurrences AS o WHERE o.seq IN (SELECT value FROM json_each(:seqs))
)

-- name: delete_requeues_of_seqs
DELETE FROM jobledger_requeues
WHERE occurrence_id IN (
  SELECT o.occurrence_id FROM occurrences AS o WHERE o.seq IN (SELECT value FROM json_each(:seqs))
)

-- name: delete_events_of_seqs
DELETE FROM events
WHERE occurrence_id IN (
  SELECT o.occurrence_id FROM occurrences AS o WHERE o.seq IN (SELECT value FROM json_each(:seqs))
)

-- name: delete_occurrences_of_seqs
DELETE FROM occurrences WHERE seq IN (SELECT value FROM json_each(:seqs))

-- name: due_waiting
-- Waiting rows already due, oldest first: the next claim promotes them to their lane, so an
-- operator's "what is due" (oldest_due) counts them as well. Pinned to the waiting index: the
-- planner would otherwise take the status index and sort every queued row.
SELECT occurrence_id, job_id, status, queue, kind, priority, available_at AS due_at
FROM occurrences INDEXED BY jobledger_occurrences_waiting
WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND runnable = 1
  AND available_at <= :now
ORDER BY available_at
LIMIT :limit

-- Operator reads pinned to their index (the planner would take the status index and sort).

-- name: list_dead_letters
-- Most recently settled first, through the partial index of dead letters (no other row is in
-- it): a page is one backward range of it however much other history the table holds.
SELECT * FROM occurrences INDEXED BY jobledger_occurrences_dead_letters
WHERE status = 'dead_letter'
ORDER BY settled_at DESC, occurrence_id LIMIT :limit

-- name: list_dead_letters_by_job
SELECT * FROM occurrences INDEXED BY jobledger_occurrences_dead_letters_job
WHERE status = 'dead_letter' AND job_id = :job_id
ORDER BY settled_at DESC, occurrence_id LIMIT :limit

-- name: adjudication_candidates
-- Outcome-unknown dead letters whose lost attempt (fence) has no decision (a decision on an
-- earlier lost attempt leaves a later one a case), most recently settled first along the
-- outcome-unknown dead letters' own index (jobledger_occurrences_outcome_unknown, whose
-- predicate is this LIKE, written out so the planner proves it): decided cases leave it, so the
-- walk is as long as the open cases, not the dead letters. The error code is checked exactly by
-- the caller (LIKE only narrows: '_' matches any character).
SELECT * FROM occurrences o INDEXED BY jobledger_occurrences_outcome_unknown
WHERE o.status = 'dead_letter'
  AND o.last_error_json LIKE '%_OUTCOME_UNKNOWN"%'
  AND NOT EXISTS (
    SELECT 1 FROM jobledger_adjudications a
    WHERE a.occurrence_id = o.occurrence_id AND a.expected_fence = o.fence)
ORDER BY o.settled_at DESC, o.occurrence_id
LIMIT :limit

-- name: lease_holders
SELECT lease_owner, COUNT(*) AS n, MIN(lease_expires_at) AS earliest_expiry,
       MAX(lease_expires_at) AS latest_expiry
FROM occurrences INDEXED BY jobledger_occurrences_running
WHERE status = 'running'
GROUP BY lease_owner
ORDER BY lease_owner

-- name: count_running_in_queue
-- Bounded by the limit (cap): a count that reaches it is "full", whatever the backlog.
-- Pinned: without statistics SQLite would take the status index (status, kind).
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences INDEXED BY jobledger_occurrences_running
  WHERE queue = :queue AND status = 'running'
  LIMIT :cap
) AS running

-- name: live_of_job
-- A scheduled job's live occurrences, oldest first (the overlap policy, SPEC §12): probes of the
-- status index by (status, kind), so only live rows of the job's kind are read. Pinned: SQLite
-- would otherwise take the job's index and walk the job's whole history on every planner pass.
SELECT occurrence_id, status, lease_owner, fence, queue, partition_key
FROM occurrences INDEXED BY jobledger_occurrences_status
WHERE status IN ('queued', 'retry_wait', 'running') AND kind = :kind AND job_id = :job_id
ORDER BY seq

-- name: history_page_by_job_type
-- A job's events of one type: that type's range of jobledger_events_type, the job checked on
-- each entry (see history_page in store/queries.sql). Pinned: with statistics the planner would
-- take the job's index instead and walk the job's whole history for a rare job-level type.
SELECT * FROM events INDEXED BY jobledger_events_type
WHERE event_type = :event_type AND job_id = :job_id
  AND event_id < COALESCE(CAST(:before_id AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(:after_id AS BIGINT), 0)
ORDER BY event_id DESC
LIMIT :limit

-- name: history_after_by_job_type
SELECT * FROM events INDEXED BY jobledger_events_type
WHERE event_type = :event_type AND job_id = :job_id AND event_id > :after_id
ORDER BY event_id
LIMIT :limit
-- Finding work (issue 32): a queue's and a partition's occurrences, newest first, each one
-- backward range of its index (jobledger_occurrences_queue, jobledger_occurrences_partition);
-- the *_rows_scan twins walk the same range with what the other filters need. Pinned to their
-- index: with statistics of a store whose rows share one queue, the planner would walk the
-- rowid and filter.

-- name: list_occurrences_by_queue
SELECT * FROM occurrences INDEXED BY jobledger_occurrences_queue
WHERE queue = :queue AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: queue_rows_scan
SELECT seq, status, kind, job_id, queue, partition_key, tags_json
FROM occurrences INDEXED BY jobledger_occurrences_queue
WHERE queue = :queue AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: list_occurrences_by_partition
SELECT * FROM occurrences INDEXED BY jobledger_occurrences_partition
WHERE partition_key = :partition AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: partition_rows_scan
SELECT seq, status, kind, job_id, queue, partition_key, tags_json
FROM occurrences INDEXED BY jobledger_occurrences_partition
WHERE partition_key = :partition AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: insert_tags
-- New occurrences under their tags (:rows, a JSON array of {tag, seq}).
INSERT INTO jobledger_tags (tag, seq)
SELECT json_extract(r.value, '$.tag'), json_extract(r.value, '$.seq')
FROM json_each(:rows) AS r
WHERE true
ON CONFLICT (tag, seq) DO NOTHING

-- name: delete_tags_of_job
-- A removed job's occurrences' tags (read from each row's tags_json, through the job index).
DELETE FROM jobledger_tags
WHERE (tag, seq) IN (
  SELECT t.value, o.seq FROM occurrences AS o, json_each(o.tags_json) AS t
  WHERE o.job_id = :job_id AND o.tags_json IS NOT NULL
)
