-- Version 24: limits that hold across the cluster (issue 44,
-- docs/design/limits.md, cluster/worker/admission.py).
--
-- A limit's key is what cluster.targets.kinds says it is (the HTTP host,
-- kafka:<topic>, else the kind): computed here from the row, so a job
-- needs no new column and a limit set at run time applies to jobs made
-- before it. tests/integration/test_limits.py checks it against Python.
CREATE FUNCTION vakit_limit_key(kind text, target jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE kind
        WHEN 'HTTP' THEN coalesce(lower(btrim(substring(target->>'url'
                 FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^/?#]*@)?(\[[^]/?#]*\]|[^/?#:]*)'), '[]')), '')
        WHEN 'KAFKA' THEN 'kafka:' || coalesce(target->>'topic', '')
        ELSE lower(kind)
    END
$$;

-- The limits an operator set at run time (PUT /api/v1/limits/{key}), over
-- those of VAKIT_TARGET_LIMITS; every shard holds the same rows. NULL
-- concurrency and rate: no limit on the key, whatever the configuration.
CREATE TABLE target_limits (
    key          text        PRIMARY KEY,
    concurrency  integer     CHECK (concurrency >= 0),
    rate         float8      CHECK (rate > 0),
    burst        float8      CHECK (burst >= 1),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Each limited key's rate state on this shard (GCRA: the theoretical
-- arrival time of the next firing); its row lock is also what makes the
-- limited claims of one key on one shard take turns.
CREATE TABLE limit_buckets (
    key  text        PRIMARY KEY,
    tat  timestamptz NOT NULL DEFAULT 'epoch'
);
