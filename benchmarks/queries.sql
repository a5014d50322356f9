-- Every statement the benchmarks run, by name, loaded by benchmarks/sql.py
-- with the same loader as cluster/store/sql/*.sql. `{table}` is filled in
-- with psycopg.sql.Identifier, never by string formatting.
--
-- The statements Vakit itself runs (claim_jobs, finish_jobs) are not copied
-- here: the batched ceiling uses cluster.sql.QUERIES directly.

-- name: copy_jobs
-- Text COPY of freshly made SCHEDULED rows; the harness formats the lines.
COPY {table} (id, owner_service, type, scheduled_for, run_at, status, max_attempts,
              timeout_seconds, target_kind, target, payload) FROM STDIN;

-- name: analyze_table
-- A production table has planner statistics; a table loaded a second ago has
-- none until autovacuum gets to it.
ANALYZE {table};

-- name: create_ceiling_table
-- LIKE jobs with its indexes (primary key, the partial due and lease
-- indexes) but without its CHECK constraints: the hot table only allows
-- SCHEDULED and RUNNING, and the seed's naive completion writes SUCCEEDED.
CREATE TABLE {table} (LIKE jobs INCLUDING DEFAULTS INCLUDING INDEXES);

-- name: drop_table
DROP TABLE IF EXISTS {table};

-- name: naive_claim
-- The seed's claim (seed 000, "Sahiplenme"), verbatim but for the batch size.
WITH due AS (
    SELECT id
      FROM {table}
     WHERE status = 'SCHEDULED' AND run_at <= now()
     ORDER BY run_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
UPDATE {table} j
   SET status = 'RUNNING', attempt = j.attempt + 1,
       locked_by = %(worker)s, lease_until = now() + interval '2 minutes'
  FROM due
 WHERE j.id = due.id
RETURNING j.id, j.attempt, j.target, j.payload;

-- name: naive_complete
-- The seed's completion: one statement (and one commit) per job, fenced by
-- the attempt.
UPDATE {table} SET status = 'SUCCEEDED', lease_until = NULL
 WHERE id = %(id)s AND status = 'RUNNING' AND attempt = %(attempt)s;

-- name: owner_pending
-- Rows of one benchmark run (its owners) still in the near or far table, by status.
SELECT status, count(*) AS n
  FROM (SELECT status FROM jobs WHERE owner_service = ANY(%(owners)s)
        UNION ALL
        SELECT status FROM jobs_far WHERE owner_service = ANY(%(owners)s)) p
 GROUP BY status;

-- name: owner_history_counts
SELECT status, count(*) AS n FROM job_history WHERE owner_service = ANY(%(owners)s) GROUP BY status;

-- name: owner_outcomes
-- One row per finished job of a run: logical time, first start (the first
-- attempt is the one that says whether the job started on time), finish,
-- final status, attempts used, and when the row was created (by the API, the
-- COPY or the cron materializer). Epoch seconds keep the client side cheap
-- for a million rows.
SELECT extract(epoch FROM h.scheduled_for)::float8 AS scheduled,
       extract(epoch FROM a.first_start)::float8 AS started,
       extract(epoch FROM h.finished_at)::float8 AS finished,
       h.status,
       coalesce(a.attempts, 0) AS attempts,
       extract(epoch FROM h.created_at)::float8 AS created
  FROM job_history h
  LEFT JOIN (SELECT job_id, min(started_at) AS first_start, count(*) AS attempts
               FROM job_attempts GROUP BY job_id) a ON a.job_id = h.id
 WHERE h.owner_service = ANY(%(owners)s);

-- name: slot_jobs_visible
-- Jobs of a run due at one instant that exist right now, wherever they are
-- (near table, far table, or already finished): polled before T to see when
-- a cron wave's last occurrence became visible (committed).
SELECT (SELECT count(*) FROM jobs
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s)
     + (SELECT count(*) FROM jobs_far
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s)
     + (SELECT count(*) FROM job_history
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s) AS n;

-- name: slot_occurrences
-- A cron wave's occurrences of one slot on this shard, after the wave: how
-- many jobs, how many distinct crons (one each, or the wave doubled), how
-- many were created before the slot, and when the first and last were
-- created (their transaction's start: `created_at` defaults to now()).
SELECT count(*) AS jobs,
       count(DISTINCT cron_id) AS crons,
       count(*) FILTER (WHERE created_at < %(slot)s) AS before_slot,
       extract(epoch FROM min(created_at))::float8 AS first_created,
       extract(epoch FROM max(created_at))::float8 AS last_created
  FROM (SELECT cron_id, created_at FROM jobs
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s
        UNION ALL
        SELECT cron_id, created_at FROM jobs_far
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s
        UNION ALL
        SELECT cron_id, created_at FROM job_history
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for = %(slot)s) o;

-- name: owner_crons
-- Cron definitions of a run on this shard, and how many wait for the slot.
SELECT count(*) AS crons,
       count(*) FILTER (WHERE next_fire_at = %(slot)s) AS due_at_slot
  FROM cron_jobs WHERE owner_service = ANY(%(owners)s);

-- name: server_version
SELECT current_setting('server_version') AS version;

-- name: server_settings
SELECT name, current_setting(name) AS value FROM pg_settings
 WHERE name IN ('shared_buffers', 'fsync', 'synchronous_commit', 'full_page_writes',
                'max_wal_size', 'max_connections', 'autovacuum', 'work_mem', 'TimeZone');

-- name: create_statement_stats
-- Needs shared_preload_libraries = pg_stat_statements (``--pg-stats``).
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: checkpoint
-- Before a wave's instant: the wave's pages then cost the full-page images a
-- deployment's do (wave.py, checkpoint_before_claims).
CHECKPOINT;

-- name: wal_stats
-- What a shard has written to its WAL so far (records, full-page images,
-- bytes) and its checkpoints, timed and requested (max_wal_size reached);
-- the wave reports the difference over its window (wave.py, wal_window).
SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint AS wal_bytes,
       b.checkpoints_timed, b.checkpoints_req
  FROM pg_stat_wal w, pg_stat_bgwriter b;

-- name: reset_statement_stats
SELECT pg_stat_statements_reset();

-- name: top_statements
-- Where the shard's CPU went, statement by statement, since the last reset.
SELECT query, calls, total_exec_time AS total_ms, rows, shared_blks_hit, shared_blks_read,
       shared_blks_dirtied, wal_records, wal_fpi, wal_bytes
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time DESC
 LIMIT %(limit)s;

-- name: copy_history
-- Text COPY of finished jobs for the search benchmark; the script formats the lines.
COPY job_history (id, owner_service, type, scheduled_for, run_at, status, attempt,
                  max_attempts, timeout_seconds, target_kind, target, payload, last_error,
                  created_at, finished_at) FROM STDIN;

-- name: vacuum_history
VACUUM ANALYZE job_history;

-- name: history_partitions
SELECT count(*) FROM pg_inherits WHERE inhparent = 'job_history'::regclass;

-- name: owner_due_pending
-- Rows of a run still waiting or running whose logical time is at or
-- before %(until)s (a cron's later occurrences, made ahead, are not
-- counted): zero on every shard once the run's backlog up to then fired.
SELECT (SELECT count(*) FROM jobs
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for <= %(until)s)
     + (SELECT count(*) FROM jobs_far
         WHERE owner_service = ANY(%(owners)s) AND scheduled_for <= %(until)s) AS n;

-- name: campaign_job_states
-- The fault campaign's final state: where each acknowledged job is now.
-- A job is in exactly one of the three tables; the history's status wins
-- if a move were ever caught half way.
SELECT id, status, 1 AS rank FROM job_history WHERE id = ANY(%(ids)s)
UNION ALL
SELECT id, status, 2 AS rank FROM jobs WHERE id = ANY(%(ids)s)
UNION ALL
SELECT id, status, 3 AS rank FROM jobs_far WHERE id = ANY(%(ids)s)
ORDER BY rank DESC;
