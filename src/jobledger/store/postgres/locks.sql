-- PostgreSQL-only: the transaction-scoped advisory locks that make queue limits, pauses and
-- partition admissions hold across every worker, process and machine (docs/postgres.md). SQLite
-- needs none (one writer at a time), hence no counterpart in ../sqlite/queries.sql.

-- name: lock_keys_shared
-- Transaction-scoped advisory locks, taken in the order given (the caller sorts them).
SELECT pg_advisory_xact_lock_shared(k) FROM unnest(%(keys)s::bigint[]) WITH ORDINALITY AS l(k, n)
ORDER BY n

-- name: lock_keys
SELECT pg_advisory_xact_lock(k) FROM unnest(%(keys)s::bigint[]) WITH ORDINALITY AS l(k, n)
ORDER BY n

-- name: clock_after_locks
-- The database clock once the exclusive locks are held: a claim that waited for a limited queue's
-- lock counts its rate window from when it may act, not from when its transaction began.
SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms
