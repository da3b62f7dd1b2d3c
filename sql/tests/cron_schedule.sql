-- pgTAP: scheduling maintain() with pg_cron. The test database must be the
-- one named by cron.database_name (scripts/db.sh sets that up); every job
-- made here is rolled back with the transaction.
BEGIN;
CREATE EXTENSION IF NOT EXISTS pg_cron;
SELECT plan(16);

SELECT has_function('pgsweep', 'cron_schedule', ARRAY['text', 'interval'], 'cron_schedule(text, interval)');
SELECT has_function('pgsweep', 'cron_unschedule', ARRAY[]::text[], 'cron_unschedule()');
SELECT is(pgsweep.cron_job_name(), 'pgsweep-maintain:pgsweep', 'the job name is unique to the schema');
SELECT pgsweep.cron_unschedule();  -- start without the job (rolled back at the end)

CREATE TEMP TABLE j AS SELECT pgsweep.cron_schedule() AS id;
SELECT results_eq(
    $$SELECT jobid, schedule COLLATE "default", command COLLATE "default", database COLLATE "default", username COLLATE "default" FROM cron.job WHERE jobname = 'pgsweep-maintain:pgsweep'$$,
    $$SELECT (SELECT id FROM j), '* * * * *'::text, 'CALL pgsweep.maintain(''pg_cron'', ''50 seconds'')'::text, current_database()::text COLLATE "default", current_user::text COLLATE "default"$$,
    'cron_schedule creates the job: every minute, CALL maintain as pg_cron with a 50 second budget');
SELECT is(pgsweep.cron_schedule('*/5 * * * *', '2 minutes'), (SELECT id FROM j), 'scheduling again keeps the job id');
SELECT results_eq(
    $$SELECT schedule COLLATE "default", command COLLATE "default" FROM cron.job WHERE jobname = 'pgsweep-maintain:pgsweep'$$,
    $$VALUES ('*/5 * * * *'::text, 'CALL pgsweep.maintain(''pg_cron'', ''2 minutes'')'::text)$$,
    'and updates schedule and budget');
SELECT is((SELECT count(*) FROM cron.job WHERE jobname = 'pgsweep-maintain:pgsweep'), 1::bigint, 'never duplicates the job');
SELECT results_eq($$SELECT jobid, schedule FROM pgsweep.cron_job()$$, $$SELECT (SELECT id FROM j), '*/5 * * * *'::text$$, 'cron_job() shows it');

-- bad input: 22023, the job unchanged
SELECT throws_ok($$SELECT pgsweep.cron_schedule('every minute')$$, '22023',
    'p_schedule must be a pg_cron schedule such as ''* * * * *'', got ''every minute''', 'bad schedule');
SELECT throws_ok($$SELECT pgsweep.cron_schedule('* * * * *', '2 hours')$$, '22023',
    'p_budget must be between 1 second and 1 hour, got 2 hours', 'budget above 1 hour');
SELECT throws_ok($$SELECT pgsweep.cron_schedule(NULL)$$, '22023',
    'p_schedule must be a non-empty string of at most 100 characters, got NULL', 'NULL schedule');
SELECT results_eq($$SELECT schedule COLLATE "default", command COLLATE "default" FROM cron.job WHERE jobname = 'pgsweep-maintain:pgsweep'$$,
    $$VALUES ('*/5 * * * *'::text, 'CALL pgsweep.maintain(''pg_cron'', ''2 minutes'')'::text)$$, 'failed calls changed nothing');

SELECT ok(pgsweep.cron_unschedule(), 'cron_unschedule removes the job');
SELECT ok(NOT pgsweep.cron_unschedule(), 'a second unschedule finds nothing');

-- without pg_cron: a clear error that says what to do
DROP EXTENSION pg_cron;
SELECT throws_ok($$SELECT pgsweep.cron_schedule()$$, '55000',
    format('pg_cron is not installed in database %s: install it there (CREATE EXTENSION pg_cron, in the database named by cron.database_name, now %s) or run `pgsweep run` instead',
        quote_ident(current_database()), quote_literal(current_setting('cron.database_name'))),
    'without pg_cron cron_schedule says to install it or run `pgsweep run`');
SELECT ok(NOT pgsweep.cron_unschedule(), 'without pg_cron there is nothing to unschedule');

SELECT * FROM finish();
ROLLBACK;
