-- pgsweep 0.33: detached partitions of a table with a CHECK constraint are
-- dropped again.
--
-- A pass leaves a detached table in place when something outside it
-- depends on it (a view, a foreign key): its DROP would fail. The check
-- counted the table's own constraints too, and a CHECK constraint -- every
-- leaf inherits the parent's -- depends on the table's columns: since 0.30
-- every expired partition of such a table was detached but never dropped
-- (a NOTICE each pass). The runner's DROP (0.32) had its own copy of the
-- check with that exception; both now ask _retention_depended_on
-- (retention_partition.sql). retention_detach_claim also lists the due
-- policies once per call instead of twice.
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
-- A RANGE leaf on the time column whose lower bound is at or after the
-- cutoff holds no eligible row: the plan leaves it alone (0.30). Before, every
-- young leaf got tid_range units and each pass read it whole for nothing:
-- 0.85 of the 1.3 s a pass over the benchmark's 10 leaves took.
--
-- Locks: DETACH takes an ACCESS EXCLUSIVE lock on the parent (and on the
-- default partition, if there is one). A drop unit's first step detaches
-- every droppable leaf of the sweep under that parent in ONE transaction
-- (0.30): the parent's lock is requested with lock_timeout =
-- retention_lock_timeout (1 s by default; writers and readers queue behind
-- the request at most that long), each leaf's with NOWAIT once the parent's
-- is held (a leaf another transaction is reading -- a long report, say -- is
-- skipped and its unit deferred to a later pass, instead of holding the
-- parent while waiting for it), and the lock is held for about 0.1-0.3 ms a
-- leaf plus the commit: inserts wait for it once per pass, not once per
-- leaf. Before the parent, each leaf is locked SHARE UPDATE EXCLUSIVE (which
-- no insert or query waits for) so that an autovacuum worker on it yields
-- first (_retention_detach_body). A parent lock that is not granted in time
-- defers every unit of the step.
-- DETACH ... CONCURRENTLY cannot run in a function or procedure (so not
-- under pg_cron or CALL maintain()) and PostgreSQL refuses it when the table
-- has a default partition: the Go runner runs it before each maintenance
-- pass (0.31, retention_detach.sql); the leaves it claimed or left
-- half-detached are not planned here.
--
-- Detached, not dropped (0.30). The detached leaf is renamed
-- pgsweep_detached_<oid> in the same transaction (its name is free again at
-- once, and nothing writes into it by its old name) and its unit stays open,
-- marked detached (block_lo -1, block_hi its oid). Its rows are gone from
-- the policy's table at that commit, so they count as deleted then, and the
-- pass may end 'drained'. The next pass (retention_due lists the policy at
-- once) drops the detached tables first, in one transaction that holds no
-- lock on the parent: the commit releases the files, 25-50 ms a leaf of
-- 1,000,000 rows on ext4 (docs/benchmarks.md), one buffer-pool scan for all
-- of them. PostgreSQL releases a dropped table's files after the commit has
-- released its locks, so no writer waits for that either way; moving it to
-- the next pass takes it out of the pass that removes the rows.
-- 0.27-0.29 emptied a leaf with TRUNCATE before detaching it; a unit left
-- emptied (block_lo 0) by those versions is detached like any other.
--
-- The rows a detached leaf held are reported as deleted, as a swept leaf's
-- are, counted from the statistics rather than read: the cumulative
-- statistics' live tuples (exact for a partition only ever inserted into),
-- else pg_class.reltuples (the last VACUUM or ANALYZE), and count(*) only for
-- a leaf that has neither. A count(*) reads the whole leaf: 2.2 of the 2.4 s
-- that dropping 8 leaves of 1,000,000 rows took, for a number. The counts
-- are read before the parent is locked.

-- _retention_leaf_bound: the exclusive upper (p_lower false) or inclusive
-- lower bound of a RANGE leaf on the policy's time column, encoded like the
-- cutoff (_retention_cutoff); NULL when the leaf is not such a range (LIST,
-- HASH, DEFAULT, a multi-column or other-column key, MINVALUE, MAXVALUE).
CREATE OR REPLACE FUNCTION _retention_leaf_bound(p_pol retention_policy, p_leaf regclass, p_lower boolean)
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
    v_value text;
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
    v_value := CASE WHEN p_lower THEN substring(v_bound FROM '^FOR VALUES FROM \((.*)\) TO \(')
                    ELSE substring(v_bound FROM ' TO \((.*)\)$') END;
    IF v_value IS NULL OR v_value ILIKE '%MAXVALUE%' OR v_value ILIKE '%MINVALUE%' THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT %s', _retention_encode(p_pol, format('(%s)::%s', v_value,
        CASE p_pol.time_type WHEN 'timestamptz' THEN 'timestamptz' WHEN 'timestamp' THEN 'timestamp' ELSE 'date' END)))
       INTO v_bound;
    RETURN v_bound::timestamptz;
END
$$;

-- _retention_leaf_upper: the exclusive upper bound of a RANGE leaf on the
-- policy's time column (see _retention_leaf_bound).
CREATE OR REPLACE FUNCTION _retention_leaf_upper(p_pol retention_policy, p_leaf regclass)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT _retention_leaf_bound(p_pol, p_leaf, false) $$;

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
           -- being detached concurrently by a runner (retention_detach.sql):
           -- half-detached, or claimed and not expired
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i WHERE i.inhrelid = t.relid AND i.inhdetachpending)
           AND NOT EXISTS (SELECT 1 FROM retention_detaching d WHERE d.leaf = t.relid AND d.expires_at > v_at)
         ORDER BY n.nspname, c.relname
    LOOP
        -- a RANGE leaf wholly younger than the cutoff: no row of it is eligible
        CONTINUE WHEN _retention_leaf_bound(p_pol, v_leaf.leaf, true) >= v_cutoff;
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
-- parent, drop it.
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

-- _retention_unit_detached: whether a unit is a drop unit whose leaf a pass
-- detached (block_lo -1, block_hi the detached table's oid); its table is
-- dropped by a later pass whatever happens to the policy's definition.
CREATE OR REPLACE FUNCTION _retention_unit_detached(p_action text, p_block_lo bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_action = 'drop' AND p_block_lo IS NOT DISTINCT FROM -1 $$;

-- _retention_depended_on: whether something outside a detached table
-- depends on it -- a view made on it since, a foreign key to it -- so that
-- its DROP would fail (every pass, if nothing stopped trying). The table's
-- own constraints do not count: a CHECK constraint (one inherited from the
-- parent, the one DETACH ... CONCURRENTLY adds) depends on the table's
-- columns, and until 0.33 it made every detached leaf of a table with a
-- CHECK constraint stay in place, never dropped. The pass's drops
-- (_retention_release_claim) and the runner's (retention_detach.sql) ask
-- this one function.
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
                                            WHERE k.oid = d.objid AND k.conrelid = p_table)))
$$;

-- _retention_detached_name: the name a detached leaf gets until a later
-- pass drops it.
CREATE OR REPLACE FUNCTION _retention_detached_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_' || p_leaf::text $$;

-- _retention_detach_body: the PL/pgSQL body (run as the policy's owner by
-- _retention_as_owner) that detaches the leaves p_leaves of p_parent in one
-- transaction:
--   1. each leaf's rows counted, from the statistics;
--   2. each leaf locked SHARE UPDATE EXCLUSIVE, with lock_timeout raised to
--      retention_lock_timeout + deadlock_timeout: that mode blocks no insert
--      and no query, only VACUUM, ANALYZE and DDL; an autovacuum worker on
--      the leaf (one starts on every partition that got many inserts) is
--      cancelled by PostgreSQL after deadlock_timeout instead of making the
--      leaf wait for a later pass; a leaf still held after that is skipped;
--   3. the parent locked ACCESS EXCLUSIVE, with lock_timeout =
--      retention_lock_timeout: from here on inserts and queries on the
--      parent wait;
--   4. each leaf locked ACCESS EXCLUSIVE NOWAIT (a transaction reading or
--      writing the leaf directly makes it skipped: nobody waits while the
--      parent is locked), detached and renamed.
-- It returns the rows of the leaves it detached (deleted) and how many it
-- detached (sampled); which ones, the catalog tells (_retention_step_detached).
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
    v_sql record;
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_deadlock bigint := (extract(epoch FROM pg_catalog.current_setting('deadlock_timeout')::interval) * 1000)::bigint;
BEGIN
    SELECT format('%I.%I', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_parent;
    FOR v_leaf IN
        SELECT l.oid, l.ord, format('%I.%I', n.nspname, c.relname) AS name
          FROM unnest(p_leaves) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        v_sql := _retention_drop_sql(v_leaf.oid::regclass);
        -- A runner's DETACH ... CONCURRENTLY (retention_detach.sql) may have
        -- detached or dropped the leaf since it was claimed (undefined_table:
        -- gone, or "not a partition"), or left it half-detached
        -- (object_not_in_prerequisite_state: a plain DETACH is refused): the
        -- leaf is skipped, its unit deferred.
        v_counts := v_counts || format('BEGIN EXECUTE %L INTO c; EXCEPTION WHEN undefined_table THEN c := 0; END; r[%s] := c; ',
                                       v_sql.count_sql, v_leaf.ord);
        v_prelocks := v_prelocks || format(
            'BEGIN EXECUTE %L; ok[%s] := true; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; ',
            format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE', v_leaf.name), v_leaf.ord, v_leaf.ord);
        v_steps := v_steps || format(
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN object_not_in_prerequisite_state OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN EXECUTE %L; n := n + r[%s]; d := d + 1; END IF; ',
            v_leaf.ord, format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE NOWAIT', v_leaf.name), v_leaf.ord,
            v_leaf.ord, v_sql.detach_sql, v_leaf.ord,
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

-- _retention_release_body: the PL/pgSQL body (run as the policy's owner)
-- that drops the detached tables p_tables in one transaction; a table
-- someone else holds past lock_timeout is left to a later pass.
CREATE OR REPLACE FUNCTION _retention_release_body(p_tables oid[])
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_steps text := '';
    v_name text;
BEGIN
    FOR v_name IN
        SELECT format('%I.%I', n.nspname, c.relname)
          FROM unnest(p_tables) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        v_steps := v_steps || format('BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available THEN NULL; END; ',
                                     format('DROP TABLE %s', v_name));
    END LOOP;
    RETURN format('BEGIN %s RETURN QUERY SELECT 0::bigint, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', v_steps);
END
$$;
-- pgsweep:end functions/retention_partition.sql

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
-- 'delete' (the unit o_unit is locked for this transaction), 'detach' (o_unit
-- is a drop unit of the leaf o_target: detach it and the sweep's other
-- droppable leaves of its parent), 'release' (o_unit is a detached leaf:
-- drop the sweep's detached tables), or NULL with
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
    -- A partitioned policy's unit names its leaf (retention_partition.sql);
    -- a drop unit whose leaf an earlier step detached (block_lo -1) names the
    -- detached table by its oid (block_hi): _retention_release_claim checks it.
    IF v_unit.leaf_name IS NOT NULL AND NOT _retention_unit_detached(v_unit.action, v_unit.block_lo) THEN
        -- by the catalog, not to_regclass: this runs as <schema>_owner, which
        -- need not have USAGE on the table's schema
        -- still a partition (0.32): a table detached since the plan (by a
        -- runner's DETACH ... CONCURRENTLY whose rename failed, by a DBA) is
        -- no longer the policy's table, never swept
        SELECT c.oid INTO o_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r' AND c.relispartition;
        IF o_target IS NULL THEN -- the leaf is gone (dropped or detached by someone else): nothing left to do
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
    o_action := CASE WHEN _retention_unit_detached(v_unit.action, v_unit.block_lo) THEN 'release'
                     WHEN v_unit.action = 'drop' THEN 'detach' ELSE 'delete' END;
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

-- _retention_detach_claim gathers a detach step's leaves: p_leaf (the
-- claimed unit's) and the leaves of the sweep's other drop units under the
-- same parent that are still attached, droppable and not taken by another
-- cleaner (FOR UPDATE SKIP LOCKED), at most 64 in all.
CREATE OR REPLACE FUNCTION _retention_detach_claim(p_pass bigint, p_unit retention_unit, p_leaf regclass,
    p_cutoff timestamptz, OUT o_parent regclass, OUT o_units int[], OUT o_leaves oid[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
    v_unit retention_unit;
    v_oid oid;
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_unit.policy;
    SELECT i.inhparent INTO o_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    o_units := ARRAY[p_unit.unit_no];
    o_leaves := ARRAY[p_leaf::oid];
    FOR v_unit IN
        SELECT * FROM retention_unit u
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no <> p_unit.unit_no
           AND u.action = 'drop' AND u.block_lo IS DISTINCT FROM -1 AND u.deferred_pass IS DISTINCT FROM p_pass
         ORDER BY u.unit_no
           FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN cardinality(o_leaves) >= 64;
        SELECT c.oid INTO v_oid
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r';
        -- gone, moved or no longer droppable: its own step finds out
        CONTINUE WHEN v_oid IS NULL
            OR (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_oid) IS DISTINCT FROM o_parent
            OR NOT _retention_leaf_droppable(v_pol, v_oid::regclass, p_cutoff);
        o_units := o_units || v_unit.unit_no;
        o_leaves := o_leaves || v_oid;
    END LOOP;
END
$$;

-- _retention_step_detaching records a detach step before it runs, as if
-- every leaf of it will be detached: each unit marked detached (block_lo -1,
-- block_hi the leaf's oid, left to a later pass, which drops the table), the
-- pass's batch and partitions counted. Done before the parent is locked, so
-- that the lock is held for the detaches and little else; the step
-- corrects it when a leaf stays (_retention_step_detached) and rolls it back
-- with the detaches when the parent's lock is not granted.
CREATE OR REPLACE FUNCTION _retention_step_detaching(p_pass bigint, p_unit retention_unit, p_units int[], p_leaves oid[],
    p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE retention_unit u SET block_lo = -1, block_hi = l.oid::bigint, deferred_pass = p_pass
      FROM unnest(p_units, p_leaves) l(unit_no, oid)
     WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no;
    UPDATE retention_pass
       SET batches = batches + 1, partitions_dropped = partitions_dropped + cardinality(p_leaves),
           last_batch_at = v_now, strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_step_rows adds a detach step's rows to its pass.
CREATE OR REPLACE FUNCTION _retention_step_rows(p_pass bigint, p_rows bigint)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ UPDATE retention_pass SET rows_deleted = rows_deleted + p_rows WHERE id = p_pass $$;

-- _retention_step_detached records a detach step from the catalog: a leaf
-- now named pgsweep_detached_<oid> and out of its parent was detached: its
-- unit is marked so (block_lo -1, block_hi the oid) and left to a later pass,
-- which drops the table; the pass counts its rows (p_rows, all the detached
-- leaves') and the partition. A leaf still attached (locked by another
-- transaction, or the whole step rolled back) is deferred to a later pass.
-- p_premarked: _retention_step_detaching counted every leaf already.
CREATE OR REPLACE FUNCTION _retention_step_detached(p_pass bigint, p_unit retention_unit, p_units int[], p_leaves oid[],
    p_rows bigint, p_strategy text, p_premarked boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_detached int;
    v_now timestamptz;
BEGIN
    WITH l AS (
        SELECT x.unit_no, x.oid,
               EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                        WHERE c.oid = x.oid AND c.relname = _retention_detached_name(x.oid) AND NOT c.relispartition) AS detached
          FROM unnest(p_units, p_leaves) x(unit_no, oid)
    ), u AS (
        UPDATE retention_unit u
           SET block_lo = CASE WHEN l.detached THEN -1 END,
               block_hi = CASE WHEN l.detached THEN l.oid::bigint END,
               deferred_pass = p_pass
          FROM l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no
        RETURNING l.detached
    )
    SELECT count(*) FILTER (WHERE u.detached) INTO v_detached FROM u;
    v_now := clock_timestamp();
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + CASE WHEN v_detached > 0 THEN p_rows ELSE 0 END,
           batches = batches + CASE WHEN v_detached > 0 THEN 1 ELSE 0 END - CASE WHEN p_premarked THEN 1 ELSE 0 END,
           partitions_dropped = partitions_dropped + v_detached
                                - CASE WHEN p_premarked THEN cardinality(p_leaves) ELSE 0 END,
           deferred = deferred + cardinality(p_leaves) - v_detached,
           last_batch_at = CASE WHEN v_detached > 0 THEN v_now ELSE last_batch_at END,
           strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_release_claim gathers a release step's tables: the sweep's
-- detached units not taken by another cleaner (p_unit's included). A unit
-- whose table is no longer the one it detached (dropped, re-attached,
-- renamed), that the policy's owner can no longer drop (the policy changed
-- hands), or that something else depends on (a view made on it since, a
-- foreign key to it) is closed and its table left alone (a NOTICE names it):
-- a DROP that fails would fail every pass.
CREATE OR REPLACE FUNCTION _retention_release_claim(p_pass bigint, p_unit retention_unit,
    OUT o_units int[], OUT o_tables oid[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole := (SELECT p.owner FROM retention_policy p WHERE p.name = p_unit.policy);
    v_unit retention_unit;
BEGIN
    o_units := '{}';
    o_tables := '{}';
    FOR v_unit IN
        SELECT * FROM retention_unit u
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id
           AND (u.unit_no = p_unit.unit_no
                OR (u.action = 'drop' AND u.block_lo = -1 AND u.deferred_pass IS DISTINCT FROM p_pass))
         ORDER BY u.unit_no
           FOR UPDATE SKIP LOCKED
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    WHERE c.oid = v_unit.block_hi::oid AND c.relkind = 'r' AND NOT c.relispartition
                      AND c.relname = _retention_detached_name(v_unit.block_hi::oid)
                      AND pg_catalog.pg_has_role(v_owner, c.relowner, 'USAGE')
                      -- nothing outside it depends on it (a view, a foreign key): DROP would fail
                      AND NOT _retention_depended_on(c.oid)) THEN
            o_units := o_units || v_unit.unit_no;
            o_tables := o_tables || v_unit.block_hi::oid;
        ELSE
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = v_unit.block_hi::oid) THEN
                RAISE NOTICE 'retention policy %: the detached partition % (formerly %.%) is left in place',
                    p_unit.policy, v_unit.block_hi::oid::regclass::text, v_unit.leaf_schema, v_unit.leaf_name;
            END IF;
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
        END IF;
    END LOOP;
END
$$;

-- _retention_step_released records a release step: a unit whose table is
-- gone is done; one whose table is still there (locked past lock_timeout by
-- another transaction) is deferred to a later pass. A release is not a
-- batch: the pass goes on to plan its own sweep.
CREATE OR REPLACE FUNCTION _retention_step_released(p_pass bigint, p_unit retention_unit, p_units int[], p_tables oid[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released int;
    v_left int;
BEGIN
    WITH l AS (
        SELECT x.unit_no, EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = x.oid) AS present
          FROM unnest(p_units, p_tables) x(unit_no, oid)
    ), d AS (
        DELETE FROM retention_unit u USING l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no AND NOT l.present
        RETURNING 1
    )
    SELECT count(*) INTO v_released FROM d;
    UPDATE retention_unit u SET deferred_pass = p_pass
     WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = ANY (p_units);
    GET DIAGNOSTICS v_left = ROW_COUNT;
    UPDATE retention_pass SET units = units + v_released, deferred = deferred + v_left WHERE id = p_pass;
END
$$;

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
    v_batch record;
    v_batch2 record;
BEGIN
    v := _retention_step_claim(p_pass);
    IF v.o_action = 'plan' THEN
        IF v.o_pct IS NOT NULL THEN
            v_run := _retention_as_owner(v.o_pol, 'sample', NULL, v.o_pct, NULL::double precision, v.o_cutoff, NULL);
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
        ELSE -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, NULL, NULL, NULL, NULL);
        END IF;
    ELSIF v.o_action = 'detach' THEN
        -- every droppable leaf of the parent in one transaction (retention_partition.sql)
        v_batch := _retention_detach_claim(p_pass, v.o_unit, v.o_target, v.o_cutoff);
        BEGIN
            -- recorded first, as if every leaf will be detached: from the
            -- parent's lock to the commit only the rows are left to add
            PERFORM _retention_step_detaching(p_pass, v.o_unit, v_batch.o_units, v_batch.o_leaves, v.o_strategy);
            v_run := _retention_as_owner(v.o_pol, 'detach', NULL, v_batch.o_leaves, v_batch.o_leaves, v.o_cutoff,
                                         v_batch.o_parent);
            IF v_run.sampled = cardinality(v_batch.o_leaves) THEN
                PERFORM _retention_step_rows(p_pass, v_run.deleted);
            ELSE -- a leaf was in use and stays: the record follows the catalog
                PERFORM _retention_step_detached(p_pass, v.o_unit, v_batch.o_units, v_batch.o_leaves, v_run.deleted,
                                                 v.o_strategy, true);
            END IF;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            -- the parent (or the default partition) stayed locked past
            -- retention_lock_timeout, or a session that holds the parent
            -- (ANALYZE of the whole table, say) waited for a leaf this step
            -- held: nothing was detached (the record above rolled back with
            -- it), a later pass retries
            PERFORM _retention_step_detached(p_pass, v.o_unit, v_batch.o_units, v_batch.o_leaves, 0, v.o_strategy, false);
        END;
        RETURN true;
    ELSIF v.o_action = 'release' THEN
        -- drop the tables earlier passes detached; no lock on the parent
        v_batch2 := _retention_release_claim(p_pass, v.o_unit);
        IF cardinality(v_batch2.o_tables) > 0 THEN
            BEGIN
                v_run := _retention_as_owner(v.o_pol, 'release', NULL, v_batch2.o_tables, v_batch2.o_tables, v.o_cutoff, NULL);
            EXCEPTION WHEN lock_not_available THEN
                NULL;
            END;
            PERFORM _retention_step_released(p_pass, v.o_unit, v_batch2.o_units, v_batch2.o_tables);
        END IF;
        RETURN true;
    ELSIF v.o_action = 'delete' THEN
        BEGIN
            IF v.o_strategy = 'tid_range' THEN
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

-- pgsweep:include functions/retention_detach.sql
-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY, run by
-- the Go runner (docs/retention.md, "Partitioned tables").
--
-- Why: a pass removes an expired leaf with a plain DETACH, which holds an
-- ACCESS EXCLUSIVE lock on the parent for a moment; every insert into the
-- table in that moment waits for it (one insert a pass waited 3-4 ms in
-- `bench cleanup --partitioned`, docs/benchmarks.md). DETACH ...
-- CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on the parent, which no insert
-- and no query waits for, and ACCESS EXCLUSIVE on the leaf only after every
-- transaction that could still see it has ended. PostgreSQL runs it outside
-- any transaction block only, so neither maintain() nor retention_run
-- (procedures, pg_cron) can: the Go runner runs it before each maintenance
-- pass, from the claims these functions hand out. Installs run by pg_cron
-- alone keep the pass's plain DETACH (retention_partition.sql).
--
-- The protocol (Client.RetentionDetachConcurrently in Go):
--   1. retention_detach_claim(owner) claims, among the policies retention_due
--      lists, the leaves to remove:
--        'detach'   a droppable leaf (_retention_leaf_droppable) of a parent
--                   without a DEFAULT partition (PostgreSQL refuses
--                   CONCURRENTLY there: those keep the pass's DETACH), owned,
--                   with its parent, by roles the caller can act as
--                   (otherwise the pass, as the policy's owner, does it);
--        'finalize' a leaf this protocol left half-detached (a runner killed,
--                   or its lock_timeout reached, between DETACH's two
--                   transactions): DETACH ... FINALIZE;
--        'drop'     a table this protocol detached (by an earlier call: the
--                   commit of a DROP releases the files, 25-50 ms a leaf of
--                   1,000,000 rows, CPU and I/O taken from the inserts, so
--                   it is left out of the call that removes the rows, as
--                   the pass does since 0.30).
--      A claim is a row of retention_detaching held for the policy's
--      lease_ttl: two runners never work on one leaf at once; one that died
--      leaves its leaf to the next runner after the TTL.
--   2. The runner counts the leaf's rows (count_sql, from the statistics, as
--      itself), sets lock_timeout to retention_lock_timeout, runs the DETACH
--      (or FINALIZE) and renames the detached table pgsweep_detached_c<oid>
--      (its name is free again at once), or the DROP, each statement in its
--      own transaction.
--   3. retention_detach_done(owner, leaf, rows) records what the catalog
--      says, whatever failed in between: a leaf out of its parent under the
--      runner's name (or dropped) counts its rows as deleted, once, in a
--      retention_pass of strategy 'detach_concurrently' (which retention_due
--      does not count as the policy's pass) and stays claimed for DROP; a
--      leaf still half-detached stays claimed for FINALIZE; a leaf still
--      attached (lock_timeout) is released, and the pass's plain DETACH or a
--      later claim takes it; a leaf out of its parent under another name
--      (detached by a maintenance pass, by a DBA keeping it, or the rename
--      failed) is released, not counted, and left in place.
-- The pass plans nothing for a leaf that is claimed or half-detached
-- (retention_partition.sql) and sweeps nothing that left its parent since
-- it planned (retention_step.sql); its plain DETACH defers a leaf a runner
-- detached or half-detached meanwhile.

-- _retention_detach_runner_name: the name the runner gives a table it
-- detached, until its next call drops it (0.32). Not the pass's
-- pgsweep_detached_<oid>: the name is the proof of who detached it, so
-- that neither counts or drops the other's tables, and a table someone
-- else detached (a DBA keeping it, an archive job) is never counted or
-- dropped.
CREATE OR REPLACE FUNCTION _retention_detach_runner_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_c' || p_leaf::text $$;

-- _retention_detach_caller: the role the caller of a SECURITY DEFINER
-- function acts as (SET ROLE, else the login role).
CREATE OR REPLACE FUNCTION _retention_detach_caller()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

-- _retention_detach_statements: the statements for a leaf, names quoted
-- (the count and the DROP are the pass's: _retention_drop_sql).
CREATE OR REPLACE FUNCTION _retention_detach_statements(p_leaf oid, p_attached boolean, p_finalize boolean,
    OUT count_sql text, OUT detach_sql text, OUT rename_sql text, OUT drop_sql text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql record := _retention_drop_sql(p_leaf::regclass);
BEGIN
    count_sql := v_sql.count_sql;
    IF p_attached THEN
        detach_sql := v_sql.detach_sql || CASE WHEN p_finalize THEN ' FINALIZE' ELSE ' CONCURRENTLY' END;
    END IF;
    SELECT pg_catalog.format('ALTER TABLE %I.%I RENAME TO %I', n.nspname, c.relname, _retention_detach_runner_name(p_leaf))
      INTO rename_sql
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_leaf;
    drop_sql := v_sql.drop_sql;
END
$$;

-- _retention_detach_claim_for: the claims of retention_detach_claim (below),
-- at most p_limit.
CREATE OR REPLACE FUNCTION _retention_detach_claim_for(p_owner text, p_now timestamptz, p_limit int)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _retention_detach_caller();
    v_now timestamptz := clock_timestamp();
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_pol retention_policy;
    v_rel regclass;
    v_cutoff timestamptz;
    v_c record;
    v_s record;
    v_n int := 0;
    v_taken oid;
    v_due boolean;
    v_r record;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_now('p_now', p_now);
    -- Claims of a policy that was unregistered go with it (ON DELETE
    -- CASCADE); expired claims whose table is gone are forgotten (a live
    -- claim's holder may have dropped its table and not recorded it yet).
    DELETE FROM retention_detaching d
     WHERE d.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = d.leaf);
    -- New leaves only of the policies that are due (the runner's pass
    -- follows); leaves this protocol left half-detached whenever.
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_detaching d WHERE d.policy = r.name))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_due := v_r.due;
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        FOR v_c IN
            SELECT c.oid AS leaf, i.inhparent AS parent, i.inhdetachpending AS pending
              -- pg_partition_tree omits half-detached leaves: the claims name them
              FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(v_rel) t WHERE t.isleaf
                    UNION
                    SELECT d.leaf FROM retention_detaching d WHERE d.policy = v_pol.name) x
              JOIN pg_catalog.pg_class c ON c.oid = x.relid
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
              LEFT JOIN retention_detaching d ON d.leaf = c.oid
             WHERE c.relkind = 'r'
               -- free, or claimed by this owner, or a claim whose holder died
               AND (d.leaf IS NULL OR d.owner = p_owner OR d.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN d.leaf IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_due AND pt.partdefid = 0 AND _retention_leaf_droppable(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
               AND pg_catalog.pg_has_role(v_caller, c.relowner, 'USAGE')
               AND pg_catalog.pg_has_role(v_caller, p.relowner, 'USAGE')
             ORDER BY i.inhdetachpending DESC, c.oid
        LOOP
            EXIT WHEN v_n >= p_limit;
            v_s := _retention_detach_statements(v_c.leaf, true, v_c.pending);
            INSERT INTO retention_detaching AS d (leaf, policy, parent, leaf_schema, leaf_name, leaf_owner, owner,
                                                  began_at, expires_at)
            SELECT v_c.leaf, v_pol.name, v_c.parent, n.nspname, c.relname, c.relowner, p_owner, v_now, v_now + v_pol.lease_ttl
              FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = v_c.leaf
            ON CONFLICT ON CONSTRAINT retention_detaching_pkey DO UPDATE
               SET owner = excluded.owner, expires_at = excluded.expires_at
             WHERE d.owner = excluded.owner OR d.expires_at <= v_now
            RETURNING d.leaf INTO v_taken;
            -- another runner claimed it since the list was read
            CONTINUE WHEN v_taken IS NULL;
            v_taken := NULL;
            v_n := v_n + 1;
            policy := v_pol.name;
            leaf := v_c.leaf;
            parent := v_c.parent;
            action := CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END;
            count_sql := v_s.count_sql;
            detach_sql := v_s.detach_sql;
            rename_sql := v_s.rename_sql;
            drop_sql := NULL; -- by the next call: the files' release is not this pass's
            lock_timeout_ms := v_timeout;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    -- Tables this protocol detached and renamed (earlier calls): dropped
    -- now. Only a table under the runner's name (the proof that its DETACH
    -- and rename succeeded), that the policy's owner and the caller can
    -- still act as the owner of, and that nothing outside it depends on (a
    -- view made on it since: DROP would fail every call): such a table is
    -- left in place, its claim closed, a NOTICE names it, as the pass does.
    FOR v_c IN
        SELECT d.leaf, d.policy, d.parent, d.counted,
               (c.relname = _retention_detach_runner_name(d.leaf) AND NOT c.relispartition
                AND pg_catalog.pg_has_role(r.owner, c.relowner, 'USAGE')
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_detaching d
          JOIN pg_catalog.pg_class c ON c.oid = d.leaf
          JOIN retention_policy r ON r.name = d.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (d.owner = p_owner OR d.expires_at <= v_now)
           AND pg_catalog.pg_has_role(v_caller, c.relowner, 'USAGE')
         ORDER BY d.leaf
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        IF NOT v_c.droppable THEN
            RAISE NOTICE 'retention policy %: the detached partition % is left in place', v_c.policy, v_c.leaf::regclass::text;
            DELETE FROM retention_detaching d WHERE d.leaf = v_c.leaf;
            CONTINUE;
        END IF;
        EXIT WHEN v_n >= p_limit;
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_c.policy;
        UPDATE retention_detaching SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl WHERE retention_detaching.leaf = v_c.leaf;
        v_s := _retention_detach_statements(v_c.leaf, false, false);
        v_n := v_n + 1;
        policy := v_c.policy;
        leaf := v_c.leaf;
        parent := v_c.parent;
        action := 'drop';
        -- a runner that died between its rename and its record: counted now
        count_sql := CASE WHEN NOT v_c.counted THEN v_s.count_sql END;
        detach_sql := NULL;
        rename_sql := NULL;
        drop_sql := v_s.drop_sql;
        lock_timeout_ms := v_timeout;
        RETURN NEXT;
    END LOOP;
END
$$;

-- retention_detach_claim: what the Go runner detaches concurrently now (see
-- above), at most 64 leaves; p_owner names the runner (1-200 characters).
-- The p_now overload is for tests (S_owner only).
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, p_now, 64) $$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, NULL, 64) $$;

-- retention_detach_done records a claimed leaf from the catalog (see
-- above) and returns its state: 'dropped', 'detached' (out of its parent,
-- not dropped yet: claimed again for DROP), 'pending' (half-detached:
-- claimed again for FINALIZE), 'attached' (released) or 'taken' (a
-- maintenance pass detached it first: released, not counted). p_rows is the
-- leaf's rows as count_sql found them (NULL: unknown, counted 0); a leaf is
-- counted once. A claim held by another owner, or a caller that cannot act
-- as the leaf's owner, changes nothing ('other').
CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, p_rows bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_d retention_detaching;
    v_pol retention_policy;
    v_state text;
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_rows < 0 THEN
        PERFORM _retention_invalid('p_rows must be NULL or at least 0, got %s', p_rows::text);
    END IF;
    SELECT * INTO v_d FROM retention_detaching d WHERE d.leaf = p_leaf FOR UPDATE;
    -- only the claim's holder, acting as the leaf's owner, records it
    IF NOT FOUND OR v_d.owner IS DISTINCT FROM p_owner
       OR NOT pg_catalog.pg_has_role(_retention_detach_caller(), v_d.leaf_owner, 'USAGE') THEN
        RETURN 'other';
    END IF;
    SELECT CASE WHEN c.oid IS NULL THEN 'dropped'
                WHEN i.inhdetachpending THEN 'pending'
                WHEN i.inhrelid IS NOT NULL THEN 'attached'
                -- out of its parent under the runner's name: its DETACH and
                -- rename succeeded
                WHEN c.relname = _retention_detach_runner_name(p_leaf)
                     AND n.nspname = v_d.leaf_schema THEN 'detached'
                -- detached by someone else (a maintenance pass, which
                -- renamed it pgsweep_detached_<oid> and counts it; a DBA
                -- keeping the table), or the runner's rename failed: not
                -- counted, never dropped by the runner
                ELSE 'taken' END
      INTO v_state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF v_state IN ('dropped', 'detached') AND NOT v_d.counted THEN
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_d.policy;
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_d.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_d.began_at, v_d.expires_at, v_now, v_now, coalesce(p_rows, 0), 1, 1, 1, 'detach_concurrently', 'drained');
    END IF;
    IF v_state = 'taken' AND NOT v_d.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_d.policy, v_d.leaf_schema, v_d.leaf_name;
    END IF;
    IF v_state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR v_state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
    RETURN v_state;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
