-- pgsweep 0.34: security, round two (issue 23). No role borrows another's
-- rights (docs/security.md):
--
-- * Internals are the owner's: no role but <schema>_owner executes a routine
--   whose name starts with an underscore or passes a clock (_grant_all
--   refuses to grant one). The procedures call step routines
--   (maintain_step_*, retention_step_*), each tied to the session that opened
--   its pass; a cutoff is never later than now() - older_than when a
--   statement runs. lease_acquire/renew/release refuse pgsweep's own lease
--   names. A retention policy is changed only by its owner; built-in policy
--   names are reserved.
-- * Other roles' code runs only as that role: filter values are read as the
--   column's base type (no domain CHECK runs); every statement on an
--   application table or leaf runs as its owner; a leaf of another role is
--   skipped. The runner gets typed values from retention_detach_claim (no SQL
--   text) and acts as the policy's owner; a detached leaf's rows come from
--   the catalog.
-- * Per-queue rights (queue_right, queue_grant, queue_revoke): send, consume,
--   browse, manage, checked in every queue verb (42501). Existing queues get
--   rows that keep today's behaviour; queue_default_grants says what a new
--   queue gets. The functions the Worker and the views call lose their
--   underscore (queue_info, queue_counts, queue_rows, lease_rows).
-- * Input limits: one name rule, interval rules (no mixed signs, no months
--   where a fixed length is meant, exact comparison), caps as settings.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- -------- internals and retention

ALTER TABLE maintain_run ADD COLUMN deadline timestamptz;
ALTER TABLE retention_pass ADD COLUMN step jsonb;
COMMENT ON COLUMN retention_pass.step IS 'the step retention_step_claim handed out and retention_step_record has not recorded yet';

-- Gone or renamed: every one was executable by <schema>_admin or _monitor.
DROP VIEW leases; -- recreated over lease_rows() (lease.sql)
DROP FUNCTION _lease_rows();
DROP FUNCTION retention_due(timestamptz); -- its p_now had a default: now retention_due() and the owner's retention_due(p_now)
DROP PROCEDURE _maintain_retention(text, timestamptz, jsonb);
DROP FUNCTION _maintain_recovery_deadline(timestamptz, interval);
DROP FUNCTION _maintain_running(text);
DROP FUNCTION _maintain_ret_errors(jsonb);
DROP FUNCTION _maintain_ret_counts(jsonb);
DROP FUNCTION _maintain_ret_go(text, timestamptz);
DROP FUNCTION _maintain_ret_budget(timestamptz);
DROP FUNCTION _maintain_ret_error(text, text);
DROP FUNCTION _maintain_ret_put(jsonb, text, jsonb);
DROP FUNCTION _maintain_ret_traffic();
DROP FUNCTION _maintain_ret_renew_due(timestamptz);
DROP FUNCTION _maintain_ret_tally(jsonb, text, bigint);
DROP FUNCTION _maintain_ret_result(jsonb, boolean, jsonb);
DROP FUNCTION _maintain_fail_owner(text, text);
DROP FUNCTION _retention_finish_error(bigint, text, text);
DROP FUNCTION _retention_step(bigint);
DROP FUNCTION _retention_as_owner(retention_policy, text, text, anyelement, anyelement, timestamptz, regclass, bigint);
DROP FUNCTION _retention_session_state();
DROP FUNCTION _retention_session_restore(text[]);
DROP FUNCTION _retention_register(text, regclass, text, interval, text, text[], int, text, interval, regclass);
DROP FUNCTION _retention_resolve(text, text, text);
DROP FUNCTION _cron_available();
DROP FUNCTION _cron_require();

-- -------- per-queue rights

-- One row per (queue, right, grantee); the key leads with the queue (on
-- Citus it is placed like the message tables: distributed by queue,
-- colocated). grantee is the role's oid, grantee_name its name at grant
-- time: a row counts only while they still agree (an oid reused by a new
-- role inherits nothing).
CREATE TABLE queue_right (
    queue        text NOT NULL REFERENCES queue (name) ON DELETE CASCADE,
    privilege    text NOT NULL CHECK (privilege IN ('send', 'consume', 'browse', 'manage')),
    grantee      oid NOT NULL,
    grantee_name name NOT NULL,
    PRIMARY KEY (queue, privilege, grantee)
);
COMMENT ON TABLE queue_right IS 'per-queue rights: which role may send to, consume, browse or manage which queue; change with queue_grant and queue_revoke';

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('queue_default_grants', '1', 'integer', '1', '0', '1', false,
     'rights a new queue starts with: 1 = send and consume to <schema>_worker, browse and manage to <schema>_admin; 0 = browse and manage to <schema>_admin only (private: queue_grant gives workers their rights)')
ON CONFLICT (name) DO NOTHING;

-- Existing queues keep working as before: their rights, as rows.
INSERT INTO queue_right (queue, privilege, grantee, grantee_name)
SELECT q.name, g.privilege, r.oid, r.rolname
  FROM queue q
 CROSS JOIN (VALUES ('_worker', 'send'), ('_worker', 'consume'), ('_admin', 'browse'), ('_admin', 'manage')) g(suffix, privilege)
  JOIN pg_catalog.pg_roles r ON r.rolname = pg_catalog.current_schema() || g.suffix
ON CONFLICT DO NOTHING;

-- The views' and the Worker's functions lose their underscore.
DROP VIEW queue_stats;
DROP FUNCTION _queue_stats(text, timestamptz);
DROP FUNCTION _queue_rows();

-- -------- input limits

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('max_payload_bytes', '1048576', 'integer', '1048576', '1024', '268435456', false,
     'largest payload send and send_batch accept, in bytes (the jsonb as stored, before compression)'),
    ('max_headers_bytes', '65536', 'integer', '65536', '1024', '16777216', false,
     'largest headers object send and send_batch accept, in bytes'),
    ('max_error_bytes', '65536', 'integer', '65536', '1024', '16777216', false,
     'longest error text fail, fail_details and dead_letter accept, in bytes (refused, never truncated)'),
    ('max_key_bytes', '2000', 'integer', '2000', '100', '2000', false,
     'longest message key (p_key) send accepts, in bytes (and at most 1000 characters); keys are in a unique index, whose entries cannot exceed about 2700 bytes'),
    ('max_batch', '10000', 'integer', '10000', '100', '10000', false,
     'most elements of an id array (p_ids of renew, complete, fail, release, claim_ids, dead_letter, dead_requeue, message_cancel), of send_batch''s arrays and of a retention filter''s values')
ON CONFLICT (name) DO NOTHING;
UPDATE setting SET max_value = '100 years'
 WHERE name IN ('inbox_processed_retention', 'dead_letter_retention') AND max_value = '36500 days';

-- -------- the runner's detach

DROP FUNCTION retention_detach_claim(text, timestamptz);
DROP FUNCTION retention_detach_claim(text);
DROP FUNCTION _retention_detach_claim_for(text, timestamptz, int);
DROP FUNCTION _retention_detach_statements(oid, boolean, boolean);
DROP FUNCTION retention_detach_done(text, oid, bigint);

-- queue_recover and queue_counts: the clock is the owner's (tests); admins
-- and monitors call the signatures without one.
DROP FUNCTION queue_recover(text, int, timestamptz);

-- settings view reads setting_rows() (was _setting_rows: no underscore routine is a monitor's).
DROP VIEW settings;
DROP FUNCTION _setting_rows();

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
-- An invoker routine can call only what its caller may execute, so none of
-- them calls an underscore routine (but _grant_all, which is S_owner's).
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY[
        -- the owner proofs: the caller's role becomes (or must own) the policy (retention_register.sql)
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_resolve_table',
        -- the step that runs a statement as the policy's owner (retention_sql.sql)
        'retention_step', '_grant_all',
        -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
        'cron_schedule', 'cron_unschedule', 'cron_job',
        -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
        'maintain_step_traffic']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so _grant_all leaves out a
-- signature that takes p_now when the routine has one without it).
-- Internals are the owner's: _grant_all refuses to grant a routine whose
-- name starts with an underscore (docs/security.md, "Internals are the
-- owner's").
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        'queue_info', -- the Worker reads the queue's lease_default and max_attempts (no payloads; consume, queue_rights.sql)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'queue_grant', 'queue_revoke', 'queue_rights', -- per-queue rights (queue_rights.sql)
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker wrappers call: the owner proof's definer halves
        -- (retention_register.sql) and the pg_cron command (cron.sql)
        'retention_register_proved', 'retention_unregister_proved', 'retention_set_filter_proved',
        'retention_set_lease_ttl_proved', 'retention_set_strategy_proved', 'retention_set_time_zone_proved',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step_recovery', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'maintain_fail_owner', -- the runner: a pass whose session is gone
        'retention_step_begin', 'retention_step', 'retention_step_claim', 'retention_step_record',
        'retention_step_end', 'retention_step_unlock', 'retention_step_pass', 'retention_step_session_state', 'retention_step_session_restore']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'version',
        'lease_rows', 'setting_rows', 'queue_rows']) r -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a IN ('p_now', 'p_clock')) AS has_now, p.oid
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- Internals are the owner's, and so is every clock: a name with a
        -- leading underscore in the matrix is refused, a signature that
        -- takes p_now or p_clock (the tests' overloads) is never granted.
        IF pg_catalog.left(r.proname, 1) = '_'
           AND EXISTS (SELECT 1 FROM _routine_grants() g WHERE g.routine = r.proname) THEN
            RAISE EXCEPTION '_grant_all: % is internal (its name starts with an underscore): no role but % may execute it',
                r.sig, v_owner USING ERRCODE = 'insufficient_privilege',
                HINT = 'Give the callers a step routine without the underscore that checks what it is asked (privileges.sql).';
        END IF;
        CONTINUE WHEN r.has_now;
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql
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
    -- days and time of opposite signs ('1 day -1 second'): each on its own,
    -- as the caller wrote them, not summed into a length they never have
    IF extract(day FROM p_value) <> 0 AND p_value <> make_interval(days => extract(day FROM p_value)::int)
       AND sign(extract(day FROM p_value)) <> sign(extract(epoch FROM p_value - make_interval(days => extract(day FROM p_value)::int))) THEN
        RETURN _interval_text(make_interval(days => extract(day FROM p_value)::int)) || ' '
            || _interval_text(p_value - make_interval(days => extract(day FROM p_value)::int));
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

-- Names. Every name-like argument -- queue, policy, lease, schedule and
-- setting names, owner labels, lanes, message keys, column and table names
-- given as text, time zones -- obeys one rule, checked here:
--   * not NULL, not empty, at most p_max_len characters (200 unless the
--     caller says otherwise: names that other names are built from are
--     shorter, e.g. queue names 172, policy names 190; keys 1000);
--   * no control characters (U+0001-U+001F, U+007F-U+009F: newlines and
--     escapes would forge lines in logs), no format or invisible characters
--     (Unicode category Cf: soft hyphen, zero-width spaces and joiners
--     U+200B-U+200F, bidirectional controls U+202A-U+202E and
--     U+2066-U+2069, U+2060-U+2064, U+FEFF, ...) and no line or paragraph
--     separators (U+2028, U+2029): two names that print alike are the same
--     name;
--   * no whitespace at either end (so not only whitespace): ' q' and 'q'
--     would be two queues that print alike.
-- Keys and lanes get the same rule (only a longer length for keys): they are
-- identities from other systems, compared byte for byte and shown in logs
-- and the dashboard, where an invisible or trailing character is always a
-- bug or an attack. Free text (fail's p_error, dead_letter's p_reason) is
-- not a name: newlines are allowed there, only its size is capped
-- (_check_size).
CREATE OR REPLACE FUNCTION _check_text(p_arg text, p_value text, p_max_len int DEFAULT 200)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pos int;
    v_char text;
BEGIN
    -- The common case pays for one length and one regular expression (a
    -- literal, so compiled once per session). NUL cannot occur in text. The
    -- first class is the forbidden characters (Cc, Cf, U+2028, U+2029); the
    -- second is whitespace: space, no-break spaces, the U+2000 block's
    -- spaces, ideographic space (tabs and line breaks are control characters).
    IF p_value <> '' AND length(p_value) <= p_max_len
       AND p_value !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ufffe\uffff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]|^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]|[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]$' THEN
        RETURN;
    END IF;
    IF p_value IS NULL OR p_value = '' OR length(p_value) > p_max_len THEN
        RAISE EXCEPTION '% must be a non-empty string of at most % characters, got %', p_arg, p_max_len,
            CASE WHEN p_value IS NULL THEN 'NULL'
                 WHEN p_value = '' THEN 'an empty string'
                 ELSE length(p_value) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_char := substring(p_value FROM '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ufffe\uffff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]');
    IF v_char IS NOT NULL THEN
        -- the value itself is not echoed: it is what a log must not show
        v_pos := strpos(p_value, v_char);
        RAISE EXCEPTION '% must hold printable characters only (no control, format or invisible characters), got U+% at character %',
            p_arg, upper(lpad(to_hex(ascii(v_char)), greatest(4, length(to_hex(ascii(v_char)))), '0')), v_pos
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_value ~ '^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+$' THEN
        RAISE EXCEPTION '% must not be only whitespace, got % whitespace characters', p_arg, length(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RAISE EXCEPTION '% must not begin or end with whitespace, got % characters that %', p_arg, length(p_value),
        CASE WHEN p_value ~ '^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]' THEN 'begin with whitespace' ELSE 'end with whitespace' END
        USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- Intervals. PostgreSQL keeps an interval as three parts -- months, days,
-- microseconds -- and compares intervals as if a month were 30 days and a
-- day 24 hours: '1 mon -30 days 1 sec' compares equal to one second, but is
-- one day on 2 March and minus one day on 1 February. So:
--   * no interval may mix signs between its parts ('1 day -1 sec',
--     '1 mon -30 days 1 sec'): refused everywhere;
--   * a duration -- a TTL, a lease, a budget, retry_after, lease_default,
--     backoffs, the runners' and maintenance intervals -- must have a fixed
--     length: no months or years (weeks, days, hours, minutes, seconds are
--     fine; a day counts 24 hours). _check_interval treats an argument as a
--     duration when the bounds its caller gives are fixed lengths;
--   * a retention period (retention_register's p_older_than, a queue's
--     processed_retention and dead_retention, the settings
--     inbox_processed_retention and dead_letter_retention) is a calendar
--     period: months and years are allowed ('3 months' keeps three calendar
--     months). Its callers give an upper bound in years ('100 years'), which
--     is what tells _check_interval to accept months.
-- Comparisons are exact, never with 30-day months: with no months on either
-- side, days and microseconds are compared as microseconds; a value is
-- within a bound only if it is within it on every date (a month counts as
-- 28 to 31 days, a year as 365 or 366: _interval_le).
-- The ranges, per argument (docs/operations.md, "Argument ranges"):
--   lease_acquire/lease_renew p_ttl, retention_set_lease_ttl p_ttl,
--   claim/claim_ids/renew p_lease, queue lease_default   1 second .. 1 hour
--   maintain/cron_schedule p_budget                        1 second .. 1 hour
--   retention_run p_budget                                 0 .. 1 day
--   fail/fail_details p_retry_after                        0 .. 30 days
--   queue backoff_base 0 .. 1 day, backoff_max backoff_base .. 7 days,
--   claim_rescan 0 .. 1 minute
--   retention_register p_older_than                        0 .. 100 years (calendar)
--   retention_register p_interval                          1 second .. 1 day
--   queue processed_retention, dead_retention              1 second .. 100 years (calendar)
--   settings of kind interval                              the row's range (settings view)

-- _interval_parts splits an interval into its three stored parts.
CREATE OR REPLACE FUNCTION _interval_parts(p_value interval, OUT months int, OUT days int, OUT micros numeric)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    months := extract(year FROM p_value)::int * 12 + extract(month FROM p_value)::int;
    days := extract(day FROM p_value)::int;
    micros := extract(epoch FROM p_value - make_interval(months => months, days => days)) * 1000000;
END
$$;

-- _interval_le: is a no longer than b on every date? Both without mixed
-- signs. Months count as their shortest (28 days a month, 365 a year) where
-- they lengthen b, and as their longest (31, 366) where they lengthen a.
CREATE OR REPLACE FUNCTION _interval_le(a interval, b interval)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    pa record := _interval_parts(a);
    pb record := _interval_parts(b);
    c_day constant numeric := 86400000000;
    v_dm int := pb.months - pa.months;
BEGIN
    IF v_dm >= 0 THEN
        RETURN pa.days * c_day + pa.micros
            <= pb.days * c_day + pb.micros + ((v_dm / 12) * 365 + (v_dm % 12) * 28) * c_day;
    END IF;
    v_dm := -v_dm;
    RETURN pa.days * c_day + pa.micros + ((v_dm / 12) * 366 + (v_dm % 12) * 31) * c_day
        <= pb.days * c_day + pb.micros;
END
$$;

CREATE OR REPLACE FUNCTION _check_interval(p_arg text, p_value interval, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_calendar boolean;
    v_range text;
BEGIN
    -- The common case, without a call: a fixed, non-negative length (no
    -- months; days and time not negative) within fixed bounds, where interval
    -- comparison is exact (it counts 30-day months only when there are months).
    IF p_value >= p_min AND p_value <= p_max
       AND extract(month FROM p_value) = 0 AND extract(year FROM p_value) = 0 AND extract(day FROM p_value) >= 0
       AND extract(epoch FROM p_value) >= extract(day FROM p_value) * 86400
       AND extract(month FROM p_max) = 0 AND extract(year FROM p_max) = 0
       AND extract(month FROM p_min) = 0 AND extract(year FROM p_min) = 0 THEN
        RETURN;
    END IF;
    v := _interval_parts(p_value);
    v_calendar := (_interval_parts(p_max)).months <> 0 OR (_interval_parts(p_min)).months <> 0;
    v_range := format('between %s and %s', _interval_text(p_min), _interval_text(p_max));
    IF p_value IS NULL THEN
        RAISE EXCEPTION '% must be %, got NULL', p_arg, v_range
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The message stays '<arg> must be between <min> and <max>, got <value>'
    -- (what callers and tests match); DETAIL says which rule was broken.
    IF (v.months > 0 OR v.days > 0 OR v.micros > 0) AND (v.months < 0 OR v.days < 0 OR v.micros < 0) THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Its months, days and time must all have one sign: they are counted apart, so a mixed interval has no single length.';
    END IF;
    IF v.months <> 0 AND NOT v_calendar THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It must be a fixed length (weeks, days, hours, minutes, seconds): a month or a year has no fixed length.';
    END IF;
    IF NOT (_interval_le(p_min, p_value) AND _interval_le(p_value, p_max)) THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
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
    PERFORM _check_text(p_arg, p_value, 100); -- zone names are short; the messages below echo it
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

-- Sizes. What a caller can make pgsweep store or hold in memory is capped by
-- integer settings (setting table, docs/operations.md "Caps"):
--   max_payload_bytes  p_payload of send, each of send_batch's p_payloads
--                      (pg_column_size: the stored jsonb, before compression)
--   max_headers_bytes  p_headers of send, each of send_batch's p_headers
--   max_error_bytes    p_error of fail and fail_details, p_reason of dead_letter
--                      (octet_length; refused, never truncated)
--   max_key_bytes      p_key of send, each of send_batch's p_keys (a key is in a
--                      unique index, whose entries cannot exceed ~2700 bytes)
--   max_batch          every id array (p_ids) and send_batch's p_payloads;
--                      below the fixed 10000 of claim's p_batch and _check_ids
-- _check_size raises 22023 naming the argument, the limit and the setting
-- when p_size (measured by the caller, cheaply) exceeds the setting. Every
-- cap setting's minimum is at least 100 (a test says so), so a size up to
-- 100 passes without reading the table; a larger one costs one primary-key
-- read. NULL (an argument not given) passes.
CREATE OR REPLACE FUNCTION _check_size(p_arg text, p_size bigint, p_setting text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max bigint;
    v_top text;
BEGIN
    IF p_size IS NULL OR p_size <= 100 THEN
        RETURN;
    END IF;
    SELECT s.value::bigint, s.max_value INTO v_max, v_top FROM setting s WHERE s.name = p_setting;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsweep: no setting % (the migration that adds the caps did not run)', p_setting
            USING ERRCODE = 'internal_error';
    END IF;
    IF p_size > v_max THEN
        RAISE EXCEPTION '% must be at most % % (setting %, which setting_set can raise up to %), got %',
            p_arg, v_max,
            CASE WHEN p_setting LIKE '%\_bytes' THEN 'bytes' ELSE 'elements' END,
            p_setting, v_top, p_size
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
    -- a value is short and printable; leading and trailing spaces are trimmed
    IF p_value IS NOT NULL THEN
        PERFORM _check_text('p_value', trim(p_value), 100);
    END IF;
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
        -- compared exactly (_interval_le), not with 30-day months
        IF v_interval IS NULL OR NOT (_interval_le(s.min_value::interval, v_interval)
                                      AND _interval_le(v_interval, s.max_value::interval)) THEN
            RAISE EXCEPTION '% must be %, got %', s.name, v_range,
                CASE WHEN p_value IS NULL THEN 'NULL' ELSE _interval_text(v_interval) END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- the rules of every interval argument (validate.sql): no mixed
        -- signs; months only where the range is given in years (the
        -- retention periods)
        PERFORM _check_interval(s.name, v_interval, s.min_value::interval, s.max_value::interval);
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
    PERFORM _check_text('p_name', p_name, 63); -- the message below echoes it
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

-- setting_rows: the rows of the settings view, read as S_owner (see
-- lease_rows, lease.sql, for why a view reads its table through a
-- function). Executable by S_monitor: no underscore (privileges.sql).
CREATE OR REPLACE FUNCTION setting_rows()
RETURNS TABLE (name text, value text, default_value text, kind text, min_value text, max_value text,
               infinite_ok boolean, description text, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.name, s.value, s.default_value, s.kind, s.min_value, s.max_value, s.infinite_ok, s.description, s.updated_at
      FROM setting s
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
  FROM setting_rows();
-- pgsweep:end functions/settings.sql
-- pgsweep:include functions/queue_rights.sql
-- Per-queue rights (docs/queues.md, "Per-queue rights"; docs/security.md).
--
-- A queue verb acts only for a caller that holds the verb's right on the
-- queue; the others get 42501 naming the queue and the right:
--   send     send, send_batch
--   consume  claim, claim_ids, renew, complete, fail, fail_details, release,
--            dead_letter (the relay), queue_info (the Worker)
--   browse   anything that returns payloads to a non-consumer (the
--            dashboard's message views)
--   manage   queue_configure, queue_pause, queue_resume, queue_purge,
--            message_cancel, dead_requeue, queue_drop, lane_skip,
--            queue_recover, queue_grant and queue_revoke
-- The function grants of privileges.sql still decide which verbs a role may
-- call at all (S_worker: send and consume verbs; S_admin: the manage verbs);
-- the rights below decide on which queues.
--
-- Storage: table queue_right, one row per (queue, privilege, grantee), its
-- key leading with the queue (it is placed like the message tables on
-- Citus: distributed by queue, colocated, so a delegated verb reads its
-- queue's rights on the queue's own worker). A queue's rows go with it
-- (ON DELETE CASCADE; queue_drop). The grantee is a role's oid (pg_authid)
-- and its name when granted; the check goes by the NAME: on Citus a role
-- has another oid on every node, and a delegated verb checks on the queue's
-- worker. So a renamed role loses its rights on queues until granted again,
-- and a role dropped and created again under the same name gets the old
-- one's rights back: revoke a role's queue rights before dropping it
-- (queue_rights lists them; docs/queues.md). Rows whose oid no longer has
-- their name are deleted by the next queue_grant or queue_revoke on the
-- queue (_queue_rights_clean).
--
-- Defaults (queue_create): a new queue's rights are rows like any other,
-- so queue_revoke makes it private:
--   setting queue_default_grants 1 (default): send and consume to S_worker,
--     browse and manage to S_admin -- what every role had before 0.34;
--   setting queue_default_grants 0: browse and manage to S_admin only; no
--     worker may use the queue until queue_grant says so.
-- The migration that introduced rights (035) gave every existing queue the
-- rows of setting 1, so an upgraded install behaves as before.

-- _queue_require raises 42501 unless the calling session holds p_right on
-- p_queue (an existing queue: the verbs look it up first, so an unknown
-- queue is their 22023). It is the one place that says who the caller is
-- and whether it holds a right; every verb calls it, and _queue_allowed
-- asks it.
--
-- The caller is the role the session acts as. The verbs are SECURITY
-- DEFINER, so current_user inside them is S_owner; the session's role is
-- what SET ROLE set (current_setting('role')), or the session user when
-- none was set. PostgreSQL refuses SET ROLE and SET SESSION AUTHORIZATION
-- inside a SECURITY DEFINER function, so this is always a role the session
-- itself may be: a SECURITY DEFINER function of another role that calls a
-- verb acts with its caller's session rights on queues (docs/security.md).
--
-- The caller holds p_right when it is a member (pg_has_role MEMBER:
-- directly or through other roles, inheriting or not, as SET ROLE allows)
-- of a role granted it, and when it is a superuser (as PostgreSQL's own
-- checks). A grant names its grantee (see above for why by name).
--
-- Cost: one function call, one probe of queue_right's primary key and
-- pg_has_role (PostgreSQL caches role membership) per verb call. The
-- caller's name and the check are inline rather than in functions of their
-- own: each call of a function with a pinned search_path costs about as
-- much as the probe itself (docs/benchmarks.md, "Per-queue rights").
CREATE OR REPLACE FUNCTION _queue_require(p_queue text, p_right text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                          ELSE pg_catalog.current_setting('role')::name END;
BEGIN
    -- <schema>_owner owns every queue's rows (on Citus the tier runs as it,
    -- and Citus's own connections to the workers are its).
    IF v_caller = current_user THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM queue_right r
                WHERE r.queue = p_queue AND r.privilege = p_right
                  AND pg_catalog.pg_has_role(v_caller, pg_catalog.to_regrole(pg_catalog.quote_ident(r.grantee_name)), 'MEMBER')) THEN
        RETURN;
    END IF;
    -- apart from the probe: on Citus a statement that joins the distributed
    -- queue_right with a catalog view is planned recursively, and the view's
    -- pg_authid is then read with S_owner's rights (permission denied)
    IF (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = v_caller) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied: role "%" lacks % on queue "%"', v_caller, p_right, p_queue
        USING ERRCODE = 'insufficient_privilege',
              HINT = pg_catalog.format('A role holding manage on the queue grants it: SELECT queue_grant(%L, %L, ARRAY[%L])',
                                       p_queue, v_caller, p_right);
END
$$;

-- _queue_allowed: does the calling session hold p_right on p_queue? (Not on
-- hot paths: it asks _queue_require.)
CREATE OR REPLACE FUNCTION _queue_allowed(p_queue text, p_right text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_require(p_queue, p_right);
    RETURN true;
EXCEPTION WHEN insufficient_privilege THEN
    RETURN false;
END
$$;

-- _queue_rights_valid: the names of the rights, for the checks and their messages.
CREATE OR REPLACE FUNCTION _queue_rights_valid()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['send', 'consume', 'browse', 'manage']::text[] $$;

-- _queue_rights_check validates queue_grant's and queue_revoke's arguments
-- (22023 naming the argument and the allowed values) and returns the rights,
-- without duplicates.
CREATE OR REPLACE FUNCTION _queue_rights_check(p_queue text, p_role regrole, p_rights text[])
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad text;
BEGIN
    PERFORM _queue_get(p_queue);
    IF p_role IS NULL OR p_role::oid = 0 THEN
        RAISE EXCEPTION 'p_role must name an existing role, got %', CASE WHEN p_role IS NULL THEN 'NULL' ELSE 'PUBLIC (-)' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rights IS NULL OR cardinality(p_rights) = 0 OR cardinality(p_rights) > 4 THEN
        RAISE EXCEPTION 'p_rights must be an array of 1 to 4 of send, consume, browse, manage, got %',
            CASE WHEN p_rights IS NULL THEN 'NULL' ELSE cardinality(p_rights) || ' elements' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(quote_literal(r), 'NULL') INTO v_bad FROM unnest(p_rights) r
     WHERE r IS NULL OR NOT r = ANY (_queue_rights_valid()) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'p_rights must hold only send, consume, browse, manage, got %', v_bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN ARRAY(SELECT DISTINCT r FROM unnest(p_rights) r ORDER BY 1);
END
$$;

-- _queue_rights_clean deletes the queue's rows whose grantee was dropped
-- (or renamed, or whose oid now belongs to another role): they count for
-- nothing already (_queue_allowed), this only tidies up.
CREATE OR REPLACE FUNCTION _queue_rights_clean(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM queue_right r
     WHERE r.queue = p_queue
       AND pg_catalog.pg_get_userbyid(r.grantee) IS DISTINCT FROM r.grantee_name;
END
$$;

-- _queue_grant_rows inserts rights without any check (queue_create's
-- defaults, queue_grant). A grantee's row is refreshed to its current name.
CREATE OR REPLACE FUNCTION _queue_grant_rows(p_queue text, p_role oid, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO queue_right (queue, privilege, grantee, grantee_name)
    SELECT p_queue, r, p_role, pg_catalog.pg_get_userbyid(p_role) FROM unnest(p_rights) r
    ON CONFLICT (queue, privilege, grantee) DO UPDATE SET grantee_name = excluded.grantee_name;
END
$$;

-- _queue_default_grants: the rights a new queue starts with (see the top of
-- this file), as rows.
CREATE OR REPLACE FUNCTION _queue_default_grants(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_roles record := _role_names();
    v_admin oid := pg_catalog.to_regrole(pg_catalog.quote_ident(v_roles.admin_role));
    v_worker oid := pg_catalog.to_regrole(pg_catalog.quote_ident(v_roles.worker_role));
BEGIN
    IF v_admin IS NOT NULL THEN
        PERFORM _queue_grant_rows(p_queue, v_admin, ARRAY['browse', 'manage']);
    END IF;
    IF v_worker IS NOT NULL AND setting_int('queue_default_grants') = 1 THEN
        PERFORM _queue_grant_rows(p_queue, v_worker, ARRAY['send', 'consume']);
    END IF;
END
$$;

-- queue_grant gives p_role the rights p_rights ('send', 'consume', 'browse',
-- 'manage') on p_queue; granting a right held already changes nothing.
-- The caller needs manage on the queue.
CREATE OR REPLACE FUNCTION queue_grant(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    PERFORM _queue_grant_rows(p_queue, p_role, v_rights);
END
$$;

-- queue_revoke takes the rights p_rights from p_role on p_queue; revoking a
-- right not held is a no-op. Only p_role's own rows go: a member of another
-- role holding the right keeps it through that role. The caller needs manage
-- on the queue (revoking the last manage leaves the queue to superusers).
CREATE OR REPLACE FUNCTION queue_revoke(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    DELETE FROM queue_right r
     WHERE r.queue = p_queue AND r.privilege = ANY (v_rights) AND r.grantee = p_role;
END
$$;

-- queue_rights lists the grants on p_queue (role names, for people and the
-- dashboard). The caller needs manage or browse on the queue.
CREATE OR REPLACE FUNCTION queue_rights(p_queue text)
RETURNS TABLE (queue text, role_name text, rights text[])
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_get(p_queue);
    IF NOT _queue_allowed(p_queue, 'browse') THEN
        PERFORM _queue_require(p_queue, 'manage');
    END IF;
    RETURN QUERY
    SELECT p_queue, r.grantee_name::text, array_agg(r.privilege ORDER BY array_position(_queue_rights_valid(), r.privilege))
      FROM queue_right r
     WHERE r.queue = p_queue AND pg_catalog.pg_get_userbyid(r.grantee) = r.grantee_name
     GROUP BY r.grantee_name
     ORDER BY 2;
END
$$;

-- queue_info: the settings a consumer needs (the Worker reads
-- lease_default); no payloads. The caller needs consume on the queue.
-- Columns spelled out: a function returning the queue row type made
-- citus_distribute fail (circular dependency, citus.sql).
CREATE OR REPLACE FUNCTION queue_info(p_queue text)
RETURNS TABLE (name text, kind text, max_attempts int, lease_default interval, paused boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
BEGIN
    PERFORM _queue_require(p_queue, 'consume');
    RETURN QUERY SELECT v_q.name, v_q.kind, v_q.max_attempts, v_q.lease_default, v_q.paused;
END
$$;
-- pgsweep:end functions/queue_rights.sql
-- pgsweep:include functions/lease.sql
-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still), read after the lease row is locked. The internal
-- _lease_* functions take p_now so that tests can pin the clock (S_owner
-- only, like every underscore routine); NULL there means the database clock.
-- p_now must be within 10 years of the database clock (_check_now,
-- validate.sql).
--
-- Reserved names. pgsweep's own leases (maintain:<part>,
-- retention:<policy>, and anything under pgsweep:) are taken through the
-- internal functions only: lease_acquire, lease_renew and lease_release
-- refuse them to every caller, a superuser included (42501), and
-- lease_release_owner releases them only for an owner none of whose passes
-- still runs. Before 0.34 any worker could hold
-- maintain:recovery or retention:<policy> forever with lease_renew, and
-- recovery and retention stopped for everyone.
--
-- Token rules: a new tenure (first acquire, takeover after expiry, acquire
-- after release, or re-acquire by a holder whose lease lapsed) gets token + 1;
-- a holder re-acquiring a live lease keeps its token. Rows are never deleted,
-- so tokens for a name only ever increase.

-- _lease_reserved: why a lease name is pgsweep's own (NULL: it is not).
CREATE OR REPLACE FUNCTION _lease_reserved(p_name text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE
        WHEN pg_catalog.starts_with(p_name, 'maintain:') THEN 'maintain() holds it while it runs a part'
        WHEN pg_catalog.starts_with(p_name, 'retention:') THEN 'a retention pass holds it while it runs a policy'
        WHEN pg_catalog.starts_with(p_name, 'pgsweep:') THEN 'names under pgsweep: are pgsweep''s own' END
$$;

-- _lease_reserved_refuse raises 42501 for a reserved name.
CREATE OR REPLACE FUNCTION _lease_reserved_refuse(p_verb text, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_why text := _lease_reserved(p_name);
BEGIN
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION '%: lease % is reserved for pgsweep itself (%); no role may take, renew or release it',
            p_verb, pg_catalog.quote_literal(p_name), v_why
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Name your leases outside maintain:, retention: and pgsweep:.';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
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

-- lease_acquire with a pinned clock, for tests (S_owner only: no role is granted a clock).
CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_acquire', p_name);
    RETURN _lease_acquire(p_name, p_owner, p_ttl, p_now);
END
$$;

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_acquire', p_name);
    RETURN _lease_acquire(p_name, p_owner, p_ttl, NULL);
END
$$;

-- A renew succeeds only while the caller's lease is live: a lapsed holder must
-- acquire again (and may get a new token), so it learns that it lapsed.
CREATE OR REPLACE FUNCTION _lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
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

-- lease_renew with a pinned clock, for tests (S_owner only: no role is granted a clock).
CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_renew', p_name);
    RETURN _lease_renew(p_name, p_owner, p_ttl, p_now);
END
$$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_renew', p_name);
    RETURN _lease_renew(p_name, p_owner, p_ttl, NULL);
END
$$;

-- Release ends the tenure at once so that another owner need not wait for the
-- TTL. The row (and its token) stays so the next tenure's token is higher.
CREATE OR REPLACE FUNCTION _lease_release(p_name text, p_owner text, p_now timestamptz)
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

-- lease_release with a pinned clock, for tests (S_owner only: no role is granted a clock).
CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_release', p_name);
    RETURN _lease_release(p_name, p_owner, p_now);
END
$$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _lease_reserved_refuse('lease_release', p_name);
    RETURN _lease_release(p_name, p_owner, NULL);
END
$$;

CREATE OR REPLACE FUNCTION lease_release_owner(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_live boolean;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    -- computed first: the UPDATE of a reference table (Citus) takes plain values
    v_live := _maintain_owner_live(p_owner);
    RETURN QUERY
    UPDATE lease
       SET owner = NULL,
           expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
       -- pgsweep's own leases of that owner only once no session of it
       -- runs a pass (a runner that stopped, history.sql): nobody ends a
       -- running pass's tenure
       AND (_lease_reserved(name) IS NULL OR NOT v_live)
    RETURNING name;
END
$$;

-- _lease_release_owner_all: every lease of p_owner, pgsweep's own included
-- (maintain_fail_owner, for a pass whose session is gone).
-- PL/pgSQL with the clock in a variable, not a parameterized LANGUAGE sql
-- UPDATE with clock_timestamp() in its SET: Citus plans neither (lease is a
-- reference table there).
CREATE OR REPLACE FUNCTION _lease_release_owner_all(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    RETURN QUERY
    UPDATE lease SET owner = NULL, expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
    RETURNING name;
END
$$;

-- lease_rows: the rows of the leases view, read as S_owner (SECURITY
-- DEFINER, like every function here). The view reads its table through it
-- because a monitor holds no privilege on any table, and on Citus a view's
-- tables are read with the privileges of the querying role, not the view's
-- owner (citusdata/citus#6161): `FROM lease` failed there for a monitor
-- login. The columns are spelled out, not RETURNS SETOF lease: with the
-- table's row type as its result, citus_distribute fails ("Citus can not
-- handle circular dependencies between distributed objects") when it
-- distributes the function. Granted to S_monitor
-- (the caller of a view needs EXECUTE on what it calls, so it has no
-- underscore: internals are the owner's); it returns what the view shows,
-- no more. Before 0.34 it was _lease_rows.
CREATE OR REPLACE FUNCTION lease_rows()
RETURNS TABLE (name text, owner text, token bigint, acquired_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT l.name, l.owner, l.token, l.acquired_at, l.expires_at FROM lease l $$;

CREATE OR REPLACE VIEW leases AS
SELECT name,
       owner,
       token,
       acquired_at,
       expires_at,
       (owner IS NOT NULL AND expires_at > clock_timestamp()) AS live
  FROM lease_rows();
-- pgsweep:end functions/lease.sql
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
    PERFORM _check_now('p_now', p_now);
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
    INSERT INTO maintain_pass (owner, started_at, budget, pid, backend_start)
    SELECT o_owner, v_now, p_budget, pg_catalog.pg_backend_pid(), a.backend_start
      FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()
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
    PERFORM _check_now('p_now', p_now);
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
    PERFORM _check_now('p_now', p_now);
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

-- _maintain_session_alive: whether the session that opened a pass (or a
-- retention pass) may still be running it: a backend with its pid exists
-- (and, where the caller can see it, started when the pass's did).
CREATE OR REPLACE FUNCTION _maintain_session_alive(p_pid int, p_backend_start timestamptz, p_started_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_started_at >= pg_catalog.pg_postmaster_start_time()
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                    WHERE a.pid = p_pid
                      AND (a.backend_start IS NULL OR p_backend_start IS NULL OR a.backend_start = p_backend_start))
$$;

-- _maintain_owner_live: whether another session still runs a pass
-- (maintenance or retention) of the owner p_owner (the caller's own session
-- may close its own passes: a pass that raised through a COMMIT).
CREATE OR REPLACE FUNCTION _maintain_owner_live(p_owner text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM maintain_pass mp
                    WHERE mp.owner = p_owner AND mp.finished_at IS NULL AND mp.pid <> pg_catalog.pg_backend_pid()
                      AND _maintain_session_alive(mp.pid, mp.backend_start, mp.started_at))
        OR EXISTS (SELECT 1 FROM retention_pass rp
                    WHERE rp.owner = p_owner AND rp.finished_at IS NULL AND rp.pid <> pg_catalog.pg_backend_pid()
                      AND _maintain_session_alive(rp.pid, rp.backend_start, rp.started_at))
$$;

-- maintain_fail_owner records an error that maintain() could not record
-- itself (a part that raised through a COMMIT, see maintain.sql) against the
-- owner's unfinished passes and runs, and releases the owner's leases. The Go
-- runner calls it after a pass that failed with an SQL error, once the
-- pass's backend is gone. It touches only passes whose session is over: a
-- live pass of that owner (another session still running it) is left
-- alone, and so are the leases then, so no admin can end a pass that runs.
-- Before 0.34 it was _maintain_fail_owner.
CREATE OR REPLACE FUNCTION maintain_fail_owner(p_owner text, p_error text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_error text := left(p_error, 2000);
    v_n bigint;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    IF _maintain_owner_live(p_owner) THEN
        RETURN 0; -- its session still runs a pass: nothing to fail
    END IF;
    -- Its runs stopped with their work unfinished: their parts are due
    -- again at once (backlog), whoever runs next.
    WITH failed AS (
        UPDATE maintain_run SET status = 'failed', finished_at = v_now, error = coalesce(error, v_error)
         WHERE owner = p_owner AND status = 'running'
        RETURNING part)
    UPDATE maintain_state s SET backlog = true FROM failed WHERE s.part = failed.part;
    UPDATE maintain_run SET finished_at = v_now
     WHERE owner = p_owner AND status = 'abandoned' AND finished_at IS NULL;
    UPDATE maintain_pass SET finished_at = v_now, error = coalesce(error || '; ', '') || v_error
     WHERE owner = p_owner AND finished_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM _lease_release_owner_all(p_owner);
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
-- pgsweep:include functions/retention_check.sql
-- Retention: catalog look-ups shared by registration and by every batch.
--
-- Policies store names; every use resolves them again in the catalog, so a
-- dropped or retyped column is an error at the next batch, never a wrong
-- DELETE. Names reach SQL only through %I / regclass quoting.

-- _retention_column returns a column's base type (a domain resolved to the
-- type it is over) as a qualified type name safe to splice into SQL
-- ("pg_catalog"."varchar"), and its type category; NULL when the table has
-- no such (live, user) column. Values are cast to the BASE type, never to
-- a domain: a domain's CHECK (and the functions it calls) is its owner's
-- code, and a cast to it would run that code as whoever casts --
-- <schema>_owner in retention_set_filter before 0.34.
-- A column compares with its base type's values as it is (no check runs
-- when a domain value is read as its base type).
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
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_typ) = 'd' LOOP
        SELECT t.typbasetype INTO v_typ FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
    END LOOP;
    SELECT format('%I.%I', n.nspname, t.typname) INTO type_sql
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE t.oid = v_typ;
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
     WHERE n.nspname = p_schema AND c.relname = p_table AND c.relkind IN ('r', 'p');
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

-- _retention_scalar_type: whether values of a base type can be read from
-- text without running any role's code: a base type (its input function is
-- C, installed by a superuser) or an enum, not an array, composite or range
-- (whose elements may be domains).
CREATE OR REPLACE FUNCTION _retention_scalar_type(p_type regtype)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce((SELECT t.typtype IN ('b', 'e') AND t.typcategory <> 'A'
                       FROM pg_catalog.pg_type t WHERE t.oid = p_type), false)
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
-- run deletes as that role (retention_sql.sql, retention_step). Only its
-- owner, or a member of it, changes it, unregisters it or registers its
-- name again (42501 otherwise, nothing changed); built-in policies
-- (retention_builtin.sql, names under 'pgsweep.') belong to pgsweep and no
-- caller changes them, a superuser included.
--
-- A SECURITY DEFINER function cannot see the role that called it, and a
-- role name passed in could be anyone's; so the caller proves who it is:
-- every entry point below (retention_register, retention_unregister,
-- retention_set_*) runs as its caller and creates an empty temporary table
-- (pg_temp.pgsweep_owner_proof_<random>), which only the calling role can
-- have created and which PostgreSQL records as owned by it; its SECURITY
-- DEFINER half (retention_*_proved) takes the calling role from that
-- table's owner, accepting only such a table of this session
-- (_retention_proof_role); then the wrapper drops it (an error in between
-- rolls its creation back: a proof exists only while its own call runs,
-- and no other code runs then). Code running as another role in the same
-- session (a SECURITY DEFINER trigger of a hostile admin, say) can prove
-- only its own role, never the session's. The owner needs SELECT and
-- DELETE on the table (42501 otherwise); pgsweep's own tables cannot be
-- registered (the built-in policies cover them).

-- _retention_proof_role: the role that created the proof table p_proof of
-- this session (42501 when it is not one).
CREATE OR REPLACE FUNCTION _retention_proof_role(p_proof regclass, p_verb text)
RETURNS regrole
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole;
BEGIN
    SELECT c.relowner::regrole INTO v_owner
      FROM pg_catalog.pg_class c
     WHERE c.oid = p_proof AND c.relnamespace = pg_catalog.pg_my_temp_schema() AND c.relpersistence = 't'
       AND c.relname LIKE 'pgsweep\_owner\_proof\_%';
    IF v_owner IS NULL THEN
        RAISE EXCEPTION '%: no proof of the calling role (call %, not %_proved)', p_verb, p_verb, p_verb
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN v_owner;
END
$$;

-- _retention_builtin_name: whether p_name is reserved for a built-in policy.
CREATE OR REPLACE FUNCTION _retention_builtin_name(p_name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT coalesce(pg_catalog.starts_with(p_name, 'pgsweep.'), false) $$;

-- _retention_policy_owned: the policy p_name for a change by p_role (FOR NO
-- KEY UPDATE), or NULL when there is none (p_must: 22023 instead); 42501
-- when the name is a built-in's or the policy belongs to a role p_role is
-- not a member of.
CREATE OR REPLACE FUNCTION _retention_policy_owned(p_verb text, p_name text, p_role regrole, p_must boolean)
RETURNS retention_policy
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    -- pgsweep's own code (queue_drop, SECURITY DEFINER) proves <schema>_owner
    IF _retention_builtin_name(p_name) AND p_role IS DISTINCT FROM _owner_role() THEN
        RAISE EXCEPTION '%: retention policy % is reserved: names under ''pgsweep.'' are pgsweep''s built-in policies, which follow the queues',
            p_verb, pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Change a queue''s built-in retention with queue_configure (processed_retention, dead_retention).';
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        IF p_must THEN
            PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
        END IF;
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(p_role, v_pol.owner, 'MEMBER') THEN
        RAISE EXCEPTION '%: retention policy % belongs to %; % is not a member of it', p_verb,
            pg_catalog.quote_literal(p_name), v_pol.owner, p_role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Only a policy''s owner (or a member of it) changes, unregisters or re-registers it.';
    END IF;
    RETURN v_pol;
END
$$;

-- retention_register: the caller's proof, then retention_register_proved.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_register_proved(pg_catalog.to_regclass(v_proof), p_name, p_table, p_time_column, p_older_than,
                                      p_status_column, p_statuses, p_batch_size, p_mode, p_interval);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

-- retention_register_proved: retention_register's SECURITY DEFINER half.
CREATE OR REPLACE FUNCTION retention_register_proved(p_proof regclass, p_name text, p_table regclass, p_time_column text,
    p_older_than interval, p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole := _retention_proof_role(p_proof, 'retention_register');
BEGIN
    PERFORM _retention_policy_owned('retention_register', p_name, v_owner, false);
    PERFORM _retention_policy_put(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                  p_batch_size, p_mode, p_interval, v_owner, false);
END
$$;

-- _retention_policy_put validates and stores a policy for p_owner. Only
-- SECURITY DEFINER code calls it (retention_register_proved, the built-in sync):
-- nobody else may execute it.
CREATE OR REPLACE FUNCTION _retention_policy_put(p_name text, p_table regclass, p_time_column text, p_older_than interval,
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
    -- Ordinary or partitioned (retention_partition.sql: every leaf, present
    -- and future), never temporary: a cleaner runs in another session.
    IF v_kind NOT IN ('r', 'p') OR v_persistence = 't' THEN
        PERFORM _retention_invalid('p_table must be an ordinary or partitioned, non-temporary table, got %s (relkind %s)',
            p_table::text, v_kind::text);
    END IF;
    IF p_builtin THEN
        IF p_owner <> _owner_role() OR v_schema <> pg_catalog.current_schema()
           OR v_table NOT IN ('message_processed', 'message_dead') THEN
            RAISE EXCEPTION 'built-in retention policies belong to % and cover pgsweep''s own tables', _owner_role()
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        IF (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_table) = _owner_role() THEN
            PERFORM _retention_invalid('p_table must not be one of pgsweep''s own tables (their built-in policies '
                'cover them: queue_configure processed_retention/dead_retention), got %s', p_table::text);
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

    IF p_older_than IS NOT NULL THEN PERFORM _check_interval('p_older_than', p_older_than, interval '0', interval '100 years'); END IF;
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
    PERFORM _check_size('p_statuses', cardinality(p_statuses), 'max_batch');
    IF p_mode IS NULL OR p_mode NOT IN ('exclusive', 'parallel') THEN
        PERFORM _retention_invalid('p_mode must be ''exclusive'' or ''parallel'', got %s', coalesce(quote_literal(p_mode), 'NULL'));
    END IF;
    IF p_interval IS NULL OR p_interval <= interval '0' THEN
        PERFORM _retention_invalid('p_interval must be greater than 0, got %s', _interval_text(p_interval));
    END IF;
    PERFORM _check_interval('p_interval', p_interval, interval '1 second', interval '30 days');

    -- Checks done: from here on the call succeeds.
    SELECT * INTO v_old FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF FOUND AND (v_old.table_schema, v_old.table_name, v_old.time_column, v_old.time_type, v_old.older_than,
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode, v_old.owner)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_owner) THEN
        DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
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

-- retention_table_name_check: the name rule (validate.sql, at most 300
-- characters) on a table name given as text. retention_resolve_table runs
-- as its caller, so it cannot call _check_text (no role but S_owner
-- executes an underscore routine): it calls this SECURITY DEFINER half.
CREATE OR REPLACE FUNCTION retention_table_name_check(p_table text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_table', p_table, 300);
END
$$;

-- retention_resolve_table resolves a table name on the given search_path
-- (the caller's: it runs as its caller, since schemas the caller may use
-- are searched only if the role that looks may use them too), or raises
-- 22023 naming p_table. It calls only pg_catalog and the definer
-- retention_table_name_check: an invoker routine calls nothing its caller
-- could not. p_search_path is only set for the lookup (and restored): it
-- is the caller's own setting, never stored nor shown.
CREATE OR REPLACE FUNCTION retention_resolve_table(p_table text, p_search_path text)
RETURNS regclass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
    v_pinned text := pg_catalog.current_setting('search_path');
BEGIN
    IF p_table IS NOT NULL THEN
        PERFORM retention_table_name_check(p_table); -- the name rule (validate.sql): before the name is echoed
        BEGIN
            PERFORM pg_catalog.set_config('search_path', coalesce(p_search_path, ''), true);
            v_rel := pg_catalog.to_regclass(p_table);
            PERFORM pg_catalog.set_config('search_path', v_pinned, true);
        EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
            v_rel := NULL;
        END;
        PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    END IF;
    IF v_rel IS NULL THEN
        RAISE EXCEPTION 'p_table must be an existing table, got %',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(p_table, 300)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_rel;
END
$$;

-- The same, for a table given by name, resolved on the CALLER's
-- search_path like every PostgreSQL command (retention_register('x',
-- 'orders_archive', ...) finds public.orders_archive). This overload pins no
-- search_path so that it can read the caller's; its body is one call with
-- every name schema-qualified, and the lookup itself runs in
-- retention_resolve_table, which pins its own path and only resolves the
-- name. A name that resolves to no table is a 22023 naming p_table. A
-- string literal argument resolves to this overload.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
AS $$
    SELECT {{ .schema | default "pgsweep" }}.retention_register(p_name,
        {{ .schema | default "pgsweep" }}.retention_resolve_table(p_table, pg_catalog.current_setting('search_path')),
        p_time_column, p_older_than, p_status_column, p_statuses, p_batch_size, p_mode, p_interval)
$$;

-- retention_unregister removes a policy (its owner's, or a member's: see
-- above); false when there was none.
CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result boolean;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    v_result := retention_unregister_proved(pg_catalog.to_regclass(v_proof), p_name);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION retention_unregister_proved(p_proof regclass, p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _retention_policy_owned('retention_unregister', p_name, _retention_proof_role(p_proof, 'retention_unregister'), false)
       IS NULL THEN
        RETURN false;
    END IF;
    RETURN _retention_unregister(p_name);
END
$$;

-- _retention_unregister: the policy removed, whoever owns it (the built-in
-- sync; retention_unregister checks the caller first).
CREATE OR REPLACE FUNCTION _retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_table text;
BEGIN
    -- partitions a pass detached and no pass dropped yet stay behind
    FOR v_table IN
        SELECT c.oid::regclass::text FROM retention_unit u JOIN pg_catalog.pg_class c ON c.oid = u.block_hi::oid
         WHERE u.policy = p_name AND _retention_unit_detached(u.action, u.block_lo)
    LOOP
        RAISE NOTICE 'retention policy %: the detached partition % is left in place (DROP TABLE it)', p_name, v_table;
    END LOOP;
    DELETE FROM retention_policy WHERE name = p_name;
    RETURN FOUND;
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
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result int;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_time_zone_proved(pg_catalog.to_regclass(v_proof), p_name, p_time_zone);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone_proved(p_proof regclass, p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_time_zone', p_name, _retention_proof_role(p_proof, 'retention_set_time_zone'), true);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    v_at := clock_timestamp();
    UPDATE retention_policy SET time_zone = p_time_zone, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo); -- the open sweep's cutoff was computed in the old zone
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
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result int;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_filter_proved(pg_catalog.to_regclass(v_proof), p_name, p_column, p_values);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_filter_proved(p_proof regclass, p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_filter', p_name, _retention_proof_role(p_proof, 'retention_set_filter'), true);
    PERFORM _retention_set_filter(p_name, p_column, p_values);
END
$$;

-- _retention_set_filter sets a policy's filter, whoever owns it (the
-- built-in sync; retention_set_filter checks the caller first). The values
-- are checked against the column's BASE type (_retention_column): reading
-- them runs no domain CHECK and no function of any role.
CREATE OR REPLACE FUNCTION _retention_set_filter(p_name text, p_column text, p_values text[])
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
        PERFORM _check_size('p_values', cardinality(p_values), 'max_batch');
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        IF NOT _retention_scalar_type(v_col.base_type) THEN
            PERFORM _retention_invalid('p_column must be of a scalar type (not an array, composite or range), got %s of type %s',
                quote_ident(p_column), v_col.base_type::text);
        END IF;
        IF p_values IS NULL OR cardinality(p_values) = 0 OR array_position(p_values, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_values must be a non-empty array without NULLs, got %s', coalesce(p_values::text, 'NULL'));
        END IF;
        -- Values are cast to the column's base type in every batch: fail now, not then.
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
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
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

-- How a sweep walks the table: 'auto' (the default) picks per sweep, see
-- _retention_plan; 'tid_range' or 'keyset' force one.
CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result int;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_strategy_proved(pg_catalog.to_regclass(v_proof), p_name, p_strategy);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy_proved(p_proof regclass, p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_strategy', p_name, _retention_proof_role(p_proof, 'retention_set_strategy'), true);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET strategy = p_strategy, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
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
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result int;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_lease_ttl_proved(pg_catalog.to_regclass(v_proof), p_name, p_ttl);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl_proved(p_proof regclass, p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_lease_ttl', p_name, _retention_proof_role(p_proof, 'retention_set_lease_ttl'), true);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    v_at := clock_timestamp();
    UPDATE retention_policy SET lease_ttl = p_ttl, updated_at = v_at WHERE name = p_name;
END
$$;
-- pgsweep:end functions/retention_register.sql
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
        PERFORM _retention_policy_put(v_want.name, v_want.tbl, v_want.col, v_want.period, NULL, NULL,
                                    1000, 'exclusive', interval '1 minute', _owner_role(), true);
        PERFORM _retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;

    FOR v_name IN
        SELECT p.name FROM retention_policy p
         WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
            OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name))
    LOOP
        PERFORM _retention_unregister(v_name);
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
-- pgsweep:end functions/retention_builtin.sql
-- pgsweep:include functions/retention_partition.sql
-- Retention of partitioned tables (docs/retention.md, "Partitioned tables").
--
-- A policy on a partitioned table (RANGE, LIST or HASH, any depth) covers
-- every leaf partition, present and future: each sweep lists the leaves
-- again when it is planned. A leaf is removed whole -- detached and dropped
-- -- when
--   * its parent is partitioned by RANGE on the policy's time column alone,
--   * its upper bound is at or before the cutoff (every row it can hold is
--     older than the cutoff),
--   * the policy has no status and no filter condition (all its rows would
--     be deleted), and
--   * the policy's owner owns the leaf and its parent (DROP and DETACH need
--     ownership; a policy owner with only SELECT and DELETE gets sweeps).
--     Owns, not is a member of the owner (0.34): the detach runs as the
--     policy's owner, so any code of the leaf must be that role's.
-- A leaf swept row by row runs its DELETE as the leaf's owner when the
-- policy's owner is that role or a member of it; a leaf of another role is
-- skipped, with an error on the pass (retention_step_claim,
-- _retention_run_role): no leaf's code ever runs as a role that did not
-- write it.
-- Every other leaf -- the default partition, LIST and HASH leaves, a leaf
-- the cutoff cuts through -- is swept like a plain table, in tid_range units
-- of its own, with the same guarantees (the full predicate in every DELETE,
-- exclusive and parallel modes).
--
-- A RANGE leaf on the time column whose lower bound is at or after the
-- cutoff holds no eligible row: the plan leaves it alone (0.30). Before, every
-- young leaf got tid_range units and each pass read it whole for nothing:
-- 0.85 of the 1.3 s a pass over the benchmark's 10 leaves took.
--
-- Locks: DETACH takes an ACCESS EXCLUSIVE lock on the parent (and on the
-- default partition, if there is one). A drop unit's first step detaches
-- every droppable leaf of the sweep under that parent in ONE transaction
-- (0.30): the parent's lock is requested with lock_timeout =
-- retention_lock_timeout (1 s by default; writers and readers queue behind
-- the request at most that long), each leaf's with NOWAIT once the parent's
-- is held (a leaf another transaction is reading -- a long report, say -- is
-- skipped and its unit deferred to a later pass, instead of holding the
-- parent while waiting for it), and the lock is held for about 0.1-0.3 ms a
-- leaf plus the commit: inserts wait for it once per pass, not once per
-- leaf. Before the parent, each leaf is locked SHARE UPDATE EXCLUSIVE (which
-- no insert or query waits for) so that an autovacuum worker on it yields
-- first (_retention_detach_body). A parent lock that is not granted in time
-- defers every unit of the step.
-- DETACH ... CONCURRENTLY cannot run in a function or procedure (so not
-- under pg_cron or CALL maintain()) and PostgreSQL refuses it when the table
-- has a default partition: the Go runner runs it before each maintenance
-- pass (0.31, retention_detach.sql); the leaves it claimed or left
-- half-detached are not planned here.
--
-- Detached, not dropped (0.30). The detached leaf is renamed
-- pgsweep_detached_<oid> in the same transaction (its name is free again at
-- once, and nothing writes into it by its old name) and its unit stays open,
-- marked detached (block_lo -1, block_hi its oid). Its rows are gone from
-- the policy's table at that commit, so they count as deleted then, and the
-- pass may end 'drained'. The next pass (retention_due lists the policy at
-- once) drops the detached tables first, in one transaction that holds no
-- lock on the parent: the commit releases the files, 25-50 ms a leaf of
-- 1,000,000 rows on ext4 (docs/benchmarks.md), one buffer-pool scan for all
-- of them. PostgreSQL releases a dropped table's files after the commit has
-- released its locks, so no writer waits for that either way; moving it to
-- the next pass takes it out of the pass that removes the rows.
-- 0.27-0.29 emptied a leaf with TRUNCATE before detaching it; a unit left
-- emptied (block_lo 0) by those versions is detached like any other.
--
-- The rows a detached leaf held are reported as deleted, as a swept leaf's
-- are, counted from the statistics rather than read: the cumulative
-- statistics' live tuples (exact for a partition only ever inserted into),
-- else pg_class.reltuples (the last VACUUM or ANALYZE), and count(*) only for
-- a leaf that has neither. A count(*) reads the whole leaf: 2.2 of the 2.4 s
-- that dropping 8 leaves of 1,000,000 rows took, for a number. The counts
-- are read before the parent is locked.

-- _retention_leaf_bound: the exclusive upper (p_lower false) or inclusive
-- lower bound of a RANGE leaf on the policy's time column, encoded like the
-- cutoff (_retention_cutoff); NULL when the leaf is not such a range (LIST,
-- HASH, DEFAULT, a multi-column or other-column key, MINVALUE, MAXVALUE).
CREATE OR REPLACE FUNCTION _retention_leaf_bound(p_pol retention_policy, p_leaf regclass, p_lower boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_parent regclass;
    v_strategy "char";
    v_natts int;
    v_attnum int;
    v_bound text;
    v_value text;
BEGIN
    SELECT i.inhparent INTO v_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    IF v_parent IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT pt.partstrat, pt.partnatts, pt.partattrs[0] INTO v_strategy, v_natts, v_attnum
      FROM pg_catalog.pg_partitioned_table pt WHERE pt.partrelid = v_parent;
    IF v_strategy IS DISTINCT FROM 'r' OR v_natts <> 1 OR v_attnum = 0
       OR (SELECT a.attname FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_parent AND a.attnum = v_attnum)
          IS DISTINCT FROM p_pol.time_column THEN
        RETURN NULL;
    END IF;
    SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) INTO v_bound FROM pg_catalog.pg_class c WHERE c.oid = p_leaf;
    -- FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-01-02 00:00:00+00')
    v_value := CASE WHEN p_lower THEN substring(v_bound FROM '^FOR VALUES FROM \((.*)\) TO \(')
                    ELSE substring(v_bound FROM ' TO \((.*)\)$') END;
    IF v_value IS NULL OR v_value ILIKE '%MAXVALUE%' OR v_value ILIKE '%MINVALUE%' THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT %s', _retention_encode(p_pol, format('(%s)::%s', v_value,
        CASE p_pol.time_type WHEN 'timestamptz' THEN 'timestamptz' WHEN 'timestamp' THEN 'timestamp' ELSE 'date' END)))
       INTO v_bound;
    RETURN v_bound::timestamptz;
END
$$;

-- _retention_leaf_upper: the exclusive upper bound of a RANGE leaf on the
-- policy's time column (see _retention_leaf_bound).
CREATE OR REPLACE FUNCTION _retention_leaf_upper(p_pol retention_policy, p_leaf regclass)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT _retention_leaf_bound(p_pol, p_leaf, false) $$;

-- _retention_leaf_expired: whether every row a leaf can hold is expired at
-- p_cutoff and the policy deletes them all (no status, no filter): the
-- leaf could be removed whole, were it the policy owner's (see below).
CREATE OR REPLACE FUNCTION _retention_leaf_expired(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_upper timestamptz;
BEGIN
    IF p_pol.status_column IS NOT NULL OR p_pol.filter_column IS NOT NULL THEN
        RETURN false;
    END IF;
    v_upper := _retention_leaf_upper(p_pol, p_leaf);
    RETURN v_upper IS NOT NULL AND v_upper <= p_cutoff;
END
$$;

-- _retention_leaf_droppable: whether a leaf may be removed whole at p_cutoff
-- (see the rules above): expired, and the policy's owner owns it and its
-- parent (0.34: not merely a member of their owners): the detach runs as
-- it, and so does whatever code of the leaf's the count, the locks and the
-- DETACH run. The runner's claim (retention_detach.sql) reports an expired
-- leaf of another owner as skipped.
CREATE OR REPLACE FUNCTION _retention_leaf_droppable(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_parent regclass;
BEGIN
    IF NOT _retention_leaf_expired(p_pol, p_leaf, p_cutoff) THEN
        RETURN false;
    END IF;
    SELECT i.inhparent INTO v_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    RETURN (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_leaf) = p_pol.owner
       AND (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = v_parent) = p_pol.owner;
END
$$;

-- _retention_plan_partitioned plans a sweep of a partitioned table: one
-- 'drop' unit per droppable leaf, tid_range units over every other leaf.
CREATE OR REPLACE FUNCTION _retention_plan_partitioned(p_pol retention_policy, p_now timestamptz, p_owner text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_block_size int := current_setting('block_size')::int;
    v_leaf record;
    v_sweep bigint;
    v_units int := 0;
    v_blocks bigint;
    v_step bigint;
    v_rpb double precision;
    v_at timestamptz := clock_timestamp();
BEGIN
    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units)
    VALUES (p_pol.name, 'tid_range', v_cutoff, v_at, p_owner, 0)
    RETURNING id INTO v_sweep;
    FOR v_leaf IN
        SELECT t.relid::regclass AS leaf, n.nspname, c.relname, c.reltuples, c.relpages
          FROM pg_catalog.pg_partition_tree(v_rel) t
          JOIN pg_catalog.pg_class c ON c.oid = t.relid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE t.isleaf AND c.relkind = 'r'
           -- being detached concurrently by a runner (retention_detach.sql):
           -- half-detached, or claimed and not expired
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = t.relid AND i.inhdetachpending)
           AND NOT EXISTS (SELECT 1 FROM retention_detaching d WHERE d.leaf = t.relid AND d.expires_at > v_at)
         ORDER BY n.nspname, c.relname
    LOOP
        -- a RANGE leaf wholly younger than the cutoff: no row of it is eligible
        CONTINUE WHEN _retention_leaf_bound(p_pol, v_leaf.leaf, true) >= v_cutoff;
        IF _retention_leaf_droppable(p_pol, v_leaf.leaf, v_cutoff) THEN
            v_units := v_units + 1;
            INSERT INTO retention_unit (policy, sweep_id, unit_no, leaf_schema, leaf_name, action)
            VALUES (p_pol.name, v_sweep, v_units, v_leaf.nspname, v_leaf.relname, 'drop');
            CONTINUE;
        END IF;
        v_blocks := pg_catalog.pg_relation_size(v_leaf.leaf) / v_block_size;
        v_rpb := greatest(CASE WHEN v_leaf.reltuples > 0 AND v_leaf.relpages > 0
                               THEN v_leaf.reltuples / v_leaf.relpages END, 1);
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
        INSERT INTO retention_unit (policy, sweep_id, unit_no, block_lo, block_hi, leaf_schema, leaf_name, action)
        SELECT p_pol.name, v_sweep, v_units + g.n, g.lo, CASE WHEN g.lo + v_step < v_blocks THEN g.lo + v_step END,
               v_leaf.nspname, v_leaf.relname, 'delete'
          FROM generate_series(0, greatest(v_blocks - 1, 0), v_step) WITH ORDINALITY g(lo, n);
        v_units := v_units + (greatest(v_blocks - 1, 0) / v_step + 1)::int;
    END LOOP;
    UPDATE retention_sweep SET units = v_units WHERE id = v_sweep;
    PERFORM _retention_sweep_trim(p_pol.name);
    RETURN v_sweep;
END
$$;

-- _retention_drop_sql: the statements that remove a leaf whole, as the
-- policy's owner: count its rows (from the statistics), detach it from its
-- parent, drop it.
CREATE OR REPLACE FUNCTION _retention_drop_sql(p_leaf regclass, OUT count_sql text, OUT detach_sql text, OUT drop_sql text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_leaf text;
    v_parent text;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname) INTO v_leaf
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_leaf;
    SELECT format('%I.%I', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhparent
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE i.inhrelid = p_leaf;
    count_sql := format('SELECT CASE WHEN pg_catalog.pg_stat_get_live_tuples(c.oid) > 0 '
                        'THEN pg_catalog.pg_stat_get_live_tuples(c.oid) '
                        'WHEN c.reltuples >= 0 THEN c.reltuples::bigint '
                        'ELSE (SELECT count(*) FROM ONLY %s) END '
                        'FROM pg_catalog.pg_class c WHERE c.oid = %s', v_leaf, p_leaf::oid);
    detach_sql := format('ALTER TABLE %s DETACH PARTITION %s', v_parent, v_leaf);
    drop_sql := format('DROP TABLE %s', v_leaf);
END
$$;

-- _retention_unit_detached: whether a unit is a drop unit whose leaf a pass
-- detached (block_lo -1, block_hi the detached table's oid); its table is
-- dropped by a later pass whatever happens to the policy's definition.
CREATE OR REPLACE FUNCTION _retention_unit_detached(p_action text, p_block_lo bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_action = 'drop' AND p_block_lo IS NOT DISTINCT FROM -1 $$;

-- _retention_depended_on: whether something outside a detached table
-- depends on it -- a view made on it since, a foreign key to it -- so that
-- its DROP would fail (every pass, if nothing stopped trying). The table's
-- own constraints do not count: a CHECK constraint (one inherited from the
-- parent, the one DETACH ... CONCURRENTLY adds) depends on the table's
-- columns, and until 0.33 it made every detached leaf of a table with a
-- CHECK constraint stay in place, never dropped. The pass's drops
-- (_retention_release_claim) and the runner's (retention_detach.sql) ask
-- this one function.
CREATE OR REPLACE FUNCTION _retention_depended_on(p_table oid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                    WHERE d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid = p_table
                      AND d.deptype = 'n'
                      AND NOT (d.classid = 'pg_catalog.pg_constraint'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
                                            WHERE k.oid = d.objid AND k.conrelid = p_table))
                      -- the table's own rules and column defaults (a generated
                      -- column reads other columns) go with it, as its own
                      -- constraints do (0.34: such leaves were detached, never dropped)
                      AND NOT (d.classid = 'pg_catalog.pg_rewrite'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite w
                                            WHERE w.oid = d.objid AND w.ev_class = p_table))
                      AND NOT (d.classid = 'pg_catalog.pg_attrdef'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef a
                                            WHERE a.oid = d.objid AND a.adrelid = p_table)))
$$;

-- _retention_detached_name: the name a detached leaf gets until a later
-- pass drops it.
CREATE OR REPLACE FUNCTION _retention_detached_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_' || p_leaf::text $$;

-- _retention_detach_body: the PL/pgSQL body (run as the policy's owner by
-- retention_step) that detaches the leaves p_leaves of p_parent in one
-- transaction:
--   1. each leaf's rows counted, from the statistics;
--   2. each leaf locked SHARE UPDATE EXCLUSIVE, with lock_timeout raised to
--      retention_lock_timeout + deadlock_timeout: that mode blocks no insert
--      and no query, only VACUUM, ANALYZE and DDL; an autovacuum worker on
--      the leaf (one starts on every partition that got many inserts) is
--      cancelled by PostgreSQL after deadlock_timeout instead of making the
--      leaf wait for a later pass; a leaf still held after that is skipped;
--   3. the parent locked ACCESS EXCLUSIVE, with lock_timeout =
--      retention_lock_timeout: from here on inserts and queries on the
--      parent wait;
--   4. each leaf locked ACCESS EXCLUSIVE NOWAIT (a transaction reading or
--      writing the leaf directly makes it skipped: nobody waits while the
--      parent is locked), detached and renamed.
-- It returns the rows of the leaves it detached (deleted) and how many it
-- detached (sampled); which ones, the catalog tells (_retention_step_detached).
CREATE OR REPLACE FUNCTION _retention_detach_body(p_parent regclass, p_leaves oid[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_parent text;
    v_counts text := '';
    v_prelocks text := '';
    v_steps text := '';
    v_leaf record;
    v_sql record;
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_deadlock bigint := (extract(epoch FROM pg_catalog.current_setting('deadlock_timeout')::interval) * 1000)::bigint;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_parent;
    IF v_parent IS NULL THEN
        -- The leaf is no longer attached: a runner's DETACH ... CONCURRENTLY
        -- took it between the plan and this step. Nothing to detach; the
        -- caller follows the catalog (_retention_step_detached). Before, the
        -- body read 'LOCK TABLE ONLY  IN ...': a syntax error for the pass.
        RETURN 'BEGIN RETURN QUERY SELECT 0::bigint, NULL::float8, 0::bigint, NULL::timestamptz[]; END';
    END IF;
    FOR v_leaf IN
        SELECT l.oid, l.ord, format('%I.%I', n.nspname, c.relname) AS name
          FROM unnest(p_leaves) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        v_sql := _retention_drop_sql(v_leaf.oid::regclass);
        -- A runner's DETACH ... CONCURRENTLY (retention_detach.sql) may have
        -- detached or dropped the leaf since it was claimed (undefined_table:
        -- gone, or "not a partition"), or left it half-detached
        -- (object_not_in_prerequisite_state: a plain DETACH is refused): the
        -- leaf is skipped, its unit deferred.
        v_counts := v_counts || format('BEGIN EXECUTE %L INTO c; EXCEPTION WHEN undefined_table THEN c := 0; END; r[%s] := c; ',
                                       v_sql.count_sql, v_leaf.ord);
        v_prelocks := v_prelocks || format(
            'BEGIN EXECUTE %L; ok[%s] := true; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; ',
            format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE', v_leaf.name), v_leaf.ord, v_leaf.ord);
        v_steps := v_steps || format(
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN object_not_in_prerequisite_state OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN EXECUTE %L; n := n + r[%s]; d := d + 1; END IF; ',
            v_leaf.ord, format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_leaf.name), v_leaf.ord,
            v_leaf.ord, v_sql.detach_sql, v_leaf.ord,
            v_leaf.ord, format('ALTER TABLE %s RENAME TO %I', v_leaf.name, _retention_detached_name(v_leaf.oid)), v_leaf.ord);
    END LOOP;
    RETURN format('DECLARE n bigint := 0; d bigint := 0; c bigint; r bigint[]; ok boolean[]; BEGIN %s '
                  'PERFORM pg_catalog.set_config(''lock_timeout'', %L, true); %s'
                  'PERFORM pg_catalog.set_config(''lock_timeout'', %L, true); EXECUTE %L; %s'
                  'RETURN QUERY SELECT n, NULL::float8, d, NULL::timestamptz[]; END',
                  v_counts, (v_timeout + v_deadlock) || 'ms', v_prelocks, v_timeout || 'ms',
                  format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE', v_parent), v_steps);
END
$$;

-- _retention_release_body: the PL/pgSQL body (run as the policy's owner)
-- that drops the detached tables p_tables in one transaction; a table
-- someone else holds past lock_timeout is left to a later pass.
CREATE OR REPLACE FUNCTION _retention_release_body(p_tables oid[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_steps text := '';
    v_name text;
BEGIN
    FOR v_name IN
        SELECT format('%I.%I', n.nspname, c.relname)
          FROM unnest(p_tables) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        v_steps := v_steps || format('BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available THEN NULL; END; ',
                                     format('DROP TABLE %s', v_name));
    END LOOP;
    RETURN format('BEGIN %s RETURN QUERY SELECT 0::bigint, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', v_steps);
END
$$;
-- pgsweep:end functions/retention_partition.sql
-- pgsweep:include functions/retention_shards.sql
-- Retention of a distributed (Citus) table: shard by shard
-- (docs/operations.md, "Scaling out with Citus").
--
-- On a Citus coordinator a hash-distributed table is an empty shell: its rows
-- live in shards on the workers. Planned like a plain table, a sweep would
-- see no blocks and make one unit, and each batch would be one multi-shard
-- DELETE over every shard -- unbounded, and with ctid in it, which Citus
-- runs on every shard (the same ctid means a different row in each). So a
-- policy on a hash-distributed table (pg_dist_partition.partmethod 'h') is
-- planned per shard instead:
--
--   * units per shard (retention_unit.shard_id): tid_range units over the
--     shard's own blocks, sized like a plain table's from the shard's size
--     and statistics (read on its worker), or, for a keyset policy, one
--     window (-infinity, infinity) per shard. Units are numbered round-robin
--     over the shards, so parallel cleaners spread over the shards (and the
--     workers) instead of queuing on the first one.
--   * a batch is two statements, both on that shard alone:
--       1. a read, sent to the shard's worker as text with
--          master_run_on_worker (a connection of its own, as the policy's
--          owner): the ctid and distribution value of at most batch_size
--          eligible rows of the unit's range of that shard, in ctid (or
--          time) order. It locks nothing and changes nothing; it only says
--          which rows to try.
--       2. the DELETE, on the coordinator in the batch's transaction, of
--          exactly those rows: WHERE <distribution column> = ANY (their
--          values) AND ctid = ANY (their ctids) AND <the policy's full
--          predicate>. The distribution values all hash into the one shard,
--          so Citus's router planner sends the DELETE to that shard only
--          (a single-shard statement, where ctid is safe), and the full
--          predicate is re-checked on every row as it is deleted (READ
--          COMMITTED: a row re-queued since the read is skipped; a row
--          updated since the read has a new ctid and is skipped). A batch
--          deletes at most batch_size rows.
--     A read that returned batch_size rows leaves its unit open (the next
--     batch reads the unit again: the rows just deleted are gone); one that
--     returned fewer, or deleted nothing, finishes it.
--   * the DELETE waits for a row lock no longer than retention_lock_timeout,
--     on the worker too: Citus does not pass a function's settings on to
--     the workers, so the batch sets lock_timeout with SET LOCAL under
--     citus.propagate_set_commands = local, which Citus sends with the
--     transaction to the shard's worker. A lock timeout there (55P03) defers
--     the unit to a later pass, as on one server (_retention_step).
--   * never a multi-shard statement with ctid or SKIP LOCKED, exclusive and
--     parallel modes unchanged (units are claimed as before).
-- Reference tables and Citus local tables hold all their rows on the
-- coordinator's side of a single statement: they are planned as today, as
-- are plain tables (the check is one catalog read when Citus is installed,
-- one pg_extension read when it is not). pgsweep's own built-in policies
-- (message_processed, message_dead) filter by one queue, their distribution
-- column, so their statements already go to one shard: they are planned as
-- today too.
--
-- The read's own session has no lock_timeout (master_run_on_worker sends
-- one statement, and a relation lock is taken before any set_config in it
-- could run): DDL that holds the shard's lock holds the batch up.
--
-- Values in the read travel as literals (format %L; a time as ISO 8601 in
-- UTC, so no DateStyle or TimeZone of either session changes it):
-- master_run_on_worker takes text only. A shard that no longer exists when
-- its unit comes up (split, or its table redistributed) drops the unit; its
-- rows are swept by the next sweep. A shard that moved is found where it is
-- now (pg_dist_placement is read at every batch).

-- _retention_distribution: the distribution column of a hash-distributed
-- Citus table, NULL for any other table (and without Citus).
CREATE OR REPLACE FUNCTION _retention_distribution(p_rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_col text;
BEGIN
    IF NOT _citus_available() THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT pg_catalog.column_to_column_name(d.logicalrelid, d.partkey) FROM pg_catalog.pg_dist_partition d '
            'WHERE d.logicalrelid = $1 AND d.partmethod = ''h'''
       INTO v_col USING p_rel;
    RETURN v_col;
END
$$;

-- _retention_shard_placement: where a shard of p_rel is now -- the node and
-- port of its active primary placement and its name (schema-qualified,
-- quoted) -- or NULLs when the shard is gone.
CREATE OR REPLACE FUNCTION _retention_shard_placement(p_rel regclass, p_shard bigint,
    OUT node text, OUT port int, OUT shard text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    EXECUTE 'SELECT n.nodename::text, n.nodeport, pg_catalog.shard_name(s.logicalrelid, s.shardid, false) '
            'FROM pg_catalog.pg_dist_shard s '
            'JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid '
            'JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid '
            'WHERE s.shardid = $1 AND s.logicalrelid = $2 AND n.noderole = ''primary'' AND n.isactive '
            'ORDER BY p.placementid LIMIT 1'
       INTO node, port, shard USING p_shard, p_rel;
END
$$;

-- _retention_time_literal: a time as an SQL literal that means the same in
-- any session (ISO 8601 in UTC; infinity as itself).
CREATE OR REPLACE FUNCTION _retention_time_literal(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.format('%L::pg_catalog.timestamptz', CASE WHEN pg_catalog.isfinite(p_at)
        THEN pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE p_at::text END)
$$;

-- _retention_plan_shards plans a sweep of a hash-distributed table: units
-- per shard (see the top of this file).
CREATE OR REPLACE FUNCTION _retention_plan_shards(p_pol retention_policy, p_now timestamptz, p_owner text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_strategy text := CASE WHEN p_pol.strategy = 'keyset' THEN 'keyset' ELSE 'tid_range' END;
    v_block_size int := current_setting('block_size')::int;
    v_shards bigint[];
    v_nodes text[] := '{}';
    v_ports int[] := '{}';
    v_cmds text[] := '{}';
    v_keys text[] := '{}';
    v_k int;
    v_where record;
    v_name text[];
    v_sweep bigint;
    v_sizes text[] := '{}';
    v_units int;
    v_blocks bigint := 0;
    v_at timestamptz := clock_timestamp();
    r record;
    i int;
BEGIN
    EXECUTE 'SELECT pg_catalog.array_agg(s.shardid ORDER BY s.shardid) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1'
       INTO v_shards USING v_rel;
    -- Each shard's blocks and statistics, read on its worker: one command
    -- (one connection) a node, finding the shards by name (no privilege on
    -- the table's schema is needed).
    FOR i IN 1 .. coalesce(cardinality(v_shards), 0) LOOP
        v_where := _retention_shard_placement(v_rel, v_shards[i]);
        IF v_where.node IS NULL THEN
            RAISE EXCEPTION 'retention policy %: shard % of % has no active placement', p_pol.name, v_shards[i], v_rel::text
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        v_name := parse_ident(v_where.shard);
        v_k := array_position(v_keys, v_where.node || ':' || v_where.port);
        IF v_k IS NULL THEN
            v_keys := v_keys || (v_where.node || ':' || v_where.port);
            v_nodes := v_nodes || v_where.node;
            v_ports := v_ports || v_where.port;
            v_cmds := v_cmds || ''::text;
            v_k := cardinality(v_keys);
        END IF;
        v_cmds[v_k] := v_cmds[v_k] || CASE WHEN v_cmds[v_k] = '' THEN '' ELSE ', ' END
                       || format('(%s::bigint, %L, %L)', v_shards[i], v_name[1], v_name[2]);
    END LOOP;
    -- "shard blocks tuples pages", one line a shard
    FOR r IN SELECT * FROM pg_catalog.master_run_on_worker(v_nodes, v_ports, ARRAY(
                 SELECT format('SELECT pg_catalog.string_agg(v.shard || '' '' || coalesce(pg_catalog.pg_relation_size(c.oid) / %s '
                               '|| '' '' || c.reltuples || '' '' || c.relpages, ''0 -1 0''), '','') '
                               'FROM (VALUES %s) v(shard, nsp, rel) '
                               'LEFT JOIN (pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace) '
                               'ON n.nspname = v.nsp AND c.relname = v.rel', v_block_size, c)
                   FROM unnest(v_cmds) WITH ORDINALITY u(c, o) ORDER BY o), true) LOOP
        IF NOT r.success THEN
            RAISE EXCEPTION 'retention policy %: reading the shard sizes of % on %:% failed: %', p_pol.name, v_rel::text,
                r.node_name, r.node_port, r.result USING ERRCODE = 'external_routine_exception';
        END IF;
        v_sizes := v_sizes || string_to_array(r.result, ',');
    END LOOP;
    SELECT coalesce(sum(split_part(l, ' ', 2)::bigint), 0) INTO v_blocks FROM unnest(v_sizes) l;

    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units, blocks)
    VALUES (p_pol.name, v_strategy, v_cutoff, v_at, p_owner, 0, v_blocks)
    RETURNING id INTO v_sweep;
    IF v_strategy = 'tid_range' THEN
        -- As a plain table's (retention_plan.sql), per shard: rows per block
        -- from the shard's statistics, or, before its first ANALYZE, about
        -- 64 bytes a row (a read stops at batch_size rows whatever a unit
        -- holds); the last unit of a shard is open-ended.
        INSERT INTO retention_unit (policy, sweep_id, unit_no, block_lo, block_hi, shard_id)
        SELECT p_pol.name, v_sweep, row_number() OVER (ORDER BY g.k, s.shard), g.lo,
               CASE WHEN g.lo + s.step < s.blocks THEN g.lo + s.step END, s.shard
          FROM (SELECT z.shard, z.blocks,
                       greatest(1, ceil(p_pol.batch_size / greatest(
                           CASE WHEN z.tuples > 0 AND z.pages > 0 THEN z.tuples / z.pages ELSE v_block_size / 64.0 END,
                           1)))::bigint AS step
                  FROM (SELECT split_part(l, ' ', 1)::bigint AS shard, split_part(l, ' ', 2)::bigint AS blocks,
                               split_part(l, ' ', 3)::double precision AS tuples, split_part(l, ' ', 4)::bigint AS pages
                          FROM unnest(v_sizes) l) z) s
         CROSS JOIN LATERAL generate_series(0, greatest(s.blocks - 1, 0), s.step) WITH ORDINALITY g(lo, k);
    ELSE
        INSERT INTO retention_unit (policy, sweep_id, unit_no, time_lo, time_hi, shard_id)
        SELECT p_pol.name, v_sweep, row_number() OVER (ORDER BY s.shard), '-infinity', 'infinity', s.shard
          FROM unnest(v_shards) s(shard);
    END IF;
    GET DIAGNOSTICS v_units = ROW_COUNT;
    UPDATE retention_sweep SET units = v_units WHERE id = v_sweep;
    PERFORM _retention_sweep_trim(p_pol.name);
    RETURN v_sweep;
END
$$;

-- _retention_shard_body: the PL/pgSQL body of one batch on one shard, run
-- as the policy's owner in the temporary function of retention_step
-- (its parameters: $1, $2 the unit's range as text -- TIDs or encoded
-- times --, $3 the cutoff, $4 the statuses, $5 the filter values). The read
-- goes to the shard's worker, the DELETE through the coordinator to that
-- shard alone (see the top of this file). Returns the rows deleted and,
-- as sampled, the rows the read returned.
CREATE OR REPLACE FUNCTION _retention_shard_body(p_pol retention_policy, p_strategy text, p_shard bigint,
    p_lo text, p_hi text, p_cutoff timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_dist text := _retention_distribution(v_rel);
    v_type text;
    v_where record;
    v_range text;
    v_order text;
    v_read text;
    v_delete text;
BEGIN
    IF v_dist IS NULL THEN
        RAISE EXCEPTION 'retention policy %: % is no longer a distributed table', p_pol.name, v_rel::text
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    SELECT format_type(a.atttypid, a.atttypmod) INTO v_type
      FROM pg_catalog.pg_attribute a WHERE a.attrelid = v_rel AND a.attname = v_dist;
    v_where := _retention_shard_placement(v_rel, p_shard);
    IF v_where.node IS NULL THEN
        RAISE EXCEPTION 'retention policy %: shard % of % has no active placement', p_pol.name, p_shard, v_rel::text
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF p_strategy = 'tid_range' THEN
        v_range := format('ctid >= %L::pg_catalog.tid AND ctid < %L::pg_catalog.tid', p_lo, p_hi);
        v_order := 'ctid';
    ELSE
        v_range := format('%1$I >= %2$s AND %1$I < %3$s', p_pol.time_column,
                          _retention_param(p_pol, _retention_time_literal(p_lo::timestamptz)),
                          _retention_param(p_pol, _retention_time_literal(p_hi::timestamptz)));
        v_order := format('%I', p_pol.time_column);
    END IF;
    v_read := format(
        'SELECT pg_catalog.json_build_object(''n'', pg_catalog.count(*), ''t'', pg_catalog.array_agg(s.t), ''k'', pg_catalog.array_agg(s.k))::text '
        'FROM (SELECT ctid::text AS t, %I::text AS k FROM %s WHERE %s AND %s ORDER BY %s LIMIT %s) s',
        v_dist, v_where.shard, v_range,
        _retention_predicate_with(p_pol, v_rel, _retention_time_literal(p_cutoff),
                                  format('%L', p_pol.statuses::text), format('%L', p_pol.filter_values::text)),
        v_order, p_pol.batch_size);
    v_delete := format('DELETE FROM %I.%I WHERE %I = ANY ($2::%s[]) AND ctid = ANY ($1) AND %s',
                       p_pol.table_schema, p_pol.table_name, v_dist, v_type, _retention_predicate(p_pol, v_rel));
    RETURN format($b$DECLARE r record; j json; c bigint; n bigint := 0;
BEGIN
    SELECT w.success, w.result INTO r FROM pg_catalog.master_run_on_worker(ARRAY[%L], ARRAY[%s], ARRAY[%L], false) w;
    IF NOT r.success THEN
        RAISE EXCEPTION USING ERRCODE = 'external_routine_exception', MESSAGE = %L || r.result;
    END IF;
    j := r.result::json;
    c := (j ->> 'n')::bigint;
    IF c > 0 THEN
        EXECUTE 'SET LOCAL lock_timeout = ' || quote_literal(current_setting('lock_timeout'));
        EXECUTE %L USING ARRAY(SELECT json_array_elements_text(j -> 't'))::tid[],
                         ARRAY(SELECT json_array_elements_text(j -> 'k')), $3, $4, $5;
        GET DIAGNOSTICS n = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT n, NULL::float8, c, NULL::timestamptz[];
END$b$,
        v_where.node, v_where.port, v_read,
        format('retention policy %s: reading shard %s on %s:%s failed: ', p_pol.name, v_where.shard, v_where.node, v_where.port),
        v_delete);
END
$$;
-- pgsweep:end functions/retention_shards.sql
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
-- Values travel as parameters, never as SQL text; names through %I. (One
-- exception: the read a batch on a shard of a distributed (Citus) table
-- sends to the shard's worker takes literals, format %L: it goes there as
-- text. Its DELETE takes parameters like every other; retention_shards.sql.)
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

-- _retention_predicate_with is the same test over the given SQL for the
-- cutoff, the statuses and the filter values: parameters ($3..$5), or
-- literals for a statement sent as text to another node (a shard's batch,
-- _retention_shard_body).
CREATE OR REPLACE FUNCTION _retention_predicate_with(p_pol retention_policy, p_rel regclass,
    p_cutoff text, p_statuses text, p_filters text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, p_cutoff));
    v_col record;
BEGIN
    IF p_pol.status_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.status_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.status_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY (%s::%s[])', p_pol.status_column, p_statuses, v_col.type_sql);
    END IF;
    IF p_pol.filter_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.filter_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.filter_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY (%s::%s[])', p_pol.filter_column, p_filters, v_col.type_sql);
    END IF;
    RETURN v_sql;
END
$$;

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT _retention_predicate_with(p_pol, p_rel, '$3', '$4', '$5') $$;

-- _retention_sweep_sql builds a unit's DELETE on the policy's table, or on
-- p_target, one leaf of it (a partitioned policy's units name their leaf).
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_tbl text := format('%I.%I', p_pol.table_schema, p_pol.table_name);
    v_pred text := _retention_predicate(p_pol, v_rel);
BEGIN
    IF p_target IS NOT NULL THEN
        SELECT format('%I.%I', n.nspname, c.relname) INTO v_tbl
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_target;
    END IF;
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
-- retention_step creates it in this session's pg_temp (built now from
-- validated policy fields; no stored SQL), hands it to the owner, calls it
-- once and drops it, all in the caller's transaction, so no other session
-- ever sees it and it is never called twice. Creating and dropping costs
-- about 0.2 ms a batch. The caller (maintain's or retention_run's session
-- role) must be able to act as the owner (be a member of it, or a
-- superuser); otherwise the run of that policy fails with 42501 and says
-- which GRANT is missing, and other policies still run.
--
-- The owner's code (triggers, rules, row-level security policies) runs in
-- the maintenance session, between the caller's own statements. Whatever it
-- leaves in that session would act later with the caller's rights, which
-- may be a superuser's: a search_path set with plain SET outlives the
-- function that pins it (PostgreSQL keeps a SET made inside a function with a
-- SET clause), so the caller's next unqualified name would resolve in the
-- owner's schema; a temporary view or type would shadow a catalog name; a
-- prepared statement would stand in for the client's; and a role's
-- membership is checked against the session user, so a call made inside the
-- statement could register a policy as any role the caller may act as. So
-- retention_step checks, before it looks up any name again, that the
-- statement left search_path, every setting a role may SET, the session's
-- prepared statements, retention_policy and the catalogs' object rows
-- (pg_class, pg_type, pg_proc inserts) as it found them. If not, it deletes
-- the new prepared statements (they outlive a rollback) and raises 42501:
-- the batch rolls back with everything the statement did (settings,
-- objects, rows); the error is recorded on the policy's pass and other
-- policies still run. The check costs about 0.1 ms a batch
-- (retention_step_session_state). docs/security.md tells the whole story.
--
-- Built-in policies (owner <schema>_owner, pgsweep's own tables) run in
-- _retention_builtin_exec instead, inside retention_step_claim (SECURITY
-- DEFINER, <schema>_owner), which builds the statement from the policy
-- itself: no code of another role ever runs there.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        -- a drop unit's two steps (retention_partition.sql): detach leaves,
        -- later drop the detached tables; bodies built from the catalog there
        WHEN 'detach' THEN p_sql
        WHEN 'release' THEN p_sql
        WHEN 'delete' THEN pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L USING $1, $2, $3, $4, $5; GET DIAGNOSTICS n = ROW_COUNT; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', p_sql)
        ELSE pg_catalog.format(
            'BEGIN RETURN QUERY EXECUTE %L USING $1, $2, $3, $4, $5; END',
            'SELECT NULL::bigint, s.* FROM (' || p_sql || ') s') END
$$;

-- _retention_exec_settings: the settings a statement runs with: a
-- tid_range DELETE is pinned to its Tid Range Scan (see retention_plan.sql);
-- JIT off everywhere, batches are too short to gain from it; and it waits
-- for no lock longer than retention_lock_timeout (a row an application holds
-- locked defers the unit to a later pass, _retention_step).
CREATE OR REPLACE FUNCTION _retention_exec_settings(p_strategy text)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_strategy
        WHEN 'tid_range' THEN ' SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off SET jit = off'
        ELSE ' SET jit = off' END
        || pg_catalog.format(' SET lock_timeout = %L',
                             (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms')
$$;

-- retention_step_session_state: what retention_step compares before and
-- after a statement run as a policy's owner. settings: every setting a role
-- may SET (context 'user' in PostgreSQL 15; a name a server lacks reads as
-- NULL) but search_path, which is pinned here (the caller compares its own);
-- prepared: the session's prepared statements (name and text); writes: rows
-- this transaction wrote to retention_policy and inserted into pg_class,
-- pg_type and pg_proc (a new table, view, type or function), from the
-- transaction's statistics counters, or, with track_counts off, a digest of
-- the policies and of this session's temporary objects.
CREATE OR REPLACE FUNCTION retention_step_session_state(OUT settings text[], OUT prepared text[], OUT writes text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    settings := ARRAY(SELECT n || '=' || coalesce(pg_catalog.current_setting(n, true), '<unset>') FROM pg_catalog.unnest(ARRAY[
        'DateStyle', 'IntervalStyle', 'TimeZone', 'application_name', 'array_nulls', 'backend_flush_after',
        'backslash_quote', 'bytea_output', 'check_function_bodies', 'client_connection_check_interval',
        'client_encoding', 'client_min_messages', 'commit_siblings', 'constraint_exclusion', 'cpu_index_tuple_cost',
        'cpu_operator_cost', 'cpu_tuple_cost', 'cursor_tuple_fraction', 'debug_pretty_print', 'debug_print_parse',
        'debug_print_plan', 'debug_print_rewritten', 'default_statistics_target', 'default_table_access_method',
        'default_tablespace', 'default_text_search_config', 'default_toast_compression',
        'default_transaction_deferrable', 'default_transaction_isolation', 'default_transaction_read_only',
        'effective_cache_size', 'effective_io_concurrency', 'enable_async_append', 'enable_bitmapscan',
        'enable_gathermerge', 'enable_hashagg', 'enable_hashjoin', 'enable_incremental_sort', 'enable_indexonlyscan',
        'enable_indexscan', 'enable_material', 'enable_memoize', 'enable_mergejoin', 'enable_nestloop',
        'enable_parallel_append', 'enable_parallel_hash', 'enable_partition_pruning', 'enable_partitionwise_aggregate',
        'enable_partitionwise_join', 'enable_seqscan', 'enable_sort', 'enable_tidscan', 'escape_string_warning',
        'exit_on_error', 'extra_float_digits', 'force_parallel_mode', 'from_collapse_limit', 'geqo', 'geqo_effort',
        'geqo_generations', 'geqo_pool_size', 'geqo_seed', 'geqo_selection_bias', 'geqo_threshold',
        'gin_fuzzy_search_limit', 'gin_pending_list_limit', 'hash_mem_multiplier',
        'idle_in_transaction_session_timeout', 'idle_session_timeout', 'jit', 'jit_above_cost', 'jit_expressions',
        'jit_inline_above_cost', 'jit_optimize_above_cost', 'jit_tuple_deforming', 'join_collapse_limit',
        'lc_monetary', 'lc_numeric', 'lc_time', 'local_preload_libraries', 'lock_timeout',
        'log_parameter_max_length_on_error', 'logical_decoding_work_mem', 'maintenance_io_concurrency',
        'maintenance_work_mem', 'max_parallel_maintenance_workers', 'max_parallel_workers',
        'max_parallel_workers_per_gather', 'min_parallel_index_scan_size', 'min_parallel_table_scan_size',
        'parallel_leader_participation', 'parallel_setup_cost', 'parallel_tuple_cost', 'password_encryption',
        'plan_cache_mode', 'quote_all_identifiers', 'random_page_cost', 'recursive_worktable_factor',
        'restrict_nonsystem_relation_kind', 'row_security', 'seq_page_cost', 'standard_conforming_strings',
        'statement_timeout', 'stats_fetch_consistency', 'synchronize_seqscans', 'synchronous_commit',
        'tcp_keepalives_count', 'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_user_timeout', 'temp_buffers',
        'temp_tablespaces', 'timezone_abbreviations', 'trace_notify', 'trace_sort', 'transaction_deferrable',
        'transaction_isolation', 'transaction_read_only', 'transform_null_equals', 'vacuum_cost_delay',
        'vacuum_cost_limit', 'vacuum_cost_page_dirty', 'vacuum_cost_page_hit', 'vacuum_cost_page_miss',
        'vacuum_failsafe_age', 'vacuum_freeze_min_age', 'vacuum_freeze_table_age', 'vacuum_multixact_failsafe_age',
        'vacuum_multixact_freeze_min_age', 'vacuum_multixact_freeze_table_age', 'wal_sender_timeout',
        'wal_skip_threshold', 'work_mem', 'xmlbinary', 'xmloption', 'plpgsql.check_asserts', 'plpgsql.extra_errors',
        'plpgsql.extra_warnings', 'plpgsql.print_strict_params']) n);
    prepared := ARRAY(SELECT p.name || ' ' || p.statement FROM pg_catalog.pg_prepared_statements p ORDER BY 1);
    IF pg_catalog.current_setting('track_counts')::boolean THEN
        writes := (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r) + pg_catalog.pg_stat_get_xact_tuples_updated(r)
                              + pg_catalog.pg_stat_get_xact_tuples_deleted(r))
                     FROM pg_catalog.unnest(ARRAY['retention_policy'::regclass]) r)::text
                  || ' ' ||
                  (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r))
                     FROM pg_catalog.unnest(ARRAY['pg_catalog.pg_class'::regclass, 'pg_catalog.pg_type', 'pg_catalog.pg_proc']) r)::text;
    ELSE
        writes := (SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(p::text, ',' ORDER BY p.name), '')) FROM retention_policy p)
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.pg_my_temp_schema())::text
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_type t WHERE t.typnamespace = pg_catalog.pg_my_temp_schema())::text
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_proc f WHERE f.pronamespace = pg_catalog.pg_my_temp_schema())::text;
    END IF;
END
$$;

-- retention_step_session_restore deletes the prepared statements that are not
-- in p_prepared (as retention_step_session_state lists them): a statement run
-- as a policy's owner made them, and they outlive a rollback. It returns
-- their names.
CREATE OR REPLACE FUNCTION retention_step_session_restore(p_prepared text[])
RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_names text[] := ARRAY(SELECT p.name FROM pg_catalog.pg_prepared_statements p
                             WHERE NOT (p.name || ' ' || p.statement) = ANY (coalesce(p_prepared, '{}')) ORDER BY 1);
    v_name text;
BEGIN
    FOREACH v_name IN ARRAY v_names LOOP
        EXECUTE pg_catalog.format('DEALLOCATE %I', v_name);
    END LOOP;
    RETURN v_names;
END
$$;

-- retention_step does one step of a pass: at most one batch. It returns
-- false when the pass is over (outcome recorded), true to be called again.
-- It runs as its caller (SECURITY INVOKER): the statement on the policy's
-- table runs as the table's owner (or the policy's, see retention_step_claim)
-- in a temporary SECURITY DEFINER function owned by that role, which only a
-- caller that can act as it may create. Everything else happens in two
-- SECURITY DEFINER step routines, each of which checks that this session
-- opened the pass: retention_step_claim (which unit, the statement built
-- now from the stored policy and the catalog, the cutoff capped at now()
-- minus the policy's older_than) and retention_step_record (what the
-- statement did, for the unit the claim handed out and no other). The
-- caller may call either one alone, in any order: a claim not recorded is
-- void at the next claim, a record without a claim changes nothing.
CREATE OR REPLACE FUNCTION retention_step(p_pass bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_sig text;
    v_path text;
    v_before record;
    v_after record;
    v_changed text;
    v_deleted bigint;
    v_fraction double precision;
    v_sampled bigint;
    v_times timestamptz[];
BEGIN
    v := retention_step_claim(p_pass);
    IF v.o_kind IS NULL THEN
        RETURN v.o_more;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, v.o_role, 'MEMBER') THEN
        RAISE EXCEPTION 'retention policy %: % cannot act as %', v.o_policy, current_user,
            CASE WHEN v.o_role = v.o_owner THEN pg_catalog.format('the policy''s owner %s', v.o_role)
                 ELSE pg_catalog.format('%s, the owner of its table', v.o_role) END
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Run maintenance as a role that can act as %s: GRANT %I TO %I.',
                                           v.o_role, v.o_role::text, current_user);
    END IF;
    BEGIN
        IF v.o_kind = 'detach' THEN
            -- recorded first, as if every leaf will be detached: from the
            -- parent's lock to the commit only the rows are left to add
            PERFORM retention_step_record(p_pass, 'detaching', NULL, NULL, NULL, NULL);
        END IF;
        v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v.o_type, v.o_type);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
            'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L', v_sig, v.o_settings, v.o_body);
        EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, v.o_role::text);
        v_path := pg_catalog.current_setting('search_path');
        v_before := retention_step_session_state();
        BEGIN
            EXECUTE pg_catalog.format('SELECT * FROM pg_temp.pgsweep_retention_as_owner($1::%s, $2::%s, $3, $4, $5)',
                                      v.o_type, v.o_type)
               INTO v_deleted, v_fraction, v_sampled, v_times
              USING v.o_lo, v.o_hi, v.o_cutoff, v.o_statuses, v.o_filters;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            -- Rolled back with the block: settings, objects, rows. Not prepared statements.
            PERFORM retention_step_session_restore(v_before.prepared);
            RAISE;
        END;
        -- The owner's code may have set search_path for the session: compare it
        -- before any name is looked up again (pg_catalog only, no operator).
        IF NOT pg_catalog.texteq(pg_catalog.current_setting('search_path'), v_path) THEN
            v_changed := 'search_path';
        ELSE
            v_after := retention_step_session_state();
            v_changed := CASE
                WHEN v_after.settings IS DISTINCT FROM v_before.settings THEN
                    'settings ' || (SELECT pg_catalog.string_agg(pg_catalog.split_part(a.s, '=', 1), ', ')
                                      FROM pg_catalog.unnest(v_after.settings) a(s) WHERE NOT a.s = ANY (v_before.settings))
                WHEN v_after.prepared IS DISTINCT FROM v_before.prepared THEN 'prepared statements'
                WHEN v_after.writes IS DISTINCT FROM v_before.writes THEN 'retention policies or database objects' END;
        END IF;
        IF v_changed IS NOT NULL THEN
            PERFORM {{ .schema | default "pgsweep" }}.retention_step_session_restore(v_before.prepared);
            RAISE EXCEPTION 'retention policy %: a statement run as its owner % changed the maintenance session (%); nothing it did is kept',
                v.o_policy, v.o_role, v_changed
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Triggers, rules and row-level security policies on a policy''s table run inside maintenance: '
                             'they must not SET parameters, create objects, prepare statements or register retention policies.';
        END IF;
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_sig);
        PERFORM retention_step_record(p_pass, 'done', v_deleted, v_fraction, v_sampled, v_times);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        -- A row (delete), the parent or a leaf (detach), a detached table
        -- (release) stayed locked past retention_lock_timeout: the step
        -- rolled back whole; its units wait for a later pass.
        IF v.o_kind = 'sample' OR (v.o_kind = 'delete' AND SQLSTATE = '40P01') THEN
            RAISE;
        END IF;
        PERFORM retention_step_record(p_pass, 'locked', NULL, NULL, NULL, NULL);
    END;
    RETURN v.o_more;
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
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    -- never later than now() - older_than, whatever the caller says
    p_cutoff := least(p_cutoff, _retention_cutoff(v_pol, pg_catalog.clock_timestamp()));
    IF NOT FOUND OR v_pol.owner <> _owner_role() OR v_pol.table_schema <> pg_catalog.current_schema()
       OR v_pol.table_name NOT IN ('message_processed', 'message_dead') THEN
        RAISE EXCEPTION 'retention policy %: not a built-in policy', p_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_kind = 'delete' THEN
        -- as _retention_exec_settings: wait on no lock longer than retention_lock_timeout
        PERFORM pg_catalog.set_config('lock_timeout',
            (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms', true);
        EXECUTE _retention_sweep_sql(v_pol, p_strategy) USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    ELSE
        EXECUTE _retention_sample_sql(v_pol, p_lo::text::double precision) INTO fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
    END IF;
END
$$;
-- pgsweep:end functions/retention_sql.sql
-- pgsweep:include functions/retention_step.sql
-- Retention: the steps of a pass. retention_run (a procedure, so that it can
-- commit) calls the step routines below and commits after each; all logic
-- lives here, in functions that pin search_path (a procedure that commits
-- cannot).
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
    PERFORM _check_now('p_now', p_now);
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
        v_token := _lease_acquire('retention:' || p_name, v_owner, v_pol.lease_ttl, NULL);
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
-- 'delete' (the unit o_unit is locked for this transaction), 'detach' (o_unit
-- is a drop unit of the leaf o_target: detach it and the sweep's other
-- droppable leaves of its parent), 'release' (o_unit is a detached leaf:
-- drop the sweep's detached tables), or NULL with
-- o_more false when the pass is over (outcome recorded) and true to be
-- called again.
CREATE OR REPLACE FUNCTION _retention_step_claim(p_pass bigint, OUT o_action text, OUT o_more boolean,
    OUT o_pol retention_policy, OUT o_strategy text, OUT o_unit retention_unit, OUT o_cutoff timestamptz,
    OUT o_now timestamptz, OUT o_pct double precision, OUT o_target regclass)
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
    -- A pass whose steps are claimed and never recorded (retention_step_claim
    -- alone, in a loop) still ends: a lease TTL after its deadline.
    IF v_now >= v_pass.deadline AND (v_pass.batches > 0 OR v_now >= v_pass.deadline + v_pol.lease_ttl) THEN
        UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
        RETURN;
    END IF;

    IF v_pass.mode = 'exclusive' THEN
        IF v_now >= v_pass.renewed_at + v_pol.lease_ttl / 3 THEN
            IF NOT _lease_renew('retention:' || v_pol.name, v_pass.owner, v_pol.lease_ttl, NULL) THEN
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

    -- Claim a unit. SKIP LOCKED: a unit another cleaner is on is skipped,
    -- never waited for; a unit this pass deferred (a row of it was locked by
    -- another transaction past retention_lock_timeout) waits for a later pass.
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name AND u.deferred_pass IS DISTINCT FROM p_pass
     ORDER BY u.sweep_id, u.unit_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- A pass works one sweep: it joins the open one or plans one. Units
        -- left but locked belong to cleaners that will finish them.
        IF v_pass.deferred > 0 THEN
            UPDATE retention_pass SET outcome = 'deferred' WHERE id = p_pass;
            RETURN;
        END IF;
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
        -- a pinned clock (tests) may only make the cutoff earlier
        o_now := least(coalesce(v_pass.now_override, clock_timestamp()), clock_timestamp());
        o_cutoff := _retention_cutoff(v_pol, o_now);
        o_pct := _retention_sample_pct(v_pol);
        RETURN;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    -- A distributed table's unit names its shard (retention_shards.sql): a
    -- shard that is gone (split, redistributed) leaves its rows to the next sweep.
    IF v_unit.shard_id IS NOT NULL
       AND (_retention_shard_placement(_retention_table(v_pol.table_schema, v_pol.table_name), v_unit.shard_id)).node IS NULL THEN
        DELETE FROM retention_unit
         WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
        o_more := true;
        RETURN;
    END IF;
    -- A partitioned policy's unit names its leaf (retention_partition.sql);
    -- a drop unit whose leaf an earlier step detached (block_lo -1) names the
    -- detached table by its oid (block_hi): _retention_release_claim checks it.
    IF v_unit.leaf_name IS NOT NULL AND NOT _retention_unit_detached(v_unit.action, v_unit.block_lo) THEN
        -- by the catalog, not to_regclass: this runs as <schema>_owner, which
        -- need not have USAGE on the table's schema
        -- still a partition (0.32): a table detached since the plan (by a
        -- runner's DETACH ... CONCURRENTLY whose rename failed, by a DBA) is
        -- no longer the policy's table, never swept
        SELECT c.oid INTO o_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r' AND c.relispartition;
        IF o_target IS NULL THEN -- the leaf is gone (dropped or detached by someone else): nothing left to do
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
            o_more := true;
            RETURN;
        END IF;
        -- Planned as a drop but no longer droppable (re-attached elsewhere,
        -- the policy changed): sweep the whole leaf instead.
        IF v_unit.action = 'drop'
           AND NOT _retention_leaf_droppable(v_pol, o_target, least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()))) THEN
            UPDATE retention_unit SET action = 'delete', block_lo = 0, block_hi = NULL
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no
            RETURNING * INTO v_unit;
        END IF;
    END IF;
    o_action := CASE WHEN _retention_unit_detached(v_unit.action, v_unit.block_lo) THEN 'release'
                     WHEN v_unit.action = 'drop' THEN 'detach' ELSE 'delete' END;
    o_more := true;
    o_pol := v_pol;
    o_strategy := v_sweep.strategy;
    o_unit := v_unit;
    -- The cap: a sweep's cutoff is never later than now() - older_than of
    -- the policy as it is now (it may have been planned with a later clock,
    -- or before older_than grew).
    o_cutoff := least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()));
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

-- _retention_step_batch records a batch that leaves its unit open (a
-- shard's unit with more rows to read, retention_shards.sql).
CREATE OR REPLACE FUNCTION _retention_step_batch(p_pass bigint, p_strategy text, p_deleted bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + p_deleted, batches = batches + 1,
           last_batch_at = v_now, strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_step_deferred leaves a unit to a later pass: one of its rows
-- was locked by another transaction for longer than retention_lock_timeout.
-- The cleaner never waits longer than that on anyone (an idle-in-transaction
-- session cannot stall a policy) and never deletes a row it could not lock,
-- so it cannot delete a row that is no longer eligible.
CREATE OR REPLACE FUNCTION _retention_step_deferred(p_pass bigint, p_unit retention_unit)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE retention_unit SET deferred_pass = p_pass
     WHERE policy = p_unit.policy AND sweep_id = p_unit.sweep_id AND unit_no = p_unit.unit_no;
    UPDATE retention_pass SET deferred = deferred + 1 WHERE id = p_pass;
END
$$;

-- _retention_detach_claim gathers a detach step's leaves: p_leaf (the
-- claimed unit's) and the leaves of the sweep's other drop units under the
-- same parent that are still attached, droppable and not taken by another
-- cleaner (FOR UPDATE SKIP LOCKED), at most 64 in all.
CREATE OR REPLACE FUNCTION _retention_detach_claim(p_pass bigint, p_unit retention_unit, p_leaf regclass,
    p_cutoff timestamptz, OUT o_parent regclass, OUT o_units int[], OUT o_leaves oid[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
    v_unit retention_unit;
    v_oid oid;
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_unit.policy;
    SELECT i.inhparent INTO o_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    o_units := ARRAY[p_unit.unit_no];
    o_leaves := ARRAY[p_leaf::oid];
    FOR v_unit IN
        SELECT * FROM retention_unit u
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no <> p_unit.unit_no
           AND u.action = 'drop' AND u.block_lo IS DISTINCT FROM -1 AND u.deferred_pass IS DISTINCT FROM p_pass
         ORDER BY u.unit_no
           FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN cardinality(o_leaves) >= 64;
        SELECT c.oid INTO v_oid
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r';
        -- gone, moved or no longer droppable: its own step finds out
        CONTINUE WHEN v_oid IS NULL
            OR (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_oid) IS DISTINCT FROM o_parent
            OR NOT _retention_leaf_droppable(v_pol, v_oid::regclass, p_cutoff);
        o_units := o_units || v_unit.unit_no;
        o_leaves := o_leaves || v_oid;
    END LOOP;
END
$$;

-- _retention_step_detaching records a detach step before it runs, as if
-- every leaf of it will be detached: each unit marked detached (block_lo -1,
-- block_hi the leaf's oid, left to a later pass, which drops the table), the
-- pass's batch and partitions counted. Done before the parent is locked, so
-- that the lock is held for the detaches and little else; the step
-- corrects it when a leaf stays (_retention_step_detached) and rolls it back
-- with the detaches when the parent's lock is not granted.
CREATE OR REPLACE FUNCTION _retention_step_detaching(p_pass bigint, p_unit retention_unit, p_units int[], p_leaves oid[],
    p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE retention_unit u SET block_lo = -1, block_hi = l.oid::bigint, deferred_pass = p_pass
      FROM unnest(p_units, p_leaves) l(unit_no, oid)
     WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no;
    UPDATE retention_pass
       SET batches = batches + 1, partitions_dropped = partitions_dropped + cardinality(p_leaves),
           last_batch_at = v_now, strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_step_rows adds a detach step's rows to its pass.
CREATE OR REPLACE FUNCTION _retention_step_rows(p_pass bigint, p_rows bigint)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ UPDATE retention_pass SET rows_deleted = rows_deleted + p_rows WHERE id = p_pass $$;

-- _retention_step_detached records a detach step from the catalog: a leaf
-- now named pgsweep_detached_<oid> and out of its parent was detached: its
-- unit is marked so (block_lo -1, block_hi the oid) and left to a later pass,
-- which drops the table; the pass counts its rows (p_rows, all the detached
-- leaves') and the partition. A leaf still attached (locked by another
-- transaction, or the whole step rolled back) is deferred to a later pass.
-- p_premarked: _retention_step_detaching counted every leaf already.
CREATE OR REPLACE FUNCTION _retention_step_detached(p_pass bigint, p_unit retention_unit, p_units int[], p_leaves oid[],
    p_rows bigint, p_strategy text, p_premarked boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_detached int;
    v_now timestamptz;
BEGIN
    WITH l AS (
        SELECT x.unit_no, x.oid,
               EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                        WHERE c.oid = x.oid AND c.relname = _retention_detached_name(x.oid) AND NOT c.relispartition) AS detached
          FROM unnest(p_units, p_leaves) x(unit_no, oid)
    ), u AS (
        UPDATE retention_unit u
           SET block_lo = CASE WHEN l.detached THEN -1 END,
               block_hi = CASE WHEN l.detached THEN l.oid::bigint END,
               deferred_pass = p_pass
          FROM l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no
        RETURNING l.detached
    )
    SELECT count(*) FILTER (WHERE u.detached) INTO v_detached FROM u;
    v_now := clock_timestamp();
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + CASE WHEN v_detached > 0 THEN p_rows ELSE 0 END,
           batches = batches + CASE WHEN v_detached > 0 THEN 1 ELSE 0 END - CASE WHEN p_premarked THEN 1 ELSE 0 END,
           partitions_dropped = partitions_dropped + v_detached
                                - CASE WHEN p_premarked THEN cardinality(p_leaves) ELSE 0 END,
           deferred = deferred + cardinality(p_leaves) - v_detached,
           last_batch_at = CASE WHEN v_detached > 0 THEN v_now ELSE last_batch_at END,
           strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_release_claim gathers a release step's tables: the sweep's
-- detached units not taken by another cleaner (p_unit's included). A unit
-- whose table is no longer the one it detached (dropped, re-attached,
-- renamed), that the policy's owner can no longer drop (the policy changed
-- hands), or that something else depends on (a view made on it since, a
-- foreign key to it) is closed and its table left alone (a NOTICE names it):
-- a DROP that fails would fail every pass.
CREATE OR REPLACE FUNCTION _retention_release_claim(p_pass bigint, p_unit retention_unit,
    OUT o_units int[], OUT o_tables oid[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole := (SELECT p.owner FROM retention_policy p WHERE p.name = p_unit.policy);
    v_unit retention_unit;
BEGIN
    o_units := '{}';
    o_tables := '{}';
    FOR v_unit IN
        SELECT * FROM retention_unit u
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id
           AND (u.unit_no = p_unit.unit_no
                OR (u.action = 'drop' AND u.block_lo = -1 AND u.deferred_pass IS DISTINCT FROM p_pass))
         ORDER BY u.unit_no
           FOR UPDATE SKIP LOCKED
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    WHERE c.oid = v_unit.block_hi::oid AND c.relkind = 'r' AND NOT c.relispartition
                      AND c.relname = _retention_detached_name(v_unit.block_hi::oid)
                      AND c.relowner = v_owner
                      -- nothing outside it depends on it (a view, a foreign key): DROP would fail
                      AND NOT _retention_depended_on(c.oid)) THEN
            o_units := o_units || v_unit.unit_no;
            o_tables := o_tables || v_unit.block_hi::oid;
        ELSE
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = v_unit.block_hi::oid) THEN
                RAISE NOTICE 'retention policy %: the detached partition % (formerly %.%) is left in place',
                    p_unit.policy, v_unit.block_hi::oid::regclass::text, v_unit.leaf_schema, v_unit.leaf_name;
            END IF;
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
        END IF;
    END LOOP;
END
$$;

-- _retention_step_released records a release step: a unit whose table is
-- gone is done; one whose table is still there (locked past lock_timeout by
-- another transaction) is deferred to a later pass. A release is not a
-- batch: the pass goes on to plan its own sweep.
CREATE OR REPLACE FUNCTION _retention_step_released(p_pass bigint, p_unit retention_unit, p_units int[], p_tables oid[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released int;
    v_left int;
BEGIN
    WITH l AS (
        SELECT x.unit_no, EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = x.oid) AS present
          FROM unnest(p_units, p_tables) x(unit_no, oid)
    ), d AS (
        DELETE FROM retention_unit u USING l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no AND NOT l.present
        RETURNING 1
    )
    SELECT count(*) INTO v_released FROM d;
    UPDATE retention_unit u SET deferred_pass = p_pass
     WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = ANY (p_units);
    GET DIAGNOSTICS v_left = ROW_COUNT;
    UPDATE retention_pass SET units = units + v_released, deferred = deferred + v_left WHERE id = p_pass;
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
    PERFORM _check_now('p_now', p_now);
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_sweep_id := _retention_plan(v_pol, p_now, v_pass.owner, p_pct, p_fraction, p_sampled, p_times);
    UPDATE retention_pass SET planned_sweep = v_sweep_id WHERE id = p_pass;
END
$$;

-- Step routines (docs/security.md, "Step routines"). retention_run and
-- maintain run as their caller, so they call only these, never an internal
-- (underscore) routine, and their caller may call them too, in any order:
--   retention_step_begin   opens a pass for this session (no clock: a pinned
--                          clock is _retention_begin's, S_owner's alone);
--   retention_step         one step (retention_sql.sql): claim, the
--                          statement as the table's owner, record;
--   retention_step_end     records the end of this session's pass;
--   retention_step_unlock  gives back this session's advisory lock on a policy.
-- Every one that names a pass checks that this session opened it
-- (_retention_pass_check): pid and, since a pid is reused, a pass begun
-- before the server started is nobody's.

-- _retention_pass_check: this session's running pass p_pass (NULL when it
-- no longer exists: its policy was unregistered during the pass); 42501
-- when it is another session's or over.
CREATE OR REPLACE FUNCTION _retention_pass_check(p_pass bigint)
RETURNS retention_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_pass;
BEGIN
    SELECT * INTO v FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v.pid IS DISTINCT FROM pg_catalog.pg_backend_pid() OR v.finished_at IS NOT NULL
       OR v.started_at < pg_catalog.pg_postmaster_start_time() THEN
        RAISE EXCEPTION 'retention pass %: not a running pass of this session', p_pass
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL retention_run, CALL maintain).';
    END IF;
    RETURN v;
END
$$;

-- retention_step_begin opens a pass of p_name for this session (see
-- _retention_begin): its id, or NULL when there is nothing to do.
CREATE OR REPLACE FUNCTION retention_step_begin(p_name text, p_owner text, p_budget interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_begin(p_name, p_owner, p_budget, NULL) $$;

-- retention_step_end records the end of this session's pass p_pass (an
-- error when p_error is given) and releases its lease; the caller commits,
-- then gives the advisory lock back (retention_step_unlock).
CREATE OR REPLACE FUNCTION retention_step_end(p_pass bigint, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _retention_pass_check(p_pass) IS NULL THEN
        RETURN;
    END IF;
    PERFORM _retention_finish(p_pass, CASE WHEN p_error IS NOT NULL THEN 'error' END, left(p_error, 2000));
END
$$;

-- retention_step_unlock: this session's advisory lock on a policy, given
-- back (_retention_unlock); a session can only ever release its own. The
-- name rule as in _retention_begin (a name it refuses never took a lock),
-- unless p_name is a registered policy's (maintain unlocks retention_due's
-- names, one registered before 0.34's rule included).
CREATE OR REPLACE FUNCTION retention_step_unlock(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name) THEN
        PERFORM _check_text('p_name', p_name);
    END IF;
    PERFORM _retention_unlock(p_name);
END
$$;

-- _retention_run_role: the role a statement on p_rel (the policy's table,
-- or one of its leaves) runs as: the table's owner when the policy's owner
-- is that role or a member of it (then the table's code -- triggers, rules,
-- row-level security, domains, defaults -- runs as the role that wrote it),
-- else NULL: a leaf is then skipped, and the policy's own table is swept as
-- the policy's owner (a grantee's DELETE, as PostgreSQL runs any).
CREATE OR REPLACE FUNCTION _retention_run_role(p_pol retention_policy, p_rel regclass)
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN c.relowner = p_pol.owner OR pg_catalog.pg_has_role(p_pol.owner, c.relowner, 'MEMBER')
                THEN c.relowner::regrole END
      FROM pg_catalog.pg_class c WHERE c.oid = p_rel
$$;

-- retention_step_claim: the bookkeeping of one step of this session's pass
-- p_pass, as <schema>_owner, and the statement retention_step runs. o_kind
-- NULL: nothing to run (o_more: call again); else o_kind is 'sample',
-- 'delete', 'detach' or 'release', run as o_role (the table's owner, or
-- o_owner, the policy's) with the body o_body
-- (built now from the stored policy and the catalog), the settings
-- o_settings and the parameters ($1, $2 of type o_type as text, $3 the
-- cutoff, never later than now() - older_than, $4 the statuses, $5 the
-- filter values). What it handed out is kept on the pass (step) for
-- retention_step_record. A built-in policy's step runs here whole.
CREATE OR REPLACE FUNCTION retention_step_claim(p_pass bigint,
    OUT o_more boolean, OUT o_kind text, OUT o_role regrole, OUT o_owner regrole, OUT o_policy text, OUT o_type text,
    OUT o_lo text, OUT o_hi text, OUT o_cutoff timestamptz, OUT o_statuses text[], OUT o_filters text[],
    OUT o_settings text, OUT o_body text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_b record;
    v_run record;
    v_step jsonb;
    v_sql text;
    v_rel regclass;
BEGIN
    o_more := false;
    IF _retention_pass_check(p_pass) IS NULL THEN
        RETURN;
    END IF;
    UPDATE retention_pass SET step = NULL WHERE id = p_pass; -- a claim not recorded is void
    v := _retention_step_claim(p_pass);
    o_more := v.o_more;
    IF v.o_action IS NULL THEN
        RETURN;
    END IF;
    o_policy := (v.o_pol).name;
    o_owner := (v.o_pol).owner;
    o_cutoff := v.o_cutoff;
    o_statuses := (v.o_pol).statuses;
    o_filters := (v.o_pol).filter_values;
    v_step := jsonb_build_object('action', v.o_action, 'strategy', v.o_strategy, 'sweep', (v.o_unit).sweep_id,
                                 'unit', (v.o_unit).unit_no, 'now', v.o_now, 'pct', v.o_pct);

    IF (v.o_pol).owner = _owner_role() THEN
        -- A built-in policy: pgsweep's own table, as <schema>_owner, here.
        IF v.o_action = 'plan' THEN
            IF v.o_pct IS NOT NULL THEN
                v_run := _retention_builtin_exec(o_policy, 'sample', NULL, v.o_pct, NULL::double precision, o_cutoff);
                PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
            ELSE
                PERFORM _retention_plan_from_sample(p_pass, v.o_now, NULL, NULL, NULL, NULL);
            END IF;
        ELSIF v.o_action = 'delete' THEN
            BEGIN
                IF v.o_strategy = 'tid_range' THEN
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.o_strategy,
                        format('(%s,0)', (v.o_unit).block_lo)::tid, format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295))::tid,
                        o_cutoff);
                ELSE
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.o_strategy, (v.o_unit).time_lo, (v.o_unit).time_hi,
                                                     o_cutoff);
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                PERFORM _retention_step_deferred(p_pass, v.o_unit);
                RETURN;
            END;
            PERFORM _retention_step_done(p_pass, v.o_unit, v.o_strategy, v_run.deleted);
        END IF;
        RETURN;
    END IF;

    o_role := (v.o_pol).owner;
    IF v.o_action = 'plan' THEN
        IF v.o_pct IS NULL THEN -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, NULL, NULL, NULL, NULL);
            RETURN;
        END IF;
        o_kind := 'sample';
        o_type := 'pg_catalog.float8';
        o_lo := v.o_pct::text;
        v_sql := _retention_sample_sql(v.o_pol, v.o_pct);
        v_rel := _retention_table((v.o_pol).table_schema, (v.o_pol).table_name);
        o_role := coalesce(_retention_run_role(v.o_pol, v_rel), o_role);
    ELSIF v.o_action = 'detach' THEN
        -- every droppable leaf of the parent in one transaction
        -- (retention_partition.sql); droppable: the policy's owner owns
        -- the leaves and the parent, so it is their owner who runs it
        v_b := _retention_detach_claim(p_pass, v.o_unit, v.o_target, o_cutoff);
        IF v_b.o_parent IS NULL THEN -- no longer a partition (a runner's concurrent detach): its own step finds out
            PERFORM _retention_step_detached(p_pass, v.o_unit, v_b.o_units, v_b.o_leaves, 0, v.o_strategy, false);
            RETURN;
        END IF;
        o_kind := 'detach';
        o_type := 'pg_catalog.oid[]';
        o_lo := v_b.o_leaves::text;
        o_hi := o_lo;
        v_step := v_step || jsonb_build_object('units', to_jsonb(v_b.o_units), 'leaves', to_jsonb(v_b.o_leaves));
        v_sql := _retention_detach_body(v_b.o_parent, v_b.o_leaves);
    ELSIF v.o_action = 'release' THEN
        -- drop the tables earlier passes detached; no lock on the parent
        v_b := _retention_release_claim(p_pass, v.o_unit);
        IF cardinality(v_b.o_tables) = 0 THEN
            RETURN;
        END IF;
        o_kind := 'release';
        o_type := 'pg_catalog.oid[]';
        o_lo := v_b.o_tables::text;
        o_hi := o_lo;
        v_step := v_step || jsonb_build_object('units', to_jsonb(v_b.o_units), 'tables', to_jsonb(v_b.o_tables));
        v_sql := _retention_release_body(v_b.o_tables);
    ELSE
        o_kind := 'delete';
        IF v.o_target IS NOT NULL THEN
            -- a leaf: as its owner, if the policy's owner may act as it
            o_role := _retention_run_role(v.o_pol, v.o_target);
            IF o_role IS NULL THEN
                UPDATE retention_pass
                   SET error = coalesce(error || '; ', '') || format(
                       'leaf %s skipped: owned by %s, which the policy''s owner %s is not a member of',
                       v.o_target::text, (SELECT c.relowner::regrole::text FROM pg_catalog.pg_class c WHERE c.oid = v.o_target),
                       (v.o_pol).owner::text)
                 WHERE id = p_pass;
                DELETE FROM retention_unit u
                 WHERE u.policy = (v.o_unit).policy AND u.sweep_id = (v.o_unit).sweep_id AND u.unit_no = (v.o_unit).unit_no;
                o_kind := NULL;
                RETURN;
            END IF;
        ELSE
            v_rel := _retention_table((v.o_pol).table_schema, (v.o_pol).table_name);
            o_role := coalesce(_retention_run_role(v.o_pol, v_rel), o_role);
        END IF;
        IF v.o_strategy = 'tid_range' THEN
            o_type := 'pg_catalog.tid';
            o_lo := format('(%s,0)', (v.o_unit).block_lo);
            o_hi := format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295));
        ELSE
            o_type := 'pg_catalog.timestamptz';
            o_lo := (v.o_unit).time_lo::text;
            o_hi := (v.o_unit).time_hi::text;
        END IF;
        IF (v.o_unit).shard_id IS NULL THEN
            v_sql := _retention_sweep_sql(v.o_pol, v.o_strategy, v.o_target);
        END IF;
        v_step := v_step || jsonb_build_object('shard', (v.o_unit).shard_id);
    END IF;
    o_settings := _retention_exec_settings(CASE WHEN o_kind = 'delete' AND (v.o_unit).shard_id IS NULL THEN v.o_strategy END)
                  -- a shard's batch passes its lock_timeout on to the worker (_retention_shard_body)
                  || CASE WHEN (v.o_unit).shard_id IS NOT NULL THEN ' SET citus.propagate_set_commands = local' ELSE '' END;
    o_body := CASE WHEN o_kind = 'delete' AND (v.o_unit).shard_id IS NOT NULL
                   THEN _retention_shard_body(v.o_pol, v.o_strategy, (v.o_unit).shard_id, o_lo, o_hi, o_cutoff)
                   ELSE _retention_exec_body(v_sql, o_kind, v.o_target) END;
    UPDATE retention_pass SET step = v_step WHERE id = p_pass;
END
$$;

-- retention_step_record records what the statement of the step that
-- retention_step_claim handed out did (p_phase 'done'), or that it found a
-- lock held past retention_lock_timeout ('locked': its units wait for a
-- later pass), or, for a detach, that it is about to run ('detaching').
-- It acts only on the unit the claim handed out to this session's pass:
-- a record without a claim changes nothing.
-- The arguments are checked first (22023): p_phase one of the three,
-- p_deleted and p_sampled not negative, p_fraction a fraction (0 to 1).
-- p_times is the sample's times, as many as the sample found (no cap: the
-- plan cuts at most 100000 windows from it).
CREATE OR REPLACE FUNCTION retention_step_record(p_pass bigint, p_phase text, p_deleted bigint,
    p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_step jsonb;
    v_unit retention_unit;
    v_pol retention_policy;
    v_units int[];
    v_oids oid[];
    v_deleted bigint := coalesce(p_deleted, 0);
BEGIN
    IF p_phase IS NULL OR p_phase NOT IN ('done', 'locked', 'detaching') THEN
        PERFORM _check_text('p_phase', p_phase, 20); -- the message below echoes it
        RAISE EXCEPTION 'p_phase must be one of done, locked, detaching, got %', quote_literal(p_phase)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_deleted IS NOT NULL THEN PERFORM _check_int('p_deleted', p_deleted, 0, 9223372036854775807); END IF;
    IF p_sampled IS NOT NULL THEN PERFORM _check_int('p_sampled', p_sampled, 0, 9223372036854775807); END IF;
    IF p_fraction IS NOT NULL AND NOT (p_fraction >= 0 AND p_fraction <= 1) THEN -- NaN is neither
        RAISE EXCEPTION 'p_fraction must be NULL or between 0 and 1, got %', p_fraction
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_pass := _retention_pass_check(p_pass);
    v_step := v_pass.step;
    IF v_step IS NULL THEN
        RETURN;
    END IF;
    IF p_phase <> 'detaching' THEN
        UPDATE retention_pass SET step = NULL WHERE id = p_pass;
    END IF;
    IF v_step ->> 'action' = 'plan' THEN
        IF p_phase = 'done' THEN
            PERFORM _retention_plan_from_sample(p_pass, (v_step ->> 'now')::timestamptz, (v_step ->> 'pct')::double precision,
                                                p_fraction, p_sampled, p_times);
        END IF;
        RETURN;
    END IF;
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pass.policy AND u.sweep_id = (v_step ->> 'sweep')::bigint AND u.unit_no = (v_step ->> 'unit')::int;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_units := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(coalesce(v_step -> 'units', '[]'))::int);
    v_oids := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(coalesce(v_step -> 'leaves', v_step -> 'tables', '[]'))::oid);
    IF v_step ->> 'action' = 'detach' THEN
        IF p_phase = 'detaching' THEN
            PERFORM _retention_step_detaching(p_pass, v_unit, v_units, v_oids, v_step ->> 'strategy');
            UPDATE retention_pass SET step = v_step || '{"premarked": true}' WHERE id = p_pass;
        ELSIF p_phase = 'locked' THEN
            -- the parent (or the default partition) stayed locked past
            -- retention_lock_timeout, or a session that holds the parent
            -- waited for a leaf this step held: nothing was detached (the
            -- premark rolled back with it), a later pass retries
            PERFORM _retention_step_detached(p_pass, v_unit, v_units, v_oids, 0, v_step ->> 'strategy', false);
        ELSIF p_sampled = cardinality(v_oids) AND (v_step ->> 'premarked')::boolean THEN
            PERFORM _retention_step_rows(p_pass, v_deleted);
        ELSE -- a leaf was in use and stays: the record follows the catalog
            PERFORM _retention_step_detached(p_pass, v_unit, v_units, v_oids, v_deleted, v_step ->> 'strategy',
                                             coalesce((v_step ->> 'premarked')::boolean, false));
        END IF;
    ELSIF v_step ->> 'action' = 'release' THEN
        PERFORM _retention_step_released(p_pass, v_unit, v_units, v_oids);
    ELSIF p_phase = 'locked' THEN
        -- A row of the unit stayed locked past retention_lock_timeout: the
        -- batch rolled back whole; a later pass takes the unit.
        PERFORM _retention_step_deferred(p_pass, v_unit);
    ELSE
        SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;
        -- A shard's batch reads at most batch_size rows of its unit: one
        -- that read that many and deleted some leaves the unit open for the
        -- next batch (retention_shards.sql).
        IF v_step ->> 'shard' IS NOT NULL AND p_sampled >= v_pol.batch_size AND v_deleted > 0 THEN
            PERFORM _retention_step_batch(p_pass, v_step ->> 'strategy', v_deleted);
        ELSE
            PERFORM _retention_step_done(p_pass, v_unit, v_step ->> 'strategy', v_deleted);
        END IF;
    END IF;
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
           error = CASE WHEN p_error IS NULL THEN error ELSE coalesce(error || '; ', '') || p_error END,
           step = NULL
     WHERE id = p_pass
    RETURNING * INTO v_pass;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_pass.mode = 'exclusive' THEN
        PERFORM _lease_release('retention:' || v_pass.policy, v_pass.owner, NULL);
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
-- Must be called outside a transaction block (it commits). It calls only
-- the step routines (retention_step.sql), never an internal one: its
-- caller may call them too, and each checks what it is asked. Procedures cannot
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

-- retention_step_pass runs this session's pass p_pass of p_name to its end
-- with the step routines (retention_step.sql), for both retention_run
-- procedures below. Any admin may call it: it only ever drives a pass of
-- its own session.
CREATE OR REPLACE PROCEDURE retention_step_pass(p_name text, p_pass bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_failed boolean := false;
    v_state pg_catalog.text;
    v_msg pg_catalog.text;
    v_detail pg_catalog.text;
    v_hint pg_catalog.text;
BEGIN
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}.retention_step(p_pass);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}.retention_step_end(p_pass, pg_catalog.format('%s: %s', v_state, v_msg));
            COMMIT;
            PERFORM {{ .schema | default "pgsweep" }}.retention_step_unlock(p_name);
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''),
                HINT = coalesce(v_hint, '');
        END IF;
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_end(p_pass, NULL);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_unlock(p_name);
END
$$;

-- _retention_run: the pass with a pinned clock, for tests (S_owner only:
-- no role but the owner passes a clock, and it may only make the cutoff
-- earlier). It returns the pass's id.
CREATE OR REPLACE PROCEDURE _retention_run(p_name text, p_owner text, p_budget interval, p_clock timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_clock);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF p_pass_id IS NOT NULL THEN -- NULL: busy, or the policy keeps rows forever
        CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, p_pass_id);
    END IF;
END
$$;

-- The p_now overload, for tests (it also returns the pass's id).
CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text, p_budget interval, p_now timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    CALL {{ .schema | default "pgsweep" }}._retention_run(p_name, p_owner, p_budget, p_now, p_pass_id);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        v_pass := {{ .schema | default "pgsweep" }}.retention_step_begin(p_name, p_owner, p_budget);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}.retention_step_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF v_pass IS NOT NULL THEN -- NULL: busy, or the policy keeps rows forever
        CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, v_pass);
    END IF;
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
       p.error,
       p.deferred,
       p.partitions_dropped
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
       lp.error AS last_error,
       r.owner -- every run deletes as this role: maintenance needs GRANT <owner> TO <its role>
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the policies that are due, oldest first: what
-- maintain() runs. A policy is due when its interval has passed since its
-- last pass began (or it never ran), and at once when its last pass left
-- work behind: it stopped on its budget ('budget'), lost its lease
-- ('lease_lost'), skipped units a transaction held locked ('deferred'), or
-- its session died mid-pass (still 'running' with the session gone:
-- abandoned, e.g. a runner stopped by SIGTERM or kill -9). A pass that ended
-- in an error waits for the interval (a persistent error would otherwise
-- repeat every pass). Policies that keep rows forever are never due.
-- retention_due() reads the database clock; the p_now overload pins it,
-- for tests (S_owner only: no role but the owner passes a clock).
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    PERFORM _check_now('p_now', p_now);
    RETURN QUERY
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT p.started_at AS at, p.outcome, p.pid, p.backend_start
                           FROM retention_pass p
                          -- a runner's concurrent detach (retention_detach.sql) is not the policy's pass
                          WHERE p.policy = r.name AND p.strategy IS DISTINCT FROM 'detach_concurrently'
                          ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred')
            -- partitions a pass detached: the next pass drops them (retention_partition.sql)
            OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.action = 'drop' AND u.block_lo = -1)
            OR (lp.outcome = 'running' AND NOT EXISTS (
                    SELECT 1 FROM pg_catalog.pg_stat_activity a
                     WHERE a.pid = lp.pid AND (a.backend_start IS NULL OR a.backend_start = lp.backend_start))))
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;

CREATE OR REPLACE FUNCTION retention_due()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT retention_due(NULL::timestamptz) $$;
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

-- _maintain_part_check raises 22023 naming p_part unless it is one of the
-- parts (the name rule first: the message echoes it).
CREATE OR REPLACE FUNCTION _maintain_part_check(p_part text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_part', p_part, 20);
    IF NOT p_part = ANY (_maintain_parts()) THEN
        RAISE EXCEPTION 'p_part must be one of %, got %', array_to_string(_maintain_parts(), ', '),
            quote_literal(p_part) USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

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
    PERFORM _check_now('p_now', p_now);
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
    PERFORM _check_now('p_now', p_now);
    PERFORM _maintain_part_check(p_part);
    IF v_now >= p_deadline THEN
        o_status := 'no budget';
    ELSIF NOT _maintain_due(p_part, v_now) THEN
        o_status := 'not due';
    ELSIF NOT pg_try_advisory_lock(v_key) THEN
        o_status := 'busy';
    ELSE
        o_token := _lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), p_now);
        IF o_token IS NULL THEN
            PERFORM pg_advisory_unlock(v_key);
            o_status := 'busy';
        ELSE
            -- Re-check under the lease: another session may have finished a
            -- run between our first look and our acquire.
            PERFORM 1 FROM maintain_state WHERE part = p_part FOR UPDATE;
            v_now := coalesce(p_now, clock_timestamp());
            IF NOT _maintain_due(p_part, v_now) THEN
                PERFORM _lease_release('maintain:' || p_part, p_owner, p_now);
                PERFORM pg_advisory_unlock(v_key);
                o_status := 'not due';
            ELSE
                -- An abandoned run ended before now: give it that end (the
                -- no-overlap query needs one) and treat its part as a
                -- backlog (it stopped with its work unfinished; we run it
                -- now). Its pass is not closed here: a pass whose part
                -- raised goes on with its next part.
                UPDATE maintain_run
                   SET status = 'abandoned', finished_at = v_now,
                       error = coalesce(error, 'the pass ended before this part finished: its session died or the part raised an error (see the caller''s log or cron.job_run_details)')
                 WHERE part = p_part AND status = 'running';
                -- A pass whose session is gone (kill -9, a crash) ends too:
                -- nobody else would ever close it.
                UPDATE maintain_pass mp
                   SET finished_at = v_now,
                       error = coalesce(mp.error || '; ', '') || 'its session ended before the pass did (taken over)'
                 WHERE mp.finished_at IS NULL AND mp.pid IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                                    WHERE a.pid = mp.pid AND a.backend_start IS NOT DISTINCT FROM mp.backend_start);
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
    PERFORM _check_now('p_now', p_now);
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
    IF _lease_acquire('maintain:' || v_run.part, v_run.owner, setting_interval('maintain_lease_ttl'), p_now) IS NULL THEN
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
AS $$ SELECT _lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), NULL) IS NOT NULL $$;

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
-- and the pass row; then it gives the lease and the advisory lock back. A
-- run still 'running' that recorded an error (a retention policy's) ends 'failed'.
CREATE OR REPLACE FUNCTION _maintain_part_end(p_run bigint, p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    PERFORM _check_now('p_now', p_now);
    UPDATE maintain_run
       SET finished_at = v_now,
           status = CASE WHEN status <> 'running' THEN status WHEN error IS NOT NULL THEN 'failed' ELSE 'done' END
     WHERE id = p_run
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE maintain_state
       SET last_finished_at = v_now, last_status = v_run.status, backlog = v_run.more
     WHERE part = v_run.part;
    PERFORM _maintain_note(v_run.pass_id, v_run.part, v_run.status, v_run.error);
    PERFORM _lease_release('maintain:' || v_run.part, v_run.owner, p_now);
    PERFORM pg_advisory_unlock(_maintain_lock_key(v_run.part));
    RETURN v_run.status;
END
$$;
-- pgsweep:end functions/maintain_part.sql
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
-- step routines compute), so the caller's search_path cannot redirect it.
--
-- Step routines. A procedure runs as its caller (pg_cron's superuser, an
-- admin), so whatever it calls its caller may call too, in any order, with
-- any argument. It calls only the maintain_step_* routines below (and the
-- retention_step_* ones, retention_step.sql), never an internal (underscore)
-- one, and each of them is safe by itself:
--   * it takes no clock: time is the database's;
--   * a pass belongs to the session that opened it (maintain_pass.pid, and
--     a pass begun before the server started is nobody's): a step naming a
--     pass or a run of another session raises 42501 and changes nothing;
--   * what a step records it computes itself: the deadline comes from the
--     pass's budget, a run's counts from its own work, whether a part is due
--     again (backlog) from the state at its end. A caller can cut its own
--     pass short, never make a part look done that did not run.

-- _maintain_session_check raises 42501 unless this session opened p_pass.
CREATE OR REPLACE FUNCTION _maintain_session_check(p_pass bigint)
RETURNS maintain_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_pass;
BEGIN
    SELECT * INTO v FROM maintain_pass WHERE id = p_pass;
    IF NOT FOUND OR v.pid IS DISTINCT FROM pg_catalog.pg_backend_pid() OR v.finished_at IS NOT NULL
       OR v.started_at < pg_catalog.pg_postmaster_start_time() THEN
        RAISE EXCEPTION 'maintenance pass %: not a running pass of this session', coalesce(p_pass::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL maintain()).';
    END IF;
    RETURN v;
END
$$;

-- _maintain_run_check: the run p_run of a pass of this session (42501 otherwise).
CREATE OR REPLACE FUNCTION _maintain_run_check(p_run bigint)
RETURNS maintain_run
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_run;
BEGIN
    SELECT * INTO v FROM maintain_run WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'maintenance run %: no such run', coalesce(p_run::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM _maintain_session_check(v.pass_id);
    RETURN v;
END
$$;

-- maintain_step_begin validates maintain's arguments (22023), derives an
-- owner when none is given and records the pass for this session.
CREATE OR REPLACE FUNCTION maintain_step_begin(p_owner text, p_budget interval, OUT o_pass bigint, OUT o_owner text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
BEGIN
    v := _maintain_pass_begin(p_owner, p_budget, NULL);
    o_pass := v.o_pass;
    o_owner := v.o_owner;
END
$$;

-- maintain_step_part decides whether this session runs p_part of its pass
-- now: o_run is the part's run, NULL when it does not run (busy, not due, no
-- budget). Recovery gets at most half the pass's budget.
CREATE OR REPLACE FUNCTION maintain_step_part(p_pass bigint, p_part text, OUT o_run bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass maintain_pass;
    v_deadline timestamptz;
    v record;
BEGIN
    PERFORM _maintain_part_check(p_part); -- 22023 before anything, the pass's owner or not
    v_pass := _maintain_session_check(p_pass);
    v_deadline := v_pass.started_at + v_pass.budget;
    IF p_part = 'recovery' THEN
        v_deadline := v_deadline - v_pass.budget / 2;
    END IF;
    v := _maintain_part_begin(p_pass, p_part, v_pass.owner, v_deadline, NULL);
    IF v.o_status = 'running' THEN
        o_run := v.o_run;
        UPDATE maintain_run SET deadline = v_deadline WHERE id = o_run;
        IF p_part = 'retention' THEN
            -- the built-in policies follow the queues: a queue created or
            -- reconfigured by SQL is covered from this part on
            BEGIN
                PERFORM retention_builtin_sync();
            EXCEPTION WHEN OTHERS THEN
                UPDATE maintain_run SET error = format('builtin_sync: %s (SQLSTATE %s)', SQLERRM, SQLSTATE) WHERE id = o_run;
            END;
        END IF;
    END IF;
END
$$;

-- maintain_step_recovery takes one bounded step of recovery for the run
-- p_run (maintain_recovery.sql), records it and renews the part's lease; it
-- returns whether another step is worth it.
CREATE OR REPLACE FUNCTION maintain_step_recovery(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.part <> 'recovery' OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run, _maintain_recovery(v_run.owner, v_run.deadline), NULL, v_run.deadline, NULL);
END
$$;

-- maintain_step_failed records that a step of the run p_run raised (the
-- procedure caught it): the run fails, and its part is due again at once.
-- p_state is the error's SQLSTATE (five digits or upper-case letters);
-- p_message is free text (newlines allowed), stored cut to 2000 characters:
-- it is the caught error's own message, which must be recorded whatever
-- its length.
CREATE OR REPLACE FUNCTION maintain_step_failed(p_run bigint, p_message text, p_state text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
BEGIN
    IF p_state IS NULL OR p_state !~ '^[0-9A-Z]{5}$' THEN
        RAISE EXCEPTION 'p_state must be a SQLSTATE (five digits or upper-case letters), got %',
            CASE WHEN p_state IS NULL THEN 'NULL' ELSE length(p_state) || ' characters that are not one' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_run := _maintain_run_check(p_run);
    PERFORM _maintain_part_step(p_run, '{"more": true}', format('%s (SQLSTATE %s)', left(p_message, 2000), left(p_state, 5)),
                                v_run.deadline, NULL);
END
$$;

-- maintain_step_part_end closes the run p_run. Its part is due again at
-- once (backlog) when a step left work (more), when recovery took no step
-- at all, or, for retention, when a policy is still due: a caller that
-- ends a run it did not work cannot make its part look done.
CREATE OR REPLACE FUNCTION maintain_step_part_end(p_run bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF (v_run.part = 'retention' AND EXISTS (SELECT 1 FROM retention_due()))
       OR (v_run.part <> 'retention' AND v_run.steps = 0) THEN
        UPDATE maintain_run SET more = true WHERE id = p_run;
    END IF;
    RETURN _maintain_part_end(p_run, NULL);
END
$$;

-- maintain_step_end completes this session's pass and trims the history.
CREATE OR REPLACE FUNCTION maintain_step_end(p_pass bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _maintain_session_check(p_pass);
    PERFORM _maintain_pass_end(p_pass, NULL);
END
$$;

CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner pg_catalog.text;
    v_run bigint;
    v_more boolean;
    v_failed boolean;
    v_msg pg_catalog.text;
    v_state pg_catalog.text;
BEGIN
    SELECT b.o_pass, b.o_owner INTO v_pass, v_owner FROM {{ .schema | default "pgsweep" }}.maintain_step_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'recovery');
    COMMIT;
    IF v_run IS NOT NULL THEN
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step_recovery(v_run);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                v_failed := true;
            END;
            IF v_failed THEN
                PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
                v_more := false;
            END IF;
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'retention');
    COMMIT;
    IF v_run IS NOT NULL THEN
        CALL {{ .schema | default "pgsweep" }}.maintain_step_retention(v_run);
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}.maintain_step_end(v_pass);
    COMMIT;
END
$$;
-- pgsweep:end functions/maintain.sql
-- pgsweep:include functions/maintain_retention.sql
{{ $s := .schema | default "pgsweep" -}}
-- The retention part of maintain(): run every due retention policy (own and
-- registered; retention_due lists them, oldest first) until the run's
-- deadline. The built-in policies were synced when the part began
-- (maintain_step_part).
--
-- It drives each policy's pass through the retention step routines
-- (retention_step_begin / retention_step / retention_step_end, exactly as
-- retention_run does) rather than CALL retention_run, because a failing
-- policy must not end the whole maintain pass: PL/pgSQL cannot catch an
-- error raised across a COMMIT, so every step is caught here, outside the
-- COMMITs, recorded on that policy's pass, and the part goes on with the
-- next policy.
--
-- A PROCEDURE without a SET clause (it COMMITs after every batch), so every
-- name below is qualified with the install schema and the body uses no
-- operator: comparisons, arithmetic and JSON building live in the pinned
-- step routines below, so nothing on the caller's search_path (pg_cron's
-- superuser's included) can stand in for them. Like maintain, it calls only
-- step routines (maintain.sql): each checks that the run p_run belongs to
-- a pass of this session.
--
-- The run's counts: {"deleted": {"<policy>": rows}}; a policy's error goes
-- to the run's error ("policy <name>: message") and the run ends 'failed';
-- the part is due again at once while a policy is still due
-- (maintain_step_part_end).

-- maintain_step_go: whether the run p_run may start another policy (the
-- deadline has not passed and the part's lease was renewed), with the
-- run's owner and what is left of its budget for the policy's pass.
CREATE OR REPLACE FUNCTION maintain_step_go(p_run bigint, OUT o_go boolean, OUT o_owner text, OUT o_budget interval)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    o_owner := v_run.owner;
    o_budget := least(greatest(v_run.deadline - clock_timestamp(), interval '0'), interval '1 day');
    o_go := v_run.part = 'retention' AND v_run.status = 'running' AND clock_timestamp() < v_run.deadline
            AND _maintain_renew('retention', v_run.owner);
END
$$;

-- Pacing: background retention yields to live traffic.
--
-- retention_duty_cycle d in 1..100 is a fixed duty cycle: after a batch that
-- took t, maintain() sleeps t*(100-d)/d. 0 (the default) adapts the duty
-- cycle after every batch to what the database shows:
--   * sessions waiting on a lock: halve it (at least 10%): the cleaner may
--     be in someone's way;
--   * a batch more than twice as slow per row as the fastest recent one:
--     cut it by 30% (at least 35%): the cleaner competes for CPU or I/O;
--   * other sessions of the database running, or active within the last
--     100 ms (live traffic, maintain_step_traffic): raise it by 5 points, to
--     at most 65%;
--   * nothing else running: raise it by 10 points, to 100% (an idle
--     database drains at full speed).
-- It starts at 35%. The bounds come from `pgsweep bench mixed` runs of 0.28
-- (docs/benchmarks.md, "mixed"), once the pacing saw the traffic again:
-- 20-30% drained at 0.09x of the unpaced rate, 30-60% at 0.13-0.23x and
-- 40-75% at 0.28-0.41x with the claims' p99 at 0.9x, 1.1x and 1.4-1.6x of
-- its quiet value; 35-65% sits between, on a machine too loaded to settle it.
-- CALL retention_run never pauses.

-- maintain_step_traffic: the live traffic the pacing yields to, as the
-- maintenance role sees it: busy, the other client sessions of this
-- database running now or within the last 100 ms (a claim loop is idle most
-- of the time between short statements); waiting, those waiting for a lock.
-- SECURITY INVOKER (privileges.sql, _invoker_routines), called by the
-- procedure, which runs as its caller: pg_stat_activity shows another
-- role's session state only to a superuser or a member of
-- pg_read_all_stats, and the owner role is neither (as a SECURITY DEFINER
-- function this saw no traffic at all, and the pacing ran at 100%). A
-- session the caller may not see counts as busy: without the privilege the
-- pacing yields to every other session rather than to none. Grant the
-- maintenance role pg_read_all_stats (or pg_monitor) for the exact picture
-- (docs/operations.md).
CREATE OR REPLACE FUNCTION maintain_step_traffic(OUT busy int, OUT waiting int)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT (count(*) FILTER (WHERE a.state IS NULL
                                OR (a.state = 'active' AND a.wait_event_type IS DISTINCT FROM 'Lock')
                                OR a.state_change > pg_catalog.clock_timestamp() - interval '100 milliseconds'))::int,
           (count(*) FILTER (WHERE a.wait_event_type = 'Lock'))::int
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND a.pid <> pg_catalog.pg_backend_pid()
       -- a session the caller may not see shows no backend_type either
       AND (a.backend_type = 'client backend' OR a.backend_type IS NULL)
$$;

-- _maintain_ret_pace sleeps after a batch as the pacing says and returns
-- the pacing state for the next batch ({"duty", "best", "pass", "rows"}).
CREATE OR REPLACE FUNCTION _maintain_ret_pace(p_state jsonb, p_pass bigint, p_batch_start timestamptz,
    p_deadline timestamptz, p_busy int, p_waiting int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_fixed int := setting_int('retention_duty_cycle');
    v_elapsed double precision := greatest(extract(epoch FROM clock_timestamp() - p_batch_start), 0);
    v_duty double precision := coalesce((p_state ->> 'duty')::double precision, 35);
    v_best double precision := (p_state ->> 'best')::double precision;
    v_rows bigint;
    v_batch_rows bigint;
    v_per_row double precision;
BEGIN
    SELECT p.rows_deleted INTO v_rows FROM retention_pass p WHERE p.id = p_pass;
    v_batch_rows := coalesce(v_rows, 0) - CASE WHEN (p_state ->> 'pass')::bigint = p_pass
                                               THEN coalesce((p_state ->> 'rows')::bigint, 0) ELSE 0 END;
    IF v_fixed BETWEEN 1 AND 100 THEN
        v_duty := v_fixed;
    ELSE
        IF v_batch_rows > 0 THEN
            v_per_row := v_elapsed / v_batch_rows;
            -- the fastest recent batch, drifting up slowly so that a
            -- one-off fast batch does not set the bar forever
            v_best := least(coalesce(v_best * 1.02, v_per_row), v_per_row);
        END IF;
        v_duty := CASE
            WHEN p_waiting > 0 THEN greatest(10, v_duty / 2)
            WHEN v_per_row > v_best * 2 THEN greatest(35, v_duty * 0.7)
            WHEN p_busy > 0 THEN least(65, v_duty + 5)
            ELSE least(100, v_duty + 10) END;
    END IF;
    IF v_duty < 100 THEN
        PERFORM pg_catalog.pg_sleep(least(v_elapsed * (100 - v_duty) / v_duty,
                                          greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
    END IF;
    RETURN jsonb_build_object('duty', v_duty, 'best', v_best, 'pass', p_pass,
                              'rows', coalesce((SELECT p.rows_deleted FROM retention_pass p WHERE p.id = p_pass), 0));
END
$$;

-- maintain_step_pace: the pacing's sleep after a batch of the pass p_pass
-- in the run p_run (_maintain_ret_pace), never past the run's deadline.
-- p_state is NULL or what the previous call returned: an object of numbers
-- duty (1 to 100), best (0 to 86400 seconds a row), pass and rows (not
-- negative); p_busy and p_waiting count sessions (0 to 262143, PostgreSQL's
-- most). p_batch_start needs no check: a time before the run's start counts
-- as its start, a later one as no time spent (no sleep).
CREATE OR REPLACE FUNCTION maintain_step_pace(p_run bigint, p_state jsonb, p_pass bigint, p_batch_start timestamptz,
    p_busy int, p_waiting int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
BEGIN
    IF p_state IS NOT NULL AND (
           jsonb_typeof(p_state) <> 'object'
        OR EXISTS (SELECT 1 FROM jsonb_each(p_state) e
                    WHERE e.key NOT IN ('duty', 'best', 'pass', 'rows') OR jsonb_typeof(e.value) NOT IN ('number', 'null'))
        OR NOT coalesce((p_state ->> 'duty')::numeric BETWEEN 1 AND 100, true)
        OR NOT coalesce((p_state ->> 'best')::numeric BETWEEN 0 AND 86400, true)
        OR NOT coalesce((p_state ->> 'pass')::numeric BETWEEN 0 AND 9223372036854775807, true)
        OR NOT coalesce((p_state ->> 'rows')::numeric BETWEEN 0 AND 9223372036854775807, true)) THEN
        RAISE EXCEPTION 'p_state must be NULL or the pacing state maintain_step_pace returned (an object of the numbers duty 1 to 100, best 0 to 86400, pass and rows not negative), got a jsonb % of % bytes',
            jsonb_typeof(p_state), pg_column_size(p_state)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_busy IS NOT NULL THEN PERFORM _check_int('p_busy', p_busy, 0, 262143); END IF;
    IF p_waiting IS NOT NULL THEN PERFORM _check_int('p_waiting', p_waiting, 0, 262143); END IF;
    v_run := _maintain_run_check(p_run);
    RETURN _maintain_ret_pace(coalesce(p_state, '{}'), p_pass, greatest(p_batch_start, v_run.started_at),
                              v_run.deadline, coalesce(p_busy, 1), coalesce(p_waiting, 0));
END
$$;

-- maintain_step_renew keeps the run's lease alive through a long policy:
-- renewed once a third of maintain_lease_ttl has passed since it was last
-- set; false when it is lost (another owner goes on).
CREATE OR REPLACE FUNCTION maintain_step_renew(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
    v_ttl interval := setting_interval('maintain_lease_ttl');
BEGIN
    IF EXISTS (SELECT 1 FROM lease l WHERE l.name = 'maintain:' || v_run.part AND l.owner = v_run.owner
                  AND l.expires_at - clock_timestamp() > v_ttl * 2 / 3) THEN
        RETURN true;
    END IF;
    RETURN _maintain_renew(v_run.part, v_run.owner);
END
$$;

-- maintain_step_tally records a policy's pass in the run p_run: its rows
-- (read from the pass, which must be this session's pass of p_name), or
-- the error that stopped it.
-- p_name goes into the run's counts and error: the name rule (validate.sql)
-- unless it is a registered policy's (maintain passes retention_due's names,
-- and a name registered before 0.34's rule is still tallied). p_error is
-- free text, the caught error's message, stored cut to 2000 characters.
CREATE OR REPLACE FUNCTION maintain_step_tally(p_run bigint, p_name text, p_pass bigint, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_rows bigint;
    v_outcome text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name) THEN
        PERFORM _check_text('p_name', p_name);
    END IF;
    v_run := _maintain_run_check(p_run);
    IF v_run.part <> 'retention' OR v_run.status <> 'running' THEN
        RETURN;
    END IF;
    IF p_pass IS NOT NULL THEN
        SELECT p.rows_deleted, p.outcome INTO v_rows, v_outcome FROM retention_pass p
         WHERE p.id = p_pass AND p.policy = p_name AND p.pid = pg_catalog.pg_backend_pid();
    END IF;
    UPDATE maintain_run
       SET counts = CASE WHEN v_rows IS NULL THEN counts
                         ELSE _maintain_add_counts(counts, jsonb_build_object('deleted', jsonb_build_object(p_name, v_rows))) END,
           steps = steps + 1,
           more = more OR coalesce(v_outcome = 'budget', false),
           error = CASE WHEN p_error IS NULL THEN error
                        ELSE coalesce(error || '; ', '') || format('policy %s: %s', p_name, left(p_error, 2000)) END
     WHERE id = p_run;
END
$$;

CREATE OR REPLACE PROCEDURE maintain_step_retention(p_run bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due pg_catalog.text[];
    v_name pg_catalog.text;
    v_pass bigint;
    v_step_more boolean;
    v_error pg_catalog.text;
    v_batch_start pg_catalog.timestamptz;
    v_go record;
    v_renew boolean;
    v_pace pg_catalog.jsonb := '{}';
    v_busy int;
    v_waiting int;
BEGIN
    -- 42501 unless p_run is a run of this session's pass, whether or not a
    -- policy is due
    PERFORM {{ $s }}.maintain_step_go(p_run);
    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        v_go := {{ $s }}.maintain_step_go(p_run);
        COMMIT;
        EXIT WHEN NOT v_go.o_go; -- out of budget, or lost the part's lease: another owner goes on

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}.retention_step_begin(v_name, v_go.o_owner, v_go.o_budget);
        EXCEPTION WHEN OTHERS THEN
            v_error := pg_catalog.format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}.retention_step_unlock(v_name);
            PERFORM {{ $s }}.maintain_step_tally(p_run, v_name, NULL, v_error);
            COMMIT;
            CONTINUE;
        END IF;
        COMMIT;
        -- NULL: busy elsewhere (or keeps rows forever): a cleaner that died
        -- may still hold the policy's lease; the policy stays due, and so
        -- does the part (maintain_step_part_end)
        CONTINUE WHEN v_pass IS NULL;

        LOOP
            v_batch_start := pg_catalog.clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}.retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := pg_catalog.format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic (retention_duty_cycle,
            -- adaptive by default); keep the part's lease alive through a
            -- long policy.
            SELECT t.busy, t.waiting INTO v_busy, v_waiting FROM {{ $s }}.maintain_step_traffic() t;
            v_pace := {{ $s }}.maintain_step_pace(p_run, v_pace, v_pass, v_batch_start, v_busy, v_waiting);
            v_renew := {{ $s }}.maintain_step_renew(p_run);
            IF NOT v_renew THEN
                v_error := 'lost the maintain:retention lease during the pass';
                EXIT;
            END IF;
            COMMIT;
        END LOOP;

        PERFORM {{ $s }}.retention_step_end(v_pass, v_error);
        COMMIT;
        PERFORM {{ $s }}.retention_step_unlock(v_name);
        PERFORM {{ $s }}.maintain_step_tally(p_run, v_name, v_pass, v_error);
        COMMIT;
    END LOOP;
END
$$;
-- pgsweep:end functions/maintain_retention.sql
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

-- cron_available: whether pg_cron is installed in this database.
CREATE OR REPLACE FUNCTION cron_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') $$;

-- cron_command: the job's command for a budget, the arguments checked
-- (22023). The cron functions run as their caller (pg_cron schedules as
-- current_user), so they call only such non-underscore routines.
CREATE OR REPLACE FUNCTION cron_command(p_schedule text, p_budget interval)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_schedule', p_schedule, 100);
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    RETURN format('CALL %I.maintain(%L, %L)', current_schema(), 'pg_cron', _interval_text(p_budget));
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
    v_command text := cron_command(p_schedule, p_budget);
BEGIN
    -- pg_cron's presence, checked here, as the caller: cron.database_name
    -- is a setting only superusers and pg_read_all_settings may read, which
    -- cron_command's role, <schema>_owner, is not.
    IF NOT cron_available() THEN
        RAISE EXCEPTION 'pg_cron is not installed in database %: install it there (CREATE EXTENSION pg_cron, in the database named by cron.database_name, now %) or run `pgsweep run` instead',
            pg_catalog.quote_ident(pg_catalog.current_database()),
            coalesce(pg_catalog.quote_literal(pg_catalog.current_setting('cron.database_name', true)), 'unset: pg_cron is not in shared_preload_libraries')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = '`pgsweep run --database-url URL` calls maintain() on an interval from outside the database; run it next to your applications, as many replicas as you like.';
    END IF;
    BEGIN
        EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_id USING cron_job_name(), p_schedule, v_command;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'p_schedule must be a pg_cron schedule such as ''* * * * *'', got %', pg_catalog.quote_literal(p_schedule)
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
    IF NOT cron_available() THEN
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
    IF cron_available() THEN
        RETURN QUERY EXECUTE 'SELECT jobid, schedule, command, active FROM cron.job WHERE jobname = $1 AND username = current_user'
            USING cron_job_name();
    END IF;
END
$$;
-- pgsweep:end functions/cron.sql
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
    PERFORM _check_text('p_queue', p_queue, 172); -- the name rule (validate.sql)
    PERFORM _check_int('p_max_attempts', p_max_attempts, 1, 1000);

    INSERT INTO queue (name, kind, max_attempts) VALUES (p_queue, p_kind, p_max_attempts)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        -- The claim cursor, at the head: otherwise the queue's first claims
        -- would race to insert it and wait for each other once.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, '-infinity', -9223372036854775808, '-infinity')
        ON CONFLICT (queue) DO NOTHING;
        -- Its rights, as rows (queue_rights.sql): only for a new queue, so
        -- an application's queue_create at start-up never undoes a revoke.
        PERFORM _queue_default_grants(p_queue);
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM queue q WHERE q.name = p_queue AND q.max_attempts <> p_max_attempts) THEN
        PERFORM _queue_require(p_queue, 'manage'); -- a change, not just "make sure it exists"
        UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now WHERE name = p_queue;
    END IF;
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
--   lane_dead           'move_on' (default): a dead-lettered lane head lets its
--                       lane go on with its next message; 'block': the lane
--                       stops until dead_requeue or lane_skip (lane.sql).
--                       Lanes blocked already stay blocked when it changes.
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
    PERFORM _queue_require(p_queue, 'manage');
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan', 'lane_dead') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead)', v_key
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
        IF p_settings ? 'lane_dead' THEN
            v_setting := 'lane_dead';
            IF jsonb_typeof(p_settings->'lane_dead') IS DISTINCT FROM 'string'
               OR p_settings->>'lane_dead' NOT IN ('move_on', 'block') THEN
                RAISE EXCEPTION 'lane_dead must be "move_on" or "block", got %', p_settings->'lane_dead'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            v_q.lane_dead := p_settings->>'lane_dead';
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
                    WHEN 'lane_dead' THEN '"move_on" or "block"'
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
           lane_dead = v_q.lane_dead,
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
--  3c. the same probe for a dead letter with the key (message_dead's inbox
--      keys are unique since 0.23): a key sent and dead-lettered after the
--      snapshot raises 40001 too.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql STABLE
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
-- PL/pgSQL, not LANGUAGE sql: Citus cannot plan a parameterized SQL
-- function inside a delegated call (DESIGN: claim paths are PL/pgSQL).
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key);
END
$$;

-- _send inserts one message into a queue already looked up and checked;
-- p_now is the send's clock. With a lane (lane.sql) it first locks the
-- lane's row: the message is the lane's head when the lane had no row (no
-- message, not blocked), otherwise it waits (parked at infinity); its
-- created_at is greatest(p_now, the lane's newest) and its id is drawn after
-- the lock, so (created_at, id) increases in the order the sends commit. A
-- lane whose head vanished without moving it on (a message deleted by hand)
-- moves on here (_lane_busy). An inbox duplicate changes no lane.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
    v_created timestamptz := p_now;
    v_inbox boolean := p_q.kind = 'inbox' AND p_key IS NOT NULL;
    v_snapshot boolean; -- REPEATABLE READ or SERIALIZABLE: one snapshot for the transaction
    v_free boolean;
    v_lane record;
    v_head boolean;
BEGIN
    IF v_inbox THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            RETURN NULL; -- 1b
        END IF;
    END IF;
    IF p_lane IS NOT NULL THEN
        v_lane := _lane_lock(p_q.name, p_lane, p_now);
        v_created := greatest(p_now, v_lane.last_at);
        v_head := v_lane.created OR NOT _lane_busy(p_q.name, p_lane, v_lane.blocked_id, p_now);
        IF NOT v_head THEN
            v_parked := 'infinity';
        END IF;
    END IF;

    <<ins>>
    BEGIN
        IF v_inbox THEN
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            ON CONFLICT (queue, key) WHERE dedup DO NOTHING
            RETURNING id INTO v_id;
            EXIT ins WHEN v_id IS NULL;
            IF v_snapshot THEN
                -- 3b: raises 40001 when a processed row with the key committed after our snapshot.
                INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
                VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now)
                ON CONFLICT (queue, key) DO NOTHING
                RETURNING true INTO v_free;
                IF v_free THEN
                    DELETE FROM message_processed p WHERE p.queue = p_q.name AND p.id = v_id;
                    -- 3c: the same for a dead letter with the key (message_dead's
                    -- inbox keys are unique since 0.23)
                    v_free := NULL;
                    INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, created_at, dead_at, dedup)
                    VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now, true)
                    ON CONFLICT (queue, key) WHERE dedup DO NOTHING
                    RETURNING true INTO v_free;
                    IF v_free THEN
                        DELETE FROM message_dead x WHERE x.queue = p_q.name AND x.id = v_id;
                        EXIT ins;
                    END IF;
                END IF;
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
                EXIT ins;
            END IF;
            IF _inbox_key_kept(p_q.name, p_key) THEN
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
            END IF;
        ELSE
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            RETURNING id INTO v_id;
        END IF;
    END ins;

    IF p_lane IS NOT NULL THEN
        IF v_id IS NULL THEN
            -- a duplicate: the lane is as it was (a row we created goes again)
            IF v_lane.created THEN
                DELETE FROM lane l WHERE l.queue = p_q.name AND l.name = p_lane;
            END IF;
        ELSIF NOT v_lane.created THEN
            UPDATE lane l SET last_at = v_created WHERE l.queue = p_q.name AND l.name = p_lane;
        END IF;
    END IF;
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message (at most 10 years ahead);
-- NULL or past = now. p_lane (NULL: none; else at most 200 characters)
-- puts it in that ordered lane of the queue (lane.sql): it is handed out
-- only after every message sent to the lane before it has left the queue.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
BEGIN
    PERFORM _queue_require(p_queue, 'send');
    PERFORM _check_message(p_payload, p_headers, p_key);
    PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
    PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
    PERFORM _check_size('p_key', octet_length(p_key), 'max_key_bytes');
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    PERFORM _check_lane('p_lane', p_lane);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane);
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys, p_deliver_at and p_lanes are NULL or
-- arrays of the same length as p_payloads; each p_deliver_at[i] as send's
-- p_deliver_at, each p_lanes[i] as send's p_lane (NULL: no lane). The lanes
-- of a batch are locked once each, in name order (two batches never wait for
-- each other in a cycle); messages of one lane keep their input order. One
-- notification per batch.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL)
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
    v_lane record;
    v_l record;
    v_names text[] := '{}';
    v_firsts bigint[] := '{}';
    v_busies boolean[] := '{}';
    v_lasts timestamptz[] := '{}';
    v_news boolean[] := '{}';
    i int;
BEGIN
    PERFORM _queue_require(p_queue, 'send');
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
    PERFORM _check_size('p_payloads', cardinality(p_payloads), 'max_batch');
    PERFORM _check_size('p_payloads', (SELECT max(pg_column_size(x)) FROM unnest(p_payloads) x), 'max_payload_bytes'); -- its largest element
    PERFORM _check_size('p_headers', (SELECT max(pg_column_size(x)) FROM unnest(p_headers) x), 'max_headers_bytes');
    PERFORM _check_size('p_keys', (SELECT max(octet_length(x)) FROM unnest(p_keys) x), 'max_key_bytes');
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
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) <> v_n THEN
        RAISE EXCEPTION 'p_lanes must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_lanes)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
        PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
        PERFORM _check_lane(format('p_lanes[%s]', i), p_lanes[i]);
    END LOOP;
    v_now := clock_timestamp();

    -- The lanes, each locked once, in name order; busy: it has a head (or is
    -- blocked), so every message of the batch waits; otherwise the batch's
    -- first message of the lane (first: its index) becomes its head.
    -- (unnest, not subscripts, in the statements below: a subscript of a
    -- text or jsonb array walks the array from its start, once per row.)
    FOR v_lane IN SELECT u.lane, min(u.k) AS first FROM unnest(p_lanes) WITH ORDINALITY u(lane, k)
                   WHERE u.lane IS NOT NULL GROUP BY u.lane ORDER BY u.lane LOOP
        v_l := _lane_lock(v_q.name, v_lane.lane, v_now);
        v_names := v_names || v_lane.lane;
        v_firsts := v_firsts || v_lane.first;
        v_busies := v_busies || (NOT v_l.created AND _lane_busy(v_q.name, v_lane.lane, v_l.blocked_id, v_now));
        v_lasts := v_lasts || v_l.last_at;
        v_news := v_news || v_l.created;
    END LOOP;

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send (which finds
        -- the lanes locked already).
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now, p_lanes[i]);
            v_any := v_any OR v_ids[i] IS NOT NULL;
        END LOOP;
        -- lanes created above whose every message was a duplicate
        IF true = ANY (v_news) THEN
            DELETE FROM lane l
             WHERE l.queue = v_q.name AND l.name = ANY (ARRAY(SELECT x.name FROM unnest(v_names, v_news) x(name, new) WHERE x.new))
               AND NOT EXISTS (SELECT 1 FROM message m WHERE m.queue = v_q.name AND m.lane = l.name);
        END IF;
    ELSE
        -- Ids are drawn first (after the lane locks) so that they can be
        -- returned in input order (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, k)
          LEFT JOIN unnest(v_names, v_firsts, v_busies, v_lasts) x(name, first, busy, last_at) ON x.name = u.lane;
        IF false = ANY (v_news) THEN -- a lane created here has last_at = v_now already
            UPDATE lane l SET last_at = greatest(v_now, x.last_at)
              FROM unnest(v_names, v_lasts, v_news) x(name, last_at, new)
             WHERE l.queue = v_q.name AND l.name = ANY (v_names) AND l.name = x.name AND NOT x.new;
        END IF;
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
-- Ordered lanes (lane.sql) need nothing here: only a lane's head is ever in
-- the claim index; the messages waiting behind it are parked until
-- 'infinity', which the promotion below never reaches. So a claim never
-- returns two messages of one lane, and its cost does not grow with the
-- messages waiting behind heads (sql/tests/lanes.sql counts the scans). A
-- lane's next head usually lies behind the cursor (its lane was sent long
-- ago); the promotion moves the cursor back to it (_lane_next), so claims
-- find it from the cursor on instead of in the pass before it.
--
-- Each row carries its lane (NULL: none) last, so that a consumer knows which
-- of its messages must keep their order among themselves.
--
-- A paused queue (queue_pause, queue_ops.sql) claims nothing: the flag is read
-- with the settings the claim reads anyway.
--
-- The clock is read once into v_now and the token drawn once into v_token
-- (scale-out rule: plain values in UPDATE). p_lease NULL means the queue's
-- lease_default. Rows come back oldest first.
--
-- This overload takes the time from its caller (p_now, NULL = the clock): for
-- tests only. claim(p_queue, p_owner, p_batch, p_lease) below is the verb.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
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
    v_paused boolean;
    v_read_at timestamptz;
    v_read_id bigint;
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql): control characters, spaces
    IF p_lease IS NOT NULL THEN PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour'); END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    -- Two statements, not a join: on Citus queue is a reference table and
    -- claim_cursor a distributed one, and a delegated claim may only touch
    -- its own shard (each statement filters by the queue).
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused
      INTO v_max, v_lease, v_rescan_every, v_paused
      FROM queue q
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    SELECT c.created_at, c.id, c.rescanned_at INTO v_cursor_at, v_cursor_id, v_rescanned
      FROM claim_cursor c WHERE c.queue = p_queue;
    v_read_at := v_cursor_at;
    v_read_id := v_cursor_id;
    IF v_paused THEN
        RETURN;
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
        -- other claims only move it forward, and not when it went back
        -- since this claim read it (below what it read): a rescan, or the
        -- new heads of lanes (lane.sql, _lane_next), which a claim moving it
        -- past them would leave to the pass before the cursor.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR ((c.created_at, c.id) < (v_last_at, v_last_id)
                             AND (c.created_at, c.id) >= (v_read_at, v_read_id)))
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim.sql
-- pgsweep:include functions/claim_ids.sql
-- claim_ids: claim exactly the given messages, for direct dispatch.
--
-- A relay that publishes an outbox to a broker (docs/relay.md) dispatches a
-- message at once after the transaction that sent it commits: it knows the
-- ids, and claim_ids leases those ids -- and only those -- to p_owner, so the
-- message reaches the broker without waiting for the next claim. Whatever
-- claim_ids does not take (the row is in flight elsewhere, not due yet, gone)
-- is left to claim: direct dispatch is a shortcut, never the only way a
-- message leaves the table.
--
-- It claims exactly what claim would hand out now, by the same rules:
--  * claimable: visible_at <= now and attempt < max_attempts -- pending or
--    failed rows that are due, and rows whose lease expired (visible_at is
--    the lease expiry of a processing row, so a live lease is never taken:
--    the fence of its claim holds) -- and not parked beyond now: a row
--    scheduled or in its backoff is taken only once due, and a message that
--    waits behind its lane's head (parked until 'infinity', lane.sql) never:
--    only a lane's head is claimable, as for claim.
--  * a paused queue (queue_pause) hands out nothing, as claim.
--  * FOR UPDATE SKIP LOCKED: rows another claimer has locked are skipped,
--    never waited for, so claim_ids and claim (or two claim_ids with the same
--    ids, on two relays) never hand out one row twice.
--  * the row update is claim's, column for column: status 'processing',
--    owner, a fresh token (one per call, the same for all its rows),
--    attempt + 1, visible_at = the lease expiry; and parked_until = NULL,
--    which is what claim's promotion does to a parked row that came due
--    before it is claimed (a row that was not parked keeps NULL, and its
--    update stays HOT).
--  * the claim cursor moves forward to the newest row taken, as a claim's
--    does (never back; only when its row lock is free): without it, claims
--    would walk the dead index entries of every message direct dispatch
--    completed. A due row behind the cursor is found by claim's rescan, as
--    for any claim (claim.sql).
-- Rows come back oldest first by (created_at, id), as claim's, each with its
-- lane (NULL: none) last.
--
-- p_ids: 1 to 10000 ids (_check_ids); ids that are not messages of the queue
-- are ignored. p_lease NULL is the queue's lease_default. This overload takes
-- the time from its caller (p_now, NULL = the clock): for tests only.
CREATE OR REPLACE FUNCTION claim_ids(p_queue text, p_owner text, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_tids tid[];
    v_ids bigint[];
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.paused INTO v_max, v_lease, v_paused
      FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    SELECT array_agg(c.ctid), array_agg(c.id),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
      INTO v_tids, v_ids, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id
              FROM message s
             WHERE s.queue = p_queue AND s.id = ANY (p_ids)
               AND s.visible_at <= v_now AND s.attempt < v_max
               AND (s.parked_until IS NULL OR s.parked_until <= v_now)
             ORDER BY s.created_at, s.id
               FOR UPDATE SKIP LOCKED) c;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;

    -- Forward only, and only when the cursor row's lock is free (claim.sql).
    UPDATE claim_cursor c
       SET created_at = v_last_at, id = v_last_id
     WHERE c.queue = p_queue
       AND (c.created_at, c.id) < (v_last_at, v_last_id)
       AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until,
               parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids) -- see claim's promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim_ids(p_queue text, p_owner text, p_ids bigint[], p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim_ids(p_queue, p_owner, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- dead_letter: a permanent failure. The rows the claim whose token is p_token
-- holds move to message_dead at once, whatever attempts they have left, with
-- p_error as their last error -- what fail does to a row on its last attempt
-- (fail.sql), for a message that no retry can deliver (a relay's broker
-- refused it for good: too large, malformed). A dead lane head lets its lane
-- move on, or blocks it, by the queue's lane_dead, in this transaction, as
-- fail's dead letters do. dead_requeue sends it back once the cause is fixed.
-- Returns the ids it acted on; a stale or wrong token acts on nothing
-- (ack.sql). This overload takes the time from its caller (p_now, NULL = the
-- clock): for tests only.
CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_dead) u;
END
$$;

CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT dead_letter(p_queue, p_token, p_ids, p_error, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim_ids.sql
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
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'p_ids must hold 1 to 10000 ids, got %',
            CASE WHEN p_ids IS NULL THEN 'NULL' ELSE cardinality(p_ids)::text END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
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
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
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
-- A completed lane head makes its lane move on to its next message, in this
-- transaction (lane.sql): the lane's row is locked for that, so a completion
-- waits for a transaction that is sending to the same lane.
--
-- The common case pays nothing for lanes: when the queue has no lane row at
-- all, none of the rows completed here has a lane (a lane's row exists, and
-- is committed, for as long as the lane has a message, and the rows completed
-- here are in flight), so the DELETE returns the ids straight away. Gathering
-- ids and lanes into arrays and returning the ids from them cost 13% more CPU
-- per claim + complete (docs/benchmarks.md, "security").
CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    IF p_token IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        PERFORM _check_token(p_token);
        PERFORM _check_ids(p_ids);
    END IF;
    PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT EXISTS (SELECT 1 FROM lane l WHERE l.queue = p_queue) THEN
        IF v_kind = 'outbox' THEN
            RETURN QUERY
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id;
        ELSE
            RETURN QUERY
            WITH d AS (
                DELETE FROM message m
                 WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
                RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
            )
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id;
        END IF;
        RETURN;
    END IF;
    IF v_kind = 'outbox' THEN
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id, m.lane
        )
        SELECT array_agg(d.id), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL) INTO v_ids, v_lanes FROM d;
    ELSE
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane
        ), p AS (
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id
        )
        SELECT (SELECT array_agg(p.id) FROM p), (SELECT array_agg(DISTINCT d.lane) FROM d WHERE d.lane IS NOT NULL)
          INTO v_ids, v_lanes;
    END IF;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, NULL, false, v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
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
    PERFORM _queue_require(p_queue, 'consume');
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
-- Lanes (lane.sql): a failing lane head stays the head -- its retry is parked
-- for its backoff like any other, and the lane waits. A dead-lettered head
-- makes its lane move on (lane_dead 'move_on', the default) or stop until
-- dead_requeue or lane_skip (lane_dead 'block'), in this transaction.
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
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
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

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
           AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u, true FROM unnest(v_dead) u;

    RETURN QUERY
    UPDATE message m
       -- coalesce: Citus 13.2 mistakes a bare array element at the top of a
       -- SET for an array assignment and crashes; every element is set
       SET status = 'failed', owner = NULL, token = NULL, visible_at = coalesce(v_due[least(m.attempt, v_k)], v_now),
           last_error = v_error,
           parked_until = CASE WHEN v_due[least(m.attempt, v_k)] > v_now THEN coalesce(v_due[least(m.attempt, v_k)], v_now) END
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
-- pgsweep:include functions/queue_ops.sql
-- Queue operations for operators (admin role): pause and resume, cancel
-- messages, purge a queue, drop it. docs/queues.md, "Operating a queue".
--
-- Every one of them acts on one queue (scale-out rule) and raises 22023 for
-- an unknown queue or a bad argument before it changes anything. Messages of
-- lanes that leave make their lanes move on in the same transaction
-- (lane.sql): the lanes are locked first, in name order, then the messages
-- are deleted.

-- queue_pause: claims of a paused queue return nothing (claim.sql checks
-- the flag it reads anyway); sends, renewals, completions and failures go on,
-- so work in flight finishes and new messages wait. Returns true when the
-- queue was running (false: it was paused already, nothing changed).
CREATE OR REPLACE FUNCTION queue_pause(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    UPDATE queue q SET paused = true, updated_at = v_now WHERE q.name = p_queue AND NOT q.paused;
    RETURN FOUND;
END
$$;

-- queue_resume: claims take messages again; listeners are notified so that
-- idle workers claim at once. Returns true when the queue was paused.
CREATE OR REPLACE FUNCTION queue_resume(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    UPDATE queue q SET paused = false, updated_at = v_now WHERE q.name = p_queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- _lanes_lock locks the rows of the given lanes of a queue, in name order.
CREATE OR REPLACE FUNCTION _lanes_lock(p_queue text, p_lanes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) > 0 THEN
        PERFORM 1 FROM lane l WHERE l.queue = p_queue AND l.name = ANY (p_lanes) ORDER BY l.name FOR UPDATE;
    END IF;
END
$$;

-- message_cancel deletes messages that are pending -- due, scheduled, or
-- waiting in their lane -- and returns the ids it deleted. Messages in flight
-- (processing) or waiting for a retry (failed) are not touched, nor are ids
-- that are not live messages of the queue (completed, dead, never sent), so a
-- repeated call is harmless. A cancelled lane head makes its lane move on. A
-- cancelled inbox message is gone, not processed: its key can be sent again.
CREATE OR REPLACE FUNCTION message_cancel(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_ids(p_ids);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _lanes_lock(p_queue, ARRAY(SELECT DISTINCT m.lane FROM message m
                                         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.lane IS NOT NULL));
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.status = 'pending'
        RETURNING m.id, m.lane, m.parked_until
    )
    SELECT array_agg(d.id),
           array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_ids, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

-- queue_purge deletes every pending message of the queue (due, scheduled,
-- waiting in a lane) and returns how many. Messages in flight and retries
-- stay; so do processed inbox rows and dead letters (retention's). Lanes
-- whose head was pending are emptied; a lane whose head is in flight or
-- waiting for its retry keeps it.
CREATE OR REPLACE FUNCTION queue_purge(p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n bigint;
    v_lanes text[];
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name FOR UPDATE;
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue AND m.status = 'pending'
        RETURNING m.lane, m.parked_until
    )
    SELECT count(*), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_n, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN v_n;
END
$$;

-- queue_drop removes a queue and everything of it: its messages (live,
-- processed, dead), lanes, claim cursor, recovery cursor and built-in
-- retention policies. It refuses (SQLSTATE 55006, object_in_use; nothing
-- changed) while a message of the queue is in flight -- leased, lease not
-- expired -- unless p_force: stop the queue's workers first (or pause it and
-- let them finish). Their late calls then fail as calls to an unknown queue
-- (22023) and change nothing. Returns the number of live messages deleted.
--
-- Sends that commit after the drop leave messages without a queue, which no
-- verb reaches: stop the senders first. (A send does not lock the queue
-- row: that would put every send of a queue in line behind one row.)
CREATE OR REPLACE FUNCTION queue_drop(p_queue text, p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_n bigint;
    v_live bigint;
BEGIN
    IF p_force IS NULL THEN
        RAISE EXCEPTION 'p_force must be true or false, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM 1 FROM queue q WHERE q.name = p_queue FOR UPDATE;
    v_now := clock_timestamp();
    DELETE FROM lane l WHERE l.queue = p_queue;
    -- Delete first, then look: the DELETE waits for claims in progress and
    -- sees what they committed, so no lease slips in between check and act.
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue
        RETURNING m.status, m.visible_at
    )
    SELECT count(*), count(*) FILTER (WHERE d.status = 'processing' AND d.visible_at > v_now) INTO v_n, v_live FROM d;
    IF v_live > 0 AND NOT p_force THEN
        RAISE EXCEPTION 'queue "%" has % message(s) in flight; stop its workers first, or drop it anyway with p_force', p_queue, v_live
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT queue_drop(%L, p_force => true) drops it with them; their workers'' calls then fail (unknown queue)', p_queue);
    END IF;
    DELETE FROM message_processed p WHERE p.queue = p_queue;
    DELETE FROM message_dead d WHERE d.queue = p_queue;
    DELETE FROM claim_cursor c WHERE c.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
-- pgsweep:end functions/queue_ops.sql
-- pgsweep:include functions/lane.sql
-- Ordered lanes (DESIGN.md, "Ordered lanes"; docs/queues.md, "Ordered lanes").
--
-- A message sent with a lane (send's p_lane, send_batch's p_lanes) belongs to
-- that lane of its queue. A lane hands out one message at a time, oldest
-- first by (created_at, id): the next becomes claimable only when the one
-- before it has left `message` (completed, dead-lettered, cancelled or
-- purged). Different lanes, and messages without a lane, are claimed in
-- parallel as before.
--
-- The head. At most one message of a lane is its head; every other one waits
-- parked with parked_until = 'infinity'. A parked row is out of the claim
-- index (message_claim is partial on parked_until IS NULL, claim.sql), and the
-- claim's promotion of parked rows (parked_until <= now) never reaches
-- infinity, so a message waiting behind its head costs a claim nothing: the
-- claim does not know lanes at all, it only ever sees heads. The head itself
-- is an ordinary message: pending (due or scheduled), in flight, or failed and
-- waiting for its retry -- the lane waits meanwhile (head-of-line blocking, the
-- price of the order). Recovery of an expired lease keeps it the head.
--
-- Why 'infinity' and not a lane column in the claim index: a claim scans one
-- index in (created_at, id) order and takes what it can lock; filtering out
-- the non-heads there would make every claim walk them (100,000 messages
-- behind 10,000 heads: 100,000 index entries per claim). Parked at infinity
-- they are not in that index. The promotion (parked_until back to NULL, or to
-- the message's own delivery time when it was scheduled for later) happens in
-- the transaction of the statement that made the head leave. Its cost: one
-- probe of message_lane and one UPDATE per message, and that UPDATE is not
-- HOT (the row enters the claim index): docs/benchmarks.md, "Ordered lanes".
-- A new head usually lies behind the claim cursor (claim.sql): the
-- promotion moves the cursor back to the oldest new head, so the next claims
-- find it from the cursor on, not in their pass from the head of the queue.
--
-- The lane row. Table lane holds one row per lane that has messages (or is
-- blocked): blocked_id and last_at, the created_at of the newest message
-- sent to it. A lane row that is not blocked always has a head, so the row's
-- existence says whether a new message waits; the head itself is not
-- recorded (that would be one more row version per message). Its row lock is
-- what serialises a lane:
--  * send locks it (_lane_lock) before it decides whether its message is the
--    head (the lane had no row: no message, not blocked) or waits, and holds it
--    until its transaction ends. Sends to one lane therefore serialise, and
--    created_at = greatest(now, last_at) with an id drawn after the lock
--    keeps (created_at, id) increasing in lock order, which is commit order:
--    a lane hands out its messages in the order their sends committed.
--  * a head that leaves locks it too (_lane_after) and promotes the oldest
--    waiting message (_lane_next: one lookup and one UPDATE by id for all
--    the lanes of a completion). A send that is still open when the head
--    leaves makes the promotion wait for it (then it sees its message): keep
--    transactions that send to a lane short. Without the lock a head could
--    leave between a send's "there is a head" and its commit, and the new
--    message would wait behind nothing, forever.
--  * the row goes when the lane is empty (no message, not blocked), so the
--    table holds only active lanes; queue_stats counts them.
-- Advisory locks would be no guard (DESIGN: never the only one); the row is
-- the truth, and under Citus it lives with its queue.
--
-- Lock order: lane rows first, in name order, then the waiting messages of
-- those lanes. complete, fail and recovery hold only their own in-flight
-- heads when they take the lane locks; cancel and purge lock the lanes before
-- they delete. A transaction that sends to several lanes takes their locks in
-- the order it sends; send_batch takes them in name order. Two transactions
-- that lock lanes in opposite orders may deadlock (PostgreSQL detects it and
-- fails one, to be retried): send to several lanes in name order.
--
-- A dead head (its last attempt failed, or its lease expired on it): with the
-- queue's lane_dead 'move_on' (the default) the lane moves on to its next
-- message; with 'block' the lane stops, blocked_id names the dead letter, and
-- its messages wait until dead_requeue puts that letter back at the head of
-- its lane or lane_skip(p_queue, p_lane) moves on without it (dead.sql).

-- _check_lane: NULL (no lane) or a non-empty name of at most 200 characters.
CREATE OR REPLACE FUNCTION _check_lane(p_arg text, p_lane text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lane IS NOT NULL AND (p_lane = '' OR length(p_lane) > 200) THEN
        PERFORM _check_text(p_arg, p_lane, 200);
    END IF;
    IF p_lane IS NOT NULL THEN PERFORM _check_text(p_arg, p_lane, 200); END IF;
END
$$;

-- _lane_lock locks a lane's row, creating it when the lane has none (created
-- true: the lane had no message and was not blocked). The row lock is held
-- until the caller's transaction ends. A row deleted meanwhile (its lane
-- emptied) is created again.
CREATE OR REPLACE FUNCTION _lane_lock(p_queue text, p_lane text, p_now timestamptz,
                                      OUT created boolean, OUT blocked_id bigint, OUT last_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    LOOP
        INSERT INTO lane AS l (queue, name, last_at) VALUES (p_queue, p_lane, p_now)
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING true INTO created;
        IF created THEN
            last_at := p_now;
            RETURN;
        END IF;
        SELECT l.blocked_id, l.last_at INTO blocked_id, last_at
          FROM lane l WHERE l.queue = p_queue AND l.name = p_lane
           FOR UPDATE;
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- _lane_busy: a lane whose row the caller holds locked, not created by it --
-- is a message of it handed out next (blocked, or it has a head)? A lane row
-- that is not blocked has a head (the invariant every verb keeps), unless a
-- message was deleted by hand: then the lane's oldest message becomes its
-- head here (and the lane is busy), or, when it has none, the lane is free.
-- The head is normally the lane's oldest message: the probe reads one or
-- two entries of message_lane.
CREATE OR REPLACE FUNCTION _lane_busy(p_queue text, p_lane text, p_blocked bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_blocked IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM message m
                WHERE m.queue = p_queue AND m.lane = p_lane AND m.parked_until IS DISTINCT FROM 'infinity') THEN
        RETURN true;
    END IF;
    RETURN _lane_next(p_queue, ARRAY[p_lane], p_now, false) > 0;
END
$$;

-- _lane_next: the lanes p_lanes (locked by the caller, none blocked) have no
-- head. The oldest message of each, by (created_at, id), becomes its head:
-- claimable now, or parked until its delivery time when it was scheduled for
-- later -- one statement for all the lanes. A lane with no message left loses
-- its row when p_drop_empty (the lane is empty); otherwise (a send is about
-- to add one) it keeps it. Returns how many were promoted.
CREATE OR REPLACE FUNCTION _lane_next(p_queue text, p_lanes text[], p_now timestamptz, p_drop_empty boolean)
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until timestamptz;
    v_one bigint;
    v_ids bigint[];
    v_later bigint[];
    v_at timestamptz[];
    v_promoted text[];
    v_low_at timestamptz;
    v_low_id bigint;
    v_tids tid[];
BEGIN
    SELECT array_agg(x.id), array_agg(x.ctid), array_agg(u.name),
           array_agg(x.id) FILTER (WHERE x.visible_at > p_now), array_agg(x.visible_at) FILTER (WHERE x.visible_at > p_now),
           (array_agg(x.created_at ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now))[1],
           (array_agg(x.id ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now))[1]
      INTO v_ids, v_tids, v_promoted, v_later, v_at, v_low_at, v_low_id
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.ctid, m.id, m.visible_at, m.created_at FROM message m
                          WHERE m.queue = p_queue AND m.lane = u.name
                          ORDER BY m.created_at, m.id
                          LIMIT 1) x;
    IF v_ids IS NOT NULL THEN
        -- By ctid (and id, as claim does: whichever the planner takes, it
        -- touches only these rows): the rows are locked by nobody else --
        -- waiting messages are touched only under their lane's lock, which
        -- the caller holds -- so their ctids stay. By id alone, each row cost
        -- a descent of the primary key.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
        IF v_low_at IS NOT NULL THEN
            -- The new heads usually lie behind the claim cursor (their lanes
            -- were sent long ago), where only a claim's pass before the
            -- cursor finds them, walking every dead entry and row in flight
            -- from the head of the queue (claim.sql). Move the cursor back to
            -- the oldest of them, so the next claims start there. Only when
            -- the row is free (SKIP LOCKED, like the claims' own updates):
            -- the cursor is a hint, and the pass before it still finds every
            -- due row.
            UPDATE claim_cursor c SET created_at = v_low_at, id = v_low_id
             WHERE c.queue = p_queue
               AND c.ctid = (SELECT k.ctid FROM claim_cursor k
                              WHERE k.queue = p_queue AND (k.created_at, k.id) > (v_low_at, v_low_id)
                                FOR UPDATE SKIP LOCKED);
        END IF;
        IF v_later IS NOT NULL THEN
            -- scheduled for later: parked until its time, as send parks it
            -- (plain values: Citus 13.2 crashes on a bare array element at the
            -- top of an UPDATE's SET)
            FOR i IN 1 .. cardinality(v_later) LOOP
                v_until := v_at[i];
                v_one := v_later[i];
                UPDATE message m SET parked_until = v_until WHERE m.queue = p_queue AND m.id = v_one;
            END LOOP;
        END IF;
    END IF;
    IF p_drop_empty AND coalesce(cardinality(v_ids), 0) < cardinality(p_lanes) THEN
        DELETE FROM lane l
         WHERE l.queue = p_queue AND l.name = ANY (p_lanes) AND NOT l.name = ANY (coalesce(v_promoted, '{}'));
    END IF;
    RETURN coalesce(cardinality(v_ids), 0);
END
$$;

-- _lane_after: the heads of the lanes p_lanes left `message` (completed,
-- dead-lettered, cancelled, purged): the callers know, because only a
-- lane's head is ever in flight (complete, fail, recovery) and a cancelled
-- or purged message that was not parked until infinity was its lane's head.
-- Each lane moves on to its next message -- unless p_block (the queue's
-- lane_dead is 'block') and its head was dead-lettered (its id is in
-- p_dead): then the lane stops, blocked by that dead letter. Lanes are
-- locked in name order (see the header).
CREATE OR REPLACE FUNCTION _lane_after(p_queue text, p_lanes text[], p_dead bigint[], p_block boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_next text[];
    v_block_names text[];
    v_block_ids bigint[];
BEGIN
    IF p_lanes IS NULL OR cardinality(p_lanes) = 0 THEN
        RETURN;
    END IF;
    -- A join with the names, not name = ANY (p_lanes): on a table of a few
    -- thousand lanes the planner scans it whole and compares every row with
    -- every name (1,000 lanes, 100 names: 1.1 ms of a 3.5 ms completion).
    SELECT array_agg(l.name) FILTER (WHERE l.blocked_id IS NULL) INTO v_next
      FROM (SELECT k.name, k.blocked_id FROM unnest(p_lanes) u(name)
              JOIN lane k ON k.queue = p_queue AND k.name = u.name
             ORDER BY k.name
               FOR UPDATE OF k) l;
    IF v_next IS NULL THEN
        RETURN;
    END IF;
    IF p_block AND p_dead IS NOT NULL THEN
        SELECT array_agg(d.lane), array_agg(d.id) INTO v_block_names, v_block_ids
          FROM message_dead d
         WHERE d.queue = p_queue AND d.id = ANY (p_dead) AND d.lane = ANY (v_next);
        IF v_block_names IS NOT NULL THEN
            UPDATE lane l SET blocked_id = b.id
              FROM unnest(v_block_names, v_block_ids) b(name, id)
             WHERE l.queue = p_queue AND l.name = ANY (v_block_names) AND l.name = b.name;
            v_next := ARRAY(SELECT u FROM unnest(v_next) u WHERE NOT u = ANY (v_block_names));
        END IF;
    END IF;
    IF cardinality(v_next) > 0 THEN
        PERFORM _lane_next(p_queue, v_next, p_now, true);
    END IF;
END
$$;

-- lane_skip: a lane stopped by a dead letter (lane_dead 'block') moves on
-- without it: its next message becomes the head. The dead letter stays in
-- message_dead (dead_requeue can still send it back; it then waits its turn
-- like any message of the lane). Returns true when the lane was blocked,
-- false (nothing changed) otherwise -- also for a lane that does not exist.
CREATE OR REPLACE FUNCTION lane_skip(p_queue text, p_lane text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocked bigint;
BEGIN
    PERFORM _check_text('p_lane', p_lane, 200);
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    SELECT l.blocked_id INTO v_blocked FROM lane l WHERE l.queue = p_queue AND l.name = p_lane FOR UPDATE;
    IF v_blocked IS NULL THEN
        RETURN false;
    END IF;
    UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = p_lane;
    IF _lane_next(p_queue, ARRAY[p_lane], clock_timestamp(), true) > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN true;
END
$$;

-- lane_stats: the lanes of one queue that most need an operator, at most
-- p_limit (1..10000) of them: blocked lanes first, then the lanes whose head
-- is oldest. It reads every lane of the queue to choose them (a probe of
-- each lane's first messages) and counts the waiting messages of the lanes
-- it returns only.
--   waiting       messages waiting behind the head (or behind the block)
--   head_id       the head; for a blocked lane, the dead letter it waits for
--   head_attempt  the head's attempts so far (the dead letter's attempts)
--   head_state    pending, scheduled (pending, due later), processing,
--                 failed (waiting for its retry) or dead (blocked)
--   oldest_age    age (since it was sent) of the lane's oldest message, the
--                 dead letter's included
CREATE OR REPLACE FUNCTION lane_stats(p_queue text, p_limit int DEFAULT 100)
RETURNS TABLE (queue text, lane text, waiting bigint, head_id bigint, head_attempt int, head_state text,
               oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    PERFORM _queue_get(p_queue);
    RETURN QUERY
    SELECT p_queue, t.name, w.n, coalesce(t.blocked_id, t.h_id), coalesce(t.d_attempts, t.h_attempt),
           CASE WHEN t.blocked_id IS NOT NULL THEN 'dead'
                WHEN t.h_status = 'pending' AND t.h_parked > v_now THEN 'scheduled'
                ELSE t.h_status END,
           v_now - least(t.d_created, o.created_at)
      FROM (SELECT l.name, l.blocked_id, h.id AS h_id, h.attempt AS h_attempt, h.status AS h_status,
                   h.parked_until AS h_parked, d.attempts AS d_attempts, d.created_at AS d_created,
                   coalesce(d.created_at, h.created_at) AS since
              FROM lane l
              LEFT JOIN LATERAL (SELECT m.id, m.attempt, m.status, m.parked_until, m.created_at FROM message m
                                  WHERE m.queue = p_queue AND m.lane = l.name AND m.parked_until IS DISTINCT FROM 'infinity'
                                  ORDER BY m.created_at, m.id LIMIT 1) h ON true
              LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
             WHERE l.queue = p_queue
             ORDER BY l.blocked_id IS NULL, coalesce(d.created_at, h.created_at) NULLS LAST, l.name
             LIMIT p_limit) t
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM message c
                          WHERE c.queue = p_queue AND c.lane = t.name AND c.parked_until = 'infinity') w
      LEFT JOIN LATERAL (SELECT c.created_at FROM message c WHERE c.queue = p_queue AND c.lane = t.name
                          ORDER BY c.created_at, c.id LIMIT 1) o ON true
     ORDER BY t.blocked_id IS NULL, t.since NULLS LAST, t.name;
END
$$;
-- pgsweep:end functions/lane.sql
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
-- Lanes (lane.sql). A dead letter of a lane goes back into its lane. The
-- letter that stopped its lane (lane_dead 'block') becomes the lane's head
-- again: the lane resumes with it, then goes on in order. Any other letter
-- waits in its lane like the messages there, ordered by its created_at, so
-- it is handed out when the messages before it have left -- which usually
-- means next, being older than them. A lane that has no message and is not
-- blocked takes its oldest requeued letter as its head.
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
    v_ids bigint[];
    v_lanes text[];
    v_lane text;
    v_l record;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    v_now := clock_timestamp();
    v_visible := coalesce(p_deliver_at, v_now);

    WITH d AS (
        DELETE FROM message_dead x
         WHERE x.queue = p_queue AND x.id = ANY (p_ids)
           AND NOT (v_q.kind = 'inbox' AND x.key IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM message l WHERE l.queue = p_queue AND l.key = x.key AND l.dedup)
                 OR EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = x.key)))
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane
          FROM d
        RETURNING m.id, m.lane
    )
    SELECT array_agg(i.id), array_agg(DISTINCT i.lane) FILTER (WHERE i.lane IS NOT NULL) INTO v_ids, v_lanes FROM i;

    -- Each lane, locked in name order (lane.sql), after the letters are in:
    -- a lane that emptied meanwhile is created again by _lane_lock.
    FOR v_lane IN SELECT u FROM unnest(v_lanes) u ORDER BY 1 LOOP
        v_l := _lane_lock(p_queue, v_lane, v_now);
        IF v_l.blocked_id = ANY (v_ids) THEN
            -- the letter that stopped the lane: its head again
            UPDATE message m SET parked_until = CASE WHEN v_visible > v_now THEN v_visible END
             WHERE m.queue = p_queue AND m.id = v_l.blocked_id;
            UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        ELSIF v_l.created THEN
            -- a lane that had no message: its oldest requeued letter leads
            PERFORM _lane_next(p_queue, ARRAY[v_lane], v_now, false);
        ELSE
            PERFORM _lane_busy(p_queue, v_lane, v_l.blocked_id, v_now); -- a head, or the lane is blocked
        END IF;
    END LOOP;

    IF v_ids IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/dead.sql
-- pgsweep:include functions/recover.sql
-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch [, p_now]) RETURNS TABLE(recovered int, dead_lettered int)
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
-- Lanes (lane.sql): a released lane head stays its lane's head (the lane
-- keeps its order: the head is claimed again first). A head dead-lettered
-- here makes its lane move on or stop, by the queue's lane_dead, as in fail.
--
-- Traversal (as in seed 002): keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
--
-- queue_recover needs manage on the queue (queue_rights.sql);
-- _queue_recover, the work itself, is what maintain() calls for every queue
-- (maintain_recovery.sql): recovery is not a right of whoever runs
-- maintenance, it is pgsweep's own housekeeping.
-- The clock is the owner's (0.34): admins call queue_recover(p_queue,
-- p_batch); the p_now overload, for tests, is S_owner's alone. A clock an
-- admin could move forward would recover leases that are still live.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    RETURN QUERY SELECT * FROM _queue_recover(p_queue, p_batch, p_now);
END
$$;

CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM queue_recover(p_queue, p_batch, NULL::timestamptz) $$;

CREATE OR REPLACE FUNCTION _queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
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
    v_dead_ids bigint[];
    v_lanes text[];
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup
          FROM d
        RETURNING message_dead.id, message_dead.lane
    )
    SELECT count(*), array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL)
      INTO v_dead, v_dead_ids, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead_ids, v_q.lane_dead = 'block', v_now);
    END IF;

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
--   pending             status pending (including scheduled ones not yet due
--                       and those waiting in their lane behind its head)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row that a claim could take: pending or failed and
--                       visible now, not waiting in a lane; NULL when none
--                       (a lane's wait shows in lane_stats, lane.sql)
--   paused              queue_pause'd: claims return nothing (queue_ops.sql)
--   lanes               lanes with messages, or blocked (lane.sql)
--   blocked_lanes       lanes stopped by a dead letter (lane_dead 'block'),
--                       waiting for dead_requeue or lane_skip
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, queue_counts, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION queue_counts(p_queue text, p_now timestamptz)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval, lanes bigint, blocked_lanes bigint)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    -- the name rule (validate.sql) for a name that is no queue's: a queue
    -- created before 0.34's rule is still counted (the view lists every queue)
    IF NOT EXISTS (SELECT 1 FROM queue q WHERE q.name = p_queue) THEN
        PERFORM _check_text('p_queue', p_queue);
    END IF;
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now
                                       AND m.parked_until IS DISTINCT FROM 'infinity')
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    SELECT count(*), count(*) FILTER (WHERE l.blocked_id IS NOT NULL) INTO lanes, blocked_lanes
      FROM lane l WHERE l.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

-- The monitor's signature: the clock is the owner's (tests pass p_now).
CREATE OR REPLACE FUNCTION queue_counts(p_queue text)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval, lanes bigint, blocked_lanes bigint)
LANGUAGE sql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$ SELECT * FROM queue_counts(p_queue, NULL::timestamptz) $$;

-- queue_rows: the queues as queue_stats shows them, read as S_owner (see
-- _lease_rows, lease.sql, for why a view reads its table through a
-- function). queue_rows and queue_counts are granted to S_monitor and carry
-- no underscore: no role but S_owner executes an underscore function.
-- Counts only, no payloads: no per-queue right is needed. `WHERE queue = 'x'` on the view still filters the queues
-- before queue_counts is called: the filter applies to this function's
-- rows.
CREATE OR REPLACE FUNCTION queue_rows()
RETURNS TABLE (name text, kind text, paused boolean)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT q.name, q.kind, q.paused FROM queue q $$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age,
       q.paused,
       s.lanes,
       s.blocked_lanes
  FROM queue_rows() q
 CROSS JOIN LATERAL queue_counts(q.name) s;
-- pgsweep:end functions/queue_stats.sql
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
        SELECT * INTO v_r FROM _queue_recover(v_queue, v_batch);
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
-- pgsweep:include functions/retention_detach.sql
-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY, run by
-- the Go runner (docs/retention.md, "Partitioned tables").
--
-- Why: a pass removes an expired leaf with a plain DETACH, which holds an
-- ACCESS EXCLUSIVE lock on the parent for a moment; every insert into the
-- table in that moment waits for it (one insert a pass waited 3-4 ms in
-- `bench cleanup --partitioned`, docs/benchmarks.md). DETACH ...
-- CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on the parent, which no insert
-- and no query waits for, and ACCESS EXCLUSIVE on the leaf only after every
-- transaction that could still see it has ended. PostgreSQL runs it outside
-- any transaction block only, so neither maintain() nor retention_run
-- (procedures, pg_cron) can: the Go runner runs it before each maintenance
-- pass, from the claims these functions hand out. Installs run by pg_cron
-- alone keep the pass's plain DETACH (retention_partition.sql).
--
-- The protocol (Client.RetentionDetachConcurrently in Go):
--   1. retention_detach_claim(owner) claims, among the policies retention_due
--      lists, the leaves to remove:
--        'detach'   a droppable leaf (_retention_leaf_droppable) of a parent
--                   without a DEFAULT partition (PostgreSQL refuses
--                   CONCURRENTLY there: those keep the pass's DETACH), whose
--                   policy's owner the caller can SET ROLE to (otherwise the
--                   pass, as the policy's owner, does it);
--        'finalize' a leaf this protocol left half-detached (a runner killed,
--                   or its lock_timeout reached, between DETACH's two
--                   transactions): DETACH ... FINALIZE;
--        'drop'     a table this protocol detached (by an earlier call: the
--                   commit of a DROP releases the files, 25-50 ms a leaf of
--                   1,000,000 rows, CPU and I/O taken from the inserts, so
--                   it is left out of the call that removes the rows, as
--                   the pass does since 0.30);
--        'skip'     not a claim: a leaf the runner would detach but that it,
--                   or its parent, is owned by another role than the
--                   policy's owner; reason says which (see "As whom" below).
--      A claim is a row of retention_detaching held for the policy's
--      lease_ttl: two runners never work on one leaf at once; one that died
--      leaves its leaf to the next runner after the TTL.
--   2. The runner builds each statement itself from the claim's typed
--      values -- schema and relation names (quoted by pgx), the name to
--      rename to, the role to act as -- and runs it as that role: SET ROLE
--      to the policy's owner for exactly that statement, then back. No SQL
--      text travels from the database to Go (before 0.34 the claim handed
--      out count_sql, detach_sql, rename_sql and drop_sql, and the count's
--      text compared oid = integer and real >= integer, which pg_catalog has
--      no exact operator for: a public.=(oid, integer) ran as the runner).
--      It sets lock_timeout to retention_lock_timeout, runs the DETACH (or
--      FINALIZE) and renames the detached table pgsweep_detached_c<oid>
--      (its name is free again at once), or the DROP, each statement in its
--      own transaction.
--   3. retention_detach_done(owner, leaf) records what the catalog says,
--      whatever failed in between: a leaf out of its parent under the
--      runner's name (or dropped) counts its rows as deleted, once, in a
--      retention_pass of strategy 'detach_concurrently' (which retention_due
--      does not count as the policy's pass) and stays claimed for DROP; a
--      leaf still half-detached stays claimed for FINALIZE; a leaf still
--      attached (lock_timeout) is released, and the pass's plain DETACH or a
--      later claim takes it; a leaf out of its parent under another name
--      (detached by a maintenance pass, by a DBA keeping it, or the rename
--      failed) is released, not counted, and left in place.
-- The pass plans nothing for a leaf that is claimed or half-detached
-- (retention_partition.sql) and sweeps nothing that left its parent since
-- it planned (retention_step.sql); its plain DETACH defers a leaf a runner
-- detached or half-detached meanwhile.
--
-- The rows a detached leaf held are the catalog's estimate
-- (_retention_detach_estimate), read by retention_detach_done when it
-- records the leaf: nobody reads the leaf itself. Counting its rows would
-- run the leaf owner's row-level security policies (with FORCE ROW LEVEL
-- SECURITY, or for a runner that is not the owner) with the counting role's
-- rights -- until 0.34 the runner's own -- and would read a whole partition
-- the detach exists to avoid reading. Counting as the owner would cure the
-- first and not the second. So the runner reports an estimate: the live
-- tuples of the statistics, else pg_class.reltuples (exact after ANALYZE of
-- a small leaf, autovacuum's estimate otherwise), else 0 for a leaf never
-- analyzed whose inserts the statistics have not seen yet.
--
-- As whom: DETACH needs the ownership of the parent, RENAME and DROP the
-- ownership of the leaf, so the runner runs each as the policy's owner (SET
-- ROLE, the role retention_detach_claim names in act_as), never as itself:
-- a superuser runner DETACHes with the policy owner's rights and no more.
-- No code of the table's owner runs in these statements: DETACH ...
-- CONCURRENTLY, FINALIZE, RENAME and DROP fire no trigger and no rule,
-- evaluate no CHECK constraint (the constraint DETACH ... CONCURRENTLY adds
-- is a copy of the partition bound, added as valid without a scan), no
-- default, no generated column, no index expression, no domain check and
-- no row-level security policy; event triggers belong to superusers. A leaf
-- (or parent) owned by another role than the policy's owner is not
-- claimed: PostgreSQL lets the parent's owner DETACH a leaf it does not own,
-- which would act on that role's table with the policy owner's rights; the
-- claim returns it as 'skip' with the reason, and the runner logs it. The
-- hook suite (security_runner_hooks_test.go) proves it with a hostile
-- table carrying every hook, for a superuser runner and for a runner role.

-- _retention_detach_runner_name: the name the runner gives a table it
-- detached, until its next call drops it (0.32). Not the pass's
-- pgsweep_detached_<oid>: the name is the proof of who detached it, so
-- that neither counts or drops the other's tables, and a table someone
-- else detached (a DBA keeping it, an archive job) is never counted or
-- dropped.
CREATE OR REPLACE FUNCTION _retention_detach_runner_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_c' || p_leaf::text $$;

-- _retention_detach_caller: the role the caller of a SECURITY DEFINER
-- function acts as (SET ROLE, else the login role).
CREATE OR REPLACE FUNCTION _retention_detach_caller()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

-- _retention_detach_can_act: whether p_role may SET ROLE to p_owner (the
-- runner acts as the policy's owner for each statement). PostgreSQL 16
-- grants SET apart from membership.
CREATE OR REPLACE FUNCTION _retention_detach_can_act(p_role name, p_owner oid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000
                THEN pg_catalog.pg_has_role(p_role, p_owner, 'SET')
                ELSE pg_catalog.pg_has_role(p_role, p_owner, 'MEMBER') END
       -- set_config('role', 'none') means RESET ROLE: a role of that name
       -- would have the runner act as itself
       AND pg_catalog.pg_get_userbyid(p_owner) OPERATOR(pg_catalog.<>) 'none'::name
$$;

-- _retention_detach_estimate: the rows of a table, from the catalog (see
-- above): the statistics' live tuples, else reltuples, else 0. Reads
-- nothing of the table; NULL when the table is gone.
CREATE OR REPLACE FUNCTION _retention_detach_estimate(p_table oid)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.pg_stat_get_live_tuples(c.oid) OPERATOR(pg_catalog.>) 0::bigint
                THEN pg_catalog.pg_stat_get_live_tuples(c.oid)
                WHEN c.reltuples OPERATOR(pg_catalog.>=) 0::real THEN c.reltuples::bigint
                ELSE 0::bigint END
      FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) p_table
$$;

-- _retention_detach_claim_for: the claims of retention_detach_claim (below),
-- at most p_limit ('skip' rows are not claims and not counted).
CREATE OR REPLACE FUNCTION _retention_detach_claim_for(p_owner text, p_now timestamptz, p_limit int)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _retention_detach_caller();
    v_now timestamptz := clock_timestamp();
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_pol retention_policy;
    v_rel regclass;
    v_cutoff timestamptz;
    v_c record;
    v_n int := 0;
    v_taken oid;
    v_due boolean;
    v_r record;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    PERFORM _check_now('p_now', p_now);
    -- Claims of a policy that was unregistered go with it (ON DELETE
    -- CASCADE); expired claims whose table is gone are forgotten (a live
    -- claim's holder may have dropped its table and not recorded it yet).
    DELETE FROM retention_detaching d
     WHERE d.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = d.leaf);
    -- New leaves only of the policies that are due (the runner's pass
    -- follows); leaves this protocol left half-detached whenever. Only
    -- policies whose owner the caller can act as.
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_detaching d WHERE d.policy = r.name))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_due := v_r.due;
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        FOR v_c IN
            SELECT c.oid AS leaf, i.inhparent AS parent, i.inhdetachpending AS pending,
                   n.nspname AS leaf_schema, c.relname AS leaf_name, pn.nspname AS parent_schema, p.relname AS parent_name,
                   c.relowner AS leaf_owner, p.relowner AS parent_owner
              -- pg_partition_tree omits half-detached leaves: the claims name them
              FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(v_rel) t WHERE t.isleaf
                    UNION
                    SELECT d.leaf FROM retention_detaching d WHERE d.policy = v_pol.name) x
              JOIN pg_catalog.pg_class c ON c.oid = x.relid
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
              LEFT JOIN retention_detaching d ON d.leaf = c.oid
             WHERE c.relkind = 'r'
               -- free, or claimed by this owner, or a claim whose holder died
               AND (d.leaf IS NULL OR d.owner = p_owner OR d.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN d.leaf IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_due AND pt.partdefid = 0 AND _retention_leaf_expired(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
             ORDER BY i.inhdetachpending DESC, c.oid
        LOOP
            -- The runner acts as the policy's owner, on that role's own
            -- tables only (see "As whom" above).
            IF v_c.leaf_owner <> v_pol.owner OR v_c.parent_owner <> v_pol.owner THEN
                policy := v_pol.name;
                leaf := v_c.leaf;
                parent := v_c.parent;
                action := 'skip';
                leaf_schema := v_c.leaf_schema;
                leaf_name := v_c.leaf_name;
                parent_schema := v_c.parent_schema;
                parent_name := v_c.parent_name;
                rename_to := NULL;
                act_as := NULL;
                lock_timeout_ms := NULL;
                reason := pg_catalog.format('%s %I.%I is owned by %s, not by the policy''s owner %s: the runner acts only on its tables',
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN 'partition' ELSE 'parent' END,
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_schema ELSE v_c.parent_schema END,
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_name ELSE v_c.parent_name END,
                    pg_catalog.pg_get_userbyid(CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_owner ELSE v_c.parent_owner END),
                    pg_catalog.pg_get_userbyid(v_pol.owner));
                RETURN NEXT;
                CONTINUE;
            END IF;
            EXIT WHEN v_n >= p_limit;
            INSERT INTO retention_detaching AS d (leaf, policy, parent, leaf_schema, leaf_name, leaf_owner, owner,
                                                  began_at, expires_at)
            VALUES (v_c.leaf, v_pol.name, v_c.parent, v_c.leaf_schema, v_c.leaf_name, v_c.leaf_owner, p_owner,
                    v_now, v_now + v_pol.lease_ttl)
            ON CONFLICT ON CONSTRAINT retention_detaching_pkey DO UPDATE
               SET owner = excluded.owner, expires_at = excluded.expires_at
             WHERE d.owner = excluded.owner OR d.expires_at <= v_now
            RETURNING d.leaf INTO v_taken;
            -- another runner claimed it since the list was read
            CONTINUE WHEN v_taken IS NULL;
            v_taken := NULL;
            v_n := v_n + 1;
            policy := v_pol.name;
            leaf := v_c.leaf;
            parent := v_c.parent;
            action := CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END;
            leaf_schema := v_c.leaf_schema;
            leaf_name := v_c.leaf_name;
            parent_schema := v_c.parent_schema;
            parent_name := v_c.parent_name;
            rename_to := _retention_detach_runner_name(v_c.leaf);
            act_as := pg_catalog.pg_get_userbyid(v_pol.owner);
            lock_timeout_ms := v_timeout;
            reason := NULL;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    -- Tables this protocol detached and renamed (earlier calls): dropped
    -- now. Only a table under the runner's name (the proof that its DETACH
    -- and rename succeeded), that the policy's owner still owns, whose owner
    -- the caller can act as, and that nothing outside it depends on (a view
    -- made on it since: DROP would fail every call): such a table is left
    -- in place, its claim closed, a NOTICE names it, as the pass does.
    FOR v_c IN
        SELECT d.leaf, d.policy, d.parent, n.nspname AS leaf_schema, c.relname AS leaf_name, r.owner AS pol_owner,
               (c.relname = _retention_detach_runner_name(d.leaf) AND NOT c.relispartition
                AND c.relowner = r.owner
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_detaching d
          JOIN pg_catalog.pg_class c ON c.oid = d.leaf
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          JOIN retention_policy r ON r.name = d.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (d.owner = p_owner OR d.expires_at <= v_now)
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY d.leaf
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        IF NOT v_c.droppable THEN
            RAISE NOTICE 'retention policy %: the detached partition % is left in place', v_c.policy, v_c.leaf::regclass::text;
            DELETE FROM retention_detaching d WHERE d.leaf = v_c.leaf;
            CONTINUE;
        END IF;
        EXIT WHEN v_n >= p_limit;
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_c.policy;
        UPDATE retention_detaching SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl WHERE retention_detaching.leaf = v_c.leaf;
        v_n := v_n + 1;
        policy := v_c.policy;
        leaf := v_c.leaf;
        parent := v_c.parent;
        action := 'drop';
        leaf_schema := v_c.leaf_schema;
        leaf_name := v_c.leaf_name;
        parent_schema := NULL;
        parent_name := NULL;
        rename_to := NULL;
        act_as := pg_catalog.pg_get_userbyid(v_c.pol_owner);
        lock_timeout_ms := v_timeout;
        reason := NULL;
        RETURN NEXT;
    END LOOP;
END
$$;

-- retention_detach_claim: what the Go runner detaches concurrently now (see
-- above), at most 64 leaves; p_owner names the runner (1-200 characters).
-- Typed values only: the runner builds each statement from them. The p_now
-- overload is for tests (S_owner only).
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, p_now, 64) $$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, NULL, 64) $$;

-- retention_detach_done records a claimed leaf from the catalog (see
-- above) and returns its state: 'dropped', 'detached' (out of its parent,
-- not dropped yet: claimed again for DROP), 'pending' (half-detached:
-- claimed again for FINALIZE), 'attached' (released) or 'taken' (a
-- maintenance pass detached it first: released, not counted); and rows,
-- the rows this call counted as deleted (the catalog's estimate,
-- _retention_detach_estimate), NULL when it counted nothing: a leaf is
-- counted once, when it is first found out of its parent under the
-- runner's name. A claim held by another owner, or a caller that cannot act
-- as the policy's owner, changes nothing ('other').
CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, OUT state text, OUT rows bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_d retention_detaching;
    v_pol retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    SELECT * INTO v_d FROM retention_detaching d WHERE d.leaf = p_leaf FOR UPDATE;
    IF FOUND THEN
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_d.policy;
    END IF;
    -- only the claim's holder, able to act as the policy's owner, records it
    IF NOT FOUND OR v_d.owner IS DISTINCT FROM p_owner
       OR NOT _retention_detach_can_act(_retention_detach_caller(), v_pol.owner) THEN
        state := 'other';
        RETURN;
    END IF;
    SELECT CASE WHEN c.oid IS NULL THEN 'dropped'
                WHEN i.inhdetachpending THEN 'pending'
                WHEN i.inhrelid IS NOT NULL THEN 'attached'
                -- out of its parent under the runner's name: its DETACH and
                -- rename succeeded
                WHEN c.relname = _retention_detach_runner_name(p_leaf)
                     AND n.nspname = v_d.leaf_schema THEN 'detached'
                -- detached by someone else (a maintenance pass, which
                -- renamed it pgsweep_detached_<oid> and counts it; a DBA
                -- keeping the table), or the runner's rename failed: not
                -- counted, never dropped by the runner
                ELSE 'taken' END
      INTO state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF state IN ('dropped', 'detached') AND NOT v_d.counted THEN
        -- a table dropped before it was recorded: its rows are unknown (0);
        -- the runner records a table before it drops it
        rows := coalesce(_retention_detach_estimate(p_leaf), 0);
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_d.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_d.began_at, v_d.expires_at, v_now, v_now, rows, 1, 1, 1, 'detach_concurrently', 'drained');
    END IF;
    IF state = 'taken' AND NOT v_d.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_d.policy, v_d.leaf_schema, v_d.leaf_name;
    END IF;
    IF state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
