-- pgTAP: group_rate (flow.sql, flow_groups.sql). Each group of a queue
-- with a group rate has a token bucket of its own (made full by the
-- group's first claim, burst N): a claim takes at most the group's whole
-- tokens of its messages, spends only the tokens of the messages it keeps,
-- and an override sets one group's rate. claim_ids obeys it too; recovery
-- removes the buckets of idle groups (full again); group_stats and
-- flow_stats report the rates. Time is pinned through p_now (T =
-- 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.flow_grant; DELETE FROM pgsweep.flow_gate; DELETE FROM pgsweep.flow_bucket;
DELETE FROM pgsweep.group_cursor;
SELECT plan(41);

SELECT pgsweep.queue_create('gr', 'outbox', 3);
CREATE FUNCTION pg_temp.at(p_at text) RETURNS timestamptz LANGUAGE sql
AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + p_at::interval $$;
CREATE FUNCTION pg_temp.send(p_q text, p_grp text, p_n int) RETURNS void LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.send_batch(p_q, array_fill('{}'::jsonb, ARRAY[p_n]),
                                              p_groups => array_fill(p_grp, ARRAY[p_n])) $$;
-- the groups of a claim, '-' for a message without one, in name order
CREATE FUNCTION pg_temp.claim(p_q text, p_batch int, p_at text) RETURNS text LANGUAGE sql
AS $$ SELECT coalesce(string_agg(coalesce(m.grp, '-'), ',' ORDER BY m.grp NULLS FIRST, c.id), '')
        FROM pgsweep.claim(p_q, 'w', p_batch, '1 hour', pg_temp.at(p_at)) c
        JOIN pgsweep.message m ON m.queue = p_q AND m.id = c.id $$;

-- settings: refused, naming the setting and its range; nothing changed
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_rate": "0/s"}')$$, '22023',
    'group_rate must be between 1 and 1000000, got 0', 'a group rate of 0 is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_rate": "5/h"}')$$, '22023',
    'group_rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got "5/h"',
    'a period other than s or min is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_rate": 5}')$$, '22023',
    'group_rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got 5', 'a bare number is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": "0/min"}}}')$$, '22023',
    'group_overrides.a.rate must be between 1 and 1000000, got 0', 'an override''s rate of 0 is refused, named by its path');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": 3}}}')$$, '22023',
    'group_overrides.a.rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got 3',
    'an override''s rate that is no rate is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {}}}')$$, '22023',
    'group_overrides.a must be {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} (either, a setting null removes it) or null (no override), got {}',
    'an empty override is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"max_in_flight": "x"}}}')$$, '22023',
    'group_overrides.a.max_in_flight must be an integer between 1 and 100000, or null (no override), got "x"',
    'an override''s limit that is no number is refused');
SELECT is((SELECT row(group_rate, group_rate_per, group_overrides)::text FROM pgsweep.queue WHERE name = 'gr'),
    row(NULL::int, NULL::interval, NULL::jsonb)::text, 'refused settings change nothing');

-- overrides merge setting by setting; a rate is kept as 'N/s' or 'N/min'
SELECT is((pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"max_in_flight": 4}}}')).group_overrides,
    '{"a": {"max_in_flight": 4}}'::jsonb, 'an override of a limit');
SELECT is((pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": "007/s"}, "b": {"rate": "30/min"}}}')).group_overrides,
    '{"a": {"max_in_flight": 4, "rate": "7/s"}, "b": {"rate": "30/min"}}'::jsonb, 'a rate merges into the group''s override');
SELECT is((pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"max_in_flight": null}}}')).group_overrides,
    '{"a": {"rate": "7/s"}, "b": {"rate": "30/min"}}'::jsonb, 'a setting set to null leaves the group''s others');
SELECT is((pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": null}, "b": null}}')).group_overrides,
    NULL::jsonb, 'the last settings removed: no override left');
SELECT results_eq($$SELECT group_rate, group_rate_per FROM pgsweep.queue_configure('gr', '{"group_rate": "2/s"}')$$,
    $$VALUES (2, interval '1 second')$$, 'group_rate 2/s');
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket), 0::bigint, 'no bucket before a group''s first claim');

-- the buckets: two per second per group, a burst of two
SELECT pg_temp.send('gr', 'a', 10);
SELECT pg_temp.send('gr', 'b', 10);
SELECT pg_temp.send('gr', NULL, 3);
SELECT is(pg_temp.claim('gr', 20, '0'), '-,-,-,a,a,b,b', 'a claim takes two of each group (their burst) and every ungrouped one');
SELECT results_eq($$SELECT grp, tokens FROM pgsweep.flow_bucket WHERE queue = 'gr' ORDER BY grp$$,
    $$VALUES ('a', 0::double precision), ('b', 0::double precision)$$, 'the groups'' first claim made their buckets, now empty');
SELECT is(pg_temp.claim('gr', 20, '0'), '', 'then nothing at the same instant');
SELECT is(pg_temp.claim('gr', 20, '400 ms'), '', 'nor before a whole token');
SELECT is(pg_temp.claim('gr', 20, '500 ms'), 'a,b', 'half a second later: one of each');
SELECT is(pg_temp.claim('gr', 20, '10 s'), 'a,a,b,b', 'ten seconds later: the burst, not 20');

-- an override: group a gets 5 a second
SELECT pg_temp.send('gr', 'a', 20);
SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": "5/s"}}}');
SELECT is(pg_temp.claim('gr', 20, '11 s'), 'a,a,a,a,a,b,b', 'a''s override lets 5 through (its bucket caps at its own N), b''s the queue''s 2');
SELECT is(pg_temp.claim('gr', 20, '11.2 s'), 'a', 'a fifth of a second later: one of a (b has 0.4 tokens)');
SELECT results_eq($$SELECT grp, tokens, at FROM pgsweep.flow_bucket WHERE queue = 'gr' ORDER BY grp$$,
    $$VALUES ('a', 0::double precision, pg_temp.at('11.2 s')), ('b', 0::double precision, pg_temp.at('11 s'))$$,
    'a spent its token; b''s bucket, with no whole token, was not touched');

-- tokens are spent only for the messages kept: a claim whose rows the
-- queue's max_in_flight cuts (a race lost: _flow_keep, called as a claim does)
SELECT pgsweep.queue_create('cut', 'outbox', 3);
SELECT pgsweep.queue_configure('cut', '{"max_in_flight": 1, "group_rate": "5/s"}');
SELECT pg_temp.send('cut', 'a', 3);
SELECT is(cardinality(pgsweep._flow_keep(q, ARRAY(SELECT id FROM pgsweep.message WHERE queue = 'cut' ORDER BY id),
                                         ARRAY(SELECT id FROM pgsweep.message WHERE queue = 'cut' ORDER BY id),
                                         ARRAY['a', 'a', 'a'], gen_random_uuid(), pg_temp.at('1 hour'), pg_temp.at('0'))), 1,
    'three rows of group a found, one kept under the queue''s limit')
  FROM pgsweep.queue q WHERE q.name = 'cut';
SELECT is((SELECT tokens FROM pgsweep.flow_bucket WHERE queue = 'cut' AND grp = 'a'), 4::double precision,
    'a''s bucket spent one token: the two rows let go cost none');

-- group_max_in_flight and group_rate together: the lower bound wins
SELECT pgsweep.queue_create('both', 'outbox', 3);
SELECT pgsweep.queue_configure('both', '{"group_max_in_flight": 3, "group_rate": "2/s"}');
SELECT pg_temp.send('both', 'x', 10);
SELECT is(pg_temp.claim('both', 10, '0'), 'x,x', 'the rate gives 2, under the limit of 3');
SELECT is(pg_temp.claim('both', 10, '10 s'), 'x', 'ten seconds on: the rate gives 2, the limit 1 (2 leased)');

-- claim_ids obeys a group's rate
SELECT pgsweep.queue_create('ids', 'outbox', 3);
SELECT pgsweep.queue_configure('ids', '{"group_rate": "3/min"}');
SELECT pg_temp.send('ids', 'k', 5);
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('ids', 'w', ARRAY(SELECT id FROM pgsweep.message WHERE queue = 'ids'),
                                                '1 hour', pg_temp.at('0'))), 3::bigint, 'claim_ids takes 3 of 5: the group''s burst');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('ids', 'w', ARRAY(SELECT id FROM pgsweep.message WHERE queue = 'ids'),
                                                '1 hour', pg_temp.at('20 s'))), 1::bigint, 'a third of a minute later: one');

-- what group_stats and flow_stats report
SELECT results_eq($$SELECT group_name, max_in_flight, rate, rate_used FROM pgsweep.group_stats('both') ORDER BY 1$$,
    $$VALUES ('x', 3, '2/s', 1)$$, 'group_stats: the group''s limit, rate and tokens used (2 at 0 s; 2 refilled, 1 taken at 10 s)');
SELECT pgsweep.queue_configure('both', '{"group_overrides": {"x": {"rate": "10/min"}}}');
SELECT results_eq($$SELECT group_name, rate FROM pgsweep.group_stats('both')$$, $$VALUES ('x', '10/min')$$,
    'an override''s rate');
SELECT results_eq($$SELECT * FROM pgsweep.flow_stats('both')$$,
    $$VALUES (NULL::int, NULL::int, NULL::text, NULL::int, NULL::int, 3, '2/s', 1)$$,
    'flow_stats: the group defaults and one override');
SELECT pgsweep.queue_create('fs', 'outbox', 3);
SELECT pgsweep.queue_configure('fs', '{"max_in_flight": 5, "rate": "10/s", "rate_burst": 4}');
SELECT pgsweep.send_batch('fs', array_fill('{}'::jsonb, ARRAY[6]));
SELECT is((SELECT count(*) FROM pgsweep.claim('fs', 'w', 3)), 3::bigint, 'three claimed');
SELECT results_eq($$SELECT max_in_flight, in_flight, rate, rate_burst, rate_used, group_max_in_flight, group_rate, group_overrides
                      FROM pgsweep.flow_stats('fs')$$,
    $$VALUES (5, 3, '10/s', 4, 3, NULL::int, NULL::text, 0)$$, 'flow_stats: 3 of 5 in flight, 3 of the burst of 4 used');
SELECT throws_ok($$SELECT * FROM pgsweep.flow_stats('nope')$$, '22023', NULL, 'flow_stats of an unknown queue is refused');

-- recovery removes the buckets of groups idle for a minute (full again);
-- removing the group rate removes them all
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket WHERE queue = 'gr' AND grp <> ''), 2::bigint, 'gr has two group buckets');
SELECT pgsweep.queue_recover('gr', 100, pg_temp.at('50 s'));
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket WHERE queue = 'gr' AND grp <> ''), 2::bigint,
    'recovery keeps the buckets used in the last minute');
SELECT pgsweep.queue_recover('gr', 100, pg_temp.at('2 min'));
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket WHERE queue = 'gr' AND grp <> ''), 0::bigint,
    'and removes those idle for a minute');
SELECT is(pg_temp.claim('gr', 20, '3 min'), 'a,a,a,a,a,b,b', 'a group''s next claim makes its bucket again, full (a''s override: 5)');
SELECT pgsweep.queue_configure('gr', '{"group_rate": null}');
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket WHERE queue = 'gr'), 2::bigint, 'the buckets stay while an override has a rate');
SELECT pgsweep.queue_configure('gr', '{"group_overrides": {"a": {"rate": null}}}');
SELECT is((SELECT count(*) FROM pgsweep.flow_bucket WHERE queue = 'gr'), 0::bigint, 'no group rate left: no bucket');

SELECT * FROM finish();
ROLLBACK;
