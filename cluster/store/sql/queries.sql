-- Every statement the PostgreSQL store runs, by name. Loaded once by
-- cluster/sql/__init__.py. Parameters are psycopg named placeholders.
--
-- Arrays (`%(ids)b::uuid[]`) are sent in binary: psycopg dumps a list in
-- binary about 7 times faster than as text (a timestamp 15 times), and a
-- batch of 500 outcomes carries seven of them.
--
-- Time: `coalesce(%(now)s, now())` lets a test pin the clock; production
-- passes NULL and the database's now() is the lease clock.
--
-- Fencing writes say `status <> 'SCHEDULED'`, which on the hot table (only
-- SCHEDULED and RUNNING, by its CHECK constraint) means RUNNING. Written as
-- `status = 'RUNNING'`, the planner matched the partial lease index, and with
-- statistics taken while most rows were SCHEDULED it scanned every running
-- row for every outcome of a batch: 98 % of a wave's database time. This
-- form leaves it the primary key. tests/integration/test_plans.py checks it.

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

-- name: insert_job_again
-- A create once more, after its first try's link failed with the statement
-- sent (an ambiguous commit). The job's id is the create's own idempotency
-- key: nothing is inserted when the first try committed, wherever the job is
-- by now (near, far, or finished already). Only this rare retry pays for the
-- history lookup (the primary key of each day).
WITH found AS (
    SELECT id FROM jobs WHERE id = %(id)s
    UNION ALL SELECT id FROM jobs_far WHERE id = %(id)s
    UNION ALL SELECT id FROM job_history WHERE id = %(id)s
), near AS (
    INSERT INTO jobs (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                  max_attempts, timeout_seconds, target_kind, target, payload)
    SELECT %(id)s::uuid, %(owner)s::varchar, %(key)s::varchar, %(type)s::varchar, %(cron_id)s::uuid,
           %(scheduled_for)s::timestamptz, %(run_at)s::timestamptz, %(max_attempts)s::int,
           %(timeout_seconds)s::int, %(target_kind)s::varchar, %(target)s::jsonb, %(payload)s::jsonb
     WHERE NOT %(far)s AND NOT EXISTS (SELECT 1 FROM found)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), far AS (
    INSERT INTO jobs_far (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                  max_attempts, timeout_seconds, target_kind, target, payload)
    SELECT %(id)s::uuid, %(owner)s::varchar, %(key)s::varchar, %(type)s::varchar, %(cron_id)s::uuid,
           %(scheduled_for)s::timestamptz, %(run_at)s::timestamptz, %(max_attempts)s::int,
           %(timeout_seconds)s::int, %(target_kind)s::varchar, %(target)s::jsonb, %(payload)s::jsonb
     WHERE %(far)s AND NOT EXISTS (SELECT 1 FROM found)
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM near) + (SELECT count(*) FROM far) AS inserted;

-- name: end_session
-- Ends the server session of a create whose link failed after the create was
-- sent, before it is tried again: a statement the network still holds (TCP
-- retransmits what an abandoned socket had sent) must not run after the
-- retry decided. Waits up to a second for it to exit. Only a session of this
-- role on this database: a pid reused since is most likely not one.
SELECT pg_terminate_backend(pid, 1000) AS ended FROM pg_stat_activity
 WHERE pid = %(pid)s AND usename = current_user AND datname = current_database()
   AND pid <> pg_backend_pid();

-- name: insert_jobs_batch
-- A batch of creates in one statement (the batch API): the idempotency
-- ledger first, then the near and far tables, each one set-based insert. A
-- key that exists inserts nothing, and neither does its job. Returns the ids
-- of keyed jobs NOT created (repeats or conflicts, told apart by
-- get_jobs_by_keys): none in the common case. The store sends each key once
-- per batch and resolves repeats inside a batch itself. The batch comes as one
-- JSON array of rows, targets and payloads inside: one document PostgreSQL
-- parses in C, where fourteen column arrays cost the API a Python loop per
-- value to encode.
--
-- Each row is an array, its values in the order of the store's
-- _BATCH_COLUMNS (cluster/store/postgres.py checks the list below against
-- it when it loads). Rows as objects, read by jsonb_to_recordset, cost
-- more: on a lab shard, reading a thousand rows took 13-16 ms as objects
-- against 5-6 ms as arrays, and the whole statement for a thousand keyed
-- jobs 35.6 against 30.3 ms (medians). The document is a third shorter
-- without the column names, and a value is taken by position, not by name.
WITH v AS (
    SELECT (r->>0)::uuid AS id, r->>1 AS owner_service, r->>2 AS idempotency_key,
           r->>3 AS fingerprint, r->>4 AS type, (r->>5)::uuid AS cron_id,
           (r->>6)::timestamptz AS scheduled_for, (r->>7)::timestamptz AS run_at,
           (r->>8)::int AS max_attempts, (r->>9)::int AS timeout_seconds,
           r->>10 AS target_kind, r->11 AS target, r->12 AS payload, (r->>13)::bool AS far
      FROM jsonb_array_elements(%(rows)s::jsonb) AS rows(r)
),
keyed AS (
    -- In key order: two batches that share keys wait on each other's
    -- uncommitted keys in the same order, never in a cycle (a deadlock).
    INSERT INTO job_keys (owner_service, idempotency_key, job_id, fingerprint)
    SELECT owner_service, idempotency_key, id, fingerprint FROM v
     WHERE idempotency_key IS NOT NULL
     ORDER BY owner_service, idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
),
fresh AS (
    -- A JSON null payload is the JSON null a single create stores (r->12
    -- is never SQL NULL: a NULL was a 500 for the shard's part of the batch).
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
           max_attempts, timeout_seconds, target_kind, target, payload, far
      FROM v WHERE idempotency_key IS NULL OR id IN (SELECT job_id FROM keyed)
),
near_rows AS (
    INSERT INTO jobs (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                      max_attempts, timeout_seconds, target_kind, target, payload)
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
           max_attempts, timeout_seconds, target_kind, target, payload
      FROM fresh WHERE NOT far
),
far_rows AS (
    INSERT INTO jobs_far (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                          max_attempts, timeout_seconds, target_kind, target, payload)
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
           max_attempts, timeout_seconds, target_kind, target, payload
      FROM fresh WHERE far
)
SELECT id FROM v
 WHERE idempotency_key IS NOT NULL AND NOT EXISTS (SELECT FROM keyed k WHERE k.job_id = v.id);

-- name: get_jobs_by_keys
-- The ledger rows of keys that exist, each with its first job (far, near,
-- then history, as get_job); the job columns are NULL when its history has
-- expired. A separate statement from insert_jobs_batch: it must see a key a
-- concurrent create committed while our insert waited on it.
SELECT k.owner_service AS key_owner, k.idempotency_key AS key, k.fingerprint AS key_fingerprint,
       j.*
  FROM unnest(%(owners)b::text[], %(keys)b::text[]) AS v(owner_service, idempotency_key)
  JOIN job_keys k ON k.owner_service = v.owner_service AND k.idempotency_key = v.idempotency_key
  LEFT JOIN LATERAL (
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, status,
           attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
           NULL::timestamptz AS finished_at
      FROM jobs_far WHERE id = k.job_id
    UNION ALL
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, status,
           attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at, NULL
      FROM jobs WHERE id = k.job_id
    UNION ALL
    SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, status,
           attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
           finished_at
      FROM job_history WHERE id = k.job_id
    LIMIT 1
  ) j ON true;

-- name: get_job
-- Far, then near, then history: the order in which a job moves, so a job
-- that moves between two reads is still found.
SELECT 'far' AS place, id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       NULL::timestamptz AS finished_at, paused_at, pause_reason
  FROM jobs_far WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       NULL, paused_at, pause_reason
  FROM jobs WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
       status, attempt, max_attempts, timeout_seconds, target, payload, last_error, created_at,
       finished_at, NULL, NULL
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
-- heartbeat. With a window (from, until) the claim takes only jobs due in it:
-- a worker preloading a wave leaves the jobs before the wave to the regular
-- claims, which take them at their time.
WITH due AS (
    SELECT id FROM jobs
     WHERE status = 'SCHEDULED'
       AND run_at >= coalesce(%(from)s, '-infinity'::timestamptz)
       AND run_at < coalesce(%(until)s,
                             coalesce(%(now)s, now()) + make_interval(secs => %(prefetch)s)
                             + interval '1 microsecond')
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
   -- Found by primary key: with the join alone the planner may read the
   -- whole table into a hash for a few hundred rows (a 100,000-job wave's
   -- claims took 20-30 ms each that way, against 2-3 ms by key).
   AND j.id = ANY(ARRAY(SELECT id FROM due))
-- The columns in the order of cluster.model.ClaimedJob's fields: each row
-- becomes one without a dict in between.
RETURNING j.id, j.attempt, j.max_attempts, j.type, j.scheduled_for, j.run_at,
          j.timeout_seconds, j.target::text, j.payload::text AS payload_json, j.lease_until,
          j.cron_id, j.concurrency, j.deadline_at, j.owner_service;

-- name: due_ahead
-- The worker's wave forecast: SCHEDULED jobs due in each upcoming second,
-- counting only the first few (the limit bounds the index entries read,
-- however large the wave). Seconds are whole UTC epoch seconds.
SELECT to_timestamp(floor(extract(epoch FROM run_at))) AS second, count(*)::int AS jobs
  FROM (SELECT run_at FROM jobs
         WHERE status = 'SCHEDULED'
           AND run_at > coalesce(%(now)s, now())
           AND run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(horizon)s)
         ORDER BY run_at
         LIMIT %(limit)s) ahead
 GROUP BY 1
 ORDER BY 1;

-- name: heartbeat
-- Extend the leases this worker still holds; a missing id was lost (fenced).
UPDATE jobs j
   SET lease_until = greatest(j.lease_until,
                              coalesce(%(now)s, now()) + make_interval(secs => %(lease)s + %(grace)s))
  FROM unnest(%(ids)b::uuid[], %(attempts)b::int[]) AS v(id, attempt)
 WHERE j.id = v.id AND j.status <> 'SCHEDULED' AND j.attempt = v.attempt
RETURNING j.id;

-- name: finish_jobs
-- Record a batch of attempt outcomes in one statement, each fenced by its
-- attempt: SUCCEEDED, FAILED and SKIPPED rows move to history, RETRY rows go
-- back to SCHEDULED at now + delay. Only rows still held by that attempt are
-- touched, and only those get an attempt-log row; the ids returned are the
-- writes that counted. A cron's last success is not stamped here (a wide-row
-- UPDATE per occurrence): fold_cron_successes reads it from the history.
WITH v AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(attempts)b::int[], %(outcomes)b::text[],
                         %(errors)b::text[], %(delays)b::float8[], %(started)b::timestamptz[],
                         %(lateness)b::float8[])
           AS v(id, attempt, outcome, error, delay, started_at, lateness)
),
moved AS (
    DELETE FROM jobs j USING v
     WHERE j.id = v.id AND j.status <> 'SCHEDULED' AND j.attempt = v.attempt
       AND v.outcome IN ('SUCCEEDED', 'FAILED', 'SKIPPED')
    RETURNING j.*, v.outcome, v.error AS new_error
),
retried AS (
    UPDATE jobs j
       SET status = 'SCHEDULED',
           run_at = coalesce(%(now)s, now()) + make_interval(secs => v.delay),
           locked_by = NULL, lease_until = NULL, claimed_at = NULL, last_error = v.error
      FROM v
     WHERE j.id = v.id AND j.status <> 'SCHEDULED' AND j.attempt = v.attempt
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
    SELECT v.id, v.attempt, %(worker)s, v.started_at, coalesce(%(now)s, now()),
           CASE v.outcome WHEN 'RETRY' THEN 'ERROR' WHEN 'FAILED' THEN 'ERROR' ELSE v.outcome END,
           v.error, v.lateness
      FROM v JOIN done ON done.id = v.id AND done.attempt = v.attempt
)
SELECT id FROM done;

-- name: release_jobs
-- A stopping worker gives back jobs it claimed. The attempt keeps its value
-- (the fencing token never goes back); a job that was never fired gets its
-- attempt refunded through max_attempts, so a restart does not use up the
-- job's budget. A fired attempt is logged as RELEASED.
WITH v AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(attempts)b::int[], %(refunds)b::bool[])
           AS v(id, attempt, refund)
),
released AS (
    UPDATE jobs j
       SET status = 'SCHEDULED', locked_by = NULL, lease_until = NULL, claimed_at = NULL,
           max_attempts = least(j.max_attempts + CASE WHEN v.refund THEN 1 ELSE 0 END, 100)
      FROM v
     WHERE j.id = v.id AND j.status <> 'SCHEDULED' AND j.attempt = v.attempt
    RETURNING j.id, j.attempt, v.refund, %(worker)s::text AS worker
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, finished_at, outcome, error)
    SELECT id, attempt, worker, coalesce(%(now)s, now()), 'RELEASED', 'worker stopped before the attempt finished'
      FROM released WHERE NOT refund
)
SELECT id FROM released;

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
                     AND paused_at IS NULL
                   ORDER BY run_at
                   LIMIT %(limit)s
                     FOR UPDATE SKIP LOCKED)
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

-- name: pending_by_owner
-- For the per-owner quota: a scan of the pending tables, which the API runs
-- every quota_refresh_seconds at most (slower when it takes long), never
-- per create.
SELECT owner_service AS owner, count(*) AS n
  FROM (SELECT owner_service FROM jobs
        UNION ALL SELECT owner_service FROM jobs_far) pending
 GROUP BY owner_service
 ORDER BY n DESC
 LIMIT %(limit)s;

-- name: crons_by_owner
-- An index-only scan of cron_jobs_name_uq (owner_service, name).
SELECT owner_service AS owner, count(*) AS n
  FROM cron_jobs
 GROUP BY owner_service
 ORDER BY n DESC
 LIMIT %(limit)s;

-- name: worker_beat
INSERT INTO worker_beats (worker_id, last_seen) VALUES (%(worker)s, now())
ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen;

-- name: workers_seen
SELECT worker_id, last_seen FROM worker_beats
 WHERE last_seen > now() - make_interval(secs => %(within)s)
 ORDER BY worker_id;

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
                 WHERE k.created_at < %(before)s
                   AND (SELECT 1 FROM jobs WHERE id = k.job_id) IS NULL
                   AND (SELECT 1 FROM jobs_far WHERE id = k.job_id) IS NULL
                   AND (SELECT 1 FROM job_history WHERE id = k.job_id LIMIT 1) IS NULL
                 LIMIT %(limit)s);

-- name: purge_cron_occurrences
-- Ledger rows of slots past the retention (migration 17): made before
-- %(before)s, for a slot before it, and whose job is neither in the hot
-- nor the far table. A batch of at most %(limit)s rows a statement.
-- The old rows are found by the BRIN index on created_at; the slot's own
-- bound is written so that no index serves it (scheduled_for is the
-- primary key's second column: the planner ANDed a scan of the whole key
-- into the bitmap). The job is looked up by primary key for each old row
-- (a subquery per row): written NOT EXISTS, the planner made it a hash
-- anti-join, which reads the whole hot and far tables each batch
-- (test_plans).
DELETE FROM cron_occurrences
 WHERE ctid IN (SELECT o.ctid FROM cron_occurrences o
                 WHERE o.created_at < %(before)s
                   AND greatest(o.created_at, o.scheduled_for) < %(before)s
                   AND (SELECT 1 FROM jobs WHERE id = o.job_id) IS NULL
                   AND (SELECT 1 FROM jobs_far WHERE id = o.job_id) IS NULL
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

-- ---------------------------------------------------------------------------
-- Cron definitions and occurrences
-- ---------------------------------------------------------------------------

-- name: insert_cron
INSERT INTO cron_jobs (id, owner_service, name, schedule, schedule_kind, time_zone, type,
                       target_kind, target, payload, misfire_policy, concurrency, jitter_seconds,
                       max_attempts, timeout_seconds, starting_deadline_seconds, enabled, anchor,
                       next_fire_at, fingerprint, month_end_policy, dst_policy, start_at, end_at,
                       max_runs)
VALUES (%(id)s, %(owner)s, %(name)s, %(schedule)s, %(schedule_kind)s, %(time_zone)s, %(type)s,
        %(target_kind)s, %(target)s, %(payload)s, %(misfire_policy)s, %(concurrency)s,
        %(jitter_seconds)s, %(max_attempts)s, %(timeout_seconds)s, %(starting_deadline_seconds)s,
        %(enabled)s, %(anchor)s, %(next_fire_at)s, %(fingerprint)s, %(month_end_policy)s,
        %(dst_policy)s, %(start_at)s, %(end_at)s, %(max_runs)s)
ON CONFLICT (owner_service, name) DO NOTHING
RETURNING *;

-- name: get_cron_by_name
SELECT c.*, cron_recent_success(c.id) AS recent_success_at,
       r.status AS recent_result, r.finished_at AS recent_result_at
  FROM cron_jobs c LEFT JOIN LATERAL cron_recent_result(c.id) r ON true
 WHERE c.owner_service = %(owner)s AND c.name = %(name)s;

-- name: insert_crons
-- Many definitions in one statement (the batch API, `crons apply`). A name
-- that exists inserts nothing; the existing row comes back with
-- created = false and the store compares fingerprints. A name another
-- transaction inserted after this statement's snapshot comes back in
-- neither part: the store reads it with get_crons_by_names.
WITH v AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(owners)b::text[], %(names)b::text[],
                         %(schedules)b::text[], %(schedule_kinds)b::text[], %(time_zones)b::text[],
                         %(types)b::text[], %(target_kinds)b::text[], %(targets)b::text[],
                         %(payloads)b::text[], %(misfire_policies)b::text[],
                         %(concurrencies)b::text[], %(jitters)b::int[], %(max_attempts)b::int[],
                         %(timeouts)b::int[], %(deadlines)b::int[], %(enabled)b::bool[],
                         %(anchors)b::timestamptz[], %(next_fire)b::timestamptz[],
                         %(fingerprints)b::text[], %(month_ends)b::text[],
                         %(dsts)b::text[], %(start_ats)b::timestamptz[],
                         %(end_ats)b::timestamptz[], %(max_runs)b::int[])
           AS v(id, owner_service, name, schedule, schedule_kind, time_zone, type, target_kind,
                target, payload, misfire_policy, concurrency, jitter_seconds, max_attempts,
                timeout_seconds, starting_deadline_seconds, enabled, anchor, next_fire_at,
                fingerprint, month_end_policy, dst_policy, start_at, end_at, max_runs)
),
ins AS (
    INSERT INTO cron_jobs (id, owner_service, name, schedule, schedule_kind, time_zone, type,
                           target_kind, target, payload, misfire_policy, concurrency,
                           jitter_seconds, max_attempts, timeout_seconds,
                           starting_deadline_seconds, enabled, anchor, next_fire_at, fingerprint,
                           month_end_policy, dst_policy, start_at, end_at, max_runs)
    SELECT id, owner_service, name, schedule, schedule_kind, time_zone, type, target_kind,
           target::jsonb, payload::jsonb, misfire_policy, concurrency, jitter_seconds,
           max_attempts, timeout_seconds, starting_deadline_seconds, enabled, anchor,
           next_fire_at, fingerprint, month_end_policy, dst_policy, start_at, end_at, max_runs
      FROM v
    ON CONFLICT (owner_service, name) DO NOTHING
    RETURNING *
)
SELECT true AS created, * FROM ins
UNION ALL
SELECT false, c.* FROM cron_jobs c JOIN v ON c.owner_service = v.owner_service AND c.name = v.name
 WHERE c.id <> v.id;

-- name: get_crons_by_names
SELECT * FROM cron_jobs
 WHERE (owner_service, name) IN (SELECT * FROM unnest(%(owners)b::text[], %(names)b::text[]));

-- name: get_cron
SELECT c.*, cron_recent_success(c.id) AS recent_success_at,
       r.status AS recent_result, r.finished_at AS recent_result_at
  FROM cron_jobs c LEFT JOIN LATERAL cron_recent_result(c.id) r ON true
 WHERE c.id = %(id)s AND c.owner_service = %(owner)s;

-- name: list_crons
-- The functions run for the page's rows only: the page comes from the
-- (owner_service, name) index in order, and the lateral join sits under
-- the limit. Both read only the history the fold has not reached.
SELECT c.*, cron_recent_success(c.id) AS recent_success_at,
       r.status AS recent_result, r.finished_at AS recent_result_at
  FROM cron_jobs c LEFT JOIN LATERAL cron_recent_result(c.id) r ON true
 WHERE c.owner_service = %(owner)s AND c.name > %(after)s
 ORDER BY c.name
 LIMIT %(limit)s;

-- name: update_cron
UPDATE cron_jobs
   SET schedule = %(schedule)s, schedule_kind = %(schedule_kind)s, time_zone = %(time_zone)s,
       type = %(type)s, target_kind = %(target_kind)s, target = %(target)s, payload = %(payload)s,
       misfire_policy = %(misfire_policy)s, concurrency = %(concurrency)s,
       jitter_seconds = %(jitter_seconds)s, max_attempts = %(max_attempts)s,
       timeout_seconds = %(timeout_seconds)s,
       starting_deadline_seconds = %(starting_deadline_seconds)s, enabled = %(enabled)s,
       anchor = %(anchor)s, next_fire_at = %(next_fire_at)s, fingerprint = %(fingerprint)s,
       month_end_policy = %(month_end_policy)s, dst_policy = %(dst_policy)s,
       start_at = %(start_at)s, end_at = %(end_at)s, max_runs = %(max_runs)s,
       updated_at = now()
 WHERE id = %(id)s AND owner_service = %(owner)s
RETURNING *;

-- name: delete_cron
DELETE FROM cron_jobs WHERE id = %(id)s AND owner_service = %(owner)s RETURNING id;

-- name: cancel_cron_occurrences
-- Deleting a cron cancels its occurrences that have not started, near and
-- far; running ones finish.
WITH gone AS (
    DELETE FROM jobs WHERE cron_id = %(id)s AND status = 'SCHEDULED' RETURNING *
),
gone_far AS (
    DELETE FROM jobs_far WHERE cron_id = %(id)s RETURNING *
),
g AS (
    SELECT * FROM gone UNION ALL SELECT * FROM gone_far
)
INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                         status, attempt, max_attempts, timeout_seconds, target_kind, target,
                         payload, last_error, created_at, finished_at)
SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, 'CANCELLED',
       attempt, max_attempts, timeout_seconds, target_kind, target, payload,
       'cron job deleted', created_at, now()
  FROM g
RETURNING id;

-- name: due_crons
-- A page of due crons in keyset order: only what planning needs (the write
-- copies target and payload inside the database). (next_fire_at, id) is
-- the index cron_jobs_due_key_idx: a page starts where the last one ended,
-- even inside an instant a million crons share.
SELECT id, schedule, schedule_kind, time_zone, anchor, misfire_policy, concurrency,
       jitter_seconds, starting_deadline_seconds, next_fire_at, month_end_policy, dst_policy,
       end_at, max_runs, run_count
  FROM cron_jobs
 WHERE enabled AND paused_at IS NULL AND next_fire_at <= %(until)s
   AND (next_fire_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
 ORDER BY next_fire_at, id
 LIMIT %(limit)s;

-- name: cron_due_counts
-- The waves ahead: enabled crons due per second up to `until` (the overdue
-- ones in the first second), so the materializer starts a large instant
-- early enough.
SELECT greatest(date_trunc('second', next_fire_at), date_trunc('second', %(now)s::timestamptz))
           AS at,
       count(*) AS n
  FROM cron_jobs
 WHERE enabled AND paused_at IS NULL AND next_fire_at <= %(until)s
 GROUP BY 1
 ORDER BY 1;

-- name: waiting_fixed_delay_crons
SELECT id, schedule, schedule_kind, time_zone, anchor, misfire_policy, concurrency,
       jitter_seconds, starting_deadline_seconds, next_fire_at, month_end_policy, dst_policy,
       end_at, max_runs, run_count
  FROM cron_jobs
 WHERE enabled AND paused_at IS NULL AND next_fire_at IS NULL AND schedule_kind = 'FIXED_DELAY'
   AND (max_runs IS NULL OR run_count < max_runs) AND (end_at IS NULL OR end_at > now())
   AND id > %(after_id)s::uuid
 ORDER BY id
 LIMIT %(limit)s;

-- name: crons_pending
-- Per cron: occurrences not finished (the hot table holds only SCHEDULED
-- and RUNNING rows; far ones count too), and, where asked (fixed delay),
-- when its latest occurrence finished. The cron index holds SCHEDULED rows
-- only (migration 16): the running ones are counted for all the crons in
-- one pass over the jobs in flight (the lease index), not one per cron.
WITH running AS (
    SELECT cron_id, count(*) AS n FROM jobs
     WHERE status = 'RUNNING' AND cron_id = ANY(%(ids)b::uuid[])
     GROUP BY cron_id
)
SELECT v.id,
       (SELECT count(*) FROM jobs j WHERE j.cron_id = v.id AND j.status = 'SCHEDULED')
       + coalesce((SELECT r.n FROM running r WHERE r.cron_id = v.id), 0)
       + (SELECT count(*) FROM jobs_far f WHERE f.cron_id = v.id) AS pending,
       CASE WHEN v.finished THEN (SELECT max(h.finished_at) FROM job_history h
                                   WHERE h.cron_id = v.id) END AS last_finished
  FROM unnest(%(ids)b::uuid[], %(finished)b::bool[]) AS v(id, finished);

-- name: insert_occurrences
-- The ledger row first: an occurrence that exists already (another
-- materializer, or one that ran and moved to history) inserts nothing.
WITH v AS (
    SELECT * FROM unnest(%(job_ids)b::uuid[], %(scheduled)b::timestamptz[],
                         %(run_at)b::timestamptz[], %(deadline)b::timestamptz[])
           AS v(job_id, scheduled_for, run_at, deadline_at)
),
occ AS (
    INSERT INTO cron_occurrences (cron_id, scheduled_for, job_id)
    SELECT %(cron_id)s, scheduled_for, job_id FROM v
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
INSERT INTO jobs (id, owner_service, type, cron_id, scheduled_for, run_at, max_attempts,
                  timeout_seconds, target_kind, target, payload, concurrency, deadline_at)
SELECT v.job_id, c.owner_service, c.type, c.id, v.scheduled_for, v.run_at, c.max_attempts,
       c.timeout_seconds, c.target_kind, c.target, c.payload, c.concurrency, v.deadline_at
  FROM v JOIN occ USING (job_id) CROSS JOIN cron_jobs c
 WHERE c.id = %(cron_id)s
RETURNING id, scheduled_for;

-- name: materialize_crons
-- Many crons at once, one transaction. Per cron a compare-and-set on
-- next_fire_at (a cron disabled since it was read loses it too); the rows
-- are locked SKIP LOCKED in the same step, so two
-- materializers (or a worker stamping last_success_at) never wait on or
-- deadlock with each other: a cron held elsewhere simply loses this round.
-- Only the crons whose CAS won get occurrences: the ledger row first (one
-- per (cron_id, scheduled_for), ever), then the job, copied from the cron
-- row; beyond the far horizon into jobs_far (never FORBID or fixed-delay
-- occurrences: their pending count and the FORBID index read the hot
-- table). A FORBID occurrence that meets a pending one at the last moment
-- (a manual trigger) is refused by the index: returned as 'refused'.
-- run_count grows by the occurrences planned (maxRuns): bounds are planned,
-- not checked per cron here, so the write stays one statement per page.
WITH v AS (
    SELECT * FROM unnest(%(ids)b::uuid[], %(expected)b::timestamptz[], %(next)b::timestamptz[],
                         %(last_fire)b::timestamptz[], %(missed)b::int8[], %(skipped)b::int8[],
                         %(runs)b::int8[])
           AS v(id, expected, next, last_fire, missed, skipped, runs)
),
locked AS (
    -- A lookup by primary key per cron (the locking subquery is never
    -- flattened into a join), never a scan of the whole table.
    SELECT v.* FROM v CROSS JOIN LATERAL (
        SELECT FROM cron_jobs c
         WHERE c.id = v.id AND c.next_fire_at IS NOT DISTINCT FROM v.expected AND c.enabled
               AND c.paused_at IS NULL
           FOR UPDATE SKIP LOCKED
    ) l
),
moved AS (
    -- The rows are ours since `locked`: nothing can move them in between.
    -- `= ANY(ids)` lets the planner find them by primary key on a large
    -- table instead of scanning it for the join.
    UPDATE cron_jobs c
       SET next_fire_at = v.next,
           last_fire_at = CASE WHEN v.last_fire IS NULL THEN c.last_fire_at
                               ELSE greatest(c.last_fire_at, v.last_fire) END,
           missed_count = c.missed_count + v.missed,
           skipped_count = c.skipped_count + v.skipped,
           run_count = c.run_count + v.runs
      FROM locked v
     WHERE c.id = v.id AND c.id = ANY(%(ids)b::uuid[])
    RETURNING c.id, c.owner_service, c.type, c.max_attempts, c.timeout_seconds, c.target_kind,
              c.target, c.payload, c.concurrency,
              (c.concurrency <> 'FORBID' AND c.schedule_kind <> 'FIXED_DELAY') AS may_go_far
),
o AS (
    SELECT * FROM unnest(%(occ_cron)b::uuid[], %(occ_job)b::uuid[], %(occ_scheduled)b::timestamptz[],
                         %(occ_run_at)b::timestamptz[], %(occ_deadline)b::timestamptz[])
           AS o(cron_id, job_id, scheduled_for, run_at, deadline_at)
),
ledger AS (
    INSERT INTO cron_occurrences (cron_id, scheduled_for, job_id)
    SELECT o.cron_id, o.scheduled_for, o.job_id FROM o JOIN moved m ON m.id = o.cron_id
    ON CONFLICT DO NOTHING
    RETURNING cron_id, job_id
),
fresh AS (
    SELECT o.job_id, o.scheduled_for, o.run_at, o.deadline_at, m.*,
           m.may_go_far AND o.run_at > %(now)s::timestamptz
                                       + make_interval(secs => %(far_horizon)s) AS far
      FROM ledger l JOIN o ON o.job_id = l.job_id JOIN moved m ON m.id = l.cron_id
),
near_rows AS (
    INSERT INTO jobs (id, owner_service, type, cron_id, scheduled_for, run_at, max_attempts,
                      timeout_seconds, target_kind, target, payload, concurrency, deadline_at)
    SELECT job_id, owner_service, type, id, scheduled_for, run_at, max_attempts,
           timeout_seconds, target_kind, target, payload, concurrency, deadline_at
      FROM fresh WHERE NOT far
    ON CONFLICT DO NOTHING
    RETURNING id
),
far_rows AS (
    INSERT INTO jobs_far (id, owner_service, type, cron_id, scheduled_for, run_at, max_attempts,
                          timeout_seconds, target_kind, target, payload, concurrency, deadline_at)
    SELECT job_id, owner_service, type, id, scheduled_for, run_at, max_attempts,
           timeout_seconds, target_kind, target, payload, concurrency, deadline_at
      FROM fresh WHERE far
    RETURNING id
)
SELECT 'advanced' AS kind, id FROM moved
UNION ALL
SELECT 'refused', f.id FROM fresh f
 -- NOT EXISTS, an anti-join: NOT IN over the CTE was a subplan that
 -- rescanned near_rows for every occurrence (4,000 x 2,000 rows, 600 ms of
 -- a 670 ms page of 2,000 every-minute crons).
 WHERE NOT f.far AND NOT EXISTS (SELECT FROM near_rows n WHERE n.id = f.job_id)
UNION ALL
SELECT 'created', NULL FROM near_rows
UNION ALL
SELECT 'created', NULL FROM far_rows;

-- name: cron_clock
-- The shard's clock, which the materializer compares with its own.
SELECT now() AS now;

-- name: revoke_replaced
-- REPLACE: a newer occurrence starts, the running ones are revoked. Moving
-- them to history makes their heartbeat and completion match no row (fenced).
-- An occurrence carries the policy it was made with: those made under
-- REPLACE are revoked (found by jobs_replace_idx, migration 16: status <>
-- 'SCHEDULED' is RUNNING, written so that the lease index does not match);
-- one made before the cron's policy became REPLACE runs to its end.
WITH gone AS (
    DELETE FROM jobs
     WHERE cron_id = %(cron_id)s AND concurrency = 'REPLACE' AND status <> 'SCHEDULED'
       AND id <> %(keep)s
    RETURNING *
)
INSERT INTO job_history (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                         status, attempt, max_attempts, timeout_seconds, target_kind, target,
                         payload, last_error, created_at, finished_at)
SELECT id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at, 'CANCELLED',
       attempt, max_attempts, timeout_seconds, target_kind, target, payload,
       'replaced by a newer occurrence (concurrency REPLACE)', created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;

-- name: cron_runs
SELECT r.id, r.scheduled_for, r.run_at, r.status, r.attempt, r.last_error, r.finished_at,
       (SELECT a.lateness_seconds FROM job_attempts a
         WHERE a.job_id = r.id AND a.lateness_seconds IS NOT NULL
         ORDER BY a.attempt LIMIT 1) AS lateness_seconds
  FROM (
    -- The cron index has SCHEDULED rows (migration 16); RUNNING ones are
    -- read from the jobs in flight.
    SELECT id, scheduled_for, run_at, status, attempt, last_error, NULL::timestamptz AS finished_at
      FROM jobs WHERE cron_id = %(id)s AND status = 'SCHEDULED'
    UNION ALL
    SELECT id, scheduled_for, run_at, status, attempt, last_error, NULL::timestamptz
      FROM jobs WHERE cron_id = %(id)s AND status = 'RUNNING'
    UNION ALL
    SELECT id, scheduled_for, run_at, status, attempt, last_error, NULL::timestamptz
      FROM jobs_far WHERE cron_id = %(id)s
    UNION ALL
    SELECT id, scheduled_for, run_at, status, attempt, last_error, finished_at
      FROM job_history WHERE cron_id = %(id)s
  ) r
 ORDER BY r.scheduled_for DESC
 LIMIT %(limit)s;

-- name: summarize_history
-- What the fold's windows read by the BRIN index gets its summary first
-- (migration 18).
SELECT vakit_summarize_history() AS ranges;

-- name: fold_cron_successes
-- Fold the history's successes into cron_jobs.last_success_at, up to
-- %(lag)s seconds ago (a finish that commits later than that is folded with
-- its cron's next success), a window of time a call (migration 18): the
-- history rows that finished in (folded_until, folded_until +
-- slice_seconds], read by the BRIN index, of which it folds at most about
-- %(limit)s cron occurrences (all rows of the last instant taken, so a
-- slice never splits one). The million successes of a midnight wave are
-- folded in short transactions after it, never holding many crons' rows
-- from the materializer (which skips a locked cron for a round) for long.
-- `more` says the call stopped short of now() - lag. Reads add what is
-- newer (recent_success_at). The same slice folds each cron's last result
-- (migration 12): the status of its occurrence that finished last,
-- cancelled ones aside.
--
-- The next window's width follows the rows this one held: narrowed at
-- once to about %(read)s rows and %(limit)s cron rows at this one's
-- density, widened at most twofold a call (up to an hour) when it held
-- fewer and was not cut short by now() - lag. So a row is read about once,
-- give or take the BRIN ranges (128 pages) at a window's edges. A fold that
-- caught up keeps its width: its first call after a wave may read all of
-- the wave's rows in one window, once.
WITH w AS (
    SELECT folded_until, slice_seconds FROM cron_success_fold FOR UPDATE
),
win AS (
    -- A shard's first fold starts at its oldest history row.
    SELECT w.folded_until AS lo, w.slice_seconds,
           least(coalesce(CASE WHEN w.folded_until = '-infinity'
                               THEN (SELECT min(finished_at) FROM job_history)
                               ELSE w.folded_until END
                          + make_interval(secs => w.slice_seconds),
                          'infinity'),
                 now() - make_interval(secs => %(lag)s)) AS hi,
           w.folded_until + make_interval(secs => w.slice_seconds)
             < now() - make_interval(secs => %(lag)s) AS full_width
      FROM w
),
r AS MATERIALIZED (
    -- The bounds as values (InitPlans), which the BRIN index and the
    -- pruning of day partitions can use; a join to win is a seq scan.
    SELECT h.cron_id, h.status, h.finished_at, h.scheduled_for
      FROM job_history h
     WHERE h.finished_at > (SELECT lo FROM win) AND h.finished_at <= (SELECT hi FROM win)
),
bound AS (
    SELECT least(coalesce((SELECT r.finished_at FROM r WHERE r.cron_id IS NOT NULL
                            ORDER BY r.finished_at OFFSET %(limit)s LIMIT 1),
                          'infinity'),
                 win.hi) AS upto,
           n.rows, n.cron_rows, win.slice_seconds, win.full_width,
           CASE WHEN win.lo = '-infinity' OR win.hi <= win.lo THEN win.slice_seconds
                ELSE extract(epoch FROM win.hi - win.lo)::float8 END AS span
      FROM win,
           (SELECT count(*) AS rows, count(*) FILTER (WHERE r.cron_id IS NOT NULL) AS cron_rows
              FROM r) n
),
s AS (
    SELECT r.cron_id,
           max(r.finished_at) FILTER (WHERE r.status = 'SUCCEEDED') AS at,
           max(r.finished_at) AS result_at,
           (array_agg(r.status ORDER BY r.finished_at DESC, r.scheduled_for DESC))[1] AS result
      FROM r, bound
     WHERE r.finished_at <= bound.upto
       AND r.status IN ('SUCCEEDED', 'FAILED', 'SKIPPED') AND r.cron_id IS NOT NULL
     GROUP BY r.cron_id
),
stamped AS (
    -- greatest() passes over a NULL: a slice without a success keeps the
    -- last success there was.
    UPDATE cron_jobs c
       SET last_success_at = greatest(c.last_success_at, s.at),
           last_result = CASE WHEN c.last_result_at IS NULL OR c.last_result_at <= s.result_at
                              THEN s.result ELSE c.last_result END,
           last_result_at = greatest(c.last_result_at, s.result_at)
      FROM s
     WHERE c.id = s.cron_id
       AND (c.last_success_at < s.at OR (c.last_success_at IS NULL AND s.at IS NOT NULL)
            OR c.last_result_at IS NULL OR c.last_result_at < s.result_at)
    RETURNING c.id
)
UPDATE cron_success_fold f
   SET folded_until = greatest(f.folded_until, bound.upto),
       slice_seconds = CASE
           WHEN bound.rows > %(read)s OR bound.cron_rows > %(limit)s
               THEN greatest(0.001, bound.span * least(%(read)s::float8 / bound.rows,
                                                       %(limit)s::float8 / greatest(bound.cron_rows, 1)))
           WHEN bound.full_width
               THEN least(3600.0, 2 * bound.slice_seconds,
                          bound.span * least(%(read)s::float8 / greatest(bound.rows, 1),
                                             %(limit)s::float8 / greatest(bound.cron_rows, 1)))
           ELSE bound.slice_seconds END
  FROM bound
RETURNING (SELECT count(*) FROM stamped) AS stamped, f.folded_until,
          bound.upto < now() - make_interval(secs => %(lag)s) AS more;

-- name: cron_last_success
-- A cron that never succeeded counts from its creation, so one that is
-- silent from day one still trips the "no success since" alert. Only the
-- oldest: the alert and the dashboard look for the silent crons, and a
-- series per cron of a million would be a million series.
SELECT id, coalesce(last_success_at, created_at) AS last_success_at
  FROM cron_jobs WHERE enabled AND paused_at IS NULL
 ORDER BY 2
 LIMIT %(limit)s;

-- name: layout_read
-- This database's place in the cluster (cluster/store/layout.py); no row before
-- the first process registered the shard list.
SELECT shard_uuid::text, shard_index, shard_count, fingerprint
FROM cluster_layout;

-- name: layout_claim
-- Nothing returned: another process registered this shard first.
INSERT INTO cluster_layout (shard_uuid, shard_index, shard_count, fingerprint)
VALUES (%(shard_uuid)s, %(shard_index)s, %(shard_count)s, %(fingerprint)s)
ON CONFLICT (singleton) DO NOTHING
RETURNING shard_uuid;

-- ---------------------------------------------------------------------------
-- Operators: search, retry, pause and resume, backfill
-- ---------------------------------------------------------------------------

-- name: search_jobs
-- A page of an owner's jobs on this shard, newest first by id (UUIDv7: the
-- creation order, which a job keeps while it moves between tables), below
-- the cursor. One statement, one snapshot: a job is in exactly one table.
-- Each table gives at most a page from its (owner, id) index, then the
-- three are merged. The hot table's index holds SCHEDULED rows only
-- (a claim would add an entry to it per job): its RUNNING rows, the jobs
-- in flight, are a branch of their own. An absent filter is NULL. The store runs it with a
-- generic plan (search_plan): planning it for each call, over every day
-- partition of the history, cost 40 times what running it did.
-- The history's days are partitions by finished_at, which a runAt bound
-- cannot prune: a day without a match was read to its end (runAtFrom a day
-- ago: 220 ms with a million rows). A job that ran finished after its
-- runAt, so the store passes %(ran_from)s, the later of finishedFrom and
-- runAtFrom less an hour (clocks, prefetch), for every status but
-- CANCELLED: a job cancelled before its runAt is read on its own, from the
-- (owner, status, id) index.
SELECT * FROM (
    (SELECT 'far' AS place, id, owner_service, idempotency_key, type, cron_id, scheduled_for,
            run_at, status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'SCHEDULED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'RUNNING'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND status <> 'CANCELLED'
        AND finished_at >= %(ran_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'CANCELLED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND finished_at >= %(finished_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
) page
ORDER BY id DESC
LIMIT %(limit)s;

-- name: search_jobs_in_status
-- search_jobs for one status: an equality the (owner, status, id) index
-- serves in id order, so a page of dead letters reads a page of index
-- entries however much else the owner has. Several statuses are one run
-- each, merged by the store. The hot table's owner index holds SCHEDULED
-- rows only (migration 0013): its statuses are written out, each branch
-- kept or dropped by the parameter, so that a generic plan still matches
-- the partial index.
SELECT * FROM (
    (SELECT 'far' AS place, id, owner_service, idempotency_key, type, cron_id, scheduled_for,
            run_at, status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = %(status)s::text
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'SCHEDULED' AND %(status)s::text = 'SCHEDULED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'RUNNING' AND %(status)s::text = 'RUNNING'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = %(status)s::text
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND finished_at >= %(finished_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
) page
ORDER BY id DESC
LIMIT %(limit)s;

-- name: search_plan
-- Inside the search's transaction (is_local): plan its statements once per
-- connection. SET LOCAL as a function call, so that it prepares as every
-- named query must (tests/integration/test_migrations.py).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: get_attempts_of
-- The attempt logs of a page of jobs, in one statement.
SELECT job_id, attempt, worker, started_at, finished_at, outcome, error, lateness_seconds
  FROM job_attempts WHERE job_id = ANY(%(ids)b::uuid[])
 ORDER BY job_id, attempt, finished_at;

-- name: retry_job
-- A new life for a finished job: out of history, back to the hot table as
-- SCHEDULED, same id and scheduled_for (the target's idempotency key is
-- unchanged). The attempt counter goes on from where it stopped (the
-- fencing token never goes back: a straggler of an old attempt writes
-- nothing), and max_attempts grows by a new series: the asked size, or the
-- size of the last series (since the last RETRIED mark in the attempt log).
-- The table's CHECK caps a job's attempts at 100 over all its lives. The
-- RETRIED row in the attempt log marks where the new series starts.
WITH old AS (
    DELETE FROM job_history
     WHERE id = %(id)s AND owner_service = %(owner)s
       AND status = ANY(%(statuses)s::text[]) AND attempt < 100
    RETURNING *
),
series AS (
    SELECT coalesce(max(attempt), 0) AS base FROM job_attempts
     WHERE job_id = %(id)s AND outcome = 'RETRIED'
),
revived AS (
    INSERT INTO jobs (id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
                      status, attempt, max_attempts, timeout_seconds, target_kind, target,
                      payload, last_error, created_at)
    SELECT o.id, o.owner_service, o.idempotency_key, o.type, o.cron_id, o.scheduled_for,
           coalesce(%(run_at)s, %(now)s, now()), 'SCHEDULED', o.attempt,
           least(o.attempt + coalesce(%(max_attempts)s, greatest(o.max_attempts - s.base, 1)), 100),
           o.timeout_seconds, o.target_kind, o.target, o.payload, o.last_error, o.created_at
      FROM old o CROSS JOIN series s
    RETURNING id, attempt, max_attempts
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, finished_at, outcome, error)
    SELECT id, attempt, NULL, coalesce(%(now)s, now()), 'RETRIED',
           'retried by ' || %(by)s || ': a new series of ' || (max_attempts - attempt)
           || ' attempts'
      FROM revived
    ON CONFLICT DO NOTHING
)
SELECT id FROM revived;

-- name: pause_far_job
UPDATE jobs_far
   SET paused_at = coalesce(%(now)s, now()), pause_reason = %(reason)s
 WHERE id = %(id)s AND owner_service = %(owner)s AND cron_id IS NULL AND paused_at IS NULL
RETURNING id;

-- name: move_job_far
-- Pausing a job of the hot table: it moves to jobs_far whole (SELECT *, as
-- the mover moves the other way), then pause_far_job marks it.
WITH moving AS (
    DELETE FROM jobs
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
       AND cron_id IS NULL
    RETURNING *
)
INSERT INTO jobs_far SELECT * FROM moving
RETURNING id;

-- name: resume_far_job
UPDATE jobs_far SET paused_at = NULL, pause_reason = NULL
 WHERE id = %(id)s AND owner_service = %(owner)s AND paused_at IS NOT NULL
RETURNING id;

-- name: move_job_near
-- A resumed job due within the horizon goes back to the hot table at once,
-- not at the mover's next pass.
WITH moving AS (
    DELETE FROM jobs_far
     WHERE id = %(id)s AND owner_service = %(owner)s AND paused_at IS NULL
       AND run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(horizon)s)
    RETURNING *
)
INSERT INTO jobs SELECT * FROM moving
RETURNING id;

-- name: pause_cron
UPDATE cron_jobs
   SET paused_at = coalesce(paused_at, coalesce(%(now)s, now())), pause_reason = %(reason)s,
       updated_at = now()
 WHERE id = %(id)s AND owner_service = %(owner)s
RETURNING *;

-- name: withdraw_cron_occurrences
-- A paused cron's materialized slots not yet due are withdrawn, as if never
-- materialized: the jobs and their ledger rows go, and next_fire_at moves
-- back to the earliest of them. Resume then treats them as any slot missed
-- while paused (the misfire policy). Occurrences already due (or a manual
-- trigger's, or a backfill's) stay and run.
WITH near AS (
    DELETE FROM jobs
     WHERE cron_id = %(id)s AND status = 'SCHEDULED' AND scheduled_for >= coalesce(%(now)s, now())
    RETURNING id, scheduled_for
),
far AS (
    DELETE FROM jobs_far
     WHERE cron_id = %(id)s AND scheduled_for >= coalesce(%(now)s, now())
    RETURNING id, scheduled_for
),
gone AS (
    SELECT * FROM near UNION ALL SELECT * FROM far
),
ledger AS (
    DELETE FROM cron_occurrences o USING gone g
     WHERE o.cron_id = %(id)s AND o.job_id = g.id
),
rewound AS (
    -- They were counted as runs of the schedule (maxRuns): no longer.
    UPDATE cron_jobs
       SET next_fire_at = least(next_fire_at, (SELECT min(scheduled_for) FROM gone)),
           run_count = greatest(run_count - (SELECT count(*) FROM gone), 0)
     WHERE id = %(id)s AND EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) AS withdrawn FROM gone;

-- name: resume_cron
UPDATE cron_jobs SET paused_at = NULL, pause_reason = NULL, updated_at = now()
 WHERE id = %(id)s AND owner_service = %(owner)s
RETURNING *;

-- name: backfill_existing
-- The slots of a backfill that have an occurrence already, with its job's
-- status (NULL when its history has expired).
SELECT o.scheduled_for, o.job_id, j.status
  FROM cron_occurrences o
  LEFT JOIN LATERAL (
    SELECT status FROM jobs_far WHERE id = o.job_id
    UNION ALL
    SELECT status FROM jobs WHERE id = o.job_id
    UNION ALL
    SELECT status FROM job_history WHERE id = o.job_id
    LIMIT 1
  ) j ON true
 WHERE o.cron_id = %(cron_id)s AND o.scheduled_for = ANY(%(slots)b::timestamptz[]);

-- name: insert_backfill
-- Occurrences of past slots, each once by the ledger (a slot another
-- backfill or the materializer wrote in between inserts nothing). They are
-- due at run_at and carry no concurrency policy: a backfill's slots run
-- side by side, not one at a time.
WITH v AS (
    SELECT * FROM unnest(%(job_ids)b::uuid[], %(scheduled)b::timestamptz[])
           AS v(job_id, scheduled_for)
),
occ AS (
    INSERT INTO cron_occurrences (cron_id, scheduled_for, job_id)
    SELECT %(cron_id)s, scheduled_for, job_id FROM v
     WHERE EXISTS (SELECT 1 FROM cron_jobs WHERE id = %(cron_id)s AND owner_service = %(owner)s)
    ON CONFLICT DO NOTHING
    RETURNING job_id
)
INSERT INTO jobs (id, owner_service, type, cron_id, scheduled_for, run_at, max_attempts,
                  timeout_seconds, target_kind, target, payload)
SELECT v.job_id, c.owner_service, c.type, c.id, v.scheduled_for, %(run_at)s, c.max_attempts,
       c.timeout_seconds, c.target_kind, c.target, c.payload
  FROM v JOIN occ USING (job_id) CROSS JOIN cron_jobs c
 WHERE c.id = %(cron_id)s AND c.owner_service = %(owner)s
RETURNING id;

-- name: start_lateness
-- Start lateness of the attempts that ended in the last %(minutes)s UTC
-- minutes (the current one included), per minute: the console's cluster
-- chart. The BRIN index on finished_at (migration 11) reads only the blocks
-- of those minutes, however large the day's partition; the work left is
-- the sort of the window's own attempts (one sort per minute: both
-- percentiles come from one ordered-set aggregate). An attempt that
-- started early (a prefetched job waits for its run_at) counts as 0, as
-- the lateness histogram counts it.
SELECT date_trunc('minute', a.finished_at, 'UTC') AS minute, count(*) AS n,
       percentile_cont(ARRAY[0.5, 0.99]::float8[])
           WITHIN GROUP (ORDER BY greatest(a.lateness_seconds, 0)) AS pct,
       max(greatest(a.lateness_seconds, 0)) AS worst
  FROM job_attempts a
 WHERE a.finished_at >= date_trunc('minute', coalesce(%(now)s::timestamptz, now()), 'UTC')
                        - make_interval(mins => %(minutes)s::int - 1)
   AND a.finished_at <= coalesce(%(now)s::timestamptz, now())
   AND a.lateness_seconds IS NOT NULL
 GROUP BY 1
 ORDER BY 1;


-- name: search_jobs_of_cron
-- search_jobs for one cron's occurrences (the cronJobId filter), in one
-- status or any (%(status)s NULL). The (owner, id) order of search_jobs
-- found a cron's rows by filtering the owner's whole history: 160 ms for a
-- cron with 60 of a tenant's million rows, since every day's index scan
-- ran to its end looking for them. Here each table gives the cron's rows
-- from its cron index (an equality the generic plan can use), and the few
-- rows a cron has are sorted by id. The hot table's cron index holds
-- SCHEDULED rows only (migration 16): its RUNNING rows, the jobs in
-- flight, are a branch of their own, as in search_jobs.
SELECT * FROM (
    (SELECT 'far' AS place, id, owner_service, idempotency_key, type, cron_id, scheduled_for,
            run_at, status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND cron_id = %(cron_id)s::uuid
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND cron_id = %(cron_id)s::uuid
        AND status = 'SCHEDULED' AND (%(status)s::text IS NULL OR %(status)s::text = 'SCHEDULED')
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND cron_id = %(cron_id)s::uuid
        AND status = 'RUNNING' AND (%(status)s::text IS NULL OR %(status)s::text = 'RUNNING')
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', id, owner_service, idempotency_key, type, cron_id, scheduled_for, run_at,
            status, attempt, max_attempts, timeout_seconds, target, payload, last_error,
            created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND cron_id = %(cron_id)s::uuid
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND finished_at >= %(finished_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
) page
ORDER BY id DESC
LIMIT %(limit)s;
