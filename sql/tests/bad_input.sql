-- pgTAP: bad input that earlier versions accepted is refused with SQLSTATE
-- 22023 and a message naming the argument and its range, and nothing changes
-- (a checksum of every table the calls could touch, before and after):
--   p_now         NULL or within 10 years of the database clock (_check_now)
--   p_deliver_at  NULL or a finite time at most 10 years ahead (_check_deliver_at)
--   p_retry_after NULL or 0 seconds to 30 days
--   p_time_zone   NULL or a zone whose UTC offset stays within 15 hours (_check_time_zone)
--   p_queue       queue_create: at most 172 characters, so that the queue's
--                 built-in retention policy names fit
-- Then the longest accepted queue name works through send, claim, complete,
-- fail, recovery and its built-in retention (the procedures that COMMIT --
-- retention_run, maintain -- are run for it by TestLongestQueueName).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue; DELETE FROM pgsweep.lease;
DELETE FROM pgsweep.retention_policy;
SET LOCAL TimeZone = 'UTC';
SET LOCAL client_min_messages = warning;
SELECT plan(60);

-- seed: queued, claimed, scheduled, processed and dead rows, a lease, a policy
SELECT pgsweep.queue_create('o', 'outbox', 3);
SELECT pgsweep.queue_create('i', 'inbox', 1);
CREATE TEMP TABLE toks (q text, token uuid);
CREATE FUNCTION pg_temp.t(p_q text) RETURNS uuid LANGUAGE sql AS $$ SELECT token FROM toks WHERE q = p_q $$;
SELECT pgsweep.send('o', '1');
SELECT pgsweep.send('o', '2', '{}', 'k', now() + interval '1 day');
INSERT INTO toks SELECT DISTINCT 'o', token FROM pgsweep.claim('o', 'w1', 1, '30 seconds');
SELECT pgsweep.send('o', '3');
SELECT pgsweep.send('i', '{"k": 1}', '{}', 'k-1');
SELECT pgsweep.send('i', '{"k": 2}', '{}', 'k-2');
INSERT INTO toks SELECT DISTINCT 'i', token FROM pgsweep.claim('i', 'w2', 2, '30 seconds');
SELECT pgsweep.complete('i', pg_temp.t('i'), ARRAY(SELECT id FROM pgsweep.message WHERE key = 'k-1'));
SELECT pgsweep.fail('i', pg_temp.t('i'), ARRAY(SELECT id FROM pgsweep.message WHERE key = 'k-2'), 'boom');
SELECT pgsweep.queue_recover('o', 10);
SELECT pgsweep.lease_acquire('l', 'holder', '1 minute');
CREATE SCHEMA bi;
CREATE TABLE bi.events (id bigint PRIMARY KEY, at timestamp NOT NULL);
CREATE INDEX ON bi.events (at);
SELECT pgsweep.retention_register('bi.events', 'bi.events', 'at', '1 day');
SELECT pgsweep.retention_set_time_zone('bi.events', 'Europe/Berlin');

SELECT results_eq($$SELECT queue, pending, processing, failed, processed, dead FROM pgsweep.queue_stats ORDER BY queue$$,
    $$VALUES ('i'::text, 0::bigint, 0::bigint, 0::bigint, 1::bigint, 1::bigint), ('o', 2, 1, 0, 0, 0)$$,
    'seeded: o has a due, a scheduled and a claimed row; i a processed row and a dead letter');

-- One checksum per table: md5 of its rows in a fixed order.
CREATE FUNCTION pg_temp.sums() RETURNS TABLE (tbl text, n bigint, sum text) LANGUAGE plpgsql AS $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['queue', 'message', 'message_processed', 'message_dead', 'claim_cursor',
                             'queue_recovery', 'lease', 'retention_policy', 'retention_unit'] LOOP
        tbl := r;
        EXECUTE format('SELECT count(*), md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) FROM pgsweep.%I t', r)
            INTO n, sum;
        RETURN NEXT;
    END LOOP;
END $$;
CREATE TEMP TABLE before AS SELECT * FROM pg_temp.sums();

-- p_now: +/-infinity, far from the clock
SELECT throws_ok($$SELECT pgsweep.lease_acquire('l2', 'w', '1 minute', 'infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got infinity',
    'lease_acquire: p_now infinity');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('l', 'holder', '1 minute', '-infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got -infinity',
    'lease_acquire: p_now -infinity (the holder: it would extend its lease)');
SELECT throws_ok(format('SELECT pgsweep.lease_acquire(%L, %L, %L, %L)', 'l2', 'w', '1 minute', now() + interval '10 years 1 hour'), '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got ' || (now() + interval '10 years 1 hour'),
    'lease_acquire: p_now just over 10 years ahead');
SELECT throws_ok(format('SELECT pgsweep.lease_acquire(%L, %L, %L, %L)', 'l2', 'w', '1 minute', now() - interval '10 years 1 hour'), '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got ' || (now() - interval '10 years 1 hour'),
    'lease_acquire: p_now just over 10 years ago');
SELECT throws_ok($$SELECT pgsweep.lease_renew('l', 'holder', '1 minute', 'infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got infinity',
    'lease_renew: p_now infinity');
SELECT throws_ok($$SELECT pgsweep.lease_renew('l', 'holder', '1 minute', '200000-01-01 00:00:00+00')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got 200000-01-01 00:00:00+00',
    'lease_renew: p_now in year 200000');
SELECT throws_ok($$SELECT pgsweep.lease_release('l', 'holder', '-infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got -infinity',
    'lease_release: p_now -infinity');
SELECT throws_ok($$SELECT pgsweep.lease_release('l', 'holder', '1900-01-01 00:00:00+00')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got 1900-01-01 00:00:00+00',
    'lease_release: p_now in 1900');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_counts('o', 'infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got infinity',
    'queue_counts: p_now infinity');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', 10, 'infinity')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got infinity',
    'queue_recover: p_now infinity (it would release every live claim)');
SELECT throws_ok($$SELECT * FROM pgsweep.queue_recover('o', 10, '2100-01-01 00:00:00+00')$$, '22023',
    'p_now must be NULL (the database clock) or a time within 10 years of the database clock, got 2100-01-01 00:00:00+00',
    'queue_recover: p_now in 2100');

-- p_deliver_at: infinity, year 200000, over 10 years ahead
SELECT throws_ok($$SELECT pgsweep.send('o', '1', '{}', NULL, 'infinity')$$, '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got infinity',
    'send: deliver_at infinity');
SELECT throws_ok($$SELECT pgsweep.send('o', '1', '{}', NULL, '-infinity')$$, '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got -infinity',
    'send: deliver_at -infinity');
SELECT throws_ok($$SELECT pgsweep.send('i', '1', '{}', 'k-new', '200000-01-01 00:00:00+00')$$, '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got 200000-01-01 00:00:00+00',
    'send (inbox): deliver_at in year 200000');
SELECT throws_ok(format('SELECT pgsweep.send(%L, %L, %L, NULL, %L)', 'o', '1', '{}', now() + interval '10 years 1 hour'), '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got ' || (now() + interval '10 years 1 hour'),
    'send: deliver_at just over 10 years ahead');
SELECT throws_ok($$SELECT * FROM pgsweep.send_batch('o', ARRAY['1', '2', '3']::jsonb[], NULL, NULL,
                                                     ARRAY[NULL, 'infinity', NULL]::timestamptz[])$$, '22023',
    'p_deliver_at[2] must be NULL (now) or a finite time at most 10 years after the database clock, got infinity',
    'send_batch: one deliver_at of three is infinity (the other two are not sent either)');
SELECT throws_ok($$SELECT * FROM pgsweep.send_batch('i', ARRAY['1', '2']::jsonb[], NULL, ARRAY['k-a', 'k-b'],
                                                     ARRAY[NULL, '200000-01-01 00:00:00+00']::timestamptz[])$$, '22023',
    'p_deliver_at[2] must be NULL (now) or a finite time at most 10 years after the database clock, got 200000-01-01 00:00:00+00',
    'send_batch (inbox keys): deliver_at in year 200000');
SELECT throws_ok($$SELECT pgsweep.dead_requeue('i', ARRAY(SELECT id FROM pgsweep.message_dead), 'infinity')$$, '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got infinity',
    'dead_requeue: deliver_at infinity');
SELECT throws_ok($$SELECT pgsweep.dead_requeue('i', ARRAY(SELECT id FROM pgsweep.message_dead), '200000-01-01 00:00:00+00')$$, '22023',
    'p_deliver_at must be NULL (now) or a finite time at most 10 years after the database clock, got 200000-01-01 00:00:00+00',
    'dead_requeue: deliver_at in year 200000');

-- p_retry_after: over 30 days (intervals have no infinity in PostgreSQL 15)
SELECT throws_ok($$SELECT pgsweep.fail('o', pg_temp.t('o'), ARRAY(SELECT id FROM pgsweep.message WHERE status = 'processing'), 'e', '1000 years')$$,
    '22023', 'p_retry_after must be between 0 seconds and 30 days, got 1000 years', 'fail: retry_after 1000 years');
SELECT throws_ok($$SELECT * FROM pgsweep.fail_details('o', pg_temp.t('o'), ARRAY(SELECT id FROM pgsweep.message WHERE status = 'processing'), 'e', '1 month 1 day')$$,
    '22023', 'p_retry_after must be between 0 seconds and 30 days, got 1 month 1 day', 'fail_details: retry_after 1 month 1 day');

-- p_time_zone: UTC offsets beyond 15 hours (PostgreSQL accepts POSIX offsets up to 167 hours)
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'UTC-99')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''UTC-99'', whose UTC offset is +99 hours',
    'time zone UTC-99');
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', '+99')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''+99'', whose UTC offset is -99 hours',
    'time zone +99 (POSIX: west of Greenwich)');
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'UTC-15:01')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''UTC-15:01'', whose UTC offset is +901 minutes',
    'time zone one minute beyond 15 hours');
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'AAA5BBB-99,J60/0,J60/1')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''AAA5BBB-99,J60/0,J60/1'', whose UTC offset is +99 hours',
    'time zone whose daylight-saving offset (one hour a year) is out of range');
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'Mars/Olympus')$$, '22023',
    'p_time_zone must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got ''Mars/Olympus'', which is not a time zone',
    'unknown time zone');

-- p_queue: names longer than 172 characters
SELECT throws_ok($$SELECT pgsweep.queue_create(repeat('q', 173), 'inbox')$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got 173 characters',
    'queue_create: 173 characters');
SELECT throws_ok($$SELECT pgsweep.queue_create(repeat('q', 178))$$, '22023',
    'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got 178 characters',
    'queue_create: 178 characters (the name that broke built-in retention of every queue)');

-- nothing changed
SELECT results_eq('SELECT * FROM pg_temp.sums() ORDER BY tbl', 'SELECT * FROM before ORDER BY tbl',
    'every bad call changed nothing: same row count and checksum of each table');

-- The bounds accept what is inside them.
SELECT lives_ok(format('SELECT * FROM pgsweep.queue_counts(%L, %L)', 'o', now() + interval '9 years 11 months'),
    'p_now 9 years 11 months ahead is accepted');
SELECT lives_ok(format('SELECT * FROM pgsweep.queue_counts(%L, %L)', 'o', now() - interval '9 years 11 months'),
    'p_now 9 years 11 months ago is accepted');
SELECT isnt(pgsweep.send('o', '4', '{}', NULL, clock_timestamp() + interval '9 years 11 months'), NULL,
    'deliver_at 9 years 11 months ahead is accepted');
SELECT isnt(pgsweep.send('o', '5', '{}', NULL, '2000-01-01 00:00:00+00'), NULL, 'deliver_at in the past is accepted (due now)');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'Pacific/Kiritimati')$$, 'time zone +14 hours');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'Pacific/Pago_Pago')$$, 'time zone -11 hours');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'UTC-15')$$, 'time zone exactly +15 hours');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', 'EST5EDT')$$, 'a POSIX zone with daylight saving');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('bi.events', NULL)$$, 'NULL time zone');

-- The longest accepted queue name works everywhere.
CREATE TEMP TABLE longq AS SELECT repeat('q', 171) || 'Z' AS name;
CREATE FUNCTION pg_temp.q() RETURNS text LANGUAGE sql AS $$ SELECT name FROM longq $$;
CREATE FUNCTION pg_temp.run(p_name text, p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
    v := pgsweep._retention_begin(p_name, 'tap', interval '1 hour', p_now);
    IF v IS NULL THEN RETURN NULL; END IF;
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN v;
END $$;
SELECT is(length(pg_temp.q()), 172, 'the longest queue name has 172 characters');
SELECT lives_ok($$SELECT pgsweep.queue_create(pg_temp.q(), 'inbox', 1)$$, 'queue_create accepts it');
SELECT pgsweep.queue_configure(pg_temp.q(), '{"processed_retention": "1 second", "dead_retention": "1 second"}');
SELECT isnt(pgsweep.send(pg_temp.q(), '1', '{}', 'a'), NULL, 'send');
SELECT is(pgsweep.send(pg_temp.q(), '1', '{}', 'a'), NULL, 'send: inbox duplicate');
SELECT isnt(pgsweep.send(pg_temp.q(), '2', '{}', 'b'), NULL, 'send another');
SELECT is((SELECT count(*) FROM pgsweep.send_batch(pg_temp.q(), ARRAY['3']::jsonb[], NULL, ARRAY['c']) s WHERE s IS NOT NULL), 1::bigint, 'send_batch');
INSERT INTO toks SELECT DISTINCT 'long', token FROM pgsweep.claim(pg_temp.q(), 'w', 10, '30 seconds');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = pg_temp.q() AND status = 'processing'), 3::bigint, 'claim');
SELECT is((SELECT count(*) FROM pgsweep.complete(pg_temp.q(), pg_temp.t('long'),
    ARRAY(SELECT id FROM pgsweep.message WHERE queue = pg_temp.q() AND key = 'a'))), 1::bigint, 'complete');
SELECT is((SELECT count(*) FROM pgsweep.fail(pg_temp.q(), pg_temp.t('long'),
    ARRAY(SELECT id FROM pgsweep.message WHERE queue = pg_temp.q() AND key = 'b'), 'boom')), 1::bigint, 'fail (the last attempt: a dead letter)');
SELECT is((SELECT (r).dead_lettered FROM (SELECT pgsweep.queue_recover(pg_temp.q(), 10, clock_timestamp() + interval '1 hour') r) x), 1,
    'queue_recover dead-letters the expired claim on its last attempt');
SELECT results_eq(format('SELECT processed, dead FROM pgsweep.queue_stats WHERE queue = %L', pg_temp.q()),
    $$VALUES (1::bigint, 2::bigint)$$, 'queue_stats');
SELECT lives_ok($$SELECT pgsweep.retention_builtin_sync()$$, 'retention_builtin_sync');
SELECT set_eq($$SELECT name FROM pgsweep.retention_policy WHERE name LIKE 'pgsweep.%'$$,
    $$SELECT unnest(ARRAY['pgsweep.processed:' || pg_temp.q(), 'pgsweep.dead:' || pg_temp.q(), 'pgsweep.processed:i', 'pgsweep.dead:i', 'pgsweep.dead:o'])$$,
    'it has its built-in policies, and so has every other queue');
SELECT is(length('pgsweep.processed:' || pg_temp.q()), 190, 'its processed policy name has the longest length a policy name may have');
-- a cutoff is never later than now() - older_than (0.34): age the rows, not the clock
UPDATE pgsweep.message_processed SET processed_at = processed_at - interval '1 day' WHERE queue = pg_temp.q();
UPDATE pgsweep.message_dead SET dead_at = dead_at - interval '1 day' WHERE queue = pg_temp.q();
SELECT isnt(pg_temp.run('pgsweep.processed:' || pg_temp.q(), clock_timestamp() + interval '1 day'), NULL, 'a retention pass of its processed policy runs');
SELECT isnt(pg_temp.run('pgsweep.dead:' || pg_temp.q(), clock_timestamp() + interval '1 day'), NULL, 'a retention pass of its dead-letter policy runs');
SELECT results_eq(format('SELECT processed, dead FROM pgsweep.queue_stats WHERE queue = %L', pg_temp.q()),
    $$VALUES (0::bigint, 0::bigint)$$, 'retention removed its processed row and dead letters');
SELECT isnt(pgsweep.send(pg_temp.q(), '1', '{}', 'a'), NULL, 'its completed key is free again once retention removed the processed row');

-- A queue made by an older version with a longer name gets no built-in
-- policy whose name would not fit (a WARNING says so); every other queue
-- keeps its retention.
INSERT INTO pgsweep.queue (name, kind, max_attempts) VALUES (repeat('x', 180), 'inbox', 3);
SELECT pgsweep.queue_create('fresh');
SELECT lives_ok($$SELECT pgsweep.retention_builtin_sync()$$, 'retention_builtin_sync with a legacy 180-character queue');
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name = 'pgsweep.dead:fresh'), 1::bigint,
    'other queues still get their policies');
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name LIKE '%xxxxx'), 0::bigint,
    'the legacy queue gets no policy');

SELECT * FROM finish();
ROLLBACK;
