-- Retention of distributed (Citus) tables (retention_shards.sql), the parts
-- a single server can check: without Citus every table is planned as
-- before (no unit names a shard), the predicate over parameters is what it
-- was, and the literals a shard's read takes mean the same in any session.
-- The Citus tier (internal/citustest, TestCitusRetentionCAP and
-- TestCitusRetentionOneShardAStatement) proves the per-shard sweep itself.
BEGIN;
SELECT plan(11);

CREATE SCHEMA rs;
CREATE TABLE rs.events (id int PRIMARY KEY, at timestamp NOT NULL, status text NOT NULL, tenant int NOT NULL);
INSERT INTO rs.events SELECT i, localtimestamp - interval '3 days', CASE WHEN i % 2 = 0 THEN 'done' ELSE 'open' END, i % 3
  FROM generate_series(1, 300) i;
CREATE INDEX ON rs.events (at);
ANALYZE rs.events;
SELECT pgsweep.retention_register('rs', 'rs.events', 'at', '1 day', 'status', '{done}', p_mode => 'parallel');
SELECT pgsweep.retention_set_filter('rs', 'tenant', '{1,2}');

SELECT is(pgsweep._retention_distribution('rs.events'::regclass), NULL, 'a plain table has no distribution column');

SELECT is(pgsweep._retention_predicate(p, 'rs.events'::regclass),
          'at < ($3 AT TIME ZONE ''UTC'') AND status = ANY ($4::pg_catalog.text[]) AND tenant = ANY ($5::pg_catalog.int4[])',
          'the predicate over $3..$5 is unchanged')
  FROM pgsweep.retention_policy p WHERE p.name = 'rs';
SELECT is(pgsweep._retention_predicate_with(p, 'rs.events'::regclass, pgsweep._retention_time_literal('2026-01-02 03:04:05.123456+00'),
                                            quote_literal(p.statuses::text), quote_literal(p.filter_values::text)),
          'at < (''2026-01-02T03:04:05.123456Z''::pg_catalog.timestamptz AT TIME ZONE ''UTC'') AND status = ANY (''{done}''::pg_catalog.text[]) AND tenant = ANY (''{1,2}''::pg_catalog.int4[])',
          'the predicate over literals, for a shard''s read')
  FROM pgsweep.retention_policy p WHERE p.name = 'rs';

-- A time literal reads back the same under another DateStyle and TimeZone.
CREATE FUNCTION pg_temp.back(p_at timestamptz) RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    v_lit text := pgsweep._retention_time_literal(p_at);
    v timestamptz;
BEGIN
    PERFORM set_config('DateStyle', 'SQL, DMY', true);
    PERFORM set_config('TimeZone', 'Asia/Kathmandu', true);
    EXECUTE 'SELECT ' || v_lit INTO v;
    PERFORM set_config('DateStyle', 'ISO, MDY', true);
    PERFORM set_config('TimeZone', 'UTC', true);
    RETURN v;
END
$$;
SET LOCAL TimeZone = 'America/New_York';
SELECT is(pg_temp.back('2026-03-08 01:59:59.999999-05'), '2026-03-08 06:59:59.999999+00'::timestamptz,
          'a time literal keeps its instant and microseconds across DateStyle and TimeZone');
SELECT is(pg_temp.back('2026-12-31 23:00:00+00'), '2026-12-31 23:00:00+00'::timestamptz, 'day, month and year are not swapped');
SELECT is(pg_temp.back('infinity'), 'infinity'::timestamptz, 'infinity reads back');
SELECT is(pg_temp.back('-infinity'), '-infinity'::timestamptz, '-infinity reads back');
RESET TimeZone;

-- A pass over the plain table: planned as before (no unit names a shard),
-- sweeping exactly the eligible rows.
-- (retention_run commits, which a pgTAP transaction cannot: its steps, as in retention_run.sql)
CREATE FUNCTION pg_temp.run(p_name text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
    v := pgsweep._retention_begin(p_name, 'tap', '1 hour', NULL);
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v;
END $$;
SELECT pg_temp.run('rs');
SELECT is((SELECT count(*) FROM rs.events WHERE status = 'done' AND tenant IN (1, 2)), 0::bigint, 'every eligible row is gone');
SELECT is((SELECT count(*) FROM rs.events), 200::bigint, 'every other row is left');
SELECT is((SELECT strategy FROM pgsweep.retention_sweep WHERE policy = 'rs' ORDER BY id DESC LIMIT 1), 'tid_range',
          'a plain table is swept by the plain plan');
SELECT is((SELECT units FROM pgsweep.retention_passes WHERE policy = 'rs' ORDER BY id DESC LIMIT 1), 1,
          'in units of its blocks (one here)');

SELECT * FROM finish();
ROLLBACK;
