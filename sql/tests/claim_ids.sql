-- pgTAP: claim_ids claims exactly the given messages that claim would hand
-- out now -- due pending or failed rows, parked rows that came due, expired
-- leases -- with claim's row update (owner, a fresh token per call, attempt
-- + 1, lease expiry, parked_until cleared) and the claim cursor moved
-- forward; a live lease, a row not due yet, an exhausted row, an id of
-- another queue or an unknown id is left alone. dead_letter moves the rows
-- a token holds to the dead letters at once. Bad arguments raise 22023
-- naming the argument and change nothing. Time is pinned (T = 2030-01-01);
-- the messages are sent now, before T.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(73);

SELECT has_function('pgsweep', 'claim_ids', ARRAY['text', 'text', 'bigint[]', 'interval'], 'claim_ids(text, text, bigint[], interval)');
SELECT has_function('pgsweep', 'claim_ids', ARRAY['text', 'text', 'bigint[]', 'interval', 'timestamp with time zone'],
    'claim_ids(..., p_now) for tests');
SELECT has_function('pgsweep', 'dead_letter', ARRAY['text', 'uuid', 'bigint[]', 'text'], 'dead_letter(text, uuid, bigint[], text)');
SELECT is((SELECT array_agg(p.proname || '/' || p.pronargs ORDER BY p.proname, p.pronargs)
             FROM pg_proc p
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.prosecdef AND p.proname IN ('claim_ids', 'dead_letter')),
    ARRAY['claim_ids/4', 'claim_ids/5', 'dead_letter/4', 'dead_letter/5'], 'the verbs are SECURITY DEFINER');
SELECT ok(has_function_privilege('pgsweep_worker', 'pgsweep.claim_ids(text, text, bigint[], interval)', 'EXECUTE'),
    'the worker role may call claim_ids');
SELECT ok(has_function_privilege('pgsweep_worker', 'pgsweep.dead_letter(text, uuid, bigint[], text)', 'EXECUTE'),
    'the worker role may call dead_letter');
SELECT ok(NOT has_function_privilege('pgsweep_worker', 'pgsweep.claim_ids(text, text, bigint[], interval, timestamptz)', 'EXECUTE'),
    'the p_now overload is the owner''s alone');
SELECT ok(NOT has_function_privilege('pgsweep_monitor', 'pgsweep.claim_ids(text, text, bigint[], interval)', 'EXECUTE'),
    'the monitor role may not claim');
SELECT is((SELECT p.proargnames[5:] FROM pg_proc p WHERE p.oid = 'pgsweep.claim_ids(text, text, bigint[], interval)'::regprocedure),
          (SELECT p.proargnames[5:] FROM pg_proc p WHERE p.oid = 'pgsweep.claim(text, text, int, interval)'::regprocedure),
    'claim_ids returns the columns of claim, by name');
SELECT is((SELECT p.proallargtypes[5:] FROM pg_proc p WHERE p.oid = 'pgsweep.claim_ids(text, text, bigint[], interval)'::regprocedure),
          (SELECT p.proallargtypes[5:] FROM pg_proc p WHERE p.oid = 'pgsweep.claim(text, text, int, interval)'::regprocedure),
    'and by type');

SELECT pgsweep.queue_create('t', 'outbox', 3);
SELECT pgsweep.queue_create('u', 'outbox', 3);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('t', ARRAY['1', '2', '3', '4', '5', '6']::jsonb[],
                          ARRAY['{"h":"1"}', '{}', '{}', '{}', '{}', '{}']::jsonb[], ARRAY['k1', NULL, NULL, NULL, NULL, NULL]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE TEMP TABLE extra (name text, id bigint);
CREATE FUNCTION pg_temp.x(p_name text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM extra WHERE name = p_name $$;
INSERT INTO extra SELECT 'u', pgsweep.send('u', '{"other": true}');
-- every claim_ids call's rows, under a label; pg_temp.tok(label) is its token
CREATE TEMP TABLE claims (label text, id bigint, attempt int, token uuid, lease_expires_at timestamptz);
CREATE FUNCTION pg_temp.claim_ids(p_label text, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, attempt int) LANGUAGE sql AS $$
    WITH c AS (SELECT * FROM pgsweep.claim_ids('t', 'relay-1', p_ids, p_lease, p_now)),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.attempt, c.token, c.lease_expires_at FROM c)
    SELECT c.id, c.attempt FROM c
$$;
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;
CREATE FUNCTION pg_temp.row(n int) RETURNS TABLE (status text, owner text, attempt int, visible_at timestamptz, token uuid, parked_until timestamptz)
LANGUAGE sql AS $$
    SELECT m.status, m.owner, m.attempt, m.visible_at, m.token, m.parked_until FROM pgsweep.message m
     WHERE m.queue = 't' AND m.id = pg_temp.id(n) $$;
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.message;

-- exactly the given ids, oldest first whatever their order in p_ids
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim_ids('a', ARRAY[pg_temp.id(4), pg_temp.id(2), -1, pg_temp.id(2)], '10 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(2), 1), (pg_temp.id(4), 1)$$, 'claims ids 2 and 4 (an unknown id and a repeated one are ignored), oldest first');
SELECT is((SELECT count(DISTINCT token) FROM claims WHERE label = 'a'), 1::bigint, 'one token for all the rows of a call');
SELECT is((SELECT DISTINCT lease_expires_at FROM claims WHERE label = 'a'), '2030-01-01 00:00:10+00'::timestamptz, 'the lease is p_lease from now');
SELECT results_eq($$SELECT * FROM pg_temp.row(2)$$,
    $$VALUES ('processing'::text, 'relay-1'::text, 1, '2030-01-01 00:00:10+00'::timestamptz, pg_temp.tok('a'), NULL::timestamptz)$$,
    'the row is updated as claim updates it');
SELECT set_eq($$SELECT * FROM pgsweep.message m WHERE m.id NOT IN (pg_temp.id(2), pg_temp.id(4))$$,
    $$SELECT * FROM before b WHERE b.id NOT IN (pg_temp.id(2), pg_temp.id(4))$$, 'no other row changed');
SELECT results_eq($$SELECT key, payload, headers, created_at FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.id(1)], '10 seconds', '2030-01-01 00:00:00+00')$$,
    $$SELECT key, payload, headers, created_at FROM before WHERE id = pg_temp.id(1)$$, 'key, payload, headers and created_at come back as sent');
SELECT is_empty($$SELECT * FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.x('u')], '10 seconds', '2030-01-01 00:00:00+00')$$,
    'an id of another queue is not claimed');
SELECT is((SELECT m.status FROM pgsweep.message m WHERE m.queue = 'u'), 'pending', 'and stays pending');

-- the cursor moves forward to the newest row taken, never back
SELECT is((SELECT c.id FROM pgsweep.claim_cursor c WHERE c.queue = 't'), pg_temp.id(4), 'the claim cursor moved to the newest row taken');
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim_ids('a0', ARRAY[pg_temp.id(3)], '10 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(3), 1)$$, 'claim row 3, older than the cursor');
SELECT is((SELECT c.id FROM pgsweep.claim_cursor c WHERE c.queue = 't'), pg_temp.id(4), 'a claim of an older row does not move the cursor back');
SELECT results_eq($$SELECT * FROM pgsweep.release('t', pg_temp.tok('a0'), ARRAY[pg_temp.id(3)])$$, $$VALUES (pg_temp.id(3))$$,
    'row 3 given back');

-- a live lease is never taken: the fence holds
DELETE FROM before; INSERT INTO before SELECT * FROM pgsweep.message;
SELECT is_empty($$SELECT * FROM pg_temp.claim_ids('b', ARRAY[pg_temp.id(2), pg_temp.id(4)], '10 seconds', '2030-01-01 00:00:09+00')$$,
    'rows whose lease is live are not claimed (9 s into a 10 s lease)');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'and nothing changed');
-- claim and claim_ids share the rows
SELECT results_eq($$SELECT id FROM pgsweep.claim('t', 'poller', 10, '10 seconds', '2030-01-01 00:00:05+00')$$,
    $$VALUES (pg_temp.id(3)), (pg_temp.id(5)), (pg_temp.id(6))$$, 'claim takes the rows claim_ids did not take (row 1 is held too)');
SELECT is_empty($$SELECT * FROM pg_temp.claim_ids('c', ARRAY[pg_temp.id(3), pg_temp.id(5)], '10 seconds', '2030-01-01 00:00:06+00')$$,
    'and claim_ids cannot take what claim holds');

-- an expired lease is taken over, with a new token; the old one is stale
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim_ids('d', ARRAY[pg_temp.id(2)], '10 seconds', '2030-01-01 00:00:11+00')$$,
    $$VALUES (pg_temp.id(2), 2)$$, 'an expired lease is claimed again (attempt 2)');
SELECT isnt(pg_temp.tok('d'), pg_temp.tok('a'), 'with a new token');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2)])$$, 'the old token completes nothing');
SELECT results_eq($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('d'), ARRAY[pg_temp.id(2)])$$, $$VALUES (pg_temp.id(2))$$,
    'the new token completes it');
SELECT is_empty($$SELECT * FROM pg_temp.claim_ids('e', ARRAY[pg_temp.id(2)], '10 seconds', '2030-01-01 00:00:30+00')$$,
    'a completed (deleted) message is not claimed');

-- a failed row waits for its retry (parked), then is claimed and unparked
SELECT results_eq($$SELECT id, dead FROM pgsweep.fail_details('t', pg_temp.tok('a'), ARRAY[pg_temp.id(4)], 'broker down', '1 minute', '2030-01-01 00:00:05+00')$$,
    $$VALUES (pg_temp.id(4), false)$$, 'row 4 fails, retry in a minute');
SELECT is((SELECT parked_until FROM pg_temp.row(4)), '2030-01-01 00:01:05+00'::timestamptz, 'row 4 is parked until its retry');
SELECT is_empty($$SELECT * FROM pg_temp.claim_ids('f', ARRAY[pg_temp.id(4)], '10 seconds', '2030-01-01 00:01:00+00')$$,
    'not before its retry is due');
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim_ids('g', ARRAY[pg_temp.id(4)], '10 seconds', '2030-01-01 00:01:05+00')$$,
    $$VALUES (pg_temp.id(4), 2)$$, 'claimed once due (attempt 2)');
SELECT results_eq($$SELECT status, parked_until FROM pg_temp.row(4)$$, $$VALUES ('processing'::text, NULL::timestamptz)$$,
    'processing, no longer parked');

-- a scheduled message is claimed only once due
INSERT INTO extra SELECT 's', pgsweep.send('t', '{"scheduled": true}', '{}', NULL, '2030-01-01 01:00:00+00');
SELECT is_empty($$SELECT * FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.x('s')], '10 seconds', '2030-01-01 00:59:59+00')$$,
    'a scheduled message is not claimed before its time');
SELECT is((SELECT m.parked_until FROM pgsweep.message m WHERE m.queue = 't' AND m.id = pg_temp.x('s')), '2030-01-01 01:00:00+00'::timestamptz,
    'and stays parked');
SELECT is((SELECT m.id FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.x('s')], '10 seconds', '2030-01-01 01:00:00+00') m), pg_temp.x('s'),
    'it is claimed at its time');
SELECT is((SELECT m.parked_until FROM pgsweep.message m WHERE m.queue = 't' AND m.id = pg_temp.x('s')), NULL, 'and unparked');

-- a row that used its last attempt is never handed out again
UPDATE pgsweep.message m SET attempt = 3, status = 'failed', owner = NULL, token = NULL, visible_at = '2030-01-01 00:00:00+00'
 WHERE m.queue = 't' AND m.id = pg_temp.id(6);
SELECT is_empty($$SELECT * FROM pg_temp.claim_ids('h', ARRAY[pg_temp.id(6)], '10 seconds', '2030-01-01 02:00:00+00')$$,
    'an exhausted row (attempt = max_attempts) is not claimed');

-- p_lease NULL: the queue's lease_default
SELECT pgsweep.queue_configure('t', '{"lease_default": "45 seconds"}');
SELECT is((SELECT c.lease_expires_at FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.id(5)], NULL, '2030-01-01 02:00:00+00') c),
    '2030-01-01 02:00:45+00'::timestamptz, 'p_lease NULL is the queue''s lease_default (row 5''s lease from claim had expired)');
INSERT INTO extra SELECT 'n', pgsweep.send('t', '{"now": true}');
SELECT is((SELECT c.lease_expires_at - clock_timestamp() < interval '45 seconds'
                  AND c.lease_expires_at - clock_timestamp() > interval '40 seconds'
             FROM pgsweep.claim_ids('t', 'relay-1', ARRAY[pg_temp.x('n')]) c), true,
    'the verb (the database clock, p_lease left out) claims a message sent now, for the lease_default');

-- dead_letter: the token's rows go to the dead letters at once
SELECT results_eq($$SELECT * FROM pgsweep.dead_letter('t', pg_temp.tok('g'), ARRAY[pg_temp.id(4), pg_temp.id(5)], 'message too large', '2030-01-01 03:00:00+00')$$,
    $$VALUES (pg_temp.id(4))$$, 'dead_letter acts on the rows its token holds only (row 5 is another claim''s)');
SELECT results_eq($$SELECT queue, key, payload, attempts, last_error, dead_at FROM pgsweep.message_dead WHERE id = pg_temp.id(4)$$,
    $$VALUES ('t'::text, NULL::text, '4'::jsonb, 2, 'message too large'::text, '2030-01-01 03:00:00+00'::timestamptz)$$,
    'row 4 is a dead letter with its attempts and the error, though it had an attempt left');
SELECT is_empty($$SELECT * FROM pgsweep.message m WHERE m.queue = 't' AND m.id = pg_temp.id(4)$$, 'and no longer a message');
SELECT is_empty($$SELECT * FROM pgsweep.dead_letter('t', gen_random_uuid(), ARRAY[pg_temp.id(5)], 'x')$$, 'a wrong token acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.dead_letter('t', pg_temp.tok('g'), ARRAY[pg_temp.id(4)], 'again')$$, 'nor does a spent one');
SELECT results_eq($$SELECT * FROM pgsweep.dead_requeue('t', ARRAY[pg_temp.id(4)])$$, $$VALUES (pg_temp.id(4))$$,
    'dead_requeue sends it back');

-- lanes: only a lane's head is claimable; a dead head moves its lane on
SELECT pgsweep.queue_create('l', 'outbox', 3);
INSERT INTO extra SELECT 'l' || row_number() OVER (), s
  FROM pgsweep.send_batch('l', ARRAY['"a1"', '"a2"', '"b1"']::jsonb[], NULL, NULL, NULL, ARRAY['a', 'a', 'b']) s;
SELECT is_empty($$SELECT * FROM pgsweep.claim_ids('l', 'relay-1', ARRAY[pg_temp.x('l2')])$$,
    'a message waiting behind its lane''s head is not claimed');
SELECT is((SELECT m.parked_until FROM pgsweep.message m WHERE m.queue = 'l' AND m.id = pg_temp.x('l2')), 'infinity'::timestamptz,
    'and keeps waiting');
CREATE TEMP TABLE lc AS SELECT * FROM pgsweep.claim_ids('l', 'relay-1', ARRAY[pg_temp.x('l1'), pg_temp.x('l2'), pg_temp.x('l3')]);
SELECT results_eq($$SELECT id, lane FROM lc ORDER BY id$$, $$VALUES (pg_temp.x('l1'), 'a'::text), (pg_temp.x('l3'), 'b'::text)$$,
    'the heads are claimed, with their lanes');
SELECT results_eq($$SELECT * FROM pgsweep.dead_letter('l', (SELECT DISTINCT token FROM lc), ARRAY[pg_temp.x('l1')], 'refused')$$,
    $$VALUES (pg_temp.x('l1'))$$, 'lane a''s head is dead-lettered');
SELECT is((SELECT lane FROM pgsweep.message_dead WHERE queue = 'l' AND id = pg_temp.x('l1')), 'a', 'the dead letter keeps its lane');
SELECT results_eq($$SELECT id, lane FROM pgsweep.claim_ids('l', 'relay-1', ARRAY[pg_temp.x('l2')])$$, $$VALUES (pg_temp.x('l2'), 'a'::text)$$,
    'the lane moved on (lane_dead move_on): its next message is claimable');
SELECT pgsweep.queue_pause('l');
INSERT INTO extra SELECT 'lp', pgsweep.send('l', '"c1"');
SELECT is_empty($$SELECT * FROM pgsweep.claim_ids('l', 'relay-1', ARRAY[pg_temp.x('lp')])$$, 'a paused queue hands out nothing');

-- bad arguments: 22023 naming the argument, nothing changed
DELETE FROM before; INSERT INTO before SELECT * FROM pgsweep.message;
CREATE TEMP TABLE cursor_before AS SELECT * FROM pgsweep.claim_cursor;
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', NULL, ARRAY[pg_temp.id(3)])$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got NULL', 'NULL owner');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', '', ARRAY[pg_temp.id(3)])$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'empty owner');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', repeat('x', 201), ARRAY[pg_temp.id(3)])$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got 201 characters', 'owner too long');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', NULL)$$, '22023', 'p_ids must hold 1 to 10000 ids, got NULL', 'NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'no ids');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', (SELECT array_agg(g::bigint) FROM generate_series(1, 10001) g))$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 10001', '10001 ids');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', ARRAY[pg_temp.id(3)], '999 milliseconds')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 0.999 seconds', 'lease too short');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', ARRAY[pg_temp.id(3)], '61 minutes')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 61 minutes', 'lease too long');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('nope', 'r', ARRAY[pg_temp.id(3)])$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids(NULL, 'r', ARRAY[pg_temp.id(3)])$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.dead_letter('t', NULL, ARRAY[pg_temp.id(3)], 'x')$$, '22023',
    'p_token must be the token claim returned, got NULL', 'dead_letter: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.dead_letter('t', gen_random_uuid(), '{}', 'x')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 0', 'dead_letter: no ids');
SELECT throws_ok($$SELECT * FROM pgsweep.dead_letter('nope', gen_random_uuid(), ARRAY[1::bigint], 'x')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'dead_letter: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim_ids('t', 'r', ARRAY[pg_temp.id(3)], '10 seconds', 'infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got infinity', 'p_now infinity');
SELECT throws_ok($$SELECT * FROM pgsweep.dead_letter('t', gen_random_uuid(), ARRAY[pg_temp.id(3)], 'x', '-infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got -infinity', 'dead_letter: p_now -infinity');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'the refused calls changed no message');
SELECT set_eq('SELECT * FROM pgsweep.claim_cursor', 'SELECT * FROM cursor_before', 'nor the cursor');

SELECT * FROM finish();
ROLLBACK;
