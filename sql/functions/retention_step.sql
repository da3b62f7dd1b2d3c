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

-- _retention_step does one step of a pass: at most one batch. It returns
-- false when the pass is over (outcome recorded), true to be called again.
CREATE OR REPLACE FUNCTION _retention_step(p_pass bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_unit retention_unit;
    v_sweep retention_sweep;
    v_now timestamptz := clock_timestamp();
    v_n bigint;
    v_sweep_id bigint;
BEGIN
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN false; -- the policy was unregistered during the pass
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;

    -- The budget bounds the pass; a pass always gets its first batch.
    IF v_now >= v_pass.deadline AND v_pass.batches > 0 THEN
        UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
        RETURN false;
    END IF;

    IF v_pass.mode = 'exclusive' THEN
        IF v_now >= v_pass.renewed_at + v_pol.lease_ttl / 3 THEN
            IF NOT lease_renew('retention:' || v_pol.name, v_pass.owner, v_pol.lease_ttl) THEN
                UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
                RETURN false;
            END IF;
            v_now := clock_timestamp();
            UPDATE retention_pass SET renewed_at = v_now WHERE id = p_pass;
        ELSIF NOT EXISTS (SELECT 1 FROM lease l WHERE l.name = 'retention:' || v_pol.name AND l.owner = v_pass.owner
                             AND l.token = v_pass.lease_token AND l.expires_at > v_now) THEN
            UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
            RETURN false;
        END IF;
    END IF;

    -- Claim a unit. SKIP LOCKED: a unit another cleaner is on is skipped, never waited for.
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name
     ORDER BY u.sweep_id, u.unit_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- A pass works one sweep: it joins the open one or plans one. Units
        -- left but locked belong to cleaners that will finish them.
        IF v_pass.batches > 0 OR v_pass.planned_sweep IS NOT NULL
           OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass;
            RETURN false;
        END IF;
        -- Plan under the policy row's lock, taken without waiting; a cleaner
        -- that finds it taken polls briefly for the units being planned.
        PERFORM 1 FROM retention_policy WHERE name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF v_now >= v_pass.deadline THEN -- the row stayed locked (a register left open?)
                UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
                RETURN false;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.005);
            RETURN true;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            RETURN true; -- planned and committed by another cleaner just now
        END IF;
        IF EXISTS (SELECT 1 FROM retention_sweep s WHERE s.policy = v_pol.name AND s.planned_at >= v_pass.started_at) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass; -- swept since this pass began
            RETURN false;
        END IF;
        v_sweep_id := _retention_plan(v_pol, coalesce(v_pass.now_override, clock_timestamp()), v_pass.owner);
        UPDATE retention_pass SET planned_sweep = v_sweep_id WHERE id = p_pass;
        RETURN true;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    IF v_sweep.strategy = 'tid_range' THEN
        v_n := _retention_delete_range(v_sweep, v_pol, v_unit.block_lo, v_unit.block_hi);
    ELSE
        v_n := _retention_delete_window(v_sweep, v_pol, v_unit.time_lo, v_unit.time_hi);
    END IF;
    DELETE FROM retention_unit
     WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
    v_now := clock_timestamp(); -- after the DELETE: the pass deleted until now
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + v_n, batches = batches + 1, units = units + 1,
           last_batch_at = v_now, strategy = v_sweep.strategy
     WHERE id = p_pass;
    RETURN true;
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
