-- pgTAP: the claim cursor. Claims scan from the newest row any claim took;
-- a due row behind the cursor is taken at once by a claim that cannot fill
-- its batch from the cursor on, and otherwise by the first claim a second
-- after the last rescan (the queue's claim_rescan; 0 = every claim). Time is
-- pinned through p_now (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(18);

SELECT pgsweep.queue_create('c', 'outbox', 5);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('c', ARRAY['1', '2', '3', '4', '5', '6']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE FUNCTION pg_temp.claim(p_owner text, p_batch int, p_at text) RETURNS SETOF bigint LANGUAGE sql
AS $$ SELECT id FROM pgsweep.claim('c', p_owner, p_batch, '10 seconds', ('2030-01-01 00:00:00+00'::timestamptz + p_at::interval)) $$;
-- a lease that lapsed: the row is due again, behind the cursor
CREATE FUNCTION pg_temp.lapse(n int) RETURNS void LANGUAGE sql
AS $$ UPDATE pgsweep.message SET visible_at = '2030-01-01 00:00:00+00' WHERE queue = 'c' AND id = pg_temp.id(n) $$;

SELECT results_eq($$SELECT created_at, id, rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'c'$$,
    $$VALUES ('-infinity'::timestamptz, (-9223372036854775808)::bigint, '-infinity'::timestamptz)$$,
    'queue_create creates the cursor at the head, so first claims need not insert it');
SELECT results_eq($$SELECT * FROM pg_temp.claim('a', 2, '0')$$, $$VALUES (pg_temp.id(1)), (pg_temp.id(2))$$, 'the first claim scans from the head');
SELECT results_eq($$SELECT id, rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'c'$$,
    $$VALUES (pg_temp.id(2), '2030-01-01 00:00:00+00'::timestamptz)$$, 'the cursor is the newest row claimed; the first claim was a rescan');
SELECT results_eq($$SELECT * FROM pg_temp.claim('b', 2, '100 ms')$$, $$VALUES (pg_temp.id(3)), (pg_temp.id(4))$$, 'the next claim scans from the cursor');
SELECT results_eq($$SELECT id, rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'c'$$,
    $$VALUES (pg_temp.id(4), '2030-01-01 00:00:00+00'::timestamptz)$$, 'a claim from the cursor moves it forward and is no rescan');

-- Backlog: claims that fill their batch from the cursor leave a due row behind it waiting.
SELECT pg_temp.lapse(1);
SELECT results_eq($$SELECT * FROM pg_temp.claim('c', 2, '200 ms')$$, $$VALUES (pg_temp.id(5)), (pg_temp.id(6))$$,
    'a due row behind the cursor waits while claims fill their batch from the cursor');
-- A claim that cannot fill its batch from the cursor takes the rest from behind it.
SELECT pgsweep.send('c', '7');
SELECT results_eq($$SELECT * FROM pg_temp.claim('d', 2, '300 ms')$$, $$VALUES (pg_temp.id(1)), ((SELECT max(id) FROM pgsweep.message))$$,
    'a claim short of its batch takes due rows behind the cursor at once, oldest first');
SELECT results_eq($$SELECT id = (SELECT max(id) FROM pgsweep.message), rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'c'$$,
    $$VALUES (true, '2030-01-01 00:00:00.3+00'::timestamptz)$$, 'that claim counts as a rescan; the cursor stays at the newest row it took');

-- Otherwise the first claim a second after the last rescan scans from the head.
SELECT pg_temp.lapse(2);
SELECT pgsweep.send_batch('c', ARRAY['8', '9']::jsonb[]);
SELECT results_eq($$SELECT payload FROM pgsweep.claim('c', 'e', 1, '10 seconds', '2030-01-01 00:00:01.2+00')$$, $$VALUES ('8'::jsonb)$$,
    'within a second of the last rescan the cursor is trusted');
SELECT results_eq($$SELECT * FROM pg_temp.claim('e', 1, '1.3 s')$$, $$VALUES (pg_temp.id(2))$$,
    'a second after the last rescan a claim scans from the head again');
SELECT results_eq($$SELECT payload FROM pgsweep.claim('c', 'e', 1, '10 seconds', '2030-01-01 00:00:01.4+00')$$, $$VALUES ('9'::jsonb)$$,
    'after the rescan the cursor carries on');

-- A row committed late by a long transaction (created_at before the cursor).
INSERT INTO pgsweep.message (queue, payload, visible_at, created_at) VALUES ('c', '"late"', '2000-01-01', '2000-01-01');
SELECT results_eq($$SELECT payload FROM pgsweep.claim('c', 'f', 5, '10 seconds', '2030-01-01 00:00:01.5+00')$$, $$VALUES ('"late"'::jsonb)$$,
    'a row committed late behind the cursor is claimed once the rows after the cursor run out');
-- The clock moving back (a pinned p_now before the last rescan) distrusts the cursor.
SELECT pg_temp.lapse(3);
SELECT results_eq($$SELECT * FROM pg_temp.claim('g', 1, '0')$$, $$VALUES (pg_temp.id(3))$$, 'a claim dated before the last rescan scans from the head');

-- claim_rescan 0: every claim scans from the head, so a due row behind the
-- cursor is taken first even while batches fill (the exact order).
SELECT pgsweep.queue_create('x', 'outbox', 5);
SELECT is((SELECT claim_rescan FROM pgsweep.queue WHERE name = 'x'), '1 second'::interval, 'claim_rescan defaults to 1 second');
SELECT is((pgsweep.queue_configure('x', '{"claim_rescan": "0 seconds"}')).claim_rescan, '0'::interval, 'claim_rescan 0');
CREATE TEMP TABLE xids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('x', ARRAY['1', '2', '3', '4', '5']::jsonb[]) s;
SELECT count(*) FROM pgsweep.claim('x', 'a', 2, '10 seconds', '2030-01-01 00:00:00+00');
UPDATE pgsweep.message SET visible_at = '2030-01-01 00:00:00+00' WHERE queue = 'x' AND id = (SELECT id FROM xids WHERE n = 1);
SELECT results_eq($$SELECT id FROM pgsweep.claim('x', 'b', 2, '10 seconds', '2030-01-01 00:00:00.1+00')$$,
    $$SELECT id FROM xids WHERE n IN (1, 3) ORDER BY n$$, 'with claim_rescan 0 the lapsed row behind the cursor comes first while the batch fills');
SELECT throws_ok($$SELECT pgsweep.queue_configure('x', '{"claim_rescan": "2 minutes"}')$$, '22023',
    'claim_rescan must be between 0 seconds and 1 minute, got 2 minutes', 'claim_rescan out of range');

DELETE FROM pgsweep.message WHERE queue = 'c';
DELETE FROM pgsweep.queue WHERE name = 'c';
SELECT is_empty($$SELECT * FROM pgsweep.claim_cursor WHERE queue = 'c'$$, 'the cursor goes with its queue');

SELECT * FROM finish();
ROLLBACK;
