-- Version 8: what operators act with: job search, pause and resume.
--
-- Search reads a page of an owner's jobs newest first, by id (a UUIDv7: its
-- creation order, which never changes while a job moves between tables), in
-- each of the three tables. A tenant with millions of finished jobs gets a
-- page from an index range, never a scan: (owner, status, id) for a status
-- filter (the dead letters), (owner, id) otherwise. On the partitioned
-- history table each day's partition gets its own copy of each index.
CREATE INDEX job_history_owner_status_idx ON job_history (owner_service, status, id);
CREATE INDEX job_history_owner_idx ON job_history (owner_service, id);
CREATE INDEX jobs_owner_idx ON jobs (owner_service, id);
CREATE INDEX jobs_far_owner_idx ON jobs_far (owner_service, id);

-- A paused one-shot job waits in jobs_far (the mover leaves it there) with
-- its runAt unchanged: the claim, the wave forecast and the backlog, which
-- read only the hot table, never see it. The columns are added to jobs too,
-- in the same order: the mover copies rows with SELECT *.
ALTER TABLE jobs     ADD COLUMN paused_at timestamptz, ADD COLUMN pause_reason varchar(500);
ALTER TABLE jobs_far ADD COLUMN paused_at timestamptz, ADD COLUMN pause_reason varchar(500);

-- A paused cron is not due: the materializer reads none of its slots; on
-- resume its next_fire_at is in the past and the misfire policy decides, as
-- after an outage.
ALTER TABLE cron_jobs ADD COLUMN paused_at timestamptz, ADD COLUMN pause_reason varchar(500);
-- The due pages' keyset index leaves paused crons out, as it leaves out
-- disabled ones: a page reads no entry it would filter away.
DROP INDEX cron_jobs_due_key_idx;
CREATE INDEX cron_jobs_due_key_idx ON cron_jobs (next_fire_at, id) WHERE enabled AND paused_at IS NULL;
