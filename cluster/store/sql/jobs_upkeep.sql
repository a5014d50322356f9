-- The leader loops' passes (cluster/store/postgres/upkeep.py): reaper, mover, backlog, janitor.
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

-- name: reap_expired
-- Leases that ran out: the worker died or stalled. Back to SCHEDULED when
-- attempts are left, to history as FAILED when not; either way the attempt
-- is logged as LEASE_EXPIRED with the worker that held it.
WITH expired AS (
    SELECT id, attempt, locked_by, claimed_at FROM jobs
     WHERE status = 'RUNNING' AND lease_until < coalesce(%(now)s, now())
       AND {fence:jobs.id}
     ORDER BY lease_until
     LIMIT %(limit)s
       FOR UPDATE OF jobs SKIP LOCKED
),
again AS (
    UPDATE jobs j
       SET status = 'SCHEDULED', locked_by = NULL, lease_until = NULL, claimed_at = NULL,
           last_error = 'lease expired (worker ' || coalesce(e.locked_by, '?') || ')'
      FROM expired e
     WHERE j.id = e.id AND j.attempt < j.max_attempts
    RETURNING j.id
),
dead AS (
    DELETE FROM jobs j USING expired e
     WHERE j.id = e.id AND j.attempt >= j.max_attempts
    RETURNING j.*
),
hist AS (
    INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
    SELECT {job.given}, 'FAILED', attempt,
           'lease expired (worker ' || coalesce(locked_by, '?') || '), no attempts left', created_at, coalesce(%(now)s, now())
      FROM dead
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error)
    SELECT e.id, e.attempt, e.locked_by, e.claimed_at, coalesce(%(now)s, now()),
           'LEASE_EXPIRED', 'lease expired'
      FROM expired e
     WHERE e.id IN (SELECT id FROM again UNION ALL SELECT id FROM dead)
)
SELECT (SELECT count(*) FROM again) AS rescheduled, (SELECT count(*) FROM dead) AS failed,
       (SELECT coalesce(json_agg(json_build_array(owner_service, target_kind, n)), '[]')
          FROM (SELECT owner_service, target_kind, count(*) AS n FROM dead GROUP BY 1, 2) d)
           AS failed_by;

-- name: move_far_jobs
-- Bring far jobs that are now within the horizon into the hot table, one
-- batch per transaction.
WITH moving AS (
    DELETE FROM jobs_far
     WHERE id IN (SELECT id FROM jobs_far
                   WHERE run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(horizon)s)
                     AND paused_at IS NULL AND {fence:jobs_far.id}
                   ORDER BY run_at
                   LIMIT %(limit)s
                     FOR UPDATE OF jobs_far SKIP LOCKED)
    RETURNING *
)
INSERT INTO jobs SELECT * FROM moving
RETURNING id;

-- name: backlog
-- Counted up to a cap: in a wave the exact figure past it does not matter,
-- and counting a million rows every few seconds would.
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs
                               WHERE status = 'SCHEDULED' AND run_at <= coalesce(%(now)s, now())
                               LIMIT %(cap)s) capped) AS due,
       coalesce(extract(epoch FROM coalesce(%(now)s, now())
                        - (SELECT min(run_at) FROM jobs WHERE status = 'SCHEDULED'
                             AND run_at <= coalesce(%(now)s, now()))), 0) AS oldest_age;

-- name: history_today
-- The janitor's "today" when no clock gives it: the database's, in UTC.
SELECT (now() AT TIME ZONE 'UTC')::date AS today;

-- name: history_lock
-- One janitor pass at a time on a shard (two leaders overlap for a moment
-- when leadership moves): PostgreSQL fails one of two sessions that create
-- and drop partitions of the same parent at once ("could not find tuple for
-- parent of relation"). A session lock, not a transaction: the pass's DDL must
-- not hold the parent's locks for the whole pass. The key is the janitor's own.
SELECT pg_advisory_lock(%(key)s);

-- name: history_unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: ensure_partitions
SELECT vakit_ensure_day_partitions('job_history', %(from)s::date, %(to)s::date)
     + vakit_ensure_day_partitions('job_attempts', %(from)s::date, %(to)s::date) AS made;

-- name: list_partitions
SELECT c.relname AS name, p.relname AS parent
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  JOIN pg_class p ON p.oid = i.inhparent
 WHERE p.relname IN ('job_history', 'job_attempts') AND c.relname LIKE '%%\_p________';

-- name: purge_default_partitions
WITH h AS (DELETE FROM job_history_default WHERE finished_at < %(before)s RETURNING 1),
     a AS (DELETE FROM job_attempts_default WHERE finished_at < %(before)s RETURNING 1)
SELECT (SELECT count(*) FROM h) + (SELECT count(*) FROM a) AS purged;

-- name: purge_job_keys
-- A key lives as long as its job and the job's history: a job that waited
-- longer than the retention keeps its key while it is pending and for the
-- retention after it finished (the history lookup is each day's primary key).
-- Each key's job is looked up by primary key, as in purge_cron_occurrences.
DELETE FROM job_keys
 WHERE ctid IN (SELECT k.ctid FROM job_keys k
                 WHERE k.created_at < %(before)s AND {fence:k.job_id}
                   AND (SELECT 1 FROM jobs WHERE id = k.job_id) IS NULL
                   AND (SELECT 1 FROM jobs_far WHERE id = k.job_id) IS NULL
                   AND (SELECT 1 FROM job_history WHERE id = k.job_id LIMIT 1) IS NULL
                 LIMIT %(limit)s);
