-- pgTAP: per-queue rights (sql/functions/queue_rights.sql; docs/queues.md,
-- "Per-queue rights"). Two applications, each with its own worker role
-- (members of pgsweep_worker) and its own private queues; a second admin
-- without manage. Every verb on the other application's queue is refused
-- with 42501 naming the queue and the right, and the queue's rows are
-- unchanged; the owner's verbs work. Grant and revoke validation (22023,
-- nothing changed), defaults for new queues (setting queue_default_grants),
-- orphaned grants, membership, dropped queues. The same through the Go
-- client: queue_rights_test.go.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(85);

CREATE ROLE qr_app1 NOLOGIN IN ROLE pgsweep_worker;
CREATE ROLE qr_app2 NOLOGIN IN ROLE pgsweep_worker;
CREATE ROLE qr_app1_login NOLOGIN IN ROLE qr_app1; -- an application's login, a member of its role
CREATE ROLE qr_admin1 NOLOGIN IN ROLE pgsweep_admin;
CREATE ROLE qr_admin2 NOLOGIN IN ROLE pgsweep_admin;
CREATE ROLE qr_plain NOLOGIN IN ROLE pgsweep_worker; -- a worker with only the defaults

-- as_role_err runs p_sql as p_role: 'ok', or 'SQLSTATE: message';
-- as_role_val returns its first column.
\ir include/as_role.sql
CREATE FUNCTION pg_temp.denied(p_role text, p_queue text, p_right text) RETURNS text LANGUAGE sql AS $$
    SELECT format('42501: permission denied: role "%s" lacks %s on queue "%s"', p_role, p_right, p_queue) $$;
-- fp: everything about a queue that a verb could change.
CREATE FUNCTION pg_temp.fp(p_queue text) RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(m::text, ',' ORDER BY m.id) FROM pgsweep.message m WHERE m.queue = p_queue),
        (SELECT string_agg(p::text, ',' ORDER BY p.id) FROM pgsweep.message_processed p WHERE p.queue = p_queue),
        (SELECT string_agg(d::text, ',' ORDER BY d.id) FROM pgsweep.message_dead d WHERE d.queue = p_queue),
        (SELECT string_agg(l::text, ',' ORDER BY l.name) FROM pgsweep.lane l WHERE l.queue = p_queue),
        (SELECT q::text FROM pgsweep.queue q WHERE q.name = p_queue),
        (SELECT string_agg(r::text, ',' ORDER BY r.privilege, r.grantee) FROM pgsweep.queue_right r WHERE r.queue = p_queue)))
$$;

-- The defaults of a new queue, as rows.
SELECT pgsweep.queue_create('qr_pay', 'outbox', 2);
SELECT is((SELECT array_agg(grantee_name || ':' || privilege ORDER BY grantee_name, privilege) FROM pgsweep.queue_right WHERE queue = 'qr_pay'),
    ARRAY['pgsweep_admin:browse', 'pgsweep_admin:manage', 'pgsweep_worker:consume', 'pgsweep_worker:send']::text[],
    'a new queue: send and consume to pgsweep_worker, browse and manage to pgsweep_admin');
SELECT is(pg_temp.as_role_err('qr_plain', $$SELECT pgsweep.send('qr_pay', '1')$$), 'ok', 'so any worker may send to it (as before 0.34)');
DELETE FROM pgsweep.message WHERE queue = 'qr_pay';

-- App 1's queues, private: the defaults revoked, app1 granted; admin2 has no manage.
SELECT pgsweep.queue_create('qr_in1', 'inbox', 2);
SELECT pgsweep.queue_create('qr_app2q', 'outbox', 2);
SELECT pgsweep.queue_revoke(q, 'pgsweep_worker', ARRAY['send', 'consume']) FROM unnest(ARRAY['qr_pay', 'qr_in1', 'qr_app2q']) q;
SELECT pgsweep.queue_revoke(q, 'pgsweep_admin', ARRAY['manage', 'browse']) FROM unnest(ARRAY['qr_pay', 'qr_in1', 'qr_app2q']) q;
SELECT pgsweep.queue_grant(q, 'qr_app1', ARRAY['send', 'consume']) FROM unnest(ARRAY['qr_pay', 'qr_in1']) q;
SELECT pgsweep.queue_grant(q, 'qr_admin1', ARRAY['manage']) FROM unnest(ARRAY['qr_pay', 'qr_in1']) q;
SELECT pgsweep.queue_grant('qr_app2q', 'qr_app2', ARRAY['send', 'consume']);
SELECT pgsweep.queue_grant('qr_app2q', 'qr_admin2', ARRAY['manage']);
SELECT is(pg_temp.as_role_err('qr_plain', $$SELECT pgsweep.send('qr_pay', '1')$$), pg_temp.denied('qr_plain', 'qr_pay', 'send'),
    'revoked from pgsweep_worker: a plain worker may no longer send');

-- App 1 at work: a message in flight (lane a), one waiting, a dead letter.
CREATE TEMP TABLE c1 (id bigint, token uuid);
GRANT ALL ON c1 TO PUBLIC;
SELECT is(pg_temp.as_role_err('qr_app1', $$SELECT pgsweep.send('qr_pay', '{"salary": 1}', p_lane => 'a'), pgsweep.send('qr_pay', '{"salary": 2}', p_lane => 'a'),
                                             pgsweep.send('qr_pay', '{"salary": 3}')$$), 'ok', 'app1 sends to its queue');
SELECT is(pg_temp.as_role_err('qr_app1', $$INSERT INTO c1 SELECT id, token FROM pgsweep.claim('qr_pay', 'app1', 1)$$), 'ok', 'app1 claims from its queue');
SELECT is(pg_temp.as_role_err('qr_app1_login', $$SELECT pgsweep.send('qr_pay', '{"salary": 4}')$$), 'ok', 'a member of app1 acts as app1');
SELECT pgsweep.send('qr_pay', '{"salary": 5}'); -- a superuser passes, as in PostgreSQL's own checks
CREATE TEMP TABLE c2 AS SELECT * FROM pgsweep.claim('qr_pay', 'su', 10) WHERE payload = '{"salary": 5}';
SELECT pgsweep.fail('qr_pay', (SELECT token FROM c2), ARRAY(SELECT id FROM c2), 'x');
SELECT pgsweep.fail('qr_pay', (SELECT token FROM c2), ARRAY(SELECT id FROM c2), 'x'); -- a no-op: fenced
UPDATE pgsweep.message SET attempt = 2, visible_at = now() - interval '1 second', status = 'processing', owner = 'su',
       token = '00000000-0000-0000-0000-000000000001' WHERE queue = 'qr_pay' AND payload = '{"salary": 5}';
SELECT pgsweep.dead_letter('qr_pay', '00000000-0000-0000-0000-000000000001', ARRAY(SELECT id FROM c2), 'gone');
SELECT is((SELECT count(*) FROM pgsweep.message_dead WHERE queue = 'qr_pay'), 1::bigint, 'a dead letter in app1''s queue');
SELECT is((SELECT count(*) FROM c1), 1::bigint, 'app1 holds one message of lane a');

CREATE TEMP TABLE before AS SELECT q, pg_temp.fp(q) AS fp FROM unnest(ARRAY['qr_pay', 'qr_in1']) q;
CREATE FUNCTION pg_temp.unchanged(p_queue text) RETURNS boolean LANGUAGE sql AS $$
    SELECT pg_temp.fp(p_queue) = (SELECT fp FROM before WHERE q = p_queue) $$;

-- App 2 on app 1's queue: every verb refused, by name of queue and right.
-- (The token is app1's real one: stealing it does not help.)
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send('qr_pay', '{}')$$), pg_temp.denied('qr_app2', 'qr_pay', 'send'), 'send: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send_batch('qr_pay', ARRAY['{}'::jsonb])$$), pg_temp.denied('qr_app2', 'qr_pay', 'send'), 'send_batch: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT * FROM pgsweep.claim('qr_pay', 'app2', 10)$$), pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'claim: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT * FROM pgsweep.claim_ids(%L, %L, %L)', 'qr_pay', 'app2', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'qr_pay'))),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'claim_ids: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT pgsweep.renew(%L, %L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1), '1 hour')),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'renew: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT pgsweep.complete(%L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1))),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'complete: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT pgsweep.fail(%L, %L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1), 'x')),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'fail: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT * FROM pgsweep.fail_details(%L, %L, %L, %L, NULL)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1), 'x')),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'fail_details: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT pgsweep.release(%L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1))),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'release: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', format('SELECT pgsweep.dead_letter(%L, %L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1), 'x')),
    pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'dead_letter: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT * FROM pgsweep.queue_info('qr_pay')$$), pg_temp.denied('qr_app2', 'qr_pay', 'consume'), 'queue_info: 42501');
-- inbox pre-emption: app2 cannot take app1's message ids
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send('qr_in1', '{}', '{}', 'order-1')$$), pg_temp.denied('qr_app2', 'qr_in1', 'send'),
    'inbox send with app1''s next key: 42501');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send_batch('qr_in1', ARRAY['{}'::jsonb], p_keys => ARRAY['order-1'])$$), pg_temp.denied('qr_app2', 'qr_in1', 'send'),
    'inbox send_batch with app1''s next key: 42501');
SELECT ok(pg_temp.unchanged('qr_pay'), 'app1''s queue: not a row changed');
SELECT ok(pg_temp.unchanged('qr_in1'), 'app1''s inbox: not a row changed');

-- The admin without manage on app1's queues.
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_configure('qr_pay', '{"max_attempts": 9}')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_configure: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_pause('qr_pay')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_pause: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_resume('qr_pay')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_resume: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_purge('qr_pay')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_purge: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', format('SELECT pgsweep.message_cancel(%L, %L)', 'qr_pay', (SELECT array_agg(id) FROM pgsweep.message WHERE queue = 'qr_pay'))),
    pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'message_cancel: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', format('SELECT pgsweep.dead_requeue(%L, %L)', 'qr_pay', (SELECT array_agg(id) FROM pgsweep.message_dead WHERE queue = 'qr_pay'))),
    pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'dead_requeue: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.lane_skip('qr_pay', 'a')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'lane_skip: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT * FROM pgsweep.queue_recover('qr_pay', 100)$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_recover: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_drop('qr_pay', true)$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_drop: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', ARRAY['consume'])$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'),
    'queue_grant to app2 (or to itself): 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_revoke('qr_pay', 'qr_app1', ARRAY['consume'])$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'),
    'queue_revoke of app1''s right: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT * FROM pgsweep.queue_rights('qr_pay')$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'), 'queue_rights: 42501');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_create('qr_pay', 'outbox', 2)$$), 'ok',
    'queue_create of an existing queue (what every application does at start-up) is allowed ...');
SELECT ok(pg_temp.unchanged('qr_pay'), '... and changes nothing: not its rights either; after every refusal above, not a row changed');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_create('qr_pay', 'outbox', 5)$$), pg_temp.denied('qr_admin2', 'qr_pay', 'manage'),
    'queue_create that would change max_attempts: 42501');
SELECT ok(pg_temp.unchanged('qr_in1'), 'app1''s inbox: unchanged');
-- A worker cannot reach the manage verbs at all (function grants), nor grant.
SELECT is(left(pg_temp.as_role_err('qr_app1', $$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', ARRAY['consume'])$$), 5), '42501',
    'a worker may not call queue_grant, even on its own queue');

-- The owners' verbs work.
SELECT is(pg_temp.as_role_val('qr_app1', format('SELECT count(*) FROM pgsweep.renew(%L, %L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1), '1 hour')),
    '1', 'app1 renews');
SELECT is(pg_temp.as_role_val('qr_app1', $$SELECT lease_default::text FROM pgsweep.queue_info('qr_pay')$$), '00:00:30', 'app1 reads queue_info');
SELECT is(pg_temp.as_role_val('qr_app1', format('SELECT count(*) FROM pgsweep.complete(%L, %L, %L)', 'qr_pay', (SELECT token FROM c1), (SELECT array_agg(id) FROM c1))),
    '1', 'app1 completes');
SELECT is(pg_temp.as_role_val('qr_app1', $$SELECT pgsweep.send('qr_in1', '{}', '{}', 'order-1') IS NOT NULL$$), 'true',
    'app1''s inbox key order-1 was never pre-empted: app1''s send is not a duplicate');
SELECT is(pg_temp.as_role_val('qr_admin1', $$SELECT pgsweep.queue_pause('qr_pay')::text$$), 'true', 'admin1 (manage) pauses app1''s queue');
SELECT is(pg_temp.as_role_val('qr_admin1', $$SELECT pgsweep.queue_resume('qr_pay')::text$$), 'true', 'and resumes it');
SELECT is(pg_temp.as_role_val('qr_admin1', $$SELECT string_agg(role_name || '=' || array_to_string(rights, '+'), ' ' ORDER BY role_name) FROM pgsweep.queue_rights('qr_pay')$$),
    'qr_admin1=manage qr_app1=send+consume', 'queue_rights lists the grants');
-- App 1 on app 2's queue: refused the same way.
SELECT is(pg_temp.as_role_err('qr_app1', $$SELECT * FROM pgsweep.claim('qr_app2q', 'app1', 10)$$), pg_temp.denied('qr_app1', 'qr_app2q', 'consume'), 'app1 cannot claim app2''s queue');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send('qr_app2q', '{}')$$), 'ok', 'app2 sends to its own queue');
SELECT is(pg_temp.as_role_val('qr_app2', $$SELECT count(*) FROM pgsweep.claim('qr_app2q', 'app2', 10)$$), '1', 'app2 claims from its own queue');

-- Grant and revoke: bad input is 22023 naming the argument, nothing changed.
CREATE TEMP TABLE rights_before AS SELECT * FROM pgsweep.queue_right;
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_nope', 'qr_app2', ARRAY['send'])$$, '22023',
    'p_queue must name an existing queue, got unknown queue "qr_nope"', 'grant on an unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_grant(NULL, 'qr_app2', ARRAY['send'])$$, '22023', NULL, 'grant on a NULL queue');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', NULL, ARRAY['send'])$$, '22023', 'p_role must name an existing role, got NULL', 'grant to a NULL role');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', '-', ARRAY['send'])$$, '22023', 'p_role must name an existing role, got PUBLIC (-)', 'grant to PUBLIC');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', ARRAY['send', 'sned'])$$, '22023',
    'p_rights must hold only send, consume, browse, manage, got ''sned''', 'grant of an unknown right (with a valid one)');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', ARRAY['send', NULL])$$, '22023',
    'p_rights must hold only send, consume, browse, manage, got NULL', 'grant of a NULL right');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', NULL)$$, '22023',
    'p_rights must be an array of 1 to 4 of send, consume, browse, manage, got NULL', 'grant of NULL rights');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_app2', '{}')$$, '22023',
    'p_rights must be an array of 1 to 4 of send, consume, browse, manage, got 0 elements', 'grant of no rights');
SELECT throws_ok($$SELECT pgsweep.queue_revoke('qr_pay', 'qr_app1', ARRAY['Consume'])$$, '22023',
    'p_rights must hold only send, consume, browse, manage, got ''Consume''', 'revoke: rights are spelled exactly');
SELECT throws_ok($$SELECT pgsweep.queue_revoke('qr_nope', 'qr_app1', ARRAY['consume'])$$, '22023',
    'p_queue must name an existing queue, got unknown queue "qr_nope"', 'revoke on an unknown queue');
SELECT throws_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_role_that_does_not_exist', ARRAY['send'])$$, '42704', NULL, 'grant to an unknown role: the regrole cast refuses it');
SELECT is((SELECT count(*) FROM (SELECT * FROM pgsweep.queue_right EXCEPT SELECT * FROM rights_before
                                 UNION ALL SELECT * FROM rights_before EXCEPT SELECT * FROM pgsweep.queue_right) d), 0::bigint,
    'after every refused grant and revoke, the rights are as they were');
SELECT lives_ok($$SELECT pgsweep.queue_revoke('qr_pay', 'qr_app2', ARRAY['consume', 'browse'])$$, 'revoking rights not held is a no-op ...');
SELECT lives_ok($$SELECT pgsweep.queue_grant('qr_pay', 'qr_app1', ARRAY['send', 'send'])$$, '... and granting one held again too');
SELECT is((SELECT count(*) FROM (SELECT * FROM pgsweep.queue_right EXCEPT SELECT * FROM rights_before
                                 UNION ALL SELECT * FROM rights_before EXCEPT SELECT * FROM pgsweep.queue_right) d), 0::bigint,
    'the rights are still as they were');

-- Revoke takes the right away at once; grant gives it.
SELECT pgsweep.queue_revoke('qr_in1', 'qr_app1', ARRAY['send']);
SELECT is(pg_temp.as_role_err('qr_app1', $$SELECT pgsweep.send('qr_in1', '{}', '{}', 'order-2')$$), pg_temp.denied('qr_app1', 'qr_in1', 'send'), 'revoked: app1 may not send');
SELECT is(pg_temp.as_role_val('qr_app1', $$SELECT count(*) FROM pgsweep.claim('qr_in1', 'app1', 10)$$), '1', 'but still consume');
SELECT pgsweep.queue_grant('qr_in1', 'qr_app2', ARRAY['send']);
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send('qr_in1', '{}', '{}', 'order-2')$$), 'ok', 'granted: app2 may send to it now');

-- Orphans: a row whose role is gone (or renamed) counts for nothing, and
-- the next grant or revoke on the queue deletes it.
UPDATE pgsweep.queue_right SET grantee_name = 'qr_dropped_long_ago' WHERE queue = 'qr_app2q' AND grantee = 'qr_app2'::regrole AND privilege = 'consume';
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT * FROM pgsweep.claim('qr_app2q', 'app2', 10)$$), pg_temp.denied('qr_app2', 'qr_app2q', 'consume'),
    'a grant made to a role that is gone: its oid''s new role gets nothing');
SELECT pgsweep.queue_revoke('qr_app2q', 'qr_admin1', ARRAY['browse']);
SELECT is((SELECT count(*) FROM pgsweep.queue_right WHERE grantee_name = 'qr_dropped_long_ago'), 0::bigint, 'the orphan is deleted by the next revoke on the queue');
CREATE ROLE qr_gone NOLOGIN;
SELECT pgsweep.queue_grant('qr_app2q', 'qr_gone', ARRAY['consume']);
DROP ROLE qr_gone;
SELECT pgsweep.queue_grant('qr_app2q', 'qr_app2', ARRAY['consume']);
SELECT is((SELECT count(*) FROM pgsweep.queue_right WHERE grantee_name = 'qr_gone'), 0::bigint, 'a dropped role''s rows are deleted by the next grant on the queue');

-- A dropped queue takes its rights along; a queue made again starts from the defaults.
SELECT pgsweep.queue_drop('qr_app2q', true);
SELECT is((SELECT count(*) FROM pgsweep.queue_right WHERE queue = 'qr_app2q'), 0::bigint, 'queue_drop deletes the queue''s rights');
SELECT pgsweep.queue_create('qr_app2q');
SELECT is((SELECT count(*) FROM pgsweep.queue_right WHERE queue = 'qr_app2q' AND grantee = 'qr_app2'::regrole), 0::bigint, 'no right survives to a new queue of the same name');

-- Every new queue private: setting queue_default_grants 0.
SELECT pgsweep.setting_set('queue_default_grants', '0');
SELECT pgsweep.queue_create('qr_private');
SELECT is((SELECT array_agg(grantee_name || ':' || privilege ORDER BY grantee_name, privilege) FROM pgsweep.queue_right WHERE queue = 'qr_private'),
    ARRAY['pgsweep_admin:browse', 'pgsweep_admin:manage']::text[], 'queue_default_grants 0: browse and manage to pgsweep_admin only');
SELECT is(pg_temp.as_role_err('qr_plain', $$SELECT pgsweep.send('qr_private', '{}')$$), pg_temp.denied('qr_plain', 'qr_private', 'send'), 'no worker may send to it ...');
SELECT is(pg_temp.as_role_err('qr_admin2', $$SELECT pgsweep.queue_grant('qr_private', 'qr_app2', ARRAY['send'])$$), 'ok', '... until an admin grants it');
SELECT is(pg_temp.as_role_err('qr_app2', $$SELECT pgsweep.send('qr_private', '{}')$$), 'ok', 'then app2 may');
SELECT throws_ok($$SELECT pgsweep.setting_set('queue_default_grants', '2')$$, '22023', NULL, 'queue_default_grants is 0 or 1');

-- The caller is the session's role (SET ROLE honoured), whatever
-- SECURITY DEFINER function it goes through: a function of app1 called by
-- app2 acts with app2's queue rights, never app1's.
SET LOCAL ROLE qr_app1;
CREATE FUNCTION pg_temp.peek() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS $$ SELECT count(*) FROM pgsweep.claim('qr_pay', 'peek', 10) $$;
SET LOCAL ROLE qr_app2;
SELECT throws_ok($$SELECT pg_temp.peek()$$, '42501', 'permission denied: role "qr_app2" lacks consume on queue "qr_pay"',
    'a SECURITY DEFINER function of app1 called by app2 does not lend app1''s queue rights');
RESET ROLE;
SELECT is(pg_temp.as_role_err('qr_app1_login', $$SELECT pgsweep.send('qr_pay', '{"salary": 6}')$$), 'ok',
    'SET ROLE to a member of app1: allowed');
SELECT is(pg_temp.as_role_err('qr_plain', $$SELECT pgsweep.send('qr_pay', '{}')$$), pg_temp.denied('qr_plain', 'qr_pay', 'send'),
    'SET ROLE to another worker: refused, named as that role');

-- The catalog: who may call what.
SELECT ok(has_function_privilege('pgsweep_admin', 'pgsweep.queue_grant(text, regrole, text[])', 'EXECUTE')
      AND has_function_privilege('pgsweep_admin', 'pgsweep.queue_revoke(text, regrole, text[])', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep.queue_grant(text, regrole, text[])', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_monitor', 'pgsweep.queue_revoke(text, regrole, text[])', 'EXECUTE'),
    'queue_grant and queue_revoke: admins only');
SELECT ok(has_function_privilege('pgsweep_worker', 'pgsweep.queue_info(text)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_worker', 'pgsweep._queue_get(text)', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.queue_rows()', 'EXECUTE')
      AND has_function_privilege('pgsweep_monitor', 'pgsweep.queue_counts(text)', 'EXECUTE')
      AND NOT has_function_privilege('pgsweep_monitor', 'pgsweep.queue_counts(text, timestamptz)', 'EXECUTE'),
    'the Worker calls queue_info, the views queue_rows and queue_counts; _queue_get is the owner''s');
SELECT is((SELECT string_agg(c.relname || ':' || a.grantee::regrole::text, ', ') FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.oid = 'pgsweep.queue_right'::regclass AND a.grantee <> c.relowner), NULL, 'nobody but the owner touches queue_right');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace
            AND proname IN ('_queue_allowed', '_queue_require', '_queue_rights_clean', '_queue_grant_rows', '_queue_recover')
            AND (has_function_privilege('pgsweep_worker', oid, 'EXECUTE') OR has_function_privilege('pgsweep_admin', oid, 'EXECUTE'))), 0::bigint,
    'the internals of rights are the owner''s');

SELECT * FROM finish();
ROLLBACK;
