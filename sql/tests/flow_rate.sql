-- pgTAP: a queue's rate (flow.sql). Claims refill the queue's token bucket
-- for the time since the last claim (N a period, at most rate_burst saved),
-- take at most as many messages as whole tokens and spend one each; over
-- any span claims take at most N per period plus the burst. Time is pinned
-- through p_now (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.flow_grant; DELETE FROM pgsweep.flow_gate; DELETE FROM pgsweep.flow_bucket;
SELECT plan(22);

SELECT pgsweep.queue_create('r', 'outbox', 3);
SELECT pgsweep.send_batch('r', array_fill('{}'::jsonb, ARRAY[4000]));
CREATE FUNCTION pg_temp.at(p_at text) RETURNS timestamptz LANGUAGE sql
AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + p_at::interval $$;
CREATE FUNCTION pg_temp.claim(p_batch int, p_at text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.claim('r', 'w', p_batch, '1 hour', pg_temp.at(p_at)) $$;

-- settings
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate": "0/s"}')$$, '22023',
    'rate must be between 1 and 1000000, got 0', 'a rate of 0 is refused, naming the setting and its range');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate": "1000001/s"}')$$, '22023',
    'rate must be between 1 and 1000000, got 1000001', 'a rate above 1000000 is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate": "5/h"}')$$, '22023',
    'rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got "5/h"', 'a period other than s or min is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate": 5}')$$, '22023',
    'rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got 5', 'a bare number is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate": "-5/s"}')$$, '22023',
    'rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got "-5/s"', 'a negative rate is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate_burst": 0}')$$, '22023',
    'rate_burst must be between 1 and 1000000, got 0', 'a burst of 0 is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('r', '{"rate_burst": "lots"}')$$, '22023',
    'rate_burst must be an integer between 1 and 1000000, or null (the rate''s N), got "lots"', 'a burst that is no integer is refused');
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket), 0::bigint, 'refused settings change nothing');
SELECT results_eq($$SELECT rate, rate_per, rate_burst FROM pgsweep.queue_configure('r', '{"rate": "100/s", "rate_burst": 10}')$$,
    $$VALUES (100, interval '1 second', 10)$$, 'rate 100/s, burst 10');
SELECT is((SELECT tokens FROM pgsweep.flow_bucket WHERE queue = 'r'), 10::double precision, 'a new bucket starts full');

-- the bucket
SELECT is(pg_temp.claim(100, '0'), 10::bigint, 'the first claim takes the burst');
SELECT is(pg_temp.claim(100, '0'), 0::bigint, 'then nothing at the same instant');
SELECT is(pg_temp.claim(100, '5 ms'), 0::bigint, 'half a token is no message');
SELECT is(pg_temp.claim(100, '10 ms'), 1::bigint, 'one token after 10 ms');
SELECT is(pg_temp.claim(100, '1 s'), 10::bigint, 'a second later: the burst, not 99');
SELECT is(pg_temp.claim(3, '2 s'), 3::bigint, 'a claim takes no more than its batch');
SELECT is(pg_temp.claim(100, '2 s'), 7::bigint, 'and leaves the rest for the next');
SELECT is(pg_temp.claim(100, '1 s'), 0::bigint, 'a clock that goes back refills nothing');

-- over 30 seconds of claims every 10 ms: 100 a second plus the burst, no more
SELECT is((SELECT sum(pg_temp.claim(100, (3 + k * 0.01)::text || ' s')) FROM generate_series(0, 3000) k), 3010::numeric,
    'claims every 10 ms for 30 s take 3,010: the burst saved before, then 100 a second');
SELECT is((SELECT sum(pg_temp.claim(100, (40 + k * 0.5)::text || ' s')) FROM generate_series(0, 60) k), 610::numeric,
    'claims every 500 ms for 30 s take 610: the burst caps what a pause saves (10 a claim)');

-- changing and removing it
SELECT results_eq($$SELECT rate, rate_per, rate_burst FROM pgsweep.queue_configure('r', '{"rate": "60/min", "rate_burst": null}')$$,
    $$VALUES (60, interval '1 minute', NULL::int)$$, 'rate 60/min, the burst is N');
SELECT is((SELECT rate FROM pgsweep.queue_configure('r', '{"rate": null}')), NULL::int, 'remove the rate');

SELECT * FROM finish();
ROLLBACK;
