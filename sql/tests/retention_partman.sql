-- pg_partman interop: a table whose daily partitions pg_partman creates
-- works with pgsweep's retention unchanged. pg_partman's own retention stays
-- off (part_config.retention NULL, its default): one of the two removes old
-- partitions, never both (docs/retention.md).
BEGIN;
SELECT plan(8);

CREATE SCHEMA IF NOT EXISTS partman;
CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman;
CREATE SCHEMA pm;
CREATE TABLE pm.events (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
-- daily partitions from 10 days ago, 3 days ahead
SELECT partman.create_parent('pm.events', 'at', 'native', 'daily', p_premake := 3,
                             p_start_partition := to_char(now() - interval '10 days', 'YYYY-MM-DD'));
SELECT is((SELECT retention FROM partman.part_config WHERE parent_table = 'pm.events'), NULL,
    'pg_partman''s own retention is off (part_config.retention NULL)');
INSERT INTO pm.events SELECT g, date_trunc('day', now()) - interval '10 days' + g * interval '1 hour'
  FROM generate_series(0, 24 * 11 - 1) g;
CREATE TEMP TABLE leaves_before AS
SELECT count(*) AS n FROM pg_partition_tree('pm.events') WHERE isleaf AND relid::text NOT LIKE '%default%';

CREATE FUNCTION pg_temp.run(p_name text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_pass bigint; v_more boolean;
BEGIN
    v_pass := pgsweep._retention_begin(p_name, 'tap', interval '1 hour', NULL);
    LOOP
        v_more := pgsweep.retention_step(v_pass);
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM pgsweep._retention_finish(v_pass, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v_pass;
END $$;

SELECT lives_ok($$SELECT pgsweep.retention_register('pm', 'pm.events', 'at', '3 days')$$, 'a pg_partman table registers');
SELECT isnt(pg_temp.run('pm'), NULL, 'a pass runs');
SELECT is((SELECT count(*) FROM pm.events WHERE at < now() - interval '3 days'), 0::bigint, 'no row older than 3 days is left');
SELECT is((SELECT count(*) FROM pm.events), (SELECT count(*) FROM generate_series(0, 24 * 11 - 1) g
             WHERE date_trunc('day', now()) - interval '10 days' + g * interval '1 hour' >= now() - interval '3 days'),
    'every younger row is kept');
SELECT cmp_ok((SELECT partitions_dropped FROM pgsweep.retention_passes WHERE policy = 'pm'), '>=', 6,
    'the wholly expired daily partitions were dropped, not deleted row by row');
SELECT lives_ok($$SELECT partman.run_maintenance('pm.events')$$, 'pg_partman''s maintenance still works afterwards');
SELECT cmp_ok((SELECT count(*) FROM pg_partition_tree('pm.events') WHERE isleaf AND relid::text NOT LIKE '%default%'),
    '<', (SELECT n FROM leaves_before), 'and does not bring the dropped partitions back');

SELECT * FROM finish();
ROLLBACK;
