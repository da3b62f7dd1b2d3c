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
-- keyset: one unit whose progress is the time reached so far; every batch
--   takes the next batch_size eligible rows in time order from an index that
--   leads with the time column and deletes them by TID. For a sparse backlog
--   (measured: 1% eligible) this reads only the index range of old rows where
--   a heap walk would read the whole table. One unit: parallel cleaners do not
--   split a keyset sweep (it is small by construction); the others return.
--
-- 'auto' takes keyset when such an index exists and the planner expects at
-- most retention_keyset_fraction of the table to be eligible, else tid_range.
-- The threshold comes from the measurements in docs/benchmarks.md: a heap walk
-- reads every block at about 10x the rate at which the keyset walk deletes, so
-- below about a tenth of the table eligible the keyset walk wins.

CREATE OR REPLACE FUNCTION retention_keyset_fraction()
RETURNS double precision
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 0.15::double precision $$;

CREATE OR REPLACE FUNCTION _retention_plan(p_pol retention_policy, p_now timestamptz, p_owner text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_strategy text := p_pol.strategy;
    v_block_size int := current_setting('block_size')::int;
    v_plan json;
    v_est double precision;
    v_tuples double precision;
    v_pages double precision;
    v_width double precision;
    v_rpb double precision;
    v_blocks bigint;
    v_step bigint;
    v_sweep bigint;
    v_units int;
    v_sql record;
BEGIN
    SELECT c.reltuples, c.relpages INTO v_tuples, v_pages FROM pg_catalog.pg_class c WHERE c.oid = v_rel;
    EXECUTE format('EXPLAIN (FORMAT JSON) SELECT 1 FROM %s WHERE %s', v_rel::text, _retention_predicate(p_pol, v_rel))
      INTO v_plan
      USING NULL::tid, NULL::tid, v_cutoff, p_pol.statuses, p_pol.filter_values;
    v_est := (v_plan -> 0 -> 'Plan' ->> 'Plan Rows')::double precision;
    IF v_strategy = 'auto' THEN
        -- reltuples < 0: never analyzed, the estimate means nothing; walk the heap.
        v_strategy := CASE
            WHEN v_tuples > 0 AND v_est <= retention_keyset_fraction() * v_tuples
                 AND _retention_index(v_rel, p_pol.time_column, p_pol.status_column, p_pol.filter_column) IS NOT NULL
            THEN 'keyset' ELSE 'tid_range' END;
    END IF;

    IF v_strategy = 'tid_range' THEN
        v_blocks := pg_catalog.pg_relation_size(v_rel) / v_block_size;
        -- Rows per block: the larger of the statistics' average (which a mostly
        -- deleted table drags down) and what the rows' average width allows,
        -- so that a unit of still-dense blocks does not hold many batches.
        SELECT (v_block_size - 24) / (sum(s.avg_width) + 28) INTO v_width
          FROM pg_catalog.pg_stats s WHERE s.schemaname = p_pol.table_schema AND s.tablename = p_pol.table_name;
        v_rpb := greatest(CASE WHEN v_tuples > 0 AND v_pages > 0 THEN v_tuples / v_pages END, v_width);
        IF v_rpb IS NULL AND v_blocks > 0 THEN
            -- Never analyzed: count the rows of the first few blocks instead.
            EXECUTE format('SELECT count(*) / %s::float8 FROM %s WHERE ctid < $1', least(v_blocks, 8), v_rel::text)
              INTO v_rpb USING format('(%s,0)', least(v_blocks, 8))::tid;
        END IF;
        v_rpb := greatest(coalesce(v_rpb, 1), 1);
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
    END IF;

    v_sql := _retention_sweep_sql(p_pol, v_strategy);
    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units, blocks, step_blocks,
                                 estimated_rows, delete_sql, select_sql)
    VALUES (p_pol.name, v_strategy, v_cutoff, clock_timestamp(), p_owner, 0, v_blocks, v_step, v_est,
            v_sql.delete_sql, v_sql.select_sql)
    RETURNING id INTO v_sweep;

    IF v_strategy = 'tid_range' THEN
        INSERT INTO retention_unit (policy, sweep_id, unit_no, block_lo, block_hi)
        SELECT p_pol.name, v_sweep, g.n, g.lo, CASE WHEN g.lo + v_step < v_blocks THEN g.lo + v_step END
          FROM generate_series(0, greatest(v_blocks - 1, 0), v_step) WITH ORDINALITY g(lo, n);
    ELSE
        INSERT INTO retention_unit (policy, sweep_id, unit_no, time_lo)
        VALUES (p_pol.name, v_sweep, 1, '-infinity');
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
