-- pgTAP: every argument error of the message store's functions that
-- queue_setup.sql, queue_claim.sql and dead_letters.sql do not cover yet:
-- SQLSTATE 22023 with a message that names the argument and its range, and
-- nothing changed in any table. The state is seeded first (queued, claimed,
-- scheduled, processed and dead rows, a claim cursor, a recovery cursor) so
-- that "nothing changed" has something to lose. Time is pinned through the
-- p_now overloads (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(108);

-- seed
SELECT pgsweep.queue_create('o', 'outbox', 3);
SELECT pgsweep.queue_configure('o', '{"backoff_base": "2 seconds", "backoff_max": "1 minute"}');
SELECT pgsweep.queue_create('i', 'inbox', 1);
CREATE TEMP TABLE ids (n int, id bigint);
INSERT INTO ids SELECT 1, pgsweep.send('o', '1', '{"h": 1}');
INSERT INTO ids SELECT 1 + row_number() OVER (), s FROM pgsweep.send_batch('o', ARRAY['2', '3']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
SELECT pgsweep.send('o', '"later"', '{}', 'k', '2031-01-01 00:00:00+00');
CREATE TEMP TABLE toks (q text, token uuid);
CREATE FUNCTION pg_temp.t(p_q text) RETURNS uuid LANGUAGE sql AS $$ SELECT token FROM toks WHERE q = p_q $$;
INSERT INTO toks SELECT DISTINCT 'o', token FROM pgsweep.claim('o', 'w1', 1, '30 seconds', '2030-01-01 00:00:00+00');
INSERT INTO ids SELECT 4, pgsweep.send('i', '{"k": 1}', '{}', 'k-1');
INSERT INTO ids SELECT 5, pgsweep.send('i', '{"k": 2}', '{}', 'k-2');
INSERT INTO toks SELECT DISTINCT 'i', token FROM pgsweep.claim('i', 'w2', 2, '30 seconds', '2030-01-01 00:00:00+00');
SELECT pgsweep.complete('i', pg_temp.t('i'), ARRAY[pg_temp.id(4)], '2030-01-01 00:00:01+00');
SELECT pgsweep.fail_details('i', pg_temp.t('i'), ARRAY[pg_temp.id(5)], 'boom', NULL, '2030-01-01 00:00:02+00');
SELECT pgsweep.queue_recover('o', 10, '2030-01-01 00:00:03+00');

SELECT results_eq($$SELECT queue, kind, pending, processing, failed, processed, dead FROM pgsweep.queue_stats ORDER BY queue$$,
    $$VALUES ('i'::text, 'inbox'::text, 0::bigint, 0::bigint, 0::bigint, 1::bigint, 1::bigint),
             ('o', 'outbox', 3, 1, 0, 0, 0)$$,
    'seeded: o has 2 due, 1 scheduled and 1 claimed row; i has a processed row and a dead letter');
SELECT is((SELECT oldest_pending_age FROM pgsweep.queue_counts('o', '2030-01-01 00:00:10+00')),
    '2030-01-01 00:00:10+00'::timestamptz - (SELECT created_at FROM pgsweep.message WHERE queue = 'o' AND id = pg_temp.id(2)),
    'oldest_pending_age: age of the oldest due, unleased row (the claimed, older row does not count)');
SELECT is((SELECT oldest_pending_age FROM pgsweep.queue_counts('i', '2030-01-01 00:00:10+00')), NULL::interval,
    'oldest_pending_age is NULL without a due row');
SELECT is((SELECT count(*) FROM pgsweep.claim_cursor), 2::bigint, 'seeded: a claim cursor per claimed queue');

CREATE TEMP TABLE s_queue AS SELECT * FROM pgsweep.queue;
CREATE TEMP TABLE s_message AS SELECT * FROM pgsweep.message;
CREATE TEMP TABLE s_processed AS SELECT * FROM pgsweep.message_processed;
CREATE TEMP TABLE s_dead AS SELECT * FROM pgsweep.message_dead;
CREATE TEMP TABLE s_cursor AS SELECT * FROM pgsweep.claim_cursor;
CREATE TEMP TABLE s_recovery AS SELECT * FROM pgsweep.queue_recovery;
CREATE TEMP TABLE many AS SELECT ARRAY(SELECT g::bigint FROM generate_series(1, 10001) g) AS ids,
                                 ARRAY(SELECT '1'::jsonb FROM generate_series(1, 10001)) AS payloads;

-- renew
SELECT throws_ok($$SELECT * FROM pgsweep.renew('nope', pg_temp.t('o'), '{1}', '1 minute')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'renew: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.renew(NULL, pg_temp.t('o'), '{1}', '1 minute')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'renew: NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', NULL, '{1}', '1 minute')$$, '22023',
    'p_token must be the token claim returned, got NULL', 'renew: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], '999 milliseconds')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 0.999 seconds', 'renew: lease below 1 second');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], '61 minutes')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 61 minutes', 'renew: lease above 1 hour');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], '-1 minute', '2030-01-01 00:00:04+00')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got -1 minute', 'renew (p_now): negative lease');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), NULL, NULL)$$, '22023',
    'p_ids must hold 1 to 10000 ids, got NULL', 'renew: NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), '{}', '1 minute')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 0', 'renew: empty ids');
SELECT throws_ok($$SELECT * FROM pgsweep.renew('o', pg_temp.t('o'), (SELECT ids FROM many), '1 minute')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 10001', 'renew: 10001 ids');

-- complete
SELECT throws_ok($$SELECT * FROM pgsweep.complete('nope', pg_temp.t('o'), '{1}')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'complete: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.complete(NULL, pg_temp.t('o'), '{1}')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'complete: NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', NULL, ARRAY[pg_temp.id(1)])$$, '22023',
    'p_token must be the token claim returned, got NULL', 'complete: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', pg_temp.t('o'), NULL)$$, '22023',
    'p_ids must hold 1 to 10000 ids, got NULL', 'complete: NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('i', pg_temp.t('i'), '{}', '2030-01-01 00:00:04+00')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 0', 'complete (p_now, inbox): empty ids');
SELECT throws_ok($$SELECT * FROM pgsweep.complete('o', pg_temp.t('o'), (SELECT ids FROM many))$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 10001', 'complete: 10001 ids');

-- fail
SELECT throws_ok($$SELECT * FROM pgsweep.fail('nope', pg_temp.t('o'), ARRAY[pg_temp.id(1)], 'e', '1 second')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'fail: unknown queue (with a valid retry_after)');
SELECT throws_ok($$SELECT * FROM pgsweep.fail(NULL, pg_temp.t('o'), ARRAY[pg_temp.id(1)], 'e')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'fail: NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', NULL, ARRAY[pg_temp.id(1)], 'e')$$, '22023',
    'p_token must be the token claim returned, got NULL', 'fail: NULL token');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.t('o'), NULL, 'e')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got NULL', 'fail: NULL ids');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.t('o'), '{}', 'e')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 0', 'fail: empty ids');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.t('o'), (SELECT ids FROM many), 'e')$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 10001', 'fail: 10001 ids');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], 'e', '-1 millisecond')$$, '22023',
    'p_retry_after must be between 0 seconds and 30 days, got -0.001 seconds', 'fail: retry_after just below 0');
SELECT throws_ok($$SELECT * FROM pgsweep.fail('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], 'e', '31 days')$$, '22023',
    'p_retry_after must be between 0 seconds and 30 days, got 31 days', 'fail: retry_after above 30 days');
SELECT throws_ok($$SELECT * FROM pgsweep.fail_details('o', pg_temp.t('o'), ARRAY[pg_temp.id(1)], 'e', '2 months', '2030-01-01 00:00:04+00')$$, '22023',
    'p_retry_after must be between 0 seconds and 30 days, got 2 months', 'fail_details: retry_after in months');

-- claim
SELECT throws_ok($$SELECT * FROM pgsweep.claim('nope', 'w1', 10, '30 seconds', '2030-01-01 00:00:04+00')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'claim (p_now): unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim(NULL, 'w1')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'claim: NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('', 'w1')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got an empty string', 'claim: empty queue');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', NULL, 10, NULL)$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got NULL', 'claim: NULL owner (default lease)');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', '')$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'claim: empty owner');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', repeat('w', 201))$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got 201 characters', 'claim: owner of 201 characters');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w1', NULL)$$, '22023',
    'p_batch must be between 1 and 10000, got NULL', 'claim: NULL batch');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w1', 0, '30 seconds', '2030-01-01 00:00:04+00')$$, '22023',
    'p_batch must be between 1 and 10000, got 0', 'claim (p_now): batch 0');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w1', 10001, '30 seconds', '2030-01-01 00:00:04+00')$$, '22023',
    'p_batch must be between 1 and 10000, got 10001', 'claim (p_now): batch 10001');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w1', 10, '0 seconds')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 0 seconds', 'claim: lease 0');
SELECT throws_ok($$SELECT * FROM pgsweep.claim('o', 'w1', 10, '3601 seconds', '2030-01-01 00:00:04+00')$$, '22023',
    'p_lease must be between 1 second and 1 hour, got 3601 seconds', 'claim (p_now): lease just above 1 hour');

-- send
SELECT throws_ok($$SELECT pgsweep.send('', '{}')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got an empty string', 'send: empty queue');
SELECT throws_ok($$SELECT pgsweep.send('i', '{}', '{}', repeat('k', 1001))$$, '22023',
    'p_key must be a non-empty string of at most 1000 characters, got 1001 characters', 'send: key of 1001 characters');
SELECT throws_ok($$SELECT pgsweep.send('o', '{}', '"h"')$$, '22023',
    'p_headers must be a JSON object, got string', 'send: headers a string');

-- send_batch
SELECT throws_ok($$SELECT pgsweep.send_batch('nope', ARRAY['1']::jsonb[])$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'send_batch: unknown queue');
SELECT throws_ok($$SELECT pgsweep.send_batch(NULL, ARRAY['1']::jsonb[])$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'send_batch: NULL queue');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', NULL)$$, '22023',
    'cardinality(p_payloads) must be between 1 and 10000, got NULL', 'send_batch: NULL payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', (SELECT payloads FROM many))$$, '22023',
    'cardinality(p_payloads) must be between 1 and 10000, got 10001', 'send_batch: 10001 payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', ARRAY['1', '2']::jsonb[], ARRAY['{}']::jsonb[])$$, '22023',
    'p_headers must be NULL or have 2 elements like p_payloads, got 1', 'send_batch: fewer headers than payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', ARRAY['1', '2']::jsonb[], ARRAY['{}', '{}', '{}']::jsonb[])$$, '22023',
    'p_headers must be NULL or have 2 elements like p_payloads, got 3', 'send_batch: more headers than payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', ARRAY['1', '2']::jsonb[], NULL, NULL, ARRAY['2030-01-01 00:00:00+00']::timestamptz[])$$, '22023',
    'p_deliver_at must be NULL or have 2 elements like p_payloads, got 1', 'send_batch: fewer deliver_at than payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', ARRAY['1']::jsonb[], NULL, NULL, ARRAY['2030-01-01 00:00:00+00', NULL]::timestamptz[])$$, '22023',
    'p_deliver_at must be NULL or have 1 elements like p_payloads, got 2', 'send_batch: more deliver_at than payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('i', ARRAY['1', '2']::jsonb[], NULL, ARRAY['k-9', 'k-10', 'k-11'])$$, '22023',
    'p_keys must be NULL or have 2 elements like p_payloads, got 3', 'send_batch (inbox): more keys than payloads');
SELECT throws_ok($$SELECT pgsweep.send_batch('o', ARRAY['1', '2']::jsonb[], ARRAY['{}', '[]']::jsonb[])$$, '22023',
    'p_headers must be a JSON object, got array', 'send_batch: a header element that is not an object');
SELECT throws_ok($$SELECT pgsweep.send_batch('i', ARRAY['1', '2']::jsonb[], NULL, ARRAY['k-9', ''])$$, '22023',
    'p_key must be a non-empty string of at most 1000 characters, got an empty string', 'send_batch (inbox): an empty key element');

-- queue_create
SELECT throws_ok($$SELECT pgsweep.queue_create(NULL)$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got NULL', 'queue_create: NULL queue');
SELECT throws_ok($$SELECT pgsweep.queue_create('', 'inbox')$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got an empty string', 'queue_create: empty queue');
SELECT throws_ok($$SELECT pgsweep.queue_create(repeat('q', 173))$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got 173 characters', 'queue_create: name of 173 characters');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', NULL)$$, '22023',
    'p_kind must be outbox or inbox, got NULL', 'queue_create: NULL kind');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'Outbox')$$, '22023',
    'p_kind must be outbox or inbox, got Outbox', 'queue_create: kind is case-sensitive');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'outbox', 0)$$, '22023',
    'p_max_attempts must be between 1 and 1000, got 0', 'queue_create: max_attempts 0');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'outbox', 1001)$$, '22023',
    'p_max_attempts must be between 1 and 1000, got 1001', 'queue_create: max_attempts 1001');
SELECT throws_ok($$SELECT pgsweep.queue_create('x', 'outbox', NULL)$$, '22023',
    'p_max_attempts must be between 1 and 1000, got NULL', 'queue_create: NULL max_attempts');
SELECT throws_ok($$SELECT pgsweep.queue_create('o', 'inbox', 5)$$, '22023',
    'p_kind must match the existing queue "o" (outbox), got inbox', 'queue_create: an outbox cannot become an inbox (nor take the new max_attempts)');
SELECT throws_ok($$SELECT pgsweep.queue_create('i')$$, '22023',
    'p_kind must match the existing queue "i" (inbox), got outbox', 'queue_create: the default kind does not turn an inbox into an outbox');
SELECT throws_ok($$SELECT pgsweep.queue_create('o', 'outbox', 0)$$, '22023',
    'p_max_attempts must be between 1 and 1000, got 0', 'queue_create: a repeated create validates max_attempts too');

-- queue_configure: the queue and the shape of p_settings
SELECT throws_ok($$SELECT pgsweep.queue_configure(NULL, '{}')$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'queue_configure: NULL queue');
SELECT throws_ok($$SELECT pgsweep.queue_configure('nope', '{"max_attempts": 5}')$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'queue_configure: unknown queue');
-- queue_configure('o', p_settings): the shape of p_settings, then each setting's
-- range and type, one row a case: the settings, the message, what it shows
SELECT throws_ok(format('SELECT pgsweep.queue_configure(%L, %L)', 'o', c.settings), '22023', c.message,
                 'queue_configure: ' || c.what)
  FROM (VALUES
    (NULL, 'p_settings must be a JSON object, got NULL',
     'NULL settings'),
    ('"max_attempts"', 'p_settings must be a JSON object, got string',
     'settings a string'),
    ('5', 'p_settings must be a JSON object, got number',
     'settings a number'),
    ('null', 'p_settings must be a JSON object, got null',
     'settings JSON null'),
    ('{"max_attempts": 5, "lease": "1 minute"}', 'p_settings: unknown setting "lease" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead, max_in_flight, rate, rate_burst, group_max_in_flight, group_rate, group_overrides)',
     'an unknown key next to a valid one'),
    -- max_attempts
    ('{"max_attempts": 1001}', 'max_attempts must be between 1 and 1000, got 1001',
     'max_attempts 1001'),
    ('{"max_attempts": null}', 'max_attempts must be between 1 and 1000, got NULL',
     'max_attempts null'),
    ('{"max_attempts": 1.5}', 'max_attempts must be an integer between 1 and 1000, got 1.5',
     'max_attempts not an integer'),
    ('{"max_attempts": "ten"}', 'max_attempts must be an integer between 1 and 1000, got "ten"',
     'max_attempts a word'),
    ('{"max_attempts": 1e10}', 'max_attempts must be an integer between 1 and 1000, got 10000000000',
     'max_attempts beyond int'),
    -- backoff_base and backoff_max
    ('{"backoff_base": "-1 second"}', 'backoff_base must be between 0 seconds and 1 day, got -1 second',
     'negative backoff_base'),
    ('{"backoff_base": "25 hours", "backoff_max": "2 days"}', 'backoff_base must be between 0 seconds and 1 day, got 25 hours',
     'backoff_base above 1 day'),
    ('{"backoff_base": null}', 'backoff_base must be between 0 seconds and 1 day, got NULL',
     'backoff_base null'),
    ('{"backoff_base": "soon"}', 'backoff_base must be an interval between 0 seconds and 1 day, got "soon"',
     'backoff_base not an interval'),
    ('{"backoff_base": "2 minutes"}', 'backoff_max must be between 2 minutes and 7 days, got 1 minute',
     'backoff_base above the current backoff_max'),
    ('{"backoff_max": "8 days"}', 'backoff_max must be between 2 seconds and 7 days, got 8 days',
     'backoff_max above 7 days'),
    ('{"backoff_max": null}', 'backoff_max must be between 2 seconds and 7 days, got NULL',
     'backoff_max null'),
    ('{"backoff_max": "1 fortnight"}', 'backoff_max must be an interval between backoff_base and 7 days, got "1 fortnight"',
     'backoff_max not an interval'),
    -- lease_default
    ('{"lease_default": "0.5 seconds"}', 'lease_default must be between 1 second and 1 hour, got 0.5 seconds',
     'lease_default below 1 second'),
    ('{"lease_default": null}', 'lease_default must be between 1 second and 1 hour, got NULL',
     'lease_default null'),
    ('{"lease_default": [30]}', 'lease_default must be an interval between 1 second and 1 hour, got [30]',
     'lease_default an array (PostgreSQL would read ''[30]'' as 30 seconds)'),
    ('{"max_attempts": {"n": 5}}', 'max_attempts must be an integer between 1 and 1000, got {"n": 5}',
     'max_attempts an object'),
    -- processed_retention and dead_retention
    ('{"processed_retention": "0 seconds"}', 'processed_retention must be between 1 second and 100 years, got 0 seconds',
     'processed_retention 0'),
    ('{"processed_retention": "101 years"}', 'processed_retention must be between 1 second and 100 years, got 101 years',
     'processed_retention above 100 years'),
    ('{"processed_retention": "soon"}', 'processed_retention must be an interval between 1 second and 100 years, or null (keep forever), got "soon"',
     'processed_retention not an interval'),
    ('{"dead_retention": "-1 day"}', 'dead_retention must be between 1 second and 100 years, got -1 day',
     'negative dead_retention'),
    ('{"dead_retention": "36501 days"}', 'dead_retention must be between 1 second and 100 years, got 36501 days',
     'dead_retention of 36501 days (100 years are at least 36500 days on any date: exact, not 30-day months)'),
    ('{"dead_retention": true}', 'dead_retention must be an interval between 1 second and 100 years, or null (keep forever), got true',
     'dead_retention a boolean'),
    -- nothing is half-done: valid settings before a bad one are not applied
    ('{"max_attempts": 7, "lease_default": "5 seconds", "dead_retention": "0 seconds"}', 'dead_retention must be between 1 second and 100 years, got 0 seconds',
     'valid settings followed by a bad one')
  ) c(settings, message, what);

-- queue_recover
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('nope', 10)$$, '22023',
    'p_queue must name an existing queue, got unknown queue "nope"', 'queue_recover: unknown queue');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover(NULL, 10)$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got NULL', 'queue_recover: NULL queue');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', 10001, '2030-01-01 01:00:00+00')$$, '22023',
    'p_batch must be between 1 and 10000, got 10001', 'queue_recover: batch 10001');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', -1)$$, '22023',
    'p_batch must be between 1 and 10000, got -1', 'queue_recover: negative batch');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', NULL)$$, '22023',
    'p_batch must be between 1 and 10000, got NULL', 'queue_recover: NULL batch');

-- dead_requeue (the errors dead_letters.sql does not cover)
SELECT throws_ok($$SELECT pgsweep.dead_requeue('i', (SELECT ids FROM many))$$, '22023',
    'p_ids must hold 1 to 10000 ids, got 10001', 'dead_requeue: 10001 ids');
SELECT throws_ok($$SELECT pgsweep.dead_requeue('', ARRAY[pg_temp.id(5)])$$, '22023',
    'p_queue must be a non-empty string of at most 200 characters, got an empty string', 'dead_requeue: empty queue');

-- nothing changed
SELECT set_eq('SELECT * FROM pgsweep.queue', 'SELECT * FROM s_queue', 'queue unchanged');
SELECT set_eq('SELECT * FROM pgsweep.message', 'SELECT * FROM s_message', 'message unchanged');
SELECT set_eq('SELECT * FROM pgsweep.message_processed', 'SELECT * FROM s_processed', 'message_processed unchanged');
SELECT set_eq('SELECT * FROM pgsweep.message_dead', 'SELECT * FROM s_dead', 'message_dead unchanged');
SELECT set_eq('SELECT * FROM pgsweep.claim_cursor', 'SELECT * FROM s_cursor', 'claim_cursor unchanged');
SELECT set_eq('SELECT * FROM pgsweep.queue_recovery', 'SELECT * FROM s_recovery', 'queue_recovery unchanged');

SELECT * FROM finish();
ROLLBACK;
