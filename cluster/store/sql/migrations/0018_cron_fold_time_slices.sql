-- Version 18: the cron fold reads windows of time of the history; a
-- finished cron occurrence writes one index fewer.
--
-- job_history_cron_finished_idx (migration 14) let the fold bound a slice
-- at its 2,000th cron row in index order. Every finished occurrence paid an
-- entry in it, in the very wave the crons make: inserting 300,000 history
-- rows with cron ids (made in order, as UUIDv7 are) into a durable table,
-- 500 a statement, cost the backend 17-21 us of CPU a row with neither of
-- the history's cron indexes, 20-25 with one and 24-29 with both (546,
-- 629-648 and 713 bytes of WAL). Only the fold read it, and the fold runs
-- after a wave: the materializer defers it while its shard drains a
-- backlog.
--
-- A call now reads the history rows of a window of time from the BRIN
-- index (migration 5): (folded_until, folded_until + slice_seconds], never
-- past now() - lag, and folds at most about its limit of cron rows of it
-- (cut at the limit's row of the window's, sorted, as before). The width
-- follows what a window held (fold_cron_successes), so each history row is
-- read about once (give or take the BRIN ranges at a window's edges),
-- whatever share of them are cron occurrences.
DROP INDEX job_history_cron_finished_idx;
ALTER TABLE cron_success_fold ADD COLUMN slice_seconds double precision NOT NULL DEFAULT 1.0;

-- A BRIN scan returns every page range that has no summary yet, whatever
-- its bounds: the rows inserted since the partition's last vacuum (up to a
-- fifth of it) would be read by every fold call. The fold first summarizes
-- them, once. A partition that a vacuum holds (the lock both take) is left
-- for that vacuum to summarize, at once rather than after a wait that
-- would cancel it (a role that does not own the history leaves it to
-- vacuum too). The last, partly filled range is summarized too, and
-- the finishes that land in it afterwards each widen its summary; a
-- wave's do not, as no fold runs during one.
CREATE FUNCTION vakit_summarize_history() RETURNS integer
LANGUAGE plpgsql SET lock_timeout = '50ms' AS $$
DECLARE
    idx regclass;
    n integer := 0;
BEGIN
    FOR idx IN
        SELECT i.inhrelid::regclass
          FROM pg_inherits i
         WHERE i.inhparent = 'job_history_finished_brin'::regclass
    LOOP
        BEGIN
            n := n + brin_summarize_new_values(idx);
        EXCEPTION WHEN lock_not_available OR insufficient_privilege THEN
            NULL;
        END;
    END LOOP;
    RETURN n;
END
$$;
