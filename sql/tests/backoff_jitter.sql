-- pgTAP: backoff_jitter shortens a fail call's retry delay by a random share
-- in [0, backoff_jitter]; 0 (the default) keeps the exact backoff, and an
-- explicit p_retry_after is never jittered. Time is pinned (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(8);

SELECT pgsweep.queue_create('j', 'outbox', 5);
SELECT is((SELECT backoff_jitter FROM pgsweep.queue WHERE name = 'j'), 0::double precision, 'backoff_jitter defaults to 0');
SELECT is((pgsweep.queue_configure('j', '{"backoff_base": "10 seconds", "backoff_max": "1 hour", "backoff_jitter": 0.5}')).backoff_jitter,
    0.5::double precision, 'backoff_jitter 0.5');
SELECT count(*) FROM pgsweep.send_batch('j', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 40)));
SELECT count(*) FROM pgsweep.claim('j', 'w', 40, '1 minute', '2030-01-01 00:00:00+00');
-- 40 fail calls, one message each, all at T: attempt 1, delay 10 s, jittered into [5 s, 10 s]
CREATE TEMP TABLE due AS
SELECT f.id FROM pgsweep.message m, LATERAL pgsweep.fail_details('j', m.token, ARRAY[m.id], 'boom', NULL, '2030-01-01 00:00:00+00') f
 WHERE m.queue = 'j';
SELECT is((SELECT count(*) FROM due), 40::bigint, 'forty messages failed in forty calls');
SELECT ok((SELECT bool_and(visible_at BETWEEN '2030-01-01 00:00:05+00' AND '2030-01-01 00:00:10+00') FROM pgsweep.message WHERE queue = 'j'),
    'every retry is due between half the delay and the delay');
SELECT ok((SELECT count(DISTINCT visible_at) FROM pgsweep.message WHERE queue = 'j') > 10,
    'the retries are spread out, not all at one moment');

-- an explicit retry_after is the caller's choice: not jittered
CREATE TEMP TABLE c2 AS SELECT * FROM pgsweep.claim('j', 'w', 1, '1 minute', '2030-01-01 00:00:20+00');
SELECT results_eq($$SELECT m.visible_at FROM pgsweep.message m
                     JOIN pgsweep.fail_details('j', (SELECT token FROM c2), (SELECT array_agg(id) FROM c2),
                                               'later', '1 minute', '2030-01-01 00:00:20+00') f ON f.id = m.id$$,
    $$VALUES ('2030-01-01 00:01:20+00'::timestamptz)$$, 'p_retry_after is exact');

-- out of range: 22023 naming the setting and its range, nothing changed
SELECT throws_ok($$SELECT pgsweep.queue_configure('j', '{"backoff_jitter": 1.5}')$$, '22023',
    'backoff_jitter must be a number between 0 and 1, got 1.5', 'backoff_jitter above 1');
SELECT throws_ok($$SELECT pgsweep.queue_configure('j', '{"backoff_jitter": "lots"}')$$, '22023', 'backoff_jitter must be a number between 0 and 1, got "lots"', 'backoff_jitter not a number');

SELECT * FROM finish();
ROLLBACK;
