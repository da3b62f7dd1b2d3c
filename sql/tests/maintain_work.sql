-- pgTAP: the work inside maintain()'s parts: recovery of expired claims over
-- every queue, and the built-in retention policies for pgsweep's own kept
-- rows. (maintain itself COMMITs, so it is exercised by the Go tests.)
BEGIN;
DELETE FROM pgsweep.message;
DELETE FROM pgsweep.queue_recovery;
DELETE FROM pgsweep.retention_policy;
DELETE FROM pgsweep.queue;
SELECT plan(22);

SELECT pgsweep.queue_create('w_out');
SELECT pgsweep.queue_create('w_in', 'inbox', 1);
SELECT pgsweep.send('w_out', jsonb_build_object('n', g)) FROM generate_series(1, 3) g;
SELECT pgsweep.send('w_in', '{"n": 1}', '{}', 'msg-1');
SELECT pgsweep.send('w_out', '{"n": 4}');  -- stays pending: never claimed
-- age the fixture so that claims "an hour ago" can see the rows
UPDATE pgsweep.message SET created_at = created_at - interval '2 hours', visible_at = visible_at - interval '2 hours';

-- claims whose leases expired an hour ago: the owners died
CREATE TEMP TABLE dead_claim AS SELECT * FROM pgsweep.claim('w_out', 'dead-worker', 3, '30 seconds', clock_timestamp() - interval '1 hour');
SELECT is((SELECT count(*) FROM dead_claim), 3::bigint, 'three outbox rows claimed by a worker that then died');
SELECT is((SELECT count(*) FROM pgsweep.claim('w_in', 'dead-worker', 10, '30 seconds', clock_timestamp() - interval '1 hour')),
    1::bigint, 'the inbox row claimed on its only attempt');

SELECT is(pgsweep._maintain_recovery('maint', clock_timestamp() + interval '1 minute'),
    '{"recovered": 3, "lost_leases": 3, "dead_lettered": 1, "more": false}'::jsonb,
    'recovery releases the expired claims and dead-letters the exhausted row');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'w_out' AND owner IS NULL AND status = 'failed'),
    3::bigint, 'recovered rows have no owner and are claimable again');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'w_out' AND status = 'pending'),
    1::bigint, 'the pending row was not touched');
SELECT is((SELECT count(*) FROM pgsweep.message_dead WHERE queue = 'w_in'), 1::bigint, 'the exhausted inbox row is a dead letter');
SELECT is(pgsweep.complete('w_out', (SELECT DISTINCT token FROM dead_claim), ARRAY(SELECT id FROM pgsweep.message WHERE queue = 'w_out')),
    NULL, 'the dead worker can no longer complete what it lost');
SELECT is((SELECT count(*) FROM pgsweep.claim('w_out', 'live-worker', 10)), 4::bigint, 'a live worker claims the recovered rows and the pending one');
SELECT is(pgsweep._maintain_recovery('maint', clock_timestamp() + interval '1 minute'),
    '{"recovered": 0, "lost_leases": 0, "dead_lettered": 0, "more": false}'::jsonb,
    'live leases are not recovered');

-- a full batch says there is more
SELECT pgsweep.setting_set('recovery_batch_size', '2');
SELECT pgsweep.send('w_out', jsonb_build_object('n', g)) FROM generate_series(5, 7) g;
UPDATE pgsweep.message SET created_at = created_at - interval '2 hours', visible_at = visible_at - interval '2 hours'
 WHERE status = 'pending';
SELECT is((SELECT count(*) FROM pgsweep.claim('w_out', 'dead-2', 3, '30 seconds', clock_timestamp() - interval '1 hour')), 3::bigint, 'three more die');
SELECT is(pgsweep._maintain_recovery('maint', clock_timestamp() + interval '1 minute') ->> 'more', 'true', 'a full batch asks for another step');
SELECT is(pgsweep._maintain_recovery('maint', clock_timestamp() + interval '1 minute') ->> 'recovered', '1', 'the next step takes the rest');

-- built-in retention policies
SELECT is(pgsweep.retention_builtin_sync(), 3, 'sync creates processed (inbox only) and dead-letter policies');
SELECT results_eq(
    $$SELECT name, table_name, time_column, older_than, filter_column, filter_values
        FROM pgsweep.retention_policies ORDER BY name$$,
    $$VALUES ('pgsweep.dead:w_in'::text, 'pgsweep.message_dead'::text, 'dead_at'::text, interval '30 days', 'queue'::text, ARRAY['w_in']),
             ('pgsweep.dead:w_out', 'pgsweep.message_dead', 'dead_at', interval '30 days', 'queue', ARRAY['w_out']),
             ('pgsweep.processed:w_in', 'pgsweep.message_processed', 'processed_at', interval '7 days', 'queue', ARRAY['w_in'])$$,
    'one policy per queue and table, restricted to the queue, with the default periods');
SELECT is(pgsweep.retention_builtin_sync(), 0, 'a second sync changes nothing');
SELECT pgsweep.queue_configure('w_in', '{"processed_retention": null, "dead_retention": "1 day"}');
SELECT is(pgsweep.retention_builtin_sync(), 2, 'a reconfigured queue updates its policies');
SELECT is((SELECT older_than FROM pgsweep.retention_policies WHERE name = 'pgsweep.processed:w_in'), NULL, 'NULL retention keeps processed rows forever');
SELECT is((SELECT count(*) FROM pgsweep.retention_due() d WHERE d = 'pgsweep.processed:w_in'), 0::bigint, 'a keep-forever policy is never due');
SELECT is((SELECT count(*) FROM pgsweep.retention_policies WHERE table_name = 'pgsweep.message'), 0::bigint,
    'no policy ever covers undelivered messages');

SELECT pgsweep.setting_set('dead_letter_retention', 'infinite');
SELECT pgsweep.queue_create('w_new');
SELECT is((SELECT dead_retention FROM pgsweep.queue WHERE name = 'w_new'), NULL, 'new queues take their periods from settings');
SELECT is(pgsweep.retention_builtin_sync(), 1, 'sync covers the new queue');
DELETE FROM pgsweep.queue WHERE name = 'w_new';
SELECT is(pgsweep.retention_builtin_sync(), 1, 'sync removes the policy of a queue that is gone');
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name LIKE '%w_new'), 0::bigint, 'no policy of the dropped queue is left');

SELECT * FROM finish();
ROLLBACK;
