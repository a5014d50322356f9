-- The worker's claims, heartbeats and completions (cluster/store/postgres/claims.py).
-- The conventions below hold for every file of named SQL here (loaded
-- once, all into one namespace, by cluster/store/sql/__init__.py).
-- Parameters are psycopg named placeholders.
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
--
-- The slot fence (migration 21): every write on a job or cron row says
-- `{fence:<id>}` (the row is skipped when its slot is fenced on this shard:
-- claims, completions, the leader's passes) or `{fence_refuse:<id>}` (the
-- statement fails with SQLSTATE VKS01, which the store raises as
-- SlotMoving: the writes the API asks for). cluster/store/sql/__init__.py
-- expands both into a NOT EXISTS on slot_fences, behind a test that the
-- table has a row at all (once a statement): nothing more to pay on a shard
-- that moves no slot.

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
       -- A slot fenced on this shard is not served: its rows are not seen.
       AND {fence:jobs.id}
     ORDER BY run_at
     LIMIT %(limit)s
       FOR UPDATE OF jobs SKIP LOCKED
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
   AND {fence:j.id}
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
       AND v.outcome IN ('SUCCEEDED', 'FAILED', 'SKIPPED') AND {fence:j.id}
    RETURNING j.*, v.outcome, v.error AS new_error
),
retried AS (
    UPDATE jobs j
       SET status = 'SCHEDULED',
           run_at = coalesce(%(now)s, now()) + make_interval(secs => v.delay),
           locked_by = NULL, lease_until = NULL, claimed_at = NULL, last_error = v.error
      FROM v
     WHERE j.id = v.id AND j.status <> 'SCHEDULED' AND j.attempt = v.attempt
       AND v.outcome = 'RETRY' AND {fence:j.id}
    RETURNING j.id, j.attempt
),
hist AS (
    INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
    SELECT {job.given}, outcome, attempt,
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
       AND {fence:j.id}
    RETURNING j.id, j.attempt, v.refund, %(worker)s::text AS worker
),
log AS (
    INSERT INTO job_attempts (job_id, attempt, worker, finished_at, outcome, error)
    SELECT id, attempt, worker, coalesce(%(now)s, now()), 'RELEASED', 'worker stopped before the attempt finished'
      FROM released WHERE NOT refund
)
SELECT id FROM released;

-- name: worker_beat
INSERT INTO worker_beats (worker_id, last_seen) VALUES (%(worker)s, now())
ON CONFLICT (worker_id) DO UPDATE SET last_seen = excluded.last_seen;

-- name: workers_seen
SELECT worker_id, last_seen FROM worker_beats
 WHERE last_seen > now() - make_interval(secs => %(within)s)
 ORDER BY worker_id;

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
       AND id <> %(keep)s AND {fence:jobs.id}
    RETURNING *
)
INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
SELECT {job.given}, 'CANCELLED', attempt,
       'replaced by a newer occurrence (concurrency REPLACE)', created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;
