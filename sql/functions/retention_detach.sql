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
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
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
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
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
