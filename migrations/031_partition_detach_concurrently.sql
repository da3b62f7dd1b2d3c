-- pgsweep 0.31: the Go runner removes expired partitions with DETACH
-- PARTITION ... CONCURRENTLY.
--
-- A pass's plain DETACH holds an ACCESS EXCLUSIVE lock on the parent for a
-- moment, and the inserts of that moment wait for it. The runner now claims
-- the expired leaves of parents without a DEFAULT partition, detaches them
-- CONCURRENTLY (no insert or query waits) and drops them, before each
-- maintenance pass; passes skip the leaves it claimed or left half-detached
-- (retention_detach.sql). pg_cron-only installs keep the plain DETACH.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- The runner's claims on leaves (retention_detach.sql): one row per leaf
-- being detached concurrently, until it is dropped or released.
CREATE TABLE retention_detaching (
    leaf        oid PRIMARY KEY,
    policy      text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    parent      oid NOT NULL,
    leaf_schema text NOT NULL,
    leaf_name   text NOT NULL,
    leaf_owner  oid NOT NULL,              -- who may record it (retention_detach_done)
    owner       text NOT NULL,             -- the runner holding the claim
    began_at    timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    counted     boolean NOT NULL DEFAULT false -- its rows are in a retention_pass
);

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
--      (or FINALIZE) and renames the detached table pgsweep_detached_<oid>
--      (its name is free again at once), or the DROP, each statement in its
--      own transaction.
--   3. retention_detach_done(owner, leaf, rows) records what the catalog
--      says, whatever failed in between: a leaf out of its parent (detached,
--      dropped or not) counts its rows as deleted, once, in a retention_pass
--      of strategy 'detach_concurrently' (which retention_due does not count
--      as the policy's pass); a leaf still half-detached stays claimed for
--      FINALIZE; a detached table stays claimed for DROP; a leaf still
--      attached (lock_timeout, no ownership) is released, and the pass's
--      plain DETACH or a later claim takes it.
-- The pass plans nothing for a leaf that is claimed or half-detached
-- (retention_partition.sql); a leaf the pass detached first (its unit names
-- the oid) makes the runner's DETACH fail, and done releases the claim
-- without counting it.

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
    SELECT pg_catalog.format('ALTER TABLE %I.%I RENAME TO %I', n.nspname, c.relname, _retention_detached_name(p_leaf))
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
        SELECT r AS pol, r.name IN (SELECT retention_due(p_now)) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT retention_due(p_now))
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
            SELECT c.oid AS leaf, i.inhparent AS parent, i.inhdetachpending AS pending, d.leaf IS NOT NULL AS claimed,
                   c.relowner, p.relowner AS parent_owner
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
    -- Tables this protocol detached and could not drop yet (a reader held
    -- them past lock_timeout, a runner died between the two).
    FOR v_c IN
        SELECT d.leaf, d.policy, d.parent FROM retention_detaching d JOIN pg_catalog.pg_class c ON c.oid = d.leaf
         WHERE NOT c.relispartition AND c.relkind = 'r'
           AND c.relname IN (d.leaf_name, _retention_detached_name(d.leaf)) AND c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = d.leaf_schema)
           AND (d.owner = p_owner OR d.expires_at <= v_now)
           AND pg_catalog.pg_has_role(v_caller, c.relowner, 'USAGE')
         ORDER BY d.leaf
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        EXIT WHEN v_n >= p_limit;
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_c.policy;
        UPDATE retention_detaching SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl WHERE retention_detaching.leaf = v_c.leaf;
        v_s := _retention_detach_statements(v_c.leaf, false, false);
        v_n := v_n + 1;
        policy := v_c.policy;
        leaf := v_c.leaf;
        parent := v_c.parent;
        action := 'drop';
        count_sql := NULL;
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
                -- detached and renamed by a maintenance pass first (its
                -- pgsweep_detached_<oid>): the pass counted it and drops it
                WHEN c.relname NOT IN (v_d.leaf_name, _retention_detached_name(p_leaf))
                     OR n.nspname IS DISTINCT FROM v_d.leaf_schema
                     OR EXISTS (SELECT 1 FROM retention_unit u
                                 WHERE u.action = 'drop' AND u.block_lo = -1 AND u.block_hi = p_leaf::bigint) THEN 'taken'
                ELSE 'detached' END
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
    IF v_state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR v_state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
    RETURN v_state;
END
$$;
-- pgsweep:end functions/retention_detach.sql

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
        -- dropped the leaf since it was claimed (undefined_table), or left
        -- it half-detached (object_not_in_prerequisite_state: a plain DETACH
        -- is refused): the leaf is skipped, its unit deferred.
        v_counts := v_counts || format('BEGIN EXECUTE %L INTO c; EXCEPTION WHEN undefined_table THEN c := 0; END; r[%s] := c; ',
                                       v_sql.count_sql, v_leaf.ord);
        v_prelocks := v_prelocks || format(
            'BEGIN EXECUTE %L; ok[%s] := true; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; ',
            format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE', v_leaf.name), v_leaf.ord, v_leaf.ord);
        v_steps := v_steps || format(
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN object_not_in_prerequisite_state THEN ok[%s] := false; END; END IF; '
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

-- pgsweep:include functions/retention_views.sql
-- Retention: what a DBA looks at, and what maintain() asks.

-- retention_passes: the pass history. A pass still marked running whose
-- session is gone (killed, crashed) shows as abandoned.
CREATE OR REPLACE VIEW retention_passes AS
SELECT p.id,
       p.policy,
       p.owner,
       p.mode,
       p.strategy,
       CASE WHEN p.outcome = 'running' AND NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = p.pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
            THEN 'abandoned' ELSE p.outcome END AS outcome,
       p.started_at,
       p.finished_at,
       p.last_batch_at,
       coalesce(p.finished_at, p.last_batch_at, p.started_at) - p.started_at AS elapsed,
       p.rows_deleted,
       p.batches,
       p.units,
       p.lease_token,
       p.planned_sweep,
       p.error,
       p.deferred,
       p.partitions_dropped
  FROM retention_pass p;

-- retention_policies: every policy with its last pass.
CREATE OR REPLACE VIEW retention_policies AS
SELECT r.name,
       format('%I.%I', r.table_schema, r.table_name) AS table_name,
       r.time_column,
       r.time_type,
       r.older_than,
       r.status_column,
       r.statuses,
       r.filter_column,
       r.filter_values,
       r.batch_size,
       r.mode,
       r.run_interval,
       coalesce(r.time_zone, current_setting('TimeZone')) AS time_zone,
       r.lease_ttl,
       r.strategy,
       (SELECT count(*) FROM retention_unit u WHERE u.policy = r.name) AS open_units,
       lp.started_at AS last_started_at,
       lp.finished_at AS last_finished_at,
       lp.outcome AS last_outcome,
       lp.owner AS last_owner,
       lp.strategy AS last_strategy,
       lp.rows_deleted AS last_rows_deleted,
       lp.batches AS last_batches,
       lp.elapsed AS last_elapsed,
       lp.error AS last_error,
       r.owner -- every run deletes as this role: maintenance needs GRANT <owner> TO <its role>
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the policies that are due, oldest first: what
-- maintain() runs. A policy is due when its interval has passed since its
-- last pass began (or it never ran), and at once when its last pass left
-- work behind: it stopped on its budget ('budget'), lost its lease
-- ('lease_lost'), skipped units a transaction held locked ('deferred'), or
-- its session died mid-pass (still 'running' with the session gone:
-- abandoned, e.g. a runner stopped by SIGTERM or kill -9). A pass that ended
-- in an error waits for the interval (a persistent error would otherwise
-- repeat every pass). Policies that keep rows forever are never due.
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz DEFAULT NULL)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    PERFORM _check_now('p_now', p_now);
    RETURN QUERY
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT p.started_at AS at, p.outcome, p.pid, p.backend_start
                           FROM retention_pass p
                          -- a runner's concurrent detach (retention_detach.sql) is not the policy's pass
                          WHERE p.policy = r.name AND p.strategy IS DISTINCT FROM 'detach_concurrently'
                          ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred')
            -- partitions a pass detached: the next pass drops them (retention_partition.sql)
            OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.action = 'drop' AND u.block_lo = -1)
            OR (lp.outcome = 'running' AND NOT EXISTS (
                    SELECT 1 FROM pg_catalog.pg_stat_activity a
                     WHERE a.pid = lp.pid AND (a.backend_start IS NULL OR a.backend_start = lp.backend_start))))
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:include functions/privileges.sql
-- The role model, in one place (docs/security.md).
--
-- Installing into schema S uses four NOLOGIN roles (created by the
-- migration when missing, see _ensure_roles):
--   S_owner    owns the schema and every object in it; never a superuser
--   S_admin    queues, settings, retention policies, cron, maintenance (and S_monitor)
--   S_worker   send, claim, renew, complete, fail, release, leases
--   S_monitor  the stats views; never payloads
-- DBAs grant one of them to an application's own login role. PUBLIC gets
-- nothing: not the schema, not a table, not a function.
--
-- Every function is SECURITY DEFINER (runs as S_owner, search_path pinned
-- with pg_temp last) except the few that must run as their caller
-- (_invoker_routines): the retention_register wrappers, which pass the
-- caller's role on as the policy owner, the retention steps that delete as
-- the policy's owner, and the pg_cron functions (the job runs as the role
-- that scheduled it, which needs pg_cron's own grants). Worker and monitor roles hold no privilege on any
-- table, so a fence cannot be bypassed with a direct UPDATE, and payloads
-- are reachable only through the verbs. Procedures (maintain, retention_run)
-- cannot be SECURITY DEFINER (they commit): they run as their caller and
-- call only schema-qualified functions.
--
-- Every migration ends with SELECT _grant_all(): ownership, security and
-- grants are re-applied from this file, so an upgraded install's ACLs equal
-- a fresh one's.

-- _role_names: the four role names of this install.
CREATE OR REPLACE FUNCTION _role_names(OUT owner_role text, OUT admin_role text, OUT worker_role text, OUT monitor_role text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.current_schema() || '_owner', pg_catalog.current_schema() || '_admin',
           pg_catalog.current_schema() || '_worker', pg_catalog.current_schema() || '_monitor'
$$;

-- _owner_role: S_owner as a regrole (built-in retention policies belong to it).
CREATE OR REPLACE FUNCTION _owner_role()
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT (pg_catalog.current_schema() || '_owner')::pg_catalog.regrole $$;

-- Routines that run as their caller; every other function is SECURITY DEFINER.
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY['retention_register', '_retention_resolve', '_retention_step', '_retention_as_owner', '_grant_all',
                 -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
                 'cron_schedule', 'cron_unschedule', 'cron_job', '_cron_available', '_cron_require',
                 -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
                 '_maintain_ret_traffic']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so _grant_all leaves out a
-- signature that takes p_now when the routine has one without it).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        '_queue_get', -- the Worker reads the queue's lease_default and max_attempts (no payloads)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker functions (retention_register's wrappers, the
        -- retention steps, cron) call: argument checks, pure
        '_check_text', '_check_int', '_check_interval', '_interval_text', '_retention_invalid',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_owner_role',
        -- a partitioned policy's drop units (retention_partition.sql)
        '_retention_detach_claim', '_retention_step_detaching', '_retention_step_rows', '_retention_step_detached', '_retention_release_claim', '_retention_step_released',
        '_retention_detach_body', '_retention_release_body',
        '_retention_step_batch', '_retention_shard_body', -- a shard's batch (retention_shards.sql)
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_retention_run', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_traffic', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
        -- the session check of _retention_as_owner (retention_sql.sql)
        '_retention_session_state', '_retention_session_restore',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'lane_stats', 'version',
        '_lease_rows', '_setting_rows', '_queue_rows']) r -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
$$;

-- The views each role may read (all run as S_owner, their owner).
CREATE OR REPLACE FUNCTION _view_grants(OUT role_kind text, OUT view_name text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'monitor', v FROM pg_catalog.unnest(ARRAY[
        'queue_stats', 'leases', 'retention_policies', 'retention_passes', 'maintenance_passes',
        'maintenance_runs', 'settings']) v
$$;

-- _grant_all applies the model to everything in the schema. It runs as the
-- migrating role (which must be S_owner's member or a superuser), at the end
-- of every migration; it is idempotent.
CREATE OR REPLACE FUNCTION _grant_all()
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles record := _role_names();
    v_owner text := v_roles.owner_role;
    r record;
    v_role text;
BEGIN
    IF (SELECT ro.rolsuper FROM pg_catalog.pg_roles ro WHERE ro.rolname = v_owner) THEN
        RAISE EXCEPTION 'role % is a superuser: pgsweep''s objects must not be owned by one', v_owner
            USING ERRCODE = 'insufficient_privilege', HINT = pg_catalog.format('ALTER ROLE %I NOSUPERUSER', v_owner);
    END IF;
    EXECUTE pg_catalog.format('ALTER SCHEMA %I OWNER TO %I', v_schema, v_owner);
    EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', v_schema);
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %I, %I, %I', v_schema,
                              v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    EXECUTE pg_catalog.format('GRANT %I TO %I', v_roles.monitor_role, v_roles.admin_role);

    -- Relations: owned by S_owner, nobody else holds a privilege. A sequence
    -- owned by a column follows its table.
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                                   AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('ALTER %s %I.%I OWNER TO %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
            v_schema, r.relname, v_owner);
    END LOOP;
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %I.%I FROM PUBLIC, %I, %I, %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, v_schema, r.relname,
            v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    END LOOP;
    FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, r.view_name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END IF;
    END LOOP;

    -- Routines: owned by S_owner, SECURITY DEFINER unless listed as
    -- invoker, executable by nobody but the roles the matrix names.
    FOR r IN SELECT p.proname, p.prokind, p.pronargs,
                    pg_catalog.format('%I.%I(%s)', v_schema, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)) AS sig,
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now, p.oid
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone. A routine whose every
        -- signature takes p_now (the maintenance steps, retention_due,
        -- queue_recover, _queue_stats: p_now has a default) is granted as the
        -- matrix says, or no role but S_owner could call it at all.
        CONTINUE WHEN r.has_now AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_proc q
             WHERE q.pronamespace = v_schema::regnamespace AND q.proname = r.proname AND q.oid <> r.oid
               AND NOT 'p_now' = ANY (coalesce(q.proargnames, '{}')));
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
