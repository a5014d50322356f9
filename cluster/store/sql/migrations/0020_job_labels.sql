-- Version 20: a job's labels, a small string map the user sets at create
-- and searches by exact match (GET /api/v1/jobs?label=key=value).
--
-- Nullable with no default: a job without labels stores NULL, and adding a
-- nullable column without a default rewrites no row (a catalogue change,
-- instant on a shard of 50 M rows). The column is appended to jobs and
-- jobs_far alike, so the two keep one column order (pause and resume copy
-- rows whole, SELECT *), and to job_history, which every move names its
-- columns to (cluster/model/columns.py).
--
-- No index: the search finds a page of an owner's jobs from the
-- (owner, id) indexes and filters it by containment. A GIN index on
-- labels would cost every finished job's history insert, on the hot path
-- of a wave, for a filter an operator runs now and then.
ALTER TABLE jobs        ADD COLUMN labels jsonb;
ALTER TABLE jobs_far    ADD COLUMN labels jsonb;
ALTER TABLE job_history ADD COLUMN labels jsonb;
