-- pgTAP: queues (create, configure), send, send_batch, inbox de-duplication,
-- notifications, and every argument error of these.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(54);

SELECT has_table('pgsweep', 'queue', 'queue table');
SELECT has_table('pgsweep', 'message', 'message table');
SELECT has_table('pgsweep', 'message_processed', 'message_processed table');
SELECT has_table('pgsweep', 'message_dead', 'message_dead table');
SELECT has_view('pgsweep', 'queue_stats', 'queue_stats view');
SELECT has_function('pgsweep', 'queue_create', ARRAY['text', 'text', 'integer'], 'queue_create(text, text, int)');
SELECT has_function('pgsweep', 'send', ARRAY['text', 'jsonb', 'jsonb', 'text', 'timestamp with time zone', 'text', 'text', 'interval', 'smallint', 'text'], 'send contract signature (p_lane, then p_unique_key, p_unique_for, p_priority, p_group)');
SELECT has_function('pgsweep', 'claim', ARRAY['text', 'text', 'integer', 'interval'], 'claim contract signature');
SELECT has_function('pgsweep', 'renew', ARRAY['text', 'uuid', 'bigint[]', 'interval'], 'renew contract signature');
SELECT has_function('pgsweep', 'complete', ARRAY['text', 'uuid', 'bigint[]'], 'complete contract signature');
SELECT has_function('pgsweep', 'fail', ARRAY['text', 'uuid', 'bigint[]', 'text', 'interval'], 'fail contract signature');
SELECT has_function('pgsweep', 'queue_recover', ARRAY['text', 'integer', 'timestamp with time zone'], 'queue_recover signature');
SELECT col_is_pk('pgsweep', 'message', ARRAY['queue', 'id'], 'message key leads with queue');
SELECT col_is_pk('pgsweep', 'message_processed', ARRAY['queue', 'id'], 'processed key leads with queue');
SELECT col_is_pk('pgsweep', 'message_dead', ARRAY['queue', 'id'], 'dead key leads with queue');

-- queue_create: defaults, idempotence, kind is fixed
SELECT lives_ok($$SELECT pgsweep.queue_create('out')$$, 'create outbox with defaults');
SELECT results_eq($$SELECT kind, max_attempts, backoff_base, backoff_max, lease_default, processed_retention, dead_retention
                      FROM pgsweep.queue WHERE name = 'out'$$,
    $$VALUES ('outbox'::text, 10, '1 second'::interval, '1 hour'::interval, '30 seconds'::interval, '7 days'::interval, '30 days'::interval)$$,
    'queue defaults');
SELECT lives_ok($$SELECT pgsweep.queue_create('out')$$, 'create again is a no-op');
SELECT lives_ok($$SELECT pgsweep.queue_create('out', 'outbox', 3)$$, 'create again with other max_attempts');
SELECT is((SELECT max_attempts FROM pgsweep.queue WHERE name = 'out'), 3, 'max_attempts updated by a repeated create');
SELECT throws_ok($$SELECT pgsweep.queue_create('out', 'inbox')$$, '22023',
    'p_kind must match the existing queue "out" (outbox), got inbox', 'kind cannot change');
SELECT lives_ok($$SELECT pgsweep.queue_create('in', 'inbox', 2)$$, 'create inbox');

-- queue_configure
SELECT is((pgsweep.queue_configure('out', '{"backoff_base": "2 seconds", "backoff_max": "10 seconds", "lease_default": "5 seconds", "dead_retention": null}')).dead_retention,
    NULL, 'configure: dead_retention null = keep forever');
SELECT results_eq($$SELECT max_attempts, backoff_base, backoff_max, lease_default, processed_retention FROM pgsweep.queue WHERE name = 'out'$$,
    $$VALUES (3, '2 seconds'::interval, '10 seconds'::interval, '5 seconds'::interval, '7 days'::interval)$$,
    'configure changes only the given settings');

CREATE TEMP TABLE q_before AS SELECT * FROM pgsweep.queue;
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '{"bogus": 1}')$$, '22023',
    'p_settings: unknown setting "bogus" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead, max_in_flight, rate, rate_burst, group_max_in_flight, group_rate, group_overrides)', 'unknown setting');
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '{"max_attempts": 0}')$$, '22023',
    'max_attempts must be between 1 and 1000, got 0', 'max_attempts range');
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '{"backoff_max": "1 second"}')$$, '22023',
    'backoff_max must be between 2 seconds and 7 days, got 1 second', 'backoff_max below base');
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '{"lease_default": "2 hours"}')$$, '22023',
    'lease_default must be between 1 second and 1 hour, got 2 hours', 'lease_default range');
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '{"processed_retention": "soon"}')$$, '22023',
    NULL, 'unparsable interval');
SELECT throws_ok($$SELECT pgsweep.queue_configure('out', '[]')$$, '22023', 'p_settings must be a JSON object, got array', 'settings not an object');
SELECT throws_ok($$SELECT pgsweep.queue_configure('nope', '{}')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'configure unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'topic')$$, '22023', 'p_kind must be outbox or inbox, got topic', 'bad kind');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'outbox', 0)$$, '22023', 'p_max_attempts must be between 1 and 1000, got 0', 'bad max_attempts');
SELECT throws_ok($$SELECT pgsweep.queue_create('', 'outbox')$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got an empty string', 'empty queue name');
SELECT set_eq('SELECT * FROM pgsweep.queue', 'SELECT * FROM q_before', 'failed queue calls changed nothing');

-- send: ids, defaults, the notification channel's name. (Delivery of the
-- notification needs a commit, which a pgTAP file rolls back: the Go tests
-- TestWorkerWakesOnNotify and TestReadmeDocsQueuesFromPsql prove it.)
SELECT ok(pgsweep.send('out', '{"n": 1}') IS NOT NULL, 'send returns an id');
SELECT results_eq($$SELECT status, attempt, headers, key, owner FROM pgsweep.message WHERE queue = 'out'$$,
    $$VALUES ('pending'::text, 0, '{}'::jsonb, NULL::text, NULL::text)$$, 'a sent message is pending with attempt 0');
SELECT is(pgsweep.notify_channel(), 'pgsweep_messages', 'notification channel is <schema>_messages');
SELECT is((SELECT count(*) FROM pgsweep.send_batch('out', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[], NULL, ARRAY['a', 'a'])), 2::bigint,
    'outbox batch: keys need not be unique');
CREATE TEMP TABLE batch_ids AS SELECT row_number() OVER () AS n, s AS id FROM pgsweep.send_batch('out', ARRAY['"a"', '"b"', '"c"']::jsonb[]) s;
SELECT results_eq($$SELECT b.n, m.payload FROM batch_ids b JOIN pgsweep.message m ON m.queue = 'out' AND m.id = b.id ORDER BY b.n$$,
    $$VALUES (1::bigint, '"a"'::jsonb), (2, '"b"'), (3, '"c"')$$, 'send_batch returns ids in input order');

-- inbox de-duplication: live, then processed
SELECT ok(pgsweep.send('in', '{"v": 1}', '{}', 'm-1') IS NOT NULL, 'inbox: first send of a key');
SELECT is(pgsweep.send('in', '{"v": 2}', '{}', 'm-1'), NULL, 'inbox: duplicate of a live key returns NULL');
SELECT is((SELECT payload FROM pgsweep.message WHERE queue = 'in' AND key = 'm-1'), '{"v": 1}'::jsonb, 'duplicate changed nothing');
SELECT is((SELECT array_agg(x IS NULL) FROM pgsweep.send_batch('in', ARRAY['1', '2', '3']::jsonb[], NULL, ARRAY['m-1', 'm-2', 'm-2']) x),
    ARRAY[true, false, true], 'inbox batch: duplicates (also within the batch) are NULL, in input order');
SELECT ok(pgsweep.send('out', '{"v": 1}', '{}', 'm-1') IS NOT NULL, 'the same key on another queue is no duplicate');

-- argument errors of send
CREATE TEMP TABLE m_before AS SELECT * FROM pgsweep.message;
SELECT throws_ok($$SELECT pgsweep.send('nope', '{}')$$, '22023', 'p_queue must name an existing queue, got unknown queue "nope"', 'send: unknown queue');
SELECT throws_ok($$SELECT pgsweep.send(NULL, '{}')$$, '22023', 'p_queue must be a non-empty string of at most 200 characters, got NULL', 'send: NULL queue');
SELECT throws_ok($$SELECT pgsweep.send('out', NULL)$$, '22023', 'p_payload must be a JSON value, got NULL', 'send: NULL payload');
SELECT throws_ok($$SELECT pgsweep.send('out', '{}', '[1]')$$, '22023', 'p_headers must be a JSON object, got array', 'send: headers not an object');
SELECT throws_ok($$SELECT pgsweep.send('out', '{}', '{}', '')$$, '22023', 'p_key must be a non-empty string of at most 1000 characters, got an empty string', 'send: empty key');
SELECT throws_ok($$SELECT pgsweep.send_batch('out', ARRAY[]::jsonb[])$$, '22023', 'cardinality(p_payloads) must be between 1 and 10000, got 0', 'send_batch: empty');
SELECT throws_ok($$SELECT pgsweep.send_batch('out', ARRAY['1', NULL]::jsonb[])$$, '22023', 'p_payload must be a JSON value, got NULL', 'send_batch: NULL element');
SELECT throws_ok($$SELECT pgsweep.send_batch('out', ARRAY['1', '2']::jsonb[], NULL, ARRAY['k'])$$, '22023', 'p_keys must be NULL or have 2 elements like p_payloads, got 1', 'send_batch: keys length');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM m_before', 'failed sends changed nothing');

SELECT * FROM finish();
ROLLBACK;
