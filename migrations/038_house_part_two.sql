-- pgsweep 0.38: house part two.
--
-- The house, part two (issue 28): code written once instead of twice, no
-- behaviour change. The clock-less lease verbs call their p_now overloads;
-- the typed setting getters share one kind check; queue_grant and
-- queue_revoke share their checks; retention's owner proof, policy-change
-- bookkeeping, begin-failure handling and "pass running here" test are each
-- one function. citus_distribute tells an internal view by its first
-- character (LIKE '\_%' depends on standard_conforming_strings).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:changed functions/lease.sql
CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire(p_name, p_owner, p_ttl, NULL::timestamptz) $$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_renew(p_name, p_owner, p_ttl, NULL::timestamptz) $$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_release(p_name, p_owner, NULL::timestamptz) $$;
-- pgsweep:end functions/lease.sql

-- pgsweep:changed functions/maintain.sql
CREATE OR REPLACE FUNCTION _pass_running_here(p_pid int, p_started timestamptz, p_finished timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_pid IS NOT DISTINCT FROM pg_catalog.pg_backend_pid() AND p_finished IS NULL
       AND p_started OPERATOR(pg_catalog.>=) pg_catalog.pg_postmaster_start_time()
$$;

CREATE OR REPLACE FUNCTION _maintain_session_check(p_pass bigint)
RETURNS maintain_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_pass;
BEGIN
    SELECT * INTO v FROM maintain_pass WHERE id = p_pass;
    IF NOT FOUND OR NOT _pass_running_here(v.pid, v.started_at, v.finished_at) THEN
        RAISE EXCEPTION 'maintenance pass %: not a running pass of this session', coalesce(p_pass::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL maintain()).';
    END IF;
    RETURN v;
END
$$;
-- pgsweep:end functions/maintain.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY[
        -- the owner proofs: the caller's role becomes (or must own) the policy (retention_register.sql)
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_resolve_table', 'retention_owner_proof',
        -- the step that runs a statement as the policy's owner (retention_sql.sql)
        'retention_step', '_grant_all',
        -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
        'cron_schedule', 'cron_unschedule', 'cron_job',
        -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
        'maintain_step_traffic']::text[]
$$;

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
        'retention_owner_proof',
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
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/queue_rights.sql
CREATE OR REPLACE FUNCTION _queue_rights_change(p_queue text, p_role regrole, p_rights text[])
RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    RETURN v_rights;
END
$$;

CREATE OR REPLACE FUNCTION queue_grant(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_grant_rows(p_queue, p_role, _queue_rights_change(p_queue, p_role, p_rights));
END
$$;

CREATE OR REPLACE FUNCTION queue_revoke(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_change(p_queue, p_role, p_rights);
BEGIN
    DELETE FROM queue_right r
     WHERE r.queue = p_queue AND r.privilege = ANY (v_rights) AND r.grantee = p_role;
END
$$;
-- pgsweep:end functions/queue_rights.sql

-- pgsweep:changed functions/retention_register.sql
CREATE OR REPLACE FUNCTION retention_owner_proof()
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE 'CREATE TEMPORARY TABLE ' || v_proof || ' ()';
    RETURN v_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
BEGIN
    PERFORM retention_register_proved(v_proof::regclass, p_name, p_table, p_time_column, p_older_than,
                                      p_status_column, p_statuses, p_batch_size, p_mode, p_interval);
    EXECUTE 'DROP TABLE ' || v_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
    v_result boolean;
BEGIN
    v_result := retention_unregister_proved(v_proof::regclass, p_name);
    EXECUTE 'DROP TABLE ' || v_proof;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
BEGIN
    PERFORM retention_set_time_zone_proved(v_proof::regclass, p_name, p_time_zone);
    EXECUTE 'DROP TABLE ' || v_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone_proved(p_proof regclass, p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_time_zone', p_name, _retention_proof_role(p_proof, 'retention_set_time_zone'), true);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    UPDATE retention_policy SET time_zone = p_time_zone WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, true); -- the open sweep's cutoff was computed in the old zone
END
$$;

CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
BEGIN
    PERFORM retention_set_filter_proved(v_proof::regclass, p_name, p_column, p_values);
    EXECUTE 'DROP TABLE ' || v_proof;
END
$$;

CREATE OR REPLACE FUNCTION _retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy := _retention_policy_for_update(p_name);
    v_rel regclass := _retention_table(v_pol.table_schema, v_pol.table_name);
    v_col record;
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
    UPDATE retention_policy SET filter_column = p_column, filter_values = p_values WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, true);
END
$$;

CREATE OR REPLACE FUNCTION _retention_policy_changed(p_name text, p_replan boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz := clock_timestamp(); -- a plain value in the UPDATE (Citus)
BEGIN
    UPDATE retention_policy SET updated_at = v_at WHERE name = p_name;
    IF p_replan THEN
        DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
BEGIN
    PERFORM retention_set_strategy_proved(v_proof::regclass, p_name, p_strategy);
    EXECUTE 'DROP TABLE ' || v_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy_proved(p_proof regclass, p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_strategy', p_name, _retention_proof_role(p_proof, 'retention_set_strategy'), true);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    UPDATE retention_policy SET strategy = p_strategy WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, true);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
BEGIN
    PERFORM retention_set_lease_ttl_proved(v_proof::regclass, p_name, p_ttl);
    EXECUTE 'DROP TABLE ' || v_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl_proved(p_proof regclass, p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_lease_ttl', p_name, _retention_proof_role(p_proof, 'retention_set_lease_ttl'), true);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    UPDATE retention_policy SET lease_ttl = p_ttl WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, false);
END
$$;
-- pgsweep:end functions/retention_register.sql

-- pgsweep:changed functions/retention_run.sql
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
    IF p_pass IS NULL THEN
        RETURN;
    END IF;
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

CREATE OR REPLACE PROCEDURE _retention_run(p_name text, p_owner text, p_budget interval, p_clock timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    COMMIT;
    p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_clock);
    COMMIT;
    CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, p_pass_id);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    COMMIT; -- fails inside a transaction block, before anything is taken
    v_pass := {{ .schema | default "pgsweep" }}.retention_step_begin(p_name, p_owner, p_budget);
    COMMIT;
    CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, v_pass);
END
$$;
-- pgsweep:end functions/retention_run.sql

-- pgsweep:changed functions/retention_sql.sql
CREATE OR REPLACE FUNCTION _retention_param(p_pol retention_policy, p_param text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT CASE p_pol.time_type WHEN 'timestamptz' THEN p_param
                  WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_param)
                  ELSE format('(%s AT TIME ZONE ''UTC'')::date', p_param) END $$;

CREATE OR REPLACE FUNCTION _retention_encode(p_pol retention_policy, p_expr text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT CASE WHEN p_pol.time_type = 'timestamptz' THEN p_expr
                  ELSE format('(%s::timestamp AT TIME ZONE ''UTC'')', p_expr) END $$;

CREATE OR REPLACE FUNCTION _retention_predicate_with(p_pol retention_policy, p_rel regclass,
    p_cutoff text, p_statuses text, p_filters text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, p_cutoff));
    v_col record;
    v_in record;
BEGIN
    -- the status column and the filter column: each one's values, by its type
    FOR v_in IN SELECT x.col, x.vals FROM (VALUES (p_pol.status_column, p_statuses), (p_pol.filter_column, p_filters)) x(col, vals)
                 WHERE x.col IS NOT NULL LOOP
        v_col := _retention_column(p_rel, v_in.col);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(v_in.col), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY (%s::%s[])', v_in.col, v_in.vals, v_col.type_sql);
    END LOOP;
    RETURN v_sql;
END
$$;
-- pgsweep:end functions/retention_sql.sql

-- pgsweep:changed functions/retention_step.sql
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
EXCEPTION WHEN OTHERS THEN
    PERFORM _retention_unlock(p_name);
    RAISE;
END
$$;

CREATE OR REPLACE FUNCTION _retention_pass_check(p_pass bigint)
RETURNS retention_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_pass := (SELECT p FROM retention_pass p WHERE p.id = p_pass);
BEGIN
    IF v.id IS NOT NULL AND NOT _pass_running_here(v.pid, v.started_at, v.finished_at) THEN
        RAISE EXCEPTION 'retention pass %: not a running pass of this session', p_pass
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL retention_run, CALL maintain).';
    END IF;
    RETURN v; -- all NULL: no such pass
END
$$;

CREATE OR REPLACE FUNCTION retention_step_claim(p_pass bigint,
    OUT o_more boolean, OUT o_kind text, OUT o_role regrole, OUT o_owner regrole, OUT o_policy text, OUT o_type text,
    OUT o_lo text, OUT o_hi text, OUT o_cutoff timestamptz, OUT o_statuses text[], OUT o_filters text[],
    OUT o_settings text, OUT o_body text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_step;
    v_pol retention_policy;
    v_unit retention_unit;
    v_b record;
    v_run record;
    v_sql text;
    v_rel regclass;
BEGIN
    o_more := false;
    IF _retention_pass_check(p_pass) IS NULL THEN
        RETURN;
    END IF;
    UPDATE retention_pass SET step = NULL WHERE id = p_pass; -- a claim not recorded is void
    v := _retention_step_claim(p_pass);
    o_more := v.more;
    IF v.kind IS NULL THEN
        RETURN;
    END IF;
    SELECT r.* INTO v_pol FROM retention_pass s JOIN retention_policy r ON r.name = s.policy WHERE s.id = p_pass;
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name AND u.sweep_id = v.sweep_id AND u.unit_no = v.unit_no;
    o_policy := v_pol.name;
    o_owner := v_pol.owner;
    o_cutoff := v.cutoff;
    o_statuses := v_pol.statuses;
    o_filters := v_pol.filter_values;

    IF v_pol.owner = _owner_role() THEN
        -- A built-in policy: pgsweep's own table, as <schema>_owner, here.
        IF v.kind = 'plan' AND v.pct IS NOT NULL THEN
            v_run := _retention_builtin_exec(o_policy, 'sample', NULL, v.pct, NULL::double precision, o_cutoff);
            PERFORM _retention_plan_from_sample(p_pass, v.now, v.pct, v_run.fraction, v_run.sampled, v_run.times);
        ELSIF v.kind = 'plan' THEN
            PERFORM _retention_plan_from_sample(p_pass, v.now, NULL, NULL, NULL, NULL);
        ELSIF v.kind = 'delete' THEN
            BEGIN
                IF v.strategy = 'tid_range' THEN
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy,
                        format('(%s,0)', v_unit.block_lo)::tid, format('(%s,0)', coalesce(v_unit.block_hi, 4294967295))::tid,
                        o_cutoff);
                ELSE
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy, v_unit.time_lo, v_unit.time_hi, o_cutoff);
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                PERFORM _retention_step_deferred(p_pass, v_unit);
                RETURN;
            END;
            PERFORM _retention_step_done(p_pass, v_unit, v.strategy, v_run.deleted);
        END IF;
        RETURN;
    END IF;

    o_role := v_pol.owner;
    CASE v.kind
    WHEN 'plan' THEN
        IF v.pct IS NULL THEN -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.now, NULL, NULL, NULL, NULL);
            RETURN;
        END IF;
        o_kind := 'sample';
        o_type := 'pg_catalog.float8';
        o_lo := v.pct::text;
        v_sql := _retention_sample_sql(v_pol, v.pct);
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        o_role := coalesce(_retention_run_role(v_pol, v_rel), o_role);
    WHEN 'detach' THEN
        -- every droppable leaf of the parent in one transaction
        -- (retention_partition.sql); droppable: the policy's owner owns
        -- the leaves and the parent, so it is their owner who runs it
        v_b := _retention_detach_claim(p_pass, v_unit, v.target::regclass, o_cutoff);
        IF v_b.o_parent IS NULL THEN -- no longer a partition (a runner's concurrent detach): its own step finds out
            PERFORM _retention_step_detached(p_pass, v_unit, v_b.o_units, v_b.o_leaves, 0, v.strategy, false);
            RETURN;
        END IF;
        v.units := v_b.o_units;
        v.oids := v_b.o_leaves;
        v_sql := _retention_detach_body(v_b.o_parent, v.oids);
    WHEN 'release' THEN
        -- drop the tables earlier passes detached; no lock on the parent
        v_b := _retention_release_claim(p_pass, v_unit);
        IF cardinality(v_b.o_tables) = 0 THEN
            RETURN;
        END IF;
        v.units := v_b.o_units;
        v.oids := v_b.o_tables;
        v_sql := _retention_release_body(v.oids);
    ELSE
        o_kind := 'delete';
        IF v.target IS NOT NULL THEN
            -- a leaf: as its owner, if the policy's owner may act as it
            o_role := _retention_run_role(v_pol, v.target::regclass);
            IF o_role IS NULL THEN
                UPDATE retention_pass
                   SET error = coalesce(error || '; ', '') || format(
                       'leaf %s skipped: owned by %s, which the policy''s owner %s is not a member of',
                       v.target::regclass::text, (SELECT c.relowner::regrole::text FROM pg_catalog.pg_class c WHERE c.oid = v.target),
                       v_pol.owner::text)
                 WHERE id = p_pass;
                DELETE FROM retention_unit u
                 WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = v_unit.unit_no;
                o_kind := NULL;
                RETURN;
            END IF;
        ELSE
            v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
            o_role := coalesce(_retention_run_role(v_pol, v_rel), o_role);
        END IF;
        IF v.strategy = 'tid_range' THEN
            o_type := 'pg_catalog.tid';
            o_lo := format('(%s,0)', v_unit.block_lo);
            o_hi := format('(%s,0)', coalesce(v_unit.block_hi, 4294967295));
        ELSE
            o_type := 'pg_catalog.timestamptz';
            o_lo := v_unit.time_lo::text;
            o_hi := v_unit.time_hi::text;
        END IF;
        IF v.shard_id IS NULL THEN
            v_sql := _retention_sweep_sql(v_pol, v.strategy, v.target::regclass);
        END IF;
    END CASE;
    IF v.kind IN ('detach', 'release') THEN -- the tables are its parameters
        o_kind := v.kind;
        o_type := 'pg_catalog.oid[]';
        o_lo := v.oids::text;
        o_hi := o_lo;
    END IF;
    o_settings := _retention_exec_settings(CASE WHEN o_kind = 'delete' AND v.shard_id IS NULL THEN v.strategy END)
                  -- a shard's batch passes its lock_timeout on to the worker (_retention_shard_body)
                  || CASE WHEN v.shard_id IS NOT NULL THEN ' SET citus.propagate_set_commands = local' ELSE '' END;
    o_body := CASE WHEN o_kind = 'delete' AND v.shard_id IS NOT NULL
                   THEN _retention_shard_body(v_pol, v.strategy, v.shard_id, o_lo, o_hi, o_cutoff)
                   ELSE _retention_exec_body(v_sql, o_kind, v.target::regclass) END;
    UPDATE retention_pass SET step = v WHERE id = p_pass;
END
$$;
-- pgsweep:end functions/retention_step.sql

-- pgsweep:changed functions/settings.sql
CREATE OR REPLACE FUNCTION _setting_typed(p_name text, p_kind text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> p_kind THEN
        RAISE EXCEPTION 'p_name must name an % setting, % is an %', p_kind, p_name, v.kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT nullif(s.value, 'infinite')::interval FROM _setting_typed(p_name, 'interval') s $$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT s.value::bigint FROM _setting_typed(p_name, 'integer') s $$;
-- pgsweep:end functions/settings.sql

-- pgsweep:changed functions/citus.sql
CREATE OR REPLACE FUNCTION citus_distribute()
RETURNS TABLE (object_kind text, object_name text, placement text, changed boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_message text := pg_catalog.format('%I.%I', pg_catalog.current_schema(), 'message');
    v_rel text;
    r record;
    v_method "char";
    v_repmodel "char";
    v_colocation int;
    v_message_colocation int;
    v_pending text[];
    v_converted text[] := '{}';
    v_fk_rel text[];
    v_fk_name text[];
    v_fk_def text[];
    v_views text[];
    v_view_defs text[];
    v_view_opts text[];
    v_view_comments text[];
    v_left int[];
    v_again int[];
    v_ddl text;
    i int;
BEGIN
    PERFORM _citus_require();
    PERFORM _citus_owner_can_login();
    -- Foreign keys between distributed and reference tables, in one
    -- transaction with the conversions: one connection per node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- The tables still to convert, and the foreign keys that touch them.
    SELECT pg_catalog.array_agg(t.table_name) INTO v_pending
      FROM _citus_tables() t
      LEFT JOIN pg_catalog.pg_dist_partition d
             ON d.logicalrelid = pg_catalog.format('%I.%I', v_schema, t.table_name)::pg_catalog.regclass
     WHERE (t.placement = 'reference' AND (d.partmethod IS DISTINCT FROM 'n' OR d.repmodel IS DISTINCT FROM 't'))
        OR (t.placement = 'distributed' AND d.partmethod IS DISTINCT FROM 'h');
    SELECT pg_catalog.array_agg(f.rel ORDER BY f.conname), pg_catalog.array_agg(f.conname ORDER BY f.conname),
           pg_catalog.array_agg(f.def ORDER BY f.conname)
      INTO v_fk_rel, v_fk_name, v_fk_def
      FROM (SELECT c.conrelid::pg_catalog.regclass::text AS rel, c.conname::text AS conname,
                   pg_catalog.pg_get_constraintdef(c.oid) AS def
              FROM pg_catalog.pg_constraint c
              JOIN pg_catalog.pg_class ch ON ch.oid = c.conrelid
              JOIN pg_catalog.pg_class pa ON pa.oid = c.confrelid
             WHERE c.contype = 'f'
               AND ch.relnamespace = v_schema::pg_catalog.regnamespace
               AND (ch.relname = ANY (v_pending) OR pa.relname = ANY (v_pending))) f;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk_rel[i], v_fk_name[i]);
    END LOOP;
    IF v_pending IS NOT NULL
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND o.objid = c.oid AND o.objsubid = 0
                   WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
                     AND pg_catalog.left(c.relname, 1) <> '_') THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
           AND pg_catalog.left(c.relname, 1) <> '_'; -- not LIKE '\_%': with standard_conforming_strings off that is '_%'
        IF v_views IS NOT NULL THEN
            EXECUTE 'DROP VIEW ' || (SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I', v_schema, v), ', ')
                                       FROM pg_catalog.unnest(v_views) v);
        END IF;
    END IF;

    -- Tables, message first.
    FOR r IN SELECT t.table_name, t.placement FROM _citus_tables() t ORDER BY t.p_order, t.table_name LOOP
        v_rel := pg_catalog.format('%I.%I', v_schema, r.table_name);
        SELECT d.partmethod, d.repmodel, d.colocationid INTO v_method, v_repmodel, v_colocation
          FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
        object_kind := 'table';
        object_name := r.table_name;
        changed := false;
        IF r.placement = 'local' THEN
            placement := 'local (coordinator)';
        ELSIF r.placement = 'reference' THEN
            placement := 'reference';
            IF v_method IS DISTINCT FROM 'n' OR v_repmodel IS DISTINCT FROM 't' THEN
                PERFORM pg_catalog.create_reference_table(v_rel::pg_catalog.regclass);
                v_converted := v_converted || v_rel;
                changed := true;
            END IF;
        ELSE
            placement := 'distributed by queue';
            IF r.table_name = 'message' THEN
                IF v_method IS DISTINCT FROM 'h' THEN
                    PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue');
                    v_converted := v_converted || v_rel;
                    changed := true;
                END IF;
                SELECT d.colocationid INTO v_message_colocation
                  FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
            ELSIF v_method IS DISTINCT FROM 'h' THEN
                PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue', colocate_with => v_message);
                v_converted := v_converted || v_rel;
                changed := true;
            ELSIF v_colocation IS DISTINCT FROM v_message_colocation THEN
                PERFORM pg_catalog.update_distributed_table_colocation(v_rel::pg_catalog.regclass, colocate_with => v_message);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;

    -- The rows a conversion copied into the shards stay behind, invisible, in
    -- the coordinator's own table: drop them.
    FOREACH v_rel IN ARRAY v_converted LOOP
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(v_rel::pg_catalog.regclass);
    END LOOP;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk_rel[i], v_fk_name[i], v_fk_def[i]);
    END LOOP;

    -- The views again, on the coordinator only; a view over another view
    -- waits for it (the order of creation is not always the order of the
    -- dependencies: CREATE OR REPLACE may have changed them).
    IF v_views IS NOT NULL THEN
        v_ddl := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        v_left := ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(v_views)));
        WHILE pg_catalog.cardinality(v_left) > 0 LOOP
            v_again := '{}';
            FOREACH i IN ARRAY v_left LOOP
                BEGIN
                    EXECUTE pg_catalog.format('CREATE VIEW %I.%I%s AS %s', v_schema, v_views[i], v_view_opts[i], v_view_defs[i]);
                    IF v_view_comments[i] IS NOT NULL THEN
                        EXECUTE pg_catalog.format('COMMENT ON VIEW %I.%I IS %L', v_schema, v_views[i], v_view_comments[i]);
                    END IF;
                EXCEPTION WHEN undefined_table THEN
                    v_again := v_again || i;
                END;
            END LOOP;
            IF pg_catalog.cardinality(v_again) = pg_catalog.cardinality(v_left) THEN
                RAISE EXCEPTION 'citus_distribute could not create the views % again', v_views
                    USING ERRCODE = 'internal_error';
            END IF;
            v_left := v_again;
        END LOOP;
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', v_ddl, true);
        FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g WHERE g.view_name = ANY (v_views) LOOP
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END LOOP;
    END IF;

    -- Functions: the verbs by p_queue (forced where _citus_delegated says);
    -- every other routine on every node (a delegated verb calls them there)
    -- but those that read a coordinator table or take its rows: they stay
    -- on the coordinator, where maintain() and retention_run call them.
    FOR r IN SELECT p.oid, p.oid::pg_catalog.regprocedure::text AS sig, d.arg_index, d.force,
                    o.distribution_argument_index AS cur_arg, o.colocationid AS cur_colocation,
                    coalesce(o.force_delegation, false) AS cur_force, o.objid IS NOT NULL AS is_distributed,
                    EXISTS (SELECT 1 FROM _citus_tables() t
                              JOIN pg_catalog.pg_class c
                                ON c.relname = t.table_name AND c.relnamespace = v_schema::pg_catalog.regnamespace
                             WHERE t.placement = 'local'
                               AND (p.prosrc ~ ('\m' || t.table_name || '\M')
                                    OR c.reltype = ANY (p.proargtypes::pg_catalog.oid[] || p.prorettype))) AS local_only
               FROM pg_catalog.pg_proc p
               LEFT JOIN _citus_delegated() d ON d.routine = p.oid
               LEFT JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = p.oid AND o.objsubid = 0
              WHERE p.pronamespace = v_schema::pg_catalog.regnamespace
              ORDER BY 2 LOOP
        object_kind := 'function';
        object_name := r.sig;
        changed := false;
        IF r.arg_index IS NOT NULL THEN
            placement := CASE WHEN r.force THEN 'delegated by p_queue' ELSE 'delegated by p_queue (not in transaction blocks)' END;
            IF NOT r.is_distributed OR r.cur_arg IS DISTINCT FROM r.arg_index
               OR r.cur_colocation IS DISTINCT FROM v_message_colocation OR r.cur_force IS DISTINCT FROM r.force THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure, '$' || (r.arg_index + 1),
                                                               colocate_with := v_message, force_delegation := r.force);
                changed := true;
            END IF;
        ELSIF r.local_only THEN
            placement := 'coordinator only';
        ELSE
            placement := 'on every node';
            IF NOT r.is_distributed OR r.cur_arg IS NOT NULL THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- pgsweep:end functions/citus.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
