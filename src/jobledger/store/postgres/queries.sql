-- PostgreSQL's own text for the queries whose SQL differs from SQLite's (the rest are in
-- ../queries.sql). ../sqlite/queries.sql defines exactly the same names. Parameters are
-- psycopg's named placeholders, written natively here. Tables are unqualified: every
-- transaction sets search_path to the store's schema.
--
-- Claims lock their rows with FOR UPDATE SKIP LOCKED, so concurrent workers each take different
-- rows instead of queueing behind one; rows another transaction is settling are skipped too.
-- Limits and pause serialize on transaction-scoped advisory locks (docs/postgres.md): every
-- query below whose plan matters is an index probe whose leading columns are bound by equality,
-- so the plan does not depend on planner statistics.

-- name: upsert_authority
-- An authority envelope is stored once, unique by the SHA-256 of its canonical JSON (a btree
-- cannot hold an arbitrarily long text); a no-op update makes the existing row's id come back.
INSERT INTO jobledger_authorities (digest, authority_json)
VALUES (encode(sha256(convert_to(%(authority_json)s, 'UTF8')), 'hex'), %(authority_json)s)
ON CONFLICT (digest) DO UPDATE SET digest = excluded.digest
RETURNING authority_id

-- name: authorities_by_id
SELECT authority_id, authority_json FROM jobledger_authorities
WHERE authority_id = ANY(%(ids)s::bigint[])

-- name: expired_leases
SELECT seq, occurrence_id, job_id, status, fence, lease_owner, attempt, max_attempts, adjudicate,
       kind, queue, partition_key, priority, scheduled_for, lease_expires_at, workspace_id,
       runnable, updated_at, started_at
FROM occurrences
-- Only running rows hold a lease (the CHECK): naming the lease alone keeps this on the leases
-- index in expiry order (see 0004's jobledger_occurrences_leases).
WHERE lease_expires_at <= %(now)s
ORDER BY lease_expires_at, seq
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: waiting_due
SELECT seq, queue, kind, partition_key, workspace_id, runnable FROM occurrences
WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND available_at <= %(now)s
ORDER BY available_at, seq
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: set_gate
UPDATE occurrences SET gate = %(gate)s
WHERE seq = ANY(%(ids)s::bigint[]) AND status IN ('queued', 'retry_wait')

-- name: best_held
SELECT seq FROM occurrences
WHERE queue = %(queue)s AND partition_key = %(partition_key)s
  AND status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id COLLATE "C"
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: held_partitions
WITH RECURSIVE parts(partition_key) AS (
  SELECT (SELECT partition_key FROM occurrences
          WHERE queue = %(queue)s AND status IN ('queued', 'retry_wait') AND gate = 2
            AND runnable = 1
          ORDER BY partition_key LIMIT 1)
  UNION ALL
  SELECT (SELECT o.partition_key FROM occurrences AS o
          WHERE o.queue = %(queue)s AND o.status IN ('queued', 'retry_wait') AND o.gate = 2
            AND o.runnable = 1 AND o.partition_key > parts.partition_key
          ORDER BY o.partition_key LIMIT 1)
  FROM parts WHERE parts.partition_key IS NOT NULL
)
SELECT partition_key FROM parts WHERE partition_key IS NOT NULL

-- name: ready_lanes
WITH RECURSIVE lanes(queue, kind) AS (
  (SELECT queue, kind FROM occurrences
   WHERE status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1 AND priority >= -100
   ORDER BY queue, kind LIMIT 1)
  UNION ALL
  SELECT nxt.queue, nxt.kind FROM lanes
  CROSS JOIN LATERAL (
    SELECT o.queue, o.kind FROM occurrences AS o
    WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 0 AND o.runnable = 1
      AND o.priority >= -100 AND (o.queue, o.kind) > (lanes.queue, lanes.kind)
    ORDER BY o.queue, o.kind LIMIT 1
  ) AS nxt
)
SELECT queue, kind FROM lanes

-- name: ready_lanes_in_workspace
WITH RECURSIVE lanes(queue, kind) AS (
  (SELECT queue, kind FROM occurrences
   WHERE workspace_id = %(workspace_id)s AND workspace_id IS NOT NULL
     AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
   ORDER BY queue, kind LIMIT 1)
  UNION ALL
  SELECT nxt.queue, nxt.kind FROM lanes
  CROSS JOIN LATERAL (
    SELECT o.queue, o.kind FROM occurrences AS o
    WHERE o.workspace_id = %(workspace_id)s AND o.workspace_id IS NOT NULL
      AND o.status IN ('queued', 'retry_wait') AND o.gate = 0 AND o.runnable = 1
      AND (o.queue, o.kind) > (lanes.queue, lanes.kind)
    ORDER BY o.queue, o.kind LIMIT 1
  ) AS nxt
)
SELECT queue, kind FROM lanes

-- name: ready_probe
-- Every lane asked for at once: one index probe per (queue, kind) with its own room (LATERAL),
-- locked with SKIP LOCKED, merged in claim order. "priority >= -100" (always true) names the
-- ready index's predicate, which only the probes that take every workspace state.
SELECT c.* FROM unnest(%(queues)s::text[], %(kinds)s::text[], %(rooms)s::int[])
  AS lane(queue, kind, room)
CROSS JOIN LATERAL (
  SELECT o.seq, o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.queue, o.kind,
         o.priority, o.available_at AS due_at, o.scheduled_for, o.partition_key
  FROM occurrences AS o
  WHERE o.queue = lane.queue AND o.kind = lane.kind
    AND o.status IN ('queued', 'retry_wait') AND o.gate = 0 AND o.runnable = 1
    AND o.priority >= -100 AND o.available_at <= %(now)s AND o.attempt < o.max_attempts
  ORDER BY o.priority DESC, o.available_at, o.scheduled_for, o.occurrence_id COLLATE "C"
  LIMIT lane.room
  FOR UPDATE OF o SKIP LOCKED
) AS c
ORDER BY c.priority DESC, c.due_at, c.scheduled_for, c.occurrence_id COLLATE "C"

-- name: ready_probe_in_workspace
SELECT c.* FROM unnest(%(queues)s::text[], %(kinds)s::text[], %(rooms)s::int[])
  AS lane(queue, kind, room)
CROSS JOIN LATERAL (
  SELECT o.seq, o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.queue, o.kind,
         o.priority, o.available_at AS due_at, o.scheduled_for, o.partition_key
  FROM occurrences AS o
  WHERE o.workspace_id = %(workspace_id)s AND o.workspace_id IS NOT NULL
    AND o.queue = lane.queue AND o.kind = lane.kind
    AND o.status IN ('queued', 'retry_wait') AND o.gate = 0 AND o.runnable = 1
    AND o.available_at <= %(now)s AND o.attempt < o.max_attempts
  ORDER BY o.priority DESC, o.available_at, o.scheduled_for, o.occurrence_id COLLATE "C"
  LIMIT lane.room
  FOR UPDATE OF o SKIP LOCKED
) AS c
ORDER BY c.priority DESC, c.due_at, c.scheduled_for, c.occurrence_id COLLATE "C"

-- name: next_ready
SELECT occurrence_id, job_id, status, queue, kind, priority, scheduled_for,
       available_at AS due_at
FROM occurrences
WHERE queue = %(queue)s AND kind = %(kind)s
  AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1 AND priority >= -100
  AND available_at <= %(now)s
ORDER BY priority DESC, available_at, scheduled_for, occurrence_id COLLATE "C"
LIMIT 1

-- name: claim_target
-- A plain FOR UPDATE: a concurrent claim of the same row makes this wait, and the store then
-- sees the row as that claim left it.
SELECT o.seq, o.occurrence_id, o.job_id, o.status, o.fence, o.lease_owner, o.attempt,
       o.max_attempts, o.available_at, o.lease_expires_at, o.gate, o.queue, o.kind,
       o.partition_key, o.priority, o.scheduled_for, o.adjudicate, o.runnable,
       o.updated_at, o.started_at,
       j.enabled
FROM occurrences AS o JOIN jobs AS j ON j.job_id = o.job_id
WHERE o.occurrence_id = %(occurrence_id)s
FOR UPDATE OF o

-- name: apply_claims
-- Lease every picked (and locked) row in one statement (%(ids)s is a bigint array of seqs).
UPDATE occurrences
SET status = 'running',
    attempt = attempt + 1,
    fence = fence + 1,
    lease_owner = %(owner_id)s,
    lease_expires_at = (CASE WHEN updated_at > %(now)s THEN updated_at ELSE %(now)s END) + %(lease_ms)s,
    updated_at = CASE WHEN updated_at > %(now)s THEN updated_at ELSE %(now)s END,
    settled_at = NULL,
    started_at = CASE WHEN seq = ANY(%(starts)s::bigint[])
      THEN (CASE WHEN updated_at > %(now)s THEN updated_at ELSE %(now)s END) ELSE NULL END
WHERE seq = ANY(%(ids)s::bigint[])
  AND attempt < max_attempts
  AND (
    (status IN ('queued', 'retry_wait') AND gate = 0 AND available_at <= %(now)s)
    OR
    (status = 'running' AND lease_expires_at <= %(now)s AND started_at IS NOT NULL)
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
  (occurrence_id, job_id, job_revision, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_id, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable, queue, priority, partition_key, gate, adjudicate, trace_json,
   tags_json, meta_json)
SELECT e.occurrence_id, j.job_id, j.revision, e.trigger_key,
       e.scheduled_for, e.available_at, 'queued', 0, j.max_attempts, 0,
       NULL, NULL, j.authority_id, COALESCE(e.payload_json, j.payload_json),
       NULL, NULL, e.now, e.now, NULL,
       j.kind, e.workspace_id, 1,
       COALESCE(e.queue, j.queue), COALESCE(e.priority, j.priority), e.partition_key,
       CASE
         WHEN e.available_at > e.now THEN 1
         WHEN e.partition_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM jobledger_queues AS q
           WHERE q.name = COALESCE(e.queue, j.queue)
             AND (q.partition_concurrency IS NOT NULL OR q.partition_rate_limit IS NOT NULL)
         ) THEN 1
         ELSE 0
       END,
       CASE WHEN j.on_lost_lease = 'adjudicate' THEN 1 ELSE 0 END,
       e.trace_json, e.tags_json, e.meta_json
FROM ROWS FROM (
  json_to_recordset(%(rows)s::json)
    AS (occurrence_id text, trigger_key text, scheduled_for bigint,
        available_at bigint, payload_json text, now bigint, workspace_id text, job_id text,
        job_revision bigint, queue text, priority smallint, partition_key text,
        trace_json text, tags_json text, meta_json text)
) WITH ORDINALITY
  AS e(occurrence_id, trigger_key, scheduled_for, available_at, payload_json,
       now, workspace_id, job_id, job_revision, queue, priority, partition_key, trace_json,
       tags_json, meta_json, position)
JOIN jobs AS j
  ON j.job_id = e.job_id
 AND j.revision = e.job_revision
 AND j.enabled = 1
ORDER BY e.position
ON CONFLICT (occurrence_id) DO NOTHING
RETURNING occurrence_id, seq, queue, priority

-- name: count_ready_in_queue
-- Ready rows of a queue, bounded by :cap; "priority >= -100" lets the claim index serve it, and
-- the index's order (which the count does not need) keeps the planner on it with statistics
-- that make the status index look cheaper.
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = %(queue)s AND status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1
    AND priority >= -100
  ORDER BY kind, priority DESC
  LIMIT %(cap)s
) AS ready

-- name: count_held_in_queue
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = %(queue)s AND status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
  ORDER BY partition_key, priority DESC
  LIMIT %(cap)s
) AS held

-- name: held_queues
-- Queues with held rows, skipping through the held index one queue at a time.
WITH RECURSIVE found(queue) AS (
  SELECT (SELECT queue FROM occurrences
          WHERE status IN ('queued', 'retry_wait') AND gate = 2 AND runnable = 1
          ORDER BY queue LIMIT 1)
  UNION ALL
  SELECT (SELECT o.queue FROM occurrences AS o
          WHERE o.status IN ('queued', 'retry_wait') AND o.gate = 2 AND o.runnable = 1
            AND o.queue > found.queue
          ORDER BY o.queue LIMIT 1)
  FROM found WHERE found.queue IS NOT NULL
)
SELECT queue FROM found WHERE queue IS NOT NULL

-- name: waiting_by_queue
-- The :cap earliest-due waiting rows, counted per queue: a walk of the waiting index (its order,
-- available_at then seq) that stops at the cap; past it, every count is a lower bound.
SELECT queue, COUNT(*) AS n FROM (
  SELECT queue FROM occurrences
  WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND runnable = 1
  ORDER BY available_at, seq
  LIMIT %(cap)s
) AS waiting
GROUP BY queue

-- name: blocked_by_queue
-- At most :cap blocked rows (waiting for parents), counted per queue, through the status index.
-- No order: which rows a capped count sees does not matter, and an ORDER BY let the planner
-- without statistics sort every blocked row.
SELECT queue, COUNT(*) AS n FROM (
  SELECT queue FROM occurrences
  WHERE status = 'blocked'
  LIMIT %(cap)s
) AS blocked
GROUP BY queue

-- name: store_identity
-- This store's id, made once with the schema, and the database's name: a caller's connection
-- must be on this very store (a clone of the database carries the same id, not the same name).
SELECT store_id || '/' || current_database() AS store_id FROM jobledger_store

-- name: occurrences_by_ids
-- What linking a child needs of it and of its parents (SPEC §10). FOR SHARE: a parent settling
-- concurrently either waits for this transaction (and then sees the new edge when it looks for
-- blocked children) or has committed first (and this read sees it decided) — under READ
-- COMMITTED neither can miss the other, so no child stays blocked on a decided parent.
SELECT * FROM occurrences
WHERE occurrence_id = ANY(%(ids)s::text[])
ORDER BY seq
FOR SHARE

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
WHERE d.parent_seq = ANY(%(ids)s::bigint[]) AND c.status = 'blocked'

-- name: release_children
-- These parents (by seq) are decided and count for their blocked children: each child waits
-- for as many parents fewer as it has among them (edges found through the primary key,
-- grouped per child: O(edges of these parents), whatever else a child waits for); the last one
-- makes it queued, due at the later of its due instant and now, through staging (gate 1).
UPDATE occurrences
SET pending_parents = pending_parents - s.n,
    status = CASE WHEN pending_parents = s.n THEN 'queued' ELSE 'blocked' END,
    available_at = CASE
      WHEN pending_parents = s.n AND available_at < %(now)s THEN %(now)s ELSE available_at END,
    gate = 1,
    updated_at = CASE WHEN updated_at > %(now)s THEN updated_at ELSE %(now)s END
FROM (
  SELECT d.child_seq, COUNT(*) AS n FROM jobledger_dependencies AS d
  WHERE d.parent_seq = ANY(%(ids)s::bigint[])
  GROUP BY d.child_seq
) AS s
WHERE occurrences.seq = s.child_seq AND occurrences.status = 'blocked'
RETURNING occurrences.seq, occurrences.occurrence_id, occurrences.job_id, occurrences.status,
          occurrences.updated_at

-- ===========================================================================================
-- operator reads and prune (store/operations/listing.py, admin.py): rows by seq, and a prune
-- batch's deletes, one statement per table for the whole batch (:seqs, an array).

-- name: occurrences_by_seqs
SELECT * FROM occurrences WHERE seq = ANY(%(seqs)s::bigint[]) ORDER BY seq DESC

-- name: delete_keys_of_seqs
-- A key is removed with the occurrence it names (a later enqueue of the key makes a new one).
DELETE FROM jobledger_keys AS k
USING occurrences AS o
WHERE o.seq = ANY(%(seqs)s::bigint[]) AND k.occurrence_id = o.occurrence_id

-- name: delete_tags_of_seqs
-- A row's tags go with it: its (tag, seq) pairs, each a probe of the primary key.
DELETE FROM jobledger_tags AS t
USING occurrences AS o, json_array_elements_text(o.tags_json::json) AS g(tag)
WHERE o.seq = ANY(%(seqs)s::bigint[]) AND o.tags_json IS NOT NULL
  AND t.tag = g.tag AND t.seq = o.seq

-- name: delete_dependencies_of_seqs
DELETE FROM jobledger_dependencies WHERE parent_seq = ANY(%(seqs)s::bigint[])

-- name: delete_dependents_of_seqs
DELETE FROM jobledger_dependencies WHERE child_seq = ANY(%(seqs)s::bigint[])

-- name: delete_adjudications_of_seqs
DELETE FROM jobledger_adjudications AS a
USING occurrences AS o
WHERE o.seq = ANY(%(seqs)s::bigint[]) AND a.occurrence_id = o.occurrence_id

-- name: delete_requeues_of_seqs
DELETE FROM jobledger_requeues AS r
USING occurrences AS o
WHERE o.seq = ANY(%(seqs)s::bigint[]) AND r.occurrence_id = o.occurrence_id

-- name: delete_events_of_seqs
DELETE FROM events AS e
USING occurrences AS o
WHERE o.seq = ANY(%(seqs)s::bigint[]) AND e.occurrence_id = o.occurrence_id

-- name: delete_occurrences_of_seqs
DELETE FROM occurrences WHERE seq = ANY(%(seqs)s::bigint[])

-- name: due_waiting
-- Waiting rows already due, oldest first: the next claim promotes them to their lane, so an
-- operator's "what is due" (oldest_due) counts them as well.
SELECT occurrence_id, job_id, status, queue, kind, priority, available_at AS due_at
FROM occurrences
WHERE status IN ('queued', 'retry_wait') AND gate = 1 AND runnable = 1
  AND available_at <= %(now)s
ORDER BY available_at
LIMIT %(limit)s


-- name: list_dead_letters
-- Most recently settled first, through the partial index of dead letters (no other row is in
-- it): a page is one backward range of it however much other history the table holds.
SELECT * FROM occurrences WHERE status = 'dead_letter'
ORDER BY settled_at DESC, occurrence_id LIMIT %(limit)s

-- name: list_dead_letters_by_job
SELECT * FROM occurrences WHERE status = 'dead_letter' AND job_id = %(job_id)s
ORDER BY settled_at DESC, occurrence_id LIMIT %(limit)s

-- name: adjudication_candidates
-- Outcome-unknown dead letters whose lost attempt (fence) has no decision (a decision on an
-- earlier lost attempt leaves a later one a case), most recently settled first along the
-- outcome-unknown dead letters' own index (jobledger_occurrences_outcome_unknown, whose
-- predicate is this LIKE, written out so the planner proves it): decided cases leave it, so the
-- walk is as long as the open cases, not the dead letters. The error code is checked exactly by
-- the caller (LIKE only narrows: '_' matches any character).
SELECT * FROM occurrences o
WHERE o.status = 'dead_letter'
  AND o.last_error_json LIKE '%%_OUTCOME_UNKNOWN"%%'
  AND NOT EXISTS (
    SELECT 1 FROM jobledger_adjudications a
    WHERE a.occurrence_id = o.occurrence_id AND a.expected_fence = o.fence)
ORDER BY o.settled_at DESC, o.occurrence_id
LIMIT %(limit)s

-- name: lease_holders
SELECT lease_owner, COUNT(*) AS n, MIN(lease_expires_at) AS earliest_expiry,
       MAX(lease_expires_at) AS latest_expiry
FROM occurrences WHERE status = 'running'
GROUP BY lease_owner
ORDER BY lease_owner

-- name: count_running_in_queue
-- Bounded by the limit (cap): a count that reaches it is "full", whatever the backlog.
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = %(queue)s AND status = 'running'
  LIMIT %(cap)s
) AS running

-- name: live_of_job
-- A scheduled job's live occurrences, oldest first (the overlap policy, SPEC §12): the status
-- index (status, kind, seq) holds them; the job's index would walk its whole history.
SELECT occurrence_id, status, lease_owner, fence, queue, partition_key FROM occurrences
WHERE status IN ('queued', 'retry_wait', 'running') AND kind = %(kind)s AND job_id = %(job_id)s
ORDER BY seq

-- name: history_page_by_job_type
-- A job's events of one type: that type's range of jobledger_events_type, the job checked on
-- each entry (see history_page in store/queries.sql). The job is compared as "job_id || ''", an
-- expression no index holds: without statistics the planner would take the job's index and
-- walk the job's whole history for a rare job-level type (SQLite pins the index instead).
SELECT * FROM events
WHERE event_type = %(event_type)s AND job_id || '' = %(job_id)s
  AND event_id < COALESCE(CAST(%(before_id)s AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(%(after_id)s AS BIGINT), 0)
ORDER BY event_id DESC
LIMIT %(limit)s

-- name: history_after_by_job_type
SELECT * FROM events
WHERE event_type = %(event_type)s AND job_id || '' = %(job_id)s AND event_id > %(after_id)s
ORDER BY event_id
LIMIT %(limit)s
-- Finding work (issue 32): a queue's and a partition's occurrences, newest first, each one
-- backward range of its index (jobledger_occurrences_queue, jobledger_occurrences_partition);
-- the *_rows_scan twins walk the same range with what the other filters need. "seq > 0" (always
-- true) is what lets them, and only them, use those partial indexes (see the migration).

-- name: list_occurrences_by_queue
SELECT * FROM occurrences
WHERE queue = %(queue)s AND seq < %(before_seq)s AND seq > 0
ORDER BY seq DESC
LIMIT %(limit)s

-- name: queue_rows_scan
SELECT seq, status, kind, job_id, queue, partition_key, tags_json FROM occurrences
WHERE queue = %(queue)s AND seq < %(before_seq)s AND seq > 0
ORDER BY seq DESC
LIMIT %(limit)s

-- name: list_occurrences_by_partition
SELECT * FROM occurrences
WHERE partition_key = %(partition)s AND seq < %(before_seq)s AND seq > 0
ORDER BY seq DESC
LIMIT %(limit)s

-- name: partition_rows_scan
SELECT seq, status, kind, job_id, queue, partition_key, tags_json FROM occurrences
WHERE partition_key = %(partition)s AND seq < %(before_seq)s AND seq > 0
ORDER BY seq DESC
LIMIT %(limit)s

-- name: insert_tags
-- New occurrences under their tags (%(rows)s, a JSON array of {tag, seq}).
INSERT INTO jobledger_tags (tag, seq)
SELECT r.tag, r.seq FROM json_to_recordset(%(rows)s::json) AS r(tag text, seq bigint)
ON CONFLICT (tag, seq) DO NOTHING

-- name: delete_tags_of_job
-- A removed job's occurrences' tags (read from each row's tags_json, through the job index).
DELETE FROM jobledger_tags AS t
USING occurrences AS o, json_array_elements_text(o.tags_json::json) AS g(tag)
WHERE o.job_id = %(job_id)s AND o.tags_json IS NOT NULL
  AND t.tag = g.tag AND t.seq = o.seq
