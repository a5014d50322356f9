-- Calendars (migration 23): one copy per shard, each version replacing a
-- lesser one only (cluster/services/calendars.py).

-- name: put_calendar
-- Writes this version unless the shard holds a greater (version,
-- fingerprint) already; returns the row the shard holds afterwards.
WITH written AS (
    INSERT INTO calendars AS c (
        owner_service, name, version, fingerprint, time_zone, exclude_dates,
        include_dates, business_week, description, deleted, created_at, updated_at
    )
    VALUES (
        %(owner)s, %(name)s, %(version)s, %(fingerprint)s, %(time_zone)s,
        %(exclude_dates)s::date[], %(include_dates)s::date[],
        %(business_week)s::smallint[], %(description)s, %(deleted)s,
        coalesce(%(now)s, now()), coalesce(%(now)s, now())
    )
    ON CONFLICT (owner_service, name) DO UPDATE
       SET version = EXCLUDED.version, fingerprint = EXCLUDED.fingerprint,
           time_zone = EXCLUDED.time_zone, exclude_dates = EXCLUDED.exclude_dates,
           include_dates = EXCLUDED.include_dates, business_week = EXCLUDED.business_week,
           description = EXCLUDED.description, deleted = EXCLUDED.deleted,
           updated_at = EXCLUDED.updated_at,
           -- A calendar deleted and made again starts a new life.
           created_at = CASE WHEN c.deleted THEN EXCLUDED.created_at ELSE c.created_at END
     WHERE (c.version, c.fingerprint) < (EXCLUDED.version, EXCLUDED.fingerprint)
    RETURNING c.*
)
SELECT * FROM written
UNION ALL
SELECT * FROM calendars
 WHERE owner_service = %(owner)s AND name = %(name)s AND NOT EXISTS (SELECT FROM written);

-- name: get_calendar
SELECT * FROM calendars WHERE owner_service = %(owner)s AND name = %(name)s;

-- name: list_calendars
-- Tombstones included: the service merges the shards' copies by version.
SELECT * FROM calendars
 WHERE owner_service = %(owner)s AND name > %(after)s
 ORDER BY name
 LIMIT %(limit)s;

-- name: crons_on_calendar
-- The names of an owner's crons that follow this calendar (a DELETE is
-- refused while there are any).
SELECT name FROM cron_jobs
 WHERE owner_service = %(owner)s AND calendar = %(name)s
 ORDER BY name
 LIMIT %(limit)s;

-- name: all_calendars
-- Every calendar copy of this shard, tombstones included: what a shard added
-- to the cluster is given (cluster/store/calendar_copy.py).
SELECT * FROM calendars ORDER BY owner_service, name;

-- name: hold_calendar_version
-- A calendar's change is about to re-plan this cron: materializer writes
-- planned by an older version of it lose their compare-and-set from now on.
UPDATE cron_jobs
   SET calendar_held = %(name)s::varchar,
       calendar_version = CASE WHEN calendar_held IS DISTINCT FROM %(name)s::varchar
                               THEN %(version)s::int8
                               ELSE greatest(calendar_version, %(version)s::int8) END,
       -- The calendar's new days may move a later slot before the settled
       -- one: the materializer settles the cron again (migration 25).
       settled_next = NULL
 WHERE id = %(id)s;
