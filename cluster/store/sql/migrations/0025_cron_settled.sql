-- Version 25: crons that move a slot to the PREVIOUS business day (issue 45).
--
-- Such a slot runs before it is due, up to MAX_MOVE_DAYS (31) days before:
-- keyed on next_fire_at alone, the materializer would meet it too late. It
-- plans a PREVIOUS cron up to a "settled" slot, one that no later slot runs
-- before, and writes that slot in settled_next as well as in next_fire_at.
-- Any other write of next_fire_at (a create, a PATCH, a resume, a calendar's
-- re-plan) leaves the two different: such a cron is due 32 days before its
-- next_fire_at, so the materializer settles it in time. Nullable without a
-- default: no row is rewritten.
ALTER TABLE cron_jobs ADD COLUMN settled_next timestamptz;
-- The unsettled PREVIOUS crons, in the due query's keyset order: a few rows
-- at most (every other cron takes no entry).
CREATE INDEX cron_jobs_unsettled_idx ON cron_jobs (next_fire_at, id)
    WHERE enabled AND paused_at IS NULL AND calendar_policy = 'PREVIOUS_BUSINESS_DAY'
          AND settled_next IS DISTINCT FROM next_fire_at;
