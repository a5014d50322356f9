-- Where this database sits in the cluster: shard `shard_index` of
-- `shard_count`, in the layout whose fingerprint is `fingerprint` (a hash of
-- every shard's `shard_uuid`, in order). Written once, by the first process
-- that starts on a shard list; every later process checks its own list against
-- it and refuses to run on a different one (ids route by slot % shard_count).
CREATE TABLE cluster_layout (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    shard_uuid    uuid        NOT NULL,
    shard_index   integer     NOT NULL CHECK (shard_index >= 0),
    shard_count   integer     NOT NULL CHECK (shard_count > shard_index),
    fingerprint   text        NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now()
);
