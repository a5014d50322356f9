-- Moving slots between shards (cluster/store/postgres/moves.py; issue 42,
-- docs/design/resharding.md) and the fence's own reading.
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.
--
-- A move reads and deletes a table's rows of its slots by the move's slot
-- index on the giving shard (slot_index_state); a roll-back on the target,
-- which has none, reads the table.
-- The statements a COPY runs are bound client-side (psycopg): their
-- placeholders are %(x)s, never binary.

-- name: fenced_slots
-- The slots this shard does not serve now, and why ('moving' | 'absent').
SELECT slot, state FROM slot_fences ORDER BY slot;

-- name: fence_slots
INSERT INTO slot_fences (slot, state)
SELECT s, %(state)s FROM unnest(%(slots)s::int[]) AS s
ON CONFLICT (slot) DO UPDATE SET state = excluded.state;

-- name: unfence_slots
DELETE FROM slot_fences WHERE slot = ANY(%(slots)s::int[]);

-- name: older_transactions
-- The transactions open on this database now (each holds a lock on its own
-- virtual transaction id while it runs), but this session's: the barrier
-- after a fence waits for them to end, as CREATE INDEX CONCURRENTLY waits
-- for the transactions older than its snapshot. Client sessions only: an
-- autovacuum worker writes no job.
SELECT l.virtualxid
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid = l.virtualtransaction
   AND l.pid <> pg_backend_pid() AND a.datname = current_database()
   AND a.backend_type = 'client backend';

-- name: transactions_running
-- Which of the given virtual transactions still run.
SELECT l.virtualxid
  FROM pg_locks l
 WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid = ANY(%(vxids)s::text[]);

-- name: slot_copied
-- How many of the slots a copy already brought here (fenced 'copied' in the
-- copy's own transaction, migration 22).
SELECT count(*) FROM slot_fences
 WHERE slot = ANY(%(slots)s::int[]) AND state = 'copied';

-- name: slot_running_grace
-- The RUNNING jobs a move just copied here keep their attempt and holder, with
-- a lease of at least %(grace)s seconds more: while their slot was fenced the
-- holder could neither renew it nor write its outcome, and this shard's reaper
-- must not run them again before the holder has had that time (issue 42).
-- Only RUNNING rows are read (the partial index jobs_lease_idx).
UPDATE jobs
   SET lease_until = greatest(lease_until, now() + make_interval(secs => %(grace)s))
 WHERE status = 'RUNNING' AND vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_rows_cron_jobs
-- The rows of cron_jobs in the slots (a move's copy, as COPY's query).
SELECT * FROM cron_jobs
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_delete_cron_jobs
DELETE FROM cron_jobs
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_rows_cron_occurrences
-- The rows of cron_occurrences in the slots (a move's copy, as COPY's query).
SELECT * FROM cron_occurrences
 WHERE vakit_slot(cron_id) = ANY(%(slots)s::int[]);

-- name: slot_delete_cron_occurrences
DELETE FROM cron_occurrences
 WHERE vakit_slot(cron_id) = ANY(%(slots)s::int[]);

-- name: slot_rows_jobs_far
-- The rows of jobs_far in the slots (a move's copy, as COPY's query).
SELECT * FROM jobs_far
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_delete_jobs_far
DELETE FROM jobs_far
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_rows_jobs
-- The rows of jobs in the slots (a move's copy, as COPY's query).
SELECT * FROM jobs
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_delete_jobs
DELETE FROM jobs
 WHERE vakit_slot(id) = ANY(%(slots)s::int[]);

-- name: slot_rows_job_keys
-- The rows of job_keys in the slots (a move's copy, as COPY's query).
SELECT * FROM job_keys
 WHERE vakit_slot(job_id) = ANY(%(slots)s::int[]);

-- name: slot_delete_job_keys
DELETE FROM job_keys
 WHERE vakit_slot(job_id) = ANY(%(slots)s::int[]);

-- name: slot_row_counts
-- Rows per movable table, of the slots (of all when %(all)s).
SELECT
       (SELECT count(*) FROM cron_jobs WHERE %(all)s OR vakit_slot(id) = ANY(%(slots)s::int[])) AS cron_jobs,
       (SELECT count(*) FROM cron_occurrences WHERE %(all)s OR vakit_slot(cron_id) = ANY(%(slots)s::int[])) AS cron_occurrences,
       (SELECT count(*) FROM jobs_far WHERE %(all)s OR vakit_slot(id) = ANY(%(slots)s::int[])) AS jobs_far,
       (SELECT count(*) FROM jobs WHERE %(all)s OR vakit_slot(id) = ANY(%(slots)s::int[])) AS jobs,
       (SELECT count(*) FROM job_keys WHERE %(all)s OR vakit_slot(job_id) = ANY(%(slots)s::int[])) AS job_keys;

-- name: slot_due_within
-- The wave check: jobs of the slots due within %(seconds)s of this
-- database's clock (near, and far ones not paused), and crons of them that
-- fire by then (each a job to be).
SELECT (SELECT count(*) FROM jobs
         WHERE status = 'SCHEDULED' AND run_at <= now() + make_interval(secs => %(seconds)s::float8)
           AND vakit_slot(id) = ANY(%(slots)s::int[]))
     + (SELECT count(*) FROM jobs_far
         WHERE run_at <= now() + make_interval(secs => %(seconds)s::float8) AND paused_at IS NULL
           AND vakit_slot(id) = ANY(%(slots)s::int[]))
     + (SELECT count(*) FROM cron_jobs
         WHERE enabled AND paused_at IS NULL
           AND next_fire_at <= now() + make_interval(secs => %(seconds)s::float8)
           AND vakit_slot(id) = ANY(%(slots)s::int[])) AS due;

-- name: slot_index_state
-- The move's slot indexes of a shard's movable tables (cluster/store/postgres/moves.py):
-- which exist, and whether each is valid (a CREATE INDEX CONCURRENTLY cut
-- short leaves an invalid one behind, which must be dropped and built again).
SELECT c.relname AS name, i.indisvalid AS valid
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname LIKE 'vakit_move_slot_%%';
