-- pgTAP: the queue operations (sql/functions/queue_ops.sql): pause and
-- resume, message_cancel, queue_purge, queue_drop; who may call them; bad
-- input refused with 22023 and nothing changed.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.retention_policy;
SET LOCAL client_min_messages = warning;
SELECT plan(44);

SELECT ok(has_function_privilege('pgsweep_admin', 'pgsweep.queue_pause(text)', 'EXECUTE')
      AND has_function_privilege('pgsweep_admin', 'pgsweep.queue_resume(text)', 'EXECUTE')
      AND has_function_privilege('pgsweep_admin', 'pgsweep.message_cancel(text, bigint[])', 'EXECUTE')
      AND has_function_privilege('pgsweep_admin', 'pgsweep.queue_purge(text)', 'EXECUTE')
      AND has_function_privilege('pgsweep_admin', 'pgsweep.queue_drop(text, boolean)', 'EXECUTE'), 'admin may run the queue operations');
SELECT ok(NOT has_function_privilege('pgsweep_worker', 'pgsweep.queue_pause(text)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep.message_cancel(text, bigint[])', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep.queue_purge(text)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep.queue_drop(text, boolean)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_monitor', 'pgsweep.queue_drop(text, boolean)', 'EXECUTE'), 'workers and monitors may not');
SELECT has_column('pgsweep', 'queue_stats', 'paused', 'queue_stats shows paused');
SELECT is((SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = 'pgsweep.queue_stats'::regclass AND attnum > 0),
    ARRAY['queue', 'kind', 'pending', 'processing', 'failed', 'processed', 'dead', 'oldest_pending_age', 'paused', 'lanes', 'blocked_lanes'],
    'queue_stats: the new columns come last');

SELECT pgsweep.queue_create('q', 'outbox', 2);
CREATE TEMP TABLE sent (name text PRIMARY KEY, id bigint);
CREATE FUNCTION pg_temp.id(p_name text) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM sent WHERE name = p_name $$;
CREATE FUNCTION pg_temp.send(p_q text, p_name text, p_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO sent SELECT p_name, pgsweep.send(p_q, to_jsonb(p_name), '{}', NULL, p_at, p_lane) RETURNING id $$;
CREATE FUNCTION pg_temp.ids(p_names text[]) RETURNS bigint[] LANGUAGE sql AS $$
    SELECT array_agg(pg_temp.id(n) ORDER BY pg_temp.id(n)) FROM unnest(p_names) n $$;

-- pause / resume
SELECT pg_temp.send('q', 'p1');
SELECT is(pgsweep.queue_pause('q'), true, 'queue_pause pauses a running queue');
SELECT is(pgsweep.queue_pause('q'), false, 'pausing it again changes nothing');
SELECT is((SELECT paused FROM pgsweep.queue_stats WHERE queue = 'q'), true, 'queue_stats shows it paused');
SELECT is_empty($$SELECT * FROM pgsweep.claim('q', 'w', 10)$$, 'claims of a paused queue return nothing');
SELECT isnt(pg_temp.send('q', 'p2'), NULL, 'sends to a paused queue work');
SELECT is((SELECT pending FROM pgsweep.queue_stats WHERE queue = 'q'), 2::bigint, 'both wait');
SELECT is(pgsweep.queue_resume('q'), true, 'queue_resume resumes it');
SELECT is(pgsweep.queue_resume('q'), false, 'resuming a running queue changes nothing');
SELECT is((SELECT paused FROM pgsweep.queue_stats WHERE queue = 'q'), false, 'queue_stats shows it running');
CREATE TEMP TABLE c1 AS SELECT * FROM pgsweep.claim('q', 'w', 10);
SELECT is((SELECT count(*) FROM c1), 2::bigint, 'claims take its messages again');

-- message_cancel: pending (due, scheduled) only
SELECT pg_temp.send('q', 'due');
SELECT pg_temp.send('q', 'later', now() + interval '1 day');
SELECT pg_temp.send('q', 'retry');
CREATE TEMP TABLE c2 AS SELECT * FROM pgsweep.claim('q', 'w', 10) WHERE id = pg_temp.id('retry');
SELECT is((SELECT count(*) FROM c2), 1::bigint, 'retry claimed (with due, which stays in flight under c2''s token)');
SELECT pgsweep.fail('q', (SELECT token FROM c2), ARRAY[pg_temp.id('retry')], 'boom');
SELECT is(ARRAY(SELECT pgsweep.message_cancel('q', ARRAY[pg_temp.id('p1'), pg_temp.id('later'), pg_temp.id('retry'), -1]) ORDER BY 1),
    pg_temp.ids(ARRAY['later']), 'message_cancel deletes the scheduled message; not one in flight (p1), nor one waiting for its retry, nor an unknown id');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE id = ANY (pg_temp.ids(ARRAY['p1', 'retry']))), 2::bigint, 'p1 and retry are still there');
SELECT is(ARRAY(SELECT pgsweep.message_cancel('q', ARRAY[pg_temp.id('later')])), '{}'::bigint[], 'cancelling it again does nothing');

-- bad input: 22023, nothing changed
CREATE TEMP TABLE before AS SELECT (SELECT count(*) FROM pgsweep.message) AS m, (SELECT count(*) FROM pgsweep.queue) AS q;
SELECT throws_ok($$SELECT pgsweep.message_cancel('q', NULL)$$, '22023', 'p_ids must hold 1 to 10000 ids, got NULL', 'message_cancel: NULL ids');
SELECT throws_ok($$SELECT pgsweep.message_cancel('q', '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'message_cancel: no ids');
SELECT throws_ok($$SELECT pgsweep.message_cancel('nope', ARRAY[1::bigint])$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"',
    'message_cancel: unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_pause('nope')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'queue_pause: unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_resume(NULL)$$, '22023', 'p_queue must be a non-empty string of at most 200 characters, got NULL', 'queue_resume: NULL');
SELECT throws_ok($$SELECT pgsweep.queue_purge('nope')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'queue_purge: unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_drop('nope')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'queue_drop: unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_drop('q', NULL)$$, '22023', 'p_force must be true or false, got NULL', 'queue_drop: NULL p_force');
SELECT results_eq($$SELECT (SELECT count(*) FROM pgsweep.message), (SELECT count(*) FROM pgsweep.queue)$$, $$SELECT m, q FROM before$$,
    'nothing changed');

-- queue_purge: pending (due, scheduled, waiting in a lane) only
SELECT pgsweep.queue_create('pq');
SELECT pg_temp.send('pq', 'm1', NULL, 'M');
SELECT pg_temp.send('pq', 'm2', NULL, 'M');
SELECT pg_temp.send('pq', 'f1');
CREATE TEMP TABLE c3 AS SELECT * FROM pgsweep.claim('pq', 'w', 10);
SELECT is((SELECT array_agg(id ORDER BY id) FROM c3), pg_temp.ids(ARRAY['m1', 'f1']), 'm1 (the head of lane M) and f1 in flight');
SELECT pgsweep.fail('pq', (SELECT DISTINCT token FROM c3), ARRAY[pg_temp.id('f1')], 'boom', '1 hour');
SELECT pg_temp.send('pq', 'sched', now() + interval '1 hour');
SELECT pg_temp.send('pq', 'l1', NULL, 'L');
SELECT pg_temp.send('pq', 'l2', NULL, 'L');
SELECT pg_temp.send('pq', 'u1');
SELECT is(pgsweep.queue_purge('pq'), 5::bigint, 'queue_purge deletes the pending messages: m2 behind m1, sched, l1, l2, u1');
SELECT is((SELECT array_agg(id ORDER BY id) FROM pgsweep.message WHERE queue = 'pq'), pg_temp.ids(ARRAY['m1', 'f1']),
    'm1 (in flight) and f1 (waiting for its retry) stay');
SELECT results_eq($$SELECT name FROM pgsweep.lane WHERE queue = 'pq'$$, $$VALUES ('M'::text)$$,
    'lane L is gone with its messages; lane M keeps its head in flight');
SELECT is(pgsweep.queue_purge('pq'), 0::bigint, 'purging again deletes nothing');

-- queue_drop: refused while in flight, unless p_force; an expired lease is not in flight
SELECT pgsweep.queue_create('d', 'inbox');
SELECT pgsweep.retention_builtin_sync();
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name IN ('pgsweep.processed:d', 'pgsweep.dead:d')), 2::bigint,
    'queue d has its built-in retention policies');
SELECT pg_temp.send('d', 'd1');
SELECT pg_temp.send('d', 'd2', NULL, 'X');
CREATE TEMP TABLE c4 AS SELECT * FROM pgsweep.claim('d', 'w', 1, '1 minute');
SELECT throws_ok($$SELECT pgsweep.queue_drop('d')$$, '55006', 'queue "d" has 1 message(s) in flight; stop its workers first, or drop it anyway with p_force',
    'queue_drop refuses while a message is in flight');
SELECT results_eq($$SELECT (SELECT count(*) FROM pgsweep.message WHERE queue = 'd'), (SELECT count(*) FROM pgsweep.queue WHERE name = 'd'),
                           (SELECT count(*) FROM pgsweep.lane WHERE queue = 'd')$$,
    $$VALUES (2::bigint, 1::bigint, 1::bigint)$$, 'nothing was dropped');
UPDATE pgsweep.message SET visible_at = now() - interval '1 second' WHERE queue = 'd' AND status = 'processing';
SELECT is(pgsweep.queue_drop('d'), 2::bigint, 'a message whose lease expired is not in flight: dropped, 2 live messages deleted');
SELECT is((SELECT count(*) FROM pgsweep.queue WHERE name = 'd'), 0::bigint, 'the queue is gone');
SELECT is((SELECT count(*) FROM pgsweep.lane WHERE queue = 'd') + (SELECT count(*) FROM pgsweep.claim_cursor WHERE queue = 'd')
          + (SELECT count(*) FROM pgsweep.message WHERE queue = 'd'), 0::bigint, 'with its lanes, claim cursor and messages');
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name IN ('pgsweep.processed:d', 'pgsweep.dead:d')), 0::bigint,
    'and its built-in retention policies');
SELECT throws_ok($$SELECT pgsweep.queue_drop('q')$$, '55006', NULL, 'q has messages in flight');
INSERT INTO pgsweep.message_processed (queue, id, key, payload, headers, attempts, created_at, processed_at)
VALUES ('q', -1, NULL, '{}', '{}', 1, now(), now());
INSERT INTO pgsweep.message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
VALUES ('q', -2, NULL, '{}', '{}', 1, 'x', now(), now());
SELECT is(pgsweep.queue_drop('q', p_force => true), 4::bigint, 'p_force drops it anyway');
SELECT is((SELECT count(*) FROM pgsweep.message_processed WHERE queue = 'q') + (SELECT count(*) FROM pgsweep.message_dead WHERE queue = 'q'),
    0::bigint, 'processed rows and dead letters go with it');
SELECT throws_ok($$SELECT pgsweep.complete('q', (SELECT DISTINCT token FROM c1), ARRAY[pg_temp.id('p1')])$$, '22023',
    'p_queue must name an existing queue, got unknown queue "q"', 'a late completion of a dropped queue''s message: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('q', 'w', 10)$$, '22023', 'p_queue must name an existing queue, got unknown queue "q"', 'claims of a dropped queue: unknown queue');

SELECT * FROM finish();
ROLLBACK;
