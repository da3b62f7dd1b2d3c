-- Retention: the SQL each batch runs against the policy's table.
--
-- Every DELETE carries the policy's full predicate, which READ COMMITTED
-- re-evaluates on a row a concurrent transaction updated (EvalPlanQual): a
-- re-queued row is skipped. Parameters: $1, $2 the range (TIDs or times), $3
-- the cutoff, $4 the statuses, $5 the filter values; names through %I.
-- For a timestamp or date column the cutoff (a timestamptz) holds the local
-- cutoff (in the policy's time zone) encoded as UTC, decoded on the
-- parameter, so that the column's index still serves.

-- _retention_cutoff computes a policy's cutoff for a clock reading.
CREATE OR REPLACE FUNCTION _retention_cutoff(p_pol retention_policy, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_pol.time_type = 'timestamptz' THEN p_now - p_pol.older_than
                ELSE ((p_now - p_pol.older_than) AT TIME ZONE coalesce(p_pol.time_zone, current_setting('TimeZone')))
                     AT TIME ZONE 'UTC' END
$$;

-- _retention_param decodes an encoded time parameter into the column's type;
-- _retention_encode encodes a column value (an SQL expression).
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

-- _retention_predicate_with: the eligibility test over SQL for the cutoff, statuses, filter values.
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

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT _retention_predicate_with(p_pol, p_rel, '$3', '$4', '$5') $$;

-- _retention_sweep_sql: a unit's DELETE on the policy's table or its leaf p_target.
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT format('DELETE FROM %s WHERE %s AND %s',
                  CASE WHEN p_target IS NULL THEN format('%I.%I', p_pol.table_schema, p_pol.table_name)
                       ELSE (SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c
                               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_target) END,
                  CASE WHEN p_strategy = 'tid_range' THEN 'ctid >= $1 AND ctid < $2'
                       ELSE format('%1$I >= %2$s AND %1$I < %3$s', p_pol.time_column,
                                   _retention_param(p_pol, '$1'), _retention_param(p_pol, '$2')) END,
                  _retention_predicate(p_pol, _retention_table(p_pol.table_schema, p_pol.table_name)))
$$;

-- _retention_sample_sql: a sample of p_pct% of the blocks: eligible fraction, rows, eligible times.
CREATE OR REPLACE FUNCTION _retention_sample_sql(p_pol retention_policy, p_pct double precision)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT format('SELECT count(*) FILTER (WHERE %1$s)::float8 / nullif(count(*), 0), count(*), '
                  'array_agg(%2$s ORDER BY %3$I) FILTER (WHERE %1$s) FROM %4$I.%5$I TABLESAMPLE SYSTEM (%6$s)',
                  _retention_predicate(p_pol, _retention_table(p_pol.table_schema, p_pol.table_name)),
                  _retention_encode(p_pol, quote_ident(p_pol.time_column)),
                  p_pol.time_column, p_pol.table_schema, p_pol.table_name, p_pct)
$$;
-- Running a policy's statements as its owner (docs/security.md, "Running as
-- the owner"): retention_step creates a SECURITY DEFINER function owned by
-- that role in pg_temp (SET ROLE is not enough: the owner's trigger could
-- RESET ROLE), calls it once, drops it, and rolls the batch back (42501)
-- unless the owner's code left the session as it found it.

-- _retention_exec_settings: a tid_range DELETE pinned to its Tid Range Scan,
-- no JIT, and no lock wait longer than retention_lock_timeout.
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

-- retention_step_session_state: what retention_step compares around a
-- statement run as a policy's owner: every setting SHOW ALL lists but
-- search_path (compared by the caller); the prepared statements; the rows
-- this transaction wrote to retention_policy and inserted into pg_class,
-- pg_type and pg_proc (track_counts off: a digest of the policies and
-- temporary objects).
CREATE OR REPLACE FUNCTION retention_step_session_state(OUT settings text[], OUT prepared text[], OUT writes text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
BEGIN
    settings := '{}';
    FOR v IN EXECUTE 'SHOW ALL' LOOP
        CONTINUE WHEN v.name = 'search_path';
        settings := settings || (v.name || '=' || coalesce(v.setting, '<unset>'));
    END LOOP;
    prepared := ARRAY(SELECT p.name || ' ' || p.statement FROM pg_catalog.pg_prepared_statements p ORDER BY 1);
    IF pg_catalog.current_setting('track_counts')::boolean THEN
        writes := pg_catalog.concat_ws(' ',
            (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r) + pg_catalog.pg_stat_get_xact_tuples_updated(r)
                        + pg_catalog.pg_stat_get_xact_tuples_deleted(r))
               FROM pg_catalog.unnest(ARRAY['retention_policy'::regclass]) r),
            (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r))
               FROM pg_catalog.unnest(ARRAY['pg_catalog.pg_class'::regclass, 'pg_catalog.pg_type', 'pg_catalog.pg_proc']) r));
    ELSE
        writes := pg_catalog.concat_ws(' ',
            (SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(p::text, ',' ORDER BY p.name), '')) FROM retention_policy p),
            (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.pg_my_temp_schema()),
            (SELECT count(*) FROM pg_catalog.pg_type t WHERE t.typnamespace = pg_catalog.pg_my_temp_schema()),
            (SELECT count(*) FROM pg_catalog.pg_proc f WHERE f.pronamespace = pg_catalog.pg_my_temp_schema()));
    END IF;
END
$$;

-- retention_step_session_restore deallocates the prepared statements not in
-- p_prepared (they outlive a rollback) and returns their names.
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

-- retention_step does one step of a pass (at most one batch); false when the
-- pass is over. It runs as its caller, the statement as the table's owner,
-- between retention_step_claim and retention_step_record.
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
    v_out record;
BEGIN
    v := retention_step_claim(p_pass);
    IF v.o_kind IS NULL THEN RETURN v.o_more; END IF;
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
            -- recorded first: from the parent's lock to the commit only the rows are left to add
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
               INTO v_out
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
        PERFORM retention_step_record(p_pass, 'done', v_out.deleted, v_out.fraction, v_out.sampled, v_out.times);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        -- A row, a table or a leaf stayed locked past retention_lock_timeout: the
        -- step rolled back whole; its units wait for a later pass.
        IF v.o_kind = 'sample' OR (v.o_kind = 'delete' AND SQLSTATE = '40P01') THEN RAISE; END IF;
        PERFORM retention_step_record(p_pass, 'locked', NULL, NULL, NULL, NULL);
    END;
    RETURN v.o_more;
END
$$;

-- _retention_builtin_exec runs a built-in policy's statement, built from the
-- policy (no SQL taken), as <schema>_owner; refuses any other policy.
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
