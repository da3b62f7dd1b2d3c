-- pgsweep 0.26: retention of a distributed (Citus) table, shard by shard.
--
-- A policy on a hash-distributed table is planned per shard (units name
-- their shard: retention_unit.shard_id) and each batch deletes from one
-- shard only, at most batch_size rows (retention_shards.sql). Plain,
-- partitioned, reference and Citus local tables are planned as before.
-- _retention_as_owner takes the shard (a new argument): the old signature
-- goes. No DDL on a distributed table: retention_unit stays a table of the
-- coordinator on a distributed install (citus.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

ALTER TABLE retention_unit ADD COLUMN shard_id bigint;  -- a distributed table's shard (pg_dist_shard.shardid)
DROP FUNCTION _retention_as_owner(retention_policy, text, text, anyelement, anyelement, timestamptz, regclass);

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
-- _retention_as_owner creates it in this session's pg_temp (built now from
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
-- _retention_as_owner checks, before it looks up any name again, that the
-- statement left search_path, every setting a role may SET, the session's
-- prepared statements, retention_policy and the catalogs' object rows
-- (pg_class, pg_type, pg_proc inserts) as it found them. If not, it deletes
-- the new prepared statements (they outlive a rollback) and raises 42501:
-- the batch rolls back with everything the statement did (settings,
-- objects, rows); the error is recorded on the policy's pass and other
-- policies still run. The check costs about 0.1 ms a batch
-- (_retention_session_state). docs/security.md tells the whole story.
--
-- Built-in policies (owner <schema>_owner, pgsweep's own tables) run in
-- _retention_builtin_exec instead, a SECURITY DEFINER function of
-- <schema>_owner that builds the statement from the policy itself.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        WHEN 'drop' THEN (SELECT pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L INTO n; EXECUTE %L; EXECUTE %L; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
            d.count_sql, d.detach_sql, d.drop_sql) FROM _retention_drop_sql(p_target) d)
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

-- _retention_session_state: what _retention_as_owner compares before and
-- after a statement run as a policy's owner. settings: every setting a role
-- may SET (context 'user' in PostgreSQL 15; a name a server lacks reads as
-- NULL) but search_path, which is pinned here (the caller compares its own);
-- prepared: the session's prepared statements (name and text); writes: rows
-- this transaction wrote to retention_policy and inserted into pg_class,
-- pg_type and pg_proc (a new table, view, type or function), from the
-- transaction's statistics counters, or, with track_counts off, a digest of
-- the policies and of this session's temporary objects.
CREATE OR REPLACE FUNCTION _retention_session_state(OUT settings text[], OUT prepared text[], OUT writes text)
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

-- _retention_session_restore deletes the prepared statements that are not
-- in p_prepared (as _retention_session_state lists them): a statement run
-- as a policy's owner made them, and they outlive a rollback. It returns
-- their names.
CREATE OR REPLACE FUNCTION _retention_session_restore(p_prepared text[])
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

-- _retention_as_owner runs one statement of a policy as its owner and
-- returns the DELETE's row count or the sample's three values. It runs as
-- its caller (SECURITY INVOKER): the caller must be able to act as the owner.
-- p_shard: a batch on one shard of a distributed (Citus) table
-- (_retention_shard_body; sampled is then the number of rows it read).
CREATE OR REPLACE FUNCTION _retention_as_owner(p_pol retention_policy, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz, p_target regclass, p_shard bigint DEFAULT NULL,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text;
    v_type text := pg_catalog.format_type(pg_catalog.pg_typeof(p_lo), NULL);
    v_sig text;
    v_path text := pg_catalog.current_setting('search_path');
    v_before record;
    v_after record;
    v_changed text;
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
        v_sql := _retention_sweep_sql(p_pol, p_strategy, p_target);
    ELSIF p_kind = 'drop' THEN
        v_sql := NULL; -- _retention_exec_body builds the drop from p_target
    ELSE
        v_sql := _retention_sample_sql(p_pol, p_lo::text::double precision);
    END IF;
    v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v_type, v_type);
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
        'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L',
        v_sig, _retention_exec_settings(CASE WHEN p_kind = 'delete' AND p_shard IS NULL THEN p_strategy END)
               -- a shard's batch passes its lock_timeout on to the worker (_retention_shard_body)
               || CASE WHEN p_shard IS NOT NULL THEN ' SET citus.propagate_set_commands = local' ELSE '' END,
        CASE WHEN p_shard IS NULL THEN _retention_exec_body(v_sql, p_kind, p_target)
             ELSE _retention_shard_body(p_pol, p_strategy, p_shard, p_lo::text, p_hi::text, p_cutoff) END);
    EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, p_pol.owner::text);
    v_before := _retention_session_state();
    BEGIN
        EXECUTE pg_catalog.format('SELECT * FROM %s', pg_catalog.replace(v_sig,
                pg_catalog.format('(%s, %s, timestamptz, text[], text[])', v_type, v_type), '($1, $2, $3, $4, $5)'))
           INTO deleted, fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, p_pol.statuses, p_pol.filter_values;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Rolled back with the block: settings, objects, rows. Not prepared statements.
        PERFORM _retention_session_restore(v_before.prepared);
        RAISE;
    END;
    -- The owner's code may have set search_path for the session: compare it
    -- before any name is looked up again (pg_catalog only, no operator).
    IF NOT pg_catalog.texteq(pg_catalog.current_setting('search_path'), v_path) THEN
        v_changed := 'search_path';
    ELSE
        v_after := _retention_session_state();
        v_changed := CASE
            WHEN v_after.settings IS DISTINCT FROM v_before.settings THEN
                'settings ' || (SELECT pg_catalog.string_agg(pg_catalog.split_part(a.s, '=', 1), ', ')
                                  FROM pg_catalog.unnest(v_after.settings) a(s) WHERE NOT a.s = ANY (v_before.settings))
            WHEN v_after.prepared IS DISTINCT FROM v_before.prepared THEN 'prepared statements'
            WHEN v_after.writes IS DISTINCT FROM v_before.writes THEN 'retention policies or database objects' END;
    END IF;
    IF v_changed IS NOT NULL THEN
        PERFORM {{ .schema | default "pgsweep" }}._retention_session_restore(v_before.prepared);
        RAISE EXCEPTION 'retention policy %: a statement run as its owner % changed the maintenance session (%); nothing it did is kept',
            p_pol.name, p_pol.owner, v_changed
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Triggers, rules and row-level security policies on a policy''s table run inside maintenance: '
                         'they must not SET parameters, create objects, prepare statements or register retention policies.';
    END IF;
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
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
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
-- A hash-distributed (Citus) table is planned per shard instead: units per
-- shard, each batch one read on the shard's worker and one DELETE routed
-- to that shard alone (retention_shards.sql).
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
-- sample reads (about 400 blocks), NULL for an empty table and for a
-- hash-distributed one (planned per shard, retention_shards.sql: its
-- coordinator's table is an empty shell).
CREATE OR REPLACE FUNCTION _retention_sample_pct(p_pol retention_policy)
RETURNS double precision
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocks bigint := pg_catalog.pg_relation_size(_retention_table(p_pol.table_schema, p_pol.table_name))
                       / current_setting('block_size')::int;
BEGIN
    IF v_blocks > 0 AND (p_pol.owner = _owner_role()
                         OR _retention_distribution(_retention_table(p_pol.table_schema, p_pol.table_name)) IS NULL) THEN
        RETURN least(100, 400 * 100.0 / v_blocks);
    END IF;
    RETURN NULL;
END
$$;

-- _retention_sweep_trim keeps a policy's sweep history bounded: finished
-- sweeps beyond the last 20 go.
CREATE OR REPLACE FUNCTION _retention_sweep_trim(p_policy text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    DELETE FROM retention_sweep s
     WHERE s.policy = p_policy
       AND s.id < (SELECT s2.id FROM retention_sweep s2 WHERE s2.policy = p_policy ORDER BY s2.id DESC OFFSET 20 LIMIT 1)
       AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = s.policy AND u.sweep_id = s.id)
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
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) = 'p' THEN
        RETURN _retention_plan_partitioned(p_pol, p_now, p_owner);
    END IF;
    -- A hash-distributed (Citus) table: units per shard (retention_shards.sql).
    -- Built-in policies filter by their distribution column (one queue): one
    -- shard already.
    IF p_pol.owner <> _owner_role() AND _retention_distribution(v_rel) IS NOT NULL THEN
        RETURN _retention_plan_shards(p_pol, p_now, p_owner);
    END IF;
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

    PERFORM _retention_sweep_trim(p_pol.name);
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
        o_now := coalesce(v_pass.now_override, clock_timestamp());
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
    -- A partitioned policy's unit names its leaf (retention_partition.sql).
    IF v_unit.leaf_name IS NOT NULL THEN
        -- by the catalog, not to_regclass: this runs as <schema>_owner, which
        -- need not have USAGE on the table's schema
        SELECT c.oid INTO o_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r';
        IF o_target IS NULL THEN -- the leaf is gone (dropped by someone else): nothing left to do
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
            o_more := true;
            RETURN;
        END IF;
        -- Planned as a drop but no longer droppable (re-attached elsewhere,
        -- the policy changed): sweep the whole leaf instead.
        IF v_unit.action = 'drop' AND NOT _retention_leaf_droppable(v_pol, o_target, v_sweep.cutoff) THEN
            UPDATE retention_unit SET action = 'delete', block_lo = 0, block_hi = NULL
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no
            RETURNING * INTO v_unit;
        END IF;
    END IF;
    o_action := CASE WHEN v_unit.action = 'drop' THEN 'drop' ELSE 'delete' END;
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

-- _retention_dropped counts a leaf the pass removed whole.
CREATE OR REPLACE FUNCTION _retention_dropped(p_pass bigint)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ UPDATE retention_pass SET partitions_dropped = partitions_dropped + 1 WHERE id = p_pass $$;

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
            v_run := _retention_as_owner(v.o_pol, 'sample', NULL, v.o_pct, NULL::double precision, v.o_cutoff, NULL);
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
        ELSE -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, NULL, NULL, NULL, NULL);
        END IF;
    ELSIF v.o_action IN ('delete', 'drop') THEN
        BEGIN
            IF v.o_action = 'drop' THEN
                v_run := _retention_as_owner(v.o_pol, 'drop', NULL, NULL::tid, NULL::tid, v.o_cutoff, v.o_target);
                PERFORM _retention_dropped(p_pass);
            ELSIF v.o_strategy = 'tid_range' THEN
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy,
                    pg_catalog.format('(%s,0)', (v.o_unit).block_lo)::tid,
                    pg_catalog.format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295))::tid, v.o_cutoff, v.o_target,
                    (v.o_unit).shard_id);
            ELSE
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy, (v.o_unit).time_lo, (v.o_unit).time_hi,
                    v.o_cutoff, v.o_target, (v.o_unit).shard_id);
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- A row of the unit stayed locked past retention_lock_timeout:
            -- the batch rolled back whole; a later pass takes the unit.
            PERFORM _retention_step_deferred(p_pass, v.o_unit);
            RETURN true;
        END;
        -- A shard's batch reads at most batch_size rows of its unit: one
        -- that read that many and deleted some leaves the unit open for the
        -- next batch (retention_shards.sql).
        IF (v.o_unit).shard_id IS NOT NULL AND v_run.sampled >= (v.o_pol).batch_size AND v_run.deleted > 0 THEN
            PERFORM _retention_step_batch(p_pass, v.o_strategy, v_run.deleted);
        ELSE
            PERFORM _retention_step_done(p_pass, v.o_unit, v.o_strategy, v_run.deleted);
        END IF;
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
-- as the policy's owner in the temporary function of _retention_as_owner
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
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
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
