-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY, run by
-- the Go runner before each maintenance pass (docs/retention.md,
-- "Partitioned tables"; docs/security.md, "The runner's DETACH ...
-- CONCURRENTLY"). A plain DETACH (the pass's, retention_partition.sql)
-- holds ACCESS EXCLUSIVE on the parent, and inserts wait for it; the
-- CONCURRENTLY form takes SHARE UPDATE EXCLUSIVE, which no insert waits
-- for, but runs only outside a transaction block, so no function can.
--
-- The protocol (Client.RetentionDetachConcurrently in Go):
--   1. retention_detach_claim(owner) claims, among the policies retention_due
--      lists, 'detach' (a droppable leaf of a parent without a DEFAULT
--      partition), 'finalize' (a leaf this protocol left half-detached) and
--      'drop' (a table it detached by an earlier call: the DROP's commit is
--      kept out of the call that removes the rows), each a row of
--      retention_detaching held for the policy's lease_ttl; 'skip' rows are
--      not claims: a leaf or parent owned by another role than the
--      policy's owner, with the reason.
--   2. The runner builds each statement from the claim's typed values (no
--      SQL text travels to Go) and runs it as the policy's owner (SET ROLE
--      for that statement): DETACH or FINALIZE, then RENAME to
--      pgsweep_detached_c<oid>, or DROP, each in its own transaction,
--      under retention_lock_timeout.
--   3. retention_detach_done(owner, leaf) records what the catalog says: a
--      leaf out of its parent under the runner's name (or dropped) counts
--      its rows once, from the statistics (nothing reads the leaf), in a
--      retention_pass of strategy 'detach_concurrently', and stays claimed
--      for DROP; a half-detached leaf stays claimed for FINALIZE; an
--      attached one is released; one out of its parent under another name
--      is released, not counted, left in place.
-- The pass plans nothing for a leaf that is claimed or half-detached, and
-- sweeps nothing that left its parent since it planned.

-- _retention_detach_runner_name: the name the runner gives a table it
-- detached, until its next call drops it. Not the pass's
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

-- _retention_detach_can_act: whether p_role may SET ROLE to p_owner (the
-- runner acts as the policy's owner for each statement). PostgreSQL 16
-- grants SET apart from membership.
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

-- _retention_detach_estimate: the rows of a table, from the catalog (see
-- above): the statistics' live tuples, else reltuples, else 0. Reads
-- nothing of the table; NULL when the table is gone.
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

-- _retention_detach_claim_for: the claims of retention_detach_claim (below),
-- at most p_limit ('skip' rows are not claims and not counted).
CREATE OR REPLACE FUNCTION _retention_detach_claim_for(p_owner text, p_now timestamptz, p_limit int)
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
    v_rel regclass;
    v_cutoff timestamptz;
    v_c record;
    v_n int := 0;
    v_taken oid;
    v_due boolean;
    v_r record;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    PERFORM _check_now('p_now', p_now);
    -- Claims of a policy that was unregistered go with it (ON DELETE
    -- CASCADE); expired claims whose table is gone are forgotten (a live
    -- claim's holder may have dropped its table and not recorded it yet).
    DELETE FROM retention_detaching d
     WHERE d.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = d.leaf);
    -- New leaves only of the policies that are due (the runner's pass
    -- follows); leaves this protocol left half-detached whenever. Only
    -- policies whose owner the caller can act as.
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_detaching d WHERE d.policy = r.name))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_due := v_r.due;
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        FOR v_c IN
            SELECT c.oid AS leaf, i.inhparent AS parent, i.inhdetachpending AS pending,
                   n.nspname AS leaf_schema, c.relname AS leaf_name, pn.nspname AS parent_schema, p.relname AS parent_name,
                   c.relowner AS leaf_owner, p.relowner AS parent_owner
              -- pg_partition_tree omits half-detached leaves: the claims name them
              FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(v_rel) t WHERE t.isleaf
                    UNION
                    SELECT d.leaf FROM retention_detaching d WHERE d.policy = v_pol.name) x
              JOIN pg_catalog.pg_class c ON c.oid = x.relid
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
              LEFT JOIN retention_detaching d ON d.leaf = c.oid
             WHERE c.relkind = 'r'
               -- free, or claimed by this owner, or a claim whose holder died
               AND (d.leaf IS NULL OR d.owner = p_owner OR d.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN d.leaf IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_due AND pt.partdefid = 0 AND _retention_leaf_expired(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
             ORDER BY i.inhdetachpending DESC, c.oid
        LOOP
            -- The runner acts as the policy's owner, on that role's own
            -- tables only (see "As whom" above).
            IF v_c.leaf_owner <> v_pol.owner OR v_c.parent_owner <> v_pol.owner THEN
                RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, 'skip'::text, v_c.leaf_schema, v_c.leaf_name,
                    v_c.parent_schema, v_c.parent_name, NULL::name, NULL::name, NULL::bigint, pg_catalog.format('%s %I.%I is owned by %s, not by the policy''s owner %s: the runner acts only on its tables',
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN 'partition' ELSE 'parent' END,
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_schema ELSE v_c.parent_schema END,
                    CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_name ELSE v_c.parent_name END,
                    pg_catalog.pg_get_userbyid(CASE WHEN v_c.leaf_owner <> v_pol.owner THEN v_c.leaf_owner ELSE v_c.parent_owner END),
                    pg_catalog.pg_get_userbyid(v_pol.owner));
                CONTINUE;
            END IF;
            EXIT WHEN v_n >= p_limit;
            INSERT INTO retention_detaching AS d (leaf, policy, parent, leaf_schema, leaf_name, leaf_owner, owner,
                                                  began_at, expires_at)
            VALUES (v_c.leaf, v_pol.name, v_c.parent, v_c.leaf_schema, v_c.leaf_name, v_c.leaf_owner, p_owner,
                    v_now, v_now + v_pol.lease_ttl)
            ON CONFLICT ON CONSTRAINT retention_detaching_pkey DO UPDATE
               SET owner = excluded.owner, expires_at = excluded.expires_at
             WHERE d.owner = excluded.owner OR d.expires_at <= v_now
            RETURNING d.leaf INTO v_taken;
            -- another runner claimed it since the list was read
            CONTINUE WHEN v_taken IS NULL;
            v_taken := NULL;
            v_n := v_n + 1;
            RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END,
                v_c.leaf_schema, v_c.leaf_name, v_c.parent_schema, v_c.parent_name,
                _retention_detach_runner_name(v_c.leaf)::name, pg_catalog.pg_get_userbyid(v_pol.owner), v_timeout, NULL::text;
        END LOOP;
    END LOOP;
    -- Tables this protocol detached and renamed (earlier calls): dropped
    -- now. Only a table under the runner's name (the proof that its DETACH
    -- and rename succeeded), that the policy's owner still owns, whose owner
    -- the caller can act as, and that nothing outside it depends on (a view
    -- made on it since: DROP would fail every call): such a table is left
    -- in place, its claim closed, a NOTICE names it, as the pass does.
    FOR v_c IN
        SELECT d.leaf, d.policy, d.parent, n.nspname AS leaf_schema, c.relname AS leaf_name, r.owner AS pol_owner,
               (c.relname = _retention_detach_runner_name(d.leaf) AND NOT c.relispartition
                AND c.relowner = r.owner
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_detaching d
          JOIN pg_catalog.pg_class c ON c.oid = d.leaf
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          JOIN retention_policy r ON r.name = d.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (d.owner = p_owner OR d.expires_at <= v_now)
           AND _retention_detach_can_act(v_caller, r.owner)
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
        v_n := v_n + 1;
        RETURN QUERY SELECT v_c.policy, v_c.leaf, v_c.parent, 'drop'::text, v_c.leaf_schema, v_c.leaf_name,
            NULL::name, NULL::name, NULL::name, pg_catalog.pg_get_userbyid(v_c.pol_owner), v_timeout, NULL::text;
    END LOOP;
END
$$;

-- retention_detach_claim: what the Go runner detaches concurrently now (see
-- above), at most 64 leaves; p_owner names the runner (1-200 characters).
-- Typed values only: the runner builds each statement from them. The p_now
-- overload is for tests (S_owner only).
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, p_now, 64) $$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, NULL, 64) $$;

-- retention_detach_done records a claimed leaf from the catalog (see
-- above) and returns its state: 'dropped', 'detached' (out of its parent,
-- not dropped yet: claimed again for DROP), 'pending' (half-detached:
-- claimed again for FINALIZE), 'attached' (released) or 'taken' (a
-- maintenance pass detached it first: released, not counted); and rows,
-- the rows this call counted as deleted (the catalog's estimate,
-- _retention_detach_estimate), NULL when it counted nothing: a leaf is
-- counted once, when it is first found out of its parent under the
-- runner's name. A claim held by another owner, or a caller that cannot act
-- as the policy's owner, changes nothing ('other').
CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, OUT state text, OUT rows bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_d retention_detaching;
    v_pol retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    SELECT * INTO v_d FROM retention_detaching d WHERE d.leaf = p_leaf FOR UPDATE;
    IF FOUND THEN
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_d.policy;
    END IF;
    -- only the claim's holder, able to act as the policy's owner, records it
    IF NOT FOUND OR v_d.owner IS DISTINCT FROM p_owner
       OR NOT _retention_detach_can_act(_retention_detach_caller(), v_pol.owner) THEN
        state := 'other';
        RETURN;
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
      INTO state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF state IN ('dropped', 'detached') AND NOT v_d.counted THEN
        -- a table dropped before it was recorded: its rows are unknown (0);
        -- the runner records a table before it drops it
        rows := coalesce(_retention_detach_estimate(p_leaf), 0);
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_d.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_d.began_at, v_d.expires_at, v_now, v_now, rows, 1, 1, 1, 'detach_concurrently', 'drained');
    END IF;
    IF state = 'taken' AND NOT v_d.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_d.policy, v_d.leaf_schema, v_d.leaf_name;
    END IF;
    IF state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
END
$$;
