-- Version 13: the hot table's owner index holds SCHEDULED rows only.
--
-- A claim (SCHEDULED -> RUNNING) changes a column that partial indexes name,
-- so it is never a HOT update: every index of the hot table gets a new
-- entry for every claimed job. (owner_service, id) was one of them, for
-- search alone: 4 us of a shard's CPU and 140 bytes of WAL per job at the
-- round hour (claim and finish of 100,000 jobs on one durable shard, 28 ->
-- 24.5 us of backend CPU per job). As a partial index a claimed row
-- leaves it. Search reads a page of an owner's SCHEDULED jobs from it and
-- its RUNNING ones (the jobs in flight) from the lease index.
DROP INDEX jobs_owner_idx;
CREATE INDEX jobs_owner_idx ON jobs (owner_service, id) WHERE status = 'SCHEDULED';
