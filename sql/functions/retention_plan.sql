-- Retention: planning a sweep (docs/retention.md, "Strategies").
--
-- A sweep fixes the cutoff and the strategy and cuts the work into units of
-- about one batch: tid_range, heap block ranges (the last open-ended), or
-- keyset, windows of the time column, driven by an index that leads with it.
-- 'auto' takes keyset when there is such an index and a sample of about 400
-- blocks finds at most 5% of the table eligible.

-- _retention_sweep_trim: finished sweeps beyond a policy's last 20 go.
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
    v_strategy text := p_pol.strategy;
    v_block_size int := current_setting('block_size')::int;
    v_bounds timestamptz[];
    v_rpb double precision;
    v_blocks bigint;
    v_step bigint;
    v_sweep bigint;
    v_units int;
    v_n int;
    v_at timestamptz := clock_timestamp();
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
    v_blocks := pg_catalog.pg_relation_size(v_rel) / v_block_size;
    IF v_strategy = 'auto' THEN -- no index, or a sample of empty blocks: walk the heap
        v_strategy := CASE WHEN p_fraction <= 0.05::double precision
            AND _retention_index(v_rel, p_pol.time_column, p_pol.status_column, p_pol.filter_column) IS NOT NULL
            THEN 'keyset' ELSE 'tid_range' END;
    END IF;
    IF v_strategy = 'tid_range' THEN
        -- rows per block: the most of the statistics', the rows' width's and
        -- the sample's, so that a unit of dense blocks holds one batch
        SELECT greatest(CASE WHEN c.reltuples > 0 AND c.relpages > 0 THEN c.reltuples::float8 / c.relpages END,
                        (SELECT (v_block_size - 24) / (sum(s.avg_width) + 28) FROM pg_catalog.pg_stats s
                          WHERE s.schemaname = p_pol.table_schema AND s.tablename = p_pol.table_name),
                        p_sampled / (p_pct / 100 * v_blocks), 1)
          INTO v_rpb FROM pg_catalog.pg_class c WHERE c.oid = v_rel;
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
    ELSE
        -- windows cut at the quantiles of the sampled eligible times, from
        -- -infinity to infinity: every row is covered
        v_n := least(greatest(ceil(coalesce(p_fraction * p_sampled * 100 / p_pct, 0) / p_pol.batch_size), 1),
                     coalesce(cardinality(p_times), 1), 100000)::int;
        SELECT '{-infinity}'::timestamptz[]
               || coalesce(array_agg(DISTINCT p_times[ceil(i * cardinality(p_times)::float8 / v_n)::int]), '{}')
               || '{infinity}'::timestamptz[]
          INTO v_bounds FROM generate_series(1, v_n - 1) i;
    END IF;
    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units, blocks, step_blocks,
                                 eligible_fraction)
    VALUES (p_pol.name, v_strategy, _retention_cutoff(p_pol, p_now), v_at, p_owner, 0, v_blocks, v_step, p_fraction)
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
