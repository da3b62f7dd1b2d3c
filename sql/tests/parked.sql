-- pgTAP: which rows are parked (parked_until set, out of the claim index) and
-- when they come back: scheduled sends, retries in backoff and delayed
-- requeues are parked; due rows and leases never are; the first claim after
-- the due time promotes them. Time is pinned (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(12);

SELECT pgsweep.queue_create('p', 'outbox', 2);
SELECT pgsweep.queue_configure('p', '{"backoff_base": "10 seconds", "backoff_max": "10 seconds"}');
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('p', ARRAY['1', '2', '3']::jsonb[], NULL, NULL,
                          ARRAY[NULL, '2030-01-01 00:00:00+00', NULL]::timestamptz[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE FUNCTION pg_temp.parked(n int) RETURNS timestamptz LANGUAGE sql AS $$
    SELECT parked_until FROM pgsweep.message WHERE queue = 'p' AND id = pg_temp.id(n) $$;

SELECT is(pg_temp.parked(1), NULL, 'a message due now is not parked');
SELECT is(pg_temp.parked(2), '2030-01-01 00:00:00+00'::timestamptz, 'a scheduled message is parked until its time');
SELECT pgsweep.queue_create('p2');
SELECT pgsweep.send('p2', '"later"', '{}', NULL, now() + interval '1 hour');
SELECT ok((SELECT parked_until > now() FROM pgsweep.message WHERE queue = 'p2'), 'send with p_deliver_at in the future parks');

-- claims at T: the scheduled one is promoted and claimed with the others
CREATE TEMP TABLE claims (label text, id bigint, token uuid);
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;
SELECT results_eq($$WITH c AS (SELECT * FROM pgsweep.claim('p', 'w', 10, '30 seconds', '2030-01-01 00:00:00+00')),
                          i AS (INSERT INTO claims SELECT 'w', c.id, c.token FROM c)
                     SELECT id FROM c ORDER BY id$$,
    $$SELECT id FROM ids ORDER BY id$$, 'the claim at its time promotes the scheduled message and takes it');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'p' AND owner = 'w' AND parked_until IS NOT NULL), 0::bigint, 'leases are never parked');

-- fail with a backoff parks; a retry due at once does not
SELECT count(*) FROM pgsweep.fail_details('p', pg_temp.tok('w'), ARRAY[pg_temp.id(1)], 'boom', NULL, '2030-01-01 00:00:01+00');
SELECT is(pg_temp.parked(1), '2030-01-01 00:00:11+00'::timestamptz, 'a retry in backoff is parked until it is due');
SELECT count(*) FROM pgsweep.fail_details('p', pg_temp.tok('w'), ARRAY[pg_temp.id(3)], 'boom', '0 seconds', '2030-01-01 00:00:01+00');
SELECT is(pg_temp.parked(3), NULL, 'a retry due at once is not parked');
SELECT is_empty($$SELECT * FROM pgsweep.claim('p', 'w2', 10, '30 seconds', '2030-01-01 00:00:10+00') WHERE id = pg_temp.id(1)$$,
    'not claimed (nor promoted) before its due time');
SELECT is(pg_temp.parked(1), '2030-01-01 00:00:11+00'::timestamptz, 'still parked');
SELECT results_eq($$WITH c AS (SELECT * FROM pgsweep.claim('p', 'w2', 10, '30 seconds', '2030-01-01 00:00:11+00')),
                          i AS (INSERT INTO claims SELECT 'w2', c.id, c.token FROM c)
                     SELECT id FROM c WHERE id = pg_temp.id(1)$$,
    $$VALUES (pg_temp.id(1))$$, 'promoted and claimed once due');

-- a dead letter requeued for later is parked
SELECT count(*) FROM pgsweep.fail_details('p', pg_temp.tok('w2'), ARRAY[pg_temp.id(1)], 'final', NULL, '2030-01-01 00:00:12+00');
SELECT results_eq($$SELECT * FROM pgsweep.dead_requeue('p', ARRAY[pg_temp.id(1)], now() + interval '1 day')$$,
    $$VALUES (pg_temp.id(1))$$, 'requeued for tomorrow');
SELECT ok(pg_temp.parked(1) > now(), 'a dead letter requeued for later is parked');

SELECT * FROM finish();
ROLLBACK;
