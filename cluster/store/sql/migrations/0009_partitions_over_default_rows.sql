-- Version 9: a day whose rows already sit in the default partition (a shard
-- whose janitor did not run for longer than the days it makes ahead, or rows
-- finished at an instant no partition covered yet) cannot get its own
-- partition: PostgreSQL refuses with check_violation. Version 3 then failed
-- the whole pass, every pass, and no later day got a partition either. Such
-- a day now stays in the default partition (the janitor purges it there by
-- age, row by row) and the following days are made as before.
CREATE OR REPLACE FUNCTION vakit_ensure_day_partitions(p_table text, p_from date, p_to date)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d date := p_from;
    made integer := 0;
    part text;
BEGIN
    WHILE d < p_to LOOP
        part := format('%s_p%s', p_table, to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            BEGIN
                EXECUTE format(
                    'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                    part, p_table, d::timestamp AT TIME ZONE 'UTC',
                    (d + 1)::timestamp AT TIME ZONE 'UTC');
                made := made + 1;
            EXCEPTION WHEN duplicate_table OR unique_violation OR check_violation THEN
                NULL;
            END;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN made;
END $$;
