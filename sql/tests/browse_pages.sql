-- pgTAP: the keyset pages of the control room (browse_lanes.sql,
-- browse_passes.sql, lease.sql's browse_leases): exact pages, blocked lanes
-- first; pages that neither repeat nor skip a row that stays while sends,
-- claims and completions happen between them; may_skip only for a caller
-- that may skip (the monitor may not); and the cost of a page, which reads
-- the page's lanes and not the queue's 5,000.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.lease; DELETE FROM pgsweep.maintain_pass; DELETE FROM pgsweep.retention_policy;
SET LOCAL client_min_messages = warning;
SELECT plan(28);

SELECT has_index('pgsweep', 'lane', 'lane_blocked', ARRAY['queue', 'name'], 'lane_blocked: the blocked lanes of a queue by name');
SELECT ok(has_function_privilege('pgsweep_monitor', 'pgsweep.browse_lanes(text, text, integer, boolean)', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.browse_leases(text, integer)', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.browse_maintenance_passes(bigint, integer)', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.browse_retention_passes(text, bigint, integer)', 'EXECUTE'),
    'the monitor may call the four browse functions');
SELECT ok(NOT has_function_privilege('pgsweep_worker', 'pgsweep.browse_lanes(text, text, integer, boolean)', 'EXECUTE'),
    'a worker may not browse lanes');

-- Lanes: b1 and b3 blocked by their dead heads (b1 with a message waiting),
-- a, c, d, e with a head in flight (e with two waiting)
SELECT pgsweep.queue_create('bq', 'outbox', 1);
SELECT pgsweep.queue_configure('bq', '{"lane_dead": "block"}');
CREATE TEMP TABLE sent (name text PRIMARY KEY, id bigint);
CREATE FUNCTION pg_temp.id(p_name text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM sent WHERE name = p_name $$;
CREATE FUNCTION pg_temp.send(p_name text, p_lane text) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO sent SELECT p_name, pgsweep.send('bq', to_jsonb(p_name), '{}', NULL, NULL, p_lane) RETURNING id $$;
SELECT pg_temp.send(n, l) FROM (VALUES ('a1', 'a'), ('b1-1', 'b1'), ('b1-2', 'b1'), ('b3-1', 'b3'), ('c1', 'c'), ('d1', 'd'),
                                      ('e1', 'e'), ('e2', 'e'), ('e3', 'e')) v(n, l);
CREATE TEMP TABLE held AS SELECT * FROM pgsweep.claim('bq', 'w', 10, '1 hour');
SELECT is((SELECT count(*) FROM held), 6::bigint, 'the six heads in flight');
SELECT is((SELECT count(*) FROM pgsweep.fail_details('bq', (SELECT DISTINCT token FROM held),
           ARRAY[pg_temp.id('b1-1'), pg_temp.id('b3-1')], 'boom') WHERE dead), 2::bigint, 'b1 and b3: their heads die, the lanes stop');

SELECT results_eq($$SELECT lane, blocked, waiting, waiting_more, head_id, head_attempt, head_state, may_skip FROM pgsweep.browse_lanes('bq', NULL, 3)$$,
    $$VALUES ('b1'::text, true, 1::bigint, false, pg_temp.id('b1-1'), 1, 'dead'::text, true),
             ('b3', true, 0::bigint, false, pg_temp.id('b3-1'), 1, 'dead', true),
             ('a', false, 0::bigint, false, pg_temp.id('a1'), 1, 'processing', false)$$,
    'page 1: the blocked lanes first, by name, then the others; may_skip on the blocked ones (a superuser may)');
SELECT results_eq($$SELECT lane, blocked, waiting FROM pgsweep.browse_lanes('bq', 'a', 3, false)$$,
    $$VALUES ('c'::text, false, 0::bigint), ('d', false, 0::bigint), ('e', false, 2::bigint)$$,
    'page 2 goes on after lane a, not blocked');
SELECT is_empty($$SELECT * FROM pgsweep.browse_lanes('bq', 'e', 3, false)$$, 'page 3 is empty');
SELECT results_eq($$SELECT lane FROM pgsweep.browse_lanes('bq', 'b1', 3, true)$$, $$VALUES ('b3'::text), ('a'), ('c')$$,
    'a page that begins among the blocked lanes goes on into the others');
SELECT results_eq($$SELECT lane FROM pgsweep.browse_lanes('bq', NULL, 2, false)$$, $$VALUES ('a'::text), ('c')$$,
    'p_after NULL with p_after_blocked false: the first lane that is not blocked');
SELECT ok((SELECT oldest_age >= interval '0' FROM pgsweep.browse_lanes('bq') WHERE lane = 'b1'), 'oldest_age is there');
SELECT results_eq($$SELECT lane, waiting, head_id, head_state FROM pgsweep.lane_stats('bq') WHERE lane IN ('b1', 'e') ORDER BY lane$$,
    $$VALUES ('b1'::text, 1::bigint, pg_temp.id('b1-1'), 'dead'::text), ('e', 2::bigint, pg_temp.id('e1'), 'processing')$$,
    'lane_stats shows the same figures (_lane_figures)');

-- a monitor may browse, but not skip
SET LOCAL ROLE pgsweep_monitor;
SELECT results_eq($$SELECT lane, may_skip FROM pgsweep.browse_lanes('bq', NULL, 2)$$, $$VALUES ('b1'::text, false), ('b3', false)$$,
    'the monitor sees the blocked lanes, and may_skip false');
RESET ROLE;
SET LOCAL ROLE pgsweep_admin;
SELECT results_eq($$SELECT lane, may_skip FROM pgsweep.browse_lanes('bq', NULL, 1)$$, $$VALUES ('b1'::text, true)$$,
    'the admin may skip');
RESET ROLE;

-- Keyset stability: page 1, then sends, claims and completions change the
-- lanes around it; page 2 neither repeats nor skips a lane that stayed
SELECT pgsweep.send('bq', '{}', '{}', NULL, NULL, 'l' || g) FROM generate_series(10, 29) g;
CREATE TEMP TABLE page1 AS SELECT lane, blocked FROM pgsweep.browse_lanes('bq', NULL, 8);
SELECT results_eq($$SELECT lane FROM page1$$, $$VALUES ('b1'::text), ('b3'), ('a'), ('c'), ('d'), ('e'), ('l10'), ('l11')$$,
    'page 1 of the stability test');
SELECT pgsweep.send('bq', '{}', '{}', NULL, NULL, 'l125');              -- a new lane after the cursor
SELECT pgsweep.send('bq', '{}', '{}', NULL, NULL, 'aa');                -- a new lane before it
SELECT count(*) FROM pgsweep.claim('bq', 'w2', 30, '1 hour');           -- heads claimed
-- l12's head completed: the lane empties, its row goes
SELECT count(*) FROM (SELECT m.id, m.token FROM pgsweep.message m WHERE m.queue = 'bq' AND m.lane = 'l12') c,
       LATERAL pgsweep.complete('bq', c.token, ARRAY[c.id]);
CREATE TEMP TABLE page2 AS
SELECT lane FROM pgsweep.browse_lanes('bq', (SELECT lane FROM page1 ORDER BY blocked, lane DESC LIMIT 1), 100, false);
SELECT is_empty($$SELECT lane FROM page2 INTERSECT SELECT lane FROM page1$$, 'page 2 repeats no lane of page 1');
SELECT is(ARRAY(SELECT lane FROM page2 ORDER BY lane),
    ARRAY(SELECT 'l' || g FROM generate_series(13, 29) g UNION SELECT 'l125' ORDER BY 1),
    'page 2: every lane after l11 that stayed (l13..l29), the new l125, not the emptied l12');

-- Cost: a page of 10 among 5,000 lanes (3 blocked) reads the page's lanes
SELECT pgsweep.queue_create('many');
SELECT count(*) FROM pgsweep.send_batch('many', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5000)),
    p_lanes => ARRAY(SELECT 'm' || lpad(g::text, 4, '0') FROM generate_series(1, 5000) g));
-- blocked by hand (the figures do not matter here, only what is read)
UPDATE pgsweep.lane SET blocked_id = 0 WHERE queue = 'many' AND name IN ('m0100', 'm2000', 'm4000');
ANALYZE pgsweep.lane;
CREATE FUNCTION pg_temp.lane_reads() RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_tuples_returned('pgsweep.lane_pkey'::regclass)
         + pg_stat_get_xact_tuples_returned('pgsweep.lane_blocked'::regclass)
         + pg_stat_get_xact_tuples_returned('pgsweep.lane'::regclass) $$;
CREATE FUNCTION pg_temp.cost(p_sql text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_before bigint;
BEGIN
    PERFORM pg_stat_clear_snapshot();
    v_before := pg_temp.lane_reads();
    EXECUTE p_sql;
    PERFORM pg_stat_clear_snapshot();
    RETURN pg_temp.lane_reads() - v_before;
END $$;
CREATE TEMP TABLE lane_cost AS
SELECT pg_temp.cost($$SELECT count(*) FROM pgsweep.browse_lanes('many', NULL, 10)$$) AS first,
       pg_temp.cost($$SELECT count(*) FROM pgsweep.browse_lanes('many', 'm2500', 10, false)$$) AS middle,
       pg_temp.cost($$SELECT count(*) FROM pgsweep.lane_stats('many', 10)$$) AS stats;
SELECT diag(format('lane rows and index entries read: browse_lanes first page %s, a middle page %s; lane_stats %s', first, middle, stats))
  FROM lane_cost;
SELECT ok(first <= 60 AND middle <= 60, 'a page of 10 lanes reads at most 60 lane rows and entries, of 5,000') FROM lane_cost;
SELECT results_eq($$SELECT lane, blocked FROM pgsweep.browse_lanes('many', NULL, 4)$$,
    $$VALUES ('m0100'::text, true), ('m2000', true), ('m4000', true), ('m0001', false)$$, 'the three blocked first');

-- Leases: by name, keyset by name
SELECT pgsweep.lease_acquire(n, 'o-' || n, '1 minute') FROM unnest(ARRAY['le', 'la', 'ld', 'lb', 'lc']) n;
SELECT pgsweep.lease_release('lc', 'o-lc');
SELECT results_eq($$SELECT name, owner, token, live FROM pgsweep.browse_leases(NULL, 2)$$,
    $$VALUES ('la'::text, 'o-la'::text, 1::bigint, true), ('lb', 'o-lb', 1::bigint, true)$$, 'leases page 1');
SELECT results_eq($$SELECT name, owner, live FROM pgsweep.browse_leases('lb', 2)$$,
    $$VALUES ('lc'::text, NULL::text, false), ('ld', 'o-ld', true)$$, 'leases page 2: lc released, not live');
SELECT results_eq($$SELECT name FROM pgsweep.browse_leases('ld', 2)$$, $$VALUES ('le'::text)$$, 'leases page 3, the last');
-- a cursor is only compared: a name kept from before 0.34's name rule (a tab, a trailing space) does not stop the pages
SELECT results_eq($$SELECT name FROM pgsweep.browse_leases(E'lb\t', 2)$$, $$VALUES ('lc'::text), ('ld')$$,
    'a cursor with a control character pages on');
SELECT results_eq($$SELECT lane FROM pgsweep.browse_lanes('many', 'm0001 ', 1, false)$$, $$VALUES ('m0002'::text)$$,
    'a cursor with a trailing space pages on');

-- Maintenance passes: newest first, keyset by id
INSERT INTO pgsweep.maintain_pass (owner, started_at, budget) SELECT 'p' || g, now(), '30 seconds' FROM generate_series(1, 5) g;
SELECT results_eq($$SELECT owner FROM pgsweep.browse_maintenance_passes(NULL, 2)$$, $$VALUES ('p5'::text), ('p4')$$,
    'maintenance passes page 1: the newest');
SELECT results_eq($$SELECT owner FROM pgsweep.browse_maintenance_passes((SELECT id FROM pgsweep.maintain_pass WHERE owner = 'p4'), 10)$$,
    $$VALUES ('p3'::text), ('p2'), ('p1')$$, 'maintenance passes page 2: older than p4');

-- Retention passes: newest first, of one policy or of all
CREATE SCHEMA bp;
CREATE TABLE bp.ev (id bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE INDEX ON bp.ev (at);
CREATE TABLE bp.fx (id bigint PRIMARY KEY, at timestamptz NOT NULL);
CREATE INDEX ON bp.fx (at);
SELECT pgsweep.retention_register('ev', 'bp.ev'::regclass, 'at', '1 day');
SELECT pgsweep.retention_register('fx', 'bp.fx'::regclass, 'at', '1 day');
INSERT INTO pgsweep.retention_pass (policy, owner, mode, pid, started_at, deadline, finished_at, outcome, rows_deleted)
SELECT CASE WHEN g % 2 = 0 THEN 'ev' ELSE 'fx' END, 'r' || g, 'exclusive', 0, now(), now(), now(), 'drained', g
  FROM generate_series(1, 6) g;
SELECT results_eq($$SELECT owner, policy, outcome, rows_deleted FROM pgsweep.browse_retention_passes(NULL, NULL, 3)$$,
    $$VALUES ('r6'::text, 'ev'::text, 'drained'::text, 6::bigint), ('r5', 'fx', 'drained', 5::bigint), ('r4', 'ev', 'drained', 4::bigint)$$,
    'retention passes of every policy, newest first');
SELECT results_eq($$SELECT owner FROM pgsweep.browse_retention_passes('ev', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'r6'), 10)$$,
    $$VALUES ('r4'::text), ('r2')$$, 'retention passes of ev older than r6');

SELECT * FROM finish();
ROLLBACK;
