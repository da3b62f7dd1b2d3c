-- Retention of a distributed (Citus) table (docs/operations.md, "Scaling out
-- with Citus"). A ctid means a different row in each shard, so a hash-distributed table
-- is planned per shard (retention_unit.shard_id): tid_range units over its
-- blocks, or one keyset window. A batch reads, on the shard's worker, the
-- ctid and distribution value of at most batch_size eligible rows, then
-- DELETEs those through the coordinator with the full predicate; a read of
-- batch_size rows leaves its unit open. Other Citus tables and the built-in
-- policies are planned like plain tables.

-- _retention_distribution: a hash-distributed table's distribution column, else NULL.
CREATE OR REPLACE FUNCTION _retention_distribution(p_rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_col text;
BEGIN
    IF NOT _citus_available() THEN RETURN NULL; END IF;
    EXECUTE 'SELECT pg_catalog.column_to_column_name(d.logicalrelid, d.partkey) FROM pg_catalog.pg_dist_partition d '
            'WHERE d.logicalrelid = $1 AND d.partmethod = ''h'''
       INTO v_col USING p_rel;
    RETURN v_col;
END
$$;

-- _retention_shard_placement: a shard's active primary's node, port and qualified name (NULLs: gone).
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

-- _retention_time_literal: a time as a literal that means the same in any session (ISO 8601, UTC).
CREATE OR REPLACE FUNCTION _retention_time_literal(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.format('%L::pg_catalog.timestamptz', CASE WHEN pg_catalog.isfinite(p_at)
        THEN pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') ELSE p_at::text END)
$$;

-- _retention_plan_shards plans a sweep of a hash-distributed table.
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
    v_sweep bigint;
    v_sizes text[] := '{}';
    v_units int;
    v_blocks bigint := 0;
    v_at timestamptz := clock_timestamp();
    r record;
BEGIN
    EXECUTE 'SELECT pg_catalog.array_agg(s.shardid ORDER BY s.shardid) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = $1'
       INTO v_shards USING v_rel;
    -- each shard's blocks and statistics, one command a node (by its first shard), by name
    FOR r IN SELECT w.node, w.port, min(s.id) AS first,
                    string_agg(format('(%s::bigint, %L, %L)', s.id, (parse_ident(w.shard))[1], (parse_ident(w.shard))[2]),
                               ', ' ORDER BY s.id) AS shards
               FROM unnest(v_shards) s(id) CROSS JOIN LATERAL _retention_shard_placement(v_rel, s.id) w
              GROUP BY w.node, w.port ORDER BY min(s.id) LOOP
        IF r.node IS NULL THEN
            RAISE EXCEPTION 'retention policy %: shard % of % has no active placement', p_pol.name, r.first, v_rel::text
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
        v_nodes := v_nodes || r.node;
        v_ports := v_ports || r.port;
        v_cmds := v_cmds || format('SELECT pg_catalog.string_agg(v.shard || '' '' || coalesce('
                                   'pg_catalog.pg_relation_size(c.oid) / %s || '' '' || c.reltuples || '' '' || c.relpages, ''0 -1 0''), '','') '
                                   'FROM (VALUES %s) v(shard, nsp, rel) '
                                   'LEFT JOIN (pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace) '
                                   'ON n.nspname = v.nsp AND c.relname = v.rel', v_block_size, r.shards);
    END LOOP;
    -- "shard blocks tuples pages", one line a shard
    FOR r IN SELECT * FROM pg_catalog.master_run_on_worker(v_nodes, v_ports, v_cmds, true) LOOP
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
        -- rows per block from the shard's statistics, else 64 bytes a row
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

-- _retention_shard_body: the PL/pgSQL body of one batch on one shard, run as
-- the policy's owner: the rows deleted and, as sampled, the rows read.
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
    v_order := CASE WHEN p_strategy = 'tid_range' THEN 'ctid' ELSE format('%I', p_pol.time_column) END;
    v_range := CASE WHEN p_strategy = 'tid_range'
                    THEN format('ctid >= %L::pg_catalog.tid AND ctid < %L::pg_catalog.tid', p_lo, p_hi)
                    ELSE format('%1$I >= %2$s AND %1$I < %3$s', p_pol.time_column,
                                _retention_param(p_pol, _retention_time_literal(p_lo::timestamptz)),
                                _retention_param(p_pol, _retention_time_literal(p_hi::timestamptz))) END;
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
