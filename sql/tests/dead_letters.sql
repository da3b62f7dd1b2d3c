-- pgTAP: dead letters keep de-duplicating inbox keys (send and send_batch
-- refuse them), and dead_requeue sends dead letters back to their queue.
-- Time is pinned through the p_now overloads (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(25);

SELECT has_function('pgsweep', 'dead_requeue', ARRAY['text', 'bigint[]', 'timestamp with time zone'], 'dead_requeue(text, bigint[], timestamptz)');
SELECT has_index('pgsweep', 'message_dead', 'message_dead_key', ARRAY['queue', 'key'], 'dead letters are found by key');

-- the token of the claim that holds the rows p_ids of p_queue
CREATE FUNCTION pg_temp.tok(p_queue text, p_ids bigint[]) RETURNS uuid LANGUAGE sql AS $$
    SELECT DISTINCT token FROM pgsweep.message WHERE queue = p_queue AND id = ANY (p_ids) $$;

-- an inbox message with one attempt dies on its first failure
SELECT pgsweep.queue_create('in', 'inbox', 1);
CREATE TEMP TABLE ids AS SELECT pgsweep.send('in', '{"v": 1}', '{"h": "x"}', 'k-1') AS id;
SELECT results_eq($$SELECT id FROM pgsweep.claim('in', 'w1', 10, '30 seconds', '2030-01-01 00:00:00+00')$$,
    $$SELECT id FROM ids$$, 'claimed');
SELECT results_eq($$SELECT id, dead FROM pgsweep.fail_details('in', pg_temp.tok('in', (SELECT array_agg(id) FROM ids)), (SELECT array_agg(id) FROM ids), 'broken', NULL, '2030-01-01 00:00:01+00')$$,
    $$SELECT id, true FROM ids$$, 'the only attempt failed: dead');

-- the dead letter holds its key
SELECT is(pgsweep.send('in', '{"v": 2}', '{}', 'k-1'), NULL, 'send: a dead key is a duplicate');
SELECT is((SELECT array_agg(x IS NULL ORDER BY o) FROM pgsweep.send_batch('in', ARRAY['1', '2']::jsonb[], NULL, ARRAY['k-1', 'k-2']) WITH ORDINALITY AS b(x, o)),
    ARRAY[true, false], 'send_batch: a dead key is a duplicate, a new key is not');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'in' AND key = 'k-1'), 0::bigint, 'the duplicates added no live row');
SELECT pgsweep.queue_create('out');
SELECT pgsweep.send('out', '"o"', '{}', 'k-1');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'out' AND key = 'k-1'), 1::bigint, 'outbox keys are not de-duplicated');

-- dead_requeue: back to pending with a fresh set of attempts
SELECT results_eq($$SELECT * FROM pgsweep.dead_requeue('in', (SELECT array_agg(id) FROM ids))$$,
    $$SELECT id FROM ids$$, 'dead_requeue returns the ids it requeued');
SELECT ok(NOT EXISTS (SELECT 1 FROM pgsweep.message_dead WHERE queue = 'in' AND key = 'k-1'), 'the dead letter is gone');
SELECT results_eq($$SELECT id, key, dedup, payload, headers, status, attempt, owner, last_error FROM pgsweep.message WHERE queue = 'in' AND key = 'k-1'$$,
    $$SELECT id, 'k-1'::text, true, '{"v": 1}'::jsonb, '{"h": "x"}'::jsonb, 'pending'::text, 0, NULL::text, 'broken'::text FROM ids$$,
    'requeued row: same id, key, payload and headers; pending, attempt 0, last error kept');
SELECT is(pgsweep.send('in', '{"v": 3}', '{}', 'k-1'), NULL, 'the requeued live row still holds the key');
SELECT results_eq($$SELECT id, attempt FROM pgsweep.claim('in', 'w2', 10, '30 seconds', '2030-01-01 00:01:00+00') WHERE key = 'k-1'$$,
    $$SELECT id, 1 FROM ids$$, 'the requeued message is claimed again, attempt 1');
SELECT is_empty($$SELECT * FROM pgsweep.dead_requeue('in', (SELECT array_agg(id) FROM ids))$$, 'requeueing a live message does nothing');
SELECT results_eq($$SELECT * FROM pgsweep.complete('in', pg_temp.tok('in', (SELECT array_agg(id) FROM ids)), (SELECT array_agg(id) FROM ids), '2030-01-01 00:01:01+00')$$,
    $$SELECT id FROM ids$$, 'and completed');

-- p_deliver_at schedules the requeued message
SELECT pgsweep.queue_create('o1', 'outbox', 1);
CREATE TEMP TABLE oid AS SELECT pgsweep.send('o1', '"x"') AS id;
SELECT count(*) FROM pgsweep.claim('o1', 'w', 1, '30 seconds', '2030-01-01 00:00:00+00');
SELECT count(*) FROM pgsweep.fail('o1', pg_temp.tok('o1', (SELECT array_agg(id) FROM oid)), (SELECT array_agg(id) FROM oid), 'e');
SELECT results_eq($$SELECT * FROM pgsweep.dead_requeue('o1', (SELECT array_agg(id) FROM oid), '2030-01-01 01:00:00+00')$$,
    $$SELECT id FROM oid$$, 'outbox dead letter requeued for later');
SELECT is_empty($$SELECT * FROM pgsweep.claim('o1', 'w', 10, '30 seconds', '2030-01-01 00:59:59+00')$$, 'not due before p_deliver_at');
SELECT results_eq($$SELECT id FROM pgsweep.claim('o1', 'w', 10, '30 seconds', '2030-01-01 01:00:00+00')$$,
    $$SELECT id FROM oid$$, 'due at p_deliver_at');

-- a dead letter whose key a live row holds (rows that died before 0.6) stays dead
INSERT INTO pgsweep.message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
VALUES ('in', 9000000001, 'k-2', '"old"', '{}', 1, 'old', '2029-01-01', '2029-01-02');
SELECT is_empty($$SELECT * FROM pgsweep.dead_requeue('in', ARRAY[9000000001::bigint])$$, 'a dead letter whose key is live is not requeued');
SELECT ok(EXISTS (SELECT 1 FROM pgsweep.message_dead WHERE queue = 'in' AND id = 9000000001), 'and stays a dead letter');

-- argument errors change nothing
CREATE TEMP TABLE dead_before AS SELECT * FROM pgsweep.message_dead;
SELECT throws_ok($$SELECT pgsweep.dead_requeue('nope', ARRAY[1::bigint])$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'dead_requeue: unknown queue');
SELECT throws_ok($$SELECT pgsweep.dead_requeue('in', NULL)$$, '22023', 'p_ids must hold 1 to 10000 ids, got NULL', 'dead_requeue: NULL ids');
SELECT throws_ok($$SELECT pgsweep.dead_requeue('in', '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'dead_requeue: empty ids');
SELECT throws_ok($$SELECT pgsweep.dead_requeue(NULL, ARRAY[9000000001::bigint])$$, '22023', 'p_queue must be a non-empty string of at most 200 characters, got NULL', 'dead_requeue: NULL queue');
SELECT set_eq('SELECT * FROM pgsweep.message_dead', 'SELECT * FROM dead_before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
