-- Version 7: a cron's bounds and its month-end and DST policies.
-- start_at, end_at and max_runs are optional; run_count counts the
-- occurrences the schedule made (manual triggers not), so max_runs holds
-- across materializers. A cron past its bounds has next_fire_at NULL and is
-- due no more. The defaults are what every cron did before this version.
ALTER TABLE cron_jobs
    ADD COLUMN month_end_policy varchar(8)  NOT NULL DEFAULT 'SKIP',
    ADD COLUMN dst_policy       varchar(8)  NOT NULL DEFAULT 'CRONIE',
    ADD COLUMN start_at         timestamptz,
    ADD COLUMN end_at           timestamptz,
    ADD COLUMN max_runs         integer,
    ADD COLUMN run_count        bigint      NOT NULL DEFAULT 0,
    ADD CONSTRAINT cron_jobs_month_end_ck CHECK (month_end_policy IN ('SKIP', 'CLAMP')),
    ADD CONSTRAINT cron_jobs_dst_ck CHECK (dst_policy IN ('CRONIE', 'SKIP', 'BOTH')),
    ADD CONSTRAINT cron_jobs_max_runs_ck CHECK (max_runs IS NULL OR max_runs > 0),
    ADD CONSTRAINT cron_jobs_bounds_ck CHECK (start_at IS NULL OR end_at IS NULL OR start_at <= end_at);
