-- Version 4: the materializer works in pages of due crons, in keyset order
-- (next_fire_at, id). With the index on next_fire_at alone, a page inside
-- an instant that a million crons share started at the instant's first
-- entry and filtered its way past every cron already done: quadratic.
CREATE INDEX cron_jobs_due_key_idx ON cron_jobs (next_fire_at, id) WHERE enabled;
DROP INDEX cron_jobs_due_idx;

-- Cron occurrences beyond the far horizon (a large jitter, or a wave
-- materialized early) wait in jobs_far: deleting their cron cancels them,
-- and the pending count reads them, by cron.
CREATE INDEX jobs_far_cron_idx ON jobs_far (cron_id) WHERE cron_id IS NOT NULL;
