-- pgTAP: max_in_flight (flow.sql). A limited queue hands out at most
-- max_in_flight leases at once: claim and claim_ids record what they keep
-- in grants under the queue's gates; complete, fail, release and
-- dead_letter take their ids out of their claim's grants; an expired grant
-- counts for nothing; renew extends a grant only while it is live;
-- changing the limit takes effect at once without taking leases away. Time is pinned through p_now (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.flow_grant; DELETE FROM pgsweep.flow_gate;
SELECT plan(74);

SELECT pgsweep.queue_create('f', 'outbox', 2);
SELECT pgsweep.queue_create('u', 'outbox', 2);
SELECT pgsweep.send_batch('f', array_fill('{}'::jsonb, ARRAY[20]));
SELECT pgsweep.send_batch('u', array_fill('{}'::jsonb, ARRAY[5]));
CREATE FUNCTION pg_temp.at(p_at text) RETURNS timestamptz LANGUAGE sql
AS $$ SELECT '2030-01-01 00:00:00+00'::timestamptz + p_at::interval $$;
-- claims of p_batch by p_owner at T + p_at, lease 10 s; the owner labels the rows
CREATE FUNCTION pg_temp.claim(p_owner text, p_batch int, p_at text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.claim('f', p_owner, p_batch, '10 seconds', pg_temp.at(p_at)) $$;
CREATE FUNCTION pg_temp.token(p_owner text) RETURNS uuid LANGUAGE sql
AS $$ SELECT token FROM pgsweep.message WHERE queue = 'f' AND owner = p_owner AND status = 'processing' LIMIT 1 $$;
CREATE FUNCTION pg_temp.ids(p_owner text) RETURNS bigint[] LANGUAGE sql
AS $$ SELECT array_agg(id ORDER BY id) FROM pgsweep.message WHERE queue = 'f' AND owner = p_owner AND status = 'processing' $$;
-- the leases live at T + p_at, and the slots held then
CREATE FUNCTION pg_temp.leased(p_at text) RETURNS bigint LANGUAGE sql
AS $$ SELECT count(*) FROM pgsweep.message WHERE queue = 'f' AND status = 'processing' AND visible_at > pg_temp.at(p_at) $$;
CREATE FUNCTION pg_temp.held(p_at text) RETURNS bigint LANGUAGE sql
AS $$ SELECT coalesce(sum(cardinality(ids)), 0)::bigint FROM pgsweep.flow_grant WHERE queue = 'f' AND expires_at > pg_temp.at(p_at) $$;

-- settings
SELECT is((SELECT max_in_flight FROM pgsweep.queue WHERE name = 'f'), NULL, 'a queue has no limit by default');
SELECT is((SELECT count(*) FROM pgsweep.flow_gate), 0::bigint, 'a queue without a limit has no gates');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": 0}')$$, '22023',
    'max_in_flight must be between 1 and 100000, got 0', 'a limit of 0 is refused, naming the setting and its range');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": 100001}')$$, '22023',
    'max_in_flight must be between 1 and 100000, got 100001', 'a limit above 100000 is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": -3}')$$, '22023',
    'max_in_flight must be between 1 and 100000, got -3', 'a negative limit is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": 2.5}')$$, '22023',
    'max_in_flight must be an integer between 1 and 100000, or null (no limit), got 2.5', 'a fraction is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": "many"}')$$, '22023',
    'max_in_flight must be an integer between 1 and 100000, or null (no limit), got "many"', 'text is refused');
SELECT throws_ok($$SELECT pgsweep.queue_configure('f', '{"max_in_flight": [3]}')$$, '22023', NULL, 'an array is refused');
SELECT is((SELECT count(*) FROM pgsweep.flow_gate), 0::bigint, 'a refused setting changes nothing');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 3}')), 3, 'max_in_flight 3');
SELECT results_eq($$SELECT stripe FROM pgsweep.flow_gate WHERE queue = 'f' AND grp = '' ORDER BY stripe$$,
    $$SELECT generate_series(1, 8)$$, 'the queue''s eight gates, no grant yet');

-- claims never exceed the limit
SELECT is(pg_temp.claim('a', 2, '0'), 2::bigint, 'a claim of 2 takes 2 of the 3');
SELECT is(pg_temp.claim('b', 5, '1 s'), 1::bigint, 'a claim of 5 gets the one left');
SELECT is(pg_temp.claim('c', 5, '2 s'), 0::bigint, 'at the limit a claim gets nothing');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('f', 'd', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'f'),
                                                  '10 seconds', pg_temp.at('2 s'))), 0::bigint,
    'nor does claim_ids');
SELECT is(pg_temp.leased('2 s'), 3::bigint, 'three leased');
SELECT results_eq($$SELECT x FROM pgsweep.flow_grant g, unnest(g.ids) x WHERE g.queue = 'f' ORDER BY x$$,
    $$SELECT unnest(pg_temp.ids('a') || pg_temp.ids('b')) ORDER BY 1$$, 'the grants hold the leased messages, each once');
SELECT is((SELECT count(*) FROM pgsweep.claim('u', 'x', 10, '10 seconds', pg_temp.at('2 s'))), 5::bigint,
    'a queue without a limit is not held back by another''s');

-- settling frees the claim's slots
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('a'), (pg_temp.ids('a'))[1:1], pg_temp.at('3 s'))), 1::bigint,
    'complete one of a''s two');
SELECT is(pg_temp.held('3 s'), 2::bigint, 'it left its grant');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('b'), pg_temp.ids('a'), pg_temp.at('3 s'))), 0::bigint,
    'another claim''s token completes nothing');
SELECT is(pg_temp.held('3 s'), 2::bigint, '... and frees no room');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('f', 'd', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'f' AND status = 'pending'),
                                                  '10 seconds', pg_temp.at('3 s'))), 1::bigint,
    'claim_ids takes as many as there is room for: one');
SELECT is((SELECT count(*) FROM pgsweep.fail('f', pg_temp.token('b'), pg_temp.ids('b'), 'boom', '1 hour')), 1::bigint, 'fail b''s');
SELECT is((SELECT count(*) FROM pgsweep.release('f', pg_temp.token('d'), pg_temp.ids('d'))), 1::bigint, 'release d''s');
SELECT is((SELECT count(*) FROM pgsweep.dead_letter('f', pg_temp.token('a'), pg_temp.ids('a'), 'refused', pg_temp.at('3 s'))), 1::bigint,
    'dead-letter a''s other');
SELECT is((SELECT count(*) FROM pgsweep.flow_grant WHERE queue = 'f'), 0::bigint,
    'complete, fail, release and dead_letter emptied every grant, and the empty grants went');

-- an expired lease frees its room by time; renew extends a grant only while it is live
SELECT is(pg_temp.claim('e', 3, '10 s'), 3::bigint, 'e takes the room of three (lease until T + 20 s)');
SELECT is(pg_temp.claim('g', 3, '19 s'), 0::bigint, 'nothing while e''s leases live');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('e'), pg_temp.ids('e'), '10 seconds', pg_temp.at('15 s'))), 3::bigint,
    'renew e''s three (until T + 25 s)');
SELECT is(pg_temp.claim('g', 3, '24 s'), 0::bigint, 'a renewal keeps the room until the leases end');
SELECT is(pg_temp.claim('g', 3, '26 s'), 3::bigint, 'then the room comes back');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('e'), pg_temp.ids('e'), '10 seconds', pg_temp.at('26 s'))), 0::bigint,
    'e''s renewal gets nothing back: its grant expired, its room was taken');
SELECT is(pg_temp.leased('26 s'), 3::bigint, 'three leased');
SELECT is(pg_temp.held('26 s'), 3::bigint, 'three held');

-- changing the limit while leases are held
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 1}')), 1, 'lower the limit to 1');
SELECT is(pg_temp.held('27 s'), 3::bigint, 'the leases stay held: none is taken away');
SELECT results_eq($$SELECT stripe, cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'f' AND token = pg_temp.token('g')$$, $$VALUES (1, 3)$$,
    'the grants were spread again: all on the one gate of the limit');
SELECT is(pg_temp.claim('h', 3, '27 s'), 0::bigint, 'no claim while the queue is above its new limit');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('g'), pg_temp.ids('g'), pg_temp.at('27 s'))), 3::bigint,
    'g''s leases finish');
SELECT is(pg_temp.claim('h', 3, '28 s'), 1::bigint, 'then claims take one at a time');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 4}')), 4, 'raise the limit to 4');
SELECT is(pg_temp.claim('i', 5, '28 s'), 3::bigint, 'the new room is taken at once');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": null}')), NULL::int, 'remove the limit');
SELECT is((SELECT count(*) FROM pgsweep.flow_gate WHERE queue = 'f') + (SELECT count(*) FROM pgsweep.flow_grant WHERE queue = 'f'),
    0::bigint, 'no gate or grant is left');
SELECT is(pg_temp.claim('j', 5, '29 s'), 5::bigint, 'claims take whole batches again');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('j'), pg_temp.ids('j'), pg_temp.at('29 s'))), 5::bigint,
    'and settle without grants');

-- renew does not bring back an expired grant above a lowered limit
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 2}')), 2, 'limit 2 again');
SELECT is(pg_temp.claim('k', 2, '39 s'), 2::bigint, 'once h''s and i''s leases ended (T + 38 s), k takes the room of two (until T + 49 s)');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 1}')), 1, 'lower the limit to 1');
SELECT is(pg_temp.claim('l', 5, '50 s'), 1::bigint, 'k''s leases expired: one claim fills the new limit');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('k'), pg_temp.ids('k'), '60 seconds', pg_temp.at('50 s'))), 0::bigint,
    'k''s renewal gets nothing back');
SELECT is(pg_temp.leased('50 s'), 1::bigint, 'one lease, the limit');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('l'), pg_temp.ids('l'), pg_temp.at('50 s'))), 1::bigint, 'l settles');

-- a limit set on a busy queue: the leases already out get grants
-- (the leases of the pinned clock above end in 2030: gone first)
DELETE FROM pgsweep.message WHERE queue = 'f' AND status = 'processing';
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": null}')), NULL::int, 'no limit');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'm', 3, '1 hour')), 3::bigint, 'm takes three, without grants');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 2}')), 2, 'limit 2 while three are out');
SELECT results_eq($$SELECT stripe, cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'f' ORDER BY stripe$$,
    $$VALUES (1, 2), (2, 1)$$, 'the three leases are held: a gate''s share each, the third above the limit on the first');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'n', 3, '1 hour')), 0::bigint, 'claims take nothing while they are out');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('m'), pg_temp.ids('m'), '1 hour')), 3::bigint,
    'and their renewals go on');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('m'), pg_temp.ids('m'))), 3::bigint, 'm settles');
SELECT is((SELECT count(*) FROM pgsweep.flow_grant WHERE queue = 'f'), 0::bigint, 'the grants are gone with their leases');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'n', 3, '1 hour')), 2::bigint, 'claims take the limit again');


-- the leases above a lowered limit are held on the first gate: the other
-- gates give no room while the queue is above its limit
DELETE FROM pgsweep.message WHERE queue = 'f'; DELETE FROM pgsweep.flow_grant WHERE queue = 'f';
SELECT pgsweep.send_batch('f', array_fill('{}'::jsonb, ARRAY[30]));
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 16}')), 16, 'limit 16');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'o', 16, '1 hour')), 16::bigint, 'o takes 16, two on each of the eight gates');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 8}')), 8, 'lower the limit to 8');
SELECT results_eq($$SELECT stripe, cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'f' ORDER BY stripe$$,
    $$VALUES (1, 9), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)$$, 'a share on each gate, the eight above the limit on the first');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('o'),
                                                  (SELECT array_agg(x) FROM pgsweep.flow_grant g, unnest(g.ids) x WHERE g.queue = 'f' AND g.stripe > 1))),
    7::bigint, 'the seven leases of gates 2 to 8 settle: 9 left, one above the limit');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'p', 10, '1 hour')), 0::bigint,
    'no claim takes the freed gates'' shares while the queue is above its limit');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('o'), (SELECT (ids)[1:2] FROM pgsweep.flow_grant WHERE queue = 'f' AND stripe = 1))),
    2::bigint, 'two more settle: 7 left');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'p', 10, '1 hour')), 1::bigint, 'a claim takes the one left to the limit, with every gate held');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'f' AND status = 'processing' AND visible_at > now()), 8::bigint,
    'eight leased: the limit');

-- renew gives a grant to a live lease that has none (claimed by a claim
-- that read the queue just before a limit was set)
DELETE FROM pgsweep.flow_grant WHERE queue = 'f' AND token = pg_temp.token('p');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('p'), pg_temp.ids('p'), '1 hour')), 1::bigint,
    'the lease without a grant renews');
SELECT is((SELECT cardinality(ids) FROM pgsweep.flow_grant WHERE queue = 'f' AND token = pg_temp.token('p')), 1,
    'and is held by a grant again');

SELECT * FROM finish();
ROLLBACK;
