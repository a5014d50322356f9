-- Version 19: a cron's read looks only at the history after the fold's
-- watermark, whatever plan the history's statistics make.
--
-- cron_recent_success and cron_recent_result (migrations 10 and 12) took
-- the watermark from a join with cron_success_fold. The planner may put
-- the history on the inner side of that join, apply the watermark as a
-- join filter, and read every day partition: on a shard whose history
-- held 9,001 runs of one cron over four days, one of them after the
-- watermark, a get_cron read all 9,001 rows in each function (18,002 in
-- all). A minutely cron keeps 43,200 runs in 30 days, and a page of the
-- list reads them for every cron on it. As a scalar subquery the watermark
-- is an InitPlan value: the executor prunes the partitions before it at
-- startup, and a read looks at the cron's runs in the partitions at or
-- after the watermark (today's, and yesterday's while the fold lags past
-- midnight).
CREATE OR REPLACE FUNCTION cron_recent_success(cron uuid) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT max(h.finished_at)
      FROM job_history h
     WHERE h.cron_id = cron AND h.status = 'SUCCEEDED'
       AND h.finished_at > (SELECT folded_until FROM cron_success_fold)
$$;

CREATE OR REPLACE FUNCTION cron_recent_result(cron uuid)
RETURNS TABLE (status varchar, finished_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT h.status, h.finished_at
      FROM job_history h
     WHERE h.cron_id = cron
       AND h.finished_at > (SELECT folded_until FROM cron_success_fold)
       AND h.status IN ('SUCCEEDED', 'FAILED', 'SKIPPED')
     ORDER BY h.finished_at DESC, h.scheduled_for DESC
     LIMIT 1
$$;
