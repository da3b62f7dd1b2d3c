-- pgTAP: claim, renew, complete, fail, dead letters, backoff, scheduled
-- delivery, queue_recover and queue_stats. Time is pinned through the p_now
-- overloads: messages are sent "now" and claimed at 2030-01-01 (T) and later.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(62);

SELECT pgsweep.queue_create('o', 'outbox', 3);
SELECT pgsweep.queue_configure('o', '{"backoff_base": "10 seconds", "backoff_max": "25 seconds"}');
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('o', ARRAY['1', '2', '3', '4', '5']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;

-- claim: oldest first, batch size, lease, attempt
SELECT results_eq(
    $$SELECT id, attempt, lease_expires_at FROM pgsweep.claim('o', 'w1', 2, '30 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(1), 1, '2030-01-01 00:00:30+00'::timestamptz), (pg_temp.id(2), 1, '2030-01-01 00:00:30+00')$$,
    'claim takes the oldest rows, sets attempt 1 and the lease');
SELECT results_eq($$SELECT status, owner FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(1)$$,
    $$VALUES ('processing'::text, 'w1'::text)$$, 'claimed row is processing, owned by w1');
SELECT results_eq(
    $$SELECT id FROM pgsweep.claim('o', 'w2', 10, '30 seconds', '2030-01-01 00:00:01+00')$$,
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
SELECT results_eq($$SELECT * FROM pgsweep.renew('o', 'w1', ARRAY[pg_temp.id(1), pg_temp.id(3)], '1 minute', '2030-01-01 00:00:20+00')$$,
    $$VALUES (pg_temp.id(1))$$, 'renew acts only on rows the owner holds');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(1)), '2030-01-01 00:01:20+00'::timestamptz, 'renew moves the lease');

-- takeover of an expired lease; the stale owner acts on nothing
SELECT results_eq($$SELECT id, attempt FROM pgsweep.claim('o', 'w4', 1, '30 seconds', '2030-01-01 00:00:31+00')$$,
    $$VALUES (pg_temp.id(2), 2)$$, 'an expired lease is taken over, attempt 2');
SELECT is_empty($$SELECT * FROM pgsweep.complete('o', 'w1', ARRAY[pg_temp.id(2)], NULL)$$, 'stale owner cannot complete');
SELECT is_empty($$SELECT * FROM pgsweep.fail('o', 'w1', ARRAY[pg_temp.id(2)], 'x')$$, 'stale owner cannot fail');
SELECT is_empty($$SELECT * FROM pgsweep.renew('o', 'w1', ARRAY[pg_temp.id(2)], '30 seconds')$$, 'stale owner cannot renew');
SELECT results_eq($$SELECT owner, attempt FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(2)$$,
    $$VALUES ('w4'::text, 2)$$, 'the new owner still holds it');

-- complete (outbox): deleted
SELECT results_eq($$SELECT * FROM pgsweep.complete('o', 'w2', ARRAY[pg_temp.id(3), pg_temp.id(1)])$$,
    $$VALUES (pg_temp.id(3))$$, 'complete returns the ids it acted on');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(3)), 'completed outbox row is deleted');
SELECT is((SELECT count(*) FROM pgsweep.message_processed WHERE queue = 'o'), 0::bigint, 'outbox keeps no processed rows');

-- fail: exponential backoff (10s, 20s, capped at 25s), p_retry_after, dead letter
SELECT results_eq($$SELECT * FROM pgsweep.fail_details('o', 'w2', ARRAY[pg_temp.id(4)], 'boom', NULL, '2030-01-01 00:00:40+00')$$,
    $$VALUES (pg_temp.id(4), false)$$, 'fail on attempt 1 retries');
SELECT results_eq($$SELECT status, owner, visible_at, last_error FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)$$,
    $$VALUES ('failed'::text, NULL::text, '2030-01-01 00:00:50+00'::timestamptz, 'boom'::text)$$, 'backoff after attempt 1: base (10s)');
SELECT is_empty($$SELECT * FROM pgsweep.claim('o', 'w2', 10, '30 seconds', '2030-01-01 00:00:49+00') WHERE id = pg_temp.id(4)$$, 'not claimable during backoff');
SELECT results_eq($$SELECT id, attempt FROM pgsweep.claim('o', 'w2', 1, '30 seconds', '2030-01-01 00:00:50+00')$$,
    $$VALUES (pg_temp.id(4), 2)$$, 'claimable when the backoff ends');
SELECT lives_ok($$SELECT pgsweep.fail('o', 'w2', ARRAY[pg_temp.id(4)], 'boom2', NULL)$$, 'wall-clock fail works');
UPDATE pgsweep.message SET owner = 'w2', status = 'processing', attempt = 2 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', 'w2', ARRAY[pg_temp.id(4)], 'boom2', NULL, '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:01:20+00'::timestamptz, 'backoff after attempt 2: 2 x base (20s)');
UPDATE pgsweep.message SET owner = 'w2', status = 'processing', attempt = 2 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', 'w2', ARRAY[pg_temp.id(4)], 'later', '5 minutes', '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:06:00+00'::timestamptz, 'p_retry_after overrides the backoff');
SELECT pgsweep.queue_configure('o', '{"max_attempts": 5}');
UPDATE pgsweep.message SET owner = 'w2', status = 'processing', attempt = 4 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT pgsweep.fail_details('o', 'w2', ARRAY[pg_temp.id(4)], 'x', NULL, '2030-01-01 00:01:00+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(4)), '2030-01-01 00:01:25+00'::timestamptz, 'backoff is capped at backoff_max (25s)');
SELECT pgsweep.queue_configure('o', '{"max_attempts": 3}');

UPDATE pgsweep.message SET owner = 'w2', status = 'processing', attempt = 3 WHERE queue = 'o' AND id = pg_temp.id(4);
SELECT results_eq($$SELECT * FROM pgsweep.fail_details('o', 'w2', ARRAY[pg_temp.id(4)], 'final', NULL, '2030-01-01 00:02:00+00')$$,
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
SELECT is((SELECT count(*) FROM pgsweep.claim('r', 'a', 4, '10 seconds', '2030-01-01 00:00:00+00')), 4::bigint, 'a claims 1-4');
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
SELECT is_empty($$SELECT * FROM pgsweep.complete('r', 'a', ARRAY[pg_temp.rid(1)])$$, 'the old owner cannot complete a recovered row');
SELECT results_eq($$SELECT attempts, last_error FROM pgsweep.message_dead WHERE queue = 'r' AND id = pg_temp.rid(2)$$,
    $$VALUES (2, 'lease of a expired on the last attempt'::text)$$, 'exhausted expired row is a dead letter');
SELECT results_eq($$SELECT * FROM pgsweep.queue_recover('o', 100, '2030-01-01 01:00:00+00')$$, $$VALUES (0, 1)$$,
    'recover dead-letters the exhausted row of queue o');

-- inbox: complete keeps a processed row that goes on de-duplicating
SELECT pgsweep.queue_create('i', 'inbox', 2);
SELECT pgsweep.send('i', '{"k": 1}', '{"h": "x"}', 'msg-1');
SELECT pgsweep.send('i', '{"k": 2}');
CREATE TEMP TABLE iclaim AS SELECT * FROM pgsweep.claim('i', 'w', 10, '30 seconds', '2030-01-01 00:00:00+00');
SELECT is((SELECT count(*) FROM pgsweep.complete('i', 'w', ARRAY(SELECT id FROM iclaim), '2030-01-01 00:00:05+00')), 2::bigint, 'complete inbox rows');
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
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', 'w', NULL, '1 minute')$$, '22023', 'p_ids must hold 1 to 10000 ids, got NULL', 'renew: NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', 'w', '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'complete: empty ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', '', '{1}')$$, '22023', 'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'complete: empty owner');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('nope', 'w', '{1}', 'e')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'fail: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', 'w', '{1}', 'e', '-1 second')$$, '22023', 'p_retry_after must be between 0 seconds and 30 days, got -1 second', 'fail: negative retry_after');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', 0)$$, '22023', 'p_batch must be between 1 and 10000, got 0', 'recover: batch 0');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
