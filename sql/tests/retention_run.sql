-- pgTAP: retention passes. retention_run commits, which a pgTAP transaction
-- cannot; these tests drive the very steps it runs (_retention_begin, _step,
-- _finish) inside the test's transaction, with the clock pinned through p_now.
-- The procedure itself, concurrency and crashes are covered by the Go tests.
BEGIN;
-- Start from no policies; ROLLBACK at the end restores whatever was there.
DELETE FROM pgsweep.retention_policy;
-- The NOTICEs registrations raise (no index) are expected here.
SET LOCAL client_min_messages = warning;
SET LOCAL TimeZone = 'UTC';
SELECT plan(46);

CREATE SCHEMA rt;
CREATE TABLE rt.published ("Id" bigint PRIMARY KEY, "Version" varchar(20), "Name" varchar(200) NOT NULL DEFAULT 'n',
    "Content" text, "Retries" int, "Added" timestamp NOT NULL DEFAULT '2026-01-01', "ExpiresAt" timestamp NULL,
    "StatusName" varchar(50) NOT NULL);
CREATE INDEX ON rt.published ("ExpiresAt", "StatusName");

-- The fixture: named rows at the edges, then 300 more of which every third is
-- eligible. now = 2026-01-10 00:00 UTC, older than 1 day: cutoff 2026-01-09 00:00.
CREATE FUNCTION pg_temp.fill() RETURNS void LANGUAGE sql AS $$
    TRUNCATE rt.published;
    INSERT INTO rt.published ("Id", "ExpiresAt", "StatusName") VALUES
        (1, '2026-01-01', 'Succeeded'),            -- eligible
        (2, '2026-01-08', 'Failed'),               -- eligible
        (3, '2026-01-01', 'Scheduled'),            -- status not listed
        (4, NULL, 'Succeeded'),                    -- no expiry
        (5, '2026-01-09 00:00:00', 'Succeeded'),   -- exactly at the cutoff: kept
        (6, '2026-01-08 23:59:59.999999', 'Succeeded'); -- just before it: eligible
    INSERT INTO rt.published ("Id", "ExpiresAt", "StatusName")
    SELECT i, timestamp '2026-01-01' + i * interval '1 minute',
           CASE WHEN i % 3 = 0 THEN 'Succeeded' ELSE 'Queued' END
      FROM generate_series(100, 399) i;
$$;
CREATE FUNCTION pg_temp.eligible() RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT unnest(ARRAY[1, 2, 6]::bigint[]) UNION ALL SELECT i FROM generate_series(100, 399) i WHERE i % 3 = 0
$$;
CREATE FUNCTION pg_temp.kept() RETURNS SETOF bigint LANGUAGE sql AS $$
    SELECT unnest(ARRAY[3, 4, 5]::bigint[]) UNION ALL SELECT i FROM generate_series(100, 399) i WHERE i % 3 <> 0
$$;
-- One whole pass, as retention_run does it (without the commits).
CREATE FUNCTION pg_temp.run(p_name text, p_now timestamptz, p_budget interval DEFAULT '1 hour',
    p_owner text DEFAULT 'tap') RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
    v := pgsweep._retention_begin(p_name, p_owner, p_budget, p_now);
    IF v IS NULL THEN RETURN NULL; END IF;
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v;
END $$;

SELECT pgsweep.retention_register('cap', 'rt.published', 'ExpiresAt', '1 day', 'StatusName',
    ARRAY['Succeeded', 'Failed'], 7);

-- tid_range, forced (the table is not analyzed; auto would pick it too)
SELECT pg_temp.fill();
SELECT pgsweep.retention_set_strategy('cap', 'tid_range');
SELECT isnt(pg_temp.run('cap', '2026-01-10 00:00:00+00'), NULL, 'tid_range: a pass runs');
SELECT set_eq('SELECT "Id" FROM rt.published', 'SELECT pg_temp.kept()', 'tid_range: exactly the eligible rows are gone');
SELECT results_eq($$SELECT outcome, rows_deleted, strategy FROM pgsweep.retention_passes ORDER BY id DESC LIMIT 1$$,
    $$VALUES ('drained', 103::bigint, 'tid_range')$$, 'tid_range: the pass record counts the deleted rows');
SELECT is((SELECT count(*) FROM pgsweep.retention_unit), 0::bigint, 'tid_range: the sweep left no open unit');
SELECT cmp_ok((SELECT units FROM pgsweep.retention_sweep ORDER BY id DESC LIMIT 1), '>=', 1, 'tid_range: planned units');

-- a tid_range unit's DELETE (built when it runs, never stored) is a Tid
-- Range Scan under the settings _retention_exec_settings pins
CREATE FUNCTION pg_temp.unit_plan(p_sql text) RETURNS text LANGUAGE plpgsql
SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off AS $$
DECLARE v json;
BEGIN
    EXECUTE 'EXPLAIN (FORMAT JSON) ' || p_sql INTO v
      USING '(0,0)'::tid, '(10,0)'::tid, now(), ARRAY['Succeeded'], NULL::text[];
    RETURN v -> 0 -> 'Plan' -> 'Plans' -> 0 ->> 'Node Type';
END $$;
SELECT is(pg_temp.unit_plan(pgsweep._retention_sweep_sql((SELECT p FROM pgsweep.retention_policy p WHERE name = 'cap'), 'tid_range')),
    'Tid Range Scan', 'tid_range: a unit''s DELETE is a Tid Range Scan');

-- keyset, forced: batches of 7 in time order
SELECT pg_temp.fill();
ANALYZE rt.published;
SELECT pgsweep.retention_set_strategy('cap', 'keyset');
SELECT isnt(pg_temp.run('cap', '2026-01-10 00:00:00+00'), NULL, 'keyset: a pass runs');
SELECT set_eq('SELECT "Id" FROM rt.published', 'SELECT pg_temp.kept()', 'keyset: exactly the eligible rows are gone');
SELECT results_eq($$SELECT outcome, rows_deleted, batches, strategy FROM pgsweep.retention_passes ORDER BY id DESC LIMIT 1$$,
    $$VALUES ('drained', 103::bigint, 15, 'keyset')$$, 'keyset: 103 rows in 15 batches of at most 7');

-- auto: few eligible rows and an index that leads with the time column: keyset
SELECT pg_temp.fill();
INSERT INTO rt.published ("Id", "ExpiresAt", "StatusName")
SELECT i, '2030-01-01', 'Succeeded' FROM generate_series(1000, 5000) i;
ANALYZE rt.published;
SELECT pgsweep.retention_set_strategy('cap', 'auto');
SELECT pg_temp.run('cap', '2026-01-10 00:00:00+00');
SELECT is((SELECT strategy FROM pgsweep.retention_sweep ORDER BY id DESC LIMIT 1), 'keyset',
    'auto: a sparse backlog with an index is walked by keyset');
SELECT is((SELECT count(*) FROM rt.published WHERE "Id" IN (SELECT pg_temp.eligible())), 0::bigint, 'auto: all eligible gone');
-- auto: most rows eligible: tid_range
SELECT pg_temp.fill();
DELETE FROM rt.published WHERE "Id" >= 1000;
UPDATE rt.published SET "StatusName" = 'Succeeded' WHERE "Id" >= 100;
ANALYZE rt.published;
SELECT pg_temp.run('cap', '2026-01-10 00:00:00+00');
SELECT is((SELECT strategy FROM pgsweep.retention_sweep ORDER BY id DESC LIMIT 1), 'tid_range',
    'auto: a dense backlog is walked by TID ranges');
SELECT is((SELECT count(*) FROM rt.published), 3::bigint, 'auto: only the three ineligible named rows are left');

-- A row that changes after the sweep was planned is judged at deletion time.
SELECT pgsweep.retention_set_strategy('cap', 'tid_range');
SELECT pg_temp.fill();
SELECT pgsweep._retention_begin('cap', 'tap', '1 hour', '2026-01-10 00:00:00+00') AS pass \gset
SELECT ok(pgsweep.retention_step(:pass), 'the first step plans the sweep');
SELECT is((SELECT rows_deleted FROM pgsweep.retention_pass WHERE id = :pass), 0::bigint, 'planning deleted nothing');
UPDATE rt.published SET "StatusName" = 'Scheduled', "ExpiresAt" = NULL WHERE "Id" IN (1, 102);
UPDATE rt.published SET "ExpiresAt" = '2026-01-09 12:00' WHERE "Id" = 2;
SELECT pgsweep.retention_step(:pass) FROM generate_series(1, 100);
SELECT pgsweep._retention_finish(:pass, NULL, NULL);
SELECT pgsweep._retention_unlock('cap');
SELECT set_eq('SELECT "Id" FROM rt.published',
    'SELECT pg_temp.kept() UNION ALL VALUES (1::bigint), (2), (102)', 're-queued or re-timed rows survive');

-- the budget: a zero budget gets exactly one batch; the next pass continues the sweep
SELECT pg_temp.fill();
SELECT pg_temp.run('cap', '2026-01-10 00:00:00+00', '0 seconds');
SELECT results_eq($$SELECT outcome, batches FROM pgsweep.retention_passes ORDER BY id DESC LIMIT 1$$,
    $$VALUES ('budget', 1)$$, 'a zero budget runs one batch');
SELECT cmp_ok((SELECT count(*) FROM pgsweep.retention_unit), '>', 0::bigint, 'the sweep stays open');
SELECT pg_temp.run('cap', '2026-01-10 00:00:00+00');
SELECT is((SELECT planned_sweep FROM pgsweep.retention_pass ORDER BY id DESC LIMIT 1), NULL,
    'the next pass joined the open sweep');
SELECT set_eq('SELECT "Id" FROM rt.published', 'SELECT pg_temp.kept()', 'and finished it');

-- the view shows the last pass
SELECT results_eq($$SELECT last_outcome, last_owner, last_strategy, open_units FROM pgsweep.retention_policies WHERE name = 'cap'$$,
    $$VALUES ('drained', 'tap', 'tid_range', 0::bigint)$$, 'retention_policies shows the last pass');
SELECT ok((SELECT last_elapsed >= interval '0' AND last_batches > 0 FROM pgsweep.retention_policies WHERE name = 'cap'),
    'retention_policies shows batches and elapsed time');

-- exclusive: a live lease held by another owner means busy, nothing done
SELECT pg_temp.fill();
SELECT pgsweep._lease_acquire('retention:cap', 'someone-else', '1 hour', NULL);
SELECT is(pg_temp.run('cap', '2026-01-10 00:00:00+00'), NULL, 'exclusive: busy while another owner holds the lease');
SELECT is((SELECT count(*) FROM rt.published), 306::bigint, 'exclusive: a busy cleaner deleted nothing');
SELECT ok(pgsweep._lease_release('retention:cap', 'someone-else', NULL), 'the other owner releases');
SELECT isnt(pg_temp.run('cap', '2026-01-10 00:00:00+00', p_owner => 'tap2'), NULL, 'then the policy runs');
SELECT results_eq($$SELECT owner, live FROM pgsweep.leases WHERE name = 'retention:cap'$$,
    $$VALUES (NULL::text, false)$$, 'the pass released its lease');
SELECT is((SELECT lease_token FROM pgsweep.retention_pass ORDER BY id DESC LIMIT 1),
    (SELECT token FROM pgsweep.lease WHERE name = 'retention:cap'), 'the pass recorded its fencing token');

-- p_older_than NULL keeps everything
SELECT pg_temp.fill();
SELECT pgsweep.retention_register('cap', 'rt.published', 'ExpiresAt', NULL, 'StatusName', ARRAY['Succeeded', 'Failed'], 7);
SELECT is(pg_temp.run('cap', (now() + interval '5 years')), NULL, 'NULL retention: nothing to run');
SELECT is((SELECT count(*) FROM rt.published), 306::bigint, 'NULL retention keeps every row');
SELECT is((SELECT count(*) FROM pgsweep.retention_due(now() + interval '5 years')), 0::bigint, 'NULL retention is never due');

-- a timestamp column read in the policy's time zone: New York is UTC-5 in
-- January, so the cutoff is 2026-01-08 19:00 local
SELECT pgsweep.retention_register('cap', 'rt.published', 'ExpiresAt', '1 day', 'StatusName', ARRAY['Succeeded'], 7);
SELECT pgsweep.retention_set_time_zone('cap', 'America/New_York');
TRUNCATE rt.published;
INSERT INTO rt.published ("Id", "ExpiresAt", "StatusName") VALUES
    (1, '2026-01-08 18:59:59', 'Succeeded'), (2, '2026-01-08 19:00:00', 'Succeeded'), (3, '2026-01-08 23:00', 'Succeeded');
SELECT pg_temp.run('cap', '2026-01-10 00:00:00+00');
SELECT set_eq('SELECT "Id" FROM rt.published', 'VALUES (2::bigint), (3)', 'timestamp compared in the policy''s time zone');

-- timestamptz column with a filter (how built-in per-queue policies work)
CREATE TABLE rt.events (id bigint PRIMARY KEY, queue text NOT NULL, at timestamptz NOT NULL);
CREATE INDEX ON rt.events (queue, at);
INSERT INTO rt.events VALUES (1, 'a', '2026-01-01'), (2, 'b', '2026-01-01'), (3, 'a', '2026-01-09 12:00'),
    (4, 'a', '2026-01-08 23:59:59+00');
SELECT pgsweep.retention_register('events.a', 'rt.events', 'at', '1 day', p_mode => 'parallel');
SELECT pgsweep.retention_set_filter('events.a', 'queue', ARRAY['a']);
SELECT pg_temp.run('events.a', '2026-01-10 00:00:00+00');
SELECT set_eq('SELECT id FROM rt.events', 'VALUES (2::bigint), (3)', 'filter: only queue a''s old rows are gone');

-- date column: a day goes once all of it is older than the cutoff
CREATE TABLE rt.daily (id int, day date);
INSERT INTO rt.daily VALUES (1, '2025-12-10'), (2, '2025-12-11'), (3, '2025-12-12');
SELECT pgsweep.retention_register('daily', 'rt.daily', 'day', '30 days');
SELECT pg_temp.run('daily', '2026-01-10 00:00:00+00');
SELECT set_eq('SELECT id FROM rt.daily', 'VALUES (2), (3)', 'date column: 2025-12-10 is gone, 2025-12-11 kept');

-- identifiers crafted to inject SQL are only ever quoted
CREATE TABLE rt.victim (x int);
CREATE TABLE rt."pub""; DROP TABLE rt.victim; --" ("at""; DROP TABLE rt.victim; --" timestamptz,
    "st'); DELETE FROM rt.victim; --" text, "q%I%s" text);
INSERT INTO rt.victim VALUES (1);
INSERT INTO rt."pub""; DROP TABLE rt.victim; --" VALUES ('2020-01-01', 'done', 'x'), ('2020-01-01', 'open', 'x'),
    ('2030-01-01', 'done', 'x'), ('2020-01-01', 'done', 'y');
SELECT lives_ok($$SELECT pgsweep.retention_register('evil', 'rt."pub""; DROP TABLE rt.victim; --"',
    'at"; DROP TABLE rt.victim; --', '1 day', 'st''); DELETE FROM rt.victim; --', ARRAY['done'])$$,
    'crafted names register');
SELECT lives_ok($$SELECT pgsweep.retention_set_filter('evil', 'q%I%s', ARRAY['x'])$$, 'a crafted filter column too');
SELECT pg_temp.run('evil', '2026-01-10 00:00:00+00');
SELECT is((SELECT count(*) FROM rt."pub""; DROP TABLE rt.victim; --"), 3::bigint, 'crafted names: the one eligible row is gone');
SELECT is((SELECT count(*) FROM rt.victim), 1::bigint, 'crafted names: nothing injected');
SELECT pgsweep.retention_set_strategy('evil', 'keyset');
INSERT INTO rt."pub""; DROP TABLE rt.victim; --" VALUES ('2020-01-01', 'done', 'x');
SELECT pg_temp.run('evil', '2026-01-10 00:00:00+00');
SELECT is((SELECT count(*) FROM rt."pub""; DROP TABLE rt.victim; --"), 3::bigint, 'crafted names, keyset: row gone');
SELECT is((SELECT count(*) FROM rt.victim), 1::bigint, 'crafted names, keyset: nothing injected');

-- due policies
SELECT ok('daily' = ANY (ARRAY(SELECT pgsweep.retention_due(now() + interval '2 minutes'))), 'a policy is due after its interval');
SELECT ok(NOT 'daily' = ANY (ARRAY(SELECT pgsweep.retention_due(now()))), 'and not right after its pass');

-- bad input and misuse
SELECT throws_ok($$SELECT pgsweep._retention_begin('nosuch', NULL, '1 minute', NULL)$$, '22023',
    'p_name must name a registered retention policy, got ''nosuch''', 'run of an unknown policy');
SELECT throws_ok($$SELECT pgsweep._retention_begin('cap', NULL, '2 days', NULL)$$, '22023',
    'p_budget must be between 0 seconds and 1 day, got 2 days', 'budget out of range');
SELECT throws_ok($$SELECT pgsweep._retention_begin('cap', '', '1 minute', NULL)$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'empty owner');
SELECT throws_ok($$CALL pgsweep.retention_run('cap')$$, '2D000', NULL, 'retention_run refuses to run inside a transaction block');

SELECT * FROM finish();
ROLLBACK;
