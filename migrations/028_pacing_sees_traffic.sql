-- pgsweep 0.28: adaptive pacing sees the live traffic again.
--
-- The pacing read pg_stat_activity inside _maintain_ret_pace, a SECURITY
-- DEFINER function of the owner role, which may not see other roles'
-- session states: it saw an idle database and ran retention at 100% under
-- traffic (bench mixed: claim p99 1.77x). The traffic is now read by
-- _maintain_ret_traffic, SECURITY INVOKER, called by the procedure as the
-- maintenance role, and sessions it may not see count as busy; the pace
-- function takes the counts as arguments (new signature, the old one goes).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DROP FUNCTION _maintain_ret_pace(jsonb, bigint, timestamptz, timestamptz);

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
--     100 ms (live traffic, _maintain_ret_traffic): raise it by 5 points, to
--     at most 65%;
--   * nothing else running: raise it by 10 points, to 100% (an idle
--     database drains at full speed).
-- It starts at 35%. The bounds come from `pgsweep bench mixed` runs of 0.28
-- (docs/benchmarks.md, "mixed"), once the pacing saw the traffic again:
-- 20-30% drained at 0.09x of the unpaced rate, 30-60% at 0.13-0.23x and
-- 40-75% at 0.28-0.41x with the claims' p99 at 0.9x, 1.1x and 1.4-1.6x of
-- its quiet value; 35-65% sits between, on a machine too loaded to settle it.
-- CALL retention_run never pauses.

-- _maintain_ret_traffic: the live traffic the pacing yields to, as the
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
CREATE OR REPLACE FUNCTION _maintain_ret_traffic(OUT busy int, OUT waiting int)
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

-- _maintain_ret_renew_due: whether the part's lease is due for renewal
-- (every third of maintain_lease_ttl since p_renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_renew_due(p_renewed timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT clock_timestamp() - p_renewed > setting_interval('maintain_lease_ttl') / 3 $$;

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
    v_pace jsonb := '{}';
    v_busy int;
    v_waiting int;
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
        IF v_pass IS NULL THEN
            -- busy elsewhere (or keeps rows forever): a cleaner that died may
            -- still hold the policy's lease, so the part is not done with it:
            -- due again at once, and the lease's expiry lets the next pass in
            v_more := true;
            CONTINUE;
        END IF;

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
            -- Background work yields to live traffic (retention_duty_cycle,
            -- adaptive by default); keep the part's lease alive through a
            -- long policy.
            SELECT t.busy, t.waiting INTO v_busy, v_waiting FROM {{ $s }}._maintain_ret_traffic() t;
            v_pace := {{ $s }}._maintain_ret_pace(v_pace, v_pass, v_batch_start, p_deadline, v_busy, v_waiting);
            v_renew := {{ $s }}._maintain_ret_renew_due(v_renewed);
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
                 'cron_schedule', 'cron_unschedule', 'cron_job', '_cron_available', '_cron_require',
                 -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
                 '_maintain_ret_traffic']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so _grant_all leaves out a
-- signature that takes p_now when the routine has one without it).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        '_queue_get', -- the Worker reads the queue's lease_default and max_attempts (no payloads)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        -- what the invoker functions (retention_register's wrappers, the
        -- retention steps, cron) call: argument checks, pure
        '_check_text', '_check_int', '_check_interval', '_interval_text', '_retention_invalid',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_retention_dropped', '_owner_role',
        '_retention_step_batch', '_retention_shard_body', -- a shard's batch (retention_shards.sql)
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_retention_run', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_traffic', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
        -- the session check of _retention_as_owner (retention_sql.sql)
        '_retention_session_state', '_retention_session_restore',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'lane_stats', 'version',
        '_lease_rows', '_setting_rows', '_queue_rows']) r -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now, p.oid
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone. A routine whose every
        -- signature takes p_now (the maintenance steps, retention_due,
        -- queue_recover, _queue_stats: p_now has a default) is granted as the
        -- matrix says, or no role but S_owner could call it at all.
        CONTINUE WHEN r.has_now AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_proc q
             WHERE q.pronamespace = v_schema::regnamespace AND q.proname = r.proname AND q.oid <> r.oid
               AND NOT 'p_now' = ANY (coalesce(q.proargnames, '{}')));
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
