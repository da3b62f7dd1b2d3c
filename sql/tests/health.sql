-- pgTAP: health_install's findings about the install's own state, from
-- rows written directly (snapshots, passes, runs). The server's findings
-- (sessions, prepared transactions, slots, lock waits) need other sessions:
-- health_test.go creates each for real. And who may call what.
BEGIN;
SELECT plan(26);

SELECT pgsweep.setting_reset(name) FROM pgsweep.setting;
DELETE FROM pgsweep.maintain_snapshot;
DELETE FROM pgsweep.maintain_pass;
UPDATE pgsweep.maintain_state SET last_status = NULL;
DELETE FROM pgsweep.retention_policy;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_dead; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
SELECT pgsweep.queue_create('hq');
SELECT pgsweep.queue_create('hp');
CREATE TEMP TABLE f AS SELECT * FROM pgsweep.health_install();

SELECT results_eq($$SELECT severity, object FROM f WHERE kind = 'maintenance_not_running'$$,
    $$VALUES ('critical'::text, 'maintain'::text)$$, 'no pass ever: maintenance_not_running, critical');
SELECT is((SELECT detail FROM f WHERE kind = 'maintenance_not_running'), 'no maintenance pass has finished (in the kept history)', 'its detail');
SELECT is((SELECT count(*)::int FROM f WHERE kind IN ('queue_behind', 'blocked_lanes', 'dead_letters_growing')), 0,
    'no snapshot, no queue finding');

-- a pass that finished just now; one that finished long ago
INSERT INTO pgsweep.maintain_pass (owner, started_at, finished_at, budget) VALUES ('a', clock_timestamp(), clock_timestamp(), '30 seconds');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'maintenance_not_running'), 0, 'a recent pass: none');
INSERT INTO pgsweep.maintain_pass (owner, started_at, finished_at, budget) VALUES ('b', clock_timestamp() - interval '1 hour', clock_timestamp() - interval '1 hour', '30 seconds');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'maintenance_not_running'), 1,
    'the newest pass (by id) finished 1 hour ago, more than health_maintain_intervals (30) x runner_interval (10 s)');
SELECT matches((SELECT detail FROM pgsweep.health_install() WHERE kind = 'maintenance_not_running'),
    '^the last pass finished 01:00:0[0-9] ago \(more than 30 runner intervals\)$', 'its detail says how long ago');
SELECT pgsweep.setting_set('health_maintain_intervals', '1000');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'maintenance_not_running'), 0, 'the threshold is the setting');

-- a part whose last run failed
INSERT INTO pgsweep.maintain_run (pass_id, part, owner, token, status, started_at, finished_at, error)
VALUES ((SELECT max(id) FROM pgsweep.maintain_pass), 'recovery', 'b', 1, 'failed', clock_timestamp(), clock_timestamp(), 'recovery exploded');
UPDATE pgsweep.maintain_state SET last_status = 'failed' WHERE part = 'recovery';
SELECT results_eq($$SELECT severity, object, detail FROM pgsweep.health_install() WHERE kind = 'maintenance_failing'$$,
    $$VALUES ('warning'::text, 'part recovery'::text, 'its last run failed: recovery exploded'::text)$$, 'maintenance_failing names the part and its error');

-- queues, from their latest snapshot: hq behind with a blocked lane, 3 dead letters lately
INSERT INTO pgsweep.maintain_snapshot (queue, taken_at, pending, due, in_flight, failed, dead, processed, oldest_due_age, lanes, blocked_lanes,
                                    dead_lettered, failures_live, retries_live) VALUES
    ('hq', clock_timestamp() - interval '2 hours', 0, 0, 0, 0, 0, 0, NULL, 0, 0, 50, 0, 0),
    ('hq', clock_timestamp() - interval '20 seconds', 5, 4, 1, 0, 2, 0, interval '10 minutes', 3, 1, 2, 0, 0),
    ('hq', clock_timestamp() - interval '10 seconds', 5, 4, 1, 0, 3, 0, interval '10 minutes 10 seconds', 3, 2, 1, 0, 0),
    ('hp', clock_timestamp() - interval '10 seconds', 1, 1, 0, 0, 0, 0, interval '1 second', 0, 0, 0, 0, 0);
SELECT results_eq($$SELECT severity, object FROM pgsweep.health_install() WHERE kind = 'queue_behind'$$,
    $$VALUES ('warning'::text, 'queue hq'::text)$$, 'queue_behind: hq (10 minutes > health_due_age 5 minutes), not hp (1 second)');
SELECT matches((SELECT detail FROM pgsweep.health_install() WHERE kind = 'queue_behind'),
    '^its oldest due message has waited 00:10:10 \(4 due, 1 in flight; snapshot of ', 'its detail: from the latest snapshot');
SELECT results_eq($$SELECT object, detail FROM pgsweep.health_install() WHERE kind = 'dead_letters_growing'$$,
    $$VALUES ('queue hq'::text, '3 message(s) dead-lettered in the last 15 minutes (3 dead letters)'::text)$$,
    'dead_letters_growing sums the snapshots of health_window (not the older one)');
SELECT pgsweep.setting_set('health_dead_letters', '4');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'dead_letters_growing'), 0, 'below health_dead_letters: none');
SELECT matches((SELECT detail FROM pgsweep.health_install() WHERE kind = 'blocked_lanes' AND object = 'queue hq'),
    '^2 lane\(s\) stopped by a dead letter', 'blocked_lanes: from the latest snapshot');
UPDATE pgsweep.queue SET paused = true WHERE name = 'hq';
SELECT is((SELECT advice FROM pgsweep.health_install() WHERE kind = 'queue_behind'), 'The queue is paused: queue_resume resumes its claims.',
    'a paused queue behind is told to resume');

-- retention: a policy whose last pass failed, one that stopped on its budget
CREATE TABLE public.health_events (id bigint PRIMARY KEY, at timestamptz NOT NULL);
SELECT pgsweep.retention_register('he', 'public.health_events'::regclass, 'at', '1 day');
SELECT pgsweep.retention_register('hb', 'public.health_events'::regclass, 'at', '2 days');
INSERT INTO pgsweep.retention_pass (policy, owner, mode, pid, started_at, deadline, outcome, error) VALUES
    ('he', 'o', 'exclusive', 1, clock_timestamp() - interval '1 minute', clock_timestamp(), 'drained', NULL),
    ('he', 'o', 'exclusive', 1, clock_timestamp(), clock_timestamp(), 'error', 'permission denied for table health_events'),
    ('hb', 'o', 'exclusive', 1, clock_timestamp(), clock_timestamp(), 'budget', NULL);
SELECT results_eq($$SELECT severity, kind, object FROM pgsweep.health_install() WHERE kind LIKE 'retention%' ORDER BY object$$,
    $$VALUES ('info'::text, 'retention_behind'::text, 'policy hb'::text), ('warning', 'retention_failing', 'policy he')$$,
    'retention: the last pass of each policy');
SELECT matches((SELECT detail FROM pgsweep.health_install() WHERE kind = 'retention_failing'),
    'failed: permission denied for table health_events$', 'with its error');

-- a registered table with autovacuum off is found like the install's own
ALTER TABLE public.health_events SET (autovacuum_enabled = false);
SELECT results_eq($$SELECT object, advice FROM pgsweep.health_install() WHERE kind = 'autovacuum_disabled'$$,
    $$VALUES ('table public.health_events'::text, 'ALTER TABLE public.health_events RESET (autovacuum_enabled)'::text)$$,
    'autovacuum_disabled on a registered table');

-- a policy's table in a schema the owner role cannot use (retention
-- deletes as the policy's owner, so the install's owner needs no USAGE
-- there): health_install finds it through the catalogs, and does not fail
CREATE ROLE health_app NOLOGIN;
CREATE SCHEMA health_private AUTHORIZATION health_app;
CREATE TABLE health_private.events (id bigint PRIMARY KEY, at timestamptz NOT NULL) WITH (autovacuum_enabled = false);
ALTER TABLE health_private.events OWNER TO health_app;
SELECT pgsweep.retention_register('hpriv', 'health_private.events'::regclass, 'at', '1 day');
REVOKE ALL ON SCHEMA health_private FROM PUBLIC;
SELECT lives_ok($$SELECT * FROM pgsweep.health_install()$$, 'a policy table in a schema the owner cannot use: health_install still answers');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'autovacuum_disabled' AND object = 'table health_private.events'), 1,
    'and reports that table');

-- health() caps each kind at health_max_per_kind: 25 queues behind
-- become 3 rows and one row '22 more' of the same kind
INSERT INTO pgsweep.queue (name, kind) SELECT 'cap' || g, 'outbox' FROM generate_series(1, 25) g;
INSERT INTO pgsweep.maintain_snapshot (queue, taken_at, pending, due, in_flight, failed, dead, processed, oldest_due_age, lanes, blocked_lanes,
                                    failures_live, retries_live)
SELECT 'cap' || g, clock_timestamp() - interval '5 seconds', 1, 1, 0, 0, 0, 0, interval '1 hour', 0, 0, 0, 0 FROM generate_series(1, 25) g;
SELECT pgsweep.setting_set('health_max_per_kind', '3');
SELECT is((SELECT count(*)::int FROM pgsweep.health_install() WHERE kind = 'queue_behind'), 26, 'health_install: every queue behind (hq and cap1..25)');
SELECT results_eq($$SELECT severity, object FROM pgsweep.health() WHERE kind = 'queue_behind'$$,
    $$VALUES ('warning'::text, 'queue cap1'::text), ('warning', 'queue cap10'), ('warning', 'queue cap11'), ('warning', '23 more')$$,
    'health(): the first health_max_per_kind of a kind, then one row for the rest');
SELECT is((SELECT detail FROM pgsweep.health() WHERE kind = 'queue_behind' AND object = '23 more'),
    '23 more finding(s) of this kind are not shown (health_max_per_kind = 3)', 'that row says so');
SELECT is((SELECT count(*)::int FROM pgsweep.health() WHERE kind = 'retention_failing'), 1, 'other kinds are not capped by it');
SELECT pgsweep.setting_reset('health_max_per_kind');

-- who may call what
SELECT ok(has_function_privilege('pgsweep_monitor', 'pgsweep.health()', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.health_server()', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.health_install()', 'EXECUTE'), 'the monitor may call health, health_server and health_install');
SELECT ok(NOT has_function_privilege('pgsweep_worker', 'pgsweep.health()', 'EXECUTE'), 'a worker may not');
SELECT is((SELECT string_agg(proname || ' ' || prosecdef, ', ' ORDER BY proname) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND proname IN ('health', 'health_server', 'health_install')),
    'health false, health_install true, health_server false',
    'health and health_server run as their caller (the server''s sessions with its eyes), health_install as the owner');

SELECT * FROM finish();
ROLLBACK;
