-- The API's intake (cluster/store/postgres/creates.py, intake.py): create, read and change one job.
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

-- name: insert_job_key
-- The idempotency ledger row; nothing returned means the key exists already.
INSERT INTO job_keys (owner_service, idempotency_key, job_id, fingerprint)
SELECT %(owner)s, %(key)s, %(id)s, %(fingerprint)s
 WHERE {fence_refuse:%(id)s::uuid}
ON CONFLICT DO NOTHING
RETURNING job_id;

-- name: get_job_key
SELECT job_id, fingerprint FROM job_keys
 WHERE owner_service = %(owner)s AND idempotency_key = %(key)s;

-- name: insert_job
-- A single create; refused (SQLSTATE VKS01) when its slot is fenced here.
INSERT INTO jobs ({job.given})
SELECT {job.given_params_cast}
 WHERE {fence_refuse:%(id)s::uuid};

-- name: insert_far_job
INSERT INTO jobs_far ({job.given})
SELECT {job.given_params_cast}
 WHERE {fence_refuse:%(id)s::uuid};

-- name: insert_job_placed
-- A single create placed on this database's clock (DESIGN.md: now() is the
-- authority): the hot table when due within the horizon, else the far one.
-- The values come first and the horizon last, so the lean path's values
-- (cluster/store/postgres/rows.py) are insert_job's and one more.
WITH near AS (
    INSERT INTO jobs ({job.given})
    SELECT {job.given_params_cast}
     WHERE %(run_at)s::timestamptz <= now() + make_interval(secs => %(far_horizon)s::float8)
       AND {fence_refuse:%(id)s::uuid}
    RETURNING 1
)
INSERT INTO jobs_far ({job.given})
SELECT {job.given_params_cast}
 WHERE %(run_at)s::timestamptz > now() + make_interval(secs => %(far_horizon)s::float8)
   AND {fence_refuse:%(id)s::uuid};

-- name: insert_job_again
-- A create once more, after its first try's link failed with the statement
-- sent (an ambiguous commit). The job's id is the create's own idempotency
-- key: nothing is inserted when the first try committed, wherever the job is
-- by now (near, far, or finished already). Only this rare retry pays for the
-- history lookup (the primary key of each day).
WITH place AS (
    -- With a horizon, the table is chosen on this database's clock.
    SELECT coalesce(%(run_at)s::timestamptz > now() + make_interval(secs => %(far_horizon)s::float8),
                    %(far)s::bool) AS far
), found AS (
    SELECT id FROM jobs WHERE id = %(id)s
    UNION ALL SELECT id FROM jobs_far WHERE id = %(id)s
    UNION ALL SELECT id FROM job_history WHERE id = %(id)s
), near AS (
    INSERT INTO jobs ({job.given})
    SELECT {job.given_params_cast}
     WHERE NOT (SELECT far FROM place) AND NOT EXISTS (SELECT 1 FROM found)
       AND {fence_refuse:%(id)s::uuid}
    ON CONFLICT (id) DO NOTHING
    RETURNING 1
), far AS (
    INSERT INTO jobs_far ({job.given})
    SELECT {job.given_params_cast}
     WHERE (SELECT far FROM place) AND NOT EXISTS (SELECT 1 FROM found)
       AND {fence_refuse:%(id)s::uuid}
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
-- Each row is an array, its values in the order of the batch_row list: the
-- job's columns (cluster/model/columns.py) then the key's fingerprint and
-- far (cluster/store/postgres/rows.py checks it when it loads). Rows as objects, read by jsonb_to_recordset, cost
-- more: on a lab shard, reading a thousand rows took 13-16 ms as objects
-- against 5-6 ms as arrays, and the whole statement for a thousand keyed
-- jobs 35.6 against 30.3 ms (medians). The document is a third shorter
-- without the column names, and a value is taken by position, not by name.
WITH v AS (
    SELECT {job.batch_row}
      FROM jsonb_array_elements(%(rows)s::jsonb) AS rows(r)
),
admitted AS (
    -- The slot fence: one row of a fenced slot refuses the whole statement
    -- (SQLSTATE VKS01); the store answers each job of it with SlotMoving.
    SELECT * FROM v WHERE {fence_refuse:v.id}
),
keyed AS (
    -- In key order: two batches that share keys wait on each other's
    -- uncommitted keys in the same order, never in a cycle (a deadlock).
    INSERT INTO job_keys (owner_service, idempotency_key, job_id, fingerprint)
    SELECT owner_service, idempotency_key, id, fingerprint FROM admitted
     WHERE idempotency_key IS NOT NULL
     ORDER BY owner_service, idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING job_id
),
fresh AS (
    -- A JSON null payload is the JSON null a single create stores (a JSON
    -- value, r->N, is never SQL NULL: a NULL was a 500 for the shard's part
    -- of the batch).
    -- A row with a horizon is placed on this database's clock; one without
    -- went where its far said.
    SELECT {job.given},
           coalesce(run_at > now() + make_interval(secs => far_horizon_seconds), far) AS far
      FROM admitted WHERE idempotency_key IS NULL OR id IN (SELECT job_id FROM keyed)
),
near_rows AS (
    INSERT INTO jobs ({job.given})
    SELECT {job.given}
      FROM fresh WHERE NOT far
),
far_rows AS (
    INSERT INTO jobs_far ({job.given})
    SELECT {job.given}
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
       k.job_id AS key_job_id, j.*
  FROM unnest(%(owners)b::text[], %(keys)b::text[]) AS v(owner_service, idempotency_key)
  JOIN job_keys k ON k.owner_service = v.owner_service AND k.idempotency_key = v.idempotency_key
  LEFT JOIN LATERAL (
    SELECT {job.read}, status, attempt, last_error, created_at,
           NULL::timestamptz AS finished_at
      FROM jobs_far WHERE id = k.job_id
    UNION ALL
    SELECT {job.read}, status, attempt, last_error, created_at, NULL
      FROM jobs WHERE id = k.job_id
    UNION ALL
    SELECT {job.read}, status, attempt, last_error, created_at,
           finished_at
      FROM job_history WHERE id = k.job_id
    LIMIT 1
  ) j ON true;

-- name: get_job
-- Far, then near, then history: the order in which a job moves, so a job
-- that moves between two reads is still found.
SELECT 'far' AS place, {job.read}, status, attempt, last_error, created_at,
       NULL::timestamptz AS finished_at, paused_at, pause_reason
  FROM jobs_far WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'near', {job.read}, status, attempt, last_error, created_at,
       NULL, paused_at, pause_reason
  FROM jobs WHERE id = %(id)s AND owner_service = %(owner)s
UNION ALL
SELECT 'history', {job.read}, status, attempt, last_error, created_at,
       finished_at, NULL, NULL
  FROM job_history WHERE id = %(id)s AND owner_service = %(owner)s
LIMIT 1;

-- name: get_attempts
SELECT attempt, worker, started_at, finished_at, outcome, error, lateness_seconds
  FROM job_attempts WHERE job_id = %(id)s ORDER BY attempt, finished_at;

-- name: reschedule_far_job
UPDATE jobs_far SET run_at = %(run_at)s
 WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
   AND {fence_refuse:%(id)s::uuid}
RETURNING id;

-- name: reschedule_job
UPDATE jobs SET run_at = %(run_at)s
 WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
   AND {fence_refuse:%(id)s::uuid}
RETURNING id;

-- name: cancel_far_job
WITH gone AS (
    DELETE FROM jobs_far
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
       AND {fence_refuse:%(id)s::uuid}
    RETURNING *
)
INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
SELECT {job.given}, 'CANCELLED', attempt,
       last_error, created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;

-- name: cancel_job
WITH gone AS (
    DELETE FROM jobs
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
       AND {fence_refuse:%(id)s::uuid}
    RETURNING *
)
INSERT INTO job_history ({job.given}, status, attempt, last_error, created_at, finished_at)
SELECT {job.given}, 'CANCELLED', attempt,
       last_error, created_at, coalesce(%(now)s, now())
  FROM gone
RETURNING id;

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
       AND {fence_refuse:%(id)s::uuid}
    RETURNING *
),
series AS (
    SELECT coalesce(max(attempt), 0) AS base FROM job_attempts
     WHERE job_id = %(id)s AND outcome = 'RETRIED'
),
revived AS (
    INSERT INTO jobs ({job.carried}, run_at, status, attempt, max_attempts, last_error, created_at)
    SELECT {job.carried:o}, coalesce(%(run_at)s, %(now)s, now()), 'SCHEDULED', o.attempt,
           least(o.attempt + coalesce(%(max_attempts)s, greatest(o.max_attempts - s.base, 1)), 100),
           o.last_error, o.created_at
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
   AND {fence_refuse:%(id)s::uuid}
RETURNING id;

-- name: move_job_far
-- Pausing a job of the hot table: it moves to jobs_far whole (SELECT *, as
-- the mover moves the other way), then pause_far_job marks it.
WITH moving AS (
    DELETE FROM jobs
     WHERE id = %(id)s AND owner_service = %(owner)s AND status = 'SCHEDULED'
       AND cron_id IS NULL AND {fence_refuse:%(id)s::uuid}
    RETURNING *
)
INSERT INTO jobs_far SELECT * FROM moving
RETURNING id;

-- name: resume_far_job
UPDATE jobs_far SET paused_at = NULL, pause_reason = NULL
 WHERE id = %(id)s AND owner_service = %(owner)s AND paused_at IS NOT NULL
   AND {fence_refuse:%(id)s::uuid}
RETURNING id;

-- name: move_job_near
-- A resumed job due within the horizon goes back to the hot table at once,
-- not at the mover's next pass.
WITH moving AS (
    DELETE FROM jobs_far
     WHERE id = %(id)s AND owner_service = %(owner)s AND paused_at IS NULL
       AND run_at <= coalesce(%(now)s, now()) + make_interval(secs => %(horizon)s)
       AND {fence_refuse:%(id)s::uuid}
    RETURNING *
)
INSERT INTO jobs SELECT * FROM moving
RETURNING id;
