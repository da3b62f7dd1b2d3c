-- pgTAP: retention policies: registration, validation, options.
BEGIN;
-- Start from no policies; ROLLBACK at the end restores whatever was there.
DELETE FROM pgsweep.retention_policy;
-- The NOTICEs registrations raise (no index) are expected here.
SET LOCAL client_min_messages = warning;
SELECT plan(69);

-- Fixtures: a CAP-shaped table, a timestamptz table without a usable index,
-- and tables of the wrong kinds.
CREATE SCHEMA rt;
CREATE TABLE rt.published ("Id" bigint PRIMARY KEY, "Version" varchar(20), "Name" varchar(200) NOT NULL,
    "Content" text, "Retries" int, "Added" timestamp NOT NULL, "ExpiresAt" timestamp NULL,
    "StatusName" varchar(50) NOT NULL);
CREATE INDEX ON rt.published ("ExpiresAt", "StatusName");
CREATE TABLE rt.events (id bigint PRIMARY KEY, at timestamptz NOT NULL, kind int, queue text);
CREATE INDEX ON rt.events (queue, at);
CREATE TABLE rt.bare (id bigint, at timestamptz);
CREATE VIEW rt.v AS SELECT * FROM rt.events;
CREATE DOMAIN rt.status AS text CHECK (VALUE <> '');
CREATE TABLE rt.domained (id bigint, day date, st rt.status);
CREATE INDEX ON rt.domained (st, day);

SELECT has_table('pgsweep', 'retention_policy', 'retention_policy table exists');
SELECT has_view('pgsweep', 'retention_policies', 'retention_policies view exists');
SELECT has_view('pgsweep', 'retention_passes', 'retention_passes view exists');
SELECT has_function('pgsweep', 'retention_register',
    ARRAY['text', 'regclass', 'text', 'interval', 'text', 'text[]', 'integer', 'text', 'interval'],
    'retention_register has the contract signature');
SELECT function_returns('pgsweep', 'retention_register',
    ARRAY['text', 'regclass', 'text', 'interval', 'text', 'text[]', 'integer', 'text', 'interval'], 'void',
    'retention_register returns void');
SELECT has_function('pgsweep', 'retention_unregister', ARRAY['text'], 'retention_unregister(text)');
SELECT function_returns('pgsweep', 'retention_unregister', ARRAY['text'], 'boolean', 'retention_unregister returns boolean');
SELECT is((SELECT prokind::text FROM pg_proc WHERE oid = 'pgsweep.retention_run(text, text, interval)'::regprocedure),
    'p', 'retention_run(text, text, interval) is a procedure');
SELECT is((SELECT pg_get_expr(proargdefaults, 0) FROM pg_proc
            WHERE oid = 'pgsweep.retention_run(text, text, interval)'::regprocedure),
    'NULL::text, ''00:00:30''::interval', 'retention_run defaults: owner NULL, budget 30 seconds');
-- A procedure that commits cannot pin search_path; it must then call only
-- schema-qualified helpers (which pin theirs).
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND prokind = 'p'
             AND prosrc ~ '(^|[^."])_retention_'), 0::bigint,
    'procedures call helpers only schema-qualified');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND prokind = 'p'
             AND (prosrc ~* 'retention_(policy|pass|unit|sweep)\M' OR prosrc ~* '\m(delete|update|insert)\M')),
    0::bigint, 'procedures touch no table directly');

-- register with defaults
SELECT lives_ok($$SELECT pgsweep.retention_register('cap.published', 'rt.published'::regclass, 'ExpiresAt', '1 day',
    'StatusName', ARRAY['Succeeded', 'Failed'])$$, 'register CAP''s published table');
SELECT results_eq(
    $$SELECT table_schema::text, table_name::text, time_column::text, time_type, older_than, status_column::text,
             statuses, batch_size, mode, run_interval, time_zone, lease_ttl, strategy
        FROM pgsweep.retention_policy WHERE name = 'cap.published'$$,
    $$VALUES ('rt', 'published', 'ExpiresAt', 'timestamp', interval '1 day', 'StatusName',
              ARRAY['Succeeded', 'Failed'], 1000, 'exclusive', interval '1 minute', NULL::text,
              interval '30 seconds', 'auto')$$,
    'the policy is stored with the contract''s defaults');
SELECT results_eq(
    $$SELECT name, table_name, time_zone, open_units, last_started_at FROM pgsweep.retention_policies$$,
    $$VALUES ('cap.published', 'rt.published', current_setting('TimeZone'), 0::bigint, NULL::timestamptz)$$,
    'the view shows the policy, the effective time zone and no run yet');
SELECT is(pgsweep._retention_index('rt.published', 'ExpiresAt', 'StatusName', NULL)::text,
    'rt."published_ExpiresAt_StatusName_idx"', 'the ("ExpiresAt", "StatusName") index serves the CAP policy');
SELECT is(pgsweep._retention_index('rt.bare', 'at', NULL, NULL), NULL, 'no index serves a table without one');
SELECT is(pgsweep._retention_index('rt.events', 'at', NULL, NULL), NULL,
    'an index behind an unconstrained column does not serve');
SELECT is(pgsweep._retention_index('rt.events', 'at', NULL, 'queue')::text, 'rt.events_queue_at_idx',
    'an index behind the filter column serves');
SELECT is(pgsweep._retention_index('rt.domained', 'day', 'st', NULL)::text, 'rt.domained_st_day_idx',
    'an index behind the status column serves');

-- the string overload, and the other column types
SELECT lives_ok($$SELECT pgsweep.retention_register('events', 'rt.events', 'at', '7 days', p_batch_size => 10000,
    p_mode => 'parallel', p_interval => '10 seconds')$$, 'register by name, timestamptz column, parallel');
SELECT results_eq($$SELECT time_type, batch_size, mode, statuses FROM pgsweep.retention_policy WHERE name = 'events'$$,
    $$VALUES ('timestamptz', 10000, 'parallel', NULL::text[])$$, 'timestamptz policy stored');
SELECT lives_ok($$SELECT pgsweep.retention_register('days', 'rt.domained', 'day', '30 days', 'st', ARRAY['done'],
    1, 'exclusive', '1 hour')$$, 'date column and a domain over text as status');
SELECT is((SELECT time_type FROM pgsweep.retention_policy WHERE name = 'days'), 'date', 'date policy stored');
SELECT lives_ok($$SELECT pgsweep.retention_register('forever', 'rt.bare', 'at', NULL)$$, 'NULL p_older_than is accepted');

-- re-registering: same definition keeps the open sweep, a change drops it
INSERT INTO pgsweep.retention_sweep (id, policy, strategy, cutoff, planned_at, planned_by, units)
VALUES (-1, 'cap.published', 'tid_range', now(), now(), 'tap', 1);
INSERT INTO pgsweep.retention_unit (policy, sweep_id, unit_no, block_lo) VALUES ('cap.published', -1, 1, 0);
SELECT pgsweep.retention_register('cap.published', 'rt.published', 'ExpiresAt', '1 day', 'StatusName',
    ARRAY['Succeeded', 'Failed']);
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE policy = 'cap.published'), 1::bigint,
    'the same definition again keeps the open sweep');
SELECT pgsweep.retention_register('cap.published', 'rt.published', 'ExpiresAt', '2 days', 'StatusName',
    ARRAY['Succeeded', 'Failed']);
SELECT is((SELECT count(*) FROM pgsweep.retention_unit WHERE policy = 'cap.published'), 0::bigint,
    'a changed definition drops the open sweep');
SELECT is((SELECT older_than FROM pgsweep.retention_policy WHERE name = 'cap.published'), interval '2 days',
    're-register updates the policy');

-- options
SELECT lives_ok($$SELECT pgsweep.retention_set_filter('events', 'queue', ARRAY['orders'])$$, 'set a filter');
SELECT results_eq($$SELECT filter_column::text, filter_values FROM pgsweep.retention_policy WHERE name = 'events'$$,
    $$VALUES ('queue', ARRAY['orders'])$$, 'filter stored');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('cap.published', 'Europe/Berlin')$$, 'set a time zone');
SELECT is((SELECT time_zone FROM pgsweep.retention_policies WHERE name = 'cap.published'), 'Europe/Berlin',
    'time zone shown');
SELECT lives_ok($$SELECT pgsweep.retention_set_strategy('cap.published', 'keyset')$$, 'force a strategy');
SELECT lives_ok($$SELECT pgsweep.retention_set_lease_ttl('cap.published', '5 seconds')$$, 'set the lease TTL');
SELECT results_eq($$SELECT strategy, lease_ttl FROM pgsweep.retention_policy WHERE name = 'cap.published'$$,
    $$VALUES ('keyset', interval '5 seconds')$$, 'strategy and TTL stored');

-- bad input: 22023 naming the argument, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.retention_policy;
SELECT throws_ok($$SELECT pgsweep.retention_register(NULL, 'rt.published', 'ExpiresAt', '1 day')$$, '22023',
    'p_name must be a non-empty string of at most 190 characters, got NULL', 'NULL name');
SELECT throws_ok($$SELECT pgsweep.retention_register(repeat('n', 191), 'rt.published', 'ExpiresAt', '1 day')$$, '22023',
    'p_name must be a non-empty string of at most 190 characters, got 191 characters', 'name too long for its lease');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.nosuch', 'ExpiresAt', '1 day')$$, '22023',
    'p_table must be an existing table, got ''rt.nosuch''', 'missing table');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'a.b.c.d', 'ExpiresAt', '1 day')$$, '22023',
    'p_table must be an existing table, got ''a.b.c.d''', 'malformed table name');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', NULL::regclass, 'ExpiresAt', '1 day')$$, '22023',
    'p_table must be an existing table, got NULL', 'NULL table');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.v', 'at', '1 day')$$, '22023',
    'p_table must be an ordinary or partitioned, non-temporary table, got rt.v (relkind v)', 'a view');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'Expires', '1 day')$$, '22023',
    'p_time_column must name a column of rt.published, got "Expires"', 'missing time column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'expiresat', '1 day')$$, '22023',
    'p_time_column must name a column of rt.published, got expiresat', 'column names are exact, not folded');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'Retries', '1 day')$$, '22023',
    'p_time_column must be of type timestamptz, timestamp or date, got "Retries" of type integer', 'integer time column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', NULL, '1 day')$$, '22023',
    'p_time_column must be a non-empty string of at most 63 characters, got NULL', 'NULL time column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '101 years')$$, '22023',
    'p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got 101 years', 'age beyond 100 years');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '200000 years')$$, '22023',
    'p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got 200000 years', 'an age no run could use');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '-1 day')$$, '22023',
    'p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got -1 day', 'negative age');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', 'Status', ARRAY['a'])$$,
    '22023', 'p_status_column must name a column of rt.published, got "Status"', 'missing status column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', 'Retries', ARRAY['1'])$$,
    '22023', 'p_status_column must be text-like (text, varchar, char), got "Retries" of type integer', 'integer status column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', 'StatusName', NULL)$$,
    '22023', 'p_statuses must be a non-empty array without NULLs when p_status_column is given, got NULL', 'no statuses');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', 'StatusName', '{}')$$,
    '22023', 'p_statuses must be a non-empty array without NULLs when p_status_column is given, got {}', 'empty statuses');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', 'StatusName', ARRAY['a', NULL])$$,
    '22023', 'p_statuses must be a non-empty array without NULLs when p_status_column is given, got {a,NULL}', 'NULL status');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', NULL, ARRAY['a'])$$,
    '22023', 'p_statuses needs p_status_column, got statuses {a} and no status column', 'statuses without column');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_batch_size => 0)$$,
    '22023', 'p_batch_size must be between 1 and 10000, got 0', 'batch 0');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_batch_size => 10001)$$,
    '22023', 'p_batch_size must be between 1 and 10000, got 10001', 'batch 10001');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_mode => 'shared')$$,
    '22023', 'p_mode must be ''exclusive'' or ''parallel'', got ''shared''', 'unknown mode');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_mode => NULL)$$,
    '22023', 'p_mode must be ''exclusive'' or ''parallel'', got NULL', 'NULL mode');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_interval => '0 seconds')$$,
    '22023', 'p_interval must be greater than 0, got 0 seconds', 'zero interval');
SELECT throws_ok($$SELECT pgsweep.retention_register('x', 'rt.published', 'ExpiresAt', '1 day', p_interval => NULL)$$,
    '22023', 'p_interval must be greater than 0, got NULL', 'NULL interval');
SELECT throws_ok($$SELECT pgsweep.retention_set_filter('nosuch', 'queue', ARRAY['a'])$$, '22023',
    'p_name must name a registered retention policy, got ''nosuch''', 'filter on an unknown policy');
SELECT throws_ok($$SELECT pgsweep.retention_set_filter('events', 'nosuch', ARRAY['a'])$$, '22023',
    'p_column must name a column of rt.events, got nosuch', 'filter on a missing column');
SELECT throws_ok($$SELECT pgsweep.retention_set_filter('events', 'kind', ARRAY['x'])$$, '22023',
    'p_values must be valid values of kind (type integer), got {x}', 'filter values of the wrong type');
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('cap.published', 'Mars/Olympus')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''Mars/Olympus'', which is not a time zone', 'unknown time zone');
SELECT throws_ok($$SELECT pgsweep.retention_set_strategy('cap.published', 'fast')$$, '22023',
    'p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got ''fast''', 'unknown strategy');
SELECT throws_ok($$SELECT pgsweep.retention_set_lease_ttl('cap.published', '2 hours')$$, '22023',
    'p_ttl must be between 1 second and 1 hour, got 2 hours', 'TTL out of range');
SELECT set_eq('SELECT * FROM pgsweep.retention_policy', 'SELECT * FROM before', 'failed calls changed nothing');
-- An expiry column (CAP's ExpiresAt) is registered with age 0: rows whose
-- expiry has passed.
SELECT lives_ok($$SELECT pgsweep.retention_register('expiry', 'rt.published', 'ExpiresAt', '0 seconds')$$,
    'zero age: an expiry column');

-- unregister
SELECT ok(pgsweep.retention_unregister('forever'), 'unregister an existing policy');
SELECT ok(NOT pgsweep.retention_unregister('forever'), 'unregister again returns false');

SELECT * FROM finish();
ROLLBACK;
