-- Version 16: a claim adds no entry to the hot table's cron index.
--
-- jobs_cron_idx (cron_id, status) held every version of a cron occurrence:
-- a claim writes a new row version (status is in the partial indexes'
-- predicates, so the update is never HOT), and that version took an entry
-- in it: in a million-cron wave, a million B-tree inserts while it drains.
-- Claiming and finishing 200,000 occurrences on one durable shard (random
-- cron ids; real ones are UUIDv7, made in creation order, so a wave's
-- entries are less scattered) took 36.5 us of the backend's CPU a job with
-- it, 33.0 with this one, against 28.9-30.9 for jobs of no cron (and 1,664,
-- 1,514, 1,306 bytes of WAL).
--
-- As jobs_owner_idx (migration 13), the index now holds SCHEDULED rows only.
-- The RUNNING occurrences of a cron are the jobs in flight, read from the
-- lease index; the one reader that needs them per start, REPLACE's
-- revocation, has an index of its own, of running REPLACE occurrences only
-- (what revoke_replaced reads): one entry each, taken at the claim. Its
-- predicate says status <> 'SCHEDULED', as the fenced writes do: written
-- status = 'RUNNING', the lease index matches too, and with statistics
-- taken while the wave was SCHEDULED the planner read every running row
-- from it at each start (test_plans).
DROP INDEX jobs_cron_idx;
CREATE INDEX jobs_cron_idx ON jobs (cron_id) WHERE cron_id IS NOT NULL AND status = 'SCHEDULED';
CREATE INDEX jobs_replace_idx ON jobs (cron_id) WHERE concurrency = 'REPLACE' AND status <> 'SCHEDULED';
