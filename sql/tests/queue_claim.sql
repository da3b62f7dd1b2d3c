-- pgTAP: claim, renew, complete, fail, dead letters, backoff, scheduled
-- delivery, queue_recover and queue_stats. Time is pinned through the p_now
-- overloads: messages are sent "now" and claimed at 2030-01-01 (T) and later.
-- renew/complete/fail take the token a claim returned: pg_temp.claim keeps
-- each claim's rows under a label, pg_temp.tok(label) is that claim's token.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(66);

SELECT pgsweep.queue_create('o', 'outbox', 3);
SELECT pgsweep.queue_configure('o', '{"backoff_base": "10 seconds", "backoff_max": "25 seconds"}');
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('o', ARRAY['1', '2', '3', '4', '5']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE TEMP TABLE claims (label text, id bigint, attempt int, lease_expires_at timestamptz, payload jsonb, token uuid);
CREATE FUNCTION pg_temp.claim(p_label text, p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, attempt int, lease_expires_at timestamptz, payload jsonb, token uuid) LANGUAGE sql AS $$
    WITH c AS (SELECT * FROM pgsweep.claim(p_queue, p_owner, p_batch, p_lease, p_now)),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.attempt, c.lease_expires_at, c.payload, c.token FROM c)
    SELECT c.id, c.attempt, c.lease_expires_at, c.payload, c.token FROM c
$$;
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;

-- claim: oldest first, batch size, lease, attempt
SELECT results_eq(
    $$SELECT id, attempt, lease_expires_at FROM pg_temp.claim('w1', 'o', 'w1', 2, '30 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(1), 1, '2030-01-01 00:00:30+00'::timestamptz), (pg_temp.id(2), 1, '2030-01-01 00:00:30+00')$$,
    'claim takes the oldest rows, sets attempt 1 and the lease');
SELECT results_eq($$SELECT status, owner, token FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(1)$$,
    $$VALUES ('processing'::text, 'w1'::text, pg_temp.tok('w1'))$$, 'claimed row is processing, labelled w1, carries the claim''s token');
SELECT results_eq(
    $$SELECT id FROM pg_temp.claim('w2', 'o', 'w2', 10, '30 seconds', '2030-01-01 00:00:01+00')$$,
    $$VALUES (pg_temp.id(3)), (pg_temp.id(4)), (pg_temp.id(5))$$,
    'a second claimer gets the rest; leased and scheduled rows are not due');
SELECT is((SELECT count(*) FROM pgsweep.claim('o', 'w3', 10, '30 seconds', '2030-01-01 00:00:02+00')), 0::bigint, 'nothing left to claim');
SELECT pgsweep.queue_create('s');
SELECT pgsweep.send('s', '"later"', '{}', NULL, '2030-01-01 00:01:00+00');
SELECT is_empty($$SELECT * FROM pgsweep.claim('s', 'w3', 10, '30 seconds', '2030-01-01 00:00:59+00')$$, 'a scheduled message is not due before its time');
SELECT results_eq($$SELECT payload FROM pgsweep.claim('s', 'w3', 10, '30 seconds', '2030-01-01 00:01:00+00')$$,
    $$VALUES ('"later"'::jsonb)$$, 'a scheduled message is claimable once due');
SELECT is((SELECT lease_default FROM pgsweep.queue WHERE name = 'o'), '30 seconds'::interval, 'lease_default');

-- renew: only the holder, returns the ids it acted on
SELECT results_eq($$SELECT * FROM pgsweep.renew('o', pg_temp.tok('w1'), ARRAY[pg_temp.id(1), pg_temp.id(3)], '1 minute', '2030-01-01 00:00:20+00')$$,
    $$VALUES (pg_temp.id(1))$$, 'renew acts only on rows the token''s claim holds');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(1)), '2030-01-01 00:01:20+00'::timestamptz, 'renew moves the lease');

-- takeover of an expired lease; the stale token acts on nothing
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('w4', 'o', 'w4', 1, '30 seconds', '2030-01-01 00:00:31+00')$$,
    $$VALUES (pg_temp.id(2), 2)$$, 'an expired lease is taken over, attempt 2');
SELECT is_empty($$SELECT * FROM pgsweep.complete('o', pg_temp.tok('w1'), ARRAY[pg_temp.id(2)], NULL)$$, 'stale token cannot complete');
SELECT is_empty($$SELECT * FROM pgsweep.fail('o', pg_temp.tok('w1'), ARRAY[pg_temp.id(2)], 'x')$$, 'stale token cannot fail');
SELECT is_empty($$SELECT * FROM pgsweep.renew('o', pg_temp.tok('w1'), ARRAY[pg_temp.id(2)], '30 seconds')$$, 'stale token cannot renew');
SELECT results_eq($$SELECT owner, attempt, token FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(2)$$,
    $$VALUES ('w4'::text, 2, pg_temp.tok('w4'))$$, 'the new claim still holds it');

-- complete (outbox): deleted
SELECT results_eq($$SELECT * FROM pgsweep.complete('o', pg_temp.tok('w2'), ARRAY[pg_temp.id(3), pg_temp.id(1)])$$,
    $$VALUES (pg_temp.id(3))$$, 'complete returns the ids it acted on');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(3)), 'completed outbox row is deleted');
SELECT is((SELECT count(*) FROM pgsweep.message_processed WHERE queue = 'o'), 0::bigint, 'outbox keeps no processed rows');

-- fail: exponential backoff (10s, 20s, capped at 25s), p_retry_after, dead letter
SELECT results_eq($$SELECT * FROM pgsweep.fail_details('o', pg_temp.tok('w2'), ARRAY[pg_temp.id(4)], 'boom', NULL, '2030-01-01 00:00:40+00')$$,
    $$VALUES (pg_temp.id(4), false)$$, 'fail on attempt 1 retries');
SELECT results_eq($$SELECT status, owner, token, visible_at, last_error FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)$$,
    $$VALUES ('failed'::text, NULL::text, NULL::uuid, '2030-01-01 00:00:50+00'::timestamptz, 'boom'::text)$$, 'backoff after attempt 1: base (10s), owner and token cleared');
SELECT is_empty($$SELECT * FROM pgsweep.claim('o', 'w2', 10, '30 seconds', '2030-01-01 00:00:49+00') WHERE id = pg_temp.id(4)$$, 'not claimable during backoff');
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('w2b', 'o', 'w2', 1, '30 seconds', '2030-01-01 00:00:50+00')$$,
    $$VALUES (pg_temp.id(4), 2)$$, 'claimable when the backoff ends');
SELECT is_empty($$SELECT * FROM pgsweep.fail('o', pg_temp.tok('w2'), ARRAY[pg_temp.id(4)], 'boom2', NULL)$$,
    'the same owner''s earlier token cannot fail its new claim');
SELECT results_eq($$SELECT * FROM pgsweep.fail('o', pg_temp.tok('w2b'), ARRAY[pg_temp.id(4)], 'boom2', NULL)$$,
    $$VALUES (pg_temp.id(4))$$, 'wall-clock fail works');
-- a claim is faked for the next steps: token f2 holds row 4
UPDATE pgsweep.message SET owner = 'w2', token = '00000000-0000-0000-0000-0000000000f2', status = 'processing', attempt = 2 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', '00000000-0000-0000-0000-0000000000f2', ARRAY[pg_temp.id(4)], 'boom2', NULL, '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:01:20+00'::timestamptz, 'backoff after attempt 2: 2 x base (20s)');
UPDATE pgsweep.message SET owner = 'w2', token = '00000000-0000-0000-0000-0000000000f2', status = 'processing', attempt = 2 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', '00000000-0000-0000-0000-0000000000f2', ARRAY[pg_temp.id(4)], 'later', '5 minutes', '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:06:00+00'::timestamptz, 'p_retry_after overrides the backoff');
SELECT pgsweep.queue_configure('o', '{"max_attempts": 5}');
UPDATE pgsweep.message SET owner = 'w2', token = '00000000-0000-0000-0000-0000000000f2', status = 'processing', attempt = 4 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', '00000000-0000-0000-0000-0000000000f2', ARRAY[pg_temp.id(4)], 'x', NULL, '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:01:25+00'::timestamptz, 'backoff is capped at backoff_max (25s)');
SELECT pgsweep.queue_configure('o', '{"max_attempts": 3}');

UPDATE pgsweep.message SET owner = 'w2', token = '00000000-0000-0000-0000-0000000000f2', status = 'processing', attempt = 3 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT results_eq($$SELECT * FROM pgsweep.fail_details('o', '00000000-0000-0000-0000-0000000000f2', ARRAY[pg_temp.id(4)], 'final', NULL, '2030-01-01 00:02:00+00')$$,
    $$VALUES (pg_temp.id(4), true)$$, 'fail on the last attempt dead-letters');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), 'dead row left the live table');
SELECT results_eq($$SELECT payload, headers, attempts, last_error, dead_at FROM pgsweep.message_dead WHERE queue = 'o' AND id = pg_temp.id(4)$$,
    $$VALUES ('4'::jsonb, '{}'::jsonb, 3, 'final'::text, '2030-01-01 00:02:00+00'::timestamptz)$$, 'dead letter keeps payload, headers, attempts, error, time');

-- an exhausted row is never handed out again; queue_recover dead-letters it
UPDATE pgsweep.message SET attempt = 3 WHERE queue = 'o' AND id = pg_temp.id(2); -- w4 holds its last attempt
SELECT is_empty($$SELECT * FROM pgsweep.claim('o', 'w5', 10, '30 seconds', '2030-01-01 01:00:00+00') WHERE id = pg_temp.id(2)$$,
    'a row whose lease expired on its last attempt is not claimed');
SELECT results_eq($$SELECT owner FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(2)$$, $$VALUES ('w4'::text)$$, 'it stays with its owner until recovery');

-- queue_recover on a fresh queue: expired leases released, exhausted rows dead-lettered, keyset traversal
SELECT pgsweep.queue_create('r', 'outbox', 2);
CREATE TEMP TABLE rids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('r', ARRAY['1', '2', '3', '4', '5', '6']::jsonb[]) s;
CREATE FUNCTION pg_temp.rid(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM rids WHERE rids.n = $1 $$;
SELECT is((SELECT count(*) FROM pg_temp.claim('a', 'r', 'a', 4, '10 seconds', '2030-01-01 00:00:00+00')), 4::bigint, 'a claims 1-4');
SELECT is((SELECT count(*) FROM pgsweep.claim('r', 'b', 1, '1 hour', '2030-01-01 00:00:00+00')), 1::bigint, 'b claims 5 for an hour');
UPDATE pgsweep.message SET attempt = 2 WHERE queue = 'r' AND id IN (pg_temp.rid(2), pg_temp.rid(4)); -- on their last attempt
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('r', 2, '2030-01-01 00:00:30+00')$$, $$VALUES (1, 1)$$,
    'recover pass 1 (batch 2): row 1 released, row 2 dead');
SELECT results_eq($$SELECT position, boundary FROM pgsweep.queue_recovery WHERE queue = 'r'$$,
    $$VALUES (pg_temp.rid(2), pg_temp.rid(6))$$, 'cursor after pass 1; boundary is the highest id at the start');
SELECT pgsweep.send('r', '"new"');
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('r', 2, '2030-01-01 00:00:30+00')$$, $$VALUES (1, 1)$$,
    'recover pass 2: row 3 released, row 4 dead (row 5 has a live lease, row 6 was never claimed)');
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('r', 2, '2030-01-01 00:00:30+00')$$, $$VALUES (0, 0)$$,
    'pass 3 finds nothing up to the boundary');
SELECT results_eq($$SELECT position, boundary FROM pgsweep.queue_recovery WHERE queue = 'r'$$,
    $$VALUES (0::bigint, NULL::bigint)$$, 'an empty pass wraps');
SELECT results_eq($$SELECT status, owner, attempt, last_error FROM pgsweep.message WHERE queue = 'r' AND id = pg_temp.rid(1)$$,
    $$VALUES ('failed'::text, NULL::text, 1, 'lease expired'::text)$$, 'a recovered row is released, attempt kept');
SELECT is_empty($$SELECT * FROM pgsweep.complete('r', pg_temp.tok('a'), ARRAY[pg_temp.rid(1)])$$, 'the old token cannot complete a recovered row');
SELECT is_empty($$SELECT * FROM pgsweep.renew('r', pg_temp.tok('a'), ARRAY[pg_temp.rid(1)], '1 minute')$$, 'nor renew it');
SELECT is_empty($$SELECT * FROM pgsweep.fail('r', pg_temp.tok('a'), ARRAY[pg_temp.rid(1)], 'late')$$, 'nor fail it');
SELECT is_empty($$SELECT * FROM pgsweep.release('r', pg_temp.tok('a'), ARRAY[pg_temp.rid(1)])$$, 'nor release it');
SELECT results_eq($$SELECT attempts, last_error FROM pgsweep.message_dead WHERE queue = 'r' AND id = pg_temp.rid(2)$$,
    $$VALUES (2, 'lease of a expired on the last attempt'::text)$$, 'exhausted expired row is a dead letter');
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('o', 100, '2030-01-01 01:00:00+00')$$, $$VALUES (0, 1)$$,
    'recover dead-letters the exhausted row of queue o');

-- inbox: complete keeps a processed row that goes on de-duplicating
SELECT pgsweep.queue_create('i', 'inbox', 2);
SELECT pgsweep.send('i', '{"k": 1}', '{"h": "x"}', 'msg-1');
SELECT pgsweep.send('i', '{"k": 2}');
CREATE TEMP TABLE iclaim AS SELECT * FROM pgsweep.claim('i', 'w', 10, '30 seconds', '2030-01-01 00:00:00+00');
SELECT is((SELECT count(*) FROM pgsweep.complete('i', (SELECT DISTINCT token FROM iclaim), ARRAY(SELECT id FROM iclaim), '2030-01-01 00:00:05+00')), 2::bigint, 'complete inbox rows');
SELECT results_eq($$SELECT key, payload, headers, attempts, processed_at FROM pgsweep.message_processed WHERE queue = 'i' AND key = 'msg-1'$$,
    $$VALUES ('msg-1'::text, '{"k": 1}'::jsonb, '{"h": "x"}'::jsonb, 1, '2030-01-01 00:00:05+00'::timestamptz)$$, 'processed inbox row kept');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'i'), 0::bigint, 'processed rows left the live table');
SELECT is(pgsweep.send('i', '{"k": 1}', '{}', 'msg-1'), NULL, 'a duplicate of a processed key returns NULL');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'i'), 0::bigint, 'and changes nothing');
DELETE FROM pgsweep.message_processed WHERE queue = 'i' AND key = 'msg-1'; -- what retention does
SELECT ok(pgsweep.send('i', '{"k": 1}', '{}', 'msg-1') IS NOT NULL, 'after retention removed the record the key is new again');

-- queue_stats
SELECT pgsweep.send('i', '"sched"', '{}', 'sched', now() + interval '1 day');
SELECT results_eq($$SELECT queue, kind, pending, processing, failed, processed, dead FROM pgsweep.queue_stats ORDER BY queue$$,
    $$VALUES ('i'::text, 'inbox'::text, 2::bigint, 0::bigint, 0::bigint, 1::bigint, 0::bigint),
             ('o', 'outbox', 0, 2, 0, 0, 2),
             ('r', 'outbox', 2, 1, 2, 0, 2),
             ('s', 'outbox', 0, 1, 0, 0, 0)$$, 'queue_stats counts each state per queue');
SELECT ok((SELECT oldest_pending_age >= interval '0' FROM pgsweep.queue_stats WHERE queue = 'i'), 'oldest_pending_age of a queue with a due row');

-- argument errors: 22023, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.message;
SELECT throws_ok($$SELECT * FROM pgsweep.claim('nope', 'w')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'claim: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', NULL)$$, '22023', 'p_owner must be a non-empty string of at most 200 characters, got NULL', 'claim: NULL owner');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w', 0)$$, '22023', 'p_batch must be between 1 and 10000, got 0', 'claim: batch 0');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w', 10001)$$, '22023', 'p_batch must be between 1 and 10000, got 10001', 'claim: batch 10001');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w', 10, '500 milliseconds')$$, '22023', 'p_lease must be between 1 second and 1 hour, got 0.5 seconds', 'claim: lease too short');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w', 10, '2 hours')$$, '22023', 'p_lease must be between 1 second and 1 hour, got 2 hours', 'claim: lease too long');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.tok('w4'), NULL, '1 minute')$$, '22023', 'p_ids must hold 1 to 10000 ids, got NULL', 'renew: NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', pg_temp.tok('w4'), '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'complete: empty ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', NULL, '{1}')$$, '22023', 'p_token must be the token claim returned, got NULL', 'complete: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('nope', pg_temp.tok('w4'), '{1}', 'e')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'fail: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.tok('w4'), '{1}', 'e', '-1 second')$$, '22023', 'p_retry_after must be between 0 seconds and 30 days, got -1 second', 'fail: negative retry_after');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', 0)$$, '22023', 'p_batch must be between 1 and 10000, got 0', 'recover: batch 0');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
