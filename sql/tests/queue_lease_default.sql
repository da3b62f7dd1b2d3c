-- pgTAP: the per-queue default lease. claim and renew called with p_lease
-- NULL (or claim with p_lease left out) lease for the queue's lease_default
-- (queue_configure sets it); an explicit p_lease wins. Time is pinned through the p_now overloads
-- (T = 2030-01-01); the wall-clock overloads are checked against the clock.
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(14);

SELECT pgsweep.queue_create('d');
SELECT is((pgsweep.queue_configure('d', '{"lease_default": "5 seconds"}')).lease_default, '5 seconds'::interval,
    'queue_configure sets lease_default');
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('d', ARRAY['1', '2', '3', '4']::jsonb[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
-- the token of the claim that holds message n (the tests here are about leases, not fencing)
CREATE FUNCTION pg_temp.tok(n int) RETURNS uuid LANGUAGE sql AS $$ SELECT token FROM pgsweep.message WHERE queue = 'd' AND id = pg_temp.id(n) $$;

-- claim with p_lease NULL: the queue's lease_default
SELECT results_eq($$SELECT id, lease_expires_at FROM pgsweep.claim('d', 'w', 1, NULL, '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(1), '2030-01-01 00:00:05+00'::timestamptz)$$,
    'claim with NULL lease: lease_expires_at = p_now + lease_default (5 s)');
SELECT results_eq($$SELECT status, owner, visible_at FROM pgsweep.message WHERE queue = 'd' AND id = pg_temp.id(1)$$,
    $$VALUES ('processing'::text, 'w'::text, '2030-01-01 00:00:05+00'::timestamptz)$$,
    'the row is leased until p_now + 5 s');

-- renew with p_lease NULL: the queue's lease_default from p_now
SELECT results_eq($$SELECT * FROM pgsweep.renew('d', pg_temp.tok(1), ARRAY[pg_temp.id(1)], NULL, '2030-01-01 00:00:03+00')$$,
    $$VALUES (pg_temp.id(1))$$, 'renew with NULL lease acts on the held row');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'd' AND id = pg_temp.id(1)), '2030-01-01 00:00:08+00'::timestamptz,
    'renew with NULL lease: visible_at = p_now + lease_default (5 s)');

-- an explicit lease wins over the default
SELECT results_eq($$SELECT id, lease_expires_at FROM pgsweep.claim('d', 'w', 1, '1 minute', '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(2), '2030-01-01 00:01:00+00'::timestamptz)$$, 'claim with an explicit lease ignores lease_default');
SELECT pgsweep.renew('d', pg_temp.tok(1), ARRAY[pg_temp.id(1)], '10 minutes', '2030-01-01 00:00:04+00');
SELECT is((SELECT visible_at FROM pgsweep.message WHERE queue = 'd' AND id = pg_temp.id(1)), '2030-01-01 00:10:04+00'::timestamptz,
    'renew with an explicit lease ignores lease_default');

-- a changed default applies to the next call
SELECT pgsweep.queue_configure('d', '{"lease_default": "1 hour"}');
SELECT results_eq($$SELECT id, lease_expires_at FROM pgsweep.claim('d', 'w', 1, NULL, '2030-01-01 00:00:00+00')$$,
    $$VALUES (pg_temp.id(3), '2030-01-01 01:00:00+00'::timestamptz)$$, 'claim uses the lease_default in force (1 hour)');

-- the wall-clock overloads read the default too
SELECT pgsweep.queue_configure('d', '{"lease_default": "7 seconds"}');
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS at;
CREATE TEMP TABLE c AS SELECT * FROM pgsweep.claim('d', 'w', 1, NULL);
CREATE TEMP TABLE t1 AS SELECT clock_timestamp() AS at;
SELECT results_eq($$SELECT id FROM c$$, $$VALUES (pg_temp.id(4))$$, 'wall-clock claim with NULL lease');
SELECT ok((SELECT lease_expires_at BETWEEN (SELECT at FROM t0) + interval '7 seconds' AND (SELECT at FROM t1) + interval '7 seconds' FROM c),
    'wall-clock claim with NULL lease: expiry = clock + lease_default (7 s)');
DELETE FROM t0; INSERT INTO t0 SELECT clock_timestamp();
SELECT pgsweep.renew('d', pg_temp.tok(4), ARRAY[pg_temp.id(4)], NULL);
DELETE FROM t1; INSERT INTO t1 SELECT clock_timestamp();
SELECT ok((SELECT visible_at BETWEEN (SELECT at FROM t0) + interval '7 seconds' AND (SELECT at FROM t1) + interval '7 seconds'
             FROM pgsweep.message WHERE queue = 'd' AND id = pg_temp.id(4)),
    'wall-clock renew with NULL lease: visible_at = clock + lease_default (7 s)');

-- claim with p_lease left out: the queue's lease_default too
INSERT INTO ids SELECT 5, pgsweep.send('d', '"5"');
DELETE FROM t0; INSERT INTO t0 SELECT clock_timestamp();
CREATE TEMP TABLE c5 AS SELECT * FROM pgsweep.claim('d', 'w');
DELETE FROM t1; INSERT INTO t1 SELECT clock_timestamp();
SELECT results_eq($$SELECT id FROM c5$$, $$VALUES (pg_temp.id(5))$$, 'wall-clock claim with the lease left out');
SELECT ok((SELECT lease_expires_at BETWEEN (SELECT at FROM t0) + interval '7 seconds' AND (SELECT at FROM t1) + interval '7 seconds' FROM c5),
    'claim(p_queue, p_owner) leases for the queue''s lease_default (7 s), not a fixed 30 seconds');

-- another queue keeps its own default (30 seconds)
SELECT pgsweep.queue_create('e');
SELECT pgsweep.send('e', '"e"');
SELECT is((SELECT lease_expires_at FROM pgsweep.claim('e', 'w', 1, NULL, '2030-01-01 00:00:00+00')), '2030-01-01 00:00:30+00'::timestamptz,
    'the default is per queue: an unconfigured queue leases for 30 seconds');

SELECT * FROM finish();
ROLLBACK;
