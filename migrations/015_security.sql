-- pgsweep 0.15: the security model (docs/security.md).
--
-- * Roles: <schema>_owner owns the schema and everything in it;
--   <schema>_admin, <schema>_worker and <schema>_monitor are what DBAs grant
--   to login roles. PUBLIC gets nothing.
-- * Queue and lease verbs are SECURITY DEFINER functions owned by
--   <schema>_owner, search_path pinned with pg_temp last; worker and monitor
--   hold no privilege on any table, so no fence can be bypassed by a direct
--   UPDATE.
-- * Claims are fenced by a token: claim returns a fresh uuid per call and
--   renew/complete/fail/release take it instead of the owner label. Rows in
--   flight during the upgrade get a token nobody knows: their old workers'
--   calls fail (the old signatures are gone), their leases expire and the rows
--   are claimed again (at-least-once, as after a crash).
-- * Retention policies belong to the role that registered them and every
--   run deletes as that role; no SQL text is stored.
-- * Procedures qualify every operator and function (they cannot pin
--   search_path).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- The roles. Created when missing (a DBA may create them beforehand, for
-- example where the migrating role has no CREATEROLE); the ones created here
-- are recorded so that uninstall drops those and no others.
CREATE TABLE installed_role (
    role_name  text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE installed_role IS 'roles this install created (uninstall drops them); roles that existed before are not listed';

DO $roles$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_role text;
    v_missing text[] := '{}';
    v_super boolean;
    v_createrole boolean;
BEGIN
    FOREACH v_role IN ARRAY ARRAY[v_schema || '_owner', v_schema || '_admin', v_schema || '_worker', v_schema || '_monitor'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = v_role) THEN
            v_missing := v_missing || v_role;
        END IF;
    END LOOP;
    SELECT r.rolsuper, r.rolcreaterole INTO v_super, v_createrole FROM pg_catalog.pg_roles r WHERE r.rolname = current_user;
    IF v_missing <> '{}' AND NOT (v_super OR v_createrole) THEN
        RAISE EXCEPTION 'pgsweep needs the roles % and % cannot create them', pg_catalog.array_to_string(v_missing, ', '), current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Ask a superuser to run: %s; then run the migration again.',
                      (SELECT pg_catalog.string_agg(pg_catalog.format('CREATE ROLE %I NOLOGIN', m), '; ')
                         FROM pg_catalog.unnest(v_missing) m)
                      || pg_catalog.format('; GRANT %I TO %I', v_schema || '_owner', current_user));
    END IF;
    FOREACH v_role IN ARRAY v_missing LOOP
        EXECUTE pg_catalog.format('CREATE ROLE %I NOLOGIN', v_role);
        INSERT INTO installed_role (role_name) VALUES (v_role);
    END LOOP;
    -- The migrating role must be able to hand its objects to S_owner and
    -- create objects in a schema S_owner owns.
    IF NOT v_super AND NOT pg_catalog.pg_has_role(current_user, v_schema || '_owner', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT %I TO %I', v_schema || '_owner', current_user);
    END IF;
END
$roles$;

-- Claim tokens.
ALTER TABLE message ADD COLUMN token uuid;
UPDATE message SET token = gen_random_uuid() WHERE owner IS NOT NULL;

-- Retention policies have an owner: the role that registered them, the
-- role every run deletes as. Policies registered before 0.15 get the owner
-- of their table (the role that could have registered it); built-in ones
-- and those whose table is gone get <schema>_owner. No SQL text is stored:
-- statements are built when they run.
ALTER TABLE retention_policy ADD COLUMN owner regrole;
UPDATE retention_policy p
   SET owner = coalesce(
       CASE WHEN p.name NOT LIKE 'pgsweep.%' THEN
           (SELECT c.relowner::regrole FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = p.table_schema AND c.relname = p.table_name) END,
       (pg_catalog.current_schema() || '_owner')::regrole);
ALTER TABLE retention_policy ALTER COLUMN owner SET NOT NULL;
DELETE FROM retention_unit;
ALTER TABLE retention_sweep DROP COLUMN delete_sql;

-- The verbs' signatures change (token instead of owner; claim returns the
-- token): the old ones go.
DROP FUNCTION IF EXISTS claim(text, text, int, interval, timestamptz);
DROP FUNCTION IF EXISTS claim(text, text, int, interval);
DROP FUNCTION IF EXISTS renew(text, text, bigint[], interval, timestamptz);
DROP FUNCTION IF EXISTS renew(text, text, bigint[], interval);
DROP FUNCTION IF EXISTS complete(text, text, bigint[], timestamptz);
DROP FUNCTION IF EXISTS complete(text, text, bigint[]);
DROP FUNCTION IF EXISTS release(text, text, bigint[]);
DROP FUNCTION IF EXISTS fail_details(text, text, bigint[], text, interval, timestamptz);
DROP FUNCTION IF EXISTS fail(text, text, bigint[], text, interval);

-- pgsweep:include functions/validate.sql
-- Argument checks shared by every public function. Each raises SQLSTATE 22023
-- (invalid_parameter_value) with a message that names the argument and the
-- allowed range, before the caller has changed anything.

-- _interval_text renders an interval the way a person writes it in a call
-- ('1 second', '30 minutes'), so that error messages echo the caller's terms.
CREATE OR REPLACE FUNCTION _interval_text(p_value interval)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_secs numeric := extract(epoch FROM p_value);
    v_months int := extract(year FROM p_value)::int * 12 + extract(month FROM p_value)::int;
    v_rest interval;
    v_n numeric;
    v_unit text;
BEGIN
    IF p_value IS NULL THEN
        RETURN 'NULL';
    END IF;
    -- Months and years stay calendar units: extract(epoch) counts a year as
    -- 365.25 days while interval comparison counts it as 360, so '100 years'
    -- rendered from seconds ('36525 days') would name another bound than the
    -- one checked, and '101 years' would read '885366 hours'.
    IF v_months <> 0 THEN
        v_rest := p_value - make_interval(months => v_months);
        IF v_rest <> interval '0' THEN
            RETURN _interval_text(make_interval(months => v_months)) || ' ' || _interval_text(v_rest);
        END IF;
        IF v_months % 12 = 0 THEN
            v_n := v_months / 12; v_unit := 'year';
        ELSE
            v_n := v_months; v_unit := 'month';
        END IF;
        RETURN v_n::text || ' ' || v_unit || CASE WHEN abs(v_n) = 1 THEN '' ELSE 's' END;
    END IF;
    IF v_secs <> 0 AND v_secs % 86400 = 0 THEN
        v_n := v_secs / 86400; v_unit := 'day';
    ELSIF v_secs <> 0 AND v_secs % 3600 = 0 THEN
        v_n := v_secs / 3600; v_unit := 'hour';
    ELSIF v_secs <> 0 AND v_secs % 60 = 0 THEN
        v_n := v_secs / 60; v_unit := 'minute';
    ELSE
        v_n := v_secs; v_unit := 'second';
    END IF;
    RETURN trim_scale(v_n)::text || ' ' || v_unit || CASE WHEN abs(v_n) = 1 THEN '' ELSE 's' END;
END
$$;

CREATE OR REPLACE FUNCTION _check_text(p_arg text, p_value text, p_max_len int DEFAULT 200)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value = '' OR length(p_value) > p_max_len THEN
        RAISE EXCEPTION '% must be a non-empty string of at most % characters, got %', p_arg, p_max_len,
            CASE WHEN p_value IS NULL THEN 'NULL'
                 WHEN p_value = '' THEN 'an empty string'
                 ELSE length(p_value) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_interval(p_arg text, p_value interval, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
        RAISE EXCEPTION '% must be between % and %, got %', p_arg,
            _interval_text(p_min), _interval_text(p_max), _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_int(p_arg text, p_value bigint, p_min bigint, p_max bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
        RAISE EXCEPTION '% must be between % and %, got %', p_arg, p_min, p_max,
            coalesce(p_value::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- Times. The bounds are relative to the database clock (clock_timestamp(),
-- read when the check runs) and are the same for every function:
--
--   p_now        NULL (the database clock) or within 10 years of the clock,
--                either side. The p_now overloads exist for tests, which pin
--                fixed dates near today; a time further away (or +/-infinity)
--                would hold a lease or a claim for centuries, expire every
--                row at once, or overflow the arithmetic that adds a TTL.
--   p_deliver_at NULL (now) or a finite time at most 10 years ahead of the
--                clock; a time in the past means now.
--
-- Both raise 22023 naming the argument and the bound, and echo the value
-- given (in the session's TimeZone).
CREATE OR REPLACE FUNCTION _check_now(p_arg text, p_value timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_clock timestamptz;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    v_clock := clock_timestamp();
    IF NOT (p_value >= v_clock - interval '10 years' AND p_value <= v_clock + interval '10 years') THEN
        RAISE EXCEPTION '% must be NULL (the database clock) or a time within 10 years of the database clock, got %',
            p_arg, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_deliver_at(p_arg text, p_value timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NOT NULL AND NOT (isfinite(p_value) AND p_value <= clock_timestamp() + interval '10 years') THEN
        RAISE EXCEPTION '% must be NULL (now) or a finite time at most 10 years after the database clock, got %',
            p_arg, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- _check_time_zone: a time zone for AT TIME ZONE (a name from pg_timezone_names,
-- an abbreviation or a POSIX spec such as 'UTC-3' or 'EST5EDT') whose UTC
-- offset stays within 15 hours either side (real zones span -12 to +14).
-- PostgreSQL accepts POSIX offsets up to 167 hours ('UTC-99'), which would
-- shift a retention cutoff by days. The offset is read at every hour of a
-- fixed year (2001: POSIX rules repeat yearly, so a daylight-saving offset
-- in force for an hour is seen too). NULL is accepted (the caller's default).
CREATE OR REPLACE FUNCTION _check_time_zone(p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_offset interval;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        SELECT o INTO v_offset
          FROM (SELECT (t AT TIME ZONE p_value) - (t AT TIME ZONE 'UTC') AS o
                  FROM generate_series(timestamptz '2001-01-01 00:00:00+00', timestamptz '2001-12-31 23:00:00+00',
                                       interval '1 hour') t) x
         ORDER BY abs(extract(epoch FROM o)) DESC
         LIMIT 1;
    EXCEPTION WHEN OTHERS THEN -- unknown zone, or a malformed spec
        RAISE EXCEPTION '% must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got %, which is not a time zone',
            p_arg, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    IF abs(extract(epoch FROM v_offset)) > 15 * 3600 THEN
        RAISE EXCEPTION '% must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got %, whose UTC offset is %',
            p_arg, quote_literal(p_value),
            CASE WHEN v_offset < interval '0' THEN '-' ELSE '+' END || _interval_text(CASE WHEN v_offset < interval '0' THEN -v_offset ELSE v_offset END)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- pgsweep:end functions/validate.sql

-- pgsweep:include functions/settings.sql
-- Settings shared by every instance (table setting). setting_set validates a
-- value against the row's kind and range and stores its normalised form; a
-- change is read by the next maintain pass and the runners' next sleep.

-- _setting_parse returns p_value normalised for setting s, or raises 22023
-- naming the setting and its range. Nothing is written here.
CREATE OR REPLACE FUNCTION _setting_parse(s setting, p_value text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_interval interval;
    v_int bigint;
    v_range text;
BEGIN
    IF s.kind = 'interval' THEN
        v_range := format('between %s and %s', _interval_text(s.min_value::interval), _interval_text(s.max_value::interval));
        IF s.infinite_ok THEN
            v_range := v_range || ', or infinite';
            IF lower(trim(p_value)) = 'infinite' THEN
                RETURN 'infinite';
            END IF;
        END IF;
        BEGIN
            v_interval := trim(p_value)::interval;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION '% must be an interval %, got %', s.name, v_range, quote_literal(p_value)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        IF v_interval IS NULL OR v_interval < s.min_value::interval OR v_interval > s.max_value::interval THEN
            RAISE EXCEPTION '% must be %, got %', s.name, v_range,
                CASE WHEN p_value IS NULL THEN 'NULL' ELSE _interval_text(v_interval) END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN _interval_text(v_interval);
    END IF;

    v_range := format('between %s and %s', s.min_value, s.max_value);
    BEGIN
        v_int := trim(p_value)::bigint;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION '% must be an integer %, got %', s.name, v_range, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    PERFORM _check_int(s.name, v_int, s.min_value::bigint, s.max_value::bigint);
    RETURN v_int::text;
END
$$;

CREATE OR REPLACE FUNCTION _setting_row(p_name text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting;
BEGIN
    SELECT * INTO v FROM setting WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_name must be one of %, got %',
            (SELECT string_agg(name, ', ' ORDER BY name) FROM setting),
            coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

-- setting_set validates and stores a setting; it returns the stored
-- (normalised) value, e.g. setting_set('runner_interval', '00:00:30') = '30 seconds'.
CREATE OR REPLACE FUNCTION setting_set(p_name text, p_value text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_value text := _setting_parse(_setting_row(p_name), p_value);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v_value, updated_at = v_now WHERE name = p_name;
    RETURN v_value;
END
$$;

-- setting_reset puts a setting back to its default and returns it.
CREATE OR REPLACE FUNCTION setting_reset(p_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v.default_value, updated_at = v_now WHERE name = p_name;
    RETURN v.default_value;
END
$$;

CREATE OR REPLACE FUNCTION setting_get(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (_setting_row(p_name)).value;
END
$$;

-- Typed getters for SQL that uses settings. setting_interval returns NULL for
-- 'infinite' (keep forever), the same meaning NULL has in retention_register.
CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'interval' THEN
        RAISE EXCEPTION 'p_name must name an interval setting, % is an integer', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v.value = 'infinite' THEN
        RETURN NULL;
    END IF;
    RETURN v.value::interval;
END
$$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'integer' THEN
        RAISE EXCEPTION 'p_name must name an integer setting, % is an interval', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v.value::bigint;
END
$$;

CREATE OR REPLACE VIEW settings AS
SELECT name,
       value,
       default_value,
       kind,
       CASE WHEN infinite_ok THEN format('%s .. %s, or infinite', min_value, max_value)
            ELSE format('%s .. %s', min_value, max_value) END AS range,
       description,
       updated_at
  FROM setting;
-- pgsweep:end functions/settings.sql

-- pgsweep:include functions/version.sql
-- version(): the installed pgsweep version, for DBAs and deploy checks.
--
-- The schema version is the number of the last migration applied (tern's
-- schema_version); the release version is 0.<schema version>.0 until 1.0
-- (CHANGELOG.md). `pgsweep version` compares it with the binary's.
CREATE OR REPLACE FUNCTION version()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT '0.' || v.version || '.0' FROM schema_version v $$;
-- pgsweep:end functions/version.sql

-- pgsweep:include functions/privileges.sql
-- The role model, in one place (docs/security.md).
--
-- Installing into schema S uses four NOLOGIN roles (created by the
-- migration when missing, see _ensure_roles):
--   S_owner    owns the schema and every object in it; never a superuser
--   S_admin    queues, settings, retention policies, cron, maintenance (and S_monitor)
--   S_worker   send, claim, renew, complete, fail, release, leases
--   S_monitor  the stats views; never payloads
-- DBAs grant one of them to an application's own login role. PUBLIC gets
-- nothing: not the schema, not a table, not a function.
--
-- Every function is SECURITY DEFINER (runs as S_owner, search_path pinned
-- with pg_temp last) except the few that must run as their caller
-- (_invoker_routines): the retention_register wrappers, which pass the
-- caller's role on as the policy owner, the retention steps that delete as
-- the policy's owner, and the pg_cron functions (the job runs as the role
-- that scheduled it, which needs pg_cron's own grants). Worker and monitor roles hold no privilege on any
-- table, so a fence cannot be bypassed with a direct UPDATE, and payloads
-- are reachable only through the verbs. Procedures (maintain, retention_run)
-- cannot be SECURITY DEFINER (they commit): they run as their caller and
-- call only schema-qualified functions.
--
-- Every migration ends with SELECT _grant_all(): ownership, security and
-- grants are re-applied from this file, so an upgraded install's ACLs equal
-- a fresh one's.

-- _role_names: the four role names of this install.
CREATE OR REPLACE FUNCTION _role_names(OUT owner_role text, OUT admin_role text, OUT worker_role text, OUT monitor_role text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.current_schema() || '_owner', pg_catalog.current_schema() || '_admin',
           pg_catalog.current_schema() || '_worker', pg_catalog.current_schema() || '_monitor'
$$;

-- _owner_role: S_owner as a regrole (built-in retention policies belong to it).
CREATE OR REPLACE FUNCTION _owner_role()
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT (pg_catalog.current_schema() || '_owner')::pg_catalog.regrole $$;

-- Routines that run as their caller; every other function is SECURITY DEFINER.
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY['retention_register', '_retention_resolve', '_retention_step', '_retention_as_owner', '_grant_all',
                 -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
                 'cron_schedule', 'cron_unschedule', 'cron_job', '_cron_available', '_cron_require']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so a p_now overload is excluded by
-- its argument count in _grant_all).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'release',
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_tally', '_maintain_ret_result',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'version']) r
$$;

-- The views each role may read (all run as S_owner, their owner).
CREATE OR REPLACE FUNCTION _view_grants(OUT role_kind text, OUT view_name text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'monitor', v FROM pg_catalog.unnest(ARRAY[
        'queue_stats', 'leases', 'retention_policies', 'retention_passes', 'maintenance_passes',
        'maintenance_runs', 'settings']) v
$$;

-- _grant_all applies the model to everything in the schema. It runs as the
-- migrating role (which must be S_owner's member or a superuser), at the end
-- of every migration; it is idempotent.
CREATE OR REPLACE FUNCTION _grant_all()
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles record := _role_names();
    v_owner text := v_roles.owner_role;
    r record;
    v_role text;
BEGIN
    IF (SELECT ro.rolsuper FROM pg_catalog.pg_roles ro WHERE ro.rolname = v_owner) THEN
        RAISE EXCEPTION 'role % is a superuser: pgsweep''s objects must not be owned by one', v_owner
            USING ERRCODE = 'insufficient_privilege', HINT = pg_catalog.format('ALTER ROLE %I NOSUPERUSER', v_owner);
    END IF;
    EXECUTE pg_catalog.format('ALTER SCHEMA %I OWNER TO %I', v_schema, v_owner);
    EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', v_schema);
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %I, %I, %I', v_schema,
                              v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    EXECUTE pg_catalog.format('GRANT %I TO %I', v_roles.monitor_role, v_roles.admin_role);

    -- Relations: owned by S_owner, nobody else holds a privilege. A sequence
    -- owned by a column follows its table.
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                                   AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('ALTER %s %I.%I OWNER TO %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
            v_schema, r.relname, v_owner);
    END LOOP;
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %I.%I FROM PUBLIC, %I, %I, %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, v_schema, r.relname,
            v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    END LOOP;
    FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, r.view_name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END IF;
    END LOOP;

    -- Routines: owned by S_owner, SECURITY DEFINER unless listed as
    -- invoker, executable by nobody but the roles the matrix names.
    FOR r IN SELECT p.proname, p.prokind, p.pronargs,
                    pg_catalog.format('%I.%I(%s)', v_schema, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)) AS sig,
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone.
        CONTINUE WHEN r.has_now AND r.proname NOT IN ('_queue_stats', '_retention_begin');
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:include functions/lease.sql
-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still), read after the lease row is locked. The overloads
-- taking p_now let tests pin the clock; NULL there means the database clock,
-- and the contract's forms pass NULL. p_now must be within 10 years of the
-- database clock (_check_now, validate.sql).
--
-- Token rules: a new tenure (first acquire, takeover after expiry, acquire
-- after release, or re-acquire by a holder whose lease lapsed) gets token + 1;
-- a holder re-acquiring a live lease keeps its token. Rows are never deleted,
-- so tokens for a name only ever increase.

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);

    LOOP
        -- Read the clock only once the row is locked: a contender that
        -- waited for the lock must not act on a time from before the wait,
        -- or its tenure could appear to start before the previous one ended.
        SELECT * INTO v_lease FROM lease WHERE name = p_name FOR UPDATE;
        v_now := coalesce(p_now, clock_timestamp());
        IF NOT FOUND THEN
            INSERT INTO lease (name, owner, token, acquired_at, expires_at)
            VALUES (p_name, p_owner, 1, v_now, v_now + p_ttl)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                RETURN 1;
            END IF;
            CONTINUE; -- a concurrent first acquire won the insert: lock its row
        END IF;

        IF v_lease.owner = p_owner AND v_lease.expires_at > v_now THEN
            UPDATE lease SET expires_at = v_now + p_ttl WHERE name = p_name;
            RETURN v_lease.token;
        END IF;
        IF v_lease.owner IS NULL OR v_lease.expires_at <= v_now THEN
            UPDATE lease
               SET owner = p_owner, token = v_lease.token + 1, acquired_at = v_now, expires_at = v_now + p_ttl
             WHERE name = p_name;
            RETURN v_lease.token + 1;
        END IF;
        RETURN NULL;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire(p_name, p_owner, p_ttl, NULL) $$;

-- A renew succeeds only while the caller's lease is live: a lapsed holder must
-- acquire again (and may get a new token), so it learns that it lapsed.
CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);

    SELECT * INTO v_lease FROM lease WHERE name = p_name AND owner = p_owner FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT FOUND OR v_lease.expires_at <= v_now THEN
        RETURN false;
    END IF;
    UPDATE lease SET expires_at = v_now + p_ttl WHERE name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_renew(p_name, p_owner, p_ttl, NULL) $$;

-- Release ends the tenure at once so that another owner need not wait for the
-- TTL. The row (and its token) stays so the next tenure's token is higher.
CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_now('p_now', p_now);

    SELECT * INTO v_lease FROM lease WHERE name = p_name AND owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    UPDATE lease SET owner = NULL, expires_at = least(expires_at, v_now) WHERE name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_release(p_name, p_owner, NULL) $$;

CREATE OR REPLACE FUNCTION lease_release_owner(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    RETURN QUERY
    UPDATE lease
       SET owner = NULL,
           expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
    RETURNING name;
END
$$;

CREATE OR REPLACE VIEW leases AS
SELECT name,
       owner,
       token,
       acquired_at,
       expires_at,
       (owner IS NOT NULL AND expires_at > clock_timestamp()) AS live
  FROM lease;
-- pgsweep:end functions/lease.sql

-- pgsweep:include functions/queue.sql
-- Queues: creation, settings, and the lookup every message function starts with.

-- _queue_get returns the queue row or raises 22023 naming p_queue. Every
-- message function calls it first: an unknown queue is the caller's error and
-- nothing may change.
CREATE OR REPLACE FUNCTION _queue_get(p_queue text)
RETURNS queue
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    SELECT * INTO v_q FROM queue WHERE name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_queue must name an existing queue, got unknown queue "%"', p_queue
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_q;
END
$$;

-- queue_create is idempotent so that every application instance can call it
-- at start-up. A second call with another max_attempts updates it (the code's
-- latest word wins); changing the kind of an existing queue is refused,
-- because outbox and inbox rows are completed differently.
--
-- A queue name has at most 172 characters: the queue's built-in retention
-- policy is named 'pgsweep.processed:<queue>' (retention_builtin.sql), and
-- policy names have at most 190 (their lease is 'retention:<name>', and
-- lease names at most 200). Every name queue_create accepts works
-- everywhere; lookups (_queue_get) still accept up to 200 characters, so a
-- longer queue made by an older version keeps working (without built-in
-- retention, see retention_builtin_sync).
CREATE OR REPLACE FUNCTION queue_create(p_queue text, p_kind text DEFAULT 'outbox', p_max_attempts int DEFAULT 10)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR length(p_queue) > 172 THEN
        RAISE EXCEPTION 'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got %',
            CASE WHEN p_queue IS NULL THEN 'NULL'
                 WHEN p_queue = '' THEN 'an empty string'
                 ELSE length(p_queue) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('outbox', 'inbox') THEN
        RAISE EXCEPTION 'p_kind must be outbox or inbox, got %', coalesce(p_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_int('p_max_attempts', p_max_attempts, 1, 1000);

    INSERT INTO queue (name, kind, max_attempts) VALUES (p_queue, p_kind, p_max_attempts)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        -- The claim cursor, at the head: otherwise the queue's first claims
        -- would race to insert it and wait for each other once.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, '-infinity', -9223372036854775808, '-infinity')
        ON CONFLICT (queue) DO NOTHING;
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now
     WHERE name = p_queue AND max_attempts <> p_max_attempts;
END
$$;

-- queue_configure changes a queue's settings. p_settings is a JSON object
-- whose keys are the settings to change (others stay):
--   max_attempts        1..1000
--   backoff_base        '0 seconds'..'1 day'
--   backoff_max         backoff_base..'7 days'
--   backoff_jitter      0..1: each fail call draws its delays from
--                       [delay * (1 - jitter), delay]; 0 = exact
--   lease_default       '1 second'..'1 hour'
--   claim_rescan        '0 seconds'..'1 minute': how long claims may trust the
--                       claim cursor (see claim.sql); 0 = exact oldest-first order
--   processed_retention '1 second'..'100 years', or null = keep forever
--   dead_retention      '1 second'..'100 years', or null = keep forever
-- JSON rather than one parameter per setting because NULL must be a value
-- here (keep forever), not "unchanged". Returns the queue row as it is now.
CREATE OR REPLACE FUNCTION queue_configure(p_queue text, p_settings jsonb)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_key text;
    v_setting text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    v_q := _queue_get(p_queue);
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan)', v_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- v_setting names the setting being read, for the error of a value that
    -- does not convert to its type ("soon", 1.5, true, [30]): the message
    -- names the setting and its range like the range checks do, the cast's
    -- own error is the detail. Arrays and objects are refused before any
    -- cast: the interval parser would read '[30]' as 30 seconds.
    BEGIN
        FOR v_setting IN SELECT e.key FROM jsonb_each(p_settings) e WHERE jsonb_typeof(e.value) IN ('array', 'object') LOOP
            RAISE EXCEPTION 'a JSON % is not a value of %', jsonb_typeof(p_settings->v_setting), v_setting
                USING ERRCODE = 'invalid_text_representation';
        END LOOP;
        IF p_settings ? 'max_attempts' THEN
            v_setting := 'max_attempts';
            v_q.max_attempts := (p_settings->>'max_attempts')::int;
            PERFORM _check_int('max_attempts', v_q.max_attempts, 1, 1000);
        END IF;
        IF p_settings ? 'backoff_base' THEN
            v_setting := 'backoff_base';
            v_q.backoff_base := (p_settings->>'backoff_base')::interval;
            PERFORM _check_interval('backoff_base', v_q.backoff_base, interval '0 seconds', interval '1 day');
        END IF;
        IF p_settings ? 'backoff_max' THEN
            v_setting := 'backoff_max';
            v_q.backoff_max := (p_settings->>'backoff_max')::interval;
        END IF;
        PERFORM _check_interval('backoff_max', v_q.backoff_max, v_q.backoff_base, interval '7 days');
        IF p_settings ? 'backoff_jitter' THEN
            v_setting := 'backoff_jitter';
            v_q.backoff_jitter := (p_settings->>'backoff_jitter')::double precision;
            IF v_q.backoff_jitter IS NULL OR NOT v_q.backoff_jitter BETWEEN 0 AND 1 THEN
                RAISE EXCEPTION 'backoff_jitter must be a number between 0 and 1, got %', coalesce(p_settings->>'backoff_jitter', 'null')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        IF p_settings ? 'lease_default' THEN
            v_setting := 'lease_default';
            v_q.lease_default := (p_settings->>'lease_default')::interval;
            PERFORM _check_interval('lease_default', v_q.lease_default, interval '1 second', interval '1 hour');
        END IF;
        IF p_settings ? 'claim_rescan' THEN
            v_setting := 'claim_rescan';
            v_q.claim_rescan := (p_settings->>'claim_rescan')::interval;
            PERFORM _check_interval('claim_rescan', v_q.claim_rescan, interval '0 seconds', interval '1 minute');
        END IF;
        IF p_settings ? 'processed_retention' THEN
            v_setting := 'processed_retention';
            v_q.processed_retention := (p_settings->>'processed_retention')::interval;
            IF v_q.processed_retention IS NOT NULL THEN
                PERFORM _check_interval('processed_retention', v_q.processed_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
        IF p_settings ? 'dead_retention' THEN
            v_setting := 'dead_retention';
            v_q.dead_retention := (p_settings->>'dead_retention')::interval;
            IF v_q.dead_retention IS NOT NULL THEN
                PERFORM _check_interval('dead_retention', v_q.dead_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
    EXCEPTION
        WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
             OR numeric_value_out_of_range OR interval_field_overflow THEN
            RAISE EXCEPTION '% must be %, got %', v_setting,
                CASE v_setting
                    WHEN 'max_attempts' THEN 'an integer between 1 and 1000'
                    WHEN 'backoff_base' THEN 'an interval between 0 seconds and 1 day'
                    WHEN 'backoff_max' THEN 'an interval between backoff_base and 7 days'
                    WHEN 'backoff_jitter' THEN 'a number between 0 and 1'
                    WHEN 'lease_default' THEN 'an interval between 1 second and 1 hour'
                    WHEN 'claim_rescan' THEN 'an interval between 0 seconds and 1 minute'
                    ELSE 'an interval between 1 second and 100 years, or null (keep forever)' END,
                p_settings->v_setting
                USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;

    UPDATE queue
       SET max_attempts = v_q.max_attempts,
           backoff_base = v_q.backoff_base,
           backoff_max = v_q.backoff_max,
           backoff_jitter = v_q.backoff_jitter,
           lease_default = v_q.lease_default,
           claim_rescan = v_q.claim_rescan,
           processed_retention = v_q.processed_retention,
           dead_retention = v_q.dead_retention,
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    RETURN v_q;
END
$$;

-- _notify_channel is the LISTEN/NOTIFY channel of this schema's queues:
-- '<schema>_messages', the schema cut to 54 bytes so the channel stays within
-- PostgreSQL's 63-byte limit. The payload of each notification is the queue name.
CREATE OR REPLACE FUNCTION notify_channel()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT left(current_schema(), 54) || '_messages' $$;
-- pgsweep:end functions/queue.sql

-- pgsweep:include functions/send.sql
-- Sending: one message or a batch. Sends run inside the caller's transaction
-- (that is the point of an outbox): the rows and the notification appear when
-- it commits, not before.
--
-- p_deliver_at: NULL (now) or a finite time at most 10 years after the
-- database clock (_check_deliver_at, validate.sql); a past time means now.
--
-- Inbox de-duplication. On inbox queues the key is the message's identity: a
-- key that is live (message), processed (message_processed) or dead
-- (message_dead) is refused with NULL, until retention removes the record.
-- Indexes hold it (message_inbox_key, message_processed's (queue, key),
-- message_dead_key), and the order of the steps closes the gap between them:
--  1. a processed or dead row with the key?   → duplicate
--  2. INSERT … ON CONFLICT (live key) DO NOTHING → duplicate when a live row has it.
--     If a complete or fail is moving the live row to message_processed or
--     message_dead right now, the insert waits for that transaction (unique
--     check) and proceeds only after it committed;
--  3. so a processed or dead row with the key is re-checked with a fresh snapshot
--     (READ COMMITTED: each statement sees what committed before it) and, if
--     found, our row is deleted again: the call returns NULL, net change nothing.
-- A concurrent duplicate send waits at step 2 for the first sender's
-- transaction and then sees its row. Proven by TestInboxDedupConcurrent.
--
-- REPEATABLE READ and SERIALIZABLE. There every statement reads the
-- transaction's snapshot, so step 3 sees nothing new: a complete that
-- committed after the snapshot was taken (the live row gone, its processed
-- row invisible) would let the key in twice. There instead:
--  1b. a live row with the key that the snapshot sees → duplicate (NULL),
--      whatever happened to it since (completed, dead-lettered: either way
--      the key is taken);
--  2.  the insert of step 2 raises 40001 (serialization_failure) by itself
--      when the live row that holds the key committed after the snapshot;
--  3b. a probe for the processed row that the snapshot cannot see: our row
--      is inserted into message_processed ON CONFLICT (queue, key) DO
--      NOTHING. A unique check sees every committed row, and PostgreSQL
--      raises 40001 when the conflicting row is invisible to the snapshot
--      (a complete committed after it); a visible one → duplicate (NULL);
--      no conflict → the probe row is deleted at once and the send stands.
--      The probe runs after our live row is in: from then on no other
--      transaction can complete a row with the key, so the probe never
--      waits for one (and never deadlocks with one).
-- The caller retries a 40001 as for any serialization failure; the retry
-- sees the processed row and returns NULL. Proven by inbox_isolation_test.go.
-- Not covered: a message whose key was sent, and dead-lettered, both after
-- the sender's snapshot was taken (message_dead's key index is not unique,
-- so there is nothing to probe); its key can be sent once more.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'p_payload must be a JSON value, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'p_headers must be a JSON object, got %', jsonb_typeof(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_key IS NOT NULL THEN
        PERFORM _check_text('p_key', p_key, 1000);
    END IF;
END
$$;

-- _inbox_key_kept: does a processed message or a dead letter of the queue
-- hold the key? (Live rows are checked by the unique index instead.)
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key)
$$;

-- _send inserts one message into a queue already looked up and checked.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
    v_snapshot boolean; -- REPEATABLE READ or SERIALIZABLE: one snapshot for the transaction
    v_free boolean;
BEGIN
    IF p_q.kind = 'inbox' AND p_key IS NOT NULL THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            RETURN NULL; -- 1b
        END IF;
        INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, p_now, v_parked)
        ON CONFLICT (queue, key) WHERE dedup DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_snapshot THEN
            -- 3b: raises 40001 when a processed row with the key committed after our snapshot.
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now)
            ON CONFLICT (queue, key) DO NOTHING
            RETURNING true INTO v_free;
            IF v_free THEN
                DELETE FROM message_processed p WHERE p.queue = p_q.name AND p.id = v_id;
                RETURN v_id;
            END IF;
            DELETE FROM message WHERE queue = p_q.name AND id = v_id;
            RETURN NULL;
        END IF;
        IF _inbox_key_kept(p_q.name, p_key) THEN
            DELETE FROM message WHERE queue = p_q.name AND id = v_id;
            RETURN NULL;
        END IF;
    ELSE
        INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, p_now, v_parked)
        RETURNING id INTO v_id;
    END IF;
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message (at most 10 years ahead);
-- NULL or past = now.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
BEGIN
    PERFORM _check_message(p_payload, p_headers, p_key);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp());
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys and p_deliver_at are NULL or arrays of
-- the same length as p_payloads; each p_deliver_at[i] as send's p_deliver_at.
-- One notification per batch.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_n int := coalesce(cardinality(p_payloads), 0);
    v_now timestamptz;
    v_ids bigint[];
    v_any boolean := false;
    i int;
BEGIN
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
    IF p_headers IS NOT NULL AND cardinality(p_headers) <> v_n THEN
        RAISE EXCEPTION 'p_headers must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_keys IS NOT NULL AND cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_keys must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_keys)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_deliver_at IS NOT NULL AND cardinality(p_deliver_at) <> v_n THEN
        RAISE EXCEPTION 'p_deliver_at must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_deliver_at)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
        PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
    END LOOP;
    v_now := clock_timestamp();

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send.
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now);
            v_any := v_any OR v_ids[i] IS NOT NULL;
        END LOOP;
    ELSE
        -- Ids are drawn first so that they can be returned in input order
        -- (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until)
        SELECT v_q.name, v_ids[g], p_keys[g], p_payloads[g], coalesce(p_headers[g], '{}'),
               coalesce(p_deliver_at[g], v_now), v_now, CASE WHEN p_deliver_at[g] > v_now THEN p_deliver_at[g] END
          FROM generate_series(1, v_n) g;
        v_any := true;
    END IF;
    IF v_any THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/send.sql

-- pgsweep:include functions/claim.sql
-- claim: lease up to p_batch due messages of one queue to p_owner.
--
-- The token. Every claim call draws a fresh, unguessable token
-- (gen_random_uuid()), stores it in message.token of every row it takes and
-- returns it with each of them: renew, complete, fail and release act only on
-- rows whose current claim carries their p_token (ack.sql). p_owner is only a
-- label -- who holds the row, for people and metrics -- so an owner that takes
-- its own expired lease back gets a new token and its old token acts on
-- nothing. token is in no index: claims stay HOT updates.
--
-- Candidates: rows with visible_at <= now and attempt < max_attempts. visible_at
-- is the delivery/retry time of pending and failed rows and the lease expiry
-- of processing rows, so expired leases are taken by the same scan. A row that
-- used its last attempt (attempt >= max_attempts) is never handed out again:
-- fail dead-letters it, and queue_recover dead-letters one whose lease expired.
--
-- The scan walks message_claim (queue, created_at, id) in order, locks up to
-- n rows FOR UPDATE SKIP LOCKED and stops: rows another claimer has locked
-- are skipped, not waited for, and a row that a concurrent claim updated and
-- committed meanwhile is re-checked against the predicate before it is
-- locked, so two claimers never get the same row. The UPDATE then finds the
-- locked rows by ctid (stable: we hold their locks) instead of descending the
-- primary key once per row, and changes only columns no index holds (status,
-- owner, token, attempt, visible_at), so it is a HOT update.
--
-- Parked rows. A row that is not due for a while -- a scheduled message, a
-- retry waiting for its backoff, a requeued dead letter with a delivery time
-- -- is parked: parked_until holds its due time. It is not in message_claim,
-- whose predicate is parked_until IS NULL, but in message_parked (queue,
-- parked_until). Without this, every scan from the head walked all of them
-- (measured: 100,000 messages scheduled for tomorrow made a quiet queue's
-- claims 30 times slower). Each claim first promotes the parked rows that
-- came due (one probe of message_parked when none did). Leases are not
-- parked, and parked_until is a column of its own rather than visible_at:
-- claims set visible_at every time, and an indexed column they change --
-- even one only a partial index holds -- would end their HOT updates. Rows
-- in flight number at most the workers' batches.
--
-- The claim cursor (table claim_cursor, one row per queue) is why a claim
-- does not slow down as a queue drains. Completed rows leave dead entries at
-- the head of message_claim until VACUUM removes them, and rows in flight sit
-- there too; a scan from the start walks all of them, on every claim, so the
-- cost grows with the rows processed since the last vacuum (measured: from 100
-- to 2,000 buffers per claim while 200,000 messages drained). The cursor is
-- the newest (created_at, id) any claim has taken, and the scan starts there.
-- Rows behind it are in flight, waiting for a retry or a schedule, or gone --
-- except those that became due since: expired leases, retries and scheduled
-- rows whose time came, rows of a claim that rolled back, and rows committed
-- late by a long transaction (created_at is the send time, not the commit
-- time). A rescan from the start finds them: the first claim more than the
-- queue's claim_rescan (default 1 second) after the last rescan does one, and
-- so does every claim that cannot fill its batch from the cursor on (it takes
-- the rest from the rows before the cursor). So a due row waits behind the
-- cursor only while claims fill whole batches with newer rows -- the queue has
-- a backlog -- and then at most about claim_rescan: oldest first is exact when
-- a queue keeps up, and within claim_rescan when it does not. A queue that
-- needs the exact order always sets claim_rescan to 0: every claim then scans
-- from the head and pays for the dead index entries there (docs/benchmarks.md).
-- The cursor row is updated only by a claim that gets its lock (SKIP LOCKED):
-- claims never wait for each other; a skipped update only means the next
-- claim starts a little further back.
--
-- The clock is read once into v_now and the token drawn once into v_token
-- (scale-out rule: plain values in UPDATE). p_lease NULL means the queue's
-- lease_default. Rows come back oldest first.
--
-- This overload takes the time from its caller (p_now, NULL = the clock): for
-- tests only. claim(p_queue, p_owner, p_batch, p_lease) below is the verb.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rescan_every interval;
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_cursor_at timestamptz;
    v_cursor_id bigint;
    v_rescanned timestamptz;
    v_rescan boolean;
    v_from_at timestamptz;
    v_from_id bigint;
    v_to_at timestamptz;
    v_to_id bigint;
    v_tids tid[];
    v_ids bigint[];
    v_all tid[] := '{}';
    v_all_ids bigint[] := '{}';
    v_n int := 0;
    v_at timestamptz;
    v_id bigint;
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
BEGIN
    PERFORM _check_now('p_now', p_now);
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, c.created_at, c.id, c.rescanned_at
      INTO v_max, v_lease, v_rescan_every, v_cursor_at, v_cursor_id, v_rescanned
      FROM queue q LEFT JOIN claim_cursor c ON c.queue = q.name
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    -- The cursor is trusted only within claim_rescan after the last rescan, on
    -- the clock the caller uses (tests pin p_now in both directions).
    -- Pass 1 scans from the cursor on; pass 2 scans the rows before it, when
    -- the cursor is not trusted or pass 1 could not fill the batch.
    v_rescan := v_rescanned IS NULL OR v_now < v_rescanned OR v_now >= v_rescanned + v_rescan_every;
    IF v_rescan THEN
        v_cursor_at := '-infinity';
        v_cursor_id := -9223372036854775808;
    END IF;
    v_from_at := v_cursor_at;
    v_from_id := v_cursor_id;
    v_to_at := 'infinity';
    v_to_id := 9223372036854775807;
    -- Parked rows that came due join the claim index, where the scans below
    -- (or the next claims) find them. When none is due this is one probe of
    -- message_parked; rows other claims are promoting are skipped.
    SELECT array_agg(p.ctid), array_agg(p.id) INTO v_tids, v_ids
      FROM (SELECT d.ctid, d.id FROM message d
             WHERE d.queue = p_queue AND d.parked_until <= v_now
             ORDER BY d.parked_until
             LIMIT 4 * p_batch
               FOR UPDATE SKIP LOCKED) p;
    IF v_tids IS NOT NULL THEN
        -- By ctid and id both: whichever the planner takes, it touches only
        -- these rows. With ctid alone and the queue's statistics stale (a
        -- queue that grew since the last ANALYZE looks tiny), it took the
        -- primary key on queue and walked the whole queue.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
    END IF;
    FOR pass IN 1 .. 2 LOOP
        SELECT array_agg(c.ctid), array_agg(c.id),
               (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
               (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
          INTO v_tids, v_ids, v_at, v_id
          FROM (SELECT s.ctid, s.created_at, s.id
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL
                   AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                   AND (s.created_at, s.id) < (v_to_at, v_to_id)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                 ORDER BY s.created_at, s.id
                 LIMIT p_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
            IF v_last_at IS NULL THEN -- pass 1's rows are the newest
                v_last_at := v_at;
                v_last_id := v_id;
            END IF;
        END IF;
        EXIT WHEN v_n = p_batch OR v_rescan;
        v_rescan := true;
        v_from_at := '-infinity';
        v_from_id := -9223372036854775808;
        v_to_at := v_cursor_at;
        v_to_id := v_cursor_id;
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    IF v_rescanned IS NULL THEN
        -- No cursor row: queue_create makes one, so only a deleted row gets here.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, v_last_at, v_last_id, v_now)
        ON CONFLICT (queue) DO NOTHING;
    ELSE
        -- A rescan may move the cursor back (to the stragglers it found);
        -- other claims only move it forward.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR (c.created_at, c.id) < (v_last_at, v_last_id))
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:include functions/ack.sql
-- renew and complete: act only on rows whose current claim carries p_token,
-- return their ids.
--
-- Fencing is by the claim token (claim.sql): every claim call stores a fresh
-- token in the rows it takes, and fail, release and queue_recover end the
-- claim (status no longer 'processing'), so a call with the token of an
-- earlier claim matches nothing and the caller learns exactly which leases it
-- lost -- also when the row was taken again by the same owner, which the
-- owner label could not tell apart. A lease that expired but was not taken
-- over still carries its token: completing it then is the best outcome (no
-- redelivery), and nobody else held it meanwhile.
--
-- The verbs (renew, complete, fail, release without p_now) are SECURITY
-- DEFINER: workers hold no privilege on the tables, so the token is the only
-- way to a row. The p_now overloads are for tests.

CREATE OR REPLACE FUNCTION _check_ids(p_ids bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'p_ids must hold 1 to 10000 ids, got %',
            CASE WHEN p_ids IS NULL THEN 'NULL' ELSE cardinality(p_ids)::text END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_token(p_token uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'p_token must be the token claim returned, got NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- renew extends the leases to p_lease from now (NULL: the queue's lease_default).
CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_until timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    v_q := _queue_get(p_queue);
    v_until := coalesce(p_now, clock_timestamp()) + coalesce(p_lease, v_q.lease_default);
    RETURN QUERY
    UPDATE message m SET visible_at = v_until
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
END
$$;

CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT renew(p_queue, p_token, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- complete: outbox rows are deleted; inbox rows move to message_processed,
-- where they keep de-duplicating their key until retention removes them.
CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    IF p_token IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        PERFORM _check_token(p_token);
        PERFORM _check_ids(p_ids);
    END IF;
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    IF v_kind = 'outbox' THEN
        RETURN QUERY
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.id;
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    RETURN QUERY
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
    )
    INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
    SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
    RETURNING p.id;
END
$$;

CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT complete(p_queue, p_token, p_ids, NULL::timestamptz);
END
$$;

-- release: give messages back unprocessed, as if the claim had not happened:
-- the attempt is taken back, owner and token cleared, and the row is due at
-- once (status 'pending' again, or 'failed' when an earlier attempt had
-- failed). For messages claimed but never started -- a worker shutting down
-- releases what it has not begun -- so a restart or a deploy neither waits
-- for their leases to expire nor spends an attempt on them. A message whose
-- handler ran must be completed or failed instead: releasing it would hide
-- that attempt.
CREATE OR REPLACE FUNCTION release(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _queue_get(p_queue);
    v_now := clock_timestamp();
    RETURN QUERY
    UPDATE message m
       SET status = CASE WHEN m.attempt > 1 THEN 'failed' ELSE 'pending' END,
           owner = NULL, token = NULL, attempt = m.attempt - 1, visible_at = v_now
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;
-- pgsweep:end functions/ack.sql

-- pgsweep:include functions/fail.sql
-- fail: the handler failed. Rows that used their last attempt move to
-- message_dead (payload, headers, attempts, last error and timestamps kept);
-- the others wait for a retry: status 'failed', owner and token cleared, visible again
-- after p_retry_after (NULL = backoff, else 0 seconds to 30 days) or the
-- queue's exponential backoff:
--     delay(attempt n) = least(backoff_max, backoff_base * 2^(n-1))
-- shortened by the queue's backoff_jitter: each call draws one factor r in
-- [1 - backoff_jitter, 1] and waits delay * r, so that messages failed at
-- the same moment (an outage) by many workers do not all come back at once.
-- Acts only on rows whose current claim carries p_token (see ack.sql on
-- fencing).
--
-- The retry times are computed into an array indexed by attempt before the
-- UPDATE (scale-out rule: no timestamptz arithmetic applied to columns in
-- SET); delays stop growing at backoff_max, so the array has at most ~40
-- entries and attempt is capped to its length.
--
-- fail_details says what it did with each id (dead: moved to message_dead);
-- this overload takes the time from its caller (p_now, NULL = the clock) and
-- is for tests. The verbs below -- fail, and fail_details without p_now for
-- callers that count dead letters (the Go Worker) -- use the clock.
CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval, p_now timestamptz)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_due timestamptz[];
    v_k int := 1;
    v_delay interval;
    v_jitter double precision;
    v_error text := left(p_error, 10000);
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
    v_now := coalesce(p_now, clock_timestamp());

    IF p_retry_after IS NOT NULL THEN
        v_due := ARRAY[v_now + p_retry_after];
    ELSE
        v_jitter := 1 - v_q.backoff_jitter * random();
        LOOP
            v_delay := least(v_q.backoff_max, v_q.backoff_base * power(2, v_k - 1));
            v_due[v_k] := v_now + v_delay * v_jitter;
            EXIT WHEN v_delay >= v_q.backoff_max OR v_k >= v_q.max_attempts OR v_q.backoff_base = interval '0';
            v_k := v_k + 1;
        END LOOP;
    END IF;
    v_k := cardinality(v_due);

    RETURN QUERY
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
           AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
    )
    INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
    SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now FROM d
    RETURNING x.id, true;

    RETURN QUERY
    UPDATE message m
       SET status = 'failed', owner = NULL, token = NULL, visible_at = v_due[least(m.attempt, v_k)], last_error = v_error,
           parked_until = CASE WHEN v_due[least(m.attempt, v_k)] > v_now THEN v_due[least(m.attempt, v_k)] END
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
       AND m.attempt < v_q.max_attempts
    RETURNING m.id, false;
END
$$;

CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval DEFAULT NULL)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz);
END
$$;

CREATE OR REPLACE FUNCTION fail(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_retry_after interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT f.id FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz) f;
END
$$;
-- pgsweep:end functions/fail.sql

-- pgsweep:include functions/dead.sql
-- Dead letters: sending them back to their queue.
--
-- A dead letter is a message that used its last attempt. Once the cause is
-- fixed, an operator sends it back with dead_requeue: the row returns to
-- `message` as pending with its id, key, payload, headers and created_at, a
-- fresh set of attempts, and its last error kept for reference. It is due at
-- p_deliver_at (NULL = now; at most 10 years ahead, as for send). Being
-- older than the claim cursor, it is taken by the next rescan, within about
-- the queue's claim_rescan (see claim.sql).
--
-- Inbox keys: a dead letter holds its key (send refuses duplicates of it), so
-- requeueing is the way to process a dead inbox message again. A dead letter
-- whose key a live or processed row holds meanwhile (possible only for rows
-- that died before pgsweep 0.6 refused such duplicates) is left where it is
-- and not returned: requeueing it would process the message a second time.
--
-- Returns the ids that were requeued. Ids that are not dead letters of the
-- queue (never were, already requeued, removed by retention) are ignored, so
-- a repeated call is harmless.
CREATE OR REPLACE FUNCTION dead_requeue(p_queue text, p_ids bigint[], p_deliver_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_visible timestamptz;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_q := _queue_get(p_queue);
    v_now := clock_timestamp();
    v_visible := coalesce(p_deliver_at, v_now);

    RETURN QUERY
    WITH d AS (
        DELETE FROM message_dead x
         WHERE x.queue = p_queue AND x.id = ANY (p_ids)
           AND NOT (v_q.kind = 'inbox' AND x.key IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM message l WHERE l.queue = p_queue AND l.key = x.key AND l.dedup)
                 OR EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = x.key)))
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at
    )
    INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error, parked_until)
    SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
           v_visible, d.created_at, d.last_error, CASE WHEN v_visible > v_now THEN v_visible END
      FROM d
    RETURNING m.id;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;
-- pgsweep:end functions/dead.sql

-- pgsweep:include functions/recover.sql
-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch, p_now DEFAULT NULL) RETURNS TABLE(recovered int, dead_lettered int)
--
-- p_batch 1..10000; p_now NULL (the clock) or within 10 years of it (tests).
--
-- Looks at up to p_batch rows of the queue whose lease expired (and rows that
-- are due but have no attempt left, e.g. after max_attempts was lowered):
--   * attempt < max_attempts: the lease is lost; the row is released (owner
--     cleared, status 'failed', last_error 'lease expired', visible now), so
--     the old owner's late complete/fail/renew act on nothing. claim would take
--     such a row anyway; recovery makes the loss visible and fences the owner.
--   * attempt >= max_attempts: moved to message_dead. claim never hands these
--     out, so without recovery they would stay in the queue.
--
-- Traversal (as in seed 002): keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_pos bigint;
    v_bound bigint;
    v_ids bigint[];
    v_last bigint;
    v_rec int := 0;
    v_dead int := 0;
BEGIN
    PERFORM _check_int('p_batch', p_batch, 1, 10000);
    PERFORM _check_now('p_now', p_now);
    v_q := _queue_get(p_queue);

    INSERT INTO queue_recovery (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT r.position, r.boundary INTO v_pos, v_bound FROM queue_recovery r WHERE r.queue = p_queue FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_bound IS NULL THEN
        SELECT max(m.id) INTO v_bound FROM message m WHERE m.queue = p_queue;
        v_bound := coalesce(v_bound, 0);
        v_pos := 0;
    END IF;

    SELECT array_agg(s.id ORDER BY s.id), max(s.id) INTO v_ids, v_last
      FROM (SELECT m.id
              FROM message m
             WHERE m.queue = p_queue AND m.id > v_pos AND m.id <= v_bound AND m.visible_at <= v_now
               AND (m.owner IS NOT NULL OR m.attempt >= v_q.max_attempts)
             ORDER BY m.id
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) s;

    IF v_ids IS NULL THEN
        -- empty pass: wrap; the next call captures a new boundary
        UPDATE queue_recovery SET position = 0, boundary = NULL, updated_at = v_now WHERE queue = p_queue;
        RETURN QUERY SELECT 0, 0;
        RETURN;
    END IF;

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now
          FROM d
        RETURNING 1
    )
    SELECT count(*) INTO v_dead FROM x;

    UPDATE message m
       SET status = 'failed', owner = NULL, token = NULL, visible_at = v_now, last_error = 'lease expired'
     WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.owner IS NOT NULL AND m.attempt < v_q.max_attempts;
    GET DIAGNOSTICS v_rec = ROW_COUNT;

    UPDATE queue_recovery SET position = v_last, boundary = v_bound, updated_at = v_now WHERE queue = p_queue;
    RETURN QUERY SELECT v_rec, v_dead;
END
$$;
-- pgsweep:end functions/recover.sql

-- pgsweep:include functions/queue_stats.sql
-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row: pending or failed and visible now; NULL when none
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, _queue_stats, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its three statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION _queue_stats(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now)
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age
  FROM queue q
 CROSS JOIN LATERAL _queue_stats(q.name) s;
-- pgsweep:end functions/queue_stats.sql

-- pgsweep:include functions/retention_check.sql
-- Retention: catalog look-ups shared by registration and by every batch.
--
-- Policies store names; every use resolves them again in the catalog, so a
-- dropped or retyped column is an error at the next batch, never a wrong
-- DELETE. Names reach SQL only through %I / regclass quoting.

-- _retention_column returns a column's type, resolved through domains, as a
-- qualified type name safe to splice into SQL ("pg_catalog"."varchar"), and its
-- type category; NULL when the table has no such (live, user) column.
CREATE OR REPLACE FUNCTION _retention_column(p_table regclass, p_column text, OUT type_sql text, OUT base_type regtype,
    OUT category "char")
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_typ oid;
BEGIN
    SELECT a.atttypid INTO v_typ
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF v_typ IS NULL THEN
        RETURN;
    END IF;
    -- The declared type (a domain keeps its checks) for casts ...
    SELECT format('%I.%I', n.nspname, t.typname) INTO type_sql
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE t.oid = v_typ;
    -- ... and the base type to decide what kind of column it is.
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_typ) = 'd' LOOP
        SELECT t.typbasetype INTO v_typ FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
    END LOOP;
    base_type := v_typ::regtype;
    SELECT t.typcategory INTO category FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
END
$$;

-- _retention_table resolves a policy's table by its stored names.
CREATE OR REPLACE FUNCTION _retention_table(p_schema text, p_table text)
RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
BEGIN
    SELECT c.oid INTO v_rel
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = p_schema AND c.relname = p_table AND c.relkind = 'r';
    IF v_rel IS NULL THEN
        RAISE EXCEPTION 'retention: table %.% no longer exists', quote_ident(p_schema), quote_ident(p_table)
            USING ERRCODE = 'undefined_table';
    END IF;
    RETURN v_rel;
END
$$;

-- _retention_index names a btree index that can drive the keyset walk: its
-- first key column is the time column, or every key column before the time
-- column is one the policy pins to a list of values (status, filter). NULL
-- when there is none: then only a walk over the whole heap can find the rows.
CREATE OR REPLACE FUNCTION _retention_index(p_table regclass, p_time_column text, p_status_column text,
    p_filter_column text)
RETURNS regclass
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT i.indexrelid::regclass
      FROM pg_catalog.pg_index i
      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
      JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
      CROSS JOIN LATERAL (
          SELECT array_agg(a.attname ORDER BY k.ord) AS cols
            FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
            LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE k.ord <= i.indnkeyatts) kc
     WHERE i.indrelid = p_table AND i.indisvalid AND i.indpred IS NULL
       AND p_time_column = ANY (kc.cols)
       AND (SELECT bool_and(coalesce(c = p_status_column, false) OR coalesce(c = p_filter_column, false))
              FROM unnest(kc.cols[1:array_position(kc.cols, p_time_column::name) - 1]) c) IS NOT FALSE
     ORDER BY array_position(kc.cols, p_time_column::name), i.indexrelid
     LIMIT 1
$$;
-- pgsweep:end functions/retention_check.sql

-- pgsweep:include functions/retention_register.sql
-- Retention: registering policies and their options.
--
-- Every argument is checked before anything changes (SQLSTATE 22023 naming the
-- argument). Re-registering a policy with the same definition changes nothing
-- but updated_at, so every replica may register its tables at start-up; a
-- changed definition drops the open sweep (its units were planned for the old
-- definition) and the next run plans a new one.

CREATE OR REPLACE FUNCTION _retention_invalid(p_message text, VARIADIC p_args text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = format(p_message, VARIADIC p_args), ERRCODE = 'invalid_parameter_value';
END
$$;

-- Ownership: a policy belongs to the role that registers it, and every
-- run deletes as that role (retention_sql.sql, _retention_as_owner).
-- retention_register runs as its caller and passes current_user on to
-- _retention_register (SECURITY DEFINER), which accepts an owner only when
-- the session's login role can act as it (pg_has_role(session_user, owner,
-- 'MEMBER'): what SET ROLE itself requires), so calling it directly cannot
-- forge another role's policy. The owner needs SELECT and DELETE on the
-- table (42501 otherwise); pgsweep's own tables cannot be registered (the
-- built-in policies cover them). Registering a name again re-points it,
-- under the new caller's name and rights.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_register(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                p_batch_size, p_mode, p_interval, current_user::regrole, false);
END
$$;

CREATE OR REPLACE FUNCTION _retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval,
    p_owner regrole, p_builtin boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text;
    v_table text;
    v_kind "char";
    v_persistence "char";
    v_time record;
    v_status record;
    v_time_type text;
    v_old retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    IF p_table IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got NULL');
    END IF;
    SELECT n.nspname, c.relname, c.relkind, c.relpersistence INTO v_schema, v_table, v_kind, v_persistence
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_table must be an existing table, got oid %s', p_table::oid::text);
    END IF;
    -- Only plain tables: the TID-range walk needs one heap. A partitioned
    -- table's partitions are registered one by one (or dropped when old).
    IF v_kind <> 'r' OR v_persistence = 't' THEN
        PERFORM _retention_invalid('p_table must be an ordinary, non-temporary table, got %s (relkind %s)',
            p_table::text, v_kind::text);
    END IF;
    IF p_builtin THEN
        IF p_owner <> _owner_role() OR v_schema <> pg_catalog.current_schema() THEN
            RAISE EXCEPTION 'built-in retention policies belong to % and cover pgsweep''s own tables', _owner_role()
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        IF (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_table) = _owner_role() THEN
            PERFORM _retention_invalid('p_table must not be one of pgsweep''s own tables (their built-in policies '
                'cover them: queue_configure processed_retention/dead_retention), got %s', p_table::text);
        END IF;
        IF p_owner IS NULL OR NOT pg_catalog.pg_has_role(session_user, p_owner, 'MEMBER') THEN
            RAISE EXCEPTION 'retention_register: % cannot register a policy as %', session_user, coalesce(p_owner::text, 'NULL')
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF NOT pg_catalog.has_table_privilege(p_owner, p_table, 'SELECT')
           OR NOT pg_catalog.has_table_privilege(p_owner, p_table, 'DELETE') THEN
            RAISE EXCEPTION 'retention_register: role % needs SELECT and DELETE on % to register a policy for it', p_owner, p_table
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Every run deletes as the role that registered the policy.';
        END IF;
    END IF;

    PERFORM _check_text('p_time_column', p_time_column, 63);
    v_time := _retention_column(p_table, p_time_column);
    IF v_time.type_sql IS NULL THEN
        PERFORM _retention_invalid('p_time_column must name a column of %s, got %s', p_table::text, quote_ident(p_time_column));
    END IF;
    v_time_type := CASE v_time.base_type
        WHEN 'timestamptz'::regtype THEN 'timestamptz'
        WHEN 'timestamp'::regtype THEN 'timestamp'
        WHEN 'date'::regtype THEN 'date' END;
    IF v_time_type IS NULL THEN
        PERFORM _retention_invalid('p_time_column must be of type timestamptz, timestamp or date, got %s of type %s',
            quote_ident(p_time_column), v_time.base_type::text);
    END IF;

    -- 0 is allowed: for an expiry column (CAP's ExpiresAt) the cutoff is now.
    -- At most 100 years, so that now() - p_older_than is a valid moment.
    IF p_older_than IS NOT NULL AND (p_older_than < interval '0' OR p_older_than > interval '100 years'
                                     OR NOT pg_catalog.isfinite(p_older_than)) THEN
        PERFORM _retention_invalid('p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got %s',
            _interval_text(p_older_than));
    END IF;

    IF p_status_column IS NOT NULL THEN
        PERFORM _check_text('p_status_column', p_status_column, 63);
        v_status := _retention_column(p_table, p_status_column);
        IF v_status.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_status_column must name a column of %s, got %s', p_table::text,
                quote_ident(p_status_column));
        END IF;
        IF v_status.category <> 'S' THEN
            PERFORM _retention_invalid('p_status_column must be text-like (text, varchar, char), got %s of type %s',
                quote_ident(p_status_column), v_status.base_type::text);
        END IF;
        IF p_statuses IS NULL OR cardinality(p_statuses) = 0 OR array_position(p_statuses, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_statuses must be a non-empty array without NULLs when p_status_column is given, got %s',
                coalesce(p_statuses::text, 'NULL'));
        END IF;
    ELSIF p_statuses IS NOT NULL THEN
        PERFORM _retention_invalid('p_statuses needs p_status_column, got statuses %s and no status column', p_statuses::text);
    END IF;

    PERFORM _check_int('p_batch_size', p_batch_size, 1, 10000);
    IF p_mode IS NULL OR p_mode NOT IN ('exclusive', 'parallel') THEN
        PERFORM _retention_invalid('p_mode must be ''exclusive'' or ''parallel'', got %s', coalesce(quote_literal(p_mode), 'NULL'));
    END IF;
    IF p_interval IS NULL OR p_interval <= interval '0' THEN
        PERFORM _retention_invalid('p_interval must be greater than 0, got %s', _interval_text(p_interval));
    END IF;

    -- Checks done: from here on the call succeeds.
    SELECT * INTO v_old FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF FOUND AND (v_old.table_schema, v_old.table_name, v_old.time_column, v_old.time_type, v_old.older_than,
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode, v_old.owner)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_owner) THEN
        DELETE FROM retention_unit WHERE policy = p_name;
    END IF;
    INSERT INTO retention_policy AS p (name, table_schema, table_name, time_column, time_type, older_than,
                                       status_column, statuses, batch_size, mode, run_interval,
                                       registered_at, updated_at, owner)
    VALUES (p_name, v_schema, v_table, p_time_column, v_time_type, p_older_than,
            p_status_column, p_statuses, p_batch_size, p_mode, p_interval, v_now, v_now, p_owner)
    ON CONFLICT (name) DO UPDATE
       SET table_schema = excluded.table_schema, table_name = excluded.table_name, owner = excluded.owner,
           time_column = excluded.time_column, time_type = excluded.time_type, older_than = excluded.older_than,
           status_column = excluded.status_column, statuses = excluded.statuses,
           batch_size = excluded.batch_size, mode = excluded.mode, run_interval = excluded.run_interval,
           -- a filter names a column of the old table: it cannot carry over to another table
           filter_column = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_column END,
           filter_values = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_values END,
           updated_at = excluded.updated_at;

    IF _retention_index(p_table, p_time_column, p_status_column,
                        (SELECT filter_column FROM retention_policy WHERE name = p_name)) IS NULL THEN
        RAISE NOTICE 'retention policy %: no btree index of % leads with %, so every pass reads the whole table',
            p_name, p_table::text, quote_ident(p_time_column)
            USING HINT = format('CREATE INDEX ON %s (%I)', p_table::text, p_time_column);
    END IF;
END
$$;

-- _retention_resolve resolves a table name on the given search_path (the
-- caller's), or raises 22023 naming p_table.
CREATE OR REPLACE FUNCTION _retention_resolve(p_name text, p_table text, p_search_path text)
RETURNS regclass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
    v_pinned text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    PERFORM _check_text('p_table', p_table, 300);
    BEGIN
        PERFORM pg_catalog.set_config('search_path', coalesce(p_search_path, ''), true);
        v_rel := pg_catalog.to_regclass(p_table);
        PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
        v_rel := NULL;
    END;
    PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    IF v_rel IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got %s', quote_literal(p_table));
    END IF;
    RETURN v_rel;
END
$$;

-- The same, for a table given by name, resolved on the CALLER's
-- search_path like every PostgreSQL command (retention_register('x',
-- 'orders_archive', ...) finds public.orders_archive). This overload pins no
-- search_path so that it can read the caller's; its body is one call with
-- every name schema-qualified, and the lookup itself runs in
-- _retention_resolve, which pins its own path and only resolves the name. A
-- name that resolves to no table is a 22023 naming p_table. A string literal
-- argument resolves to this overload.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
AS $$
    SELECT {{ .schema | default "pgsweep" }}.retention_register(p_name,
        {{ .schema | default "pgsweep" }}._retention_resolve(p_name, p_table, pg_catalog.current_setting('search_path')),
        p_time_column, p_older_than, p_status_column, p_statuses, p_batch_size, p_mode, p_interval)
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    DELETE FROM retention_policy WHERE name = p_name;
    RETURN FOUND;
END
$$;

-- _retention_policy_for_update loads a policy for a setter, or raises 22023.
CREATE OR REPLACE FUNCTION _retention_policy_for_update(p_name text)
RETURNS retention_policy
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    PERFORM _check_text('p_name', p_name);
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    RETURN v_pol;
END
$$;

-- The time zone in which a timestamp-without-time-zone (or date) column is
-- read: CAP writes local times. NULL: the database's TimeZone at run time.
-- A zone whose UTC offset ever exceeds 15 hours ('UTC-99') is refused.
CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    v_at := clock_timestamp();
    UPDATE retention_policy SET time_zone = p_time_zone, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name; -- the open sweep's cutoff was computed in the old zone
END
$$;

-- An extra fixed filter: only rows whose p_column is one of p_values are
-- deleted. pgsweep's built-in policies use it for per-queue periods
-- (queue = 'orders'). p_column NULL removes the filter.
CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy := _retention_policy_for_update(p_name);
    v_rel regclass := _retention_table(v_pol.table_schema, v_pol.table_name);
    v_col record;
    v_at timestamptz;
BEGIN
    IF p_column IS NOT NULL THEN
        PERFORM _check_text('p_column', p_column, 63);
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        IF p_values IS NULL OR cardinality(p_values) = 0 OR array_position(p_values, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_values must be a non-empty array without NULLs, got %s', coalesce(p_values::text, 'NULL'));
        END IF;
        -- Values are cast to the column's type in every batch: fail now, not then.
        BEGIN
            EXECUTE format('SELECT $1::%s[]', v_col.type_sql) USING p_values;
        EXCEPTION WHEN OTHERS THEN
            PERFORM _retention_invalid('p_values must be valid values of %s (type %s), got %s', quote_ident(p_column),
                v_col.base_type::text, p_values::text);
        END;
    ELSIF p_values IS NOT NULL THEN
        PERFORM _retention_invalid('p_values needs p_column, got values %s and no column', p_values::text);
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET filter_column = p_column, filter_values = p_values, updated_at = v_at
     WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name;
END
$$;

-- How a sweep walks the table: 'auto' (the default) picks per sweep, see
-- _retention_plan; 'tid_range' or 'keyset' force one.
CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET strategy = p_strategy, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name;
END
$$;

-- The TTL of an exclusive policy's lease retention:<name>: how long another
-- cleaner waits after a crash. A live cleaner renews it every third of it.
CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    v_at := clock_timestamp();
    UPDATE retention_policy SET lease_ttl = p_ttl, updated_at = v_at WHERE name = p_name;
END
$$;
-- pgsweep:end functions/retention_register.sql

-- pgsweep:include functions/retention_sql.sql
-- Retention: the SQL each batch runs against the policy's table.
--
-- Safety rule: a row is deleted only if it is eligible when it is deleted.
-- Every DELETE carries the policy's full predicate in its own WHERE clause.
-- Under READ COMMITTED, when a DELETE meets a row version that a concurrent
-- transaction updated, PostgreSQL follows the update to the newest version and
-- re-evaluates the whole WHERE clause on it (EvalPlanQual): a row re-queued
-- meanwhile (status or time changed) no longer matches and is skipped. The
-- range condition (ctid range, ctid list) is re-checked too; a new version
-- that moved outside the range is skipped, which is safe, and a still-eligible
-- row skipped that way is deleted by a later sweep. CAP's
-- DELETE ... WHERE "Id" IN (SELECT ... LIMIT n) re-checks only "Id", which is
-- why it deletes re-queued rows. sql/tests/retention_run.sql and the Go tests
-- prove the difference.
--
-- Parameters, the same in every statement: $1, $2 the range (TIDs, or the
-- keyset lower bound), $3 the cutoff, $4 the statuses, $5 the filter values.
-- Values travel as parameters, never as SQL text; names through %I.
--
-- Time: the cutoff is carried as timestamptz. For a timestamp column it holds
-- the local cutoff (now - older_than, in the policy's time zone) encoded as if
-- it were UTC, and the SQL decodes it with AT TIME ZONE 'UTC' applied to the
-- parameter (immutable, so the index on the column still serves); a date
-- column compares with the local cutoff's date, so a day is deleted only when
-- all of it is older than the cutoff.

-- _retention_cutoff computes a policy's cutoff for a clock reading.
CREATE OR REPLACE FUNCTION _retention_cutoff(p_pol retention_policy, p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_pol.time_type = 'timestamptz' THEN
        RETURN p_now - p_pol.older_than;
    END IF;
    RETURN ((p_now - p_pol.older_than) AT TIME ZONE coalesce(p_pol.time_zone, current_setting('TimeZone')))
           AT TIME ZONE 'UTC';
END
$$;

-- _retention_param decodes an encoded time parameter into the column's type.
CREATE OR REPLACE FUNCTION _retention_param(p_pol retention_policy, p_param text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_param
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_param)
        ELSE format('(%s AT TIME ZONE ''UTC'')::date', p_param) END
$$;

-- _retention_encode encodes a column value (an SQL expression) like the cutoff.
CREATE OR REPLACE FUNCTION _retention_encode(p_pol retention_policy, p_expr text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_expr
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_expr)
        ELSE format('(%s::timestamp AT TIME ZONE ''UTC'')', p_expr) END
$$;

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, '$3'));
    v_col record;
BEGIN
    IF p_pol.status_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.status_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.status_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($4::%s[])', p_pol.status_column, v_col.type_sql);
    END IF;
    IF p_pol.filter_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.filter_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.filter_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($5::%s[])', p_pol.filter_column, v_col.type_sql);
    END IF;
    RETURN v_sql;
END
$$;

-- _retention_sweep_sql builds a sweep's DELETE (see retention_sweep).
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_tbl text := format('%I.%I', p_pol.table_schema, p_pol.table_name);
    v_pred text := _retention_predicate(p_pol, v_rel);
BEGIN
    IF p_strategy = 'tid_range' THEN
        RETURN format('DELETE FROM %s WHERE ctid >= $1 AND ctid < $2 AND %s', v_tbl, v_pred);
    END IF;
    RETURN format('DELETE FROM %s WHERE %I >= %s AND %I < %s AND %s', v_tbl, p_pol.time_column,
                  _retention_param(p_pol, '$1'), p_pol.time_column, _retention_param(p_pol, '$2'), v_pred);
END
$$;

-- _retention_sample_sql builds the planning sample (see retention_plan.sql):
-- the eligible fraction, the sample size and the eligible rows' encoded
-- times in order, over about p_pct percent of the table's blocks.
CREATE OR REPLACE FUNCTION _retention_sample_sql(p_pol retention_policy, p_pct double precision)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
BEGIN
    RETURN format('SELECT count(*) FILTER (WHERE %1$s)::float8 / nullif(count(*), 0), count(*), '
                  'array_agg(%2$s ORDER BY %3$I) FILTER (WHERE %1$s) FROM %4$I.%5$I TABLESAMPLE SYSTEM (%6$s)',
                  _retention_predicate(p_pol, v_rel), _retention_encode(p_pol, quote_ident(p_pol.time_column)),
                  p_pol.time_column, p_pol.table_schema, p_pol.table_name, p_pct);
END
$$;

-- Running a policy's statements as its owner.
--
-- A policy belongs to the role that registered it, and every statement a
-- run makes on the policy's table (the planning sample, each batch's
-- DELETE) runs as that role: the table's privileges, row-level security and
-- triggers apply to the owner, never to whoever runs maintenance (pg_cron's
-- superuser included). A plain SET ROLE is not enough: a trigger of the
-- owner's could RESET ROLE back to a superuser session user. So the
-- statement runs inside a SECURITY DEFINER function owned by the policy's
-- owner, where PostgreSQL forbids SET ROLE and SET SESSION AUTHORIZATION:
-- _retention_as_owner creates it in this session's pg_temp (built now from
-- validated policy fields; no stored SQL), hands it to the owner, calls it
-- once and drops it, all in the caller's transaction, so no other session
-- ever sees it and it is never called twice. Creating and dropping costs
-- about 0.2 ms a batch. The caller (maintain's or retention_run's session
-- role) must be able to act as the owner (be a member of it, or a
-- superuser); otherwise the run of that policy fails with 42501 and says
-- which GRANT is missing, and other policies still run.
--
-- Built-in policies (owner <schema>_owner, pgsweep's own tables) run in
-- _retention_builtin_exec instead, a SECURITY DEFINER function of
-- <schema>_owner that builds the statement from the policy itself.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        WHEN 'delete' THEN pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L USING $1, $2, $3, $4, $5; GET DIAGNOSTICS n = ROW_COUNT; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', p_sql)
        ELSE pg_catalog.format(
            'BEGIN RETURN QUERY EXECUTE %L USING $1, $2, $3, $4, $5; END',
            'SELECT NULL::bigint, s.* FROM (' || p_sql || ') s') END
$$;

-- _retention_exec_settings: the planner settings a statement kind runs with
-- (see retention_plan.sql: a tid_range DELETE is pinned to its Tid Range
-- Scan; JIT off everywhere, batches are too short to gain from it).
CREATE OR REPLACE FUNCTION _retention_exec_settings(p_strategy text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_strategy
        WHEN 'tid_range' THEN ' SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off SET jit = off'
        ELSE ' SET jit = off' END
$$;

-- _retention_as_owner runs one statement of a policy as its owner and
-- returns the DELETE's row count or the sample's three values. It runs as
-- its caller (SECURITY INVOKER): the caller must be able to act as the owner.
CREATE OR REPLACE FUNCTION _retention_as_owner(p_pol retention_policy, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text;
    v_type text := pg_catalog.format_type(pg_catalog.pg_typeof(p_lo), NULL);
    v_sig text;
BEGIN
    IF p_pol.owner = _owner_role() THEN
        SELECT * INTO deleted, fraction, sampled, times
          FROM _retention_builtin_exec(p_pol.name, p_kind, p_strategy, p_lo, p_hi, p_cutoff);
        RETURN;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, p_pol.owner, 'MEMBER') THEN
        RAISE EXCEPTION 'retention policy %: % cannot act as the policy''s owner %', p_pol.name, current_user, p_pol.owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Run maintenance as a role that can act as %s: GRANT %I TO %I.',
                                           p_pol.owner, p_pol.owner::text, current_user);
    END IF;
    IF p_kind = 'delete' THEN
        v_sql := (_retention_sweep_sql(p_pol, p_strategy));
    ELSE
        v_sql := _retention_sample_sql(p_pol, p_lo::text::double precision);
    END IF;
    v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v_type, v_type);
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
        'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L',
        v_sig, _retention_exec_settings(CASE WHEN p_kind = 'delete' THEN p_strategy END), _retention_exec_body(v_sql, p_kind));
    EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, p_pol.owner::text);
    EXECUTE pg_catalog.format('SELECT * FROM %s', pg_catalog.replace(v_sig,
            pg_catalog.format('(%s, %s, timestamptz, text[], text[])', v_type, v_type), '($1, $2, $3, $4, $5)'))
       INTO deleted, fraction, sampled, times
      USING p_lo, p_hi, p_cutoff, p_pol.statuses, p_pol.filter_values;
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_sig);
END
$$;

-- _retention_builtin_exec runs one statement of a built-in policy (owned by
-- <schema>_owner, on pgsweep's own tables) as <schema>_owner. It takes no
-- SQL: it builds the statement from the policy, and refuses any other policy.
CREATE OR REPLACE FUNCTION _retention_builtin_exec(p_name text, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND OR v_pol.owner <> _owner_role() OR v_pol.table_schema <> pg_catalog.current_schema()
       OR v_pol.table_name NOT IN ('message_processed', 'message_dead') THEN
        RAISE EXCEPTION 'retention policy %: not a built-in policy', p_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_kind = 'delete' THEN
        EXECUTE _retention_sweep_sql(v_pol, p_strategy) USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
        GET DIAGNOSTICS deleted = ROW_COUNT;
    ELSE
        EXECUTE _retention_sample_sql(v_pol, p_lo::text::double precision) INTO fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
    END IF;
END
$$;
-- pgsweep:end functions/retention_sql.sql

-- pgsweep:include functions/retention_plan.sql
-- Retention: planning a sweep.
--
-- A sweep fixes the cutoff and the strategy and cuts the work into units:
--
-- tid_range: consecutive heap block ranges, each sized so that it holds about
--   one batch of rows. Each unit is one DELETE with the full predicate over a
--   Tid Range Scan (PostgreSQL 14+): it reads only its own blocks, so draining
--   a backlog never re-walks what earlier batches deleted, and no row is
--   locked before it is deleted (locking first writes every row twice:
--   measured 0.45x of one DELETE, against 0.85x-1.0x for this walk). Parallel
--   cleaners take different units, so they touch disjoint rows. The last unit
--   is open-ended: blocks the table grows by during the sweep belong to it.
-- keyset: windows of the time column, each expected to hold about one batch
--   of eligible rows (cut at the quantiles of the eligible rows' times in a
--   sample of the table). Each unit is one DELETE with the full predicate and
--   time >= lo AND time < hi: the planner drives it from an index that leads
--   with the time column (Bitmap Index Scan for a sparse window), so a sparse
--   backlog (measured: 1% eligible) reads only the index range of old rows
--   and the heap blocks that hold eligible rows, where a heap walk would read
--   the whole table. Windows are disjoint, so parallel cleaners split them.
--   A first version walked the index in time order (ORDER BY time LIMIT
--   batch, then delete by TID); in PostgreSQL 15 such an ordered scan cannot
--   use the status list as an index condition and fetched the heap row of
--   every old row of any status: 0.75x of one DELETE at 1% eligible.
--
-- 'auto' takes keyset when such an index exists and at most
-- retention_keyset_fraction() (5%) of the table is eligible, else tid_range.
-- The fraction is measured on a sample of about 400 random blocks
-- (TABLESAMPLE SYSTEM: a millisecond or two on 1M rows), not taken from the
-- planner, whose estimate was 8.6x too high for a 1% backlog (it multiplies
-- the time and status selectivities as if they were independent), and not
-- counted through the index, which reads the same index range as the keyset
-- walk itself and so doubled the cost of a sparse pass (measured: 25-180 ms).
-- The threshold is measured (docs/benchmarks.md): at 10% eligible the TID
-- walk ran 0.70x of one DELETE and the keyset walk 0.40x; at 1% the keyset
-- walk ran 1.0x (2.1x with a cold cache) and the TID walk 0.55x.

CREATE OR REPLACE FUNCTION retention_keyset_fraction()
RETURNS double precision
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 0.05::double precision $$;

-- _retention_sample_pct: the share of the table's blocks the planning
-- sample reads (about 400 blocks), NULL for an empty table.
CREATE OR REPLACE FUNCTION _retention_sample_pct(p_pol retention_policy)
RETURNS double precision
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocks bigint := pg_catalog.pg_relation_size(_retention_table(p_pol.table_schema, p_pol.table_name))
                       / current_setting('block_size')::int;
BEGIN
    IF v_blocks > 0 THEN
        RETURN least(100, 400 * 100.0 / v_blocks);
    END IF;
    RETURN NULL;
END
$$;

-- _retention_plan plans a sweep from the sample the caller took as the
-- policy's owner (p_pct NULL: the table was empty, no sample).
CREATE OR REPLACE FUNCTION _retention_plan(p_pol retention_policy, p_now timestamptz, p_owner text,
    p_pct double precision, p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_strategy text := p_pol.strategy;
    v_block_size int := current_setting('block_size')::int;
    v_pct double precision := p_pct;
    v_fraction double precision := p_fraction;
    v_sampled bigint := p_sampled;
    v_times timestamptz[] := p_times;
    v_bounds timestamptz[];
    v_eligible double precision;
    v_tuples double precision;
    v_pages double precision;
    v_width double precision;
    v_rpb double precision;
    v_blocks bigint;
    v_step bigint;
    v_sweep bigint;
    v_units int;
    v_n int;
    v_at timestamptz;
BEGIN
    SELECT c.reltuples, c.relpages INTO v_tuples, v_pages FROM pg_catalog.pg_class c WHERE c.oid = v_rel;
    v_blocks := pg_catalog.pg_relation_size(v_rel) / v_block_size;
    -- The sample (taken by the caller, as the policy's owner, over
    -- p_pct percent of the blocks; _retention_sample_sql): the eligible
    -- fraction, and the eligible rows' times in order (the keyset walk cuts
    -- its windows at their quantiles).
    IF v_strategy = 'auto' THEN
        -- No index, or a sample of empty blocks: walk the heap.
        v_strategy := CASE
            WHEN v_fraction <= retention_keyset_fraction()
                 AND _retention_index(v_rel, p_pol.time_column, p_pol.status_column, p_pol.filter_column) IS NOT NULL
            THEN 'keyset' ELSE 'tid_range' END;
    END IF;

    IF v_strategy = 'tid_range' THEN
        -- Rows per block: the larger of the statistics' average (which a mostly
        -- deleted table drags down), what the rows' average width allows, and
        -- the sample's, so that a unit of dense blocks does not hold many batches.
        SELECT (v_block_size - 24) / (sum(s.avg_width) + 28) INTO v_width
          FROM pg_catalog.pg_stats s WHERE s.schemaname = p_pol.table_schema AND s.tablename = p_pol.table_name;
        v_rpb := greatest(CASE WHEN v_tuples > 0 AND v_pages > 0 THEN v_tuples / v_pages END, v_width,
                          v_sampled / (v_pct / 100 * v_blocks), 1);
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
    ELSE
        -- Windows of the time column, each expected to hold one batch of
        -- eligible rows, cut at the quantiles of the sampled eligible times.
        -- The first starts at -infinity and the last ends at +infinity, so
        -- together they cover every row whatever the sample missed.
        v_eligible := coalesce(v_fraction * v_sampled * 100 / v_pct, 0);
        v_n := least(greatest(ceil(v_eligible / p_pol.batch_size), 1), coalesce(cardinality(v_times), 1), 100000)::int;
        SELECT coalesce(array_agg(DISTINCT v_times[ceil(i * cardinality(v_times)::float8 / v_n)::int]), '{}')
          INTO v_bounds
          FROM generate_series(1, v_n - 1) i;
        v_bounds := '{-infinity}'::timestamptz[] || v_bounds || '{infinity}'::timestamptz[];
    END IF;

    v_at := clock_timestamp();
    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units, blocks, step_blocks,
                                 eligible_fraction)
    VALUES (p_pol.name, v_strategy, v_cutoff, v_at, p_owner, 0, v_blocks, v_step, v_fraction)
    RETURNING id INTO v_sweep;

    IF v_strategy = 'tid_range' THEN
        INSERT INTO retention_unit (policy, sweep_id, unit_no, block_lo, block_hi)
        SELECT p_pol.name, v_sweep, g.n, g.lo, CASE WHEN g.lo + v_step < v_blocks THEN g.lo + v_step END
          FROM generate_series(0, greatest(v_blocks - 1, 0), v_step) WITH ORDINALITY g(lo, n);
    ELSE
        INSERT INTO retention_unit (policy, sweep_id, unit_no, time_lo, time_hi)
        SELECT p_pol.name, v_sweep, i, v_bounds[i], v_bounds[i + 1]
          FROM generate_series(1, cardinality(v_bounds) - 1) i;
    END IF;
    GET DIAGNOSTICS v_units = ROW_COUNT;
    UPDATE retention_sweep SET units = v_units WHERE id = v_sweep;

    -- Keep the sweep history bounded: finished sweeps beyond the last 20 go.
    DELETE FROM retention_sweep s
     WHERE s.policy = p_pol.name
       AND s.id < (SELECT s2.id FROM retention_sweep s2 WHERE s2.policy = p_pol.name ORDER BY s2.id DESC OFFSET 20 LIMIT 1)
       AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = s.policy AND u.sweep_id = s.id);
    RETURN v_sweep;
END
$$;
-- pgsweep:end functions/retention_plan.sql

-- pgsweep:include functions/retention_step.sql
-- Retention: the steps of a pass. retention_run (a procedure, so that it can
-- commit) calls them and commits after each; all logic lives here, in
-- functions that pin search_path (a procedure that commits cannot).
--
-- Exclusive mode takes two locks for the whole pass, in this order:
--   1. pg_try_advisory_lock on the policy (session level, held across the
--      pass's commits): while a cleaner is connected and in its pass, no other
--      session can start one, even if the lease expired because the cleaner
--      stalled. Failing it returns at once: no waiting, no retry loop.
--   2. the lease retention:<name> (lease.sql), the truth that survives the
--      session: a crashed cleaner's lease blocks others until its TTL ends, and
--      every batch first checks that this pass still holds it (renewing it
--      every third of the TTL), so a pass that lost it stops before deleting.
-- The advisory lock is released only after the commit that released the
-- lease and recorded the end of the pass, so pass records never overlap.

CREATE OR REPLACE FUNCTION _retention_lock_key(p_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT pg_catalog.hashtextextended(current_schema() || ' retention:' || p_name, 0) $$;

-- _retention_unlock releases every hold this session has on the policy's
-- advisory lock: after a pass, and before the next one, in case an aborted
-- call (a cancel between steps) left one behind on a pooled connection.
CREATE OR REPLACE FUNCTION _retention_unlock(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint := _retention_lock_key(p_name);
    v_held int;
BEGIN
    SELECT count(*) INTO v_held
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
       AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid;
    -- pg_locks shows a lock once however often it was taken; unlock until it is gone.
    WHILE v_held > 0 LOOP
        EXIT WHEN NOT pg_catalog.pg_advisory_unlock(v_key);
        SELECT count(*) INTO v_held
          FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
           AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid;
    END LOOP;
END
$$;

-- _retention_begin starts a pass and returns its id, or NULL when there is
-- nothing to do: the policy keeps rows forever, or (exclusive) another
-- cleaner holds it.
CREATE OR REPLACE FUNCTION _retention_begin(p_name text, p_owner text, p_budget interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
    v_owner text;
    v_token bigint;
    v_id bigint;
    v_start timestamptz;
    v_at timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    IF p_owner IS NOT NULL THEN
        PERFORM _check_text('p_owner', p_owner);
    END IF;
    PERFORM _check_interval('p_budget', p_budget, interval '0', interval '1 day');
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    IF v_pol.older_than IS NULL THEN
        RETURN NULL; -- keep forever
    END IF;
    v_owner := coalesce(p_owner,
        format('pid%s-%s', pg_catalog.pg_backend_pid(), substr(md5(random()::text || clock_timestamp()::text), 1, 8)));

    IF v_pol.mode = 'exclusive' THEN
        PERFORM _retention_unlock(p_name);
        IF NOT pg_catalog.pg_try_advisory_lock(_retention_lock_key(p_name)) THEN
            RAISE NOTICE 'retention policy %: another cleaner is running it; nothing done', p_name;
            RETURN NULL;
        END IF;
        v_token := lease_acquire('retention:' || p_name, v_owner, v_pol.lease_ttl);
        IF v_token IS NULL THEN
            PERFORM pg_catalog.pg_advisory_unlock(_retention_lock_key(p_name));
            RAISE NOTICE 'retention policy %: lease retention:% is held by another cleaner; nothing done', p_name, p_name;
            RETURN NULL;
        END IF;
    END IF;

    SELECT a.backend_start INTO v_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid();
    v_at := clock_timestamp(); -- after both locks: the pass may delete from now on
    INSERT INTO retention_pass (policy, owner, mode, lease_token, pid, backend_start, started_at, deadline,
                                now_override, renewed_at)
    VALUES (p_name, v_owner, v_pol.mode, v_token, pg_catalog.pg_backend_pid(), v_start, v_at,
            v_at + p_budget, p_now, v_at)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- _retention_step_claim does the bookkeeping of one step (as <schema>_owner)
-- and tells _retention_step what to run as the policy's owner: o_action
-- 'plan' (take the planning sample, then _retention_plan_from_sample),
-- 'delete' (the unit o_unit is locked for this transaction), or NULL with
-- o_more false when the pass is over (outcome recorded) and true to be
-- called again.
CREATE OR REPLACE FUNCTION _retention_step_claim(p_pass bigint, OUT o_action text, OUT o_more boolean,
    OUT o_pol retention_policy, OUT o_strategy text, OUT o_unit retention_unit, OUT o_cutoff timestamptz,
    OUT o_now timestamptz, OUT o_pct double precision)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_unit retention_unit;
    v_sweep retention_sweep;
    v_now timestamptz := clock_timestamp();
BEGIN
    o_more := false;
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN; -- the policy was unregistered during the pass
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;

    -- The budget bounds the pass; a pass always gets its first batch.
    IF v_now >= v_pass.deadline AND v_pass.batches > 0 THEN
        UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
        RETURN;
    END IF;

    IF v_pass.mode = 'exclusive' THEN
        IF v_now >= v_pass.renewed_at + v_pol.lease_ttl / 3 THEN
            IF NOT lease_renew('retention:' || v_pol.name, v_pass.owner, v_pol.lease_ttl) THEN
                UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
                RETURN;
            END IF;
            v_now := clock_timestamp();
            UPDATE retention_pass SET renewed_at = v_now WHERE id = p_pass;
        ELSIF NOT EXISTS (SELECT 1 FROM lease l WHERE l.name = 'retention:' || v_pol.name AND l.owner = v_pass.owner
                             AND l.token = v_pass.lease_token AND l.expires_at > v_now) THEN
            UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
            RETURN;
        END IF;
    END IF;

    -- Claim a unit. SKIP LOCKED: a unit another cleaner is on is skipped, never waited for.
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name
     ORDER BY u.sweep_id, u.unit_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- A pass works one sweep: it joins the open one or plans one. Units
        -- left but locked belong to cleaners that will finish them.
        IF v_pass.batches > 0 OR v_pass.planned_sweep IS NOT NULL
           OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass;
            RETURN;
        END IF;
        -- Plan under the policy row's lock, taken without waiting; a cleaner
        -- that finds it taken polls briefly for the units being planned.
        PERFORM 1 FROM retention_policy WHERE name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF v_now >= v_pass.deadline THEN -- the row stayed locked (a register left open?)
                UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
                RETURN;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.005);
            o_more := true;
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            o_more := true; -- planned and committed by another cleaner just now
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_sweep s WHERE s.policy = v_pol.name AND s.planned_at >= v_pass.started_at) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass; -- swept since this pass began
            RETURN;
        END IF;
        o_action := 'plan';
        o_more := true;
        o_pol := v_pol;
        o_now := coalesce(v_pass.now_override, clock_timestamp());
        o_cutoff := _retention_cutoff(v_pol, o_now);
        o_pct := _retention_sample_pct(v_pol);
        RETURN;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    o_action := 'delete';
    o_more := true;
    o_pol := v_pol;
    o_strategy := v_sweep.strategy;
    o_unit := v_unit;
    o_cutoff := v_sweep.cutoff;
END
$$;

-- _retention_step_done records a unit's batch: the unit is done.
CREATE OR REPLACE FUNCTION _retention_step_done(p_pass bigint, p_unit retention_unit, p_strategy text, p_deleted bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    DELETE FROM retention_unit
     WHERE policy = p_unit.policy AND sweep_id = p_unit.sweep_id AND unit_no = p_unit.unit_no;
    v_now := clock_timestamp(); -- after the DELETE: the pass deleted until now
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + p_deleted, batches = batches + 1, units = units + 1,
           last_batch_at = v_now, strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_plan_from_sample plans the pass's sweep from the sample.
CREATE OR REPLACE FUNCTION _retention_plan_from_sample(p_pass bigint, p_now timestamptz, p_pct double precision,
    p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_sweep_id bigint;
BEGIN
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_sweep_id := _retention_plan(v_pol, p_now, v_pass.owner, p_pct, p_fraction, p_sampled, p_times);
    UPDATE retention_pass SET planned_sweep = v_sweep_id WHERE id = p_pass;
END
$$;

-- _retention_step does one step of a pass: at most one batch. It returns
-- false when the pass is over (outcome recorded), true to be called again.
-- It runs as its caller: the bookkeeping runs as <schema>_owner
-- (_retention_step_claim, _retention_step_done), the statements on the
-- policy's table as the policy's owner (_retention_as_owner).
CREATE OR REPLACE FUNCTION _retention_step(p_pass bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_run record;
BEGIN
    v := _retention_step_claim(p_pass);
    IF v.o_action = 'plan' THEN
        IF v.o_pct IS NOT NULL THEN
            v_run := _retention_as_owner(v.o_pol, 'sample', NULL, v.o_pct, NULL::double precision, v.o_cutoff);
        END IF;
        PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
    ELSIF v.o_action = 'delete' THEN
        IF v.o_strategy = 'tid_range' THEN
            v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy,
                pg_catalog.format('(%s,0)', (v.o_unit).block_lo)::tid,
                pg_catalog.format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295))::tid, v.o_cutoff);
        ELSE
            v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy, (v.o_unit).time_lo, (v.o_unit).time_hi, v.o_cutoff);
        END IF;
        PERFORM _retention_step_done(p_pass, v.o_unit, v.o_strategy, v_run.deleted);
    END IF;
    RETURN v.o_more;
END
$$;

-- _retention_finish records the end of a pass and releases its lease. The
-- caller commits, then releases the advisory lock (_retention_unlock).
CREATE OR REPLACE FUNCTION _retention_finish(p_pass bigint, p_outcome text, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_at timestamptz := clock_timestamp();
BEGIN
    UPDATE retention_pass
       SET finished_at = v_at,
           outcome = coalesce(p_outcome, CASE WHEN outcome = 'running' THEN 'drained' ELSE outcome END),
           error = p_error
     WHERE id = p_pass
    RETURNING * INTO v_pass;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_pass.mode = 'exclusive' THEN
        PERFORM lease_release('retention:' || v_pass.policy, v_pass.owner);
    END IF;
    -- A bounded history: the last 1000 passes of each policy.
    DELETE FROM retention_pass p
     WHERE p.policy = v_pass.policy
       AND p.id <= (SELECT p2.id FROM retention_pass p2 WHERE p2.policy = v_pass.policy
                     ORDER BY p2.id DESC OFFSET 1000 LIMIT 1);
END
$$;
-- pgsweep:end functions/retention_step.sql

-- pgsweep:include functions/retention_run.sql
-- Retention: retention_run, the procedure that deletes a policy's expired rows
-- in batches, committing each, until the sweep is drained or the budget spent.
--
--   CALL retention_run('cap.published');
--   CALL retention_run('cap.published', 'replica-1', '10 seconds');
--   CALL retention_run('cap.published', NULL, '10 seconds', NULL, NULL);  -- returns p_pass_id
--
-- Must be called outside a transaction block (it commits). Procedures cannot
-- pin search_path (a SET clause forbids COMMIT inside), so these bodies call
-- only schema-qualified functions that pin theirs and use no operator at
-- all (every comparison, concatenation and arithmetic happens inside those
-- functions): an operator or function that the caller's search_path puts
-- before pg_catalog changes nothing. The schema comes from the migration's
-- template data like everywhere else.
--
-- Errors: a step that fails is recorded on the pass (outcome 'error'), its
-- lease and advisory lock are released, and the error is raised again. A
-- cleaner that is killed records nothing more: its last batch is committed or
-- rolled back whole, its unit stays open for the next cleaner, its lease
-- expires after the policy's TTL and the view shows the pass as abandoned.

-- _retention_finish_error records a failed step (for the procedures).
CREATE OR REPLACE FUNCTION _retention_finish_error(p_pass bigint, p_state text, p_message text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_finish(p_pass, 'error', p_state || ': ' || p_message) $$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text, p_budget interval, p_now timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_failed boolean := false;
    v_state text;
    v_msg text;
    v_detail text;
    v_hint text;
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_now);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF p_pass_id IS NULL THEN
        RETURN; -- busy, or the policy keeps rows forever
    END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}._retention_step(p_pass_id);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}._retention_finish_error(p_pass_id, v_state, v_msg);
            COMMIT;
            PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''),
                HINT = coalesce(v_hint, '');
        END IF;
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}._retention_finish(p_pass_id, NULL, NULL);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    CALL {{ .schema | default "pgsweep" }}.retention_run(p_name, p_owner, p_budget, NULL, v_pass);
END
$$;
-- pgsweep:end functions/retention_run.sql

-- pgsweep:include functions/retention_views.sql
-- Retention: what a DBA looks at, and what maintain() asks.

-- retention_passes: the pass history. A pass still marked running whose
-- session is gone (killed, crashed) shows as abandoned.
CREATE OR REPLACE VIEW retention_passes AS
SELECT p.id,
       p.policy,
       p.owner,
       p.mode,
       p.strategy,
       CASE WHEN p.outcome = 'running' AND NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = p.pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
            THEN 'abandoned' ELSE p.outcome END AS outcome,
       p.started_at,
       p.finished_at,
       p.last_batch_at,
       coalesce(p.finished_at, p.last_batch_at, p.started_at) - p.started_at AS elapsed,
       p.rows_deleted,
       p.batches,
       p.units,
       p.lease_token,
       p.planned_sweep,
       p.error
  FROM retention_pass p;

-- retention_policies: every policy with its last pass.
CREATE OR REPLACE VIEW retention_policies AS
SELECT r.name,
       format('%I.%I', r.table_schema, r.table_name) AS table_name,
       r.time_column,
       r.time_type,
       r.older_than,
       r.status_column,
       r.statuses,
       r.filter_column,
       r.filter_values,
       r.batch_size,
       r.mode,
       r.run_interval,
       coalesce(r.time_zone, current_setting('TimeZone')) AS time_zone,
       r.lease_ttl,
       r.strategy,
       (SELECT count(*) FROM retention_unit u WHERE u.policy = r.name) AS open_units,
       lp.started_at AS last_started_at,
       lp.finished_at AS last_finished_at,
       lp.outcome AS last_outcome,
       lp.owner AS last_owner,
       lp.strategy AS last_strategy,
       lp.rows_deleted AS last_rows_deleted,
       lp.batches AS last_batches,
       lp.elapsed AS last_elapsed,
       lp.error AS last_error
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the policies whose interval has passed since their last
-- pass began (or that never ran), oldest first: what maintain() runs. Policies
-- that keep rows forever are never due.
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz DEFAULT NULL)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN QUERY
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT max(p.started_at) AS at FROM retention_pass p WHERE p.policy = r.name) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now)
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:include functions/maintain_part.sql
-- The parts of a maintain pass. Each part ('recovery', 'retention') runs under
--   * the lease 'maintain:<part>' (the truth: holder, fencing token, expiry by
--     the database clock; TTL from the setting maintain_lease_ttl, renewed
--     after every step), and
--   * a session advisory lock for the part while it runs, so that even a
--     lease that expired during a long step cannot let a second session on
--     this server overlap the run.
-- A part whose lease or lock is busy is skipped at once (no waiting); a part
-- that is not due (its interval since its last run has not passed, and that
-- run left no backlog) is skipped too. The procedure maintain() strings these
-- functions together with a COMMIT after each, so every state change below is
-- visible to other sessions as soon as it is made.

CREATE OR REPLACE FUNCTION _maintain_parts()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['recovery', 'retention'] $$;

-- The advisory lock key of a part: per schema, so installs side by side in
-- one database do not block each other.
CREATE OR REPLACE FUNCTION _maintain_lock_key(p_part text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT hashtextextended('pgsweep maintain ' || current_schema() || ' ' || p_part, 0) $$;

-- _maintain_lock_held: does this session hold the part's advisory lock?
-- (A bigint key shows in pg_locks as classid = high 32 bits, objid = low 32.)
CREATE OR REPLACE FUNCTION _maintain_lock_held(p_part text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
         WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1 AND granted
           AND classid = ((_maintain_lock_key(p_part) >> 32) & 4294967295)::oid
           AND objid = (_maintain_lock_key(p_part) & 4294967295)::oid)
$$;

CREATE OR REPLACE FUNCTION _maintain_interval(p_part text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT setting_interval(CASE p_part WHEN 'recovery' THEN 'recovery_interval' ELSE 'retention_check_interval' END)
$$;

-- A part is due when it never finished a run, when its last run stopped with
-- work left, or when its interval has passed since its last run finished.
CREATE OR REPLACE FUNCTION _maintain_due(p_part text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_state;
BEGIN
    SELECT * INTO v FROM maintain_state WHERE part = p_part;
    RETURN v.backlog OR v.last_finished_at IS NULL OR v.last_finished_at + _maintain_interval(p_part) <= p_now;
END
$$;

-- _maintain_note records what a part did in its pass row (parts->part) and,
-- for a failure, appends '<part>: <error>' to the pass's error.
CREATE OR REPLACE FUNCTION _maintain_note(p_pass bigint, p_part text, p_status text, p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_error text;
BEGIN
    IF p_error IS NOT NULL THEN
        v_error := p_part || ': ' || p_error;
    END IF;
    UPDATE maintain_pass
       SET parts = parts || jsonb_build_object(p_part, p_status),
           error = CASE WHEN v_error IS NULL THEN error
                        WHEN error IS NULL THEN v_error
                        ELSE error || '; ' || v_error END
     WHERE id = p_pass;
END
$$;

-- _maintain_part_begin decides whether this session runs p_part now. o_status:
--   'running'   it does: it holds the lease (o_token) and the advisory lock,
--               and o_run is its maintain_run row;
--   'busy'      another session holds the part's advisory lock or lease;
--   'not due'   the part ran recently and left no backlog;
--   'no budget' the pass's deadline has passed.
-- Runs of this part that were left 'running' by a session that died (or whose
-- pass raised) are marked 'abandoned' here: holding the lease and the lock
-- proves nobody runs them any more.
CREATE OR REPLACE FUNCTION _maintain_part_begin(p_pass bigint, p_part text, p_owner text, p_deadline timestamptz,
    p_now timestamptz DEFAULT NULL, OUT o_status text, OUT o_run bigint, OUT o_token bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_key bigint := _maintain_lock_key(p_part);
BEGIN
    IF NOT p_part = ANY (_maintain_parts()) THEN
        RAISE EXCEPTION 'p_part must be one of %, got %', array_to_string(_maintain_parts(), ', '),
            coalesce(quote_literal(p_part), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_now >= p_deadline THEN
        o_status := 'no budget';
    ELSIF NOT _maintain_due(p_part, v_now) THEN
        o_status := 'not due';
    ELSIF NOT pg_try_advisory_lock(v_key) THEN
        o_status := 'busy';
    ELSE
        o_token := lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), p_now);
        IF o_token IS NULL THEN
            PERFORM pg_advisory_unlock(v_key);
            o_status := 'busy';
        ELSE
            -- Re-check under the lease: another session may have finished a
            -- run between our first look and our acquire.
            PERFORM 1 FROM maintain_state WHERE part = p_part FOR UPDATE;
            v_now := coalesce(p_now, clock_timestamp());
            IF NOT _maintain_due(p_part, v_now) THEN
                PERFORM lease_release('maintain:' || p_part, p_owner, p_now);
                PERFORM pg_advisory_unlock(v_key);
                o_status := 'not due';
            ELSE
                UPDATE maintain_run
                   SET status = 'abandoned',
                       error = coalesce(error, 'the pass ended before this part finished: its session died or the part raised an error (see the caller''s log or cron.job_run_details)')
                 WHERE part = p_part AND status = 'running';
                INSERT INTO maintain_run (pass_id, part, owner, token, status, started_at)
                VALUES (p_pass, p_part, p_owner, o_token, 'running', v_now)
                RETURNING id INTO o_run;
                UPDATE maintain_state SET last_started_at = v_now, last_owner = p_owner WHERE part = p_part;
                o_status := 'running';
            END IF;
        END IF;
    END IF;
    PERFORM _maintain_note(p_pass, p_part, o_status);
END
$$;

-- _maintain_part_step records one step of a running part: its counts (numbers
-- are added to the run's totals, objects merged one level deep, so
-- {"deleted": {"policy": 10}} adds up per policy) or its error, and renews the
-- lease. It returns true when the part should take another step: the step
-- said {"more": true}, the deadline has not passed, and the lease is still ours.
CREATE OR REPLACE FUNCTION _maintain_part_step(p_run bigint, p_result jsonb, p_error text, p_deadline timestamptz,
    p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_counts jsonb;
    v_more boolean := coalesce(jsonb_typeof(p_result -> 'more') = 'boolean' AND (p_result ->> 'more')::boolean, false);
    v_now timestamptz;
BEGIN
    SELECT * INTO v_run FROM maintain_run WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    v_counts := _maintain_add_counts(v_run.counts, coalesce(p_result, '{}') - 'more');
    IF p_error IS NOT NULL THEN
        UPDATE maintain_run SET counts = v_counts, steps = steps + 1, more = v_more, status = 'failed', error = p_error
         WHERE id = p_run;
        RETURN false;
    END IF;
    IF lease_acquire('maintain:' || v_run.part, v_run.owner, setting_interval('maintain_lease_ttl'), p_now) IS NULL THEN
        UPDATE maintain_run
           SET counts = v_counts, steps = steps + 1, more = v_more, status = 'lost',
               error = format('lease maintain:%s was taken over by another owner during the run', v_run.part)
         WHERE id = p_run;
        RETURN false;
    END IF;
    UPDATE maintain_run SET counts = v_counts, steps = steps + 1, more = v_more WHERE id = p_run;
    v_now := coalesce(p_now, clock_timestamp());
    RETURN v_more AND v_now < p_deadline;
END
$$;

-- _maintain_renew extends the caller's lease on a part by maintain_lease_ttl
-- and says whether it still holds it. maintain() renews after every step; a
-- part body that runs long inside one call (retention, one CALL per policy)
-- calls it between units of work and stops when it returns false.
CREATE OR REPLACE FUNCTION _maintain_renew(p_part text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl')) IS NOT NULL $$;

CREATE OR REPLACE FUNCTION _maintain_add_counts(p_total jsonb, p_add jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_out jsonb := coalesce(p_total, '{}');
    v_key text;
    v_val jsonb;
BEGIN
    IF p_add IS NULL OR jsonb_typeof(p_add) <> 'object' THEN
        RETURN v_out;
    END IF;
    FOR v_key, v_val IN SELECT key, value FROM jsonb_each(p_add) LOOP
        IF jsonb_typeof(v_val) = 'number' AND jsonb_typeof(v_out -> v_key) = 'number' THEN
            v_out := v_out || jsonb_build_object(v_key, (v_out ->> v_key)::numeric + v_val::text::numeric);
        ELSIF jsonb_typeof(v_val) = 'object' AND jsonb_typeof(v_out -> v_key) = 'object' THEN
            v_out := v_out || jsonb_build_object(v_key, _maintain_add_counts(v_out -> v_key, v_val));
        ELSE
            v_out := v_out || jsonb_build_object(v_key, v_val);
        END IF;
    END LOOP;
    RETURN v_out;
END
$$;

-- _maintain_part_end closes a run: finished_at, final status ('done' unless a
-- step failed or lost the lease), the part's state for the next due check,
-- and the pass row; then it gives the lease and the advisory lock back.
CREATE OR REPLACE FUNCTION _maintain_part_end(p_run bigint, p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    UPDATE maintain_run
       SET finished_at = v_now,
           status = CASE WHEN status = 'running' THEN 'done' ELSE status END
     WHERE id = p_run
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE maintain_state
       SET last_finished_at = v_now, last_status = v_run.status, backlog = v_run.more AND v_run.status = 'done'
     WHERE part = v_run.part;
    PERFORM _maintain_note(v_run.pass_id, v_run.part, v_run.status, v_run.error);
    PERFORM lease_release('maintain:' || v_run.part, v_run.owner, p_now);
    PERFORM pg_advisory_unlock(_maintain_lock_key(v_run.part));
    RETURN v_run.status;
END
$$;
-- pgsweep:end functions/maintain_part.sql

-- pgsweep:include functions/history.sql
-- The maintenance history: every pass is recorded when it starts (and
-- committed, so a pass that dies stays visible) and completed when it ends.
-- The history bounds itself: each pass deletes passes older than
-- history_retention and beyond history_max_rows.

-- _maintain_pass_begin validates maintain's arguments (22023, before anything
-- is written), derives an owner when none is given, and records the pass.
CREATE OR REPLACE FUNCTION _maintain_pass_begin(p_owner text, p_budget interval, p_now timestamptz DEFAULT NULL,
    OUT o_pass bigint, OUT o_owner text, OUT o_deadline timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_part text;
BEGIN
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    o_owner := coalesce(p_owner, format('maintain:pid%s:%s', pg_backend_pid(), substr(md5(random()::text), 1, 8)));
    PERFORM _check_text('p_owner', o_owner);
    -- A maintain that raised in this session may have left its session-level
    -- part locks behind; no pass of this session is running now (a session
    -- runs one statement at a time), so any such lock is a leftover.
    FOREACH v_part IN ARRAY _maintain_parts() LOOP
        WHILE _maintain_lock_held(v_part) LOOP
            PERFORM pg_advisory_unlock(_maintain_lock_key(v_part));
        END LOOP;
    END LOOP;
    INSERT INTO maintain_pass (owner, started_at, budget) VALUES (o_owner, v_now, p_budget)
    RETURNING id INTO o_pass;
    o_deadline := v_now + p_budget;
END
$$;

-- _maintain_pass_end completes the pass row and trims the history. Trimming
-- is done by one session at a time (others skip it), in a bounded batch, and
-- never touches a pass that may still be running.
CREATE OR REPLACE FUNCTION _maintain_pass_end(p_pass bigint, p_now timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    UPDATE maintain_pass SET finished_at = v_now WHERE id = p_pass;
    PERFORM _maintain_history_trim(v_now);
END
$$;

CREATE OR REPLACE FUNCTION _maintain_history_trim(p_now timestamptz, p_limit int DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_before timestamptz := p_now - setting_interval('history_retention');
    -- A pass can last at most an hour (maintain's budget); one unfinished for
    -- two is dead and may go, an unfinished younger one may still be running.
    v_dead timestamptz := p_now - interval '2 hours';
    v_cut bigint;
    v_deleted bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(_maintain_lock_key('history')) THEN
        RETURN 0;
    END IF;
    SELECT id INTO v_cut FROM maintain_pass ORDER BY id DESC OFFSET setting_int('history_max_rows') LIMIT 1;
    DELETE FROM maintain_pass
     WHERE id IN (SELECT id FROM maintain_pass
                   WHERE (id <= v_cut OR started_at < v_before)
                     AND (finished_at IS NOT NULL OR started_at < v_dead)
                   ORDER BY id
                   LIMIT p_limit);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- _maintain_fail_owner records an error that maintain() could not record
-- itself (a part that raised through a COMMIT, see maintain.sql) against the
-- owner's unfinished passes and runs, and releases the owner's leases. The Go
-- runner calls it after a pass that failed with an SQL error; call it only
-- when the failed session is known to be over.
CREATE OR REPLACE FUNCTION _maintain_fail_owner(p_owner text, p_error text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_n bigint;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    UPDATE maintain_run SET status = 'failed', finished_at = v_now, error = coalesce(error, p_error)
     WHERE owner = p_owner AND status = 'running';
    UPDATE maintain_pass SET finished_at = v_now, error = coalesce(error || '; ', '') || p_error
     WHERE owner = p_owner AND finished_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM lease_release_owner(p_owner);
    RETURN v_n;
END
$$;

CREATE OR REPLACE VIEW maintenance_passes AS
SELECT p.id,
       p.owner,
       p.started_at,
       p.finished_at,
       p.finished_at - p.started_at AS duration,
       p.parts ->> 'recovery' AS recovery,
       p.parts ->> 'retention' AS retention,
       coalesce((SELECT jsonb_object_agg(r.part, r.counts) FROM maintain_run r WHERE r.pass_id = p.id), '{}') AS counts,
       p.error
  FROM maintain_pass p;

CREATE OR REPLACE VIEW maintenance_runs AS
SELECT id, pass_id, part, owner, token, status, started_at, finished_at,
       finished_at - started_at AS duration, steps, counts, error
  FROM maintain_run;
-- pgsweep:end functions/history.sql

-- pgsweep:include functions/maintain_recovery.sql
-- The recovery part of maintain(): one STEP of recovery of expired claims,
-- over every queue, through queue_recover (functions/recover.sql): rows whose
-- lease expired become claimable again and their old owner is fenced out
-- (each counts as a lost lease); rows that used their last attempt move to
-- the dead letters. queue_recover keeps each queue's keyset traversal (id
-- order up to a boundary captured when the traversal starts, wrapping after
-- an empty pass), so continuous new traffic cannot starve older rows.
--
-- Contract with maintain(): one call = one bounded step, at most
-- setting_int('recovery_batch_size') rows per queue; no COMMIT (maintain
-- commits after each step and renews the lease); returns
-- {"recovered", "lost_leases", "dead_lettered", "more"} where "more" says a
-- queue filled its batch, so another step is worth it while time remains.
CREATE OR REPLACE FUNCTION _maintain_recovery(p_owner text, p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_batch int := setting_int('recovery_batch_size');
    v_queue text;
    v_r record;
    v_recovered int := 0;
    v_dead int := 0;
    v_more boolean := false;
BEGIN
    FOR v_queue IN SELECT q.name FROM queue q ORDER BY q.name LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true; -- queues left unvisited this step
            EXIT;
        END IF;
        SELECT * INTO v_r FROM queue_recover(v_queue, v_batch);
        v_recovered := v_recovered + v_r.recovered;
        v_dead := v_dead + v_r.dead_lettered;
        IF v_r.recovered + v_r.dead_lettered >= v_batch THEN
            v_more := true;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('recovered', v_recovered, 'lost_leases', v_recovered,
                              'dead_lettered', v_dead, 'more', v_more);
END
$$;
-- pgsweep:end functions/maintain_recovery.sql

-- pgsweep:include functions/retention_builtin.sql
-- Built-in retention of the rows pgsweep itself keeps: per queue, processed
-- inbox records (message_processed, by processed_at) after
-- queue.processed_retention, and dead letters (message_dead, by dead_at)
-- after queue.dead_retention. NULL periods keep rows forever.
--
-- Each is an ordinary retention policy restricted to one queue by the policy
-- filter (queue = '<queue>'), named 'pgsweep.processed:<queue>' and
-- 'pgsweep.dead:<queue>', so the retention engine's guarantees, leases and
-- history apply unchanged and a DBA sees them in retention_policies.
-- Undelivered messages (table message) are never under any policy: an outbox
-- row leaves only by being completed.
--
-- maintain() calls retention_builtin_sync() at the start of every retention
-- part, so a queue created or reconfigured by SQL is covered on the next
-- pass; a DBA driving retention_run by hand calls it once after such changes.
--
-- Policy names have at most 190 characters, so queue_create accepts names of
-- at most 172 (18 for 'pgsweep.processed:'). A longer queue made by an older
-- version gets no policy whose name would not fit -- a WARNING names it and
-- says to move its messages to a shorter queue -- and every other queue
-- keeps its retention.
CREATE OR REPLACE FUNCTION retention_builtin_sync()
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- retention_register's "no index leads with the time column" NOTICE does not
-- apply: the filter (queue) and time column lead the tables' retention indexes.
SET client_min_messages = warning
AS $$
DECLARE
    v_changed int := 0;
    v_want record;
    v_pol retention_policy;
    v_name text;
BEGIN
    FOR v_want IN
        SELECT 'pgsweep.processed:' || q.name AS name, 'message_processed'::regclass AS tbl,
               'processed_at' AS col, q.processed_retention AS period, q.name AS queue
          FROM queue q WHERE q.kind = 'inbox'
        UNION ALL
        SELECT 'pgsweep.dead:' || q.name, 'message_dead'::regclass, 'dead_at', q.dead_retention, q.name
          FROM queue q
         ORDER BY 1
    LOOP
        IF length(v_want.name) > 190 THEN
            RAISE WARNING 'queue "%" has no built-in retention of %: its name has % characters, at most 172 fit in a retention policy name (190); move its messages to a queue with a shorter name',
                v_want.queue, v_want.tbl, length(v_want.queue);
            CONTINUE;
        END IF;
        SELECT * INTO v_pol FROM retention_policy WHERE name = v_want.name;
        IF FOUND AND v_pol.older_than IS NOT DISTINCT FROM v_want.period
           AND v_pol.filter_column = 'queue' AND v_pol.filter_values = ARRAY[v_want.queue] THEN
            CONTINUE;
        END IF;
        -- register and filter in one transaction: no pass ever sees the
        -- policy without its queue filter.
        PERFORM _retention_register(v_want.name, v_want.tbl, v_want.col, v_want.period, NULL, NULL,
                                    1000, 'exclusive', interval '1 minute', _owner_role(), true);
        PERFORM retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;

    FOR v_name IN
        SELECT p.name FROM retention_policy p
         WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
            OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name))
    LOOP
        PERFORM retention_unregister(v_name);
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
-- pgsweep:end functions/retention_builtin.sql

-- pgsweep:include functions/maintain_retention.sql
{{ $s := .schema | default "pgsweep" -}}
-- The retention part of maintain(): sync the built-in policies, then run
-- every due retention policy (own and registered; retention_due lists them,
-- oldest first) until p_deadline.
--
-- It drives each policy's pass through the engine's own steps
-- (_retention_begin / _retention_step / _retention_finish, exactly as
-- retention_run does) rather than CALL retention_run, because a failing
-- policy must not end the whole maintain pass: PL/pgSQL cannot catch an
-- error raised across a COMMIT, so every step is caught here, outside the
-- COMMITs, recorded on that policy's pass, and the part goes on with the
-- next policy.
--
-- A PROCEDURE without a SET clause (it COMMITs after every batch), so every
-- name below is qualified with the install schema and the body uses no
-- operator: comparisons, arithmetic and JSON building live in the pinned
-- functions _maintain_ret_* below, so nothing on the caller's search_path
-- (pg_cron's superuser's included) can stand in for them.
--
-- Returns in p_result {"deleted": {"<policy>": rows}, "errors": {"<policy>":
-- "message"}, "more": bool}; "more" means a policy stopped on the budget with
-- rows left, or due policies were not reached, so the part is due again at once.
-- _maintain_ret_go: whether the part may start another policy (the
-- deadline has not passed and the part's lease was renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_go(p_owner text, p_deadline timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF clock_timestamp() >= p_deadline THEN
        RETURN false;
    END IF;
    RETURN _maintain_renew('retention', p_owner);
END
$$;

-- _maintain_ret_budget: what is left of the part's budget.
CREATE OR REPLACE FUNCTION _maintain_ret_budget(p_deadline timestamptz)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$ SELECT greatest(p_deadline - clock_timestamp(), interval '0') $$;

-- _maintain_ret_error: an error's text as the history records it.
CREATE OR REPLACE FUNCTION _maintain_ret_error(p_message text, p_state text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT format('%s (SQLSTATE %s)', p_message, p_state) $$;

-- _maintain_ret_put: p_obj with p_key set to p_value.
CREATE OR REPLACE FUNCTION _maintain_ret_put(p_obj jsonb, p_key text, p_value jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_obj || jsonb_build_object(p_key, p_value) $$;

-- _maintain_ret_pace sleeps after a batch in proportion to its duration
-- (retention_duty_cycle percent of the time deleting), never past the
-- deadline, and says whether the part's lease is due for renewal (every
-- third of maintain_lease_ttl since p_renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_pace(p_batch_start timestamptz, p_deadline timestamptz, p_renewed timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_duty int := setting_int('retention_duty_cycle');
BEGIN
    IF v_duty < 100 THEN
        PERFORM pg_catalog.pg_sleep(least(
            extract(epoch FROM clock_timestamp() - p_batch_start) * (100 - v_duty) / v_duty,
            greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
    END IF;
    RETURN clock_timestamp() - p_renewed > setting_interval('maintain_lease_ttl') / 3;
END
$$;

-- _maintain_ret_tally adds a finished pass to the part's result: its rows
-- under "deleted", and "more" when it stopped on the budget.
CREATE OR REPLACE FUNCTION _maintain_ret_tally(p_result jsonb, p_name text, p_pass bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_outcome text;
    v_rows bigint;
BEGIN
    SELECT p.outcome, p.rows_deleted INTO v_outcome, v_rows FROM retention_pass p WHERE p.id = p_pass;
    p_result := jsonb_set(p_result, ARRAY['deleted', p_name], to_jsonb(coalesce(v_rows, 0)));
    IF v_outcome = 'budget' THEN
        p_result := jsonb_set(p_result, '{more}', 'true');
    END IF;
    RETURN p_result;
END
$$;

-- _maintain_ret_result: the part's result, errors included when there are any.
CREATE OR REPLACE FUNCTION _maintain_ret_result(p_result jsonb, p_more boolean, p_errors jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT jsonb_build_object('deleted', p_result -> 'deleted',
                              'more', p_more OR coalesce((p_result ->> 'more')::boolean, false))
           || CASE WHEN p_errors <> '{}' THEN jsonb_build_object('errors', p_errors) ELSE '{}' END
$$;

CREATE OR REPLACE PROCEDURE _maintain_retention(p_owner text, p_deadline timestamptz, INOUT p_result jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due text[];
    v_name text;
    v_pass bigint;
    v_step_more boolean;
    v_error text;
    v_errors jsonb := '{}';
    v_tally jsonb := '{"deleted": {}}';
    v_more boolean := false;
    v_renewed timestamptz := pg_catalog.clock_timestamp();
    v_batch_start timestamptz;
    v_go boolean;
    v_renew boolean;
BEGIN
    BEGIN
        PERFORM {{ $s }}.retention_builtin_sync();
    EXCEPTION WHEN OTHERS THEN
        v_errors := {{ $s }}._maintain_ret_put(v_errors, 'builtin_sync', pg_catalog.to_jsonb({{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE)));
    END;
    COMMIT;

    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        v_go := {{ $s }}._maintain_ret_go(p_owner, p_deadline);
        IF NOT v_go THEN
            v_more := true; -- out of budget, or lost the part's lease: another owner goes on
            EXIT;
        END IF;
        COMMIT;

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}._retention_begin(v_name, p_owner, {{ $s }}._maintain_ret_budget(p_deadline), NULL);
        EXCEPTION WHEN OTHERS THEN
            v_error := {{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_unlock(v_name);
            COMMIT;
            v_errors := {{ $s }}._maintain_ret_put(v_errors, v_name, pg_catalog.to_jsonb(v_error));
            CONTINUE;
        END IF;
        COMMIT;
        CONTINUE WHEN v_pass IS NULL; -- busy elsewhere, or keeps rows forever

        LOOP
            v_batch_start := pg_catalog.clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}._retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := {{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic (retention_duty_cycle);
            -- keep the part's lease alive through a long policy.
            v_renew := {{ $s }}._maintain_ret_pace(v_batch_start, p_deadline, v_renewed);
            IF v_renew THEN
                v_go := {{ $s }}._maintain_renew('retention', p_owner);
                IF NOT v_go THEN
                    v_error := 'lost the maintain:retention lease during the pass';
                    EXIT;
                END IF;
                v_renewed := pg_catalog.clock_timestamp();
                COMMIT;
            END IF;
        END LOOP;

        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_finish(v_pass, 'error', v_error);
            v_errors := {{ $s }}._maintain_ret_put(v_errors, v_name, pg_catalog.to_jsonb(v_error));
        ELSE
            PERFORM {{ $s }}._retention_finish(v_pass, NULL, NULL);
        END IF;
        COMMIT;
        PERFORM {{ $s }}._retention_unlock(v_name);
        v_tally := {{ $s }}._maintain_ret_tally(v_tally, v_name, v_pass);
    END LOOP;

    p_result := {{ $s }}._maintain_ret_result(v_tally, v_more, v_errors);
END
$$;
-- pgsweep:end functions/maintain_retention.sql

-- pgsweep:include functions/maintain.sql
-- CALL maintain(p_owner, p_budget): one maintenance pass. pg_cron and any
-- number of `pgsweep run` replicas call it side by side; each part runs in at
-- most one session at a time (see maintain_part.sql) and every pass is
-- recorded (history.sql).
--
-- It is a PROCEDURE so that it can COMMIT after every step: the lease, the
-- history rows and each batch of work become visible (and durable) at once,
-- and no transaction stays open for the whole pass. Call it outside a
-- transaction block (psql autocommit, pg_cron, the Go runner).
--
-- PostgreSQL forbids COMMIT in a procedure that has a SET clause, so unlike
-- every function this one cannot pin search_path: instead every name in its
-- body is qualified with the install schema (a template value, validated as a
-- plain lower-case identifier) and the body uses no operator (the pinned
-- _maintain_* functions compute), so the caller's search_path cannot
-- redirect it.

-- _maintain_recovery_deadline: recovery gets at most half the budget.
CREATE OR REPLACE FUNCTION _maintain_recovery_deadline(p_deadline timestamptz, p_budget interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_deadline - p_budget / 2 $$;

-- _maintain_running: whether a part's begin said it runs.
CREATE OR REPLACE FUNCTION _maintain_running(p_status text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT coalesce(p_status = 'running', false) $$;

-- _maintain_ret_errors: the retention part's per-policy errors as one
-- text (NULL: none); _maintain_ret_counts: its result without them.
CREATE OR REPLACE FUNCTION _maintain_ret_errors(p_result jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT string_agg(format('policy %s: %s', e.key, e.value #>> '{}'), '; ' ORDER BY e.key)
      FROM jsonb_each(CASE WHEN jsonb_typeof(p_result -> 'errors') = 'object' THEN p_result -> 'errors' END) e
$$;

CREATE OR REPLACE FUNCTION _maintain_ret_counts(p_result jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_result - 'errors' $$;

CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner text;
    v_deadline timestamptz;
    v_recovery_deadline timestamptz;
    v_part record;
    v_result jsonb;
    v_error text;
    v_more boolean;
    v_running boolean;
BEGIN
    SELECT b.o_pass, b.o_owner, b.o_deadline INTO v_pass, v_owner, v_deadline
      FROM {{ .schema | default "pgsweep" }}._maintain_pass_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_recovery_deadline := {{ .schema | default "pgsweep" }}._maintain_recovery_deadline(v_deadline, p_budget);
    SELECT * INTO v_part FROM {{ .schema | default "pgsweep" }}._maintain_part_begin(v_pass, 'recovery', v_owner, v_recovery_deadline);
    COMMIT;
    v_running := {{ .schema | default "pgsweep" }}._maintain_running(v_part.o_status);
    IF v_running THEN
        LOOP
            v_result := NULL;
            v_error := NULL;
            BEGIN
                v_result := {{ .schema | default "pgsweep" }}._maintain_recovery(v_owner, v_recovery_deadline);
            EXCEPTION WHEN OTHERS THEN
                v_error := {{ .schema | default "pgsweep" }}._maintain_ret_error(SQLERRM, SQLSTATE);
            END;
            v_more := {{ .schema | default "pgsweep" }}._maintain_part_step(v_part.o_run, v_result, v_error, v_recovery_deadline);
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_end(v_part.o_run);
        COMMIT;
    END IF;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    SELECT * INTO v_part FROM {{ .schema | default "pgsweep" }}._maintain_part_begin(v_pass, 'retention', v_owner, v_deadline);
    COMMIT;
    v_running := {{ .schema | default "pgsweep" }}._maintain_running(v_part.o_status);
    IF v_running THEN
        v_result := '{}';
        CALL {{ .schema | default "pgsweep" }}._maintain_retention(v_owner, v_deadline, v_result);
        v_error := {{ .schema | default "pgsweep" }}._maintain_ret_errors(v_result);
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_step(v_part.o_run,
            {{ .schema | default "pgsweep" }}._maintain_ret_counts(v_result), v_error, v_deadline);
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_end(v_part.o_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}._maintain_pass_end(v_pass);
    COMMIT;
END
$$;
-- pgsweep:end functions/maintain.sql

-- pgsweep:include functions/cron.sql
-- Scheduling maintain() with pg_cron, for databases that have it.
--
-- pg_cron lives in the one database named by cron.database_name. pgsweep does
-- not depend on it: these functions reach cron.* through EXECUTE only, so they
-- install everywhere, and without pg_cron they explain what to do instead.
-- The job name is unique per install schema, so scheduling again updates the
-- job (cron.schedule upserts by job name since pg_cron 1.4) and installs in
-- other schemas of the same database get their own job.

-- pg_cron job names are of type name (at most 63 bytes): a long schema name
-- is cut and made unique again with a hash of the full name.
CREATE OR REPLACE FUNCTION cron_job_name()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN octet_length(n) <= 63 THEN n ELSE left(n, 54) || ':' || left(md5(n), 8) END
      FROM (SELECT 'pgsweep-maintain:' || current_schema() AS n) x
$$;

CREATE OR REPLACE FUNCTION _cron_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') $$;

CREATE OR REPLACE FUNCTION _cron_require()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT _cron_available() THEN
        RAISE EXCEPTION 'pg_cron is not installed in database %: install it there (CREATE EXTENSION pg_cron, in the database named by cron.database_name, now %) or run `pgsweep run` instead',
            quote_ident(current_database()),
            coalesce(quote_literal(current_setting('cron.database_name', true)), 'unset: pg_cron is not in shared_preload_libraries')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = '`pgsweep run --database-url URL` calls maintain() on an interval from outside the database; run it next to your applications, as many replicas as you like.';
    END IF;
END
$$;

-- cron_schedule schedules CALL <schema>.maintain('pg_cron', p_budget) on
-- p_schedule (pg_cron syntax, e.g. '* * * * *') and returns the job id.
-- Scheduling again replaces the schedule and budget of the same job.
-- p_budget should stay below the schedule's period: pg_cron starts no second
-- run of a job while one is still running.
CREATE OR REPLACE FUNCTION cron_schedule(p_schedule text DEFAULT '* * * * *', p_budget interval DEFAULT '50 seconds')
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_command text;
BEGIN
    PERFORM _check_text('p_schedule', p_schedule, 100);
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    PERFORM _cron_require();
    v_command := format('CALL %I.maintain(%L, %L)', current_schema(), 'pg_cron', _interval_text(p_budget));
    BEGIN
        EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_id USING cron_job_name(), p_schedule, v_command;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'p_schedule must be a pg_cron schedule such as ''* * * * *'', got %', quote_literal(p_schedule)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;
    RETURN v_id;
END
$$;

-- cron_unschedule removes this schema's maintain job; false when there was
-- none (also when pg_cron is not installed: then nothing can be scheduled).
CREATE OR REPLACE FUNCTION cron_unschedule()
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT _cron_available() THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT jobid FROM cron.job WHERE jobname = $1 AND username = current_user' INTO v_id USING cron_job_name();
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT cron.unschedule($1)' USING v_id;
    RETURN true;
END
$$;

-- cron_job shows this schema's maintain job, if any (no rows without pg_cron).
CREATE OR REPLACE FUNCTION cron_job(OUT jobid bigint, OUT schedule text, OUT command text, OUT active boolean)
RETURNS SETOF record
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _cron_available() THEN
        RETURN QUERY EXECUTE 'SELECT jobid, schedule, command, active FROM cron.job WHERE jobname = $1 AND username = current_user'
            USING cron_job_name();
    END IF;
END
$$;
-- pgsweep:end functions/cron.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says.
SELECT _grant_all();
