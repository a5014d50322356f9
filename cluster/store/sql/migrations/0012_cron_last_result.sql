-- Version 12: a cron's last result: the outcome of its occurrence that finished last.
-- Folded from the history by the leader with its last success, in the same
-- slices (fold_cron_successes); reads add what is newer than the fold's
-- watermark (cron_recent_result). A cron whose occurrences all finished
-- before this version shows its last result from its next one on: filling
-- it in here would read the whole history in the migration.
ALTER TABLE cron_jobs
    ADD COLUMN last_result    varchar(16),
    ADD COLUMN last_result_at timestamptz;

-- The newest finished occurrence the fold has not reached: what a read puts
-- over the folded last result. A cancelled occurrence (its cron deleted, or
-- withdrawn) is no result.
CREATE FUNCTION cron_recent_result(cron uuid)
RETURNS TABLE (status varchar, finished_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT h.status, h.finished_at
      FROM job_history h, cron_success_fold f
     WHERE h.cron_id = cron AND h.finished_at > f.folded_until
       AND h.status IN ('SUCCEEDED', 'FAILED', 'SKIPPED')
     ORDER BY h.finished_at DESC, h.scheduled_for DESC
     LIMIT 1
$$;
