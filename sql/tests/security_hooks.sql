-- pgTAP: the hook suite (issue 23, class 2; docs/security.md "Other roles'
-- code runs only as that role"). A hostile role owns tables registered for
-- retention -- a plain table, a RANGE-partitioned one with an expired leaf,
-- a leaf the cutoff cuts through, a DEFAULT partition, and an expired leaf
-- owned by another role -- carrying every hook that runs code: row and
-- statement triggers BEFORE and AFTER DELETE, a rule ON DELETE DO ALSO, a
-- row-level security policy with FORCE ROW LEVEL SECURITY, a domain CHECK,
-- a CHECK constraint, an index expression, a column DEFAULT and a generated
-- column, each calling a hook that records current_user and tries
-- privileged actions (read pgsweep's messages, re-point a policy, become
-- superuser, SET ROLE to the superuser, register a policy on a table it has
-- no right on), recording which succeeded. Every SQL retention path runs:
-- retention_register, each retention_set_*, and passes (the steps
-- retention_run and maintain take) as a superuser and as an admin role,
-- with partitions to detach and drop. Every recorded current_user is the
-- table's (or the leaf's) owner, and nothing privileged succeeded.
-- CALL maintain() itself (it commits): security_hooks_test.go.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(28);

CREATE ROLE hk_hostile LOGIN IN ROLE pgsweep_admin;
CREATE ROLE hk_other LOGIN;
CREATE ROLE hk_runner LOGIN IN ROLE pgsweep_admin;
GRANT hk_hostile TO hk_runner; -- the maintenance role: it may act as the policies' owner
CREATE SCHEMA hk AUTHORIZATION hk_hostile;
GRANT USAGE ON SCHEMA hk TO PUBLIC;
CREATE SCHEMA hk_victim;
CREATE TABLE hk_victim.precious (id int, at timestamptz NOT NULL);
GRANT USAGE ON SCHEMA hk_victim TO PUBLIC;

SET LOCAL ROLE hk_hostile;
CREATE TABLE hk.log (who text, hook text, what text);
GRANT INSERT ON hk.log TO PUBLIC;
-- hk.try: the hook. Records who runs it, then tries each privileged action.
CREATE FUNCTION hk.try(p_hook text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO hk.log VALUES (current_user, p_hook, 'ran');
    -- armed once the fixture is in place: the fixture is made in a
    -- superuser's session with SET ROLE, which a hook could RESET
    IF current_setting('hk.armed', true) IS DISTINCT FROM 'on' THEN
        RETURN true;
    END IF;
    BEGIN
        PERFORM count(*) FROM pgsweep.message;
        INSERT INTO hk.log VALUES (current_user, p_hook, 'SUCCEEDED: read pgsweep.message');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        UPDATE pgsweep.retention_policy SET owner = 'postgres'::regrole;
        INSERT INTO hk.log VALUES (current_user, p_hook, 'SUCCEEDED: re-pointed retention_policy');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        ALTER ROLE hk_hostile SUPERUSER;
        INSERT INTO hk.log VALUES (current_user, p_hook, 'SUCCEEDED: ALTER ROLE SUPERUSER');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        PERFORM set_config('role', 'postgres', true);
        INSERT INTO hk.log VALUES (current_user, p_hook, 'SUCCEEDED: SET ROLE postgres');
        PERFORM set_config('role', 'none', true);
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        -- (with a forged proof: retention_register itself would create its
        -- proof table, which the session check refuses; security.sql)
        PERFORM pgsweep.retention_register_proved('hk.log'::regclass, 'hk_evil', 'hk_victim.precious', 'at', '0 seconds',
                                                  NULL, NULL, 1000, 'exclusive', '1 minute');
        INSERT INTO hk.log VALUES (current_user, p_hook, 'SUCCEEDED: registered a policy on hk_victim.precious');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    RETURN true;
END $f$;
CREATE FUNCTION hk.hook_int(p_hook text) RETURNS int LANGUAGE plpgsql AS $f$ BEGIN PERFORM hk.try(p_hook); RETURN 1; END $f$;
CREATE FUNCTION hk.hook_imm(p_v int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM hk.try('index/generated'); RETURN p_v; END $f$;
CREATE FUNCTION hk.trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM hk.try(TG_NAME); RETURN CASE WHEN TG_LEVEL = 'ROW' THEN OLD END; END $f$;
CREATE DOMAIN hk.kind AS text CHECK (hk.try('domain'));

-- every hook on a table: triggers, rule, RLS (forced), domain, CHECK,
-- index expression, default, generated column
-- (a leaf has its parent's row triggers already: p_prefix names its own)
CREATE FUNCTION hk.arm(p_table text, p_prefix text DEFAULT '') RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
    IF p_prefix = '' THEN
        EXECUTE format('CREATE TRIGGER b_row BEFORE DELETE ON %s FOR EACH ROW EXECUTE FUNCTION hk.trg()', p_table);
        EXECUTE format('CREATE TRIGGER a_row AFTER DELETE ON %s FOR EACH ROW EXECUTE FUNCTION hk.trg()', p_table);
    END IF;
    EXECUTE format('CREATE TRIGGER %I BEFORE DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION hk.trg()', p_prefix || 'b_stmt', p_table);
    EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION hk.trg()', p_prefix || 'a_stmt', p_table);
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE format('CREATE POLICY hook ON %s USING (hk.try(''rls''))', p_table);
END $f$;

CREATE TABLE hk.plain (id int NOT NULL, at timestamptz NOT NULL, kind hk.kind,
    c int CHECK (hk.try('check') IS NOT NULL), d int DEFAULT hk.hook_int('default'),
    g int GENERATED ALWAYS AS (hk.hook_imm(id)) STORED);
CREATE INDEX ON hk.plain (hk.hook_imm(id));
CREATE INDEX ON hk.plain (at);
CREATE RULE also AS ON DELETE TO hk.plain DO ALSO SELECT hk.try('rule');
SELECT hk.arm('hk.plain');

CREATE TABLE hk.parted (id int NOT NULL, at timestamptz NOT NULL, kind hk.kind,
    c int CHECK (hk.try('check') IS NOT NULL), d int DEFAULT hk.hook_int('default')) PARTITION BY RANGE (at);
CREATE TABLE hk.parted_old PARTITION OF hk.parted FOR VALUES FROM ('2026-01-01 00:00+00') TO ('2026-01-02 00:00+00');
DO $$ BEGIN -- a leaf the cutoff cuts through: three days either side of now
    EXECUTE format('CREATE TABLE hk.parted_mid PARTITION OF hk.parted FOR VALUES FROM (%L) TO (%L)',
                   date_trunc('hour', now()) - interval '3 days', date_trunc('hour', now()) + interval '3 days');
END $$;
CREATE TABLE hk.parted_def PARTITION OF hk.parted DEFAULT;
CREATE INDEX ON hk.parted (at);
SELECT hk.arm('hk.parted');
SELECT hk.arm(x, 'leaf_') FROM unnest(ARRAY['hk.parted_old', 'hk.parted_mid', 'hk.parted_def']) x;
RESET ROLE;
-- an expired leaf of another role (hk_other), armed the same way
CREATE TABLE hk.parted_x PARTITION OF hk.parted FOR VALUES FROM ('2025-12-01 00:00+00') TO ('2025-12-02 00:00+00');
ALTER TABLE hk.parted_x OWNER TO hk_other;
SET LOCAL ROLE hk_other;
SELECT hk.arm('hk.parted_x', 'leaf_');
RESET ROLE;
GRANT SELECT, DELETE ON hk.parted_x TO hk_hostile;

-- rows, inserted by the tables' owners (a superuser's INSERT would run the
-- DEFAULT, CHECK, domain and generated-column hooks as the superuser: the
-- hook would make itself one); what the INSERT hooks record is cleared below
SET LOCAL ROLE hk_other;
INSERT INTO hk.parted_x (id, at, kind) SELECT g, '2025-12-01 00:00+00'::timestamptz + g * interval '1 hour', 'a' FROM generate_series(1, 5) g;
SET LOCAL ROLE hk_hostile;
INSERT INTO hk.plain (id, at, kind) SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour', 'a' FROM generate_series(1, 20) g;
INSERT INTO hk.parted (id, at, kind) SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '6 hours', 'a' FROM generate_series(0, 3) g;
INSERT INTO hk.parted (id, at, kind) SELECT g, now() - interval '2 days' - g * interval '1 minute', 'a' FROM generate_series(10, 13) g;
INSERT INTO hk.parted (id, at, kind) SELECT g, now() - interval '1 hour' - g * interval '1 minute', 'a' FROM generate_series(20, 23) g;
INSERT INTO hk.parted (id, at, kind) SELECT g, '2020-06-01 00:00+00'::timestamptz + g * interval '1 minute', 'a' FROM generate_series(30, 32) g;
INSERT INTO hk.parted (id, at, kind) VALUES (100, '2030-06-01 00:00+00', 'a');
ANALYZE hk.plain, hk.parted_old, hk.parted_mid, hk.parted_def;
RESET ROLE;
TRUNCATE hk.log;
SET LOCAL hk.armed = 'on';
-- the control: armed, a hook run in this superuser session as the owner
-- (SET ROLE, as a careless maintenance would) escapes; the suite sees it
-- (in a subtransaction rolled back: what it did is undone)
CREATE TEMP TABLE hk_control (escapes bigint);
DO $$
DECLARE
    v bigint;
BEGIN
    BEGIN
        PERFORM set_config('role', 'hk_hostile', true);
        PERFORM hk.try('control');
        PERFORM set_config('role', 'none', true);
        SELECT count(*) INTO v FROM hk.log WHERE hook = 'control' AND what LIKE 'SUCCEEDED%';
        RAISE EXCEPTION 'undo the control';
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
    INSERT INTO hk_control VALUES (v);
END $$;
SELECT ok((SELECT escapes FROM hk_control) >= 1,
    'control: a hook run under a mere SET ROLE escapes, so the checks below can see an escape');
SELECT ok(NOT (SELECT rolsuper FROM pg_roles WHERE rolname = 'hk_hostile') AND (SELECT count(*) FROM hk.log) = 0,
    'and the control is undone');

-- retention_register and every retention_set_* (as the hostile role): no
-- table code runs at all
SET LOCAL ROLE hk_hostile;
SELECT lives_ok($$SELECT pgsweep.retention_register('hk_plain', 'hk.plain', 'at', '1 day', p_batch_size => 5)$$, 'register the plain table');
SELECT lives_ok($$SELECT pgsweep.retention_register('hk_parted', 'hk.parted', 'at', '1 day', p_batch_size => 5)$$, 'register the partitioned table');
SELECT lives_ok($$SELECT pgsweep.retention_set_filter('hk_plain', 'kind', '{a,b}')$$, 'set a filter on the domain column');
SELECT lives_ok($$SELECT pgsweep.retention_set_filter('hk_plain', NULL, NULL)$$, 'and remove it');
SELECT lives_ok($$SELECT pgsweep.retention_set_strategy('hk_plain', 'tid_range')$$, 'set the strategy');
SELECT lives_ok($$SELECT pgsweep.retention_set_lease_ttl('hk_plain', '30 seconds')$$, 'set the lease TTL');
SELECT lives_ok($$SELECT pgsweep.retention_set_time_zone('hk_parted', 'UTC')$$, 'set the time zone');
RESET ROLE;
SELECT is((SELECT count(*) FROM hk.log), 0::bigint, 'registration and every setter ran no hook (no domain CHECK, no table code)');

-- passes: the steps retention_run and maintain take, as a superuser
CREATE FUNCTION pg_temp.run(p_name text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v bigint := pgsweep.retention_step_begin(p_name, 'tap', interval '1 hour');
BEGIN
    WHILE pgsweep.retention_step(v) LOOP END LOOP;
    PERFORM pgsweep.retention_step_end(v, NULL);
    PERFORM pgsweep.retention_step_unlock(p_name);
    RETURN v;
END $$;
SELECT isnt(pg_temp.run('hk_plain'), NULL, 'a superuser''s pass of the plain table runs');
SELECT is((SELECT count(*) FROM hk.plain), 0::bigint, 'it deleted every expired row');
SELECT isnt(pg_temp.run('hk_parted'), NULL, 'a superuser''s pass of the partitioned table runs (detach)');
SELECT isnt(pg_temp.run('hk_parted'), NULL, 'and the next one (drop the detached leaf)');
SELECT is(to_regclass('hk.parted_old'), NULL, 'the expired leaf was detached ...');
SELECT is((SELECT count(*) FROM pg_class WHERE relname LIKE 'pgsweep_detached_%' AND relnamespace = 'hk'::regnamespace), 0::bigint,
    '... and dropped');
SELECT is((SELECT count(*) FROM hk.parted_mid), 4::bigint, 'the leaf the cutoff cuts through was swept, its 4 young rows kept');
SELECT is((SELECT count(*) FROM hk.parted_def), 1::bigint, 'the default partition was swept, its young row kept');
SELECT is((SELECT count(*) FROM hk.parted_x), 5::bigint, 'the expired leaf of another role was neither swept nor dropped ...');
SELECT ok((SELECT bool_or(error LIKE '%leaf hk.parted_x skipped: owned by hk_other%') FROM pgsweep.retention_pass WHERE policy = 'hk_parted'),
    '... and the pass says so');

-- as an admin role (a member of the policies' owner), on fresh rows
SET LOCAL hk.armed = 'off'; -- the fixture again (see the control)
SET LOCAL ROLE hk_hostile;
INSERT INTO hk.plain (id, at, kind) SELECT g, '2026-01-01 00:00+00'::timestamptz + g * interval '1 hour', 'a' FROM generate_series(1, 10) g;
RESET ROLE;
SET LOCAL hk.armed = 'on';
DELETE FROM hk.log WHERE hook IN ('default', 'check', 'domain', 'index/generated', 'rls') AND what = 'ran';
SET LOCAL ROLE hk_runner;
SELECT isnt(pg_temp.run('hk_plain'), NULL, 'an admin''s pass of the plain table runs');
SELECT isnt(pg_temp.run('hk_parted'), NULL, 'an admin''s pass of the partitioned table runs');
RESET ROLE;
SELECT is((SELECT count(*) FROM hk.plain), 0::bigint, 'the admin''s pass deleted the expired rows');

-- the verdict
SELECT cmp_ok((SELECT count(DISTINCT hook) FROM hk.log), '>=', 5::bigint,
    'the hooks ran (row and statement triggers, the rule, RLS): the checks below can see them');
SELECT is((SELECT string_agg(DISTINCT hook, ', ' ORDER BY hook) FROM hk.log),
    'a_row, a_stmt, b_row, b_stmt, leaf_a_stmt, leaf_b_stmt, rls, rule', 'every DELETE hook ran, on the tables and on the leaves');
SELECT is((SELECT string_agg(DISTINCT who, ', ') FROM hk.log), 'hk_hostile',
    'every hook ran as the tables'' owner, never as pgsweep_owner, the superuser or the admin');
SELECT is((SELECT string_agg(DISTINCT what, '; ') FROM hk.log WHERE what <> 'ran'), NULL,
    'no privileged action succeeded');
SELECT ok(NOT (SELECT rolsuper FROM pg_roles WHERE rolname = 'hk_hostile') AND NOT EXISTS
    (SELECT 1 FROM pgsweep.retention_policy WHERE owner = 'postgres'::regrole OR name = 'hk_evil'),
    'the hostile role is no superuser, and no policy was re-pointed or registered');

SELECT * FROM finish();
ROLLBACK;
