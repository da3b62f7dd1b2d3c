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
