-- Version 15: a cron due within a minute wakes the materializer.
--
-- The materializer passes every few seconds (VAKIT_MATERIALIZER_INTERVAL), so
-- a cron created, changed or resumed a few seconds before its slot was
-- materialized only by the next pass, after the slot: 20,000 every-minute
-- crons created 4 s before a minute started that minute p99 10 s late. Such a
-- write now sends NOTIFY vakit_cron_soon; the shard's leader listens
-- (CronStore.cron_soon) and passes at once. The rows the materializer itself
-- moves keep their updated_at and send nothing. A NOTIFY is delivered at
-- commit and those of one transaction with the same payload come as one, so
-- a batch create of 1,000 crons wakes the leader once. Row triggers with a
-- WHEN: the condition is checked without calling the function, so a cron
-- due later costs nothing.
CREATE FUNCTION vakit_cron_soon() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('vakit_cron_soon', '');
    RETURN NULL;
END $$;

CREATE TRIGGER cron_jobs_soon_created AFTER INSERT ON cron_jobs FOR EACH ROW
    WHEN (NEW.enabled AND NEW.paused_at IS NULL
          AND NEW.next_fire_at < now() + interval '60 seconds')
    EXECUTE FUNCTION vakit_cron_soon();

CREATE TRIGGER cron_jobs_soon_changed AFTER UPDATE ON cron_jobs FOR EACH ROW
    WHEN (NEW.updated_at IS DISTINCT FROM OLD.updated_at
          AND NEW.enabled AND NEW.paused_at IS NULL
          AND NEW.next_fire_at < now() + interval '60 seconds')
    EXECUTE FUNCTION vakit_cron_soon();
