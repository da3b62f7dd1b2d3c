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

-- _retention_delete_range deletes the eligible rows in heap blocks
-- [p_block_lo, p_block_hi) (to the end when p_block_hi is NULL): one Tid Range
-- Scan over those blocks, no index, nothing else read. The planner settings
-- pin that plan; a sweep picks this strategy only where most rows of the
-- blocks are eligible, and there an index walk would cost more. JIT off: the
-- disabled plan types' penalty costs would otherwise trigger JIT compilation
-- of every statement here (measured: 100+ ms per batch), and a batch is far
-- too short to gain from it.
CREATE OR REPLACE FUNCTION _retention_delete_range(p_sweep retention_sweep, p_pol retention_policy,
    p_block_lo bigint, p_block_hi bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_indexscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    -- An open-ended unit runs to the largest block number there can be.
    EXECUTE p_sweep.delete_sql
      USING format('(%s,0)', p_block_lo)::tid, format('(%s,0)', coalesce(p_block_hi, 4294967295))::tid,
            p_sweep.cutoff, p_pol.statuses, p_pol.filter_values;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- _retention_delete_window deletes the eligible rows whose time is in
-- [p_time_lo, p_time_hi); the planner picks the plan (an index on the time
-- column, for the small windows this strategy is chosen for).
CREATE OR REPLACE FUNCTION _retention_delete_window(p_sweep retention_sweep, p_pol retention_policy,
    p_time_lo timestamptz, p_time_hi timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    EXECUTE p_sweep.delete_sql USING p_time_lo, p_time_hi, p_sweep.cutoff, p_pol.statuses, p_pol.filter_values;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
