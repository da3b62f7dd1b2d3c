-- The runner's DETACH ... CONCURRENTLY (retention_detach.sql): claims,
-- their records, what the pass leaves to them, bad input, grants. The
-- statement itself cannot run in a transaction block: the Go tests run it
-- (retention_detach_test.go).
BEGIN;
SELECT plan(54);

CREATE SCHEMA rd;
CREATE TABLE rd.events (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rd.events_d1 PARTITION OF rd.events FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rd.events_d2 PARTITION OF rd.events FOR VALUES FROM ('2026-01-02 00:00+00') TO ('2026-01-03 00:00+00');
CREATE TABLE rd.events_d9 PARTITION OF rd.events FOR VALUES FROM ('2026-01-09 00:00+00') TO ('2026-01-10 00:00+00');
INSERT INTO rd.events SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 47) g;
INSERT INTO rd.events SELECT 100 + g, '2026-01-09 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 23) g;
SELECT pgsweep.retention_register('events', 'rd.events', 'at', '1 day');
-- a parent with a DEFAULT partition: PostgreSQL refuses CONCURRENTLY there
CREATE TABLE rd.logs (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rd.logs_d1 PARTITION OF rd.logs FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rd.logs_def PARTITION OF rd.logs DEFAULT;
SELECT pgsweep.retention_register('logs', 'rd.logs', 'at', '1 day');

-- bad input: nothing claimed
SELECT throws_ok($$SELECT * FROM pgsweep.retention_detach_claim(NULL, '2026-01-09 12:00+00')$$, '22023',
    'p_owner must be a name of 1 to 200 characters, got NULL', 'claim: a NULL owner is refused');
SELECT throws_ok($$SELECT * FROM pgsweep.retention_detach_claim('', '2026-01-09 12:00+00')$$, '22023', NULL,
    'claim: an empty owner is refused');
SELECT throws_ok($$SELECT * FROM pgsweep.retention_detach_claim('tap', 'infinity')$$, '22023', NULL,
    'claim: a clock that is not near the database''s is refused');
SELECT throws_ok($$SELECT pgsweep.retention_detach_done(NULL, 1)$$, '22023', NULL, 'done: a NULL owner is refused');
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE owner IS NOT NULL), 0::bigint, 'bad input claimed nothing');

-- claims: the two expired leaves of events, none of logs (DEFAULT)
CREATE TEMP TABLE c1 AS SELECT * FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00');
SELECT is((SELECT array_agg(leaf::regclass::text ORDER BY leaf) FROM c1), ARRAY['rd.events_d1', 'rd.events_d2'],
    'the wholly expired leaves of the parent without DEFAULT are claimed, the young one is not');
SELECT is((SELECT array_agg(DISTINCT action) FROM c1), ARRAY['detach'], 'as detaches');
SELECT is((SELECT row(parent::regclass::text, leaf_schema, leaf_name, parent_schema, parent_name, act_as, reason)::text
             FROM c1 WHERE leaf = 'rd.events_d1'::regclass),
    row('rd.events', 'rd', 'events_d1', 'rd', 'events', current_user, NULL::text)::text,
    'a claim is typed values: the names the runner quotes, the role it acts as (the policy''s owner)');
SELECT is((SELECT rename_to FROM c1 WHERE leaf = 'rd.events_d1'::regclass),
    format('pgsweep_detached_c%s', 'rd.events_d1'::regclass::oid)::name,
    'then the name a rename frees the leaf''s for (the next call drops it)');
SELECT is((SELECT lock_timeout_ms FROM c1 LIMIT 1),
    (extract(epoch FROM pgsweep.setting_interval('retention_lock_timeout')) * 1000)::bigint, 'with retention_lock_timeout');
-- no SQL text travels from the database to the runner: no text column but
-- the policy, the action and the reason, and no value that looks like SQL
SELECT is((SELECT array_agg(a ORDER BY a) FROM unnest((SELECT proargnames FROM pg_proc
            WHERE oid = 'pgsweep.retention_detach_claim(text)'::regprocedure)) a
            WHERE a IN (SELECT unnest(proargnames) FROM pg_proc WHERE oid = 'pgsweep.retention_detach_claim(text)'::regprocedure)
              AND a NOT IN ('p_owner')),
    ARRAY['act_as', 'action', 'leaf', 'leaf_name', 'leaf_schema', 'lock_timeout_ms', 'parent', 'parent_name',
          'parent_schema', 'policy', 'reason', 'rename_to'], 'the claim''s columns: typed values, no statement');
SELECT is((SELECT count(*) FROM c1 WHERE concat_ws(' ', leaf_schema, leaf_name, parent_schema, parent_name, rename_to, reason) ~* '(alter|drop|select) '),
    0::bigint, 'and no value is a statement');
SELECT is((SELECT count(*) FROM pgsweep.retention_detach_claim('other', '2026-01-09 12:00+00')), 0::bigint,
    'another runner gets nothing while the claims hold');
SELECT is((SELECT count(*) FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00')), 2::bigint,
    'the holder gets them again');
SELECT is((SELECT array_agg(leaf_name ORDER BY leaf_name) FROM pgsweep.retention_unit WHERE owner = 'tap'),
    ARRAY['events_d1', 'events_d2'], 'the claims are drop units of the policy''s sweep: one plan for the runner and the pass');

-- the pass leaves claimed leaves to the runner
CREATE FUNCTION pg_temp.run(p_name text, p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_pass bigint;
BEGIN
    v_pass := pgsweep._retention_begin(p_name, 'tap-pass', interval '1 hour', p_now);
    WHILE pgsweep.retention_step(v_pass) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v_pass, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v_pass;
END $$;
SELECT isnt(pg_temp.run('events', '2026-01-09 12:00+00'), NULL, 'a pass runs while the leaves are claimed');
SELECT is((SELECT count(*) FROM ONLY rd.events_d1) + (SELECT count(*) FROM ONLY rd.events_d2), 48::bigint,
    'it neither drops nor sweeps the claimed leaves');

-- done, from the catalog
SELECT is((pgsweep.retention_detach_done('tap', 'rd.events_d2'::regclass)).state, 'attached',
    'a leaf still attached (the DETACH failed) is released');
SELECT is((SELECT count(*) FROM pgsweep.retention_passes WHERE strategy = 'detach_concurrently'), 0::bigint,
    'and nothing is counted');
SELECT is((pgsweep.retention_detach_done('someone', 'rd.events_d1'::regclass)).state, 'other',
    'a claim held by another runner is not touched');
-- what the runner does (DETACH ... CONCURRENTLY, in a transaction here, and the rename)
CREATE TEMP TABLE d1 AS SELECT 'rd.events_d1'::regclass::oid AS oid;
-- the rows are the catalog's estimate: exact after ANALYZE of a small leaf
ANALYZE rd.events_d1;
ALTER TABLE rd.events DETACH PARTITION rd.events_d1;
DO $$ BEGIN EXECUTE format('ALTER TABLE rd.events_d1 RENAME TO %I', 'pgsweep_detached_c' || (SELECT oid FROM d1)); END $$;
SELECT is((pgsweep.retention_detach_done('tap', (SELECT oid FROM d1)))::text, '(detached,24)',
    'a leaf the runner detached and renamed is recorded, with the catalog''s estimate of its rows');
SELECT is((SELECT row(rows_deleted, partitions_dropped, outcome)::text FROM pgsweep.retention_passes
            WHERE strategy = 'detach_concurrently'), '(24,1,drained)', 'its rows count as deleted, in a pass of its own');
SELECT is((pgsweep.retention_detach_done('tap', (SELECT oid FROM d1)))::text, '(detached,)',
    'recorded again (before its DROP): counted once');
UPDATE pgsweep.retention_pass SET started_at = started_at - interval '1 hour'
 WHERE policy = 'events' AND strategy IS DISTINCT FROM 'detach_concurrently';
SELECT ok('events' IN (SELECT pgsweep.retention_due()),
    'the policy''s own pass (an hour ago), not the detach (just now), sets when it is due next');
SELECT is((SELECT array_agg(concat_ws(' ', action, leaf_schema, leaf_name, act_as)) FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00')
            WHERE leaf = (SELECT oid FROM d1)), ARRAY['drop rd pgsweep_detached_c' || (SELECT oid FROM d1) || ' ' || current_user],
    'the renamed table is claimed again, to be dropped (as the policy''s owner)');
DO $$ BEGIN EXECUTE format('DROP TABLE rd.%I', 'pgsweep_detached_c' || (SELECT oid FROM d1)); END $$;
SELECT is((pgsweep.retention_detach_done('tap', (SELECT oid FROM d1)))::text, '(dropped,)', 'then recorded as dropped');
SELECT is((SELECT sum(rows_deleted) FROM pgsweep.retention_passes WHERE strategy = 'detach_concurrently'), 24::numeric,
    'and counted once');
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE leaf = (SELECT oid FROM d1)), 0::bigint, 'its claim is gone');

-- a claim made by hand: a drop unit of the policy's sweep, held by tap
CREATE FUNCTION pg_temp.claim(p_leaf regclass, p_name text) RETURNS void LANGUAGE sql AS $$
    DELETE FROM pgsweep.retention_unit WHERE policy = 'events' AND leaf_name = p_name;
    INSERT INTO pgsweep.retention_unit (policy, sweep_id, unit_no, leaf_schema, leaf_name, kind, leaf, owner, expires_at)
    SELECT 'events', max(s.id), 1000 + (SELECT count(*) FROM pgsweep.retention_unit)::int, 'rd', p_name, 'drop', p_leaf, 'tap',
           now() + interval '30 seconds'
      FROM pgsweep.retention_sweep s WHERE s.policy = 'events';
$$;
-- a claimed leaf that someone else detached (a DBA keeping the table): not
-- counted, never dropped, the claim closed
SELECT pg_temp.claim('rd.events_d2', 'events_d2');
ALTER TABLE rd.events DETACH PARTITION rd.events_d2;
SELECT is((SELECT count(*) FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00') WHERE leaf = 'rd.events_d2'::regclass),
    0::bigint, 'a table someone else detached is not claimed for DROP');
SELECT ok(to_regclass('rd.events_d2') IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE leaf = 'rd.events_d2'::regclass),
    'it is left in place, its claim closed');
SELECT is((SELECT sum(rows_deleted) FROM pgsweep.retention_passes WHERE strategy = 'detach_concurrently'), 24::numeric,
    'and not counted');
SELECT pg_temp.claim('rd.events_d2', 'events_d2');
SELECT is((pgsweep.retention_detach_done('tap', 'rd.events_d2'::regclass)).state, 'taken',
    'recorded after its DETACH failed: taken, not counted');
SELECT is((SELECT sum(rows_deleted) FROM pgsweep.retention_passes WHERE strategy = 'detach_concurrently'), 24::numeric,
    'still 24 rows in all');

-- a table the runner detached that something depends on since (a view on
-- it): its DROP would fail every call; left in place, the claim closed
CREATE TABLE rd.events_d3 PARTITION OF rd.events FOR VALUES FROM ('2026-01-03 00:00+00') TO ('2026-01-04 00:00+00');
CREATE TEMP TABLE d3 AS SELECT 'rd.events_d3'::regclass::oid AS oid;
SELECT pg_temp.claim((SELECT oid FROM d3)::regclass, 'events_d3');
ALTER TABLE rd.events DETACH PARTITION rd.events_d3;
DO $$ BEGIN EXECUTE format('ALTER TABLE rd.events_d3 RENAME TO %I', 'pgsweep_detached_c' || (SELECT oid FROM d3)); END $$;
SELECT is((pgsweep.retention_detach_done('tap', (SELECT oid FROM d3)))::text, '(detached,0)',
    'another leaf detached by the runner; never analyzed, no statistics yet: 0 rows (an estimate)');
DO $$ BEGIN EXECUTE format('CREATE VIEW rd.keep AS SELECT * FROM rd.%I', 'pgsweep_detached_c' || (SELECT oid FROM d3)); END $$;
SELECT is((SELECT count(*) FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00') WHERE leaf = (SELECT oid FROM d3)),
    0::bigint, 'a view on it: not claimed for DROP');
SELECT ok(EXISTS (SELECT 1 FROM pg_class WHERE oid = (SELECT oid FROM d3))
          AND NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE leaf = (SELECT oid FROM d3)),
    'it is left in place, its claim closed');

-- a pass that planned leaves before a runner detached them: one renamed
-- (the runner's way), one left under its name (a rename that failed, a
-- DBA's DETACH); the pass neither fails nor sweeps the detached tables
CREATE TABLE rd.more (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rd.more_m1 PARTITION OF rd.more FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rd.more_m2 PARTITION OF rd.more FOR VALUES FROM ('2026-01-02 00:00+00') TO ('2026-01-03 00:00+00');
CREATE TABLE rd.more_m9 PARTITION OF rd.more FOR VALUES FROM ('2026-01-08 00:00+00') TO ('2026-01-10 00:00+00');
INSERT INTO rd.more SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 47) g;
INSERT INTO rd.more SELECT 100 + g, '2026-01-08 00:00+00'::timestamptz + g * interval '1 hour' FROM generate_series(0, 47) g;
SELECT pgsweep.retention_register('more', 'rd.more', 'at', '1 day');
CREATE TEMP TABLE mp AS SELECT pgsweep._retention_begin('more', 'tap-pass', interval '1 hour', '2026-01-09 12:00+00') AS pass;
SELECT ok(pgsweep.retention_step((SELECT pass FROM mp)), 'the pass plans');
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE policy = 'more' AND kind = 'drop'), 2::bigint,
    'two drop units planned');
CREATE TEMP TABLE m1 AS SELECT 'rd.more_m1'::regclass::oid AS oid;
ALTER TABLE rd.more DETACH PARTITION rd.more_m1;
DO $$ BEGIN EXECUTE format('ALTER TABLE rd.more_m1 RENAME TO %I', 'pgsweep_detached_c' || (SELECT oid FROM m1)); END $$;
ALTER TABLE rd.more DETACH PARTITION rd.more_m2;
SELECT lives_ok($$SELECT pgsweep.retention_step((SELECT pass FROM mp)) FROM generate_series(1, 10)$$,
    'the pass goes on without an error');
SELECT is((SELECT count(*) FROM rd.more_m2) + (SELECT count(*) FROM pg_class WHERE oid = (SELECT oid FROM m1)), 25::bigint,
    'the detached tables are neither swept nor dropped by it');
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE policy = 'more' AND kind IN ('drop', 'detached')), 0::bigint,
    'their units are closed');

-- a leaf owned by another role than the policy's owner (and a parent so
-- owned): not claimed, returned as 'skip' with the reason
CREATE ROLE rd_other;
CREATE TABLE rd.own (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rd.own_o1 PARTITION OF rd.own FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
CREATE TABLE rd.own_o2 PARTITION OF rd.own FOR VALUES FROM ('2026-01-02 00:00+00') TO ('2026-01-03 00:00+00');
ALTER TABLE rd.own_o1 OWNER TO rd_other;
SELECT pgsweep.retention_register('own', 'rd.own', 'at', '1 day');
CREATE TEMP TABLE c2 AS SELECT * FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00') WHERE policy = 'own';
SELECT is((SELECT array_agg(leaf_name || ' ' || action ORDER BY leaf_name) FROM c2), ARRAY['own_o1 skip', 'own_o2 detach']::text[],
    'the other role''s leaf is skipped, the owner''s claimed');
SELECT is((SELECT reason FROM c2 WHERE action = 'skip'),
    format('partition rd.own_o1 is owned by rd_other, not by the policy''s owner %s: the runner acts only on its tables', current_user),
    'the reason names the table and both roles');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE leaf = 'rd.own_o1'::regclass AND owner IS NOT NULL)
          AND (SELECT act_as IS NULL AND rename_to IS NULL FROM c2 WHERE action = 'skip'),
    'a skip is not a claim and names no role to act as');
ALTER TABLE rd.own OWNER TO rd_other;
ALTER TABLE rd.own_o1 OWNER TO current_user;
SELECT is((SELECT array_agg(action || ' ' || split_part(reason, ' ', 1)) FROM pgsweep.retention_detach_claim('tap', '2026-01-09 12:00+00')
            WHERE policy = 'own' AND leaf = 'rd.own_o1'::regclass), ARRAY['skip parent'],
    'a parent owned by another role: its leaves are skipped too');

-- a claim whose runner died, on a leaf still attached: the pass takes the
-- unit over once the claim expires, not before
CREATE TABLE rd.tk (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE rd.tk_1 PARTITION OF rd.tk FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
SELECT pgsweep.retention_register('tk', 'rd.tk', 'at', '1 day');
SELECT is((SELECT array_agg(action) FROM pgsweep.retention_detach_claim('dead', '2026-01-09 12:00+00') WHERE policy = 'tk'),
    ARRAY['detach'], 'a runner claims the leaf');
SELECT pg_temp.run('tk', '2026-01-09 12:00+00');
SELECT ok(to_regclass('rd.tk_1') IS NOT NULL, 'a pass leaves it while the claim holds');
UPDATE pgsweep.retention_unit SET expires_at = now() - interval '1 second' WHERE owner = 'dead';
SELECT pg_temp.run('tk', '2026-01-09 12:00+00');
SELECT ok(to_regclass('rd.tk_1') IS NULL AND NOT EXISTS (SELECT 1 FROM pgsweep.retention_unit WHERE owner = 'dead'),
    'the claim expired: the pass detaches the leaf itself');

-- the rows come from the catalog, never from the caller or a scan
SELECT is(pgsweep._retention_detach_estimate('rd.events_d9'::regclass), 0::bigint, 'no statistics yet: 0');
ANALYZE rd.events_d9;
SELECT is(pgsweep._retention_detach_estimate('rd.events_d9'::regclass), 24::bigint, 'after ANALYZE: the rows');
SELECT is(pgsweep._retention_detach_estimate(0), NULL::bigint, 'no table: NULL');

-- grants: the runner's functions are S_admin's, the clock overload S_owner's
SELECT ok(has_function_privilege('pgsweep_admin', 'pgsweep.retention_detach_claim(text)', 'EXECUTE')
          AND has_function_privilege('pgsweep_admin', 'pgsweep.retention_detach_done(text, oid)', 'EXECUTE'),
    'S_admin may claim and record');
SELECT ok(NOT has_function_privilege('pgsweep_admin', 'pgsweep.retention_detach_claim(text, timestamptz)', 'EXECUTE'),
    'S_admin may not pass its own clock');
SELECT ok(NOT has_function_privilege('pgsweep_worker', 'pgsweep.retention_detach_claim(text)', 'EXECUTE')
          AND NOT has_function_privilege('pgsweep_monitor', 'pgsweep.retention_detach_done(text, oid)', 'EXECUTE'),
    'workers and monitors may not');

SELECT * FROM finish();
ROLLBACK;
