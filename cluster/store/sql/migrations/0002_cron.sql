-- Vakit shard schema, version 2: cron definitions and their occurrences.
--
-- A cron's occurrences live on the cron's shard (their ids carry its slot).
-- `cron_occurrences` is the database's guarantee of one job per
-- (cron_id, scheduled_for): it outlives the job's move to history, so a late
-- or second materializer cannot recreate an occurrence that already ran.

CREATE TABLE cron_jobs (
    id                         uuid          PRIMARY KEY,
    owner_service              varchar(64)   NOT NULL,
    name                       varchar(128)  NOT NULL,
    schedule                   varchar(200)  NOT NULL,
    schedule_kind              varchar(16)   NOT NULL,
    time_zone                  varchar(64)   NOT NULL,
    type                       varchar(64)   NOT NULL,
    target_kind                varchar(16)   NOT NULL,
    target                     jsonb         NOT NULL,
    payload                    jsonb         NOT NULL,
    misfire_policy             varchar(16)   NOT NULL,
    concurrency                varchar(16)   NOT NULL,
    jitter_seconds             integer       NOT NULL DEFAULT 0,
    max_attempts               integer       NOT NULL,
    timeout_seconds            integer       NOT NULL,
    starting_deadline_seconds  integer,
    enabled                    boolean       NOT NULL DEFAULT true,
    anchor                     timestamptz   NOT NULL,
    -- The next slot not yet materialized; NULL while a fixed-delay cron
    -- waits for its running occurrence to finish.
    next_fire_at               timestamptz,
    last_fire_at               timestamptz,
    last_success_at            timestamptz,
    missed_count               bigint        NOT NULL DEFAULT 0,
    skipped_count              bigint        NOT NULL DEFAULT 0,
    fingerprint                text          NOT NULL,
    created_at                 timestamptz   NOT NULL DEFAULT now(),
    updated_at                 timestamptz   NOT NULL DEFAULT now(),
    CONSTRAINT cron_jobs_name_uq UNIQUE (owner_service, name),
    CONSTRAINT cron_jobs_misfire_ck CHECK (misfire_policy IN ('RUN_ALL', 'RUN_ONCE', 'SKIP')),
    CONSTRAINT cron_jobs_concurrency_ck CHECK (concurrency IN ('ALLOW', 'FORBID', 'REPLACE'))
);
CREATE INDEX cron_jobs_due_idx ON cron_jobs (next_fire_at) WHERE enabled;

CREATE TABLE cron_occurrences (
    cron_id        uuid         NOT NULL,
    scheduled_for  timestamptz  NOT NULL,
    job_id         uuid         NOT NULL,
    created_at     timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT cron_occurrences_once_pk PRIMARY KEY (cron_id, scheduled_for)
);

-- Occurrences carry their cron's concurrency policy and starting deadline.
-- Columns are added to jobs and jobs_far in the same order: the mover copies
-- rows with SELECT *.
ALTER TABLE jobs     ADD COLUMN concurrency varchar(16), ADD COLUMN deadline_at timestamptz;
ALTER TABLE jobs_far ADD COLUMN concurrency varchar(16), ADD COLUMN deadline_at timestamptz;

-- FORBID: at most one pending or running occurrence of a cron in the hot table
-- (which holds only SCHEDULED and RUNNING rows). A second materializer that
-- races past the check fails here and rolls back.
CREATE UNIQUE INDEX jobs_forbid_one_idx ON jobs (cron_id) WHERE concurrency = 'FORBID';

-- A cron occurrence dropped by its starting deadline ends SKIPPED.
ALTER TABLE job_history DROP CONSTRAINT job_history_status_ck;
ALTER TABLE job_history ADD CONSTRAINT job_history_status_ck
    CHECK (status IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'SKIPPED'));
