-- The API's cron definitions and actions (cluster/store/postgres_cron/intake.py).
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

-- name: crons_by_owner
-- An index-only scan of cron_jobs_name_uq (owner_service, name).
SELECT owner_service AS owner, count(*) AS n
  FROM cron_jobs
 GROUP BY owner_service
 ORDER BY n DESC
 LIMIT %(limit)s;

-- name: insert_cron
INSERT INTO cron_jobs ({cron.given})
SELECT {cron.given_params}
 WHERE {fence_refuse:%(id)s::uuid}
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
    SELECT * FROM unnest({cron.given_arrays}) AS v({cron.given})
),
ins AS (
    INSERT INTO cron_jobs ({cron.given})
    SELECT {cron.given_cast}
      FROM v
     -- One cron of a fenced slot refuses the statement (SQLSTATE VKS01).
     WHERE {fence_refuse:v.id}
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
   SET {cron.set_params},
       -- A changed definition (its calendar, its policy) is settled again
       -- by the materializer (migration 25).
       settled_next = NULL,
       updated_at = now()
 WHERE id = %(id)s AND owner_service = %(owner)s AND {fence_refuse:%(id)s::uuid}
RETURNING *;

-- name: delete_cron
DELETE FROM cron_jobs
 WHERE id = %(id)s AND owner_service = %(owner)s AND {fence_refuse:%(id)s::uuid}
RETURNING id;

-- name: cancel_cron_occurrences
-- Deleting a cron cancels its occurrences that have not started, near and
-- far; running ones finish.
WITH gone AS (
    DELETE FROM jobs WHERE cron_id = %(id)s AND status = 'SCHEDULED'
       AND {fence_refuse:%(id)s::uuid} RETURNING *
),
gone_far AS (
    DELETE FROM jobs_far WHERE cron_id = %(id)s AND {fence_refuse:%(id)s::uuid} RETURNING *
),
g AS (
    SELECT * FROM gone UNION ALL SELECT * FROM gone_far
)
INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
SELECT {job.given}, 'CANCELLED', attempt,
       'cron job deleted', created_at, now()
  FROM g
RETURNING id;

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
     WHERE {fence_refuse:%(cron_id)s::uuid}
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

-- name: pause_cron
UPDATE cron_jobs
   SET paused_at = coalesce(paused_at, coalesce(%(now)s, now())), pause_reason = %(reason)s,
       updated_at = now()
 WHERE id = %(id)s AND owner_service = %(owner)s AND {fence_refuse:%(id)s::uuid}
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
       AND {fence_refuse:%(id)s::uuid}
    RETURNING id, scheduled_for
),
far AS (
    DELETE FROM jobs_far
     WHERE cron_id = %(id)s AND scheduled_for >= coalesce(%(now)s, now())
       AND {fence_refuse:%(id)s::uuid}
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
 WHERE id = %(id)s AND owner_service = %(owner)s AND {fence_refuse:%(id)s::uuid}
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
       AND {fence_refuse:%(cron_id)s::uuid}
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
