-- pgsweep 0.39: retention one path.
--
-- The runner's DETACH ... CONCURRENTLY and the pass's plain DETACH share one
-- planner: a runner's claim is a claim on a drop unit of the policy's sweep
-- (retention_detach.sql) instead of a row of its own table planned apart.
--
-- DDL (explicit, above the changed blocks):
--   retention_unit: ADD leaf, owner, expires_at, counted (a runner's claim)
--     and CHECK retention_unit_claim;
--   the live rows of retention_detaching become units of one sweep per
--     policy (kind drop, the claim kept), then the table is dropped.
-- Dropped functions (now written where they are used): _retention_leaf_upper,
--   _retention_drop_sql, _retention_builtin_name, _retention_policy_for_update,
--   _retention_detach_claim_for, retention_keyset_fraction, _retention_sample_pct,
--   _retention_exec_body, _retention_release_body, _retention_scalar_type,
--   _retention_step_released, _retention_step_deferred, _retention_detach_claim,
--   _retention_release_claim.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

ALTER TABLE retention_unit
    ADD COLUMN leaf oid,                 -- a runner's claim: the leaf (the runner renames it)
    ADD COLUMN owner text,               -- the runner holding the claim, until expires_at
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN counted boolean NOT NULL DEFAULT false,  -- its rows are in a retention_pass
    ADD CONSTRAINT retention_unit_claim
        CHECK (owner IS NULL OR (kind = 'drop' AND leaf IS NOT NULL AND expires_at IS NOT NULL));

INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units)
SELECT r.name, 'tid_range', coalesce(_retention_cutoff(r, d.at), '-infinity'), d.at, 'pgsweep 0.39', d.n
  FROM retention_policy r
  JOIN (SELECT policy, min(began_at) AS at, count(*)::int AS n FROM retention_detaching GROUP BY policy) d
    ON d.policy = r.name;
INSERT INTO retention_unit (policy, sweep_id, unit_no, leaf_schema, leaf_name, kind, leaf, owner, expires_at, counted)
SELECT d.policy, (SELECT max(s.id) FROM retention_sweep s WHERE s.policy = d.policy),
       row_number() OVER (PARTITION BY d.policy ORDER BY d.leaf)::int, d.leaf_schema, d.leaf_name, 'drop',
       d.leaf, d.owner, d.expires_at, d.counted
  FROM retention_detaching d;
DROP TABLE retention_detaching;

-- Helpers now written where they are used.
DROP FUNCTION _retention_leaf_upper(retention_policy, regclass);
DROP FUNCTION _retention_drop_sql(regclass);
DROP FUNCTION _retention_builtin_name(text);
DROP FUNCTION _retention_policy_for_update(text);
DROP FUNCTION _retention_detach_claim_for(text, timestamptz, int);
DROP FUNCTION retention_keyset_fraction();
DROP FUNCTION _retention_sample_pct(retention_policy);
DROP FUNCTION _retention_exec_body(text, text, regclass);
DROP FUNCTION _retention_release_body(oid[]);
DROP FUNCTION _retention_scalar_type(regtype);
DROP FUNCTION _retention_step_released(bigint, retention_unit, int[], oid[]);
DROP FUNCTION _retention_step_deferred(bigint, retention_unit);
DROP FUNCTION _retention_detach_claim(bigint, retention_unit, regclass, timestamptz);
DROP FUNCTION _retention_release_claim(bigint, retention_unit);

-- pgsweep:changed functions/retention_detach.sql
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _retention_detach_caller();
    v_now timestamptz := clock_timestamp();
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_pol retention_policy;
    v_cutoff timestamptz;
    v_r record;
    v_c record;
    v_n int := 0;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    PERFORM _check_now('p_now', p_now);
    -- expired claims whose table is gone are forgotten
    DELETE FROM retention_unit u
     WHERE u.owner IS NOT NULL AND u.expires_at <= v_now
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = u.leaf);
    -- new leaves of due policies, half-detached ones whenever, of owners the caller can act as
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.owner IS NOT NULL))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        -- a due policy without an open sweep gets one, as a pass plans it
        IF v_r.due AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            PERFORM 1 FROM retention_policy r WHERE r.name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
            IF FOUND AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
                PERFORM _retention_plan_partitioned(v_pol, coalesce(p_now, v_now), p_owner);
            END IF;
        END IF;
        FOR v_c IN
            SELECT u.sweep_id, u.unit_no, u.kind, c.oid AS leaf, i.inhparent AS parent, n.nspname AS leaf_schema,
                   c.relname AS leaf_name, pn.nspname AS parent_schema, p.relname AS parent_name, i.inhdetachpending AS pending,
                   CASE WHEN c.relowner <> v_pol.owner
                        THEN pg_catalog.format('partition %I.%I is owned by %s', n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner))
                        WHEN p.relowner <> v_pol.owner
                        THEN pg_catalog.format('parent %I.%I is owned by %s', pn.nspname, p.relname, pg_catalog.pg_get_userbyid(p.relowner))
                   END AS foreign_owner
              FROM retention_unit u
              JOIN pg_catalog.pg_namespace n ON n.nspname = u.leaf_schema
              JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = u.leaf_name AND c.relkind = 'r'
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
             WHERE u.policy = v_pol.name AND u.kind <> 'detached' AND (u.leaf IS NULL OR u.leaf = c.oid)
               -- free, or claimed by this owner, or a claim whose holder died
               AND (u.owner IS NULL OR u.owner = p_owner OR u.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN u.owner IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_r.due AND pt.partdefid = 0 AND _retention_leaf_expired(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
             ORDER BY i.inhdetachpending DESC, c.oid
               FOR UPDATE OF u SKIP LOCKED
        LOOP
            IF v_c.foreign_owner IS NOT NULL THEN
                RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, 'skip'::text, v_c.leaf_schema, v_c.leaf_name,
                    v_c.parent_schema, v_c.parent_name, NULL::name, NULL::name, NULL::bigint, pg_catalog.format(
                    '%s, not by the policy''s owner %s: the runner acts only on its tables', v_c.foreign_owner,
                    pg_catalog.pg_get_userbyid(v_pol.owner));
                CONTINUE;
            END IF;
            CONTINUE WHEN v_c.kind <> 'drop';
            EXIT WHEN v_n >= 64;
            UPDATE retention_unit u SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl, leaf = v_c.leaf
             WHERE u.policy = v_pol.name AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
            v_n := v_n + 1;
            RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END,
                v_c.leaf_schema, v_c.leaf_name, v_c.parent_schema, v_c.parent_name,
                _retention_detach_runner_name(v_c.leaf)::name, pg_catalog.pg_get_userbyid(v_pol.owner), v_timeout, NULL::text;
        END LOOP;
    END LOOP;
    -- Tables the runner detached (parent: the policy's table): dropped if still under its
    -- name, the policy owner's and depended on by nothing; else left in place, claim closed.
    FOR v_c IN
        SELECT u.sweep_id, u.unit_no, u.policy, u.leaf, n.nspname AS leaf_schema, c.relname AS leaf_name, r.owner AS pol_owner,
               r.lease_ttl, _retention_table(r.table_schema, r.table_name)::oid AS parent,
               (c.relname = _retention_detach_runner_name(u.leaf) AND c.relowner = r.owner
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_unit u
          JOIN pg_catalog.pg_class c ON c.oid = u.leaf
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          JOIN retention_policy r ON r.name = u.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (u.owner = p_owner OR u.expires_at <= v_now)
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY u.leaf
           FOR UPDATE OF u SKIP LOCKED
    LOOP
        IF NOT v_c.droppable THEN
            RAISE NOTICE 'retention policy %: the detached partition % is left in place', v_c.policy, v_c.leaf::regclass::text;
            DELETE FROM retention_unit u WHERE u.policy = v_c.policy AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
            CONTINUE;
        END IF;
        EXIT WHEN v_n >= 64;
        UPDATE retention_unit u SET owner = p_owner, expires_at = v_now + v_c.lease_ttl
         WHERE u.policy = v_c.policy AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
        v_n := v_n + 1;
        RETURN QUERY SELECT v_c.policy, v_c.leaf, v_c.parent, 'drop'::text, v_c.leaf_schema, v_c.leaf_name,
            NULL::name, NULL::name, NULL::name, pg_catalog.pg_get_userbyid(v_c.pol_owner), v_timeout, NULL::text;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM retention_detach_claim(p_owner, NULL) $$;

CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, OUT state text, OUT rows bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_u retention_unit;
    v_pol retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    -- a table under two policies is claimed for each: recorded under the first
    SELECT * INTO v_u FROM retention_unit u WHERE u.leaf = p_leaf AND u.owner = p_owner
     ORDER BY u.policy, u.sweep_id, u.unit_no LIMIT 1 FOR UPDATE;
    SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_u.policy;
    -- only the claim's holder, able to act as the policy's owner, records it
    IF v_u.policy IS NULL OR NOT _retention_detach_can_act(_retention_detach_caller(), v_pol.owner) THEN
        state := 'other';
        RETURN;
    END IF;
    SELECT CASE WHEN c.oid IS NULL THEN 'dropped'
                WHEN i.inhdetachpending THEN 'pending'
                WHEN i.inhrelid IS NOT NULL THEN 'attached'
                WHEN c.relname = _retention_detach_runner_name(p_leaf) AND n.nspname = v_u.leaf_schema THEN 'detached'
                ELSE 'taken' END
      INTO state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF state IN ('dropped', 'detached') AND NOT v_u.counted THEN
        -- a table dropped before it was recorded: 0 rows
        rows := coalesce(_retention_detach_estimate(p_leaf), 0);
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_u.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_u.expires_at - v_pol.lease_ttl, v_u.expires_at, v_now, v_now, rows, 1, 1, 1, 'detach_concurrently', 'drained');
    ELSIF state = 'taken' AND NOT v_u.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_u.policy, v_u.leaf_schema, v_u.leaf_name;
    END IF;
    IF state IN ('dropped', 'taken') THEN
        DELETE FROM retention_unit u WHERE u.leaf = p_leaf AND u.owner = p_owner;
    ELSE
        UPDATE retention_unit u
           SET owner = CASE WHEN state = 'attached' THEN NULL ELSE u.owner END,
               expires_at = CASE WHEN state = 'attached' THEN NULL ELSE u.expires_at END,
               counted = state <> 'attached' AND (u.counted OR state = 'detached')
         WHERE u.leaf = p_leaf AND u.owner = p_owner;
    END IF;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- pgsweep:changed functions/retention_partition.sql
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

CREATE OR REPLACE FUNCTION _retention_leaf_expired(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_pol.status_column IS NULL AND p_pol.filter_column IS NULL
       AND coalesce(_retention_leaf_bound(p_pol, p_leaf, false) <= p_cutoff, false)
$$;

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
-- pgsweep:end functions/retention_partition.sql

-- pgsweep:changed functions/retention_register.sql
CREATE OR REPLACE FUNCTION _retention_policy_owned(p_verb text, p_name text, p_role regrole, p_must boolean)
RETURNS retention_policy
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    -- pgsweep's own code (queue_drop, SECURITY DEFINER) proves <schema>_owner
    IF coalesce(pg_catalog.starts_with(p_name, 'pgsweep.'), false) AND p_role IS DISTINCT FROM _owner_role() THEN
        RAISE EXCEPTION '%: retention policy % is reserved: names under ''pgsweep.'' are pgsweep''s built-in policies, which follow the queues',
            p_verb, pg_catalog.quote_literal(p_name)
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Change a queue''s built-in retention with queue_configure (processed_retention, dead_retention).';
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        IF p_must THEN
            PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
        END IF;
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(p_role, v_pol.owner, 'MEMBER') THEN
        RAISE EXCEPTION '%: retention policy % belongs to %; % is not a member of it', p_verb,
            pg_catalog.quote_literal(p_name), v_pol.owner, p_role
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Only a policy''s owner (or a member of it) changes, unregisters or re-registers it.';
    END IF;
    RETURN v_pol;
END
$$;

CREATE OR REPLACE FUNCTION retention_register_proved(p_proof regclass, p_name text, p_table regclass, p_time_column text,
    p_older_than interval, p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_policy_owned('retention_register', p_name, _retention_proof_role(p_proof, 'retention_register'), false);
    SELECT _retention_policy_put(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                 p_batch_size, p_mode, p_interval, _retention_proof_role(p_proof, 'retention_register'), false);
$$;

CREATE OR REPLACE FUNCTION _retention_policy_put(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval,
    p_owner regrole, p_builtin boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text;
    v_table text;
    v_kind "char";
    v_persistence "char";
    v_time record;
    v_status record;
    v_time_type text;
    v_old retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    SELECT n.nspname, c.relname, c.relkind, c.relpersistence INTO v_schema, v_table, v_kind, v_persistence
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_table must be an existing table, got %s', coalesce('oid ' || p_table::oid::text, 'NULL'));
    END IF;
    -- never temporary: a cleaner runs in another session
    IF v_kind NOT IN ('r', 'p') OR v_persistence = 't' THEN
        PERFORM _retention_invalid('p_table must be an ordinary or partitioned, non-temporary table, got %s (relkind %s)',
            p_table::text, v_kind::text);
    END IF;
    IF p_builtin THEN
        IF p_owner <> _owner_role() OR v_schema <> pg_catalog.current_schema()
           OR v_table NOT IN ('message_processed', 'message_dead') THEN
            RAISE EXCEPTION 'built-in retention policies belong to % and cover pgsweep''s own tables', _owner_role()
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        IF (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_table) = _owner_role() THEN
            PERFORM _retention_invalid('p_table must not be one of pgsweep''s own tables (their built-in policies '
                'cover them: queue_configure processed_retention/dead_retention), got %s', p_table::text);
        END IF;
        IF NOT pg_catalog.has_table_privilege(p_owner, p_table, 'SELECT')
           OR NOT pg_catalog.has_table_privilege(p_owner, p_table, 'DELETE') THEN
            RAISE EXCEPTION 'retention_register: role % needs SELECT and DELETE on % to register a policy for it', p_owner, p_table
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Every run deletes as the role that registered the policy.';
        END IF;
    END IF;
    PERFORM _check_text('p_time_column', p_time_column, 63);
    v_time := _retention_column(p_table, p_time_column);
    IF v_time.type_sql IS NULL THEN
        PERFORM _retention_invalid('p_time_column must name a column of %s, got %s', p_table::text, quote_ident(p_time_column));
    END IF;
    v_time_type := CASE v_time.base_type WHEN 'timestamptz'::regtype THEN 'timestamptz'
                        WHEN 'timestamp'::regtype THEN 'timestamp' WHEN 'date'::regtype THEN 'date' END;
    IF v_time_type IS NULL THEN
        PERFORM _retention_invalid('p_time_column must be of type timestamptz, timestamp or date, got %s of type %s',
            quote_ident(p_time_column), v_time.base_type::text);
    END IF;
    -- 0 is allowed (an expiry column); at most 100 years
    IF p_older_than IS NOT NULL AND (p_older_than < interval '0' OR p_older_than > interval '100 years'
                                     OR NOT pg_catalog.isfinite(p_older_than)) THEN
        PERFORM _retention_invalid('p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got %s',
            _interval_text(p_older_than));
    END IF;
    IF p_older_than IS NOT NULL THEN PERFORM _check_interval('p_older_than', p_older_than, interval '0', interval '100 years'); END IF;
    IF p_status_column IS NOT NULL THEN
        PERFORM _check_text('p_status_column', p_status_column, 63);
        v_status := _retention_column(p_table, p_status_column);
        IF v_status.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_status_column must name a column of %s, got %s', p_table::text,
                quote_ident(p_status_column));
        END IF;
        IF v_status.category <> 'S' THEN
            PERFORM _retention_invalid('p_status_column must be text-like (text, varchar, char), got %s of type %s',
                quote_ident(p_status_column), v_status.base_type::text);
        END IF;
        IF p_statuses IS NULL OR cardinality(p_statuses) = 0 OR array_position(p_statuses, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_statuses must be a non-empty array without NULLs when p_status_column is given, got %s',
                coalesce(p_statuses::text, 'NULL'));
        END IF;
    ELSIF p_statuses IS NOT NULL THEN
        PERFORM _retention_invalid('p_statuses needs p_status_column, got statuses %s and no status column', p_statuses::text);
    END IF;
    PERFORM _check_int('p_batch_size', p_batch_size, 1, 10000);
    PERFORM _check_size('p_statuses', cardinality(p_statuses), 'max_batch');
    IF p_mode IS NULL OR p_mode NOT IN ('exclusive', 'parallel') THEN
        PERFORM _retention_invalid('p_mode must be ''exclusive'' or ''parallel'', got %s', coalesce(quote_literal(p_mode), 'NULL'));
    END IF;
    IF p_interval IS NULL OR p_interval <= interval '0' THEN
        PERFORM _retention_invalid('p_interval must be greater than 0, got %s', _interval_text(p_interval));
    END IF;
    PERFORM _check_interval('p_interval', p_interval, interval '1 second', interval '30 days');
    -- Checks done: from here on the call succeeds.
    SELECT * INTO v_old FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF FOUND AND (v_old.table_schema, v_old.table_name, v_old.time_column, v_old.time_type, v_old.older_than,
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode, v_old.owner)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_owner) THEN
        DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached' AND owner IS NULL;
    END IF;
    INSERT INTO retention_policy AS p (name, table_schema, table_name, time_column, time_type, older_than,
                                       status_column, statuses, batch_size, mode, run_interval,
                                       registered_at, updated_at, owner)
    VALUES (p_name, v_schema, v_table, p_time_column, v_time_type, p_older_than,
            p_status_column, p_statuses, p_batch_size, p_mode, p_interval, v_now, v_now, p_owner)
    ON CONFLICT (name) DO UPDATE
       SET table_schema = excluded.table_schema, table_name = excluded.table_name, owner = excluded.owner,
           time_column = excluded.time_column, time_type = excluded.time_type, older_than = excluded.older_than,
           status_column = excluded.status_column, statuses = excluded.statuses, batch_size = excluded.batch_size,
           mode = excluded.mode, run_interval = excluded.run_interval,
           -- a filter names a column of the old table: it cannot carry over to another table
           filter_column = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_column END,
           filter_values = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_values END,
           updated_at = excluded.updated_at;
    IF _retention_index(p_table, p_time_column, p_status_column,
                        (SELECT filter_column FROM retention_policy WHERE name = p_name)) IS NULL THEN
        RAISE NOTICE 'retention policy %: no btree index of % leads with %, so every pass reads the whole table',
            p_name, p_table::text, quote_ident(p_time_column)
            USING HINT = format('CREATE INDEX ON %s (%I)', p_table::text, p_time_column);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION retention_table_name_check(p_table text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT _check_text('p_table', p_table, 300) $$;

CREATE OR REPLACE FUNCTION retention_resolve_table(p_table text, p_search_path text)
RETURNS regclass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
    v_pinned text := pg_catalog.current_setting('search_path');
BEGIN
    IF p_table IS NOT NULL THEN
        PERFORM retention_table_name_check(p_table); -- the name rule (validate.sql): before the name is echoed
        BEGIN
            PERFORM pg_catalog.set_config('search_path', coalesce(p_search_path, ''), true);
            v_rel := pg_catalog.to_regclass(p_table);
        EXCEPTION WHEN OTHERS THEN NULL; -- malformed names such as 'a.b.c.d'
        END;
        PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    END IF;
    IF v_rel IS NULL THEN
        RAISE EXCEPTION 'p_table must be an existing table, got %',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(p_table, 300)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_rel;
END
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := retention_owner_proof();
    v_result boolean := retention_unregister_proved(v_proof::regclass, p_name);
BEGIN
    EXECUTE 'DROP TABLE ' || v_proof;
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION retention_unregister_proved(p_proof regclass, p_name text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN _retention_policy_owned('retention_unregister', p_name,
                         _retention_proof_role(p_proof, 'retention_unregister'), false) IS NULL
                THEN false ELSE _retention_unregister(p_name) END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone_proved(p_proof regclass, p_name text, p_time_zone text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_policy_owned('retention_set_time_zone', p_name, _retention_proof_role(p_proof, 'retention_set_time_zone'), true);
    SELECT _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    UPDATE retention_policy SET time_zone = p_time_zone WHERE name = p_name;
    SELECT _retention_policy_changed(p_name, true); -- the open sweep's cutoff was computed in the old zone
$$;

CREATE OR REPLACE FUNCTION retention_set_filter_proved(p_proof regclass, p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_policy_owned('retention_set_filter', p_name, _retention_proof_role(p_proof, 'retention_set_filter'), true);
    SELECT _retention_set_filter(p_name, p_column, p_values);
$$;

CREATE OR REPLACE FUNCTION _retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
    v_rel regclass;
    v_col record;
BEGIN
    PERFORM _check_text('p_name', p_name);
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
    IF p_column IS NOT NULL THEN
        PERFORM _check_text('p_column', p_column, 63);
        PERFORM _check_size('p_values', cardinality(p_values), 'max_batch');
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        -- a base type or an enum, not an array: read from text without running any role's code
        IF NOT coalesce((SELECT t.typtype IN ('b', 'e') AND t.typcategory <> 'A'
                           FROM pg_catalog.pg_type t WHERE t.oid = v_col.base_type), false) THEN
            PERFORM _retention_invalid('p_column must be of a scalar type (not an array, composite or range), got %s of type %s',
                quote_ident(p_column), v_col.base_type::text);
        END IF;
        IF p_values IS NULL OR cardinality(p_values) = 0 OR array_position(p_values, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_values must be a non-empty array without NULLs, got %s', coalesce(p_values::text, 'NULL'));
        END IF;
        -- Values are cast to the column's base type in every batch: fail now, not then.
        BEGIN
            EXECUTE format('SELECT $1::%s[]', v_col.type_sql) USING p_values;
        EXCEPTION WHEN OTHERS THEN
            PERFORM _retention_invalid('p_values must be valid values of %s (type %s), got %s', quote_ident(p_column),
                v_col.base_type::text, p_values::text);
        END;
    ELSIF p_values IS NOT NULL THEN
        PERFORM _retention_invalid('p_values needs p_column, got values %s and no column', p_values::text);
    END IF;
    UPDATE retention_policy SET filter_column = p_column, filter_values = p_values WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, true);
END
$$;

CREATE OR REPLACE FUNCTION _retention_policy_changed(p_name text, p_replan boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz := clock_timestamp(); -- a plain value in the UPDATE (Citus)
BEGIN
    UPDATE retention_policy SET updated_at = v_at WHERE name = p_name;
    IF p_replan THEN DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached' AND owner IS NULL; END IF;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl_proved(p_proof regclass, p_name text, p_ttl interval)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_policy_owned('retention_set_lease_ttl', p_name, _retention_proof_role(p_proof, 'retention_set_lease_ttl'), true);
    SELECT _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    UPDATE retention_policy SET lease_ttl = p_ttl WHERE name = p_name;
    SELECT _retention_policy_changed(p_name, false);
$$;
-- pgsweep:end functions/retention_register.sql

-- pgsweep:changed functions/retention_step.sql
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
    v_at timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_name', p_name);
    IF p_owner IS NOT NULL THEN PERFORM _check_text('p_owner', p_owner); END IF;
    PERFORM _check_interval('p_budget', p_budget, interval '0', interval '1 day');
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    IF v_pol.older_than IS NULL THEN RETURN NULL; END IF; -- kept forever
    v_owner := coalesce(p_owner,
        format('pid%s-%s', pg_catalog.pg_backend_pid(), substr(md5(random()::text || clock_timestamp()::text), 1, 8)));
    IF v_pol.mode = 'exclusive' THEN
        PERFORM _retention_unlock(p_name);
        IF NOT pg_catalog.pg_try_advisory_lock(_retention_lock_key(p_name)) THEN
            RAISE NOTICE 'retention policy %: another cleaner is running it; nothing done', p_name;
            RETURN NULL;
        END IF;
        v_token := _lease_acquire('retention:' || p_name, v_owner, v_pol.lease_ttl, NULL);
        IF v_token IS NULL THEN
            PERFORM pg_catalog.pg_advisory_unlock(_retention_lock_key(p_name));
            RAISE NOTICE 'retention policy %: lease retention:% is held by another cleaner; nothing done', p_name, p_name;
            RETURN NULL;
        END IF;
    END IF;
    v_at := clock_timestamp(); -- after both locks: the pass may delete from now on
    INSERT INTO retention_pass (policy, owner, mode, lease_token, pid, backend_start, started_at, deadline,
                                now_override, renewed_at)
    VALUES (p_name, v_owner, v_pol.mode, v_token, pg_catalog.pg_backend_pid(),
            (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
            v_at, v_at + p_budget, p_now, v_at)
    RETURNING id INTO v_id;
    RETURN v_id;
EXCEPTION WHEN OTHERS THEN
    PERFORM _retention_unlock(p_name);
    RAISE;
END
$$;

CREATE OR REPLACE FUNCTION _retention_step_claim(p_pass bigint)
RETURNS retention_step
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_unit retention_unit;
    v_sweep retention_sweep;
    v_now timestamptz := clock_timestamp();
    v_target oid;
    v_rel regclass;
    o retention_step;
BEGIN
    o.more := false;
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN RETURN o; END IF; -- the policy was unregistered during the pass
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;

    -- The budget bounds the pass, which always gets its first batch; one
    -- whose claims are never recorded ends a lease TTL after its deadline.
    IF v_now >= v_pass.deadline AND (v_pass.batches > 0 OR v_now >= v_pass.deadline + v_pol.lease_ttl) THEN
        UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
        RETURN o;
    END IF;

    IF v_pass.mode = 'exclusive' THEN
        IF v_now >= v_pass.renewed_at + v_pol.lease_ttl / 3 THEN
            IF NOT _lease_renew('retention:' || v_pol.name, v_pass.owner, v_pol.lease_ttl, NULL) THEN
                UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
                RETURN o;
            END IF;
            v_now := clock_timestamp();
            UPDATE retention_pass SET renewed_at = v_now WHERE id = p_pass;
        ELSIF NOT EXISTS (SELECT 1 FROM lease l WHERE l.name = 'retention:' || v_pol.name AND l.owner = v_pass.owner
                             AND l.token = v_pass.lease_token AND l.expires_at > v_now) THEN
            UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
            RETURN o;
        END IF;
    END IF;

    -- Claim a unit but those other cleaners are on, this pass deferred, or a runner
    -- holds (retention_detach.sql) unless its claim expired on a leaf still attached.
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name AND u.deferred_pass IS DISTINCT FROM p_pass
       AND (u.owner IS NULL OR (u.expires_at <= v_now AND NOT u.counted
                                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i
                                                 WHERE i.inhrelid = u.leaf AND i.inhdetachpending)))
     ORDER BY u.sweep_id, u.unit_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF FOUND AND v_unit.owner IS NOT NULL THEN
        UPDATE retention_unit u SET owner = NULL, expires_at = NULL
         WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = v_unit.unit_no
        RETURNING * INTO v_unit;
    END IF;
    IF v_unit.policy IS NULL THEN
        -- A pass works one sweep: it joins the open one or plans one.
        IF v_pass.deferred > 0 OR v_pass.batches > 0 OR v_pass.planned_sweep IS NOT NULL
           OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name AND u.owner IS NULL) THEN
            UPDATE retention_pass SET outcome = CASE WHEN v_pass.deferred > 0 THEN 'deferred' ELSE 'drained' END
             WHERE id = p_pass;
            RETURN o;
        END IF;
        -- Plan under the policy row's lock, taken without waiting.
        PERFORM 1 FROM retention_policy WHERE name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF v_now >= v_pass.deadline THEN -- the row stayed locked (a register left open?)
                UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
                RETURN o;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.005);
            o.more := true;
            RETURN o;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name AND u.owner IS NULL) THEN
            o.more := true; -- planned and committed by another cleaner just now
            RETURN o;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_sweep s WHERE s.policy = v_pol.name AND s.planned_at >= v_pass.started_at) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass; -- swept since this pass began
            RETURN o;
        END IF;
        o.kind := 'plan';
        o.more := true;
        -- a pinned clock (tests) may only make the cutoff earlier
        o.now := least(coalesce(v_pass.now_override, clock_timestamp()), clock_timestamp());
        o.cutoff := _retention_cutoff(v_pol, o.now);
        -- the sample reads about 400 blocks; none of an empty or a distributed table
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        o.pct := (SELECT least(100, 400 * 100.0 / b.n)::double precision
                    FROM (SELECT pg_catalog.pg_relation_size(v_rel) / current_setting('block_size')::int AS n) b
                   WHERE b.n > 0 AND (v_pol.owner = _owner_role() OR _retention_distribution(v_rel) IS NULL));
        RETURN o;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    -- A leaf's unit: the leaf, by the catalog (<schema>_owner need not have USAGE
    -- on its schema), still a partition (a detached one is not the policy's table).
    IF v_unit.leaf_name IS NOT NULL AND v_unit.kind <> 'detached' THEN
        SELECT c.oid INTO v_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r' AND c.relispartition;
    END IF;
    -- a leaf or a shard gone since the plan leaves its rows to the next sweep
    IF (v_unit.leaf_name IS NOT NULL AND v_unit.kind <> 'detached' AND v_target IS NULL)
       OR (v_unit.shard_id IS NOT NULL AND (_retention_shard_placement(
               _retention_table(v_pol.table_schema, v_pol.table_name), v_unit.shard_id)).node IS NULL) THEN
        DELETE FROM retention_unit u WHERE (u.policy, u.sweep_id, u.unit_no) = (v_unit.policy, v_unit.sweep_id, v_unit.unit_no);
        o.more := true;
        RETURN o;
    END IF;
    -- planned as a drop but no longer droppable (moved, the policy changed): sweep the leaf
    IF v_unit.kind = 'drop' AND v_target IS NOT NULL
       AND NOT _retention_leaf_droppable(v_pol, v_target, least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()))) THEN
        UPDATE retention_unit SET kind = 'delete', block_lo = 0, block_hi = NULL
         WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no
        RETURNING * INTO v_unit;
    END IF;
    o.kind := CASE v_unit.kind WHEN 'detached' THEN 'release' WHEN 'drop' THEN 'detach' ELSE 'delete' END;
    o.more := true;
    o.strategy := v_sweep.strategy;
    o.sweep_id := v_unit.sweep_id;
    o.unit_no := v_unit.unit_no;
    o.shard_id := v_unit.shard_id;
    o.target := v_target;
    -- never later than now() - older_than of the policy as it is now
    o.cutoff := least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()));
    RETURN o;
END
$$;

CREATE OR REPLACE FUNCTION _retention_step_done(p_pass bigint, p_unit retention_unit, p_strategy text, p_deleted bigint)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    DELETE FROM retention_unit u WHERE (u.policy, u.sweep_id, u.unit_no) = (p_unit.policy, p_unit.sweep_id, p_unit.unit_no);
    UPDATE retention_pass -- last_batch_at after the DELETE: the pass deleted until then
       SET rows_deleted = rows_deleted + p_deleted, batches = batches + 1, units = units + 1,
           last_batch_at = pg_catalog.clock_timestamp(), strategy = p_strategy
     WHERE id = p_pass;
$$;

CREATE OR REPLACE FUNCTION _retention_step_detached(p_pass bigint, p_unit retention_unit, p_units int[], p_leaves oid[],
    p_rows bigint, p_strategy text, p_premarked boolean)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH l AS (
        SELECT x.unit_no, x.oid,
               EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                        WHERE c.oid = x.oid AND c.relname = _retention_detached_name(x.oid) AND NOT c.relispartition) AS detached
          FROM unnest(p_units, p_leaves) x(unit_no, oid)
    ), u AS (
        UPDATE retention_unit u
           SET kind = CASE WHEN l.detached THEN 'detached' ELSE 'drop' END::retention_unit_kind,
               detached_table = CASE WHEN l.detached THEN l.oid END,
               deferred_pass = p_pass
          FROM l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no
        RETURNING l.detached
    )
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + CASE WHEN n.detached > 0 THEN p_rows ELSE 0 END,
           batches = batches + CASE WHEN n.detached > 0 THEN 1 ELSE 0 END - CASE WHEN p_premarked THEN 1 ELSE 0 END,
           partitions_dropped = partitions_dropped + n.detached - CASE WHEN p_premarked THEN cardinality(p_leaves) ELSE 0 END,
           deferred = deferred + cardinality(p_leaves) - n.detached,
           last_batch_at = CASE WHEN n.detached > 0 THEN pg_catalog.clock_timestamp() ELSE last_batch_at END,
           strategy = p_strategy
      FROM (SELECT count(*) FILTER (WHERE u.detached)::int AS detached FROM u) n
     WHERE id = p_pass;
$$;

CREATE OR REPLACE FUNCTION _retention_plan_from_sample(p_pass bigint, p_now timestamptz, p_pct double precision,
    p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _check_now('p_now', p_now);
    UPDATE retention_pass s SET planned_sweep = _retention_plan(r, p_now, s.owner, p_pct, p_fraction, p_sampled, p_times)
      FROM retention_policy r WHERE s.id = p_pass AND r.name = s.policy;
$$;

CREATE OR REPLACE FUNCTION retention_step_end(p_pass bigint, p_error text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_finish(p_pass, CASE WHEN p_error IS NOT NULL THEN 'error' END, left(p_error, 2000))
     WHERE NOT (_retention_pass_check(p_pass) IS NULL);
$$;

CREATE OR REPLACE FUNCTION retention_step_unlock(p_name text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _check_text('p_name', p_name) WHERE NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name);
    SELECT _retention_unlock(p_name);
$$;

CREATE OR REPLACE FUNCTION retention_step_claim(p_pass bigint,
    OUT o_more boolean, OUT o_kind text, OUT o_role regrole, OUT o_owner regrole, OUT o_policy text, OUT o_type text,
    OUT o_lo text, OUT o_hi text, OUT o_cutoff timestamptz, OUT o_statuses text[], OUT o_filters text[],
    OUT o_settings text, OUT o_body text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_step;
    v_pol retention_policy;
    v_unit retention_unit;
    v_b record;
    v_run record;
    v_parent oid;
BEGIN
    o_more := false;
    IF _retention_pass_check(p_pass) IS NULL THEN RETURN; END IF;
    UPDATE retention_pass SET step = NULL WHERE id = p_pass; -- a claim not recorded is void
    v := _retention_step_claim(p_pass);
    o_more := v.more;
    IF v.kind IS NULL THEN RETURN; END IF;
    SELECT r.* INTO v_pol FROM retention_pass s JOIN retention_policy r ON r.name = s.policy WHERE s.id = p_pass;
    SELECT * INTO v_unit FROM retention_unit u WHERE u.policy = v_pol.name AND u.sweep_id = v.sweep_id AND u.unit_no = v.unit_no;
    SELECT v_pol.name, v_pol.owner, v_pol.owner, v.cutoff, v_pol.statuses, v_pol.filter_values
      INTO o_policy, o_owner, o_role, o_cutoff, o_statuses, o_filters;
    IF v.kind = 'plan' AND v.pct IS NULL THEN -- an empty or a partitioned table: no sample
        PERFORM _retention_plan_from_sample(p_pass, v.now, NULL, NULL, NULL, NULL);
        RETURN;
    ELSIF v_pol.owner = _owner_role() AND v.kind = 'plan' THEN -- a built-in policy: its step runs here whole
        v_run := _retention_builtin_exec(o_policy, 'sample', NULL, v.pct, NULL::double precision, o_cutoff);
        PERFORM _retention_plan_from_sample(p_pass, v.now, v.pct, v_run.fraction, v_run.sampled, v_run.times);
        RETURN;
    ELSIF v_pol.owner = _owner_role() THEN
        BEGIN
            IF v.strategy = 'tid_range' THEN
                v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy, format('(%s,0)', v_unit.block_lo)::tid,
                    format('(%s,0)', coalesce(v_unit.block_hi, 4294967295))::tid, o_cutoff);
            ELSE
                v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy, v_unit.time_lo, v_unit.time_hi, o_cutoff);
            END IF;
        EXCEPTION WHEN lock_not_available THEN -- a row locked past retention_lock_timeout: left to a later pass
            UPDATE retention_unit u SET deferred_pass = p_pass
             WHERE (u.policy, u.sweep_id, u.unit_no) = (v_unit.policy, v_unit.sweep_id, v_unit.unit_no);
            UPDATE retention_pass SET deferred = deferred + 1 WHERE id = p_pass;
            RETURN;
        END;
        PERFORM _retention_step_done(p_pass, v_unit, v.strategy, v_run.deleted);
        RETURN;
    END IF;
    -- the body of the statement: a PL/pgSQL block over $1..$5
    CASE v.kind
    WHEN 'plan' THEN
        o_kind := 'sample';
        o_type := 'pg_catalog.float8';
        o_lo := v.pct::text;
        o_body := format('BEGIN RETURN QUERY EXECUTE %L USING $1, $2, $3, $4, $5; END',
                         'SELECT NULL::bigint, s.* FROM (' || _retention_sample_sql(v_pol, v.pct) || ') s');
        o_role := coalesce(_retention_run_role(v_pol, _retention_table(v_pol.table_schema, v_pol.table_name)), o_role);
    WHEN 'detach' THEN
        -- the leaf and those of the sweep's other free drop units under its
        -- parent still droppable, at most 64, detached in one transaction
        v_parent := (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v.target);
        v.units := ARRAY[v_unit.unit_no];
        v.oids := ARRAY[v.target];
        FOR v_b IN
            SELECT u.unit_no, (SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                                WHERE n.nspname = u.leaf_schema AND c.relname = u.leaf_name AND c.relkind = 'r') AS leaf
              FROM retention_unit u
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no <> v_unit.unit_no
               AND u.kind = 'drop' AND u.owner IS NULL AND u.deferred_pass IS DISTINCT FROM p_pass
             ORDER BY u.unit_no
               FOR UPDATE SKIP LOCKED
        LOOP
            EXIT WHEN cardinality(v.oids) >= 64;
            -- gone, moved or no longer droppable: its own step finds out
            CONTINUE WHEN v_b.leaf IS NULL
                OR (SELECT i.inhparent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = v_b.leaf) IS DISTINCT FROM v_parent
                OR NOT _retention_leaf_droppable(v_pol, v_b.leaf::regclass, o_cutoff);
            v.units := v.units || v_b.unit_no;
            v.oids := v.oids || v_b.leaf;
        END LOOP;
        IF v_parent IS NULL THEN -- no longer a partition
            PERFORM _retention_step_detached(p_pass, v_unit, v.units, v.oids, 0, v.strategy, false);
            RETURN;
        END IF;
        o_body := _retention_detach_body(v_parent, v.oids);
    WHEN 'release' THEN
        -- the sweep's free detached tables; one renamed, not the policy owner's
        -- or depended on (DROP would fail every pass) is left, its unit closed
        v.units := '{}';
        v.oids := '{}';
        FOR v_b IN
            SELECT * FROM retention_unit u
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id
               AND (u.unit_no = v_unit.unit_no OR (u.kind = 'detached' AND u.deferred_pass IS DISTINCT FROM p_pass))
             ORDER BY u.unit_no
               FOR UPDATE SKIP LOCKED
        LOOP
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                        WHERE c.oid = v_b.detached_table AND c.relkind = 'r' AND NOT c.relispartition
                          AND c.relname = _retention_detached_name(v_b.detached_table) AND c.relowner = v_pol.owner
                          AND NOT _retention_depended_on(c.oid)) THEN
                v.units := v.units || v_b.unit_no;
                v.oids := v.oids || v_b.detached_table;
            ELSE
                IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = v_b.detached_table) THEN
                    RAISE NOTICE 'retention policy %: the detached partition % (formerly %.%) is left in place',
                        v_b.policy, v_b.detached_table::regclass::text, v_b.leaf_schema, v_b.leaf_name;
                END IF;
                DELETE FROM retention_unit u WHERE (u.policy, u.sweep_id, u.unit_no) = (v_b.policy, v_b.sweep_id, v_b.unit_no);
            END IF;
        END LOOP;
        IF cardinality(v.oids) = 0 THEN RETURN; END IF;
        -- drops the detached tables; one held past lock_timeout stays
        SELECT format('BEGIN %s RETURN QUERY SELECT 0::bigint, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
                      coalesce(string_agg(format('BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available THEN NULL; END; ',
                                                 format('DROP TABLE %I.%I', n.nspname, c.relname)), '' ORDER BY l.ord), ''))
          INTO o_body FROM unnest(v.oids) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace;
    ELSE
        IF v.target IS NOT NULL THEN
            -- a leaf: as its owner, if the policy's owner may act as it
            o_role := _retention_run_role(v_pol, v.target::regclass);
            IF o_role IS NULL THEN
                UPDATE retention_pass
                   SET error = coalesce(error || '; ', '') || format(
                       'leaf %s skipped: owned by %s, which the policy''s owner %s is not a member of',
                       v.target::regclass::text, (SELECT c.relowner::regrole::text FROM pg_catalog.pg_class c WHERE c.oid = v.target),
                       v_pol.owner::text)
                 WHERE id = p_pass;
                DELETE FROM retention_unit u WHERE (u.policy, u.sweep_id, u.unit_no) = (v_unit.policy, v_unit.sweep_id, v_unit.unit_no);
                RETURN;
            END IF;
        ELSE
            o_role := coalesce(_retention_run_role(v_pol, _retention_table(v_pol.table_schema, v_pol.table_name)), o_role);
        END IF;
        o_kind := 'delete';
        o_type := CASE v.strategy WHEN 'tid_range' THEN 'pg_catalog.tid' ELSE 'pg_catalog.timestamptz' END;
        o_lo := CASE v.strategy WHEN 'tid_range' THEN format('(%s,0)', v_unit.block_lo) ELSE v_unit.time_lo::text END;
        o_hi := CASE v.strategy WHEN 'tid_range' THEN format('(%s,0)', coalesce(v_unit.block_hi, 4294967295))
                ELSE v_unit.time_hi::text END;
        o_body := CASE WHEN v.shard_id IS NOT NULL THEN _retention_shard_body(v_pol, v.strategy, v.shard_id, o_lo, o_hi, o_cutoff)
                       ELSE format('DECLARE n bigint; BEGIN EXECUTE %L USING $1, $2, $3, $4, $5; GET DIAGNOSTICS n = ROW_COUNT; '
                                   'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
                                   _retention_sweep_sql(v_pol, v.strategy, v.target::regclass)) END;
    END CASE;
    IF v.kind IN ('detach', 'release') THEN -- the tables are its parameters
        o_kind := v.kind;
        o_type := 'pg_catalog.oid[]';
        o_lo := v.oids::text;
        o_hi := o_lo;
    END IF;
    o_settings := _retention_exec_settings(CASE WHEN o_kind = 'delete' AND v.shard_id IS NULL THEN v.strategy END)
                  -- a shard's batch passes its lock_timeout on to the worker (_retention_shard_body)
                  || CASE WHEN v.shard_id IS NOT NULL THEN ' SET citus.propagate_set_commands = local' ELSE '' END;
    UPDATE retention_pass SET step = v WHERE id = p_pass;
END
$$;

CREATE OR REPLACE FUNCTION retention_step_record(p_pass bigint, p_phase text, p_deleted bigint,
    p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v retention_step;
    v_unit retention_unit;
    v_deleted bigint := coalesce(p_deleted, 0);
BEGIN
    IF p_phase IS NULL OR p_phase NOT IN ('done', 'locked', 'detaching') THEN
        PERFORM _check_text('p_phase', p_phase, 20); -- the message below echoes it
        PERFORM _retention_invalid('p_phase must be one of done, locked, detaching, got %s', quote_literal(p_phase));
    END IF;
    IF p_deleted IS NOT NULL THEN PERFORM _check_int('p_deleted', p_deleted, 0, 9223372036854775807); END IF;
    IF p_sampled IS NOT NULL THEN PERFORM _check_int('p_sampled', p_sampled, 0, 9223372036854775807); END IF;
    IF p_fraction IS NOT NULL AND NOT (p_fraction >= 0 AND p_fraction <= 1) THEN -- NaN is neither
        PERFORM _retention_invalid('p_fraction must be NULL or between 0 and 1, got %s', p_fraction::text);
    END IF;
    v_pass := _retention_pass_check(p_pass);
    v := v_pass.step;
    IF v.kind IS NULL THEN RETURN; END IF;
    IF p_phase <> 'detaching' THEN UPDATE retention_pass SET step = NULL WHERE id = p_pass; END IF;
    IF v.kind = 'plan' THEN
        IF p_phase = 'done' THEN
            PERFORM _retention_plan_from_sample(p_pass, v.now, v.pct, p_fraction, p_sampled, p_times);
        END IF;
        RETURN;
    END IF;
    SELECT * INTO v_unit FROM retention_unit u WHERE u.policy = v_pass.policy AND u.sweep_id = v.sweep_id AND u.unit_no = v.unit_no;
    IF NOT FOUND THEN RETURN; END IF;
    IF v.kind = 'detach' THEN
        IF p_phase = 'detaching' THEN
            -- Recorded before the parent is locked, as if every leaf will be detached, so that
            -- the lock is held for the detaches alone; corrected when a leaf stays.
            UPDATE retention_unit u SET kind = 'detached', detached_table = l.oid, deferred_pass = p_pass
              FROM unnest(v.units, v.oids) l(unit_no, oid)
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = l.unit_no;
            v.premarked := true;
            UPDATE retention_pass
               SET batches = batches + 1, partitions_dropped = partitions_dropped + cardinality(v.oids),
                   last_batch_at = clock_timestamp(), strategy = v.strategy, step = v
             WHERE id = p_pass;
        ELSIF p_phase = 'locked' THEN
            -- nothing was detached (the premark rolled back with it)
            PERFORM _retention_step_detached(p_pass, v_unit, v.units, v.oids, 0, v.strategy, false);
        ELSIF p_sampled = cardinality(v.oids) AND v.premarked THEN
            UPDATE retention_pass SET rows_deleted = rows_deleted + v_deleted WHERE id = p_pass;
        ELSE -- a leaf was in use and stays: the record follows the catalog
            PERFORM _retention_step_detached(p_pass, v_unit, v.units, v.oids, v_deleted, v.strategy,
                                             coalesce(v.premarked, false));
        END IF;
    ELSIF v.kind = 'release' THEN -- a unit whose table is gone is done, else deferred; a release is not a batch
        WITH l AS (
            SELECT x.unit_no, EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = x.oid) AS present
              FROM unnest(v.units, v.oids) x(unit_no, oid)
        ), d AS (
            DELETE FROM retention_unit u USING l
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = l.unit_no AND NOT l.present
            RETURNING 1
        ), k AS (
            UPDATE retention_unit u SET deferred_pass = p_pass FROM l
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = l.unit_no AND l.present
            RETURNING 1
        )
        UPDATE retention_pass SET units = units + (SELECT count(*) FROM d), deferred = deferred + (SELECT count(*) FROM k)
         WHERE id = p_pass;
    ELSIF p_phase = 'locked' THEN -- left to a later pass
        UPDATE retention_unit u SET deferred_pass = p_pass
         WHERE (u.policy, u.sweep_id, u.unit_no) = (v_unit.policy, v_unit.sweep_id, v_unit.unit_no);
        UPDATE retention_pass SET deferred = deferred + 1 WHERE id = p_pass;
    -- a shard's batch that read batch_size rows leaves its unit open
    ELSIF v.shard_id IS NOT NULL AND v_deleted > 0
          AND p_sampled >= (SELECT r.batch_size FROM retention_policy r WHERE r.name = v_pass.policy) THEN
        UPDATE retention_pass
           SET rows_deleted = rows_deleted + v_deleted, batches = batches + 1, last_batch_at = clock_timestamp(),
               strategy = v.strategy
         WHERE id = p_pass;
    ELSE
        PERFORM _retention_step_done(p_pass, v_unit, v.strategy, v_deleted);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _retention_finish(p_pass bigint, p_outcome text, p_error text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH p AS (
        UPDATE retention_pass
           SET finished_at = pg_catalog.clock_timestamp(),
               outcome = coalesce(p_outcome, CASE WHEN outcome = 'running' THEN 'drained' ELSE outcome END),
               error = CASE WHEN p_error IS NULL THEN error ELSE coalesce(error || '; ', '') || p_error END,
               step = NULL
         WHERE id = p_pass
        RETURNING policy, owner, mode)
    SELECT _lease_release('retention:' || p.policy, p.owner, NULL) FROM p WHERE p.mode = 'exclusive';
    -- A bounded history: the last 1000 passes of each policy.
    DELETE FROM retention_pass p
     WHERE p.policy = (SELECT f.policy FROM retention_pass f WHERE f.id = p_pass)
       AND p.id <= (SELECT p2.id FROM retention_pass p2 WHERE p2.policy = p.policy ORDER BY p2.id DESC OFFSET 1000 LIMIT 1);
$$;
-- pgsweep:end functions/retention_step.sql

-- pgsweep:changed functions/retention_plan.sql
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
-- pgsweep:end functions/retention_plan.sql

-- pgsweep:changed functions/retention_sql.sql
CREATE OR REPLACE FUNCTION _retention_cutoff(p_pol retention_policy, p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_pol.time_type = 'timestamptz' THEN p_now - p_pol.older_than
                ELSE ((p_now - p_pol.older_than) AT TIME ZONE coalesce(p_pol.time_zone, current_setting('TimeZone')))
                     AT TIME ZONE 'UTC' END
$$;

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
-- pgsweep:end functions/retention_sql.sql

-- pgsweep:changed functions/retention_shards.sql
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
-- pgsweep:end functions/retention_shards.sql

-- pgsweep:changed functions/retention_views.sql
CREATE OR REPLACE VIEW retention_passes AS
SELECT p.id, p.policy, p.owner, p.mode, p.strategy,
       CASE WHEN p.outcome = 'running' AND NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = p.pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
            THEN 'abandoned' ELSE p.outcome END AS outcome,
       p.started_at, p.finished_at, p.last_batch_at,
       coalesce(p.finished_at, p.last_batch_at, p.started_at) - p.started_at AS elapsed,
       p.rows_deleted, p.batches, p.units, p.lease_token, p.planned_sweep, p.error, p.deferred, p.partitions_dropped
  FROM retention_pass p;

CREATE OR REPLACE VIEW retention_policies AS
SELECT r.name, format('%I.%I', r.table_schema, r.table_name) AS table_name,
       r.time_column, r.time_type, r.older_than, r.status_column, r.statuses, r.filter_column, r.filter_values,
       r.batch_size, r.mode, r.run_interval, coalesce(r.time_zone, current_setting('TimeZone')) AS time_zone,
       r.lease_ttl, r.strategy, (SELECT count(*) FROM retention_unit u WHERE u.policy = r.name) AS open_units,
       lp.started_at AS last_started_at, lp.finished_at AS last_finished_at, lp.outcome AS last_outcome,
       lp.owner AS last_owner, lp.strategy AS last_strategy, lp.rows_deleted AS last_rows_deleted,
       lp.batches AS last_batches, lp.elapsed AS last_elapsed, lp.error AS last_error,
       r.owner -- every run deletes as this role: maintenance needs GRANT <owner> TO <its role>
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz)
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT _check_now('p_now', p_now);
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT p.started_at AS at, p.outcome
                           FROM retention_passes p
                          -- a runner's concurrent detach (retention_detach.sql) is not the policy's pass
                          WHERE p.policy = r.name AND p.strategy IS DISTINCT FROM 'detach_concurrently'
                          ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= (SELECT coalesce(p_now, clock_timestamp()))
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred', 'abandoned')
            -- partitions a pass detached: the next pass drops them (retention_partition.sql)
            OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.kind = 'detached'))
     ORDER BY lp.at NULLS FIRST, r.name;
$$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:changed functions/retention_check.sql
CREATE OR REPLACE FUNCTION _retention_column(p_table regclass, p_column text, OUT type_sql text, OUT base_type regtype,
    OUT category "char")
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_typ oid;
BEGIN
    SELECT a.atttypid INTO v_typ
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF v_typ IS NULL THEN RETURN; END IF;
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_typ) = 'd' LOOP
        SELECT t.typbasetype INTO v_typ FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
    END LOOP;
    SELECT format('%I.%I', n.nspname, t.typname) INTO type_sql
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE t.oid = v_typ;
    base_type := v_typ::regtype;
    SELECT t.typcategory INTO category FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
END
$$;
-- pgsweep:end functions/retention_check.sql

-- pgsweep:changed functions/retention_run.sql
CREATE OR REPLACE PROCEDURE retention_step_pass(p_name text, p_pass bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_state pg_catalog.text;
    v_msg pg_catalog.text;
    v_detail pg_catalog.text;
    v_hint pg_catalog.text;
BEGIN
    IF p_pass IS NULL THEN RETURN; END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}.retention_step(p_pass);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
        END;
        EXIT WHEN v_state IS NOT NULL; -- failed: recorded and raised again below
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_end(p_pass,
        CASE WHEN v_state IS NOT NULL THEN pg_catalog.format('%s: %s', v_state, v_msg) END);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_unlock(p_name);
    IF v_state IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''), HINT = coalesce(v_hint, '');
    END IF;
END
$$;
-- pgsweep:end functions/retention_run.sql

-- pgsweep:changed functions/retention_builtin.sql
CREATE OR REPLACE FUNCTION retention_builtin_sync()
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- retention_register's "no index leads with the time column" NOTICE does not
-- apply: the filter (queue) and time column lead the tables' retention indexes.
SET client_min_messages = warning
AS $$
DECLARE
    v_changed int := 0;
    v_want record;
    v_removed int;
BEGIN
    FOR v_want IN
        SELECT 'pgsweep.processed:' || q.name AS name, 'message_processed'::regclass AS tbl,
               'processed_at' AS col, q.processed_retention AS period, q.name AS queue
          FROM queue q WHERE q.kind = 'inbox'
        UNION ALL
        SELECT 'pgsweep.dead:' || q.name, 'message_dead'::regclass, 'dead_at', q.dead_retention, q.name
          FROM queue q
         ORDER BY 1
    LOOP
        IF length(v_want.name) > 190 THEN
            RAISE WARNING 'queue "%" has no built-in retention of %: its name has % characters, at most 172 fit in a retention policy name (190); move its messages to a queue with a shorter name',
                v_want.queue, v_want.tbl, length(v_want.queue);
            CONTINUE;
        END IF;
        CONTINUE WHEN EXISTS (SELECT 1 FROM retention_policy p
                               WHERE p.name = v_want.name AND p.older_than IS NOT DISTINCT FROM v_want.period
                                 AND p.filter_column = 'queue' AND p.filter_values = ARRAY[v_want.queue]);
        -- register and filter in one transaction: no pass sees the policy without its filter
        PERFORM _retention_policy_put(v_want.name, v_want.tbl, v_want.col, v_want.period, NULL, NULL,
                                    1000, 'exclusive', interval '1 minute', _owner_role(), true);
        PERFORM _retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;
    PERFORM _retention_unregister(p.name) FROM retention_policy p
      WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                 SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
         OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name));
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_changed + v_removed;
END
$$;
-- pgsweep:end functions/retention_builtin.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
