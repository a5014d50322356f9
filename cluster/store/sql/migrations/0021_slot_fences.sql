-- Version 21: the slots this shard must not serve (issue 42, docs/design/resharding.md).
--
-- A slot being moved off this shard is 'moving' (fenced before its rows are
-- copied, so none of them changes under the copy); one this shard does not
-- own is 'absent' (a shard added later starts with every slot absent; the
-- old owner marks a slot absent once the move has flipped). The table is
-- empty on every shard of a cluster that never resharded.
--
-- Every write statement on a job or cron row says (cluster/store/sql)
--   AND (NOT EXISTS (SELECT FROM slot_fences)
--        OR NOT EXISTS (SELECT 1 FROM slot_fences f WHERE f.slot = vakit_slot(<row>.id)))
-- inside its own transaction: the database fences, the map only routes. A
-- writer with a stale map is refused here, never served by two shards.
CREATE TABLE slot_fences (
    slot   smallint PRIMARY KEY CHECK (slot BETWEEN 0 AND 4095),
    state  text     NOT NULL CHECK (state IN ('moving', 'absent'))
);

-- The slot of an id: bits 64..75 of the 128, the 12 rand_a bits after the
-- version nibble (shardmap.slot_of). A function of the id, not a stored
-- column: a generated column would rewrite every row of jobs and jobs_far
-- when added (50 M rows), and the far<->near moves and pauses copy rows
-- with INSERT ... SELECT *, which a generated column refuses. No index on
-- it either: a claim rewrites every index entry of the hot table (its
-- update is never HOT), and a move finds its slots' rows by a scan of
-- page ranges instead (cluster/store/postgres/moves.py).
CREATE FUNCTION vakit_slot(id uuid) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ((get_byte(uuid_send(id), 6) & 15) << 8) | get_byte(uuid_send(id), 7)
$$;

-- A single write the API asked for (create, PATCH, cancel, cron changes)
-- is refused loudly, not as "no row": its fence test also calls this,
--   ... OR NOT EXISTS (SELECT 1 FROM slot_fences f WHERE f.slot = vakit_slot(x)
--                        AND vakit_slot_refused(f.slot, f.state, vakit_slot(x)))
-- and the store turns SQLSTATE VKS01 into SlotMoving (503, Retry-After).
-- The row's slot is an argument so that the call is tested with the row,
-- after the slot's equality (never for a fence row of another slot that a
-- plan reads); it raises only for that slot in any case.
CREATE FUNCTION vakit_slot_refused(slot int, state text, row_slot int) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF slot = row_slot THEN
        RAISE EXCEPTION 'slot % is % on this shard', slot, state
            USING ERRCODE = 'VKS01', DETAIL = slot::text;
    END IF;
    RETURN false;
END
$$;

-- A move's copy writes each batch into a staging table of its transaction
-- (binary COPY cannot skip rows that exist), then merges it: made here,
-- named by the table they stage, so the statements around them stay named
-- SQL that prepares against the schema.
CREATE FUNCTION vakit_slot_stage(p_table text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    staged text := 'slot_copy_' || p_table;
BEGIN
    IF p_table NOT IN ('jobs', 'jobs_far', 'job_keys', 'cron_jobs', 'cron_occurrences') THEN
        RAISE EXCEPTION 'not a movable table: %', p_table;
    END IF;
    -- Dropped at commit: a pooled session never keeps one whose columns a
    -- later migration changed.
    EXECUTE format('CREATE TEMP TABLE %I (LIKE %I) ON COMMIT DROP', staged, p_table);
    RETURN staged;
END
$$;

-- The staged rows into their table; a row there already (a copy run again
-- after a crash) is left as it is. Returns the rows inserted.
CREATE FUNCTION vakit_slot_merge(p_table text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    IF p_table NOT IN ('jobs', 'jobs_far', 'job_keys', 'cron_jobs', 'cron_occurrences') THEN
        RAISE EXCEPTION 'not a movable table: %', p_table;
    END IF;
    EXECUTE format('INSERT INTO %I SELECT * FROM %I ON CONFLICT DO NOTHING',
                   p_table, 'slot_copy_' || p_table);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;
