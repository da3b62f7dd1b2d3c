-- pgTAP: max_in_flight (flow.sql). A limited queue hands out at most
-- max_in_flight leases at once: claim and claim_ids take a free slot per
-- message; complete, fail, release and dead_letter free their claim's
-- slots; an expired lease frees its slot by time; renew extends a slot only
-- while it is still its message's; changing the limit takes effect at once
-- without taking leases away. Time is pinned through p_now (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
DELETE FROM pgsweep.flow_slot;
SELECT plan(62);

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
AS $$ SELECT count(*) FROM pgsweep.flow_slot WHERE queue = 'f' AND token IS NOT NULL AND expires_at > pg_temp.at(p_at) $$;

-- settings
SELECT is((SELECT max_in_flight FROM pgsweep.queue WHERE name = 'f'), NULL, 'a queue has no limit by default');
SELECT is((SELECT count(*) FROM pgsweep.flow_slot), 0::bigint, 'a queue without a limit has no slots');
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
SELECT is((SELECT count(*) FROM pgsweep.flow_slot), 0::bigint, 'a refused setting changes nothing');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 3}')), 3, 'max_in_flight 3');
SELECT results_eq($$SELECT n FROM pgsweep.flow_slot WHERE queue = 'f' ORDER BY n$$, $$VALUES (1), (2), (3)$$, 'three free slots');

-- claims never exceed the limit
SELECT is(pg_temp.claim('a', 2, '0'), 2::bigint, 'a claim of 2 takes 2 of the 3 slots');
SELECT is(pg_temp.claim('b', 5, '1 s'), 1::bigint, 'a claim of 5 gets the one slot left');
SELECT is(pg_temp.claim('c', 5, '2 s'), 0::bigint, 'with every slot taken a claim gets nothing');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('f', 'd', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'f'),
                                                  '10 seconds', pg_temp.at('2 s'))), 0::bigint,
    'nor does claim_ids');
SELECT is(pg_temp.leased('2 s'), 3::bigint, 'three leased');
SELECT results_eq($$SELECT message_id FROM pgsweep.flow_slot WHERE queue = 'f' AND token IS NOT NULL ORDER BY message_id$$,
    $$SELECT unnest(pg_temp.ids('a') || pg_temp.ids('b')) ORDER BY 1$$, 'each slot holds one of the leased messages');
SELECT is((SELECT count(*) FROM pgsweep.claim('u', 'x', 10, '10 seconds', pg_temp.at('2 s'))), 5::bigint,
    'a queue without a limit is not held back by another''s');

-- settling frees the claim's slots
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('a'), (pg_temp.ids('a'))[1:1], pg_temp.at('3 s'))), 1::bigint,
    'complete one of a''s two');
SELECT is(pg_temp.held('3 s'), 2::bigint, 'its slot is free');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('b'), pg_temp.ids('a'), pg_temp.at('3 s'))), 0::bigint,
    'another claim''s token completes nothing');
SELECT is(pg_temp.held('3 s'), 2::bigint, '... and frees no slot');
SELECT is((SELECT count(*) FROM pgsweep.claim_ids('f', 'd', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'f' AND status = 'pending'),
                                                  '10 seconds', pg_temp.at('3 s'))), 1::bigint,
    'claim_ids takes as many as there are free slots: one');
SELECT is((SELECT count(*) FROM pgsweep.fail('f', pg_temp.token('b'), pg_temp.ids('b'), 'boom', '1 hour')), 1::bigint, 'fail b''s');
SELECT is((SELECT count(*) FROM pgsweep.release('f', pg_temp.token('d'), pg_temp.ids('d'))), 1::bigint, 'release d''s');
SELECT is((SELECT count(*) FROM pgsweep.dead_letter('f', pg_temp.token('a'), pg_temp.ids('a'), 'refused', pg_temp.at('3 s'))), 1::bigint,
    'dead-letter a''s other');
SELECT is((SELECT count(*) FROM pgsweep.flow_slot WHERE queue = 'f' AND token IS NOT NULL), 0::bigint,
    'complete, fail, release and dead_letter freed every slot');

-- an expired lease frees its slot by time, and renew keeps a slot only while it is its message's
SELECT is(pg_temp.claim('e', 3, '10 s'), 3::bigint, 'e takes the three slots (lease until T + 20 s)');
SELECT is(pg_temp.claim('g', 3, '19 s'), 0::bigint, 'nothing while e''s leases live');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('e'), (pg_temp.ids('e'))[1:1], '10 seconds', pg_temp.at('15 s'))), 1::bigint,
    'renew one of e''s (until T + 25 s)');
SELECT is(pg_temp.claim('g', 3, '21 s'), 2::bigint, 'the two slots whose leases expired are free again');
SELECT is(pg_temp.leased('21 s'), 3::bigint, 'still three leased');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('e'), pg_temp.ids('e'), '10 seconds', pg_temp.at('22 s'))), 1::bigint,
    'e renews only the lease whose slot it still holds');
SELECT is(pg_temp.held('22 s'), 3::bigint, 'three slots held, one per lease');

-- changing the limit while leases are held
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('e'), pg_temp.ids('e'), pg_temp.at('23 s'))), 1::bigint,
    'e''s lease is settled: two in flight, both g''s');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 1}')), 1, 'lower the limit to 1');
SELECT is(pg_temp.held('23 s'), 2::bigint, 'the held slots stay: no lease is taken away');
SELECT is(pg_temp.claim('h', 3, '23 s'), 0::bigint, 'no claim while a slot above the new limit is held, though slot 1 may be free');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('g'), pg_temp.ids('g'), pg_temp.at('23 s'))), 2::bigint,
    'g''s leases finish');
SELECT is(pg_temp.claim('h', 3, '24 s'), 1::bigint, 'then claims take one at a time');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 4}')), 4, 'raise the limit to 4');
SELECT is(pg_temp.claim('i', 5, '24 s'), 3::bigint, 'the new slots are taken at once');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": null}')), NULL::int, 'remove the limit');
SELECT is((SELECT count(*) FROM pgsweep.flow_slot WHERE queue = 'f'), 0::bigint, 'no slot is left');
SELECT is(pg_temp.claim('j', 5, '25 s'), 5::bigint, 'claims take whole batches again');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('j'), pg_temp.ids('j'), pg_temp.at('25 s'))), 5::bigint,
    'and settle without slots');

-- renew does not bring back a slot above a lowered limit once it expired
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 2}')), 2, 'limit 2 again');
SELECT is(pg_temp.claim('k', 2, '35 s'), 2::bigint, 'once h''s and i''s leases ended (T + 34 s), k takes both slots (until T + 45 s)');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 1}')), 1, 'lower the limit to 1');
SELECT is(pg_temp.claim('l', 5, '46 s'), 1::bigint, 'k''s leases expired: one claim fills the new limit');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('k'), pg_temp.ids('k'), '60 seconds', pg_temp.at('46 s'))), 0::bigint,
    'k''s renewal gets nothing back: one slot was taken, the other is above the limit');
SELECT is(pg_temp.leased('46 s'), 1::bigint, 'one lease, the limit');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('l'), pg_temp.ids('l'), pg_temp.at('46 s'))), 1::bigint, 'l settles');

-- a limit set on a busy queue: the leases already out get a slot each
-- (the leases of the pinned clock above end in 2030: gone first)
DELETE FROM pgsweep.message WHERE queue = 'f' AND status = 'processing';
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": null}')), NULL::int, 'no limit');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'm', 3, '1 hour')), 3::bigint, 'm takes three, without slots');
SELECT is((SELECT max_in_flight FROM pgsweep.queue_configure('f', '{"max_in_flight": 2}')), 2, 'limit 2 while three are out');
SELECT results_eq($$SELECT n FROM pgsweep.flow_slot WHERE queue = 'f' AND token IS NOT NULL ORDER BY n$$, $$VALUES (1), (2), (3)$$,
    'the three leases hold slots 1, 2 and a third above the limit');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'n', 3, '1 hour')), 0::bigint, 'claims take nothing while they are out');
SELECT is((SELECT count(*) FROM pgsweep.renew('f', pg_temp.token('m'), pg_temp.ids('m'), '1 hour')), 3::bigint,
    'and their renewals go on');
SELECT is((SELECT count(*) FROM pgsweep.complete('f', pg_temp.token('m'), pg_temp.ids('m'))), 3::bigint, 'm settles');
SELECT is((SELECT count(*) FROM pgsweep.flow_slot WHERE queue = 'f'), 2::bigint, 'the slot above the limit is gone with its lease');
SELECT is((SELECT count(*) FROM pgsweep.claim('f', 'n', 3, '1 hour')), 2::bigint, 'claims take the limit again');

SELECT * FROM finish();
ROLLBACK;
