-- pgTAP: groups (flow.sql, "Groups"). send's p_group puts a message in a
-- group; claims take turns between the groups with due messages (one row
-- each per round, then equal parts of what is left), leave the messages
-- without a group their share, and hold group_max_in_flight and
-- group_overrides with slots of each group; claim_ids obeys them too;
-- renew, complete and expiry behave as for the queue's own slots; lanes
-- and groups combine; group_stats reports the groups. Time is pinned
-- through p_now where it matters (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.flow_grant; DELETE FROM pgsweep.flow_gate; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.group_cursor;
SELECT plan(65);

SELECT pgsweep.queue_create('g', 'outbox', 2);
CREATE FUNCTION pg_temp.at(p_at text) RETURNS timestamptz LANGUAGE sql
AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + p_at::interval $$;
-- p_n messages of group p_grp (NULL: none) on queue p_q
CREATE FUNCTION pg_temp.send(p_q text, p_grp text, p_n int) RETURNS void LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.send_batch(p_q, array_fill('{}'::jsonb, ARRAY[p_n]),
                                              p_groups => array_fill(p_grp, ARRAY[p_n])) $$;
-- the groups of a claim of p_batch on queue p_q by p_owner (lease 1 hour),
-- '-' for a message without one, in the order of the groups' names
CREATE FUNCTION pg_temp.claim(p_q text, p_owner text, p_batch int, p_at text DEFAULT NULL) RETURNS text LANGUAGE sql
AS $$ SELECT coalesce(string_agg(coalesce(m.grp, '-'), ',' ORDER BY m.grp NULLS FIRST, c.id), '')
        FROM pgsweep.claim(p_q, p_owner, p_batch, '1 hour', pg_temp.at(coalesce(p_at, '0'))) c
        JOIN pgsweep.message m ON m.queue = p_q AND m.id = c.id $$;
CREATE FUNCTION pg_temp.token(p_q text, p_owner text) RETURNS uuid LANGUAGE sql
AS $$ SELECT token FROM pgsweep.message WHERE queue = p_q AND owner = p_owner AND status = 'processing' LIMIT 1 $$;
CREATE FUNCTION pg_temp.ids(p_q text, p_owner text) RETURNS bigint[] LANGUAGE sql
AS $$ SELECT array_agg(id ORDER BY id) FROM pgsweep.message WHERE queue = p_q AND owner = p_owner AND status = 'processing' $$;
CREATE FUNCTION pg_temp.done(p_q text, p_owner text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.complete(p_q, pg_temp.token(p_q, p_owner), pg_temp.ids(p_q, p_owner)) $$;
-- the leases of group p_grp of queue p_q live at T + p_at
CREATE FUNCTION pg_temp.leased(p_q text, p_grp text, p_at text DEFAULT '0') RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.message WHERE queue = p_q AND grp = p_grp AND status = 'processing' AND visible_at > pg_temp.at(p_at) $$;

-- bad groups: refused, naming the argument, nothing sent
SELECT throws_ok($$SELECT pgsweep.send('g', '{}', p_group => '')$$, '22023', NULL, 'an empty group is refused');
SELECT throws_like($$SELECT pgsweep.send('g', '{}', p_group => repeat('x', 201))$$, '%p_group%', 'a group of 201 characters is refused, naming p_group');
SELECT throws_like($$SELECT pgsweep.send_batch('g', ARRAY['{}', '{}']::jsonb[], p_groups => ARRAY['a', E'b\n'])$$, '%p_groups[2]%',
    'a bad element of p_groups is named');
SELECT throws_like($$SELECT pgsweep.send_batch('g', ARRAY['{}', '{}']::jsonb[], p_groups => ARRAY['a'])$$,
    '%p_groups must be NULL or have 2 elements%', 'p_groups of another length is refused');
SELECT is((SELECT count(*) FROM pgsweep.message), 0::bigint, 'nothing was sent');

-- a group is stored, and kept by a dead letter and its requeue
CREATE TEMP TABLE sent AS
SELECT 'send' AS verb, pgsweep.send('g', '{}', p_group => 'acme') AS id
UNION ALL SELECT 'send_batch', b FROM pgsweep.send_batch('g', ARRAY['{}']::jsonb[], p_groups => ARRAY['zeta']) b
UNION ALL SELECT 'send_unique', s.id FROM pgsweep.send_unique('g', '{}', p_group => 'acme') s;
SELECT results_eq($$SELECT s.verb, m.grp FROM sent s JOIN pgsweep.message m ON m.queue = 'g' AND m.id = s.id ORDER BY s.id$$,
    $$VALUES ('send', 'acme'), ('send_batch', 'zeta'), ('send_unique', 'acme')$$, 'send, send_batch and send_unique store the group');
SELECT is(pg_temp.claim('g', 'd', 10), 'acme,acme,zeta', 'the three are claimed');
SELECT is((SELECT count(*) FROM pgsweep.dead_letter('g', pg_temp.token('g', 'd'), pg_temp.ids('g', 'd'), 'gone')), 3::bigint, 'and dead-lettered');
SELECT is((SELECT array_agg(grp ORDER BY grp) FROM pgsweep.message_dead WHERE queue = 'g'), ARRAY['acme', 'acme', 'zeta'],
    'a dead letter keeps its group');
SELECT is((SELECT count(*) FROM pgsweep.dead_requeue('g', (SELECT array_agg(id) FROM pgsweep.message_dead WHERE queue = 'g'))), 3::bigint,
    'the letters are requeued');
SELECT is((SELECT array_agg(grp ORDER BY grp) FROM pgsweep.message WHERE queue = 'g'), ARRAY['acme', 'acme', 'zeta'],
    'and come back with their groups');
DELETE FROM pgsweep.message WHERE queue = 'g';

-- the rotation: one row per group per round, from after the last group served
SELECT pg_temp.send('g', 'a', 10);
SELECT pg_temp.send('g', 'b', 3);
SELECT pg_temp.send('g', 'c', 3);
SELECT is(pg_temp.claim('g', 'r', 3), 'a,b,c', 'a claim of 3 serves each of 3 groups once, whatever their backlogs');
SELECT is((SELECT group_after FROM pgsweep.group_cursor WHERE queue = 'g' AND owner = 'r'), 'c', 'the claimer''s rotation stops after the last group served');
SELECT is(pg_temp.claim('g', 'r', 2), 'a,b', 'its next claim goes on from the first group');
SELECT is(pg_temp.claim('g', 'r', 1), 'c', 'and the next after it');
SELECT is(pg_temp.claim('g', 'r', 10), 'a,a,a,a,a,a,a,a,b,c',
    'a bigger batch: one each, then equal parts of what is left among the groups that still have rows');
SELECT is(pg_temp.claim('g', 'r', 10), '', 'nothing left');
DELETE FROM pgsweep.message WHERE queue = 'g';

-- a big group and many small ones: every small group drains while the big one is served a row a round
SELECT pg_temp.send('g', 'big', 200);
SELECT pg_temp.send('g', 's' || i, 5) FROM generate_series(1, 9) i;
CREATE TEMP TABLE served (round int, grp text);
DO $$
BEGIN
    FOR r IN 1 .. 5 LOOP
        INSERT INTO served
        SELECT r, m.grp FROM pgsweep.claim('g', 'f' || r, 10, '1 hour', '2030-01-01'::timestamptz) c
          JOIN pgsweep.message m ON m.queue = 'g' AND m.id = c.id;
        PERFORM pgsweep.complete('g', (SELECT token FROM pgsweep.message WHERE queue = 'g' AND owner = 'f' || r LIMIT 1),
                                 (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'g' AND owner = 'f' || r));
    END LOOP;
END
$$;
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'g' AND grp <> 'big'), 0::bigint,
    'five claims of 10 drain the nine small groups (45 messages)');
SELECT is((SELECT count(*) FROM served WHERE grp = 'big'), 5::bigint, 'while the big group was served one message a claim');
DELETE FROM pgsweep.message WHERE queue = 'g';

-- the messages without a group are one more participant
SELECT pgsweep.queue_create('m', 'outbox', 2);
SELECT pg_temp.send('m', NULL, 20);
SELECT pg_temp.send('m', 'x', 20);
SELECT pg_temp.send('m', 'y', 20);
SELECT is(pg_temp.claim('m', 'u', 10), '-,-,-,-,-,x,x,x,y,y',
    'with groups due and no claim before: half the batch for the messages without a group');
SELECT is((SELECT group_count FROM pgsweep.group_cursor WHERE queue = 'm' AND owner = 'u'), 2, 'two groups served');
SELECT is(pg_temp.claim('m', 'u', 9), '-,-,-,x,x,x,y,y,y', 'then a third of it, the groups two thirds');
SELECT is(pg_temp.claim('m', 'u', 41), '-,-,-,-,-,-,-,-,-,-,-,-,x,x,x,x,x,x,x,x,x,x,x,x,x,x,y,y,y,y,y,y,y,y,y,y,y,y,y,y,y',
    'what the groups leave, the others fill; what they leave, the groups fill');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'm' AND status = 'pending'), 0::bigint, 'all claimed');

-- claims of one row serve the groups and the messages without a group alike
SELECT pgsweep.queue_create('one', 'outbox', 2);
SELECT pg_temp.send('one', NULL, 100);
SELECT pg_temp.send('one', 'x', 100);
CREATE TEMP TABLE ones AS SELECT pg_temp.claim('one', 'o1', 1) AS g FROM generate_series(1, 100);
SELECT ok((SELECT count(*) FROM ones WHERE g = 'x') BETWEEN 25 AND 75 AND (SELECT count(*) FROM ones WHERE g = '-') BETWEEN 25 AND 75,
    format('100 claims of one row: %s of the group, %s without (about half each)',
           (SELECT count(*) FROM ones WHERE g = 'x'), (SELECT count(*) FROM ones WHERE g = '-')));

-- a claim visits at most 4 x batch + 64 groups; past groups with nothing to
-- give (at their limits) its claimer's next claim goes on where it stopped
SELECT pgsweep.queue_create('cap', 'outbox', 2);
SELECT pgsweep.queue_configure('cap', '{"group_max_in_flight": 1}');
SELECT count(*) FROM pgsweep.send_batch('cap', array_fill('{}'::jsonb, ARRAY[600]),
                                         p_groups => ARRAY(SELECT format('a%s', lpad((g % 300)::text, 3, '0')) FROM generate_series(1, 600) g));
SELECT is((SELECT count(*) FROM pgsweep.claim('cap', 'first', 1000, '1 hour', pg_temp.at('0'))), 300::bigint, 'one message of each of 300 groups, their limit');
SELECT pg_temp.send('cap', 'zz', 1);
SELECT is(pg_temp.claim('cap', 'c', 10), '', 'a claim of 10 walks a bounded number of groups at their limits and finds nothing');
SELECT is((SELECT group_after FROM pgsweep.group_cursor WHERE queue = 'cap' AND owner = 'c'), 'a187',
    'its claimer''s place moves to where its walks stopped (84 groups for the groups'' share, 104 for the rest)');
SELECT is(pg_temp.claim('cap', 'c', 10) || pg_temp.claim('cap', 'c', 10), 'zz', 'the claimer''s next claims reach the group behind them');

-- group limits: settings
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_max_in_flight": 0}')$$, '22023',
    'group_max_in_flight must be between 1 and 100000, got 0', 'a group limit of 0 is refused, naming the setting and its range');
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_max_in_flight": "two"}')$$, '22023',
    'group_max_in_flight must be an integer between 1 and 100000, or null (no limit), got "two"', 'a group limit that is no number is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_overrides": [1]}')$$, '22023',
    'group_overrides must be an object of groups, each {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} (either, a setting null removes it) or null (no override), got [1]',
    'overrides that are no object are refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_overrides": {"a": 3}}')$$, '22023',
    'group_overrides.a must be {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} (either, a setting null removes it) or null (no override), got 3', 'an override that is no object is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_overrides": {"a": {"max_in_flight": 3, "weight": 1}}}')$$, '22023',
    'group_overrides.a must be {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} (either, a setting null removes it) or null (no override), got {"weight": 1, "max_in_flight": 3}',
    'an override with an unknown key is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('g', '{"group_overrides": {"a": {"max_in_flight": 0}}}')$$, '22023',
    'group_overrides.a.max_in_flight must be between 1 and 100000, got 0', 'an override out of range is refused, naming it');
SELECT throws_like($$SELECT pgsweep.queue_configure('g', '{"group_overrides": {"": {"max_in_flight": 1}}}')$$,
    '%group_overrides key ""%', 'an empty group name is refused');
SELECT is((SELECT row(group_max_in_flight, group_overrides)::text FROM pgsweep.queue WHERE name = 'g'), '(,)', 'nothing changed');

-- group limits: at most the limit leased, per group, the override winning
SELECT pg_temp.send('g', 'a', 10);
SELECT pg_temp.send('g', 'b', 10);
SELECT pg_temp.send('g', NULL, 10);
SELECT is((SELECT group_overrides FROM pgsweep.queue_configure('g', '{"group_max_in_flight": 2, "group_overrides": {"a": {"max_in_flight": 3}}}')),
    '{"a": {"max_in_flight": 3}}'::jsonb, 'group limit 2, a 3');
SELECT is(pg_temp.claim('g', 'l1', 30), '-,-,-,-,-,-,-,-,-,-,a,a,a,b,b', 'a claim takes 3 of a, 2 of b, and the rest without a group');
SELECT is(pg_temp.claim('g', 'l2', 30), '', 'then nothing: the groups are at their limits');
SELECT results_eq($$SELECT grp, cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'g' ORDER BY grp$$,
    $$VALUES ('a', 3), ('b', 2)$$, 'a grant for each group holds its leases');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('g', 'l3', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'g' AND grp = 'b' AND status = 'pending'), '1 hour', pg_temp.at('0'))),
    0::bigint, 'claim_ids takes nothing of a group at its limit');
SELECT is(pg_temp.done('g', 'l1'), 15::bigint, 'the claim settles');
SELECT is((SELECT count(*) FROM pgsweep.flow_grant WHERE queue = 'g'), 0::bigint, 'the grants are gone');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('g', 'l3', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'g' AND grp = 'b' AND status = 'pending'), '1 hour', pg_temp.at('0'))),
    2::bigint, 'claim_ids takes two of b');
SELECT is(pg_temp.claim('g', 'l4', 30), 'a,a,a', 'a claim the other three of a');
CREATE TEMP TABLE l4 AS SELECT pg_temp.token('g', 'l4') AS token, pg_temp.ids('g', 'l4') AS ids;
-- expiry frees a slot by time; renew keeps a lease only with its slot
SELECT is(pg_temp.claim('g', 'l5', 30, '2 hours'), 'a,a,a,b,b', 'after the leases expired their slots are free');
SELECT is((SELECT count(*) FROM l4, pgsweep.renew('g', l4.token, l4.ids, '1 hour', pg_temp.at('2 hours'))), 0::bigint,
    'an expired lease whose rows were claimed again renews nothing');
SELECT is((SELECT count(*) FROM pgsweep.renew('g', pg_temp.token('g', 'l5'), pg_temp.ids('g', 'l5'), '1 hour', pg_temp.at('2 hours 1 minute'))), 5::bigint,
    'a live lease renews');
-- lowering a limit takes no lease away; the group waits until it is below
SELECT is((SELECT group_overrides FROM pgsweep.queue_configure('g', '{"group_overrides": {"a": null}}')), NULL::jsonb, 'a loses its override: 2');
SELECT is(pg_temp.leased('g', 'a', '2 hours 2 minutes'), 3::bigint, 'a keeps its three leases');
SELECT is(pg_temp.claim('g', 'l6', 30, '2 hours 2 minutes'), '', 'and gets no turn while above its new limit');
SELECT is((SELECT count(*) FROM pgsweep.complete('g', pg_temp.token('g', 'l5'), (SELECT ids[1:2] FROM pg_temp.ids('g', 'l5') ids))), 2::bigint,
    'two of l5 settle');
SELECT ok(pg_temp.leased('g', 'a', '2 hours 2 minutes') + pg_temp.leased('g', 'b', '2 hours 2 minutes') = 3, 'three leases are left');
SELECT is(pg_temp.claim('g', 'l7', 30, '2 hours 2 minutes'), 'a', 'a, one below its new limit, takes one; b is at its limit');
-- a limit set while leases are out gives them slots
UPDATE pgsweep.message SET status = 'pending', token = NULL, owner = NULL, visible_at = pg_temp.at('0'), attempt = 0 WHERE queue = 'g';
SELECT pgsweep.queue_configure('g', '{"group_max_in_flight": null}');
SELECT is((SELECT count(*) FROM pgsweep.flow_gate WHERE queue = 'g') + (SELECT count(*) FROM pgsweep.flow_grant WHERE queue = 'g'), 0::bigint,
    'no group limit: no gate or grant');
SELECT is(pg_temp.claim('g', 'l8', 30), 'a,a,a,a,a,b,b,b,b,b,b,b,b', 'without limits a claim takes every due row');
SELECT pgsweep.queue_configure('g', '{"group_max_in_flight": 1}');
SELECT results_eq($$SELECT grp, cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'g' ORDER BY grp$$,
    $$VALUES ('a', 5), ('b', 8)$$, 'a group limit set on a busy queue gives the 13 leases out grants, above the limit');
SELECT is(pg_temp.claim('g', 'l9', 30), '', 'claims take nothing of a group above its limit');
SELECT is((SELECT count(*) FROM pgsweep.renew('g', pg_temp.token('g', 'l8'), pg_temp.ids('g', 'l8'), '1 hour', pg_temp.at('1 minute'))), 13::bigint,
    'and they renew');
SELECT is(pg_temp.done('g', 'l8'), 13::bigint, 'they settle');
DELETE FROM pgsweep.message WHERE queue = 'g';

-- lanes and groups: the lane orders, the group gives the turns
SELECT pgsweep.queue_configure('g', '{"group_max_in_flight": null}');
SELECT pgsweep.send('g', jsonb_build_object('n', i), p_lane => 'l', p_group => 'a') FROM generate_series(1, 3) i;
SELECT pg_temp.send('g', 'b', 3);
SELECT is(pg_temp.claim('g', 'k1', 10), 'a,b,b,b', 'one head of the lane, every row of b');
SELECT is((SELECT payload FROM pgsweep.message WHERE queue = 'g' AND grp = 'a' AND status = 'processing'), '{"n": 1}'::jsonb,
    'the head is the lane''s first');

-- group_stats
SELECT throws_like($$SELECT * FROM pgsweep.group_stats('g', 0)$$, '%p_limit must be between 1 and 10000%', 'a bad p_limit is refused');
SELECT results_eq($$SELECT group_name, in_flight, waiting, max_in_flight FROM pgsweep.group_stats('g')$$,
    $$VALUES ('a'::text, 1::bigint, 2::bigint, NULL::int), ('b', 3, 0, NULL)$$,
    'group_stats: a has one in flight and two waiting behind its lane head, b three in flight');

SELECT * FROM finish();
ROLLBACK;
