-- pgTAP: leases. Time is pinned through the p_now overloads, so nothing sleeps.
BEGIN;
-- Start from no leases; ROLLBACK at the end restores whatever was there.
DELETE FROM pgsweep.lease;
SELECT plan(40);

SELECT has_table('pgsweep', 'lease', 'lease table exists');
SELECT has_view('pgsweep', 'leases', 'leases view exists');
SELECT has_function('pgsweep', 'lease_acquire', ARRAY['text', 'text', 'interval'], 'lease_acquire(text, text, interval)');
SELECT has_function('pgsweep', 'lease_renew', ARRAY['text', 'text', 'interval'], 'lease_renew(text, text, interval)');
SELECT has_function('pgsweep', 'lease_release', ARRAY['text', 'text'], 'lease_release(text, text)');
SELECT function_returns('pgsweep', 'lease_acquire', ARRAY['text', 'text', 'interval'], 'bigint', 'lease_acquire returns bigint');
SELECT is(
    -- Procedures are exempt: one with a SET clause cannot COMMIT (retention.sql checks them).
    -- So is retention_register's text overload: it reads the caller's search_path to
    -- resolve the table name, and its body is one schema-qualified call.
    (SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND prokind <> 'p'
        AND oid <> 'pgsweep.retention_register(text, text, text, interval, text, text[], int, text, interval)'::regprocedure
        AND NOT coalesce(proconfig, '{}') @> ARRAY['search_path=pgsweep, pg_temp']),
    0::bigint, 'every pgsweep function pins search_path');

-- acquire, contention, re-acquire
SELECT is(pgsweep.lease_acquire('a', 'x', '10 seconds', '2026-01-01 00:00:00+00'), 1::bigint, 'first acquire gets token 1');
SELECT is(pgsweep.lease_acquire('a', 'y', '10 seconds', '2026-01-01 00:00:05+00'), NULL, 'another owner gets NULL while the lease is live');
SELECT is(pgsweep.lease_acquire('a', 'x', '10 seconds', '2026-01-01 00:00:06+00'), 1::bigint, 're-acquire by the holder keeps its token');
SELECT is((SELECT expires_at FROM pgsweep.lease WHERE name = 'a'), '2026-01-01 00:00:16+00'::timestamptz, 're-acquire extends the lease');
SELECT is((SELECT acquired_at FROM pgsweep.lease WHERE name = 'a'), '2026-01-01 00:00:00+00'::timestamptz, 're-acquire keeps acquired_at');
SELECT is(pgsweep.lease_acquire('a', 'y', '10 seconds', '2026-01-01 00:00:15.999+00'), NULL, 'not taken one millisecond before expiry');

-- renew
SELECT ok(pgsweep.lease_renew('a', 'x', '10 seconds', '2026-01-01 00:00:10+00'), 'holder renews a live lease');
SELECT is((SELECT expires_at FROM pgsweep.lease WHERE name = 'a'), '2026-01-01 00:00:20+00'::timestamptz, 'renew moves expiry');
SELECT ok(NOT pgsweep.lease_renew('a', 'y', '10 seconds', '2026-01-01 00:00:11+00'), 'non-holder cannot renew');

-- takeover after expiry
SELECT is(pgsweep.lease_acquire('a', 'y', '10 seconds', '2026-01-01 00:00:20+00'), 2::bigint, 'expired lease is taken over with token + 1');
SELECT ok(NOT pgsweep.lease_renew('a', 'x', '10 seconds', '2026-01-01 00:00:21+00'), 'old owner cannot renew after takeover');
SELECT ok(NOT pgsweep.lease_release('a', 'x', '2026-01-01 00:00:21+00'), 'old owner cannot release after takeover');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'a'), 'y', 'a failed release changes nothing');
SELECT is(pgsweep.lease_acquire('a', 'x', '10 seconds', '2026-01-01 00:00:22+00'), NULL, 'old owner cannot re-acquire a live lease');

-- release
SELECT ok(pgsweep.lease_release('a', 'y', '2026-01-01 00:00:23+00'), 'holder releases');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'a'), NULL, 'release clears the owner');
SELECT is(pgsweep.lease_acquire('a', 'x', '10 seconds', '2026-01-01 00:00:23.5+00'), 3::bigint, 'a released lease is taken at once, token + 1');

-- a holder whose lease lapsed starts a new tenure
SELECT ok(NOT pgsweep.lease_renew('a', 'x', '10 seconds', '2026-01-01 00:00:40+00'), 'renew of a lapsed lease fails');
SELECT is(pgsweep.lease_acquire('a', 'x', '10 seconds', '2026-01-01 00:00:40+00'), 4::bigint, 'lapsed holder re-acquires with a new token');

-- the view
SELECT is((SELECT live FROM pgsweep.leases WHERE name = 'a'), false, 'view: lease in the past is not live');
SELECT ok(pgsweep.lease_acquire('live', 'x', '1 hour') IS NOT NULL, 'wall-clock acquire works');
SELECT results_eq(
    $$SELECT name, owner, token, live FROM pgsweep.leases WHERE name = 'live'$$,
    $$VALUES ('live'::text, 'x'::text, 1::bigint, true)$$,
    'view shows holder, token and live');
SELECT is(
    (SELECT array_agg(n ORDER BY n) FROM pgsweep.lease_release_owner('x') n),
    ARRAY['a', 'live'], 'lease_release_owner releases every lease of the owner');

-- bad input: 22023 naming the argument, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.lease;
SELECT throws_ok($$SELECT pgsweep.lease_acquire(NULL, 'x', '10 seconds')$$, '22023',
    'p_name must be a non-empty string of at most 200 characters, got NULL', 'NULL name');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('', 'x', '10 seconds')$$, '22023',
    'p_name must be a non-empty string of at most 200 characters, got an empty string', 'empty name');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('b', repeat('o', 201), '10 seconds')$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got 201 characters', 'over-long owner');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('b', NULL, '10 seconds')$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got NULL', 'NULL owner');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('b', 'x', '999 milliseconds')$$, '22023',
    'p_ttl must be between 1 second and 1 hour, got 0.999 seconds', 'ttl below 1 second');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('b', 'x', '61 minutes')$$, '22023',
    'p_ttl must be between 1 second and 1 hour, got 61 minutes', 'ttl above 1 hour');
SELECT throws_ok($$SELECT pgsweep.lease_acquire('b', 'x', NULL)$$, '22023',
    'p_ttl must be between 1 second and 1 hour, got NULL', 'NULL ttl');
SELECT throws_ok($$SELECT pgsweep.lease_renew('a', 'x', '2 hours')$$, '22023',
    'p_ttl must be between 1 second and 1 hour, got 2 hours', 'renew validates ttl');
SELECT throws_ok($$SELECT pgsweep.lease_release('a', '')$$, '22023',
    'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'release validates owner');
SELECT set_eq('SELECT * FROM pgsweep.lease', 'SELECT * FROM before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
