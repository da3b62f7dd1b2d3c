-- pgTAP: claims are fenced by their token. claim returns a fresh, random
-- token per call, the same for every row of the call; renew, complete, fail,
-- fail_details and release act only on rows whose current claim carries the
-- token they are given. A stale token -- the lease expired and the row was
-- claimed again, by anyone, the same owner included -- or a wrong one acts on
-- nothing and changes nothing. Time is pinned (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(45);

SELECT has_function('pgsweep', 'claim', ARRAY['text', 'text', 'integer', 'interval'], 'claim(text, text, int, interval)');
SELECT has_function('pgsweep', 'renew', ARRAY['text', 'uuid', 'bigint[]', 'interval'], 'renew(text, uuid, bigint[], interval)');
SELECT has_function('pgsweep', 'complete', ARRAY['text', 'uuid', 'bigint[]'], 'complete(text, uuid, bigint[])');
SELECT has_function('pgsweep', 'fail', ARRAY['text', 'uuid', 'bigint[]', 'text', 'interval'], 'fail(text, uuid, bigint[], text, interval)');
SELECT has_function('pgsweep', 'release', ARRAY['text', 'uuid', 'bigint[]'], 'release(text, uuid, bigint[])');
SELECT is((SELECT array_agg(p.proname || '/' || p.pronargs ORDER BY p.proname, p.pronargs)
             FROM pg_proc p
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.prosecdef
              AND (p.proname, p.pronargs) IN (('claim', 4), ('renew', 4), ('complete', 3), ('fail', 5), ('release', 3), ('fail_details', 5))),
    ARRAY['claim/4', 'complete/3', 'fail/5', 'fail_details/5', 'release/3', 'renew/4'],
    'the verbs are SECURITY DEFINER');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                       WHERE i.indrelid = 'pgsweep.message'::regclass AND a.attname = 'token'),
    'no index holds message.token: claims stay HOT updates');

SELECT pgsweep.queue_create('t', 'outbox', 5);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('t', ARRAY['1', '2', '3', '4', '5']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
-- every claim's rows, under a label; pg_temp.tok(label) is its token
CREATE TEMP TABLE claims (label text, id bigint, attempt int, token uuid);
CREATE FUNCTION pg_temp.claim(p_label text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, attempt int) LANGUAGE sql AS $$
    WITH c AS (SELECT * FROM pgsweep.claim('t', p_owner, p_batch, p_lease, p_now)),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.attempt, c.token FROM c)
    SELECT c.id, c.attempt FROM c
$$;
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;
CREATE FUNCTION pg_temp.row(n int) RETURNS TABLE (status text, owner text, attempt int, visible_at timestamptz, token uuid) LANGUAGE sql AS $$
    SELECT m.status, m.owner, m.attempt, m.visible_at, m.token FROM pgsweep.message m WHERE m.queue = 't' AND m.id = pg_temp.id(n) $$;

-- the token: one per call, the same for all its rows, stored in the rows
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('a', 'w', 3, '10 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(1), 1), (pg_temp.id(2), 1), (pg_temp.id(3), 1)$$, 'w claims rows 1-3');
SELECT is((SELECT count(DISTINCT token) FROM claims WHERE label = 'a'), 1::bigint, 'one token for all the rows of a call');
SELECT ok(pg_temp.tok('a') IS NOT NULL, 'the token is not NULL');
SELECT matches(pg_temp.tok('a')::text, '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$',
    'the token is a random (version 4) uuid');
SELECT is((SELECT array_agg(DISTINCT m.token) FROM pgsweep.message m WHERE m.queue = 't' AND m.id IN (pg_temp.id(1), pg_temp.id(2), pg_temp.id(3))),
    ARRAY[pg_temp.tok('a')], 'the rows carry the token');
SELECT results_eq($$SELECT id FROM pg_temp.claim('b', 'w', 1, '10 seconds', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(4))$$, 'the same owner claims row 4');
SELECT isnt(pg_temp.tok('b'), pg_temp.tok('a'), 'another call of the same owner gets another token');

-- a wrong token acts on nothing and changes nothing
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.message;
SELECT is_empty($$SELECT * FROM pgsweep.renew('t', gen_random_uuid(), ARRAY[pg_temp.id(1)], '1 minute')$$, 'wrong token: renew acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', gen_random_uuid(), ARRAY[pg_temp.id(1)])$$, 'wrong token: complete acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.fail('t', gen_random_uuid(), ARRAY[pg_temp.id(1)], 'x')$$, 'wrong token: fail acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.fail_details('t', gen_random_uuid(), ARRAY[pg_temp.id(1)], 'x')$$, 'wrong token: fail_details acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.release('t', gen_random_uuid(), ARRAY[pg_temp.id(1)])$$, 'wrong token: release acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('b'), ARRAY[pg_temp.id(1), pg_temp.id(2)])$$,
    'the token of another claim (same owner) acts on nothing');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'and nothing changed');

-- a call acts on the rows of its own claim only
SELECT results_eq($$SELECT * FROM pgsweep.renew('t', pg_temp.tok('a'), ARRAY[pg_temp.id(1), pg_temp.id(4), pg_temp.id(5)], '10 seconds', '2030-01-01 00:00:05+00')$$,
    $$VALUES (pg_temp.id(1))$$, 'renew with token a among rows of other claims and an unclaimed row: only a''s row');

-- the same owner takes its own expired leases back: the old token is stale
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('a2', 'w', 10, '10 seconds', '2030-01-01 00:00:12+00')$$,
    $$VALUES (pg_temp.id(2), 2), (pg_temp.id(3), 2), (pg_temp.id(4), 2), (pg_temp.id(5), 1)$$,
    'the same owner re-claims rows 2-4 whose leases expired (row 1 was renewed) and row 5');
SELECT isnt(pg_temp.tok('a2'), pg_temp.tok('a'), 'the re-claim has a new token');
DELETE FROM before; INSERT INTO before SELECT * FROM pgsweep.message;
SELECT is_empty($$SELECT * FROM pgsweep.renew('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2), pg_temp.id(3)], '10 seconds', '2030-01-01 00:00:13+00')$$,
    'stale token: renew acts on nothing after the same owner re-claimed');
SELECT is_empty($$SELECT * FROM pgsweep.renew('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2)], '10 seconds')$$,
    'stale token: wall-clock renew acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2)], '2030-01-01 00:00:13+00')$$,
    'stale token: complete acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('b'), ARRAY[pg_temp.id(4)])$$,
    'stale token: wall-clock complete acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.fail('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2)], 'late')$$,
    'stale token: fail acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.fail_details('t', pg_temp.tok('a'), ARRAY[pg_temp.id(3)], 'late', NULL, '2030-01-01 00:00:13+00')$$,
    'stale token: fail_details acts on nothing');
SELECT is_empty($$SELECT * FROM pgsweep.release('t', pg_temp.tok('a'), ARRAY[pg_temp.id(2), pg_temp.id(3)])$$,
    'stale token: release acts on nothing');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'the stale calls changed nothing');
SELECT results_eq($$SELECT * FROM pg_temp.row(2)$$,
    $$VALUES ('processing'::text, 'w'::text, 2, '2030-01-01 00:00:22+00'::timestamptz, pg_temp.tok('a2'))$$,
    'row 2 is held by the re-claim');

-- the current token acts
SELECT results_eq($$SELECT * FROM pgsweep.renew('t', pg_temp.tok('a2'), ARRAY[pg_temp.id(2), pg_temp.id(3)], '10 seconds', '2030-01-01 00:00:14+00')$$,
    $$VALUES (pg_temp.id(2)), (pg_temp.id(3))$$, 'the current token renews');
SELECT results_eq($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('a2'), ARRAY[pg_temp.id(2)], '2030-01-01 00:00:15+00')$$,
    $$VALUES (pg_temp.id(2))$$, 'the current token completes');
SELECT results_eq($$SELECT * FROM pgsweep.fail_details('t', pg_temp.tok('a2'), ARRAY[pg_temp.id(3)], 'boom', '0 seconds', '2030-01-01 00:00:15+00')$$,
    $$VALUES (pg_temp.id(3), false)$$, 'the current token fails');
SELECT results_eq($$SELECT status, owner, token FROM pg_temp.row(3)$$, $$VALUES ('failed'::text, NULL::text, NULL::uuid)$$,
    'a failed row keeps no owner and no token');

-- an expired lease nobody took over still answers to its token
SELECT results_eq($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('a'), ARRAY[pg_temp.id(1)], '2030-01-01 00:01:00+00')$$,
    $$VALUES (pg_temp.id(1))$$, 'an expired lease that was not claimed again is completed by its token');

-- after a fail and a re-claim by the same owner, the token of the failed claim is stale
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('a3', 'w', 1, '10 seconds', '2030-01-01 00:00:16+00')$$,
    $$VALUES (pg_temp.id(3), 3)$$, 'the failed row is claimed again by the same owner');
SELECT is_empty($$SELECT * FROM pgsweep.complete('t', pg_temp.tok('a2'), ARRAY[pg_temp.id(3)], '2030-01-01 00:00:17+00')$$,
    'the token of the failed claim cannot complete the new one');
SELECT results_eq($$SELECT * FROM pgsweep.release('t', pg_temp.tok('a3'), ARRAY[pg_temp.id(3)])$$,
    $$VALUES (pg_temp.id(3))$$, 'the new token releases it');
SELECT results_eq($$SELECT status, owner, attempt, token FROM pg_temp.row(3)$$, $$VALUES ('failed'::text, NULL::text, 2, NULL::uuid)$$,
    'a released row keeps no owner and no token');

-- argument errors: 22023 naming p_token, nothing changed
DELETE FROM before; INSERT INTO before SELECT * FROM pgsweep.message;
SELECT throws_ok($$SELECT * FROM pgsweep.renew('t', NULL, ARRAY[pg_temp.id(4)], '10 seconds')$$, '22023',
    'p_token must be the token claim returned, got NULL', 'renew: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.fail_details('t', NULL, ARRAY[pg_temp.id(4)], 'x')$$, '22023',
    'p_token must be the token claim returned, got NULL', 'fail_details: NULL token');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
