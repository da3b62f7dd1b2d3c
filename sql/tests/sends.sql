-- Unique sends and priorities (send.sql, claim.sql): exact results.
BEGIN;
SELECT plan(25);
SET LOCAL search_path TO pgsweep, public;
SELECT queue_create('su');
SELECT queue_create('si', 'inbox');

-- unique keys: the live key
SELECT isnt(send('su', '{"n":1}', p_unique_key => 'k'), NULL, 'a first unique send inserts');
SELECT is(send('su', '{"n":2}', p_unique_key => 'k'), (SELECT id FROM message WHERE queue = 'su' AND unique_key = 'k'), 'a second returns the holder''s id');
SELECT is((SELECT count(*) FROM message WHERE queue = 'su'), 1::bigint, 'and inserts nothing');
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'k')$$, ARRAY[true], 'send_unique says duplicate');
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'k2')$$, ARRAY[false], 'another key is not one');
SELECT results_eq($$SELECT b.duplicate FROM send_batch_unique('su', ARRAY['{}','{}','{}']::jsonb[], p_unique_keys => ARRAY['k', 'k3', 'k3']) b$$,
    ARRAY[true, false, true], 'a batch: held, new, the batch''s own');
SELECT is((SELECT count(*) FROM message WHERE queue = 'su'), 3::bigint, 'three messages: k, k2, k3');
-- an inbox queue without a message key takes unique keys too
SELECT isnt(send('si', '{}', p_unique_key => 'k'), NULL, 'inbox: a unique send');
SELECT results_eq($$SELECT duplicate FROM send_unique('si', '{}', p_unique_key => 'k')$$, ARRAY[true], 'inbox: its duplicate');
-- completed: the key is free, unless a window holds it
SELECT lives_ok($$SELECT complete('su', c.token, ARRAY[c.id]) FROM claim('su', 'w', 10) c$$, 'complete all');
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'k')$$, ARRAY[false], 'completed without a window: free');
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'w', p_unique_for => '1 hour')$$, ARRAY[false], 'a window');
SELECT lives_ok($$SELECT complete('su', c.token, ARRAY[c.id]) FROM claim('su', 'w', 10) c$$, 'complete all again');
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'w')$$, ARRAY[true], 'the window outlives the completion');
SELECT is((SELECT count(*) FROM message WHERE queue = 'su'), 0::bigint, 'nothing inserted');
-- an expired window: swept by recovery, and the key is free
UPDATE message_unique SET until = now() - interval '1 second', sent_at = now() - interval '2 hours' WHERE queue = 'su';
SELECT results_eq($$SELECT duplicate FROM send_unique('su', '{}', p_unique_key => 'w')$$, ARRAY[false], 'an expired window frees the key');
SELECT lives_ok($$SELECT complete('su', c.token, ARRAY[c.id]) FROM claim('su', 'w', 10) c$$, 'complete');
UPDATE message_unique SET until = now() - interval '1 second' WHERE queue = 'su';
SELECT lives_ok($$SELECT queue_recover('su', 100)$$, 'recovery');
SELECT is((SELECT count(*) FROM message_unique WHERE queue = 'su'), 0::bigint, 'recovery swept the expired window');

-- priorities: highest first, then (created_at, id); the batch comes back in that order
SELECT send_batch('su', ARRAY['{"p":0}','{"p":3}','{"p":-1}','{"p":3}','{"p":0}']::jsonb[], p_priorities => ARRAY[0, 3, -1, 3, 0]::smallint[]);
SELECT results_eq($$SELECT (payload->>'p')::int FROM claim('su', 'w', 10)$$, ARRAY[3, 3, 0, 0, -1], 'claimed by priority, then oldest first');
SELECT is((SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgsweep' AND indexname IN ('message_claim', 'message_claim_priority', 'message_unique_key')),
    3::bigint, 'the claim index split at priority 0, the unique index');
-- a dead letter keeps its priority for dead_requeue, not its unique key
SELECT queue_create('sd', 'outbox', 1);
SELECT send('sd', '"dl"', p_unique_key => 'dk', p_priority => 7::smallint);
SELECT count(*) FROM fail('sd', (SELECT token FROM claim('sd', 'w', 1) LIMIT 1),
                          ARRAY(SELECT id FROM message WHERE queue = 'sd'), 'boom', '0'::interval);
SELECT is((SELECT priority FROM message_dead WHERE queue = 'sd'), 7::smallint, 'the dead letter keeps the priority');
SELECT is((SELECT count(*) FROM dead_requeue('sd', ARRAY(SELECT id FROM message_dead WHERE queue = 'sd'))), 1::bigint, 'requeued');
SELECT results_eq($$SELECT priority, unique_key FROM message WHERE queue = 'sd'$$, $$VALUES (7::smallint, NULL::text)$$,
    'dead_requeue gives the priority back; the unique key stays free');
-- bad input changes nothing
SELECT throws_ok($$SELECT send('su', '{}', p_priority => 101::smallint)$$, '22023', 'p_priority must be between -100 and 100, got 101', 'priority out of range');
SELECT * FROM finish();
ROLLBACK;
