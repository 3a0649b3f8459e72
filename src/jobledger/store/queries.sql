-- The store's named queries, written once for both dialects. Placeholders are :name; the
-- PostgreSQL store rewrites them to %(name)s when it loads this file. Blocks whose text really
-- differs between SQLite and PostgreSQL live in <dialect>/queries.sql instead, under the same
-- name in both (a test checks that every name resolves in both dialects and runs on both).

-- ===========================================================================================
-- jobs

-- name: get_job
SELECT * FROM jobs WHERE job_id = :job_id

-- name: insert_job
INSERT INTO jobs
  (job_id, kind, trigger_json, payload_json, authority_json,
   enabled, revision, max_attempts, created_at, updated_at,
   queue, priority, on_lost_lease, run_revision, authority_id, declared_json)
VALUES
  (:job_id, :kind, :trigger_json, :payload_json, :authority_json,
   :enabled, 1, :max_attempts, :now, :now,
   :queue, :priority, :on_lost_lease, 1, :authority_id, :declared_json)

-- name: update_job
UPDATE jobs
SET kind = :kind,
    trigger_json = :trigger_json,
    payload_json = :payload_json,
    authority_json = :authority_json,
    enabled = :enabled,
    revision = :next_revision,
    max_attempts = :max_attempts,
    updated_at = :now,
    queue = :queue,
    priority = :priority,
    on_lost_lease = :on_lost_lease,
    run_revision = :run_revision,
    authority_id = :authority_id,
    declared_json = :declared_json,
    operator_set_json = :operator_set_json
WHERE job_id = :job_id AND revision = :expected_revision

-- name: record_job_declaration
-- The declaration last applied from code (SPEC §14), when it changes nothing else.
UPDATE jobs SET declared_json = :declared_json
WHERE job_id = :job_id AND revision = :expected_revision
RETURNING *

-- name: sync_live_occurrences
-- A job's kind, workspace and enabled flag are copied onto its live occurrences, which is what
-- lets claims read one index lane per (queue, kind) (see the v3 and v4 migrations). Queue and
-- priority are not: an occurrence keeps the ones it was enqueued with (SPEC §7).
UPDATE occurrences
SET kind = :kind, workspace_id = :workspace_id, runnable = :runnable
WHERE job_id = :job_id
  AND status IN ('blocked', 'queued', 'running', 'retry_wait')
  AND (kind <> :kind OR runnable <> :runnable
       OR COALESCE(workspace_id, '') <> COALESCE(:workspace_id, ''))

-- name: follow_max_attempts
-- A job's new max_attempts, carried onto the live occurrences that follow it (SPEC §14): those
-- whose max_attempts is still the job's previous value. One an operator's requeue or an
-- adjudication granted keeps its grant. Never below what is spent: a running attempt still
-- counts, a queued or waiting occurrence keeps the attempt it is waiting for.
UPDATE occurrences
SET max_attempts = CASE
      WHEN status = 'running' AND attempt >= :max_attempts THEN attempt
      WHEN status <> 'running' AND attempt + 1 > :max_attempts THEN attempt + 1
      ELSE :max_attempts
    END
WHERE job_id = :job_id
  AND status IN ('blocked', 'queued', 'running', 'retry_wait')
  AND max_attempts = :previous_max_attempts
  AND NOT EXISTS (SELECT 1 FROM jobledger_requeues AS r
                  WHERE r.occurrence_id = occurrences.occurrence_id)
  AND NOT EXISTS (SELECT 1 FROM jobledger_adjudications AS a
                  WHERE a.occurrence_id = occurrences.occurrence_id)

-- name: list_jobs
SELECT * FROM jobs
WHERE (CAST(:after_id AS TEXT) IS NULL OR job_id > :after_id)
ORDER BY job_id
LIMIT :limit

-- name: job_names
-- Every job's two names, for the hint of an enqueue naming no job (an error path).
SELECT job_id, kind FROM jobs ORDER BY job_id LIMIT :limit

-- name: count_live_occurrences_of_job
SELECT COUNT(*) AS live FROM occurrences
WHERE job_id = :job_id AND status IN ('blocked', 'queued', 'running', 'retry_wait')

-- name: delete_requeues_of_job
DELETE FROM jobledger_requeues WHERE job_id = :job_id

-- name: delete_keys_of_job
DELETE FROM jobledger_keys WHERE job_id = :job_id

-- name: delete_adjudications_of_job
DELETE FROM jobledger_adjudications WHERE job_id = :job_id

-- name: delete_dependencies_of_job
DELETE FROM jobledger_dependencies
WHERE parent_seq IN (SELECT seq FROM occurrences WHERE job_id = :job_id)
   OR child_seq IN (SELECT seq FROM occurrences WHERE job_id = :job_id)

-- name: delete_events_of_job
DELETE FROM events WHERE job_id = :job_id

-- name: delete_occurrences_of_job
DELETE FROM occurrences WHERE job_id = :job_id

-- name: delete_job
DELETE FROM jobs WHERE job_id = :job_id AND revision = :expected_revision

-- ===========================================================================================
-- schedules (the planner's durable progress)

-- name: upsert_schedule
-- planned_through never moves back: on PostgreSQL an edit's clock is read when its transaction
-- began, and a planner may have recorded a later pass since; planning from the older instant
-- would plan those slots again under the new revision.
INSERT INTO jobledger_schedules
  (job_id, job_revision, planned_through, next_due_at, last_slot, skips_json, updated_at)
VALUES
  (:job_id, :job_revision, :planned_through, :next_due_at, NULL, '[]', :now)
ON CONFLICT (job_id) DO UPDATE
SET job_revision = excluded.job_revision,
    planned_through = CASE WHEN excluded.planned_through > jobledger_schedules.planned_through
                           THEN excluded.planned_through
                           ELSE jobledger_schedules.planned_through END,
    next_due_at = excluded.next_due_at,
    updated_at = excluded.updated_at

-- name: delete_schedule
DELETE FROM jobledger_schedules WHERE job_id = :job_id

-- ===========================================================================================
-- events and operator records

-- name: insert_event
INSERT INTO events
  (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
VALUES
  (:job_id, :occurrence_id, :event_type, :occurred_at, :owner_id, :fence, :data_json)

-- name: occurrences_without_enqueue_event
-- verify(): occurrences whose occurrence_enqueued event is missing (every enqueue writes one in
-- the same transaction, and retention deletes an occurrence's events with it) — what a write
-- taken by something else leaves behind (issue 30: a caller's temp table named "events").
SELECT o.occurrence_id, count(*) OVER () AS missing
FROM occurrences o
WHERE NOT EXISTS (
  SELECT 1 FROM events e
  WHERE e.occurrence_id = o.occurrence_id AND e.event_type = 'occurrence_enqueued'
)
ORDER BY o.occurrence_id
LIMIT :limit

-- name: insert_audit
INSERT INTO jobledger_audit (occurred_at, action, actor, subject, data_json)
VALUES (:now, :action, :actor, :subject, :data_json)

-- name: list_audit
SELECT * FROM jobledger_audit
WHERE (CAST(:before_id AS BIGINT) IS NULL OR audit_id < :before_id)
ORDER BY audit_id DESC
LIMIT :limit

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

-- The log's pages: operators page backwards (before_id, newest first) and follow forwards
-- (after_id, oldest first). One query per filter, each a range of the index that filter names
-- (the event id bounds are ranges, never "IS NULL OR" terms no index serves), so a page reads
-- its rows and not the log above them, whatever the log holds: no filter walks the primary key;
-- an occurrence, its events (scheduler_events_occurrence; a job or type then filters the
-- occurrence's few events); a job, its events (scheduler_events_job); a type, with or without a
-- job, that type's events (jobledger_events_type: a job-level type such as job_updated holds
-- only the jobs' own events, never the occurrences' history).

-- name: history_page
SELECT * FROM events
WHERE event_id < COALESCE(CAST(:before_id AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(:after_id AS BIGINT), 0)
ORDER BY event_id DESC
LIMIT :limit

-- name: history_page_by_occurrence
SELECT * FROM events
WHERE occurrence_id = :occurrence_id
  AND event_id < COALESCE(CAST(:before_id AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(:after_id AS BIGINT), 0)
  AND (CAST(:job_id AS TEXT) IS NULL OR job_id = :job_id)
  AND (CAST(:event_type AS TEXT) IS NULL OR event_type = :event_type)
ORDER BY event_id DESC
LIMIT :limit

-- name: history_page_by_job
SELECT * FROM events
WHERE job_id = :job_id
  AND event_id < COALESCE(CAST(:before_id AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(:after_id AS BIGINT), 0)
ORDER BY event_id DESC
LIMIT :limit

-- name: history_page_by_type
SELECT * FROM events
WHERE event_type = :event_type
  AND event_id < COALESCE(CAST(:before_id AS BIGINT), 9223372036854775807)
  AND event_id > COALESCE(CAST(:after_id AS BIGINT), 0)
ORDER BY event_id DESC
LIMIT :limit

-- name: history_after
SELECT * FROM events
WHERE event_id > :after_id
ORDER BY event_id
LIMIT :limit

-- name: history_after_by_occurrence
SELECT * FROM events
WHERE occurrence_id = :occurrence_id AND event_id > :after_id
  AND (CAST(:job_id AS TEXT) IS NULL OR job_id = :job_id)
  AND (CAST(:event_type AS TEXT) IS NULL OR event_type = :event_type)
ORDER BY event_id
LIMIT :limit

-- name: history_after_by_job
SELECT * FROM events
WHERE job_id = :job_id AND event_id > :after_id
ORDER BY event_id
LIMIT :limit

-- name: history_after_by_type
SELECT * FROM events
WHERE event_type = :event_type AND event_id > :after_id
ORDER BY event_id
LIMIT :limit

-- ===========================================================================================
-- occurrences: enqueue and read

-- name: insert_occurrence_from_job
-- The job row is re-read inside the insert: the occurrence is written only if the job still has
-- the revision the caller derived the identity from and is enabled; its payload (unless
-- overridden), authority, max_attempts, kind, queue and priority (unless given) and lost-lease
-- policy are snapshotted from that row. It waits for staging (gate 1) when it is not due yet,
-- or when its partition's admission is limited; otherwise it is ready at once (gate 0).
INSERT INTO occurrences
  (occurrence_id, job_id, job_revision, trigger_key,
   scheduled_for, available_at, status, attempt, max_attempts, fence,
   lease_owner, lease_expires_at, authority_id, payload_json,
   last_error_json, result_json, created_at, updated_at, settled_at,
   kind, workspace_id, runnable, queue, priority, partition_key, gate, adjudicate, trace_json,
   tags_json, meta_json)
SELECT :occurrence_id, j.job_id, j.revision, :trigger_key,
       :scheduled_for, :available_at, 'queued', 0, j.max_attempts, 0,
       NULL, NULL, j.authority_id, COALESCE(:payload_json, j.payload_json),
       NULL, NULL, :now, :now, NULL,
       j.kind, :workspace_id, 1,
       COALESCE(CAST(:queue AS TEXT), j.queue),
       COALESCE(CAST(:priority AS INTEGER), j.priority),
       CAST(:partition_key AS TEXT),
       CASE
         WHEN CAST(:available_at AS BIGINT) > CAST(:now AS BIGINT) THEN 1
         WHEN CAST(:partition_key AS TEXT) IS NOT NULL AND EXISTS (
           SELECT 1 FROM jobledger_queues AS q
           WHERE q.name = COALESCE(CAST(:queue AS TEXT), j.queue)
             AND (q.partition_concurrency IS NOT NULL OR q.partition_rate_limit IS NOT NULL)
         ) THEN 1
         ELSE 0
       END,
       CASE WHEN j.on_lost_lease = 'adjudicate' THEN 1 ELSE 0 END,
       CAST(:trace_json AS TEXT),
       CAST(:tags_json AS TEXT), CAST(:meta_json AS TEXT)
FROM jobs AS j
WHERE j.job_id = :job_id AND j.revision = :job_revision AND j.enabled = 1
ON CONFLICT (occurrence_id) DO NOTHING
RETURNING occurrence_id, seq, queue, priority

-- name: get_occurrence
SELECT * FROM occurrences WHERE occurrence_id = :occurrence_id

-- name: take_key
-- An idempotency key's row goes in first (its occurrence id is checked at commit): a second
-- transaction with the same key waits for this one (PostgreSQL) or runs after it (SQLite), and
-- then inserts nothing here.
INSERT INTO jobledger_keys (job_id, trigger_key, occurrence_id)
VALUES (:job_id, :trigger_key, :occurrence_id)
ON CONFLICT (job_id, trigger_key) DO NOTHING
RETURNING occurrence_id

-- name: occurrence_of_key
SELECT o.* FROM jobledger_keys AS k
JOIN occurrences AS o ON o.occurrence_id = k.occurrence_id
WHERE k.job_id = :job_id AND k.trigger_key = :trigger_key

-- name: point_key
UPDATE jobledger_keys SET occurrence_id = :occurrence_id
WHERE job_id = :job_id AND trigger_key = :trigger_key

-- An id prefix as a range of the primary key: [prefix, prefix with its last hex digit + 1).
-- name: occurrence_ids_by_prefix
SELECT occurrence_id FROM occurrences
WHERE occurrence_id >= :low AND occurrence_id < :high
ORDER BY occurrence_id
LIMIT :limit

-- name: list_occurrences_by_trigger
SELECT * FROM occurrences
WHERE job_id = :job_id AND trigger_key = :trigger_key
ORDER BY created_at, occurrence_id
LIMIT :limit

-- name: parents_of
SELECT p.occurrence_id FROM jobledger_dependencies AS d
JOIN occurrences AS p ON p.seq = d.parent_seq
WHERE d.child_seq = :seq
ORDER BY p.seq

-- name: seq_of_occurrence
SELECT seq FROM occurrences WHERE occurrence_id = :occurrence_id

-- ===========================================================================================
-- dependencies (SPEC §10; store/operations/dependencies.py): edges are found from the parent
-- through the primary key (parent_seq, child_seq), and from the child through
-- jobledger_dependencies_child, never by scanning occurrences.

-- name: insert_dependency
INSERT INTO jobledger_dependencies (parent_seq, child_seq) VALUES (:parent_seq, :child_seq)
ON CONFLICT (parent_seq, child_seq) DO NOTHING

-- name: link_child
-- A child just inserted (queued) takes its policy and, while parents are undecided, waits for
-- them: blocked, counting them.
UPDATE occurrences
SET status = CASE WHEN :pending > 0 THEN 'blocked' ELSE status END,
    pending_parents = :pending,
    on_parent_failure = :policy
WHERE seq = :seq
RETURNING seq

-- name: cancel_children
-- A parent failed: its blocked children under "cancel" are cancelled (reason parent_failed).
UPDATE occurrences
SET status = 'cancelled',
    pending_parents = 0,
    last_error_json = :error_json,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE seq IN (SELECT d.child_seq FROM jobledger_dependencies AS d WHERE d.parent_seq = :parent_seq)
  AND status = 'blocked'
  AND on_parent_failure = 'cancel'
RETURNING seq, occurrence_id, job_id, status, last_error_json, updated_at

-- name: cancelled_children
-- A requeued parent's children cancelled since (revive_children, SPEC §14; revive.py).
SELECT c.seq, c.occurrence_id, c.last_error_json
FROM jobledger_dependencies AS d
JOIN occurrences AS c ON c.seq = d.child_seq
WHERE d.parent_seq = :parent_seq AND c.status = 'cancelled'
ORDER BY c.seq

-- name: rewait_run_children
-- A requeued parent whose failure its "run" children counted: the blocked ones wait for it again.
UPDATE occurrences
SET pending_parents = pending_parents + 1
WHERE seq IN (SELECT d.child_seq FROM jobledger_dependencies AS d WHERE d.parent_seq = :parent_seq)
  AND status = 'blocked'
  AND on_parent_failure = 'run'

-- name: revive_child
-- A child cancelled because of a parent that was requeued: blocked again, in its job's claim
-- lane as it is now (see requeue_dead_letter).
UPDATE occurrences
SET status = 'blocked',
    pending_parents = :pending,
    last_error_json = NULL,
    gate = 1,
    runnable = (SELECT j.enabled FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    kind = (SELECT j.kind FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = NULL
WHERE seq = :seq AND status = 'cancelled'
RETURNING seq, occurrence_id, job_id, updated_at

-- name: requeues_of_occurrence
SELECT previous_error_json, revived_children FROM jobledger_requeues
WHERE occurrence_id = :occurrence_id
ORDER BY requeue_id

-- name: parent_states
-- A child's parents with what they came to (ctx.parents, explain, the CLI and the dashboard).
SELECT p.seq, p.occurrence_id, p.job_id, p.kind, p.status, p.result_json, p.last_error_json
FROM jobledger_dependencies AS d
JOIN occurrences AS p ON p.seq = d.parent_seq
WHERE d.child_seq = :seq
ORDER BY p.seq

-- name: children_of
SELECT c.seq, c.occurrence_id, c.job_id, c.kind, c.status
FROM jobledger_dependencies AS d
JOIN occurrences AS c ON c.seq = d.child_seq
WHERE d.parent_seq = :seq
ORDER BY c.seq
LIMIT :limit

-- Listing pages go newest first by seq (insertion order; the rowid on SQLite, an identity on
-- PostgreSQL) below :before_seq (the cursor; a value above every seq for the first page), each
-- one backward range of an index that ends in seq. A status alone is read kind by kind, and a
-- kind alone status by status (store/operations/listing.py merges them); a job with a status or kind filter is a bounded
-- walk of the job's newest rows.

-- name: list_occurrences_all
SELECT * FROM occurrences
WHERE seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: list_occurrences_by_status_kind
SELECT * FROM occurrences
WHERE status = :status AND kind = :kind AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: list_occurrences_by_job
SELECT * FROM occurrences
WHERE job_id = :job_id AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: seqs_by_status_kind
SELECT seq FROM occurrences
WHERE status = :status AND kind = :kind AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- name: job_rows_scan
-- The job's newest :limit rows below the cursor, with what the other filters need.
SELECT seq, status, kind, job_id, queue, partition_key, tags_json FROM occurrences
WHERE job_id = :job_id AND seq < :before_seq
ORDER BY seq DESC
LIMIT :limit

-- Finding work (issue 32): an idempotency key's occurrences, newest first, through
-- jobledger_keys_key (at most one row per job), then each by its unique id; key_rows_scan walks
-- the same rows with what the other filters need. A queue's and a partition's pages are in the
-- dialect files (SQLite pins their index).

-- name: list_occurrences_by_tag
-- A tag's occurrences, newest first: one backward range of jobledger_tags' primary key
-- (tag, seq), each occurrence by its seq.
SELECT o.* FROM jobledger_tags AS t
JOIN occurrences AS o ON o.seq = t.seq
WHERE t.tag = :tag AND t.seq < :before_seq
ORDER BY t.seq DESC
LIMIT :limit

-- name: tag_rows_scan
SELECT o.seq, o.status, o.kind, o.job_id, o.queue, o.partition_key, o.tags_json
FROM jobledger_tags AS t
JOIN occurrences AS o ON o.seq = t.seq
WHERE t.tag = :tag AND t.seq < :before_seq
ORDER BY t.seq DESC
LIMIT :limit

-- name: record_progress
-- ctx.progress (issue 32): fenced as renew_lease — only the current holder of an unexpired
-- lease writes it; the row's instants and lease are left as they are.
UPDATE occurrences
SET progress_json = :head || CAST(attempt AS TEXT) || :tail
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND (lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
       OR (:holder_live = 1 AND lease_expires_at > updated_at))
RETURNING occurrence_id, attempt

-- name: list_occurrences_by_key
SELECT o.* FROM jobledger_keys AS k
JOIN occurrences AS o ON o.occurrence_id = k.occurrence_id
WHERE k.trigger_key = :trigger_key AND o.seq < :before_seq
ORDER BY o.seq DESC
LIMIT :limit

-- name: key_rows_scan
SELECT o.seq, o.status, o.kind, o.job_id, o.queue, o.partition_key, o.tags_json
FROM jobledger_keys AS k
JOIN occurrences AS o ON o.occurrence_id = k.occurrence_id
WHERE k.trigger_key = :trigger_key AND o.seq < :before_seq
ORDER BY o.seq DESC
LIMIT :limit

-- name: kinds_in_status
-- The kinds that have rows in :status, one probe of the status index (status, kind) per kind:
-- a skip scan, never a walk of the rows.
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT MIN(kind) FROM occurrences WHERE status = :status)
  UNION ALL
  SELECT (SELECT MIN(o.kind) FROM occurrences AS o WHERE o.status = :status AND o.kind > kinds.kind)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind FROM kinds WHERE kind IS NOT NULL

-- name: count_status_by_kind
-- Per kind in :status, its rows counted up to :cap: a skip scan of the status index, and one
-- bounded range of it per kind (a count that reached :cap is a lower bound).
WITH RECURSIVE kinds(kind) AS (
  SELECT (SELECT MIN(kind) FROM occurrences WHERE status = :status)
  UNION ALL
  SELECT (SELECT MIN(o.kind) FROM occurrences AS o WHERE o.status = :status AND o.kind > kinds.kind)
  FROM kinds WHERE kinds.kind IS NOT NULL
)
SELECT kind, (
  SELECT COUNT(*) FROM (
    SELECT 1 FROM occurrences AS c WHERE c.status = :status AND c.kind = kinds.kind LIMIT :cap
  ) AS capped
) AS n
FROM kinds WHERE kind IS NOT NULL

-- name: count_occurrences
-- Exact counts (Store.count_occurrences without a cap): every entry of the status index, read
-- in its order (no table access, no sort).
SELECT status, kind, COUNT(*) AS n FROM occurrences GROUP BY status, kind

-- name: count_recent_of_job
-- A job's newest :cap rows, counted per (kind, status): the bounded count of one job.
SELECT kind, status, COUNT(*) AS n FROM (
  SELECT kind, status FROM occurrences WHERE job_id = :job_id ORDER BY seq DESC LIMIT :cap
) AS recent
GROUP BY kind, status

-- name: count_occurrences_of_job
SELECT kind, status, COUNT(*) AS n FROM occurrences WHERE job_id = :job_id
GROUP BY kind, status

-- name: running_of_owner
SELECT occurrence_id, job_id, fence, lease_owner, lease_expires_at, started_at FROM occurrences
WHERE status = 'running' AND lease_owner = :owner_id

-- ===========================================================================================
-- leases

-- name: dead_letter_expired_lease
-- A final attempt's expired lease, or an outcome-unknown one (adjudicate = 1), ends in a dead
-- letter — only once its handler began (started_at; a never-started one is given back by
-- give_back_unstarted); the instant never goes back before the row's last change (see
-- renew_lease).
UPDATE occurrences
SET status = 'dead_letter',
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = :error_json,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND lease_expires_at <= :now
  AND started_at IS NOT NULL
  AND (attempt >= max_attempts OR adjudicate = 1)
RETURNING kind, queue, partition_key, updated_at

-- name: renew_lease
-- "Unexpired" is judged against the later of this transaction's clock and the row's last
-- change: a lease the reaper ended (lease_expires_at = its instant) stays ended even for a
-- renewal whose transaction read its clock a moment before the reaper's (PostgreSQL reads the
-- clock when a transaction begins, and this one may have waited for the row lock).
-- :holder_live = 1 (SQLite: the owner's lock file is held, so it is certainly alive, and claims
-- leave its expired leases alone) also lets an expired lease be renewed that nothing ended
-- (lease_expires_at > updated_at: not reaped, not changed since it expired) — after a forward
-- step of the clock its holder keeps it. Settle and release take the same guard.
UPDATE occurrences
SET lease_expires_at = CASE
      WHEN lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) + :lease_ms
      THEN lease_expires_at
      ELSE (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) + :lease_ms END,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND (lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
       OR (:holder_live = 1 AND lease_expires_at > updated_at))
RETURNING *

-- name: mark_started
-- The handler of this attempt begins (SPEC §9, crash recovery): written, fenced as renew_lease,
-- before the handler runs; it renews the lease too (it is the attempt's lease check). The first
-- mark stands.
UPDATE occurrences
SET started_at = CASE WHEN started_at IS NOT NULL THEN started_at
      WHEN updated_at > :now THEN updated_at ELSE :now END,
    lease_expires_at = CASE
      WHEN lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) + :lease_ms
      THEN lease_expires_at
      ELSE (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) + :lease_ms END,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND (lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
       OR (:holder_live = 1 AND lease_expires_at > updated_at))
RETURNING *

-- name: settle_occurrence
-- Where the attempt goes is decided here, from the row itself, so a settle needs no read first:
-- succeeded; retry_wait when the failure is retryable and attempts remain (waiting for staging:
-- gate 1), or when a snooze (SPEC §9) is under the cap — the attempt given back, the previous
-- error kept; else dead_letter. Lease and instants as in renew_lease.
UPDATE occurrences
SET status = CASE
      WHEN :succeeded = 1 THEN 'succeeded'
      WHEN :snoozed = 1 AND snoozes < :max_snoozes THEN 'retry_wait'
      WHEN :retryable = 1 AND attempt < max_attempts THEN 'retry_wait'
      ELSE 'dead_letter' END,
    available_at = CASE
      WHEN (:snoozed = 1 AND snoozes < :max_snoozes)
        OR (:succeeded = 0 AND :retryable = 1 AND attempt < max_attempts)
      THEN (CASE WHEN :retry_available_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END) THEN :retry_available_at ELSE CASE WHEN updated_at > :now THEN updated_at ELSE :now END END)
      ELSE available_at END,
    gate = CASE
      WHEN (:snoozed = 1 AND snoozes < :max_snoozes)
        OR (:succeeded = 0 AND :retryable = 1 AND attempt < max_attempts) THEN 1
      ELSE gate END,
    attempt = CASE WHEN :snoozed = 1 AND snoozes < :max_snoozes THEN attempt - 1 ELSE attempt END,
    snoozes = CASE WHEN :snoozed = 1 AND snoozes < :max_snoozes THEN snoozes + 1 ELSE snoozes END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = CASE
      WHEN :snoozed = 1 AND snoozes < :max_snoozes THEN last_error_json
      ELSE :error_json END,
    result_json = :result_json,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = CASE
      WHEN (:snoozed = 1 AND snoozes < :max_snoozes)
        OR (:succeeded = 0 AND :retryable = 1 AND attempt < max_attempts) THEN NULL
      ELSE CASE WHEN updated_at > :now THEN updated_at ELSE :now END END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND (lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
       OR (:holder_live = 1 AND lease_expires_at > updated_at))
RETURNING *

-- name: release_lease
-- Given back unfinished (no attempt spent): claimable again at once, through staging.
UPDATE occurrences
SET status = 'retry_wait',
    attempt = attempt - 1,
    available_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    gate = 1,
    lease_owner = NULL,
    lease_expires_at = NULL,
    started_at = NULL,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND (lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
       OR (:holder_live = 1 AND lease_expires_at > updated_at))
RETURNING *

-- name: give_back_unstarted
-- A claim whose handler never began (started_at NULL) and whose holder is gone — its lease
-- expired (:expired = 1), or its owner is known dead — is given back as release_lease gives it:
-- no attempt spent, no dead letter, no outcome-unknown case, no backoff; claimable at once.
UPDATE occurrences
SET status = 'retry_wait',
    attempt = attempt - 1,
    available_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    gate = 1,
    lease_owner = NULL,
    lease_expires_at = NULL,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND started_at IS NULL
  AND (:expired = 0 OR lease_expires_at <= :now)
RETURNING *

-- name: expire_lease
-- A lease whose holder is known to be gone (its process or database session) ends now, so the
-- next claim takes the occurrence over (or dead-letters it, on its final attempt, or as an
-- outcome-unknown one). lease_expires_at = updated_at: no renewal can pass renew_lease's check
-- again, whatever clock reading it carries.
UPDATE occurrences
SET lease_expires_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END, updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'running'
  AND lease_owner = :owner_id
  AND fence = :fence
  AND started_at IS NOT NULL
  AND lease_expires_at > (CASE WHEN updated_at > :now THEN updated_at ELSE :now END)
RETURNING *

-- name: cancel_occurrence
UPDATE occurrences
SET status = 'cancelled',
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error_json = :error_json,
    pending_parents = 0,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status IN ('blocked', 'queued', 'retry_wait', 'running')
RETURNING *

-- name: requeue_dead_letter
-- Live again: its claim lane is the job's as it is now (a job disabled or re-kinded while the
-- occurrence was settled changed only live occurrences).
UPDATE occurrences
SET status = 'retry_wait',
    available_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    gate = 1,
    max_attempts = attempt + 1,
    runnable = (SELECT j.enabled FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    kind = (SELECT j.kind FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = NULL
WHERE occurrence_id = :occurrence_id
  AND status = 'dead_letter'
  AND fence = :expected_fence
RETURNING *

-- name: insert_requeue
INSERT INTO jobledger_requeues
  (occurrence_id, job_id, expected_fence, attempt, previous_max_attempts, max_attempts,
   previous_error_json, reason, actor, requested_at, revived_children)
VALUES
  (:occurrence_id, :job_id, :expected_fence, :attempt, :previous_max_attempts, :max_attempts,
   :previous_error_json, :reason, :actor, :now, :revived_children)
RETURNING requeue_id

-- name: bind_occurrence_revision
-- A stale dead letter an operator requeues runs as its job is now (SPEC §14).
UPDATE occurrences SET job_revision = :job_revision
WHERE occurrence_id = :occurrence_id
RETURNING *

-- name: add_throughput
INSERT INTO jobledger_throughput
  (minute, kind, owner_id, succeeded, retried, dead_lettered)
VALUES
  (:minute, :kind, :owner_id, :succeeded, :retried, :dead_lettered)
ON CONFLICT (minute, kind, owner_id) DO UPDATE
SET succeeded = jobledger_throughput.succeeded + excluded.succeeded,
    retried = jobledger_throughput.retried + excluded.retried,
    dead_lettered = jobledger_throughput.dead_lettered + excluded.dead_lettered

-- name: throughput_since
SELECT minute, kind, SUM(succeeded) AS succeeded, SUM(retried) AS retried,
       SUM(dead_lettered) AS dead_lettered
FROM jobledger_throughput
WHERE minute >= :since
GROUP BY minute, kind
ORDER BY minute, kind

-- ===========================================================================================
-- retention

-- name: prunable_walk
-- The next :limit rows after :after_seq in insertion order (a range of the rowid / the seq
-- key: no sort); the caller keeps those of the pruned statuses settled before the cutoff and
-- stops at the first created at or after it. The deletes of a batch are in the dialect files
-- (delete_*_of_seqs): one statement per table for the batch.
SELECT seq, occurrence_id, job_id, status, created_at, settled_at FROM occurrences
WHERE seq > :after_seq
ORDER BY seq
LIMIT :limit

-- name: prune_throughput
DELETE FROM jobledger_throughput WHERE minute < :before

-- name: prune_workers
DELETE FROM jobledger_workers WHERE stopped_at IS NOT NULL AND stopped_at < :before

-- ===========================================================================================
-- workers

-- name: upsert_worker
INSERT INTO jobledger_workers
  (worker_id, hostname, pid, started_at, last_seen_at, stopped_at, info_json)
VALUES
  (:worker_id, :hostname, :pid, :now, :now, NULL, :info_json)
ON CONFLICT (worker_id) DO UPDATE
SET hostname = excluded.hostname,
    pid = excluded.pid,
    last_seen_at = excluded.last_seen_at,
    stopped_at = NULL,
    info_json = excluded.info_json

-- name: touch_worker
UPDATE jobledger_workers SET last_seen_at = :now
WHERE worker_id = :worker_id AND stopped_at IS NULL

-- name: stop_worker
UPDATE jobledger_workers SET last_seen_at = :now, stopped_at = :now
WHERE worker_id = :worker_id AND stopped_at IS NULL

-- name: list_workers
SELECT * FROM jobledger_workers
WHERE stopped_at IS NULL OR stopped_at >= :since
ORDER BY started_at, worker_id

-- ===========================================================================================
-- planner (store/operations/schedules.py; the rows themselves are written with each job
-- revision by upsert_schedule above)

-- name: schedule_next_due
-- The earliest schedule any planner must look at: one probe of jobledger_schedules_due. A tick
-- with nothing due reads only this.
SELECT next_due_at FROM jobledger_schedules
WHERE next_due_at IS NOT NULL
ORDER BY next_due_at
LIMIT 1

-- name: schedules_due
-- The due batch with its jobs, in due order, along the same index (never a scan of all jobs).
SELECT s.job_revision AS schedule_revision, s.planned_through, s.next_due_at, s.last_slot,
       s.skips_json, s.updated_at AS schedule_updated_at, j.*
FROM jobledger_schedules AS s
JOIN jobs AS j ON j.job_id = s.job_id
WHERE s.next_due_at IS NOT NULL AND s.next_due_at <= :now
ORDER BY s.next_due_at
LIMIT :limit

-- name: schedule_state
SELECT s.job_revision AS schedule_revision, s.planned_through, s.next_due_at, s.last_slot,
       s.skips_json, s.updated_at AS schedule_updated_at, j.*
FROM jobledger_schedules AS s
JOIN jobs AS j ON j.job_id = s.job_id
WHERE s.job_id = :job_id

-- name: record_schedule_plan
-- Compare-and-swap on what the planner read: a job edited, disabled or planned by another
-- planner since then changes none of these, so the UPDATE matches no row and nothing is written.
-- Every recorded decision that fires or skips a slot moves planned_through (cron, every) or
-- last_slot (once), so two planners can never both record the same decision.
UPDATE jobledger_schedules
SET planned_through = :planned_through,
    last_slot = :last_slot,
    next_due_at = :next_due_at,
    updated_at = :now
WHERE job_id = :job_id
  AND job_revision = :expected_revision
  AND planned_through = :expected_planned_through
  AND COALESCE(last_slot, -1) = :expected_last_slot
RETURNING job_id, skips_json

-- name: set_schedule_skips
UPDATE jobledger_schedules SET skips_json = :skips_json WHERE job_id = :job_id

-- name: once_slot_planned
-- Was this once slot fired (an occurrence with its trigger key, any revision) or skipped (a
-- skipped-run event of exactly that slot; event data is canonical JSON) before?
SELECT 1 AS planned FROM occurrences
WHERE job_id = :job_id AND trigger_key = :trigger_key
UNION ALL
SELECT 1 AS planned FROM events
WHERE job_id = :job_id AND event_type = 'schedule_slots_skipped' AND data_json LIKE :pattern
LIMIT 1

-- ===========================================================================================
-- queues (SPEC §7): declarations, pause, and what a claim counts

-- name: get_queue
SELECT * FROM jobledger_queues WHERE name = :name

-- name: list_queues
SELECT * FROM jobledger_queues ORDER BY name

-- name: concurrency_limited_queues
-- The queues whose running occurrences are counted against a queue-wide limit: a settle that
-- ends one frees a slot that any worker may be waiting for (SPEC §14).
SELECT name FROM jobledger_queues WHERE concurrency IS NOT NULL

-- name: declare_queue
-- A declaration sets every limit; the pause state is not part of it. declared_json is the last
-- declaration applied from code, operator_set_json the limits an operator set (SPEC §14).
INSERT INTO jobledger_queues
  (name, concurrency, worker_concurrency, partition_concurrency, rate_limit, rate_per_ms,
   partition_rate_limit, partition_rate_per_ms, paused, paused_reason, paused_at, paused_by,
   revision, created_at, updated_at, declared_json, operator_set_json)
VALUES
  (:name, :concurrency, :worker_concurrency, :partition_concurrency, :rate_limit, :rate_per_ms,
   :partition_rate_limit, :partition_rate_per_ms, 0, NULL, NULL, NULL, 1, :now, :now,
   :declared_json, :operator_set_json)
ON CONFLICT (name) DO UPDATE
SET concurrency = excluded.concurrency,
    worker_concurrency = excluded.worker_concurrency,
    partition_concurrency = excluded.partition_concurrency,
    rate_limit = excluded.rate_limit,
    rate_per_ms = excluded.rate_per_ms,
    partition_rate_limit = excluded.partition_rate_limit,
    partition_rate_per_ms = excluded.partition_rate_per_ms,
    revision = jobledger_queues.revision + 1,
    updated_at = excluded.updated_at,
    declared_json = excluded.declared_json,
    operator_set_json = excluded.operator_set_json
RETURNING *

-- name: record_queue_sources
-- The limits did not change, only what is recorded about where they came from: no new revision.
UPDATE jobledger_queues
SET declared_json = :declared_json, operator_set_json = :operator_set_json
WHERE name = :name
RETURNING *

-- name: pause_queue
-- Pausing a queue nobody declared declares it (no limits, paused).
INSERT INTO jobledger_queues
  (name, paused, paused_reason, paused_at, paused_by, revision, created_at, updated_at)
VALUES (:name, 1, :reason, :now, :actor, 1, :now, :now)
ON CONFLICT (name) DO UPDATE
SET paused = 1,
    paused_reason = excluded.paused_reason,
    paused_at = excluded.paused_at,
    paused_by = excluded.paused_by,
    updated_at = excluded.updated_at
RETURNING *

-- name: resume_queue
UPDATE jobledger_queues
SET paused = 0, paused_reason = NULL, paused_at = NULL, paused_by = NULL, updated_at = :now
WHERE name = :name
RETURNING *

-- name: regate_ready_partitions
-- After a partition limit was tightened: admitted rows go back through admission (staging).
UPDATE occurrences SET gate = 1
WHERE queue = :queue AND partition_key IS NOT NULL
  AND status IN ('queued', 'retry_wait') AND gate = 0

-- name: regate_held_partitions
UPDATE occurrences SET gate = 1
WHERE queue = :queue AND partition_key IS NOT NULL
  AND status IN ('queued', 'retry_wait') AND gate = 2

-- name: regate_held_of_job
-- A job enabled again: its rows held while it was disabled were skipped by promotion; they go
-- back through admission (staging) instead of waiting for a slot of their partition to end.
UPDATE occurrences SET gate = 1
WHERE job_id = :job_id AND partition_key IS NOT NULL
  AND status IN ('queued', 'retry_wait') AND gate = 2

-- name: release_held_partitions
-- The queue limits its partitions no more: every held row is due and admitted at once (a
-- disabled job's too: it stays out of the claim index by its runnable flag, not by its gate).
UPDATE occurrences SET gate = 0
WHERE queue = :queue AND partition_key IS NOT NULL
  AND status IN ('queued', 'retry_wait') AND gate = 2

-- name: count_running_of_owner_in_queue
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = :queue AND lease_owner = :owner_id AND status = 'running'
  LIMIT :cap
) AS running

-- name: count_lane_occupancy
-- A partition's running rows and its admitted (ready) ones, bounded by the limit.
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = :queue AND partition_key = :partition_key AND partition_key IS NOT NULL
    AND (status = 'running'
         OR (status IN ('queued', 'retry_wait') AND gate = 0 AND runnable = 1))
  LIMIT :cap
) AS occupying

-- name: get_rate_window
SELECT * FROM jobledger_rate_windows WHERE queue = :queue AND partition_key = :partition_key

-- name: take_rate_tokens
-- Take :n claims from the current window (windows aligned to the epoch); a new window starts
-- from zero. The caller never asks for more than the window has left.
INSERT INTO jobledger_rate_windows (queue, partition_key, window_start, claims, wake_at)
VALUES (:queue, :partition_key, :window_start, :n, NULL)
ON CONFLICT (queue, partition_key) DO UPDATE
SET claims = CASE WHEN jobledger_rate_windows.window_start = excluded.window_start
                  THEN jobledger_rate_windows.claims + excluded.claims
                  ELSE excluded.claims END,
    window_start = excluded.window_start

-- name: set_rate_wake
-- Held rows of a partition wait for the next window: staging admits them again then.
INSERT INTO jobledger_rate_windows (queue, partition_key, window_start, claims, wake_at)
VALUES (:queue, :partition_key, :window_start, 0, :wake_at)
ON CONFLICT (queue, partition_key) DO UPDATE SET wake_at = excluded.wake_at

-- name: due_rate_wakes
SELECT queue, partition_key FROM jobledger_rate_windows
WHERE wake_at IS NOT NULL AND wake_at <= :now
ORDER BY wake_at
LIMIT :limit

-- name: clear_rate_wake
UPDATE jobledger_rate_windows SET wake_at = NULL
WHERE queue = :queue AND partition_key = :partition_key

-- name: occurrence_lane
SELECT seq, queue, partition_key, status, gate FROM occurrences
WHERE occurrence_id = :occurrence_id


-- ===========================================================================================
-- queue depths (operators' read model: CLI `queue`, dashboard, metrics, explain); every read
-- is bounded by :cap rows or by the number of queues

-- name: running_queues
-- Queues with running rows (the running index; running rows are bounded by workers' slots).
SELECT DISTINCT queue FROM occurrences WHERE status = 'running'

-- name: count_partition_running
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM occurrences
  WHERE queue = :queue AND partition_key = :partition_key AND status = 'running'
  LIMIT :cap
) AS running

-- name: occurrence_gate
SELECT occurrence_id, queue, partition_key, status, gate, runnable FROM occurrences
WHERE occurrence_id = :occurrence_id
-- results and adjudication (SPEC §9)

-- name: mark_result_read
-- The first read of a succeeded occurrence's result (retention keeps unread results).
UPDATE occurrences SET result_read_at = :now
WHERE occurrence_id = :occurrence_id AND status = 'succeeded' AND result_read_at IS NULL

-- name: adjudications_of
-- Every decision on the occurrence's cases (one per lost attempt), oldest first.
SELECT * FROM jobledger_adjudications WHERE occurrence_id = :occurrence_id
ORDER BY expected_fence

-- name: close_adjudications
-- A decision on a later case ends the earlier not_applied ones: their granted run was lost
-- too (its outcome: the dead letter that became the later case).
UPDATE jobledger_adjudications
SET status = 'applied',
    applied_at = :settled_at,
    retry_settled_at = :settled_at,
    retry_outcome_json = :outcome_json
WHERE occurrence_id = :occurrence_id
  AND status = 'pending'
  AND expected_fence < :fence

-- name: insert_adjudication
INSERT INTO jobledger_adjudications
  (occurrence_id, job_id, request_id, decision, evidence_digest, expected_attempt,
   expected_fence, reason, actor, status, created_at, applied_at, started_at)
VALUES
  (:occurrence_id, :job_id, :request_id, :decision, :evidence_digest, :expected_attempt,
   :expected_fence, :reason, :actor, :status, :now, :applied_at, :started_at)

-- name: adjudicate_applied
-- The side effect happened: succeeded now, without running the handler again.
UPDATE occurrences
SET status = 'succeeded',
    result_json = :result_json,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END
WHERE occurrence_id = :occurrence_id
  AND status = 'dead_letter'
  AND attempt = :attempt
  AND fence = :fence
RETURNING *

-- name: adjudicate_not_applied
-- The side effect did not happen: exactly one more attempt, through staging (gate 1), in the
-- job's claim lane as it is now (see requeue_dead_letter).
UPDATE occurrences
SET status = 'retry_wait',
    available_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    gate = 1,
    max_attempts = attempt + 1,
    runnable = (SELECT j.enabled FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    kind = (SELECT j.kind FROM jobs AS j WHERE j.job_id = occurrences.job_id),
    result_json = NULL,
    updated_at = CASE WHEN updated_at > :now THEN updated_at ELSE :now END,
    settled_at = NULL
WHERE occurrence_id = :occurrence_id
  AND status = 'dead_letter'
  AND attempt = :attempt
  AND fence = :fence
RETURNING *

-- ===========================================================================================
-- group commit (group_commit.py): each item of a shared write transaction in its own savepoint

-- name: group_item_begin
SAVEPOINT jobledger_item

-- name: group_item_end
RELEASE SAVEPOINT jobledger_item

-- name: group_item_undo
ROLLBACK TO SAVEPOINT jobledger_item

-- ===========================================================================================
-- backfill (operations/schedules.py record_backfill)

-- name: backfill_present
-- The slots of a range a job's occurrences hold already, under any revision: the job's index,
-- filtered by the slot instant (a backfill is an operator's rare call, capped at 10,000 slots).
SELECT scheduled_for, trigger_key FROM occurrences
WHERE job_id = :job_id AND scheduled_for >= :start AND scheduled_for < :end
