-- Retention of partitioned tables (retention_partition.sql): every leaf,
-- present and future; RANGE leaves wholly older than the cutoff are
-- detached and dropped; the rest (partially expired, DEFAULT, LIST, HASH,
-- status-filtered) are swept row by row.
BEGIN;
SELECT plan(48);

CREATE SCHEMA rp;
-- RANGE by day, with a default partition
CREATE TABLE rp.events (id bigint NOT NULL, at timestamptz NOT NULL, status text NOT NULL DEFAULT 'done')
    PARTITION BY RANGE (at);
CREATE TABLE rp.events_d1 PARTITION OF rp.events FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rp.events_d2 PARTITION OF rp.events FOR VALUES FROM ('2026-01-02 00:00+00') TO ('2026-01-03 00:00+00');
CREATE TABLE rp.events_d3 PARTITION OF rp.events FOR VALUES FROM ('2026-01-03 00:00+00') TO ('2026-01-04 00:00+00');
CREATE TABLE rp.events_def PARTITION OF rp.events DEFAULT;
INSERT INTO rp.events SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 71) g; -- d1, d2, d3
INSERT INTO rp.events SELECT 1000 + g, '2025-06-01 00:00+00'::timestamptz + g * interval '1 day' FROM generate_series(0, 9) g; -- default, old
INSERT INTO rp.events VALUES (2000, '2030-01-01 00:00+00'); -- default, young

-- run: one pass of policy p_name; p_watch (a leaf) records after every
-- step whether the leaf is there and how many rows it holds (run_steps)
CREATE TEMP TABLE run_steps (step int, present boolean, n bigint);
CREATE FUNCTION pg_temp.run(p_name text, p_now timestamptz, p_watch text DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_pass bigint; v_more boolean; v_step int := 0; v_n bigint;
BEGIN
    v_pass := pgsweep._retention_begin(p_name, 'tap', interval '1 hour', p_now);
    IF v_pass IS NULL THEN RETURN NULL; END IF;
    LOOP
        v_more := pgsweep.retention_step(v_pass);
        IF p_watch IS NOT NULL THEN
            v_step := v_step + 1;
            v_n := NULL;
            IF to_regclass(p_watch) IS NOT NULL THEN
                EXECUTE format('SELECT count(*) FROM %s', to_regclass(p_watch)) INTO v_n;
            END IF;
            INSERT INTO run_steps VALUES (v_step, to_regclass(p_watch) IS NOT NULL, v_n);
        END IF;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM pgsweep._retention_finish(v_pass, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v_pass;
END $$;

SELECT lives_ok($$SELECT pgsweep.retention_register('events', 'rp.events', 'at', '1 day')$$, 'RANGE-partitioned table registers');
-- cutoff 2026-01-02 12:00: d1 (ends 01-02 00:00) is wholly expired, d2 partly, d3 not
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00'), NULL, 'a pass runs');
SELECT ok(to_regclass('rp.events_d1') IS NULL, 'the wholly expired leaf is dropped');
SELECT is((SELECT count(*) FROM rp.events_d2), 12::bigint, 'the partly expired leaf is swept: its 12 young hours stay');
SELECT is((SELECT count(*) FROM rp.events_d3), 24::bigint, 'the young leaf is untouched');
SELECT is((SELECT count(*) FROM rp.events_def), 1::bigint, 'the default partition is swept, not dropped: its young row stays');
SELECT ok(to_regclass('rp.events_def') IS NOT NULL, 'the default partition stays');
SELECT results_eq($$SELECT outcome, rows_deleted, partitions_dropped FROM pgsweep.retention_passes WHERE policy = 'events'$$,
    $$VALUES ('drained', 24::bigint + 12 + 10, 1)$$, 'the pass counts the dropped leaf''s 24 rows as deleted, and the drop');

-- a partition attached after registration is covered
CREATE TABLE rp.events_d0 (LIKE rp.events);
INSERT INTO rp.events_d0 SELECT g, '2025-12-31 00:00+00'::timestamptz + g * interval '1 hour', 'done' FROM generate_series(0, 23) g;
ALTER TABLE rp.events ATTACH PARTITION rp.events_d0 FOR VALUES FROM ('2025-12-31 00:00+00') TO ('2026-01-01 00:00+00');
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00'), NULL, 'another pass runs');
SELECT ok(to_regclass('rp.events_d0') IS NULL, 'a leaf attached after registration is covered (dropped)');

-- a drop takes two passes (0.33): one step detaches every expired leaf of
-- the parent in one transaction (one lock on the parent) and renames it
-- pgsweep_detached_<oid>; the rows count as deleted then (from the
-- statistics: ANALYZE set reltuples); the next pass drops the detached
-- tables, and retention_due lists the policy at once meanwhile
CREATE TABLE rp.events_dm1 PARTITION OF rp.events FOR VALUES FROM ('2025-12-30 00:00+00') TO ('2025-12-31 00:00+00');
CREATE TABLE rp.events_dm2 PARTITION OF rp.events FOR VALUES FROM ('2025-12-29 00:00+00') TO ('2025-12-30 00:00+00');
INSERT INTO rp.events SELECT 3000 + g, '2025-12-29 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 47) g;
ANALYZE rp.events_dm1, rp.events_dm2;
CREATE TEMP TABLE dm AS SELECT 'rp.events_dm1'::regclass::oid AS dm1, 'rp.events_dm2'::regclass::oid AS dm2;
CREATE TEMP TABLE before_pass AS SELECT count(*) AS n FROM rp.events;
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00', 'rp.events'), NULL, 'a pass with two expired leaves runs');
SELECT is((SELECT count(*) FROM (SELECT n - coalesce(lag(n) OVER (ORDER BY step), (SELECT n FROM before_pass)) AS d FROM run_steps) x
            WHERE d <> 0),
          1::bigint, 'the rows of both leaves leave the parent in one step');
SELECT is((SELECT min(n) FROM run_steps), (SELECT n - 48 FROM before_pass), 'all 48 of them');
SELECT ok(to_regclass('rp.events_dm1') IS NULL AND to_regclass('rp.events_dm2') IS NULL
          AND NOT EXISTS (SELECT 1 FROM pg_partition_tree('rp.events') t, dm WHERE t.relid::oid IN (dm.dm1, dm.dm2)),
          'both leaves are detached and their names free');
SELECT is((SELECT string_agg(c.relname || ':' || c.relispartition, ',' ORDER BY c.oid) FROM pg_class c, dm WHERE c.oid IN (dm.dm1, dm.dm2)),
          (SELECT string_agg('pgsweep_detached_' || o || ':false', ',' ORDER BY o) FROM dm, unnest(ARRAY[dm.dm1, dm.dm2]) o),
          'each is left as a plain table named pgsweep_detached_<oid> until the next pass');
SELECT is((SELECT string_agg(u.leaf_name || ':' || u.kind || ':' || (u.detached_table = CASE u.leaf_name WHEN 'events_dm1' THEN dm.dm1 ELSE dm.dm2 END)
                              || ':' || coalesce(u.block_lo::text, '-') || ':' || coalesce(u.block_hi::text, '-'), ',' ORDER BY u.leaf_name)
             FROM pgsweep.retention_unit u, dm WHERE u.policy = 'events' AND u.leaf_name IN ('events_dm1', 'events_dm2')),
          'events_dm1:detached:true:-:-,events_dm2:detached:true:-:-',
          'their units are of kind detached and name the detached table (no block range)');
SELECT throws_ok($$UPDATE pgsweep.retention_unit SET detached_table = NULL WHERE policy = 'events' AND kind = 'detached'$$, '23514', NULL,
    'a detached unit cannot lose its table ...');
SELECT throws_ok($$INSERT INTO pgsweep.retention_unit (policy, sweep_id, unit_no, kind, detached_table)
                   SELECT policy, sweep_id, 9999, 'drop', 1 FROM pgsweep.retention_unit WHERE policy = 'events' LIMIT 1$$, '23514', NULL,
    '... nor another unit name one');
SELECT results_eq($$SELECT rows_deleted, partitions_dropped FROM pgsweep.retention_passes WHERE policy = 'events' ORDER BY id DESC LIMIT 1$$,
    $$VALUES (48::bigint, 2)$$, 'their 48 rows are counted (from the statistics) with the drops, at the detach');
SELECT ok('events' = ANY (ARRAY(SELECT pgsweep.retention_due('2026-01-03 12:00+00'))), 'the policy is due at once');
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00'), NULL, 'the next pass runs');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_class c, dm WHERE c.oid IN (dm.dm1, dm.dm2)), 'it dropped the detached tables');
SELECT results_eq($$SELECT rows_deleted, partitions_dropped, outcome FROM pgsweep.retention_passes WHERE policy = 'events' ORDER BY id DESC LIMIT 1$$,
    $$VALUES (0::bigint, 0, 'drained')$$, 'without counting their rows again');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE policy = 'events')
          AND NOT 'events' = ANY (ARRAY(SELECT pgsweep.retention_due('2026-01-03 12:00+00'))),
          'nothing is left open, and the policy is no longer due at once');

-- a leaf wholly younger than the cutoff is not planned at all (no row of it
-- can be eligible); the leaf the cutoff cuts through and the default are
CREATE TEMP TABLE young_plan AS
SELECT pgsweep._retention_plan_partitioned(p, '2026-01-03 12:00+00', 'tap') AS sweep FROM pgsweep.retention_policy p WHERE p.name = 'events';
SELECT is((SELECT string_agg(DISTINCT u.leaf_name, ',' ORDER BY u.leaf_name) FROM pgsweep.retention_unit u, young_plan y WHERE u.sweep_id = y.sweep),
          'events_d2,events_def', 'a plan covers the leaf the cutoff cuts through and the default, not the young leaf');
DELETE FROM pgsweep.retention_sweep s USING young_plan y WHERE s.id = y.sweep;

-- a view made on a detached table before the next pass: that pass leaves
-- the table (DROP would fail every pass) and closes its unit
CREATE TABLE rp.events_dm3 PARTITION OF rp.events FOR VALUES FROM ('2025-12-28 00:00+00') TO ('2025-12-29 00:00+00');
INSERT INTO rp.events SELECT 4000 + g, '2025-12-28 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 23) g;
CREATE TEMP TABLE dm3 AS SELECT 'rp.events_dm3'::regclass::oid AS o;
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00'), NULL, 'a pass detaches another leaf');
SELECT lives_ok(format('CREATE VIEW rp.on_detached AS SELECT * FROM rp.%I', (SELECT 'pgsweep_detached_' || o FROM dm3)),
    'a view is made on the detached table');
SELECT isnt(pg_temp.run('events', '2026-01-03 12:00+00'), NULL, 'the next pass runs');
SELECT ok(EXISTS (SELECT 1 FROM pg_class c, dm3 WHERE c.oid = dm3.o)
          AND NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE policy = 'events'),
          'it leaves the table the view depends on and closes its unit');
SELECT is((SELECT outcome FROM pgsweep.retention_passes WHERE policy = 'events' ORDER BY id DESC LIMIT 1), 'drained',
    'without an error');

-- a status filter: leaves are never dropped whole, only swept
CREATE TABLE rp.jobs (id bigint NOT NULL, at timestamptz NOT NULL, status text NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rp.jobs_d1 PARTITION OF rp.jobs FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
INSERT INTO rp.jobs SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour', CASE WHEN g % 2 = 0 THEN 'done' ELSE 'queued' END
  FROM generate_series(0, 23) g;
SELECT pgsweep.retention_register('jobs', 'rp.jobs', 'at', '1 day', 'status', ARRAY['done']);
SELECT isnt(pg_temp.run('jobs', '2026-01-05 00:00+00'), NULL, 'a filtered pass runs');
SELECT ok(to_regclass('rp.jobs_d1') IS NOT NULL, 'with a status filter the leaf is not dropped');
SELECT is((SELECT count(*) FROM rp.jobs_d1 WHERE status = 'queued'), 12::bigint, 'only the done rows are deleted');
SELECT is((SELECT count(*) FROM rp.jobs_d1), 12::bigint, 'all of them');

-- LIST and HASH (and two levels) are swept
CREATE TABLE rp.by_kind (id bigint NOT NULL, kind text NOT NULL, at timestamptz NOT NULL) PARTITION BY LIST (kind);
CREATE TABLE rp.by_kind_a PARTITION OF rp.by_kind FOR VALUES IN ('a') PARTITION BY HASH (id);
CREATE TABLE rp.by_kind_a0 PARTITION OF rp.by_kind_a FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE rp.by_kind_a1 PARTITION OF rp.by_kind_a FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE rp.by_kind_b PARTITION OF rp.by_kind FOR VALUES IN ('b');
INSERT INTO rp.by_kind SELECT g, CASE WHEN g % 3 = 0 THEN 'b' ELSE 'a' END,
       CASE WHEN g % 2 = 0 THEN '2026-01-01 00:00+00'::timestamptz ELSE '2026-02-01 00:00+00'::timestamptz END
  FROM generate_series(1, 60) g;
SELECT lives_ok($$SELECT pgsweep.retention_register('by_kind', 'rp.by_kind', 'at', '1 day')$$, 'LIST over HASH registers');
SELECT isnt(pg_temp.run('by_kind', '2026-01-10 00:00+00'), NULL, 'a LIST/HASH pass runs');
SELECT is((SELECT count(*) FROM rp.by_kind), 30::bigint, 'every leaf is swept: the 30 old rows are gone');
SELECT is((SELECT count(*) FROM rp.by_kind WHERE at < '2026-01-09'), 0::bigint, 'none of them left');
SELECT ok(to_regclass('rp.by_kind_a0') IS NOT NULL AND to_regclass('rp.by_kind_b') IS NOT NULL, 'LIST and HASH leaves are never dropped');

-- a policy owner that may delete but does not own the table gets sweeps, not drops
CREATE ROLE rp_cleaner NOLOGIN;
CREATE TABLE rp.logs (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rp.logs_d1 PARTITION OF rp.logs FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
INSERT INTO rp.logs SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 23) g;
GRANT USAGE ON SCHEMA rp TO rp_cleaner;
GRANT pgsweep_admin TO rp_cleaner;
GRANT SELECT, DELETE ON rp.logs, rp.logs_d1 TO rp_cleaner;
SET LOCAL ROLE rp_cleaner;
SELECT pgsweep.retention_register('logs', 'rp.logs', 'at', '1 day');
RESET ROLE;
SELECT isnt(pg_temp.run('logs', '2026-01-05 00:00+00'), NULL, 'a pass of a non-owner''s policy runs');
-- 0.34: the leaf's code (its triggers, RLS) must run as its owner, which
-- the policy's owner cannot act as: the leaf is skipped, the pass says why
SELECT ok(to_regclass('rp.logs_d1') IS NOT NULL AND (SELECT count(*) FROM rp.logs_d1) = 24,
    'a leaf of a role the policy owner is not a member of is neither dropped nor swept');
SELECT matches((SELECT error FROM pgsweep.retention_pass WHERE policy = 'logs' ORDER BY id DESC LIMIT 1),
    'leaf rp\.logs_d1 skipped: owned by postgres, which the policy''s owner rp_cleaner is not a member of',
    'the pass records the skipped leaf');
-- a leaf whose owner the policy's owner is a member of is swept, as the leaf's owner
CREATE ROLE rp_leafowner NOLOGIN;
ALTER TABLE rp.logs_d1 OWNER TO rp_leafowner;
GRANT USAGE ON SCHEMA rp TO rp_leafowner;
GRANT rp_leafowner TO rp_cleaner;
CREATE TABLE rp.logs_who (who text);
GRANT INSERT ON rp.logs_who TO PUBLIC;
CREATE FUNCTION rp.logs_note() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN INSERT INTO rp.logs_who VALUES (current_user); RETURN OLD; END $f$;
CREATE TRIGGER note BEFORE DELETE ON rp.logs_d1 FOR EACH ROW EXECUTE FUNCTION rp.logs_note();
SELECT isnt(pg_temp.run('logs', '2026-01-06 00:00+00'), NULL, 'a pass of a member''s policy runs');
SELECT ok(to_regclass('rp.logs_d1') IS NOT NULL AND (SELECT count(*) FROM rp.logs_d1) = 0,
    'a policy owner that does not own the table has the expired leaf swept, not dropped');
SELECT is((SELECT array_agg(DISTINCT who) FROM rp.logs_who), ARRAY['rp_leafowner'],
    'the leaf''s trigger ran as the leaf''s owner');

-- a table with a CHECK constraint (inherited by every leaf): the detached
-- leaf is still dropped by the next pass (until 0.33 the leaf's own
-- constraint counted as something depending on it: left in place forever)
CREATE TABLE rp.checked (id bigint NOT NULL, at timestamptz NOT NULL, n int CHECK (n > 0)) PARTITION BY RANGE (at);
CREATE TABLE rp.checked_d1 PARTITION OF rp.checked FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rp.checked_d9 PARTITION OF rp.checked FOR VALUES FROM ('2026-01-09 00:00+00') TO ('2026-01-10 00:00+00');
INSERT INTO rp.checked SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour', 1 FROM generate_series(0, 23) g;
CREATE TEMP TABLE ck1 AS SELECT 'rp.checked_d1'::regclass::oid AS oid;
SELECT pgsweep.retention_register('checked', 'rp.checked', 'at', '1 day');
SELECT isnt(pg_temp.run('checked', '2026-01-09 12:00+00'), NULL, 'a pass detaches the expired leaf of a table with a CHECK constraint');
SELECT isnt(pg_temp.run('checked', '2026-01-09 12:00+00'), NULL, 'the next pass runs');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = (SELECT oid FROM ck1)), 'and drops the detached table');

SELECT * FROM finish();
ROLLBACK;
