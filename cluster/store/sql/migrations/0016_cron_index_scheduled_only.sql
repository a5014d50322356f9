-- Version 16: a claim adds no entry to the hot table's cron index.
--
-- jobs_cron_idx (cron_id, status) held every version of a cron occurrence:
-- a claim writes a new row version (status is in the partial indexes'
-- predicates, so the update is never HOT), and that version took an entry
-- at a random place in the index (cron ids are random). In a million-cron
-- wave that is a million random B-tree inserts while it drains, and a page
-- written whole to the WAL for each page first touched after a checkpoint.
-- Claiming and finishing 200,000 occurrences on one durable shard took
-- 36.5 us of the backend's CPU a job with it, 33.0 with this one, against
-- 28.9-30.9 for jobs of no cron (and 1,664, 1,514, 1,306 bytes of WAL).
--
-- As jobs_owner_idx (migration 13), the index now holds SCHEDULED rows only.
-- The RUNNING occurrences of a cron are the jobs in flight, read from the
-- lease index; the one reader that needs them per start, REPLACE's
-- revocation, has an index of its own that only REPLACE occurrences pay.
DROP INDEX jobs_cron_idx;
CREATE INDEX jobs_cron_idx ON jobs (cron_id) WHERE cron_id IS NOT NULL AND status = 'SCHEDULED';
CREATE INDEX jobs_replace_idx ON jobs (cron_id) WHERE concurrency = 'REPLACE';
