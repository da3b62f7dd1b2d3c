-- pgsweep 0.27: an expired partition is removed in two steps.
--
-- A drop unit now empties its leaf (TRUNCATE, which locks the leaf alone;
-- its commit unlinks the files) and then, in the next transaction, detaches
-- and drops the empty leaf: the parent's ACCESS EXCLUSIVE lock, which every
-- insert into the parent waits for, is held for about a millisecond instead
-- of through the unlinking of the leaf's files. The rows of a dropped leaf
-- are counted from the statistics, not with count(*) (retention_partition.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

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
-- Every other leaf -- the default partition, LIST and HASH leaves, a leaf
-- the cutoff cuts through -- is swept like a plain table, in tid_range units
-- of its own, with the same guarantees (the full predicate in every DELETE,
-- exclusive and parallel modes).
--
-- Locks: DETACH and DROP take an ACCESS EXCLUSIVE lock on the parent. The
-- drop runs with lock_timeout = retention_lock_timeout (1 s by default):
-- writers and readers queue behind the request at most that long, and a
-- drop that cannot get the lock in time (a long transaction reading the old
-- partition, say) is deferred to a later pass (outcome 'deferred') instead
-- of waiting while everyone queues behind it. DETACH ... CONCURRENTLY is not
-- used: it cannot run in a function or procedure (so not under pg_cron or
-- CALL maintain()), it waits for every older snapshot, and a run killed
-- between its two transactions leaves a partition half-detached for a DBA
-- to finalize. The short-lock DETACH works the same for pg_cron-only
-- installs and for the Go runner.
--
-- Two steps, two transactions (0.27). A drop unit first empties its leaf:
-- TRUNCATE, which locks the leaf alone (writers insert into today's leaf;
-- queries on the parent that prune the old leaf do not touch it), and whose
-- commit unlinks the leaf's files. The next step detaches and drops the
-- now empty leaf: the ACCESS EXCLUSIVE lock on the parent is held for about
-- a millisecond. In one transaction the parent stayed locked through the
-- commit, and the commit unlinks the files: 35-55 ms for a leaf of 1,000,000
-- rows, every insert into the parent waiting meanwhile (docs/benchmarks.md,
-- "cleanup --partitioned"). Between the steps the leaf is attached and
-- empty; a row that lands in it meanwhile has a time before the cutoff and
-- goes with the leaf.
--
-- The rows a dropped leaf held are reported as deleted, as a swept leaf's
-- are, counted from the statistics rather than read: the cumulative
-- statistics' live tuples (exact for a partition only ever inserted into),
-- else pg_class.reltuples (the last VACUUM or ANALYZE), and count(*) only for
-- a leaf that has neither. A count(*) reads the whole leaf: 2.2 of the 2.4 s
-- that dropping 8 leaves of 1,000,000 rows took, for a number.

-- _retention_leaf_upper: the exclusive upper bound of a RANGE leaf on the
-- policy's time column, encoded like the cutoff (_retention_cutoff); NULL
-- when the leaf is not such a range (LIST, HASH, DEFAULT, a multi-column or
-- other-column key, MAXVALUE).
CREATE OR REPLACE FUNCTION _retention_leaf_upper(p_pol retention_policy, p_leaf regclass)
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
    v_upper text;
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
    v_upper := substring(v_bound FROM ' TO \((.*)\)$');
    IF v_upper IS NULL OR v_upper ILIKE '%MAXVALUE%' OR v_upper ILIKE '%MINVALUE%' THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT %s', _retention_encode(p_pol, format('(%s)::%s', v_upper,
        CASE p_pol.time_type WHEN 'timestamptz' THEN 'timestamptz' WHEN 'timestamp' THEN 'timestamp' ELSE 'date' END)))
       INTO v_bound;
    RETURN v_bound::timestamptz;
END
$$;

-- _retention_leaf_droppable: whether a leaf may be removed whole at p_cutoff
-- (see the rules above).
CREATE OR REPLACE FUNCTION _retention_leaf_droppable(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_upper timestamptz;
    v_parent regclass;
BEGIN
    IF p_pol.status_column IS NOT NULL OR p_pol.filter_column IS NOT NULL THEN
        RETURN false;
    END IF;
    v_upper := _retention_leaf_upper(p_pol, p_leaf);
    IF v_upper IS NULL OR v_upper > p_cutoff THEN
        RETURN false;
    END IF;
    SELECT i.inhparent INTO v_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    RETURN pg_catalog.pg_has_role(p_pol.owner, (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_leaf), 'USAGE')
       AND pg_catalog.pg_has_role(p_pol.owner, (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = v_parent), 'USAGE');
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
         ORDER BY n.nspname, c.relname
    LOOP
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
-- parent, drop it; _retention_truncate_sql empties it first.
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

-- _retention_truncate_sql: the statement that empties a leaf before it is
-- dropped (the first of a drop unit's two steps, see above).
CREATE OR REPLACE FUNCTION _retention_truncate_sql(p_leaf regclass)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.format('TRUNCATE ONLY %I.%I', n.nspname, c.relname)
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_leaf
$$;
-- pgsweep:end functions/retention_partition.sql

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
        -- a drop unit's two steps (retention_partition.sql): count and empty
        -- the leaf; then detach and drop it
        WHEN 'truncate' THEN (SELECT pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L INTO n; EXECUTE %L; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
            d.count_sql, _retention_truncate_sql(p_target)) FROM _retention_drop_sql(p_target) d)
        WHEN 'drop' THEN (SELECT pg_catalog.format(
            'BEGIN EXECUTE %L; EXECUTE %L; '
            'RETURN QUERY SELECT 0::bigint, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
            d.detach_sql, d.drop_sql) FROM _retention_drop_sql(p_target) d)
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
    ELSIF p_kind IN ('truncate', 'drop') THEN
        v_sql := NULL; -- _retention_exec_body builds them from p_target
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
            IF v.o_action = 'drop' AND (v.o_unit).block_lo IS NULL THEN
                -- first step: count and empty the leaf; the unit stays open,
                -- marked emptied (block_lo 0), and the next step drops it
                v_run := _retention_as_owner(v.o_pol, 'truncate', NULL, NULL::tid, NULL::tid, v.o_cutoff, v.o_target);
                UPDATE retention_unit u SET block_lo = 0
                 WHERE u.policy = (v.o_unit).policy AND u.sweep_id = (v.o_unit).sweep_id AND u.unit_no = (v.o_unit).unit_no;
                PERFORM _retention_step_batch(p_pass, v.o_strategy, v_run.deleted);
                RETURN true;
            ELSIF v.o_action = 'drop' THEN
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

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
