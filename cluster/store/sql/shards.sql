-- A shard's own bookkeeping: schema version, migrations, the layout (cluster/store/migrate.py, layout.py, pgshards.py).
-- Conventions (placeholders, arrays, now(), fencing): see the head of
-- jobs_claims.sql. Loaded by cluster/store/sql/__init__.py.

-- name: schema_version
SELECT CASE WHEN to_regclass('schema_migrations') IS NULL THEN 0
            ELSE (SELECT coalesce(max(version), 0) FROM schema_migrations) END AS version;

-- name: migration_lock
SELECT pg_advisory_xact_lock(%(key)s);

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: record_migration
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- ---------------------------------------------------------------------------
-- Cron definitions and occurrences
-- ---------------------------------------------------------------------------

-- name: layout_read
-- This database's place in the cluster (cluster/store/layout.py); no row before
-- the first process registered the shard list.
SELECT shard_uuid::text, shard_index, shard_count, fingerprint
FROM cluster_layout;

-- name: layout_claim
-- Nothing returned: another process registered this shard first.
INSERT INTO cluster_layout (shard_uuid, shard_index, shard_count, fingerprint)
VALUES (%(shard_uuid)s, %(shard_index)s, %(shard_count)s, %(fingerprint)s)
ON CONFLICT (singleton) DO NOTHING
RETURNING shard_uuid;

-- name: layout_grow
-- A shard was added to the running cluster (cluster/store/layout.py grow_layout):
-- every shard records the new count and fingerprint.
UPDATE cluster_layout SET shard_count = %(shard_count)s, fingerprint = %(fingerprint)s;

-- name: fence_all_slots
-- A shard added to the running cluster serves no slot until the mover flips
-- one to it (cluster/resharding/grow.py).
INSERT INTO slot_fences (slot, state)
SELECT g, 'absent' FROM generate_series(0, 4095) AS g
ON CONFLICT (slot) DO NOTHING;

-- ---------------------------------------------------------------------------
-- Operators: search, retry, pause and resume, backfill
-- ---------------------------------------------------------------------------
