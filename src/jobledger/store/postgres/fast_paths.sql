-- PostgreSQL-only shortcuts: one statement doing what the general operation (in ../queries.sql
-- and the operations modules) does in a transaction of several round trips, for the common case
-- only. The general path stays the reference; a shortcut that does not apply returns no rows and
-- the store falls back to it. SQLite has no round trips to save, hence no counterpart.

-- name: enqueue_in_one_statement
-- The whole enqueue in one round trip, for the common case (the job's revision is known and the
-- firing is new): read the job, insert the occurrence, append its event, send NOTIFY, all in
-- the statement's own transaction. {schema} is the store's schema (a validated identifier),
-- since no transaction sets search_path here. Zero rows back means "not this easy" — the job
-- changed, is disabled, or the firing exists — and the store takes the general path, which
-- decides.
WITH clock AS (
  SELECT COALESCE(%(now)s::bigint,
                  floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now_ms
), inserted AS (
  INSERT INTO "{schema}".occurrences
    (occurrence_id, job_id, job_revision, trigger_key,
     scheduled_for, available_at, status, attempt, max_attempts, fence,
     lease_owner, lease_expires_at, authority_id, payload_json,
     last_error_json, result_json, created_at, updated_at, settled_at,
     kind, workspace_id, runnable, queue, priority, partition_key, gate, adjudicate, trace_json)
  SELECT %(occurrence_id)s, j.job_id, j.revision, %(trigger_key)s,
         %(scheduled_for)s, %(available_at)s, 'queued', 0, j.max_attempts, 0,
         NULL, NULL, j.authority_id, COALESCE(%(payload_json)s, j.payload_json),
         NULL, NULL, clock.now_ms, clock.now_ms, NULL,
         j.kind, %(workspace_id)s, 1,
         COALESCE(%(queue)s::text, j.queue), COALESCE(%(priority)s::smallint, j.priority),
         %(partition_key)s::text,
         CASE
           WHEN %(available_at)s::bigint > clock.now_ms THEN 1
           WHEN %(partition_key)s::text IS NOT NULL AND EXISTS (
             SELECT 1 FROM "{schema}".jobledger_queues AS q
             WHERE q.name = COALESCE(%(queue)s::text, j.queue)
               AND (q.partition_concurrency IS NOT NULL OR q.partition_rate_limit IS NOT NULL)
           ) THEN 1
           ELSE 0
         END,
         CASE WHEN j.on_lost_lease = 'adjudicate' THEN 1 ELSE 0 END,
         %(trace_json)s::text
  FROM "{schema}".jobs AS j, clock
  WHERE j.job_id = %(job_id)s AND j.revision = %(job_revision)s AND j.enabled = 1
  ON CONFLICT (occurrence_id) DO NOTHING
  RETURNING occurrence_id, created_at, seq, queue, priority
), event AS (
  INSERT INTO "{schema}".events
    (job_id, occurrence_id, event_type, occurred_at, owner_id, fence, data_json)
  SELECT %(job_id)s, occurrence_id, 'occurrence_enqueued', created_at, NULL, NULL, %(data_json)s
  FROM inserted
)
SELECT created_at, seq, queue, priority, pg_notify(%(channel)s, '') AS notified FROM inserted
