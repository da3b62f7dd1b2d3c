-- pgTAP: ordered lanes (sql/functions/lane.sql). A lane hands out one
-- message at a time, oldest first, mixed with other lanes and unordered
-- messages; a failing head keeps its lane waiting (backoff, recovery); a
-- dead head moves the lane on (lane_dead 'move_on') or stops it until
-- dead_requeue or lane_skip ('block'); cancelled heads move on; a head
-- deleted by hand is healed by the next send; bad lane names are refused
-- with nothing changed; and 100,000 messages waiting behind 10,000 heads in
-- flight cost a claim no more than twice what the heads alone cost (scan
-- counts of this transaction, as claim_plan.sql).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SET LOCAL client_min_messages = warning;
SELECT plan(96);

SELECT has_table('pgsweep', 'lane', 'lane table');
SELECT col_is_pk('pgsweep', 'lane', ARRAY['queue', 'name'], 'lane key leads with queue');
SELECT has_function('pgsweep', 'send_batch', ARRAY['text', 'jsonb[]', 'jsonb[]', 'text[]', 'timestamp with time zone[]', 'text[]', 'text[]', 'interval[]', 'smallint[]', 'text[]'],
    'send_batch takes p_lanes after p_deliver_at (then the unique keys, priorities and groups)');
SELECT has_function('pgsweep', 'lane_skip', ARRAY['text', 'text'], 'lane_skip(p_queue, p_lane)');
SELECT has_function('pgsweep', 'lane_stats', ARRAY['text', 'integer'], 'lane_stats(p_queue, p_limit)');
SELECT ok(has_function_privilege('pgsweep_worker', 'pgsweep.send(text, jsonb, jsonb, text, timestamptz, text, text, interval, smallint, text)', 'EXECUTE'),
    'workers may send with a lane');
SELECT ok(has_function_privilege('pgsweep_admin', 'pgsweep.lane_skip(text, text)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep.lane_skip(text, text)', 'EXECUTE'),
    'admin may skip a blocked lane, workers may not');
SELECT ok(has_function_privilege('pgsweep_monitor', 'pgsweep.lane_stats(text, integer)', 'EXECUTE'), 'monitor may read lane_stats');

SELECT pgsweep.queue_create('q', 'outbox', 3);
SELECT pgsweep.queue_configure('q', '{"backoff_base": "10 seconds", "backoff_max": "10 seconds"}');
-- claims run at pinned times T + x, T an hour from the transaction's start
CREATE FUNCTION pg_temp.t(p interval) RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() + interval '1 hour' + p $$;
CREATE TEMP TABLE sent (name text PRIMARY KEY, id bigint);
CREATE FUNCTION pg_temp.id(p_name text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM sent WHERE name = p_name $$;
CREATE FUNCTION pg_temp.send(p_q text, p_name text, p_lane text, p_at timestamptz DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO sent SELECT p_name, pgsweep.send(p_q, to_jsonb(p_name), '{}', NULL, p_at, p_lane) RETURNING id $$;
CREATE FUNCTION pg_temp.name(p_id bigint) RETURNS text LANGUAGE sql AS $$ SELECT name FROM sent WHERE id = p_id $$;
-- claim at T + p_at; the claim's rows are kept under a label; returns their names
CREATE TEMP TABLE claims (label text, id bigint, token uuid, lane text);
CREATE FUNCTION pg_temp.claim(p_label text, p_q text, p_at interval, p_n int DEFAULT 10) RETURNS text LANGUAGE sql AS $$
    WITH c AS (SELECT * FROM pgsweep.claim(p_q, p_label, p_n, '30 seconds', pg_temp.t(p_at))),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.token, c.lane FROM c RETURNING claims.id)
    SELECT coalesce(string_agg(pg_temp.name(i.id), ',' ORDER BY pg_temp.name(i.id)), '') FROM i $$;
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;
CREATE FUNCTION pg_temp.done(p_label text, p_names text[], p_at interval) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(*) FROM pgsweep.complete('q', pg_temp.tok(p_label), ARRAY(SELECT pg_temp.id(n) FROM unnest(p_names) n), pg_temp.t(p_at)) $$;
CREATE FUNCTION pg_temp.parked(p_name text) RETURNS timestamptz LANGUAGE sql AS $$
    SELECT parked_until FROM pgsweep.message WHERE id = pg_temp.id(p_name) $$;
-- lane_stats.oldest_age of a lane, read between two clock readings t0 and
-- t1: is it the age of a message sent at p_born, i.e. within [t0 - p_born,
-- t1 - p_born]? (lane_stats reads the clock once, between them.)
CREATE FUNCTION pg_temp.oldest_age_ok(p_q text, p_lane text, p_born timestamptz) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
    v_age interval;
    t1 timestamptz;
BEGIN
    SELECT s.oldest_age INTO v_age FROM pgsweep.lane_stats(p_q) s WHERE s.lane = p_lane;
    t1 := clock_timestamp();
    RETURN v_age BETWEEN t0 - p_born AND t1 - p_born;
END $$;

-- a1 a2 a3 in lane A, b1 b2 in lane B (one send_batch, interleaved), u1 without a lane
SELECT pg_temp.send('q', 'a1', 'A');
INSERT INTO sent SELECT n, id FROM unnest(ARRAY['b1', 'a2', 'u1', 'b2']) WITH ORDINALITY x(n, k)
  JOIN (SELECT row_number() OVER () AS k, s AS id
          FROM pgsweep.send_batch('q', ARRAY['"b1"', '"a2"', '"u1"', '"b2"']::jsonb[], p_lanes => ARRAY['B', 'A', NULL, 'B']) s) b USING (k);
SELECT pg_temp.send('q', 'a3', 'A');

SELECT results_eq($$SELECT pg_temp.name(id), parked_until FROM pgsweep.message WHERE queue = 'q' ORDER BY id$$,
    $$VALUES ('a1', NULL::timestamptz), ('b1', NULL), ('a2', 'infinity'), ('u1', NULL), ('b2', 'infinity'), ('a3', 'infinity')$$,
    'each lane''s first message is its head; the others wait parked until infinity (out of the claim index)');
SELECT results_eq($$SELECT l.name, l.blocked_id FROM pgsweep.lane l WHERE l.queue = 'q' ORDER BY l.name$$,
    $$VALUES ('A', NULL::bigint), ('B', NULL)$$, 'one lane row per active lane');
SELECT ok((SELECT bool_and(c.created_at > p.created_at OR (c.created_at = p.created_at AND c.id > p.id))
             FROM pgsweep.message c JOIN pgsweep.message p ON p.queue = c.queue AND p.lane = c.lane AND p.id < c.id
            WHERE c.queue = 'q'), 'within a lane, (created_at, id) increases in send order');

SELECT is(pg_temp.claim('w1', 'q', '1 second'), 'a1,b1,u1', 'a claim takes the heads and the unordered message: never two of one lane');
SELECT results_eq($$SELECT pg_temp.name(id), lane FROM claims WHERE label = 'w1' ORDER BY id$$,
    $$VALUES ('a1', 'A'), ('b1', 'B'), ('u1', NULL)$$, 'claim returns each message''s lane');
SELECT is(pg_temp.claim('w2', 'q', '1 second'), '', 'nothing else is claimable while the heads are in flight');
SELECT is((SELECT lanes FROM pgsweep.queue_stats WHERE queue = 'q'), 2::bigint, 'queue_stats: two active lanes');
SELECT is((SELECT oldest_pending_age FROM pgsweep.queue_counts('q', pg_temp.t('1 second'))), NULL,
    'oldest_pending_age leaves out messages waiting in a lane');

-- complete a1: a2 becomes the head in the same transaction
SELECT is(pg_temp.done('w1', ARRAY['a1', 'u1'], '2 seconds'), 2::bigint, 'a1 (and u1) completed');
SELECT is(pg_temp.parked('a2'), NULL, 'completing a1 promotes a2');
SELECT is(pg_temp.parked('a3'), 'infinity', 'a3 still waits');
SELECT is(pg_temp.claim('w3', 'q', '3 seconds'), 'a2', 'the next claim takes a2 (b1 is still in flight)');

-- a2 fails: it stays the head, parked for its backoff; the lane waits
SELECT is((SELECT dead FROM pgsweep.fail_details('q', pg_temp.tok('w3'), ARRAY[pg_temp.id('a2')], 'boom', NULL, pg_temp.t('4 seconds'))),
    false, 'a2 failed, to be retried');
SELECT is(pg_temp.parked('a2'), pg_temp.t('14 seconds'), 'a failing head is parked for its backoff');
SELECT is(pg_temp.claim('w4', 'q', '10 seconds'), '', 'before a2''s retry nothing of lane A is claimable (a3 waits)');
SELECT is((SELECT head_state FROM pgsweep.lane_stats('q') WHERE lane = 'A'), 'failed', 'lane_stats: lane A waits for a failed head');
SELECT is(pg_temp.claim('w5', 'q', '15 seconds'), 'a2', 'once due, a2 again (attempt 2), not a3');

-- the leases expire; recovery releases the heads and keeps them heads
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('q', 100, pg_temp.t('50 seconds'))$$, $$VALUES (2, 0)$$,
    'recovery releases a2 and b1');
SELECT results_eq($$SELECT pg_temp.name(id) FROM pgsweep.message WHERE queue = 'q' AND parked_until IS DISTINCT FROM 'infinity' ORDER BY id$$,
    $$VALUES ('b1'), ('a2')$$, 'recovery keeps them the heads of their lanes (a3 and b2 still wait)');
SELECT is(pg_temp.claim('w6', 'q', '51 seconds'), 'a2,b1', 'the released heads are claimed again, nothing behind them');

-- a2's last attempt expires: recovery dead-letters it; lane A moves on (lane_dead move_on)
-- (two calls: the first ends the traversal the last one began, the second starts a new one)
SELECT results_eq($$SELECT sum(r.recovered)::int, sum(r.dead_lettered)::int
                      FROM generate_series(1, 2) g, LATERAL pgsweep.queue_recover('q', 99 + g, pg_temp.t('90 seconds')) r$$, $$VALUES (1, 1)$$,
    'a2''s last attempt expired: dead-lettered; b1 released');
SELECT results_eq($$SELECT pg_temp.name(id), lane FROM pgsweep.message_dead WHERE queue = 'q' ORDER BY id$$,
    $$VALUES ('a2', 'A')$$, 'the dead letter keeps its lane');
SELECT is(pg_temp.claim('w7', 'q', '91 seconds'), 'a3,b1', 'lane A moved on to a3; lane B still has b1 at its head');
SELECT is(pg_temp.done('w7', ARRAY['a3', 'b1'], '92 seconds'), 2::bigint, 'a3 and b1 completed');
SELECT is(pg_temp.claim('w7b', 'q', '92 seconds'), 'b2', 'b2 next');
SELECT is(pg_temp.done('w7b', ARRAY['b2'], '92 seconds'), 1::bigint, 'b2 completed');
SELECT is((SELECT count(*) FROM pgsweep.lane WHERE queue = 'q'), 0::bigint, 'empty lanes leave no row');
SELECT is((SELECT lanes FROM pgsweep.queue_stats WHERE queue = 'q'), 0::bigint, 'queue_stats: no active lane');

-- dead_requeue under move_on: the letter goes back into its lane and waits its turn
SELECT pg_temp.send('q', 'a4', 'A');
SELECT is(ARRAY(SELECT pgsweep.dead_requeue('q', ARRAY[pg_temp.id('a2')])), ARRAY[pg_temp.id('a2')], 'a2 requeued while a4 is the head');
SELECT is(pg_temp.parked('a2'), 'infinity', 'a2 waits behind the head a4');
SELECT is(pg_temp.claim('w8', 'q', '93 seconds'), 'a4', 'a4 first (it was the head)');
SELECT is(pg_temp.done('w8', ARRAY['a4'], '94 seconds'), 1::bigint, 'a4 completed');
SELECT is(pg_temp.claim('w9', 'q', '95 seconds'), 'a2', 'then the requeued a2 (older than anything after it)');
SELECT is(pg_temp.done('w9', ARRAY['a2'], '96 seconds'), 1::bigint, 'a2 completed');

-- lane_dead block: the lane stops at a dead head until dead_requeue or lane_skip
SELECT pgsweep.queue_configure('q', '{"lane_dead": "block", "max_attempts": 1}');
SELECT pg_temp.send('q', 'c1', 'C');
SELECT pg_temp.send('q', 'c2', 'C');
SELECT pg_temp.send('q', 'c3', 'C');
SELECT is(pg_temp.claim('w10', 'q', '97 seconds'), 'c1', 'c1 claimed');
SELECT is((SELECT dead FROM pgsweep.fail_details('q', pg_temp.tok('w10'), ARRAY[pg_temp.id('c1')], 'fatal', NULL, pg_temp.t('98 seconds'))),
    true, 'c1 dead on its last attempt');
SELECT results_eq($$SELECT blocked_id FROM pgsweep.lane WHERE queue = 'q' AND name = 'C'$$,
    $$VALUES (pg_temp.id('c1'))$$, 'lane C is blocked by the dead letter c1');
SELECT is(pg_temp.claim('w11', 'q', '99 seconds'), '', 'nothing of a blocked lane is claimable');
SELECT results_eq($$SELECT lanes, blocked_lanes FROM pgsweep.queue_stats WHERE queue = 'q'$$, $$VALUES (1::bigint, 1::bigint)$$,
    'queue_stats counts the blocked lane');
SELECT results_eq($$SELECT lane, waiting, head_id, head_attempt, head_state FROM pgsweep.lane_stats('q')$$,
    $$VALUES ('C'::text, 2::bigint, pg_temp.id('c1'), 1, 'dead'::text)$$, 'lane_stats: blocked by c1 (1 attempt), two messages waiting');
SELECT ok(pg_temp.oldest_age_ok('q', 'C', (SELECT created_at FROM pgsweep.message_dead WHERE id = pg_temp.id('c1'))),
    'lane_stats.oldest_age of a blocked lane counts its dead letter, the oldest');
SELECT is(ARRAY(SELECT pgsweep.dead_requeue('q', ARRAY[pg_temp.id('c1')])), ARRAY[pg_temp.id('c1')], 'c1 requeued');
SELECT results_eq($$SELECT (SELECT blocked_id FROM pgsweep.lane WHERE queue = 'q' AND name = 'C'), pg_temp.parked('c1'), pg_temp.parked('c2')$$,
    $$VALUES (NULL::bigint, NULL::timestamptz, 'infinity'::timestamptz)$$, 'dead_requeue puts c1 back at the head and unblocks the lane');
SELECT is(pg_temp.claim('w12', 'q', '100 seconds'), 'c1', 'c1 is claimed first, c2 still waits');
SELECT is(ARRAY(SELECT pgsweep.fail('q', pg_temp.tok('w12'), ARRAY[pg_temp.id('c1')], 'fatal again')), ARRAY[pg_temp.id('c1')], 'c1 dies again');
SELECT is(pgsweep.lane_skip('q', 'C'), true, 'lane_skip moves the blocked lane on');
SELECT is(pg_temp.claim('w13', 'q', '101 seconds'), 'c2', 'without c1: c2 is the head');
SELECT is(pgsweep.lane_skip('q', 'C'), false, 'lane_skip of a lane that is not blocked changes nothing');
SELECT is(pgsweep.lane_skip('q', 'nope'), false, 'nor of a lane that does not exist');
SELECT is((SELECT count(*) FROM pgsweep.message_dead WHERE queue = 'q' AND id = pg_temp.id('c1')), 1::bigint, 'the skipped dead letter stays');

-- cancel: a message in flight stays, a waiting one goes; a cancelled head moves its lane on
SELECT pgsweep.queue_configure('q', '{"lane_dead": "move_on", "max_attempts": 3}');
SELECT is(pg_temp.done('w13', ARRAY['c2'], '102 seconds'), 1::bigint, 'c2 completed (c3 is lane C''s head)');
SELECT pg_temp.send('q', 'd1', 'D');
SELECT pg_temp.send('q', 'd2', 'D');
SELECT pg_temp.send('q', 'd3', 'D');
SELECT pg_temp.send('q', 'd4', 'D');
SELECT is(pg_temp.claim('w14', 'q', '103 seconds'), 'c3,d1', 'c3 and d1 claimed');
SELECT is(ARRAY(SELECT pgsweep.message_cancel('q', ARRAY[pg_temp.id('d1'), pg_temp.id('d2')])), ARRAY[pg_temp.id('d2')],
    'message_cancel deletes the waiting d2, not d1 in flight');
SELECT is(pg_temp.done('w14', ARRAY['c3', 'd1'], '104 seconds'), 2::bigint, 'c3 and d1 completed');
SELECT is(pg_temp.parked('d3'), NULL, 'd3 is lane D''s head');
SELECT is(ARRAY(SELECT pgsweep.message_cancel('q', ARRAY[pg_temp.id('d3')])), ARRAY[pg_temp.id('d3')], 'the pending head d3 cancelled');
SELECT is(pg_temp.parked('d4'), NULL, 'its lane moves on to d4');

-- scheduled: a head due later keeps its lane waiting; a waiting message due
-- later is parked until its time when its turn comes
SELECT pg_temp.send('q', 'e1', 'E', pg_temp.t('1 hour'));
SELECT pg_temp.send('q', 'e2', 'E', pg_temp.t('2 hours'));
SELECT pg_temp.send('q', 'e3', 'E');
SELECT is(pg_temp.parked('e1'), pg_temp.t('1 hour'), 'a scheduled head is parked until its time');
SELECT is((SELECT head_state FROM pgsweep.lane_stats('q') WHERE lane = 'E'), 'scheduled', 'lane_stats: scheduled');
SELECT is(pg_temp.claim('w15', 'q', '61 minutes'), 'd4,e1', 'e1 once due (and d4)');
SELECT is(pg_temp.done('w15', ARRAY['d4', 'e1'], '62 minutes'), 2::bigint, 'd4 and e1 completed');
SELECT is(pg_temp.parked('e2'), pg_temp.t('2 hours'), 'e2, promoted before its time, is parked until it');
SELECT is(pg_temp.claim('w16', 'q', '90 minutes'), '', 'e2 is not claimed before its time, nor e3 behind it');

-- a head deleted by hand (no verb moved the lane on): the next send heals the lane
DELETE FROM pgsweep.message WHERE id = pg_temp.id('e2');
SELECT pg_temp.send('q', 'e4', 'E');
SELECT results_eq($$SELECT pg_temp.name(id), parked_until FROM pgsweep.message WHERE lane = 'E' ORDER BY id$$,
    $$VALUES ('e3', NULL::timestamptz), ('e4', 'infinity')$$, 'a send to a lane whose head vanished promotes its oldest message first');

-- claim's own order (the helper above sorts by name): lane heads and
-- unordered messages oldest first by (created_at, id), also heads promoted
-- after a newer unordered message was sent
SELECT pgsweep.queue_create('qo');
SELECT pg_temp.send('qo', 'o-x1', 'X');
SELECT pg_temp.send('qo', 'o-u1', NULL);
SELECT pg_temp.send('qo', 'o-y1', 'Y');
SELECT pg_temp.send('qo', 'o-x2', 'X');
SELECT pg_temp.send('qo', 'o-y2', 'Y');
CREATE FUNCTION pg_temp.claim_order(p_label text, p_at interval, p_n int) RETURNS text[] LANGUAGE sql AS $$
    WITH c AS (SELECT c.id, c.token, c.lane, c.k
                 FROM pgsweep.claim('qo', p_label, p_n, '30 seconds', pg_temp.t(p_at))
                      WITH ORDINALITY c(id, key, payload, headers, attempt, created_at, lease_expires_at, token, lane, k)),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.token, c.lane FROM c)
    SELECT array_agg(pg_temp.name(c.id) ORDER BY c.k) FROM c $$;
SELECT is(pg_temp.claim_order('o1', '1 second', 10), ARRAY['o-x1', 'o-u1', 'o-y1'],
    'claim returns the heads and the unordered message oldest first');
SELECT ok(pg_temp.oldest_age_ok('qo', 'X', (SELECT created_at FROM pgsweep.message WHERE id = pg_temp.id('o-x1'))),
    'lane_stats.oldest_age: the age of the lane''s oldest message, its head in flight');
SELECT pg_temp.send('qo', 'o-u2', NULL);
SELECT is((SELECT count(*) FROM pgsweep.complete('qo', pg_temp.tok('o1'), ARRAY[pg_temp.id('o-x1'), pg_temp.id('o-u1'), pg_temp.id('o-y1')],
    pg_temp.t('2 seconds'))), 3::bigint, 'o-x1, o-u1, o-y1 completed: o-x2 and o-y2 are the heads');
SELECT is(pg_temp.claim_order('o2', '3 seconds', 2), ARRAY['o-x2', 'o-y2'],
    'the new heads come before o-u2, sent after them though promoted before them');
SELECT is(pg_temp.claim_order('o3', '3 seconds', 2), ARRAY['o-u2'], 'then o-u2');

-- bad input: 22023, nothing changed
CREATE TEMP TABLE before AS SELECT (SELECT count(*) FROM pgsweep.message) AS m, (SELECT count(*) FROM pgsweep.lane) AS l;
SELECT throws_ok($$SELECT pgsweep.send('q', '1', '{}', NULL, NULL, '')$$, '22023',
    'p_lane must be a non-empty string of at most 200 characters, got an empty string', 'an empty lane name');
SELECT throws_ok($$SELECT pgsweep.send('q', '1', '{}', NULL, NULL, repeat('x', 201))$$, '22023',
    'p_lane must be a non-empty string of at most 200 characters, got 201 characters', 'a lane name over 200 characters');
SELECT throws_ok($$SELECT pgsweep.send_batch('q', ARRAY['1', '2']::jsonb[], p_lanes => ARRAY['x'])$$, '22023',
    'p_lanes must be NULL or have 2 elements like p_payloads, got 1', 'p_lanes of another length');
SELECT throws_ok($$SELECT pgsweep.send_batch('q', ARRAY['1', '2']::jsonb[], p_lanes => ARRAY['x', repeat('y', 201)])$$, '22023',
    'p_lanes[2] must be a non-empty string of at most 200 characters, got 201 characters', 'a bad name in p_lanes, named by its index');
SELECT throws_ok($$SELECT pgsweep.lane_skip('q', NULL)$$, '22023', 'p_lane must be a non-empty string of at most 200 characters, got NULL', 'lane_skip: NULL lane');
SELECT throws_ok($$SELECT pgsweep.lane_skip('nope', 'C')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'lane_skip: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.lane_stats('q', 0)$$, '22023', 'p_limit must be between 1 and 10000, got 0', 'lane_stats: p_limit 0');
SELECT throws_ok($$SELECT pgsweep.queue_configure('q', '{"lane_dead": "stop"}')$$, '22023', 'lane_dead must be "move_on" or "block", got "stop"',
    'lane_dead: an unknown value');
SELECT results_eq($$SELECT (SELECT count(*) FROM pgsweep.message), (SELECT count(*) FROM pgsweep.lane), (SELECT lane_dead FROM pgsweep.queue WHERE name = 'q')$$,
    $$SELECT m, l, 'move_on'::text FROM before$$, 'nothing changed');
SELECT lives_ok($$SELECT pgsweep.send('q', '1', '{}', NULL, NULL, repeat('x', 200))$$, 'a lane name of 200 characters is fine');

-- Claim cost: 10,000 lanes with a head in flight and 10 messages waiting
-- behind each (100,000) against 10,000 lanes with a head in flight and
-- nothing behind. Each: 500 unordered messages sent after the heads, claimed
-- 100 at a time, the first claim a rescan from the head of the queue (it
-- walks the heads in flight, in both cases). Cost = claim-index and
-- parked-index entries read plus heap tuples fetched.
SELECT pgsweep.queue_create('big');
SELECT pgsweep.queue_create('small');
SELECT count(*) FROM generate_series(1, 11) r, LATERAL pgsweep.send_batch('big',
    ARRAY(SELECT jsonb_build_object('r', r) FROM generate_series(1, 10000)), p_lanes => ARRAY(SELECT 'l' || g FROM generate_series(1, 10000) g));
SELECT count(*) FROM pgsweep.send_batch('small',
    ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000)), p_lanes => ARRAY(SELECT 'l' || g FROM generate_series(1, 10000) g));
SELECT is((SELECT count(*) FROM pgsweep.claim('big', 'w', 10000, '1 hour')), 10000::bigint, '10,000 heads of big in flight');
SELECT is((SELECT count(*) FROM pgsweep.claim('small', 'w', 10000, '1 hour')), 10000::bigint, '10,000 heads of small in flight');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'big' AND parked_until = 'infinity'), 100000::bigint,
    '100,000 messages of big wait behind them');
SELECT count(*) FROM pgsweep.send_batch('big', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 500)));
SELECT count(*) FROM pgsweep.send_batch('small', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 500)));
ANALYZE pgsweep.message;
CREATE FUNCTION pg_temp.reads() RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_tuples_returned('pgsweep.message_claim'::regclass)
         + pg_stat_get_xact_tuples_returned('pgsweep.message_parked'::regclass)
         + pg_stat_get_xact_tuples_returned('pgsweep.message_lane'::regclass)
         + pg_stat_get_xact_tuples_fetched('pgsweep.message'::regclass) $$;
CREATE FUNCTION pg_temp.claim_cost(p_q text, OUT cost bigint, OUT parked bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_before bigint := pg_temp.reads();
    v_parked bigint := pg_stat_get_xact_tuples_returned('pgsweep.message_parked'::regclass);
    v_n bigint := 0;
    v_at timestamptz := clock_timestamp() + interval '2 seconds';
BEGIN
    FOR i IN 1 .. 5 LOOP
        -- the first claim 2 s after the heads' claim: a rescan (claim_rescan 1 s); the others from the cursor
        v_n := v_n + (SELECT count(*) FROM pgsweep.claim(p_q, 'c', 100, '1 hour', v_at + make_interval(secs => 0.01 * i)));
    END LOOP;
    IF v_n <> 500 THEN
        RAISE EXCEPTION 'claimed % of 500', v_n;
    END IF;
    cost := pg_temp.reads() - v_before;
    parked := pg_stat_get_xact_tuples_returned('pgsweep.message_parked'::regclass) - v_parked;
END $$;
CREATE TEMP TABLE cost AS SELECT s.cost AS small, b.cost AS big, b.parked AS big_parked
  FROM pg_temp.claim_cost('small') s, pg_temp.claim_cost('big') b;
SELECT diag(format('claim cost (index entries + heap tuples for 5 claims of 100): %s with 100,000 waiting behind the heads, %s without',
                   big, small)) FROM cost;
SELECT ok(big <= 2 * small, 'messages waiting behind lane heads do not make claims dearer (at most 2x)') FROM cost;
SELECT is(big_parked, 0::bigint, 'the promotion probes never walked the waiting messages in message_parked') FROM cost;

-- A lane's next head behind the claim cursor: its promotion moves the cursor
-- back to it, so the next claim takes it from the cursor on (lane.sql).
SELECT pgsweep.queue_create('cur');
CREATE TEMP TABLE cur AS SELECT n, pgsweep.send('cur', to_jsonb(n), '{}', NULL, NULL, l) AS id
  FROM (VALUES ('a1', 'a'), ('a2', 'a'), ('b1', 'b')) v(n, l);
CREATE TEMP TABLE cur_claim AS SELECT id, token FROM pgsweep.claim('cur', 'w', 10);
SELECT results_eq($$SELECT id FROM cur_claim ORDER BY id$$,
    $$SELECT id FROM cur WHERE n IN ('a1', 'b1') ORDER BY id$$, 'the heads a1 and b1 are claimed; the cursor is at b1');
SELECT is((SELECT c.id FROM pgsweep.claim_cursor c WHERE c.queue = 'cur'), (SELECT id FROM cur WHERE n = 'b1'), 'cursor at b1');
SELECT is((SELECT count(*) FROM pgsweep.complete('cur', (SELECT token FROM cur_claim LIMIT 1), ARRAY(SELECT id FROM cur WHERE n = 'a1'))),
    1::bigint, 'a1 completed');
SELECT results_eq($$SELECT c.created_at, c.id FROM pgsweep.claim_cursor c WHERE c.queue = 'cur'$$,
    $$SELECT m.created_at, m.id FROM pgsweep.message m WHERE m.queue = 'cur' AND m.id = (SELECT id FROM cur WHERE n = 'a2')$$,
    'the promotion of a2, behind the cursor, moved the cursor back to it');

SELECT * FROM finish();
ROLLBACK;
