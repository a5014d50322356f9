-- The materializer's and janitor's cron passes (cluster/store/postgres_cron/upkeep.py, pools.py).
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

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
                 WHERE o.created_at < %(before)s AND {fence:o.cron_id}
                   AND greatest(o.created_at, o.scheduled_for) < %(before)s
                   AND (SELECT 1 FROM jobs WHERE id = o.job_id) IS NULL
                   AND (SELECT 1 FROM jobs_far WHERE id = o.job_id) IS NULL
                 LIMIT %(limit)s);

-- name: due_crons
-- A page of due crons in keyset order: only what planning needs (the write
-- copies target and payload inside the database). (next_fire_at, id) is
-- the index cron_jobs_due_key_idx: a page starts where the last one ended,
-- even inside an instant a million crons share. The second branch adds the
-- PREVIOUS_BUSINESS_DAY crons not yet settled (migration 25) up to
-- `unsettled_until`, from their own partial index; each branch is an index
-- scan in key order, and the merge keeps the order.
SELECT * FROM (
    (SELECT id, schedule, schedule_kind, time_zone, anchor, misfire_policy, concurrency,
            jitter_seconds, starting_deadline_seconds, next_fire_at, month_end_policy,
            dst_policy, end_at, max_runs, run_count, owner_service, calendar, calendar_policy,
            (calendar_policy IS DISTINCT FROM 'PREVIOUS_BUSINESS_DAY'
             OR settled_next IS NOT DISTINCT FROM next_fire_at) AS settled
       FROM cron_jobs
      WHERE enabled AND paused_at IS NULL AND next_fire_at <= %(until)s
        AND (next_fire_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
      ORDER BY next_fire_at, id
      LIMIT %(limit)s)
    UNION ALL
    (SELECT id, schedule, schedule_kind, time_zone, anchor, misfire_policy, concurrency,
            jitter_seconds, starting_deadline_seconds, next_fire_at, month_end_policy,
            dst_policy, end_at, max_runs, run_count, owner_service, calendar, calendar_policy,
            false
       FROM cron_jobs
      WHERE enabled AND paused_at IS NULL AND calendar_policy = 'PREVIOUS_BUSINESS_DAY'
        AND settled_next IS DISTINCT FROM next_fire_at
        AND next_fire_at > %(until)s AND next_fire_at <= %(unsettled_until)s
        AND (next_fire_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
      ORDER BY next_fire_at, id
      LIMIT %(limit)s)
) due
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
       end_at, max_runs, run_count, owner_service, calendar, calendar_policy
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
                         %(runs)b::int8[], %(cal_version)b::int8[], %(settled)b::bool[])
           AS v(id, expected, next, last_fire, missed, skipped, runs, cal_version, settled)
),
locked AS (
    -- A lookup by primary key per cron (the locking subquery is never
    -- flattened into a join), never a scan of the whole table.
    SELECT v.* FROM v CROSS JOIN LATERAL (
        SELECT FROM cron_jobs c
         WHERE c.id = v.id AND c.next_fire_at IS NOT DISTINCT FROM v.expected AND c.enabled
               AND c.paused_at IS NULL
               -- Planned by the calendar version a change re-planned by, or
               -- a later one (migration 23); crons without one pass.
               AND (c.calendar_version IS NULL OR c.calendar_held IS DISTINCT FROM c.calendar
                    OR c.calendar_version <= v.cal_version)
           FOR UPDATE SKIP LOCKED
    ) l
     -- A fenced slot's cron is not materialized here: it loses this round,
     -- as a cron another materializer holds does. Outside the locking
     -- subquery, which stays a lookup by primary key (test_plans).
     WHERE {fence:v.id}
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
           run_count = c.run_count + v.runs,
           -- A PREVIOUS_BUSINESS_DAY cron planned up to a settled slot
           -- says so (migration 25); every other cron keeps NULL.
           settled_next = CASE WHEN c.calendar_policy IS DISTINCT FROM 'PREVIOUS_BUSINESS_DAY'
                               THEN c.settled_next
                               WHEN v.settled THEN v.next END
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
     WHERE c.id = s.cron_id AND {fence:c.id}
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
