-- Owner liveness on PostgreSQL (liveness.py): a session advisory lock per worker, and what a
-- reaper reads before it tries that lock. PostgreSQL-only: SQLite uses an flock instead.

-- name: liveness_take
SELECT pg_try_advisory_lock(%(key)s) AS locked

-- name: liveness_give_back
SELECT pg_advisory_unlock(%(key)s) AS released

-- name: liveness_ping
SELECT 1 AS alive

-- name: liveness_registration
-- Only a worker registered with "liveness": "advisory" ever held the lock: for anyone else a
-- free lock says nothing.
SELECT info_json FROM jobledger_workers WHERE worker_id = %(owner)s
