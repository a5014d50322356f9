-- Every statement the PostgreSQL store runs, by name. Loaded once by
-- cluster/sql/__init__.py. Parameters are psycopg named placeholders.
--
-- Time: `coalesce(%(now)s, now())` lets a test pin the clock; production
-- passes NULL and the database's now() is the lease clock.

-- name: insert_job_key
-- The idempotency ledger row; nothing returned means the key exists already.
INSERT INTO job_keys (owner_service, idempotency_key, job_id, fingerprint)
VALUES (%(owner)s, %(key)s, %(id)s, %(fingerprint)s)
ON CONFLICT DO NOTHING
RETURNING job_id;

-- name: get_job_key
SELECT job_id, fingerprint FROM job_keys
 WHERE owner_service = %(owner)s AND idempotency_key = %(key)s;

-- name: insert_job
INSERT INTO jobs (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                  max_attempts, timeout_seconds, target_kind, target, payload)
VALUES (%(id)s, %(owner)s, %(key)s, %(type)s, %(cron_id)s, %(scheduled_for)s, %(run_at)s,
        %(max_attempts)s, %(timeout_seconds)s, %(target_kind)s, %(target)s, %(payload)s);

-- name: insert_far_job
INSERT INTO jobs_far (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                      max_attempts, timeout_seconds, target_kind, target, payload)
VALUES (%(id)s, %(owner)s, %(key)s, %(type)s, %(cron_id)s, %(scheduled_for)s, %(run_at)s,
        %(max_attempts)s, %(timeout_seconds)s, %(target_kind)s, %(target)s, %(payload)s);

-- name: get_job
-- Far, then near, then history: the order in which a job moves, so a job
-- that moves between two reads is still found.
SELECT 'far' AS place, id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       NULL::timestamptz AS finished_at
  FROM jobs_far WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       NULL
  FROM jobs WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       finished_at
  FROM job_history WHERE id = %(id)s AND owner_service = %(owner)s
LIMIT 1;

-- name: get_attempts
SELECT attempt, worker, started_at, finished_at, outcome, error, lateness_seconds
  FROM job_attempts WHERE job_id = %(id)s ORDER BY attempt, finished_at;

-- name: reschedule_far_job
UPDATE jobs_far SET run_at = %(run_at)s
 WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
RETURNING id;

-- name: reschedule_job
UPDATE jobs SET run_at = %(run_at)s
 WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
RETURNING id;

-- name: cancel_far_job
WITH gone AS (
    DELETE FROM jobs_far
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
    RETURNING *
)
INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                         status, attempt, max_attempts, timeout_seconds, target_kind, target,
                         payload, last_error, created_at, finished_at)
SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, 'CANCELLED',
       attempt, max_attempts, timeout_seconds, target_kind, target, payload, last_error,
       created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;

-- name: cancel_job
WITH gone AS (
    DELETE FROM jobs
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
    RETURNING *
)
INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                         status, attempt, max_attempts, timeout_seconds, target_kind, target,
                         payload, last_error, created_at, finished_at)
SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, 'CANCELLED',
       attempt, max_attempts, timeout_seconds, target_kind, target, payload, last_error,
       created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;

-- name: claim_jobs
-- One short transaction: lock due rows others have not locked, mark them
-- RUNNING with a new attempt (the fencing token) and a lease. The lease runs
-- from the later of now and run_at (a prefetched job waits for its run_at)
-- and covers the job's timeout, capped by the configured lease: long jobs
-- heartbeat.
WITH due AS (
    SELECT id FROM jobs
     WHERE status = 'SCHEDULED'
       AND run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(prefetch)s)
     ORDER BY run_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs j
   SET status = 'RUNNING',
       attempt = j.attempt + 1,
       locked_by = %(worker)s,
       claimed_at = coalesce(%(now)s, now()),
       lease_until = greatest(j.run_at, coalesce(%(now)s, now()))
                     + make_interval(secs => least(j.timeout_seconds, %(lease)s) + %(grace)s)
  FROM due
 WHERE j.id = due.id
RETURNING j.id, j.attempt, j.max_attempts, j.type, j.cron_id, j.scheduled_for, j.run_at,
          j.timeout_seconds, j.target, j.payload, j.lease_until;

-- name: heartbeat
-- Extend the leases this worker still holds; a missing id was lost (fenced).
UPDATE jobs j
   SET lease_until = greatest(j.lease_until,
                              coalesce(%(now)s, now()) + make_interval(secs => %(lease)s + %(grace)s))
  FROM unnest(%(ids)s::uuid[], %(attempts)s::int[]) AS v(id, attempt)
 WHERE j.id = v.id AND j.status = 'RUNNING' AND j.attempt = v.attempt
RETURNING j.id;

-- name: finish_jobs
-- Record a batch of attempt outcomes in one statement, each fenced by its
-- attempt: SUCCEEDED and FAILED rows move to history, RETRY rows go back to
-- SCHEDULED at now + delay. Only rows still held by that attempt are touched,
-- and only those get an attempt-log row; the ids returned are the writes that
-- counted.
WITH v AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(outcomes)s::text[],
                         %(errors)s::text[], %(delays)s::float8[], %(started)s::timestamptz[],
                         %(lateness)s::float8[], %(workers)s::text[])
           AS v(id, attempt, outcome, error, delay, started_at, lateness, worker)
),
moved AS (
    DELETE FROM jobs j USING v
     WHERE j.id = v.id AND j.status = 'RUNNING' AND j.attempt = v.attempt
       AND v.outcome IN ('SUCCEEDED', 'FAILED')
    RETURNING j.*, v.outcome, v.error AS new_error
),
retried AS (
    UPDATE jobs j
       SET status = 'SCHEDULED',
           run_at = coalesce(%(now)s, now()) + make_interval(secs => v.delay),
           locked_by = NULL, lease_until = NULL, claimed_at = NULL, last_error = v.error
      FROM v
     WHERE j.id = v.id AND j.status = 'RUNNING' AND j.attempt = v.attempt
       AND v.outcome = 'RETRY'
    RETURNING j.id, j.attempt
),
hist AS (
    INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for,
                             run_at, status, attempt, max_attempts, timeout_seconds, target_kind,
                             target, payload, last_error, created_at, finished_at)
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, outcome,
           attempt, max_attempts, timeout_seconds, target_kind, target, payload,
           coalesce(new_error, last_error), created_at, coalesce(%(now)s, now())
      FROM moved
),
done AS (
    SELECT id, attempt FROM moved
    UNION ALL
    SELECT id, attempt FROM retried
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error,
                              lateness_seconds)
    SELECT v.id, v.attempt, v.worker, v.started_at, coalesce(%(now)s, now()),
           CASE v.outcome WHEN 'RETRY' THEN 'ERROR' WHEN 'FAILED' THEN 'ERROR' ELSE v.outcome END,
           v.error, v.lateness
      FROM v JOIN done ON done.id = v.id AND done.attempt = v.attempt
)
SELECT id FROM done;

-- name: release_jobs
-- A stopping worker gives back jobs it claimed. The attempt keeps its value
-- (the fencing token never goes back); a job that was never fired gets its
-- attempt refunded through max_attempts, so a restart does not use up the
-- job's budget.
UPDATE jobs j
   SET status = 'SCHEDULED', locked_by = NULL, lease_until = NULL, claimed_at = NULL,
       max_attempts = least(j.max_attempts + CASE WHEN v.refund THEN 1 ELSE 0 END, 100)
  FROM unnest(%(ids)s::uuid[], %(attempts)s::int[], %(refunds)s::bool[]) AS v(id, attempt, refund)
 WHERE j.id = v.id AND j.status = 'RUNNING' AND j.attempt = v.attempt
RETURNING j.id;

-- name: reap_expired
-- Leases that ran out: the worker died or stalled. Back to SCHEDULED when
-- attempts are left, to history as FAILED when not; either way the attempt
-- is logged as LEASE_EXPIRED with the worker that held it.
WITH expired AS (
    SELECT id, attempt, locked_by, claimed_at FROM jobs
     WHERE status = 'RUNNING' AND lease_until < coalesce(%(now)s, now())
     ORDER BY lease_until
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
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
    INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for,
                             run_at, status, attempt, max_attempts, timeout_seconds, target_kind,
                             target, payload, last_error, created_at, finished_at)
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, 'FAILED',
           attempt, max_attempts, timeout_seconds, target_kind, target, payload,
           'lease expired (worker ' || coalesce(locked_by, '?') || '), no attempts left',
           created_at, coalesce(%(now)s, now())
      FROM dead
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome, error)
    SELECT e.id, e.attempt, e.locked_by, e.claimed_at, coalesce(%(now)s, now()),
           'LEASE_EXPIRED', 'lease expired'
      FROM expired e
     WHERE e.id IN (SELECT id FROM again UNION ALL SELECT id FROM dead)
)
SELECT (SELECT count(*) FROM again) AS rescheduled, (SELECT count(*) FROM dead) AS failed;

-- name: move_far_jobs
-- Bring far jobs that are now within the horizon into the hot table, one
-- batch per transaction.
WITH moving AS (
    DELETE FROM jobs_far
     WHERE id IN (SELECT id FROM jobs_far
                   WHERE run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(horizon)s)
                   ORDER BY run_at
                   LIMIT %(limit)s
                     FOR UPDATE SKIP LOCKED)
    RETURNING *
)
INSERT INTO jobs SELECT * FROM moving
RETURNING id;

-- name: backlog
SELECT count(*) AS due,
       coalesce(extract(epoch FROM coalesce(%(now)s, now()) - min(run_at)), 0) AS oldest_age
  FROM jobs
 WHERE status = 'SCHEDULED' AND run_at <= coalesce(%(now)s, now());

-- name: worker_beat
INSERT INTO worker_beats (worker_id, last_seen) VALUES (%(worker)s, now())
ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen;

-- name: workers_seen
SELECT worker_id, last_seen FROM worker_beats
 WHERE last_seen > now() - make_interval(secs => %(within)s)
 ORDER BY worker_id;

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
-- Keys outlive their job's history only while the job is still pending.
DELETE FROM job_keys
 WHERE ctid IN (SELECT k.ctid FROM job_keys k
                 WHERE k.created_at < %(before)s
                   AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = k.job_id)
                   AND NOT EXISTS (SELECT 1 FROM jobs_far WHERE id = k.job_id)
                 LIMIT %(limit)s);

-- name: schema_version
SELECT CASE WHEN to_regclass('schema_migrations') IS NULL THEN 0
            ELSE (SELECT coalesce(max(version), 0) FROM schema_migrations) END AS version;

-- name: migration_lock
SELECT pg_advisory_xact_lock(%(key)s);

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: record_migration
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s);
