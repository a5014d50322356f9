-- Version 3: two janitors at once (two leaders at a day rollover, or workers
-- without ZooKeeper, where every worker leads) must both succeed. The check
-- and the CREATE of version 1 raced: the second got duplicate_table. A
-- partition another session just created is what we wanted anyway.
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
            EXCEPTION WHEN duplicate_table OR unique_violation THEN
                NULL;
            END;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN made;
END $$;
