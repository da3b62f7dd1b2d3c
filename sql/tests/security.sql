-- pgTAP: the security model (docs/security.md; DESIGN "Roles and privileges").
-- Roles, ownership and grants as the catalog shows them; what a login role
-- granted pgsweep_worker, _monitor, _admin or nothing may do (42501 for the
-- rest); forging a policy refused; the procedures free of operators and
-- unqualified calls; retention statements run as the policy's owner
-- (row-level security, triggers, no way out of the role, nothing kept in the
-- maintenance session). The login roles made here roll back with the test.
-- The same, with real logins, CALL maintain() and pg_cron: security_test.go,
-- security_cron_test.go.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(81);

-- as_role (SQLSTATE or 'ok') and as_role_val (the first column).
\ir include/as_role.sql
-- sweep runs one retention pass of a policy in this transaction (the
-- steps CALL retention_run takes) and returns the rows it deleted.
CREATE FUNCTION pg_temp.sweep(p_name text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v bigint := pgsweep._retention_begin(p_name, 'tap', interval '1 hour', NULL);
BEGIN
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN (SELECT rows_deleted FROM pgsweep.retention_pass WHERE id = v);
END $$;

-- Roles and ownership.
SELECT has_role('pgsweep_owner', 'pgsweep_owner exists');
SELECT has_role('pgsweep_admin', 'pgsweep_admin exists');
SELECT has_role('pgsweep_worker', 'pgsweep_worker exists');
SELECT has_role('pgsweep_monitor', 'pgsweep_monitor exists');
SELECT isnt_superuser('pgsweep_owner', 'pgsweep_owner is not a superuser');
SELECT is((SELECT rolcanlogin FROM pg_roles WHERE rolname = 'pgsweep_owner'), false, 'pgsweep_owner cannot log in');
SELECT schema_owner_is('pgsweep', 'pgsweep_owner', 'pgsweep_owner owns the schema');
SELECT is((SELECT string_agg(relname, ', ') FROM pg_class WHERE relnamespace = 'pgsweep'::regnamespace
            AND relkind IN ('r', 'p', 'v', 'm', 'S') AND relowner <> 'pgsweep_owner'::regrole), NULL,
    'pgsweep_owner owns every table, view and sequence');
SELECT is((SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace
            AND proowner <> 'pgsweep_owner'::regrole), NULL, 'pgsweep_owner owns every routine');

-- PUBLIC holds nothing; worker, monitor and admin hold no privilege on a table.
SELECT is((SELECT count(*) FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
            WHERE n.nspname = 'pgsweep' AND a.grantee = 0), 0::bigint, 'PUBLIC has no privilege on the schema');
SELECT is((SELECT string_agg(c.relname, ', ') FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
            WHERE c.relnamespace = 'pgsweep'::regnamespace AND a.grantee = 0), NULL, 'PUBLIC has no privilege on a relation');
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND a.grantee = 0), NULL, 'PUBLIC may execute no routine');
SELECT is((SELECT string_agg(c.relname || ':' || a.privilege_type || ':' || a.grantee::regrole::text, ', ')
             FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.relnamespace = 'pgsweep'::regnamespace AND c.relkind IN ('r', 'p', 'S')
              AND a.grantee IN ('pgsweep_admin'::regrole, 'pgsweep_worker'::regrole, 'pgsweep_monitor'::regrole)), NULL,
    'worker, monitor and admin hold no privilege on a table or sequence');
SELECT is((SELECT string_agg(c.relname || ':' || a.grantee::regrole::text, ', ')
             FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.relnamespace = 'pgsweep'::regnamespace AND c.relkind = 'v' AND a.grantee <> c.relowner
              AND (a.grantee <> 'pgsweep_monitor'::regrole OR a.privilege_type <> 'SELECT')), NULL,
    'views: SELECT for pgsweep_monitor, nothing else');

-- Functions: search_path pinned, pg_temp last; verbs run as pgsweep_owner; p_now overloads are the owner's.
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.prokind = 'f'
              AND NOT (p.proname = 'retention_register' AND p.proargtypes[1] = 'text'::regtype)
              AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*pg_temp$')), NULL,
    'every function pins search_path with pg_temp last (retention_register by name reads the caller''s)');
SELECT is((SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc
            WHERE pronamespace = 'pgsweep'::regnamespace AND NOT prosecdef
              AND proname IN ('send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'release',
                              'lease_acquire', 'lease_renew', 'lease_release', 'queue_create', 'queue_configure')), NULL,
    'queue and lease verbs are SECURITY DEFINER');
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p, aclexplode(p.proacl) a
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND 'p_now' = ANY (p.proargnames) AND a.grantee <> p.proowner
              AND EXISTS (SELECT 1 FROM pg_proc q WHERE q.pronamespace = p.pronamespace AND q.proname = p.proname
                             AND NOT 'p_now' = ANY (coalesce(q.proargnames, '{}')))), NULL,
    'a p_now overload is executable by pgsweep_owner alone');
SELECT is((SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND prokind = 'p'
             AND (prosecdef OR proconfig IS NOT NULL)), 0::bigint, 'procedures run as their caller and pin nothing (they commit)');

-- Procedures cannot pin search_path: no operator, no unqualified call in
-- their bodies (comments, literals, assignments, SELECT *, GET DIAGNOSTICS
-- and RAISE ... USING set aside).
SELECT is((SELECT string_agg(DISTINCT p.oid::regprocedure::text || ' ' || m[1], ', ')
             FROM pg_proc p,
                  regexp_matches(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(
                      p.prosrc, '--[^\n]*', '', 'g'), '''([^'']|'''')*''', '''''', 'g'), ':=', ' ', 'g'),
                      'USING\s+ERRCODE[^;]*;', ';', 'gi'), 'GET\s+(STACKED\s+)?DIAGNOSTICS[^;]*;', ';', 'gi'),
                      'SELECT\s+\*', 'SELECT', 'gi'), '([-+*/<>=~!@#%^&|`?]+)', 'g') m
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.prokind = 'p'), NULL,
    'procedures use no operator');
SELECT is((SELECT string_agg(DISTINCT p.oid::regprocedure::text || ' ' || m[1], ', ')
             FROM pg_proc p,
                  regexp_matches(regexp_replace(regexp_replace(p.prosrc, '--[^\n]*', '', 'g'), '''([^'']|'''')*''', '''''', 'g'),
                                 '(?:^|[^.a-z0-9_"])([a-z_][a-z0-9_]*)\s*\(', 'gi') m
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.prokind = 'p' AND lower(m[1]) NOT IN ('array', 'coalesce')), NULL,
    'procedures call every function schema-qualified');

-- No stored SQL.
SELECT hasnt_column('pgsweep', 'retention_sweep', 'delete_sql', 'retention_sweep has no delete_sql');
SELECT is((SELECT string_agg(c.relname || '.' || a.attname, ', ') FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = 'pgsweep'::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
              AND a.attname ~* '(sql|statement|command|query)'), NULL, 'no table has a column for SQL text');

-- Login roles (rolled back).
CREATE ROLE sectap_worker LOGIN;
GRANT pgsweep_worker TO sectap_worker;
CREATE ROLE sectap_monitor LOGIN;
GRANT pgsweep_monitor TO sectap_monitor;
CREATE ROLE sectap_admin LOGIN;
GRANT pgsweep_admin TO sectap_admin;
CREATE ROLE sectap_nobody LOGIN;
CREATE ROLE sectap_victim LOGIN;
CREATE SCHEMA sectap_v AUTHORIZATION sectap_victim;
GRANT USAGE ON SCHEMA sectap_v TO PUBLIC;
CREATE TABLE sectap_v.precious (id int, at timestamptz NOT NULL);
ALTER TABLE sectap_v.precious OWNER TO sectap_victim;
INSERT INTO sectap_v.precious SELECT i, now() - interval '10 days' FROM generate_series(1, 20) i;
CREATE SCHEMA sectap_a AUTHORIZATION sectap_admin;
SELECT pgsweep.queue_create('sectap');
SELECT pgsweep.send('sectap', '{"card": "secret"}');

-- worker
SELECT is(pg_temp.as_role('sectap_worker', $$SELECT pgsweep.send('sectap', '{"n": 2}')$$), 'ok', 'worker sends');
CREATE TEMP TABLE claimed (id bigint, token uuid);
GRANT ALL ON claimed TO PUBLIC;
SELECT is(pg_temp.as_role('sectap_worker', $$INSERT INTO claimed SELECT id, token FROM pgsweep.claim('sectap', 'w', 10, '30 seconds')$$),
    'ok', 'worker claims');
SELECT is(pg_temp.as_role_val('sectap_worker', $$SELECT count(*) FROM pgsweep.complete('sectap', gen_random_uuid(), ARRAY(SELECT id FROM claimed))$$),
    '0', 'worker: another token completes nothing');
SELECT is(pg_temp.as_role_val('sectap_worker', $$SELECT count(*) FROM pgsweep.complete('sectap', (SELECT token FROM claimed LIMIT 1), ARRAY(SELECT id FROM claimed))$$),
    '2', 'worker completes with the claim''s token');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.message'), '42501', 'worker cannot SELECT message');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.message_processed'), '42501', 'worker cannot SELECT message_processed');
SELECT is(pg_temp.as_role('sectap_worker', $$UPDATE pgsweep.message SET owner = 'w'$$), '42501', 'worker cannot UPDATE message');
SELECT is(pg_temp.as_role('sectap_worker', 'DELETE FROM pgsweep.message'), '42501', 'worker cannot DELETE message');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.lease'), '42501', 'worker cannot SELECT lease');
SELECT is(pg_temp.as_role('sectap_worker', $$SELECT * FROM pgsweep.claim('sectap', 'w', 1, '30 seconds', now())$$), '42501',
    'worker cannot call a p_now overload');
SELECT is(pg_temp.as_role('sectap_worker', $$SELECT pgsweep.queue_create('evil')$$), '42501', 'worker cannot create a queue');
SELECT is(pg_temp.as_role('sectap_worker', $$SELECT pgsweep.retention_register('evil', 'sectap_v.precious', 'at', '0 seconds')$$), '42501',
    'worker cannot register a policy');
SELECT is(pg_temp.as_role('sectap_worker', 'CALL pgsweep.maintain()'), '42501', 'worker cannot run maintenance');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.queue_stats'), '42501', 'worker cannot read the stats');

-- monitor
SELECT is(pg_temp.as_role_val('sectap_monitor', $$SELECT pending::text FROM pgsweep.queue_stats WHERE queue = 'sectap'$$), '0',
    'monitor reads queue_stats');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.retention_policies'), 'ok', 'monitor reads retention_policies');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.message'), '42501', 'monitor cannot SELECT message');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.message_dead'), '42501', 'monitor cannot SELECT message_dead');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.message_processed'), '42501', 'monitor cannot SELECT message_processed');
SELECT is(pg_temp.as_role('sectap_monitor', $$SELECT * FROM pgsweep.claim('sectap', 'm', 1, '30 seconds')$$), '42501', 'monitor cannot claim');
-- leases, settings and queue_stats read their tables through SECURITY
-- DEFINER functions (Citus reads a view's tables as the querying role):
-- the monitor reads the views, never the tables, and the functions are the
-- monitor's alone (they show what the views show).
SELECT pgsweep.lease_acquire('sectap_lease', 'holder', '1 minute');
SELECT is(pg_temp.as_role_val('sectap_monitor', $$SELECT owner FROM pgsweep.leases WHERE name = 'sectap_lease' AND live$$), 'holder',
    'monitor reads leases');
SELECT is(pg_temp.as_role_val('sectap_monitor', $$SELECT count(*)::text FROM pgsweep.settings$$),
    (SELECT count(*)::text FROM pgsweep.setting), 'monitor reads settings, every row');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.lease'), '42501', 'monitor cannot SELECT lease');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.setting'), '42501', 'monitor cannot SELECT setting');
SELECT is(pg_temp.as_role('sectap_monitor', 'SELECT * FROM pgsweep.queue'), '42501', 'monitor cannot SELECT queue');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.lease_rows()'), '42501', 'worker cannot call lease_rows');
SELECT is(pg_temp.as_role('sectap_nobody', 'SELECT * FROM pgsweep.queue_rows()'), '42501', 'a role without a grant cannot call queue_rows');

-- the control room (stats.sql, health.sql, browse.sql): the monitor sees
-- ids, sizes, states, ages and errors, never a payload, a header or a key
SELECT pgsweep.send('sectap', '{"card": "secret-4111"}', '{"auth": "secret-hdr"}', 'secret-key');
SELECT pgsweep._stats_snapshot(NULL);
SELECT is(pg_temp.as_role_val('sectap_monitor', $$SELECT count(*)::text || ' ' || bool_and(payload IS NULL AND headers IS NULL AND key IS NULL AND payload_bytes > 0)::text
                                                   FROM pgsweep.browse_messages('sectap', 'pending')$$), '1 true',
    'monitor browses the pending message: sizes, no payload, headers or key');
SELECT unalike(pg_temp.as_role_val('sectap_monitor', $$SELECT coalesce(string_agg(b::text, ' '), '') FROM pgsweep.browse_messages('sectap', 'pending') b$$),
    '%secret%', 'nothing secret in any column the monitor gets from browse_messages');
SELECT alike(pg_temp.as_role_val('sectap_admin', $$SELECT string_agg(b::text, ' ') FROM pgsweep.browse_messages('sectap', 'pending') b$$),
    '%secret-4111%secret-hdr%', 'admin (the browse right by default) gets the payload and headers');
SELECT unalike(pg_temp.as_role_val('sectap_monitor', $$SELECT coalesce(string_agg(s::text, ' '), '') FROM pgsweep.stats_latest() s$$),
    '%secret%', 'stats_latest carries no payload');
SELECT unalike(pg_temp.as_role_val('sectap_monitor', $$SELECT coalesce(string_agg(s::text, ' '), '') FROM pgsweep.stats_history('sectap', now() - interval '1 day', now() + interval '1 day') s$$),
    '%secret%', 'stats_history carries no payload');
SELECT unalike(pg_temp.as_role_val('sectap_monitor', $$SELECT coalesce(string_agg(h::text, ' '), '') FROM pgsweep.health() h$$),
    '%secret%', 'health carries no payload');
SELECT is(pg_temp.as_role('sectap_worker', $$SELECT * FROM pgsweep.browse_messages('sectap', 'pending')$$), '42501', 'worker cannot browse');
SELECT is(pg_temp.as_role('sectap_worker', 'SELECT * FROM pgsweep.health()'), '42501', 'worker cannot call health');
SELECT is(pg_temp.as_role('sectap_nobody', 'SELECT * FROM pgsweep.stats_latest()'), '42501', 'a role without a grant cannot call stats_latest');

-- admin
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT pgsweep.queue_create('sectap_admin')$$), 'ok', 'admin creates a queue');
SELECT is(pg_temp.as_role('sectap_admin', $$CREATE TABLE sectap_a.mine (id int, at timestamptz NOT NULL);
    SELECT pgsweep.retention_register('sectap_mine', 'sectap_a.mine', 'at', '1 day', p_mode => 'parallel')$$), 'ok',
    'admin registers a policy for its own table, by name');
SELECT is((SELECT owner::text FROM pgsweep.retention_policy WHERE name = 'sectap_mine'), 'sectap_admin', 'the policy belongs to admin');
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT pgsweep.retention_register('steal', 'sectap_v.precious', 'at', '0 seconds')$$), '42501',
    'admin cannot register a table it has no right on');
-- The owner is proven by a temporary table the caller creates; the internal
-- _retention_policy_put, which takes an owner, is nobody's to call.
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT pgsweep._retention_policy_put('steal', 'sectap_v.precious'::regclass, 'at', '0 seconds',
    NULL, NULL, 1000, 'exclusive', '1 minute', 'pgsweep_owner'::regrole, true)$$), '42501',
    'admin cannot make a table of its own or another''s a built-in policy');
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT pgsweep.retention_register_proved('sectap_v.precious'::regclass, 'steal',
    'sectap_v.precious'::regclass, 'at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 minute')$$), '42501',
    'admin cannot pass another role''s table as the proof of who it is');
SELECT is(pg_temp.as_role('sectap_admin', $$UPDATE pgsweep.retention_policy SET owner = 'sectap_victim'::regrole$$), '42501',
    'admin cannot UPDATE retention_policy');
SELECT is(pg_temp.as_role('sectap_admin', $$UPDATE pgsweep.retention_sweep SET cutoff = 'infinity'$$), '42501',
    'admin cannot UPDATE retention_sweep');
SELECT is(pg_temp.as_role('sectap_admin', 'SELECT * FROM pgsweep.message'), '42501', 'admin cannot SELECT message');
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT * FROM pgsweep.claim('sectap', 'a', 1, '30 seconds')$$), '42501', 'admin cannot claim');
SELECT is(pg_temp.as_role('sectap_admin', 'SELECT * FROM pgsweep.maintenance_passes'), 'ok', 'admin reads the history (as monitor)');

-- no grant at all
SELECT is(pg_temp.as_role('sectap_nobody', 'SELECT pgsweep.version()'), '42501', 'a role without a grant cannot use the schema');
SELECT ok(NOT has_schema_privilege('sectap_nobody', 'pgsweep', 'USAGE'), 'no USAGE on the schema without a grant');

-- Retention as the owner, run here by the superuser: row-level security
-- hides rows from the policy's owner (they stay) and its DELETE trigger runs
-- as the owner, with no way back to the superuser.
CREATE ROLE sectap_cleaner LOGIN;
GRANT pgsweep_admin TO sectap_cleaner;
CREATE TABLE sectap_v.events (id int, at timestamptz NOT NULL, visible boolean NOT NULL);
CREATE TABLE sectap_v.log (who text, sess text, what text);
GRANT INSERT ON sectap_v.log TO PUBLIC;
CREATE FUNCTION sectap_v.trg() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    v text;
BEGIN
    INSERT INTO sectap_v.log VALUES (current_user, session_user, 'delete');
    FOREACH v IN ARRAY ARRAY['RESET ROLE', format('SET ROLE %I', session_user), format('SET SESSION AUTHORIZATION %I', session_user),
                             format('SELECT set_config(''role'', %L, false)', session_user), 'ALTER ROLE sectap_cleaner SUPERUSER'] LOOP
        BEGIN
            EXECUTE v;
            INSERT INTO sectap_v.log VALUES (current_user, session_user, 'ESCAPED ' || v);
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO sectap_v.log VALUES (current_user, session_user, 'refused ' || SQLSTATE);
        END;
    END LOOP;
    RETURN OLD;
END $f$;
CREATE TRIGGER logged BEFORE DELETE ON sectap_v.events FOR EACH ROW EXECUTE FUNCTION sectap_v.trg();
ALTER TABLE sectap_v.events OWNER TO sectap_victim;
ALTER FUNCTION sectap_v.trg() OWNER TO sectap_victim;
ALTER TABLE sectap_v.events ENABLE ROW LEVEL SECURITY;
CREATE POLICY cleaner_sees ON sectap_v.events TO sectap_cleaner USING (visible);
GRANT SELECT, DELETE ON sectap_v.events TO sectap_cleaner;
INSERT INTO sectap_v.events SELECT i, now() - interval '10 days', i % 2 = 0 FROM generate_series(1, 20) i;
SELECT is(pg_temp.as_role('sectap_cleaner', $$SELECT pgsweep.retention_register('sectap_rls', 'sectap_v.events', 'at', '1 day',
    p_mode => 'parallel')$$), 'ok', 'a role granted SELECT and DELETE registers another role''s table');
SELECT is(pg_temp.sweep('sectap_rls'), 10::bigint, 'a pass run by the superuser deletes the 10 rows the owner sees');
SELECT is((SELECT count(*) FROM sectap_v.events WHERE NOT visible), 10::bigint, 'the rows row-level security hides from the owner stay');
SELECT is((SELECT string_agg(DISTINCT who || '/' || sess, ', ') FROM sectap_v.log WHERE what = 'delete'), 'sectap_cleaner/' || session_user,
    'the DELETE trigger runs as the policy''s owner (current_user), in the superuser''s session');
SELECT is((SELECT string_agg(DISTINCT what, ', ') FROM sectap_v.log WHERE what <> 'delete'), 'refused 42501',
    'RESET ROLE, SET ROLE, SET SESSION AUTHORIZATION, set_config(role), ALTER ROLE: all refused inside the trigger');
SELECT isnt_superuser('sectap_cleaner', 'the owner is still no superuser');

-- A statement run as the owner that registers a policy (as the victim: the
-- session user could) is refused and rolled back.
CREATE TABLE sectap_a.forge (id int, at timestamptz NOT NULL);
ALTER TABLE sectap_a.forge OWNER TO sectap_admin;
INSERT INTO sectap_a.forge SELECT i, now() - interval '10 days' FROM generate_series(1, 3) i;
CREATE FUNCTION sectap_a.forge_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    -- as itself (the only owner it can prove): on its own table
    PERFORM pgsweep.retention_register('forged', 'sectap_a.forge', 'at', '0 seconds', p_mode => 'parallel');
    RETURN OLD;
END $f$;
ALTER FUNCTION sectap_a.forge_trg() OWNER TO sectap_admin;
CREATE TRIGGER forge BEFORE DELETE ON sectap_a.forge FOR EACH ROW EXECUTE FUNCTION sectap_a.forge_trg();
SELECT is(pg_temp.as_role('sectap_admin', $$SELECT pgsweep.retention_register('sectap_forge', 'sectap_a.forge', 'at', '1 day',
    p_mode => 'parallel')$$), 'ok', 'admin registers a table whose trigger forges a policy');
SELECT throws_like($$SELECT pg_temp.sweep('sectap_forge')$$,
    'retention policy sectap_forge: a statement run as its owner sectap_admin changed the maintenance session (%',
    'the pass fails: the statement changed the session');
SELECT is((SELECT count(*) FROM pgsweep.retention_policy WHERE name = 'forged'), 0::bigint, 'the forged policy is gone');
SELECT is((SELECT count(*) FROM sectap_a.forge), 3::bigint, 'the batch rolled back');

SELECT * FROM finish();
ROLLBACK;
