-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY (a plain
-- DETACH makes inserts wait), which runs only outside a transaction block, so
-- the Go runner runs it (docs/retention.md, "Partitioned tables"). It claims
-- drop units of the policy's sweep (retention_unit.owner, expires_at; a pass
-- skips them), gets typed values (no SQL text), runs DETACH (or FINALIZE) and
-- a RENAME to pgsweep_detached_c<oid>, or a DROP, each in its own transaction
-- as the policy's owner, and reports each to retention_detach_done.

-- _retention_detach_runner_name: a table the runner detached is named so: the proof of who did.
CREATE OR REPLACE FUNCTION _retention_detach_runner_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_c' || p_leaf::text $$;

-- _retention_detach_can_act: whether p_role may SET ROLE to p_owner, as the
-- runner does for each statement (PostgreSQL 16 grants SET apart).
CREATE OR REPLACE FUNCTION _retention_detach_can_act(p_role name, p_owner oid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000
                THEN pg_catalog.pg_has_role(p_role, p_owner, 'SET')
                ELSE pg_catalog.pg_has_role(p_role, p_owner, 'MEMBER') END
       -- set_config('role', 'none') means RESET ROLE: a role of that name
       -- would have the runner act as itself
       AND pg_catalog.pg_get_userbyid(p_owner) OPERATOR(pg_catalog.<>) 'none'::name
$$;

-- _retention_detach_estimate: a table's rows by the catalog; NULL: gone.
CREATE OR REPLACE FUNCTION _retention_detach_estimate(p_table oid)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.pg_stat_get_live_tuples(c.oid) OPERATOR(pg_catalog.>) 0::bigint
                THEN pg_catalog.pg_stat_get_live_tuples(c.oid)
                WHEN c.reltuples OPERATOR(pg_catalog.>=) 0::real THEN c.reltuples::bigint
                ELSE 0::bigint END
      FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) p_table
$$;

-- retention_detach_claim: what the runner p_owner detaches now, at most 64
-- leaves ('skip' rows are not claims). The p_now overload is for tests.
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _caller_role();
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

-- retention_detach_done records a claimed leaf from the catalog: 'dropped',
-- 'detached' (under the runner's name: claimed again for DROP), 'pending'
-- (for FINALIZE), 'attached' (released to the pass), 'taken' (detached under
-- another name: closed, neither counted nor dropped), 'other' (not this
-- runner's claim); rows: what this call counted, once a leaf, in a
-- retention_pass of strategy 'detach_concurrently'.
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
    IF v_u.policy IS NULL OR NOT _retention_detach_can_act(_caller_role(), v_pol.owner) THEN
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
