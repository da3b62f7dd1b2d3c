-- Retention of partitioned tables (docs/retention.md, "Partitioned tables").
-- A policy on a partitioned table covers every leaf, present and future. A
-- RANGE leaf on the time column alone wholly before the cutoff is removed
-- whole when the policy has no status nor filter and its owner owns the leaf
-- and its parent; a leaf wholly after the cutoff is left alone; every other
-- leaf is swept in tid_range units of its own, as its owner.
-- Removing leaves takes two passes: a drop unit's step detaches the sweep's
-- droppable leaves of that parent in one transaction, renamed
-- pgsweep_detached_<oid> (their rows count then); the next pass drops them,
-- holding no lock on the parent. The Go runner detaches drop units
-- CONCURRENTLY instead (retention_detach.sql).

-- _retention_leaf_bound: the upper (exclusive) or p_lower bound of a RANGE
-- leaf on the policy's time column, encoded like the cutoff; else NULL.
CREATE OR REPLACE FUNCTION _retention_leaf_bound(p_pol retention_policy, p_leaf regclass, p_lower boolean)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bound text;
BEGIN
    -- the leaf's bound, if its parent is partitioned by RANGE of the time column alone:
    -- FOR VALUES FROM ('2026-01-01 00:00:00+00') TO ('2026-01-02 00:00:00+00')
    SELECT CASE WHEN p_lower THEN substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) FROM '^FOR VALUES FROM \((.*)\) TO \(')
                ELSE substring(pg_catalog.pg_get_expr(c.relpartbound, c.oid) FROM ' TO \((.*)\)$') END INTO v_bound
      FROM pg_catalog.pg_inherits i
      JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent AND pt.partstrat = 'r' AND pt.partnatts = 1
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.inhparent AND a.attnum = pt.partattrs[0] AND a.attname = p_pol.time_column
      JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhrelid = p_leaf;
    IF v_bound IS NULL OR v_bound ILIKE '%MAXVALUE%' OR v_bound ILIKE '%MINVALUE%' THEN RETURN NULL; END IF;
    EXECUTE format('SELECT %s', _retention_encode(p_pol, format('(%s)::%s', v_bound,
        CASE p_pol.time_type WHEN 'timestamptz' THEN 'timestamptz' WHEN 'timestamp' THEN 'timestamp' ELSE 'date' END)))
       INTO v_bound;
    RETURN v_bound::timestamptz;
END
$$;

-- _retention_leaf_expired: whether the policy deletes every row the leaf can hold.
CREATE OR REPLACE FUNCTION _retention_leaf_expired(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_pol.status_column IS NULL AND p_pol.filter_column IS NULL
       AND coalesce(_retention_leaf_bound(p_pol, p_leaf, false) <= p_cutoff, false)
$$;

-- _retention_leaf_droppable: expired, and the leaf and its parent are the policy owner's.
CREATE OR REPLACE FUNCTION _retention_leaf_droppable(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT _retention_leaf_expired(p_pol, p_leaf, p_cutoff)
       AND (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_leaf) = p_pol.owner
       AND (SELECT c.relowner FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhparent
             WHERE i.inhrelid = p_leaf) = p_pol.owner
$$;

-- _retention_plan_partitioned plans a sweep of a partitioned table.
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
           -- not half-detached nor held by a runner (retention_detach.sql)
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = t.relid AND i.inhdetachpending)
           AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.leaf = t.relid AND u.owner IS NOT NULL)
         ORDER BY n.nspname, c.relname
    LOOP
        -- a RANGE leaf wholly younger than the cutoff: no row of it is eligible
        CONTINUE WHEN _retention_leaf_bound(p_pol, v_leaf.leaf, true) >= v_cutoff;
        IF _retention_leaf_droppable(p_pol, v_leaf.leaf, v_cutoff) THEN
            v_units := v_units + 1;
            INSERT INTO retention_unit (policy, sweep_id, unit_no, leaf_schema, leaf_name, kind)
            VALUES (p_pol.name, v_sweep, v_units, v_leaf.nspname, v_leaf.relname, 'drop');
            CONTINUE;
        END IF;
        v_blocks := pg_catalog.pg_relation_size(v_leaf.leaf) / v_block_size;
        v_rpb := greatest(CASE WHEN v_leaf.reltuples > 0 AND v_leaf.relpages > 0
                               THEN v_leaf.reltuples / v_leaf.relpages END, 1);
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
        INSERT INTO retention_unit (policy, sweep_id, unit_no, block_lo, block_hi, leaf_schema, leaf_name, kind)
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

-- _retention_depended_on: whether something outside a table (a view, a
-- foreign key) depends on it, so that its DROP would fail.
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
                      AND NOT (d.classid = 'pg_catalog.pg_rewrite'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite w
                                            WHERE w.oid = d.objid AND w.ev_class = p_table))
                      AND NOT (d.classid = 'pg_catalog.pg_attrdef'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef a
                                            WHERE a.oid = d.objid AND a.adrelid = p_table)))
$$;

-- _retention_detached_name: a detached leaf's name until a later pass drops it.
CREATE OR REPLACE FUNCTION _retention_detached_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_' || p_leaf::text $$;

-- _retention_detach_body: the PL/pgSQL body, run as the policy's owner, that
-- detaches p_parent's leaves p_leaves in one transaction: counts each leaf's
-- rows; locks each SHARE UPDATE EXCLUSIVE (no insert waits; an autovacuum is
-- cancelled after deadlock_timeout, a leaf still held is skipped); locks the
-- parent under retention_lock_timeout; then locks each leaf NOWAIT, detaches
-- and renames it. Returns the rows (deleted) and leaves (sampled) detached.
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
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_deadlock bigint := (extract(epoch FROM pg_catalog.current_setting('deadlock_timeout')::interval) * 1000)::bigint;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_parent;
    IF v_parent IS NULL THEN
        -- the leaf left its parent since the plan: nothing to detach
        RETURN 'BEGIN RETURN QUERY SELECT 0::bigint, NULL::float8, 0::bigint, NULL::timestamptz[]; END';
    END IF;
    FOR v_leaf IN
        SELECT l.oid, l.ord, format('%I.%I', n.nspname, c.relname) AS name
          FROM unnest(p_leaves) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        -- a leaf gone, detached or half-detached since the claim is skipped
        v_counts := v_counts || format('BEGIN EXECUTE %L INTO c; EXCEPTION WHEN undefined_table THEN c := 0; END; r[%s] := c; ',
            format('SELECT CASE WHEN pg_catalog.pg_stat_get_live_tuples(c.oid) > 0 THEN pg_catalog.pg_stat_get_live_tuples(c.oid) '
                   'WHEN c.reltuples >= 0 THEN c.reltuples::bigint ELSE (SELECT count(*) FROM ONLY %s) END '
                   'FROM pg_catalog.pg_class c WHERE c.oid = %s', v_leaf.name, v_leaf.oid), v_leaf.ord);
        v_prelocks := v_prelocks || format(
            'BEGIN EXECUTE %L; ok[%s] := true; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; ',
            format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE', v_leaf.name), v_leaf.ord, v_leaf.ord);
        v_steps := v_steps || format(
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN object_not_in_prerequisite_state OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN EXECUTE %L; n := n + r[%s]; d := d + 1; END IF; ',
            v_leaf.ord, format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_leaf.name), v_leaf.ord,
            v_leaf.ord, format('ALTER TABLE %s DETACH PARTITION %s', v_parent, v_leaf.name), v_leaf.ord,
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
