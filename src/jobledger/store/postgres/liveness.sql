-- Owner liveness on PostgreSQL (liveness.py): a session advisory lock per worker, a generation
-- it bumps each time it takes that lock, and what a reaper reads before it tries the lock.
-- PostgreSQL-only: SQLite uses an flock instead. {schema} is the store's (validated) schema.

-- name: liveness_take
-- The worker takes its lock and, in the same statement (one commit), bumps its generation: a
-- reaper that sees the lock free twice with the same generation knows it was not taken in
-- between. A session lock taken by a statement that then fails stays held, so the caller
-- closes the connection on any error.
WITH taken AS (SELECT pg_try_advisory_lock(%(key)s) AS locked)
INSERT INTO "{schema}".jobledger_liveness AS held (owner_id, generation, taken_at)
SELECT %(owner)s, 1, COALESCE(%(now)s::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
FROM taken
WHERE taken.locked
ON CONFLICT (owner_id) DO UPDATE
SET generation = held.generation + 1, taken_at = EXCLUDED.taken_at
RETURNING generation

-- name: liveness_probe
-- A reaper's look: the owner's key, held until the reaper's transaction ends (commit or
-- rollback alike, so no error can leave it held); while held, the owner cannot take it back.
SELECT pg_try_advisory_xact_lock(%(key)s) AS locked

-- name: liveness_give_back
SELECT pg_advisory_unlock(%(key)s) AS released

-- name: liveness_ping
SELECT 1 AS alive

-- name: liveness_registration
-- Only a worker registered with "liveness": "advisory" ever held the lock: for anyone else a
-- free lock says nothing.
SELECT info_json FROM jobledger_workers WHERE worker_id = %(owner)s

-- name: liveness_generation
-- Read while the reaper holds the owner's lock (so no take can commit meanwhile), in a READ
-- COMMITTED transaction (so it sees every take committed before the lock was free).
SELECT generation FROM jobledger_liveness WHERE owner_id = %(owner)s
