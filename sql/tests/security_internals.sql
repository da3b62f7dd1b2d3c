-- pgTAP: internals are the owner's (issue 23, classes 3 and 4; docs/security.md
-- "Internals are the owner's", "Step routines", "Reserved leases",
-- "A policy belongs to its owner").
--   * no underscore routine, and no clock, is executable by admin, worker,
--     monitor or PUBLIC: every routine of pg_proc is checked, and
--     _grant_all refuses a matrix that would grant one;
--   * a pass belongs to the session that opened it: every step routine
--     refuses another session's pass (42501) and changes nothing;
--   * a cutoff is never later than now() - older_than, whatever clock the
--     pass was begun with and whatever cutoff its sweep stored;
--   * pgsweep's lease names are refused to the lease verbs, for every caller;
--   * a policy is changed, unregistered or re-registered by its owner (or
--     a member) only; built-in names are reserved;
--   * filter values are read as the column's base type: a domain's CHECK
--     never runs inside retention_set_filter.
-- The attacker is a role granted <schema>_admin (or _worker) and nothing else.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(79);

-- as_role: 'ok' or the SQLSTATE of p_sql run as p_role.
\ir include/as_role.sql

CREATE ROLE si_admin LOGIN IN ROLE pgsweep_admin;
CREATE ROLE si_admin2 LOGIN IN ROLE pgsweep_admin;
CREATE ROLE si_member LOGIN IN ROLE pgsweep_admin;
GRANT si_admin TO si_member;
CREATE ROLE si_worker LOGIN IN ROLE pgsweep_worker;
CREATE ROLE si_monitor LOGIN IN ROLE pgsweep_monitor;
CREATE ROLE si_nobody LOGIN;

-- 1. Every routine whose name starts with an underscore, and every
-- signature that takes a clock, is the owner's: the catalog says so for
-- all three roles and PUBLIC.
SELECT is((SELECT string_agg(format('%s: %s', r.rolname, p.oid::regprocedure), ', ' ORDER BY 1)
             FROM pg_proc p
            CROSS JOIN (VALUES ('pgsweep_admin'), ('pgsweep_worker'), ('pgsweep_monitor'), ('si_nobody')) r(rolname)
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND left(p.proname, 1) = '_'
              AND has_function_privilege(r.rolname, p.oid, 'EXECUTE')), NULL,
    'no underscore routine is executable by admin, worker, monitor or PUBLIC');
SELECT is((SELECT string_agg(format('%s: %s', r.rolname, p.oid::regprocedure), ', ' ORDER BY 1)
             FROM pg_proc p
            CROSS JOIN (VALUES ('pgsweep_admin'), ('pgsweep_worker'), ('pgsweep_monitor'), ('si_nobody')) r(rolname)
            WHERE p.pronamespace = 'pgsweep'::regnamespace
              AND EXISTS (SELECT 1 FROM unnest(p.proargnames) a WHERE a IN ('p_now', 'p_clock'))
              AND has_function_privilege(r.rolname, p.oid, 'EXECUTE')), NULL,
    'no signature that takes a clock (p_now, p_clock) is executable by admin, worker, monitor or PUBLIC');
SELECT is((SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND NOT p.prosecdef
              AND NOT p.proname = ANY (pgsweep._invoker_routines()) AND p.prokind = 'f'), NULL,
    'every function not listed as an invoker is SECURITY DEFINER');
SELECT is((SELECT string_agg(p.oid::regprocedure::text || ' calls ' || m[1], ', ')
             FROM pg_proc p, regexp_matches(p.prosrc, '(?:^|[^a-z0-9_.])(_[a-z][a-z0-9_]*)\s*\(', 'g') m
            WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.proname <> '_grant_all'
              AND (NOT p.prosecdef OR p.prokind = 'p')), NULL,
    'no invoker routine and no procedure calls an underscore routine (its caller could not)');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep._retention_begin('x', 'x', '1 hour', now() + interval '9 years')$$), '42501',
    'admin cannot open a pass with a clock of its own (the 0.33 escalation)');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep._maintain_fail_owner('x', 'y')$$), '42883', '_maintain_fail_owner is gone');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep._retention_builtin_exec('pgsweep.processed:q', 'delete', 'keyset', '-infinity'::timestamptz, 'infinity'::timestamptz, 'infinity')$$),
    '42501', 'admin cannot run a built-in policy''s statement');
SELECT is(pg_temp.as_role('si_admin', $$SELECT * FROM pgsweep.retention_due(now() + interval '9 years')$$), '42501',
    'admin cannot ask retention_due with a clock');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.lease_acquire('mine', 'a', '1 minute', now() + interval '1 year')$$), '42501',
    'admin cannot take a lease with a clock');
SELECT is(pg_temp.as_role('si_monitor', $$SELECT count(*) FROM pgsweep.leases$$), 'ok', 'a monitor still reads the leases view');

-- _grant_all refuses a matrix that names an internal routine (rolled back with the test)
CREATE OR REPLACE FUNCTION pgsweep._routine_grants(OUT role_kind text, OUT routine text) RETURNS SETOF record
LANGUAGE sql IMMUTABLE AS $$ SELECT 'admin'::text, '_retention_begin'::text $$;
SELECT throws_like($$SELECT pgsweep._grant_all()$$, '%_retention_begin%is internal%', '_grant_all refuses to grant an underscore routine');
SELECT is((SELECT sqlstate FROM (SELECT pg_temp.as_role('postgres', 'SELECT pgsweep._grant_all()') AS sqlstate) x), '42501',
    'with 42501');

-- 2. Passes belong to their session. A pass of another, live session (the
-- checkpointer's pid stands in for it) is refused to every step routine,
-- and nothing changes.
CREATE TEMP TABLE si_other AS SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer';
INSERT INTO pgsweep.maintain_pass (owner, started_at, budget, pid) VALUES ('other', clock_timestamp(), '1 minute', (SELECT pid FROM si_other));
INSERT INTO pgsweep.maintain_run (pass_id, part, owner, token, status, started_at, deadline)
SELECT id, 'recovery', 'other', 1, 'running', clock_timestamp(), clock_timestamp() + interval '1 minute'
  FROM pgsweep.maintain_pass WHERE owner = 'other';
CREATE TABLE si_tbl (id int, at timestamptz NOT NULL);
INSERT INTO si_tbl SELECT g, now() - (g - 0.5) * interval '1 hour' FROM generate_series(1, 48) g;
GRANT SELECT, DELETE ON si_tbl TO si_admin;
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_register('si_tbl', 'public.si_tbl', 'at', '1 day')$$), 'ok',
    'si_admin registers a policy of its own');
INSERT INTO pgsweep.retention_pass (policy, owner, mode, pid, started_at, deadline, renewed_at)
VALUES ('si_tbl', 'other', 'parallel', (SELECT pid FROM si_other), clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp());
CREATE TEMP TABLE si_before AS
SELECT (SELECT jsonb_agg(to_jsonb(p) ORDER BY p.id) FROM pgsweep.maintain_pass p) AS passes,
       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM pgsweep.maintain_run r) AS runs,
       (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM pgsweep.retention_pass r) AS rpasses,
       (SELECT count(*) FROM si_tbl) AS rows;
GRANT SELECT ON si_before TO PUBLIC;
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.maintain_step_part((SELECT id FROM pgsweep.maintain_pass WHERE owner = 'other'), 'recovery')$$),
    '42501', 'maintain_step_part: another session''s pass is refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step(%s)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other' AND part = 'recovery'))),
    '42501', 'maintain_step: another session''s recovery run is refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_failed(%s, %L, %L)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'), 'x', 'XX000')),
    '42501', 'maintain_step_failed: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_part_end(%s)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'))),
    '42501', 'maintain_step_part_end: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_go(%s)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'))),
    '42501', 'maintain_step_go: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_tally(%s, %L, NULL, %L)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'), 'x', 'forged')),
    '42501', 'maintain_step_tally: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_end(%s)', (SELECT id FROM pgsweep.maintain_pass WHERE owner = 'other'))),
    '42501', 'maintain_step_end: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.retention_step(%s)', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'other'))),
    '42501', 'retention_step: another session''s pass is refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.retention_step_claim(%s)', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'other'))),
    '42501', 'retention_step_claim: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.retention_step_record(%s, %L, 0, NULL, NULL, NULL)', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'other'), 'done')),
    '42501', 'retention_step_record: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.retention_step_end(%s, NULL)', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'other'))),
    '42501', 'retention_step_end: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_renew(%s)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'))),
    '42501', 'maintain_step_renew: refused');
SELECT is(pg_temp.as_role('si_admin', format('SELECT pgsweep.maintain_step_pace(%s, NULL, NULL, now(), 0, 0)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'))),
    '42501', 'maintain_step_pace: refused');
-- the procedures raise before their first COMMIT, so they run here too
SELECT is(pg_temp.as_role('si_admin', format('CALL pgsweep.maintain_step_retention(%s)', (SELECT id FROM pgsweep.maintain_run WHERE owner = 'other'))),
    '42501', 'maintain_step_retention: another session''s run is refused');
SELECT is(pg_temp.as_role('si_admin', format('CALL pgsweep.retention_step_pass(%L, %s)', 'si_tbl', (SELECT id FROM pgsweep.retention_pass WHERE owner = 'other'))),
    '42501', 'retention_step_pass: another session''s pass is refused');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.maintain_fail_owner('other', 'forged')$$), 'ok',
    'maintain_fail_owner runs ...');
SELECT ok((SELECT passes = (SELECT jsonb_agg(to_jsonb(p) ORDER BY p.id) FROM pgsweep.maintain_pass p)
              AND runs = (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM pgsweep.maintain_run r)
              AND rpasses = (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM pgsweep.retention_pass r)
              AND rows = (SELECT count(*) FROM si_tbl) FROM si_before),
    '... and every refused step, and maintain_fail_owner on a live session''s pass (its session is alive), changed nothing');
-- a record without a claim changes nothing, in one's own pass too
SELECT is(pg_temp.as_role('si_admin', $$CREATE TEMP TABLE si_mine AS SELECT pgsweep.retention_step_begin('si_tbl', 'mine', '1 hour') AS id$$), 'ok',
    'admin opens a pass of its own');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_step_record((SELECT id FROM si_mine), 'done', 1000000, NULL, NULL, NULL)$$), 'ok',
    'a record without a claim is accepted ...');
SELECT is((SELECT rows_deleted FROM pgsweep.retention_pass WHERE id = (SELECT id FROM si_mine)), 0::bigint, '... and changes nothing');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_step_end((SELECT id FROM si_mine), NULL)$$), 'ok', 'admin ends its pass');
DO $$ BEGIN PERFORM pgsweep._retention_unlock('si_tbl'); END $$;

-- retention_step_session_restore (S_owner, any admin may call it) only
-- DEALLOCATEs this session's prepared statements that its list leaves out,
-- as a plain DEALLOCATE could: it sets nothing (role, session user,
-- search_path are as they were) and a list entry is only compared.
CREATE FUNCTION pg_temp.restore_probe() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_before text;
    v_after text;
    v_gone text[];
    v_left text[];
BEGIN
    PERFORM set_config('role', 'si_admin', true);
    EXECUTE 'PREPARE si_keep AS SELECT 1';
    EXECUTE 'PREPARE si_drop AS SELECT 2';
    v_before := concat_ws(' | ', current_user, session_user, current_setting('role'), current_setting('search_path'),
                          current_setting('session_authorization'));
    v_gone := pgsweep.retention_step_session_restore(
        ARRAY(SELECT p.name || ' ' || p.statement FROM pg_prepared_statements p WHERE p.name <> 'si_drop')
        || ARRAY['ALL', E'si_keep\n; RESET ROLE; SET search_path = public', 'SET ROLE postgres']);
    v_after := concat_ws(' | ', current_user, session_user, current_setting('role'), current_setting('search_path'),
                         current_setting('session_authorization'));
    v_left := ARRAY(SELECT p.name FROM pg_prepared_statements p WHERE p.name LIKE 'si\_%' ORDER BY 1);
    PERFORM set_config('role', 'none', true);
    DEALLOCATE ALL; -- prepared statements outlive the ROLLBACK
    RETURN format('dropped %s, kept %s, session %s', v_gone, v_left,
                  CASE WHEN v_before = v_after THEN 'unchanged' ELSE v_before || ' became ' || v_after END);
END $$;
SELECT is(pg_temp.restore_probe(), 'dropped {si_drop}, kept {si_keep}, session unchanged',
    'retention_step_session_restore deallocates only the statements its list leaves out, and changes no role, session user or search_path');

-- retention_step_session_state reads the settings from the server (SHOW
-- ALL), not from a list: every setting a session can change (pg_settings'
-- contexts user and superuser, as its owner sees them), a loaded library's
-- included, search_path left to the caller; a change to any of them shows.
LOAD 'auto_explain';
CREATE FUNCTION pg_temp.settings_probe() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_names text[] := ARRAY(SELECT split_part(s, '=', 1) FROM unnest((pgsweep.retention_step_session_state()).settings) s);
    v_before text[] := (pgsweep.retention_step_session_state()).settings;
    v_changed text;
    v_all text[];
BEGIN
    -- every name pg_settings shows the schema's owner (the function's role)
    PERFORM set_config('role', (SELECT proowner::regrole::text FROM pg_proc
                                 WHERE oid = 'pgsweep.retention_step_session_state'::regproc), true);
    v_all := ARRAY(SELECT name FROM pg_settings WHERE context IN ('user', 'superuser') AND name <> 'search_path');
    PERFORM set_config('role', 'none', true);
    PERFORM set_config('auto_explain.log_min_duration', '12345', false);
    PERFORM set_config('session_replication_role', 'replica', false);
    PERFORM set_config('work_mem', '7MB', false);
    v_changed := (SELECT string_agg(split_part(a, '=', 1), ', ' ORDER BY 1)
                    FROM unnest((pgsweep.retention_step_session_state()).settings) a WHERE NOT a = ANY (v_before));
    RESET auto_explain.log_min_duration;
    RESET session_replication_role;
    RESET work_mem;
    RETURN format('search_path %s, work_mem %s, plpgsql.extra_errors %s, session_replication_role %s, '
                  'auto_explain.log_min_duration %s, all of pg_settings %s; changed: %s',
                  'search_path' = ANY (v_names), 'work_mem' = ANY (v_names), 'plpgsql.extra_errors' = ANY (v_names),
                  'session_replication_role' = ANY (v_names), 'auto_explain.log_min_duration' = ANY (v_names),
                  v_names @> v_all,
                  v_changed);
END $$;
SELECT is(pg_temp.settings_probe(),
    'search_path f, work_mem t, plpgsql.extra_errors t, session_replication_role t, '
    'auto_explain.log_min_duration t, all of pg_settings t; changed: auto_explain.log_min_duration, session_replication_role, work_mem',
    'retention_step_session_state checks every setting a session can change, read from the server (no list), and sees each change');

-- 3. The cutoff cap. The owner opens a pass with a clock nine years ahead
-- (the 0.33 attack, now the owner's alone): it deletes only what is older
-- than now() - older_than. A sweep whose stored cutoff is 'infinity' (as
-- if forged) deletes no more either.
SELECT is((SELECT count(*) FROM si_tbl WHERE at < now() - interval '1 day'), 24::bigint, '24 rows are expired, 24 are not');
CREATE FUNCTION pg_temp.run(p_name text, p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v bigint := pgsweep._retention_begin(p_name, 'tap', interval '1 hour', p_now);
BEGIN
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep._retention_finish(v, NULL, NULL);
    PERFORM pgsweep._retention_unlock(p_name);
    RETURN (SELECT rows_deleted FROM pgsweep.retention_pass WHERE id = v);
END $$;
SELECT is(pg_temp.run('si_tbl', clock_timestamp() + interval '9 years'), 24::bigint, 'a pass with a clock nine years ahead deletes the 24 expired rows ...');
SELECT is((SELECT count(*) FROM si_tbl), 24::bigint, '... and keeps the 24 young ones');
INSERT INTO si_tbl SELECT g, now() - g * interval '1 hour' - interval '1 day' FROM generate_series(1, 10) g;
INSERT INTO pgsweep.retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units)
VALUES ('si_tbl', 'keyset', 'infinity', clock_timestamp(), 'forged', 1);
INSERT INTO pgsweep.retention_unit (policy, sweep_id, unit_no, time_lo, time_hi)
SELECT 'si_tbl', id, 1, '-infinity', 'infinity' FROM pgsweep.retention_sweep WHERE planned_by = 'forged';
SELECT is(pg_temp.run('si_tbl', NULL), 10::bigint, 'a sweep whose stored cutoff is infinity deletes only the 10 expired rows ...');
SELECT is((SELECT count(*) FROM si_tbl WHERE at >= now() - interval '1 day'), 24::bigint, '... never a young one');

-- 4. Reserved leases: refused to every verb, for a worker and a superuser;
-- the lease table unchanged; lease_release_owner leaves them alone.
DO $$ BEGIN
    PERFORM pgsweep._lease_acquire('maintain:recovery', 'holder', '1 hour', NULL);
    PERFORM pgsweep._lease_acquire('retention:si_tbl', 'holder', '1 hour', NULL);
END $$;
CREATE TEMP TABLE si_leases AS SELECT * FROM pgsweep.lease;
GRANT SELECT ON si_leases TO PUBLIC;
SELECT is(pg_temp.as_role('si_worker', format('SELECT pgsweep.%s(%L, %L%s)', v.verb, n.name, 'holder',
              CASE WHEN v.verb <> 'lease_release' THEN ', ''1 hour''' ELSE '' END)), '42501',
          format('a worker''s %s(%s) is refused', v.verb, n.name))
  FROM (VALUES ('lease_acquire'), ('lease_renew'), ('lease_release')) v(verb),
       (VALUES ('maintain:recovery'), ('maintain:retention'), ('retention:si_tbl'), ('pgsweep:anything')) n(name);
SELECT throws_like($$SELECT pgsweep.lease_renew('maintain:recovery', 'holder', '1 hour')$$,
    '%lease ''maintain:recovery'' is reserved for pgsweep itself%', 'a superuser''s renew is refused too, naming the lease and why');
-- holder's pass still runs (a live session): lease_release_owner leaves its
-- pgsweep leases alone (a stopped runner's, with no live pass, are released)
INSERT INTO pgsweep.maintain_pass (owner, started_at, budget, pid) VALUES ('holder', clock_timestamp(), '1 minute', (SELECT pid FROM si_other));
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.lease_release_owner('holder')$$), 'ok', 'lease_release_owner runs ...');
SELECT set_eq('SELECT * FROM pgsweep.lease', 'SELECT * FROM si_leases', '... and every refused call left the leases as they were');

-- 5. Policies belong to their owners. si_admin owns si_tbl's policy; si_admin2
-- (another admin) is refused every change, and nothing changes; si_member
-- (a member of si_admin) may.
CREATE TEMP TABLE si_pol AS SELECT * FROM pgsweep.retention_policy WHERE name = 'si_tbl';
GRANT SELECT ON si_pol TO PUBLIC;
GRANT SELECT, DELETE ON si_tbl TO si_admin2;
SELECT is(pg_temp.as_role('si_admin2', x.sql), '42501', x.what)
  FROM (VALUES ($$SELECT pgsweep.retention_set_filter('si_tbl', 'id', '{1}')$$, 'another admin cannot re-filter a policy'),
               ($$SELECT pgsweep.retention_set_lease_ttl('si_tbl', '5 seconds')$$, 'nor change its lease TTL'),
               ($$SELECT pgsweep.retention_set_strategy('si_tbl', 'keyset')$$, 'nor its strategy'),
               ($$SELECT pgsweep.retention_set_time_zone('si_tbl', 'UTC')$$, 'nor its time zone'),
               ($$SELECT pgsweep.retention_unregister('si_tbl')$$, 'nor unregister it'),
               ($$SELECT pgsweep.retention_register('si_tbl', 'public.si_tbl', 'at', '0 seconds')$$, 'nor register its name again'),
               ($$SELECT pgsweep.retention_set_filter_proved('pgsweep.lease'::regclass, 'si_tbl', 'id', '{1}')$$, 'nor pass a table of another role as its proof'),
               -- each definer half refuses a table that is not the session's proof
               -- (bad_input_hostile.sql tries their other arguments through the wrappers)
               ($$SELECT pgsweep.retention_register_proved('public.si_tbl'::regclass, 'si_tbl', 'public.si_tbl'::regclass, 'at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 minute')$$,
                'retention_register_proved refuses a table that is no proof'),
               ($$SELECT pgsweep.retention_unregister_proved('public.si_tbl'::regclass, 'si_tbl')$$, 'so does retention_unregister_proved'),
               ($$SELECT pgsweep.retention_set_lease_ttl_proved('public.si_tbl'::regclass, 'si_tbl', '5 seconds')$$, 'and retention_set_lease_ttl_proved'),
               ($$SELECT pgsweep.retention_set_strategy_proved('public.si_tbl'::regclass, 'si_tbl', 'keyset')$$, 'and retention_set_strategy_proved'),
               ($$SELECT pgsweep.retention_set_time_zone_proved('public.si_tbl'::regclass, 'si_tbl', 'UTC')$$, 'and retention_set_time_zone_proved')) x(sql, what);
SELECT set_eq('SELECT * FROM pgsweep.retention_policy WHERE name = ''si_tbl''', 'SELECT * FROM si_pol', 'the policy is unchanged');
SELECT is(pg_temp.as_role('si_member', $$SELECT pgsweep.retention_set_lease_ttl('si_tbl', '5 seconds')$$), 'ok',
    'a member of the owner changes it');
-- Built-in names are reserved, for an admin and for a superuser.
DO $$ BEGIN
    PERFORM pgsweep.queue_create('si_q', 'inbox');
    PERFORM pgsweep.queue_configure('si_q', '{"processed_retention": "1 day"}');
    PERFORM pgsweep.retention_builtin_sync();
END $$;
SELECT is(pg_temp.as_role('si_admin', x.sql), '42501', x.what)
  FROM (VALUES ($$SELECT pgsweep.retention_set_filter('pgsweep.processed:si_q', 'queue', '{other}')$$, 'an admin cannot re-filter a built-in policy'),
               ($$SELECT pgsweep.retention_unregister('pgsweep.processed:si_q')$$, 'nor unregister one'),
               ($$SELECT pgsweep.retention_register('pgsweep.processed:si_q', 'public.si_tbl', 'at', '0 seconds')$$, 'nor take its name')) x(sql, what);
SELECT throws_ok($$SELECT pgsweep.retention_set_time_zone('pgsweep.dead:si_q', 'UTC')$$, '42501', NULL, 'a superuser cannot either');
SELECT is((SELECT filter_values FROM pgsweep.retention_policy WHERE name = 'pgsweep.processed:si_q'), ARRAY['si_q'],
    'the built-in policy is unchanged');

-- 6. A domain's CHECK on a filter column never runs in retention_set_filter:
-- the values are read as the base type.
CREATE TABLE si_calls (who text, what text);
GRANT INSERT ON si_calls TO PUBLIC;
CREATE FUNCTION public.si_check(text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO si_calls VALUES (current_user, 'check');
    BEGIN
        UPDATE pgsweep.retention_policy SET owner = 'postgres'::regrole;
        INSERT INTO si_calls VALUES (current_user, 'updated retention_policy');
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RETURN true;
END $f$;
CREATE DOMAIN si_kind AS text CHECK (public.si_check(VALUE));
CREATE TABLE si_dom (kind si_kind, at timestamptz NOT NULL);
GRANT SELECT, DELETE ON si_dom TO si_admin;
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_register('si_dom', 'public.si_dom', 'at', '1 day')$$), 'ok',
    'a policy on a table with a domain column');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_set_filter('si_dom', 'kind', '{a,b}')$$), 'ok',
    'its filter on the domain column is set');
SELECT is((SELECT count(*) FROM si_calls), 0::bigint, 'without running the domain''s CHECK (as anyone)');
SELECT is(pg_temp.as_role('si_admin', $$SELECT pgsweep.retention_set_filter('si_dom', 'at', '{not-a-time}')$$), '22023',
    'a value the base type rejects is still refused');

SELECT * FROM finish();
ROLLBACK;
