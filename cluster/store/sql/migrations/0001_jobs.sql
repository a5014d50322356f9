-- Vakit shard schema, version 1: one-shot jobs, the far table, history,
-- the attempt log, the idempotency ledger and worker beats.
--
-- The hot table `jobs` holds only SCHEDULED and RUNNING rows: a finished job
-- is moved to `job_history` in the same statement that finishes it, so the
-- partial indexes the claim and the reaper use stay small however much
-- history accumulates.

CREATE TABLE jobs (
    id               uuid         PRIMARY KEY,
    owner_service    varchar(64)  NOT NULL,
    idempotency_key  varchar(200),
    type             varchar(64)  NOT NULL,
    cron_id          uuid,
    scheduled_for    timestamptz  NOT NULL,  -- logical time (the cron slot, or the asked runAt)
    run_at           timestamptz  NOT NULL,  -- physical time, after jitter and retries
    status           varchar(16)  NOT NULL DEFAULT 'SCHEDULED',
    attempt          integer      NOT NULL DEFAULT 0,  -- bumped by every claim: the fencing token
    max_attempts     integer      NOT NULL,
    timeout_seconds  integer      NOT NULL,
    target_kind      varchar(16)  NOT NULL,
    target           jsonb        NOT NULL,
    payload          jsonb        NOT NULL,
    locked_by        varchar(128),
    claimed_at       timestamptz,
    lease_until      timestamptz,
    last_error       text,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT jobs_status_ck CHECK (status IN ('SCHEDULED', 'RUNNING')),
    CONSTRAINT jobs_lease_ck CHECK (status <> 'RUNNING' OR lease_until IS NOT NULL),
    CONSTRAINT jobs_attempts_ck CHECK (max_attempts BETWEEN 1 AND 100 AND attempt >= 0)
);

-- The claim scans only due rows; the reaper only running ones.
CREATE INDEX jobs_due_idx   ON jobs (run_at)      WHERE status = 'SCHEDULED';
CREATE INDEX jobs_lease_idx ON jobs (lease_until) WHERE status = 'RUNNING';
CREATE INDEX jobs_cron_idx  ON jobs (cron_id, status) WHERE cron_id IS NOT NULL;

-- Jobs due beyond the near horizon wait here; the mover brings them in.
CREATE TABLE jobs_far (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE jobs_far ADD PRIMARY KEY (id);
ALTER TABLE jobs_far ADD CONSTRAINT jobs_far_scheduled_ck CHECK (status = 'SCHEDULED');
CREATE INDEX jobs_far_run_at_idx ON jobs_far (run_at);

-- One row per owner and key, across the near, far and history tables. The
-- create routes every repeat of a key to the same shard, so this per-shard
-- primary key is a global one. `fingerprint` tells a true repeat from a reuse
-- of the key with another body.
CREATE TABLE job_keys (
    owner_service    varchar(64)  NOT NULL,
    idempotency_key  varchar(200) NOT NULL,
    job_id           uuid         NOT NULL,
    fingerprint      text         NOT NULL,
    created_at       timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_service, idempotency_key)
);
CREATE INDEX job_keys_created_idx ON job_keys (created_at);

-- Finished jobs, by day; whole days are dropped after the retention.
CREATE TABLE job_history (
    id               uuid         NOT NULL,
    owner_service    varchar(64)  NOT NULL,
    idempotency_key  varchar(200),
    type             varchar(64)  NOT NULL,
    cron_id          uuid,
    scheduled_for    timestamptz  NOT NULL,
    run_at           timestamptz  NOT NULL,
    status           varchar(16)  NOT NULL,
    attempt          integer      NOT NULL,
    max_attempts     integer      NOT NULL,
    timeout_seconds  integer      NOT NULL,
    target_kind      varchar(16)  NOT NULL,
    target           jsonb        NOT NULL,
    payload          jsonb        NOT NULL,
    last_error       text,
    created_at       timestamptz  NOT NULL,
    finished_at      timestamptz  NOT NULL,
    CONSTRAINT job_history_status_ck CHECK (status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')),
    PRIMARY KEY (id, finished_at)
) PARTITION BY RANGE (finished_at);
CREATE TABLE job_history_default PARTITION OF job_history DEFAULT;
CREATE INDEX job_history_cron_idx ON job_history (cron_id, scheduled_for) WHERE cron_id IS NOT NULL;

-- One row per attempt that ended (success, error, timeout, lease expiry).
CREATE TABLE job_attempts (
    job_id           uuid         NOT NULL,
    attempt          integer      NOT NULL,
    worker           varchar(128),
    started_at       timestamptz,
    finished_at      timestamptz  NOT NULL,
    outcome          varchar(16)  NOT NULL,
    error            text,
    lateness_seconds double precision,
    PRIMARY KEY (job_id, attempt, finished_at)
) PARTITION BY RANGE (finished_at);
CREATE TABLE job_attempts_default PARTITION OF job_attempts DEFAULT;

-- Which workers polled this shard lately (readiness and `vakit status`).
CREATE TABLE worker_beats (
    worker_id  varchar(128) PRIMARY KEY,
    last_seen  timestamptz  NOT NULL
);

-- Day partitions [p_from, p_to) for a table partitioned by finished_at, named
-- <table>_pYYYYMMDD. Idempotent; the janitor calls it every run.
CREATE FUNCTION vakit_ensure_day_partitions(p_table text, p_from date, p_to date)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d date := p_from;
    made integer := 0;
    part text;
BEGIN
    WHILE d < p_to LOOP
        part := format('%s_p%s', p_table, to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                part, p_table, d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
            made := made + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN made;
END $$;
