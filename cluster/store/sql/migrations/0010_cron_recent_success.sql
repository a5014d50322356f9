-- Version 10: one definition of what a cron's reads add to its folded
-- last_success_at (migration 5): its successes newer than the fold's
-- watermark. get_cron, get_cron_by_name and list_crons each spelled the
-- same lateral subquery out.
CREATE FUNCTION cron_recent_success(cron uuid) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT max(h.finished_at)
      FROM job_history h, cron_success_fold f
     WHERE h.cron_id = cron AND h.status = 'SUCCEEDED' AND h.finished_at > f.folded_until
$$;
