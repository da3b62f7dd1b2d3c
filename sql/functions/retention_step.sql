-- Retention: the steps of a pass. retention_run, a procedure (it commits),
-- calls the step routines below; the logic lives in functions, which can pin
-- search_path. An exclusive pass holds the policy's advisory lock (session
-- level, taken without waiting, released after the commit that ends the pass)
-- and the lease retention:<name> (lease.sql), which outlives the session and
-- is checked before every batch.

CREATE OR REPLACE FUNCTION _retention_lock_key(p_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT pg_catalog.hashtextextended(current_schema() || ' retention:' || p_name, 0) $$;

-- _retention_unlock releases every hold this session has on the policy's
-- advisory lock (an aborted call may leave one on a pooled connection).
CREATE OR REPLACE FUNCTION _retention_unlock(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint := _retention_lock_key(p_name);
BEGIN
    -- pg_locks shows a lock once however often it was taken; unlock until it is gone.
    WHILE EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
                     AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid) LOOP
        EXIT WHEN NOT pg_catalog.pg_advisory_unlock(v_key);
    END LOOP;
END
$$;

-- _retention_begin starts a pass: its id, or NULL (rows kept forever, or
-- another cleaner holds the policy). A failure gives back the advisory lock.
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

-- _retention_step_claim does the bookkeeping of one step and returns it:
-- 'plan', 'delete' (the unit locked for this transaction), 'detach' (a drop
-- unit), 'release' (the sweep's detached tables), or no kind (more: call again).
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

-- _retention_step_done records a unit's batch: the unit is done.
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

-- _retention_step_detached records a detach step from the catalog: a leaf renamed
-- pgsweep_detached_<oid> is detached (a later pass drops it) and counts (p_rows:
-- all of them), one still attached deferred; p_premarked: all counted already.
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

-- _retention_plan_from_sample plans the pass's sweep from the sample.
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

-- Step routines (docs/security.md): retention_run and maintain run as their caller and call
-- only these (begin, step, end, unlock); each that names a pass checks this session opened it.

-- _retention_pass_check: this session's running pass p_pass (NULL: none; 42501: another's or over).
CREATE OR REPLACE FUNCTION _retention_pass_check(p_pass bigint)
RETURNS retention_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_pass := (SELECT p FROM retention_pass p WHERE p.id = p_pass);
BEGIN
    IF v.id IS NOT NULL AND NOT _pass_running_here(v.pid, v.started_at, v.finished_at) THEN
        RAISE EXCEPTION 'retention pass %: not a running pass of this session', p_pass
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL retention_run, CALL maintain).';
    END IF;
    RETURN v; -- all NULL: no such pass
END
$$;

-- retention_step_begin opens a pass of p_name for this session (_retention_begin).
CREATE OR REPLACE FUNCTION retention_step_begin(p_name text, p_owner text, p_budget interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_begin(p_name, p_owner, p_budget, NULL) $$;

-- retention_step_end ends this session's pass (p_error: failed); the caller
-- commits, then calls retention_step_unlock.
CREATE OR REPLACE FUNCTION retention_step_end(p_pass bigint, p_error text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_finish(p_pass, CASE WHEN p_error IS NOT NULL THEN 'error' END, left(p_error, 2000))
     WHERE NOT (_retention_pass_check(p_pass) IS NULL);
$$;

-- retention_step_unlock gives back this session's advisory lock on a policy;
-- the name rule applies unless p_name is a registered policy's.
CREATE OR REPLACE FUNCTION retention_step_unlock(p_name text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _check_text('p_name', p_name) WHERE NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name);
    SELECT _retention_unlock(p_name);
$$;

-- _retention_run_role: the role a statement on p_rel runs as: its owner when
-- the policy's owner is a member of it (the table's code then runs as the
-- role that wrote it), else NULL (a leaf is skipped; the policy's table is
-- swept as the policy's owner).
CREATE OR REPLACE FUNCTION _retention_run_role(p_pol retention_policy, p_rel regclass)
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN c.relowner = p_pol.owner OR pg_catalog.pg_has_role(p_pol.owner, c.relowner, 'MEMBER')
                THEN c.relowner::regrole END
      FROM pg_catalog.pg_class c WHERE c.oid = p_rel
$$;

-- retention_step_claim claims a step of this session's pass and returns the
-- statement retention_step runs: o_kind NULL (nothing to run; o_more: call
-- again), or 'sample', 'delete', 'detach', 'release', run as o_role: the body
-- o_body with the settings o_settings over $1, $2 (o_type, as text), $3 the
-- cutoff, $4 the statuses, $5 the filter values. A built-in policy's step
-- runs here whole, as <schema>_owner.
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

-- retention_step_record records, for the claimed step only, what its
-- statement did ('done'; p_times: the sample's), that it met a lock past
-- retention_lock_timeout ('locked'), or that a detach begins ('detaching').
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

-- _retention_finish records the end of a pass and releases its lease.
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
