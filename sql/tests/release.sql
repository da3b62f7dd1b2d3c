-- pgTAP: release gives claimed messages back unprocessed: attempt taken
-- back, owner and token cleared, due at once; fenced by the claim's token
-- like renew, complete and fail.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(16);

SELECT has_function('pgsweep', 'release', ARRAY['text', 'uuid', 'bigint[]'], 'release(text, uuid, bigint[])');
SELECT pgsweep.queue_create('q', 'outbox', 3);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id FROM pgsweep.send_batch('q', ARRAY['1', '2', '3']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE TEMP TABLE claims (label text, id bigint, attempt int, token uuid);
CREATE FUNCTION pg_temp.claim(p_label text, p_owner text, p_batch int) RETURNS TABLE (id bigint, attempt int) LANGUAGE sql AS $$
    WITH c AS (SELECT * FROM pgsweep.claim('q', p_owner, p_batch, '1 minute')),
         i AS (INSERT INTO claims SELECT p_label, c.id, c.attempt, c.token FROM c)
    SELECT c.id, c.attempt FROM c
$$;
CREATE FUNCTION pg_temp.tok(p_label text) RETURNS uuid LANGUAGE sql AS $$ SELECT DISTINCT token FROM claims WHERE label = p_label $$;

SELECT is((SELECT count(*) FROM pg_temp.claim('w1', 'w1', 3)), 3::bigint, 'w1 claims all three');
SELECT results_eq($$SELECT * FROM pgsweep.release('q', pg_temp.tok('w1'), ARRAY[pg_temp.id(1), pg_temp.id(2)])$$,
    $$VALUES (pg_temp.id(1)), (pg_temp.id(2))$$, 'release returns the ids it acted on');
SELECT results_eq($$SELECT status, owner, token, attempt, visible_at <= clock_timestamp() FROM pgsweep.message WHERE queue = 'q' AND id = pg_temp.id(1)$$,
    $$VALUES ('pending'::text, NULL::text, NULL::uuid, 0, true)$$, 'a released first attempt is pending, unowned, without a token, attempt 0, due now');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', gen_random_uuid(), ARRAY[pg_temp.id(3)])$$, 'another token cannot release');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', pg_temp.tok('w1'), ARRAY[pg_temp.id(1)])$$, 'releasing again does nothing');
SELECT results_eq($$SELECT id, attempt FROM pg_temp.claim('w1b', 'w1', 10)$$,
    $$VALUES (pg_temp.id(1), 1), (pg_temp.id(2), 1)$$, 'released rows are claimed again at attempt 1 (by the same owner)');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', pg_temp.tok('w1'), ARRAY[pg_temp.id(1), pg_temp.id(2)])$$,
    'the earlier token of the same owner cannot release the new claim');

-- a later attempt goes back to 'failed' with its last error
SELECT count(*) FROM pgsweep.fail('q', pg_temp.tok('w1b'), ARRAY[pg_temp.id(1)], 'boom', '0 seconds');
SELECT is((SELECT count(*) FROM pg_temp.claim('w3', 'w3', 1)), 1::bigint, 'attempt 2 claimed');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', pg_temp.tok('w3'), ARRAY[pg_temp.id(2)])$$, 'w3''s token does not hold row 2');
SELECT results_eq($$SELECT pgsweep.release('q', pg_temp.tok('w3'), ARRAY[pg_temp.id(1)])$$, $$VALUES (pg_temp.id(1))$$, 'release attempt 2');
SELECT results_eq($$SELECT status, attempt, last_error FROM pgsweep.message WHERE queue = 'q' AND id = pg_temp.id(1)$$,
    $$VALUES ('failed'::text, 1, 'boom'::text)$$, 'a released later attempt is failed again, attempt back to 1, error kept');

-- argument errors change nothing
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.message;
SELECT throws_ok($$SELECT pgsweep.release('nope', gen_random_uuid(), ARRAY[1::bigint])$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'unknown queue');
SELECT throws_ok($$SELECT pgsweep.release('q', NULL, ARRAY[1::bigint])$$, '22023', 'p_token must be the token claim returned, got NULL', 'NULL token');
SELECT throws_ok($$SELECT pgsweep.release('q', pg_temp.tok('w3'), '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'empty ids');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'failed calls changed nothing');
SELECT * FROM finish();
ROLLBACK;
