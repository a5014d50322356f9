-- Version 23: calendars (issue 45), the business days crons may follow.
--
-- Every shard keeps a copy of every calendar (cluster/services/calendars.py
-- says why): the materializer of a shard reads its crons' calendars from its
-- own database, in the pass that plans them, and no shard's crons wait on
-- another shard. A row is one owner's calendar at one version; a write
-- replaces it only with a greater (version, fingerprint), so copies reached
-- in any order by retried writes converge. A deletion is a version too
-- (deleted = true): a late write of an older version cannot bring it back.
CREATE TABLE calendars (
    owner_service varchar(64)  NOT NULL,
    name          varchar(200) NOT NULL,
    version       bigint       NOT NULL CHECK (version > 0),
    fingerprint   varchar(64)  NOT NULL,
    time_zone     varchar(64)  NOT NULL,
    exclude_dates date[]       NOT NULL DEFAULT '{}',
    include_dates date[]       NOT NULL DEFAULT '{}',
    -- date.weekday() numbers: Monday is 0.
    business_week smallint[]   NOT NULL,
    description   varchar(500),
    deleted       boolean      NOT NULL DEFAULT false,
    created_at    timestamptz  NOT NULL DEFAULT now(),
    updated_at    timestamptz  NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_service, name)
);

-- A cron may follow a calendar (by name, the owner's) and say what becomes
-- of a slot on a day the calendar does not work: SKIP, NEXT_BUSINESS_DAY or
-- PREVIOUS_BUSINESS_DAY. Nullable without defaults: no row is rewritten.
ALTER TABLE cron_jobs ADD COLUMN calendar varchar(200), ADD COLUMN calendar_policy varchar(32);
-- What a calendar's DELETE asks (is it in use?) and its edits will ask
-- (which crons to plan again). Partial: crons without a calendar, nearly
-- all of them, take no entry.
CREATE INDEX cron_jobs_calendar_idx ON cron_jobs (owner_service, calendar)
    WHERE calendar IS NOT NULL;
-- The calendar version a change re-planned the cron's occurrences by
-- (calendar_held names the calendar): from then on the materializer's write
-- wins its compare-and-set only if it planned by that version or a later one,
-- so a pass that read the old version just before the change writes nothing.
ALTER TABLE cron_jobs ADD COLUMN calendar_held varchar(200), ADD COLUMN calendar_version bigint;
