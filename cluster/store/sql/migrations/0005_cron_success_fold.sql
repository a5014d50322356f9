-- Version 5: a cron's last success is folded in from the history by the
-- shard's leader instead of being stamped by every completion.
--
-- Stamping cron_jobs.last_success_at in finish_jobs rewrote a wide row (and,
-- on full pages, every index of cron_jobs) per succeeded occurrence: 24 µs of
-- PostgreSQL CPU a job, which made a million-cron midnight wave drain at 69 %
-- of the rate of plain jobs. The history already records each success; the
-- leader folds it into last_success_at in bounded slices (fold_cron_successes)
-- and reads add what is newer than the watermark (recent_success_at).
CREATE TABLE cron_success_fold (
    singleton     boolean      PRIMARY KEY DEFAULT true CHECK (singleton),
    -- History rows that finished at or before this instant are folded.
    folded_until  timestamptz  NOT NULL
);
-- Nothing is folded yet: the first folds read the history from its start.
INSERT INTO cron_success_fold (folded_until) VALUES ('-infinity');

-- The fold reads the history by finish time. Rows arrive in finish-time
-- order, so a BRIN index finds a slice in a few blocks for almost no
-- maintenance cost per finished job.
CREATE INDEX job_history_finished_brin ON job_history USING brin (finished_at);
