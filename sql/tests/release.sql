-- pgTAP: release gives claimed messages back unprocessed: attempt taken
-- back, owner cleared, due at once; fenced by owner like complete and fail.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(15);

SELECT has_function('pgsweep', 'release', ARRAY['text', 'text', 'bigint[]'], 'release(text, text, bigint[])');
SELECT pgsweep.queue_create('q', 'outbox', 3);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id FROM pgsweep.send_batch('q', ARRAY['1', '2', '3']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;

SELECT is((SELECT count(*) FROM pgsweep.claim('q', 'w1', 3, '1 minute')), 3::bigint, 'w1 claims all three');
SELECT results_eq($$SELECT * FROM pgsweep.release('q', 'w1', ARRAY[pg_temp.id(1), pg_temp.id(2)])$$,
    $$VALUES (pg_temp.id(1)), (pg_temp.id(2))$$, 'release returns the ids it acted on');
SELECT results_eq($$SELECT status, owner, attempt, visible_at <= clock_timestamp() FROM pgsweep.message WHERE queue = 'q' AND id = pg_temp.id(1)$$,
    $$VALUES ('pending'::text, NULL::text, 0, true)$$, 'a released first attempt is pending, unowned, attempt 0, due now');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', 'w2', ARRAY[pg_temp.id(3)])$$, 'another owner cannot release');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', 'w1', ARRAY[pg_temp.id(1)])$$, 'releasing again does nothing');
SELECT results_eq($$SELECT id, attempt FROM pgsweep.claim('q', 'w2', 10, '1 minute')$$,
    $$VALUES (pg_temp.id(1), 1), (pg_temp.id(2), 1)$$, 'released rows are claimed again at attempt 1');

-- a later attempt goes back to 'failed' with its last error
SELECT count(*) FROM pgsweep.fail('q', 'w2', ARRAY[pg_temp.id(1)], 'boom', '0 seconds');
SELECT is((SELECT count(*) FROM pgsweep.claim('q', 'w3', 1, '1 minute')), 1::bigint, 'attempt 2 claimed');
SELECT is_empty($$SELECT * FROM pgsweep.release('q', 'w3', ARRAY[pg_temp.id(2)])$$, 'w3 does not hold row 2');
SELECT lives_ok($$SELECT pgsweep.release('q', 'w3', ARRAY[pg_temp.id(1)])$$, 'release attempt 2');
SELECT results_eq($$SELECT status, attempt, last_error FROM pgsweep.message WHERE queue = 'q' AND id = pg_temp.id(1)$$,
    $$VALUES ('failed'::text, 1, 'boom'::text)$$, 'a released later attempt is failed again, attempt back to 1, error kept');

-- argument errors change nothing
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.message;
SELECT throws_ok($$SELECT pgsweep.release('nope', 'w', ARRAY[1::bigint])$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'unknown queue');
SELECT throws_ok($$SELECT pgsweep.release('q', NULL, ARRAY[1::bigint])$$, '22023', 'p_owner must be a non-empty string of at most 200 characters, got NULL', 'NULL owner');
SELECT throws_ok($$SELECT pgsweep.release('q', 'w3', '{}')$$, '22023', 'p_ids must hold 1 to 10000 ids, got 0', 'empty ids');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM before', 'failed calls changed nothing');
SELECT * FROM finish();
ROLLBACK;
