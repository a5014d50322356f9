-- The operator's reads (cluster/store/postgres/insight.py): search, lateness, pending per owner.
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

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
-- A label filter (%(labels)s, a JSON object: every pair must be the
-- job's) is checked on the rows the (owner, id) index gives: there is no
-- index on labels, as a GIN index would cost every create and every
-- finished job's history insert, on the wave's hot path, for a filter
-- operators run now and then. A job without labels (NULL) matches no
-- filter, and every search without one.
SELECT * FROM (
    (SELECT 'far' AS place, {job.read}, status, attempt, last_error, created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'SCHEDULED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'RUNNING'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', {job.read}, status, attempt, last_error, created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND status <> 'CANCELLED'
        AND finished_at >= %(ran_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', {job.read}, status, attempt, last_error, created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'CANCELLED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
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
    (SELECT 'far' AS place, {job.read}, status, attempt, last_error, created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = %(status)s::text
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'SCHEDULED' AND %(status)s::text = 'SCHEDULED'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = 'RUNNING' AND %(status)s::text = 'RUNNING'
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND (%(cron_id)s::uuid IS NULL OR cron_id = %(cron_id)s::uuid)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', {job.read}, status, attempt, last_error, created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND status = %(status)s::text
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
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
    (SELECT 'far' AS place, {job.read}, status, attempt, last_error, created_at, NULL::timestamptz AS finished_at, paused_at, pause_reason
       FROM jobs_far
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND cron_id = %(cron_id)s::uuid
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND cron_id = %(cron_id)s::uuid
        AND status = 'SCHEDULED' AND (%(status)s::text IS NULL OR %(status)s::text = 'SCHEDULED')
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'near', {job.read}, status, attempt, last_error, created_at, NULL, paused_at, pause_reason
       FROM jobs
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND cron_id = %(cron_id)s::uuid
        AND status = 'RUNNING' AND (%(status)s::text IS NULL OR %(status)s::text = 'RUNNING')
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND %(finished)s::bool IS NULL
      ORDER BY id DESC
      LIMIT %(limit)s)
    UNION ALL
    (SELECT 'history', {job.read}, status, attempt, last_error, created_at, finished_at, NULL, NULL
       FROM job_history
      WHERE owner_service = %(owner)s AND id < %(before)s
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(labels)s::jsonb IS NULL OR labels @> %(labels)s::jsonb)
        AND cron_id = %(cron_id)s::uuid
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
        AND run_at >= %(run_from)s AND run_at < %(run_to)s
        AND finished_at >= %(finished_from)s AND finished_at < %(finished_to)s
      ORDER BY id DESC
      LIMIT %(limit)s)
) page
ORDER BY id DESC
LIMIT %(limit)s;
