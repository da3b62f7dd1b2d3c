-- pgsweep 0.36: retention redesign.
--
-- retention_step_session_state reads the settings from the server (SHOW
-- ALL) instead of a list of PostgreSQL 15's names, so the check holds on
-- the next release.
--
-- A retention unit says what it is (kind: delete, drop, detached) instead
-- of action text plus a sentinel (a detached drop unit was block_lo = -1
-- with the table's oid in block_hi); a step is a typed retention_step
-- (kind: plan, delete, detach, release), returned by _retention_step_claim
-- instead of nine OUT parameters and kept on the pass instead of jsonb.
--
-- DDL (explicit, above the includes):
--   CREATE TYPE retention_unit_kind, retention_step_kind, retention_step;
--   retention_unit: ADD kind, detached_table (existing units converted),
--     DROP action (its CHECK goes with it), ADD CHECK detached_table;
--   retention_pass.step: jsonb -> retention_step (a claim not yet recorded
--     is void, as at every claim).
--   _grant_all (privileges.sql) gives the types to <schema>_owner.
-- Dropped functions:
--   _retention_step_claim(bigint)  its result is a retention_step now
--   _retention_unit_detached(text, bigint)  the sentinel it decoded is gone
--   _retention_step_batch, _retention_step_detaching, _retention_step_rows
--     one caller each: their updates are retention_step_record's own now
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

CREATE TYPE retention_unit_kind AS ENUM ('delete', 'drop', 'detached');
ALTER TABLE retention_unit
    ADD COLUMN kind retention_unit_kind NOT NULL DEFAULT 'delete',
    ADD COLUMN detached_table oid;  -- kind detached: the table a pass detached, until a later pass drops it
UPDATE retention_unit
   SET kind = CASE WHEN block_lo = -1 THEN 'detached' ELSE 'drop' END::retention_unit_kind,
       detached_table = CASE WHEN block_lo = -1 THEN block_hi::oid END,
       block_lo = CASE WHEN block_lo = -1 THEN NULL ELSE block_lo END,
       block_hi = CASE WHEN block_lo = -1 THEN NULL ELSE block_hi END
 WHERE action = 'drop';
ALTER TABLE retention_unit
    DROP COLUMN action,
    ADD CONSTRAINT retention_unit_detached_table CHECK ((kind = 'detached') = (detached_table IS NOT NULL));

CREATE TYPE retention_step_kind AS ENUM ('plan', 'delete', 'detach', 'release');
-- A step, as _retention_step_claim hands it out and retention_pass.step keeps it.
CREATE TYPE retention_step AS (
    kind      retention_step_kind,  -- NULL: nothing to run (more: call again)
    more      boolean,
    strategy  text,                 -- the sweep's
    sweep_id  bigint,               -- the claimed unit (not for plan)
    unit_no   int,
    shard_id  bigint,               -- its shard (a distributed table)
    target    oid,                  -- its leaf (a partitioned table)
    cutoff    timestamptz,          -- never later than now() - older_than
    now       timestamptz,          -- plan: the clock and the sample's percent
    pct       double precision,
    units     int[],                -- detach, release: the units of the step
    oids      oid[],                -- and their leaves (detach) or tables (release)
    premarked boolean               -- detach: recorded as detached before it ran
);
ALTER TABLE retention_pass ALTER COLUMN step TYPE retention_step USING NULL;

DROP FUNCTION _retention_step_claim(bigint);
DROP FUNCTION _retention_unit_detached(text, bigint);
DROP FUNCTION _retention_step_batch(bigint, text, bigint);
DROP FUNCTION _retention_step_detaching(bigint, retention_unit, int[], oid[], text);
DROP FUNCTION _retention_step_rows(bigint, bigint);

-- pgsweep:changed functions/privileges.sql
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
    -- Types of their own (enums, composites; not a table's row type, which
    -- follows its table): owned by S_owner too.
    FOR r IN SELECT t.typname FROM pg_catalog.pg_type t
              WHERE t.typnamespace = v_schema::regnamespace AND t.typelem = 0
                AND (t.typtype = 'e' OR (t.typtype = 'c' AND (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c'))
              ORDER BY t.typname LOOP
        EXECUTE pg_catalog.format('ALTER TYPE %I.%I OWNER TO %I', v_schema, r.typname, v_owner);
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a IN ('p_now', 'p_clock')) AS has_now, p.oid
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- Internals are the owner's, and so is every clock: a name with a
        -- leading underscore in the matrix is refused, a signature that
        -- takes p_now or p_clock (the tests' overloads) is never granted.
        IF pg_catalog.left(r.proname, 1) = '_'
           AND EXISTS (SELECT 1 FROM _routine_grants() g WHERE g.routine = r.proname) THEN
            RAISE EXCEPTION '_grant_all: % is internal (its name starts with an underscore): no role but % may execute it',
                r.sig, v_owner USING ERRCODE = 'insufficient_privilege',
                HINT = 'Give the callers a step routine without the underscore that checks what it is asked (privileges.sql).';
        END IF;
        CONTINUE WHEN r.has_now;
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/retention_register.sql
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
    IF p_table IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got NULL');
    END IF;
    SELECT n.nspname, c.relname, c.relkind, c.relpersistence INTO v_schema, v_table, v_kind, v_persistence
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_table must be an existing table, got oid %s', p_table::oid::text);
    END IF;
    -- Only plain tables: the TID-range walk needs one heap. A partitioned
    -- table's partitions are registered one by one (or dropped when old).
    -- Ordinary or partitioned (retention_partition.sql: every leaf, present
    -- and future), never temporary: a cleaner runs in another session.
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
    v_time_type := CASE v_time.base_type
        WHEN 'timestamptz'::regtype THEN 'timestamptz'
        WHEN 'timestamp'::regtype THEN 'timestamp'
        WHEN 'date'::regtype THEN 'date' END;
    IF v_time_type IS NULL THEN
        PERFORM _retention_invalid('p_time_column must be of type timestamptz, timestamp or date, got %s of type %s',
            quote_ident(p_time_column), v_time.base_type::text);
    END IF;

    -- 0 is allowed: for an expiry column (CAP's ExpiresAt) the cutoff is now.
    -- At most 100 years, so that now() - p_older_than is a valid moment.
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
        DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached';
    END IF;
    INSERT INTO retention_policy AS p (name, table_schema, table_name, time_column, time_type, older_than,
                                       status_column, statuses, batch_size, mode, run_interval,
                                       registered_at, updated_at, owner)
    VALUES (p_name, v_schema, v_table, p_time_column, v_time_type, p_older_than,
            p_status_column, p_statuses, p_batch_size, p_mode, p_interval, v_now, v_now, p_owner)
    ON CONFLICT (name) DO UPDATE
       SET table_schema = excluded.table_schema, table_name = excluded.table_name, owner = excluded.owner,
           time_column = excluded.time_column, time_type = excluded.time_type, older_than = excluded.older_than,
           status_column = excluded.status_column, statuses = excluded.statuses,
           batch_size = excluded.batch_size, mode = excluded.mode, run_interval = excluded.run_interval,
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

CREATE OR REPLACE FUNCTION _retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_table text;
BEGIN
    -- partitions a pass detached and no pass dropped yet stay behind
    FOR v_table IN
        SELECT c.oid::regclass::text FROM retention_unit u JOIN pg_catalog.pg_class c ON c.oid = u.detached_table
         WHERE u.policy = p_name AND u.kind = 'detached'
    LOOP
        RAISE NOTICE 'retention policy %: the detached partition % is left in place (DROP TABLE it)', p_name, v_table;
    END LOOP;
    DELETE FROM retention_policy WHERE name = p_name;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_time_zone_proved(pg_catalog.to_regclass(v_proof), p_name, p_time_zone);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone_proved(p_proof regclass, p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_time_zone', p_name, _retention_proof_role(p_proof, 'retention_set_time_zone'), true);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    v_at := clock_timestamp();
    UPDATE retention_policy SET time_zone = p_time_zone, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached'; -- the open sweep's cutoff was computed in the old zone
END
$$;

CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_filter_proved(pg_catalog.to_regclass(v_proof), p_name, p_column, p_values);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION _retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy := _retention_policy_for_update(p_name);
    v_rel regclass := _retention_table(v_pol.table_schema, v_pol.table_name);
    v_col record;
    v_at timestamptz;
BEGIN
    IF p_column IS NOT NULL THEN
        PERFORM _check_text('p_column', p_column, 63);
        PERFORM _check_size('p_values', cardinality(p_values), 'max_batch');
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        IF NOT _retention_scalar_type(v_col.base_type) THEN
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
    v_at := clock_timestamp();
    UPDATE retention_policy SET filter_column = p_column, filter_values = p_values, updated_at = v_at
     WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached';
END
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_strategy_proved(pg_catalog.to_regclass(v_proof), p_name, p_strategy);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy_proved(p_proof regclass, p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_strategy', p_name, _retention_proof_role(p_proof, 'retention_set_strategy'), true);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET strategy = p_strategy, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND kind <> 'detached';
END
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_set_lease_ttl_proved(pg_catalog.to_regclass(v_proof), p_name, p_ttl);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;
-- pgsweep:end functions/retention_register.sql

-- pgsweep:changed functions/retention_sql.sql
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
        writes := (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r) + pg_catalog.pg_stat_get_xact_tuples_updated(r)
                              + pg_catalog.pg_stat_get_xact_tuples_deleted(r))
                     FROM pg_catalog.unnest(ARRAY['retention_policy'::regclass]) r)::text
                  || ' ' ||
                  (SELECT sum(pg_catalog.pg_stat_get_xact_tuples_inserted(r))
                     FROM pg_catalog.unnest(ARRAY['pg_catalog.pg_class'::regclass, 'pg_catalog.pg_type', 'pg_catalog.pg_proc']) r)::text;
    ELSE
        writes := (SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(p::text, ',' ORDER BY p.name), '')) FROM retention_policy p)
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relnamespace = pg_catalog.pg_my_temp_schema())::text
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_type t WHERE t.typnamespace = pg_catalog.pg_my_temp_schema())::text
                  || ' ' ||
                  (SELECT count(*) FROM pg_catalog.pg_proc f WHERE f.pronamespace = pg_catalog.pg_my_temp_schema())::text;
    END IF;
END
$$;
-- pgsweep:end functions/retention_sql.sql

-- pgsweep:changed functions/retention_partition.sql
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
                      -- the table's own rules and column defaults (a generated
                      -- column reads other columns) go with it, as its own
                      -- constraints do
                      AND NOT (d.classid = 'pg_catalog.pg_rewrite'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite w
                                            WHERE w.oid = d.objid AND w.ev_class = p_table))
                      AND NOT (d.classid = 'pg_catalog.pg_attrdef'::regclass
                               AND EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef a
                                            WHERE a.oid = d.objid AND a.adrelid = p_table)))
$$;
-- pgsweep:end functions/retention_partition.sql

-- pgsweep:changed functions/retention_step.sql
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
    o retention_step;
BEGIN
    o.more := false;
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN o; -- the policy was unregistered during the pass
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;

    -- The budget bounds the pass; a pass always gets its first batch.
    -- A pass whose steps are claimed and never recorded (retention_step_claim
    -- alone, in a loop) still ends: a lease TTL after its deadline.
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
            RETURN o;
        END IF;
        IF v_pass.batches > 0 OR v_pass.planned_sweep IS NOT NULL
           OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass;
            RETURN o;
        END IF;
        -- Plan under the policy row's lock, taken without waiting; a cleaner
        -- that finds it taken polls briefly for the units being planned.
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
        IF EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
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
        o.pct := _retention_sample_pct(v_pol);
        RETURN o;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    -- A distributed table's unit names its shard (retention_shards.sql): a
    -- shard that is gone (split, redistributed) leaves its rows to the next sweep.
    IF v_unit.shard_id IS NOT NULL
       AND (_retention_shard_placement(_retention_table(v_pol.table_schema, v_pol.table_name), v_unit.shard_id)).node IS NULL THEN
        DELETE FROM retention_unit
         WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
        o.more := true;
        RETURN o;
    END IF;
    -- A partitioned policy's unit names its leaf (retention_partition.sql);
    -- a detached unit names the table an earlier step detached
    -- (detached_table): _retention_release_claim checks it.
    IF v_unit.leaf_name IS NOT NULL AND v_unit.kind <> 'detached' THEN
        -- by the catalog, not to_regclass: this runs as <schema>_owner, which
        -- need not have USAGE on the table's schema
        -- still a partition: a table detached since the plan (by a
        -- runner's DETACH ... CONCURRENTLY whose rename failed, by a DBA) is
        -- no longer the policy's table, never swept
        SELECT c.oid INTO v_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r' AND c.relispartition;
        IF v_target IS NULL THEN -- the leaf is gone (dropped or detached by someone else): nothing left to do
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
            o.more := true;
            RETURN o;
        END IF;
        -- Planned as a drop but no longer droppable (re-attached elsewhere,
        -- the policy changed): sweep the whole leaf instead.
        IF v_unit.kind = 'drop'
           AND NOT _retention_leaf_droppable(v_pol, v_target, least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()))) THEN
            UPDATE retention_unit SET kind = 'delete', block_lo = 0, block_hi = NULL
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no
            RETURNING * INTO v_unit;
        END IF;
    END IF;
    o.kind := CASE v_unit.kind WHEN 'detached' THEN 'release' WHEN 'drop' THEN 'detach' ELSE 'delete' END;
    o.more := true;
    o.strategy := v_sweep.strategy;
    o.sweep_id := v_unit.sweep_id;
    o.unit_no := v_unit.unit_no;
    o.shard_id := v_unit.shard_id;
    o.target := v_target;
    -- The cap: a sweep's cutoff is never later than now() - older_than of
    -- the policy as it is now (it may have been planned with a later clock,
    -- or before older_than grew).
    o.cutoff := least(v_sweep.cutoff, _retention_cutoff(v_pol, clock_timestamp()));
    RETURN o;
END
$$;

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
           AND u.kind = 'drop' AND u.deferred_pass IS DISTINCT FROM p_pass
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
           SET kind = CASE WHEN l.detached THEN 'detached' ELSE 'drop' END::retention_unit_kind,
               detached_table = CASE WHEN l.detached THEN l.oid END,
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
                OR (u.kind = 'detached' AND u.deferred_pass IS DISTINCT FROM p_pass))
         ORDER BY u.unit_no
           FOR UPDATE SKIP LOCKED
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    WHERE c.oid = v_unit.detached_table AND c.relkind = 'r' AND NOT c.relispartition
                      AND c.relname = _retention_detached_name(v_unit.detached_table)
                      AND c.relowner = v_owner
                      -- nothing outside it depends on it (a view, a foreign key): DROP would fail
                      AND NOT _retention_depended_on(c.oid)) THEN
            o_units := o_units || v_unit.unit_no;
            o_tables := o_tables || v_unit.detached_table;
        ELSE
            IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = v_unit.detached_table) THEN
                RAISE NOTICE 'retention policy %: the detached partition % (formerly %.%) is left in place',
                    p_unit.policy, v_unit.detached_table::regclass::text, v_unit.leaf_schema, v_unit.leaf_name;
            END IF;
            DELETE FROM retention_unit
             WHERE policy = v_unit.policy AND sweep_id = v_unit.sweep_id AND unit_no = v_unit.unit_no;
        END IF;
    END LOOP;
END
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
    v_sql text;
    v_rel regclass;
BEGIN
    o_more := false;
    IF _retention_pass_check(p_pass) IS NULL THEN
        RETURN;
    END IF;
    UPDATE retention_pass SET step = NULL WHERE id = p_pass; -- a claim not recorded is void
    v := _retention_step_claim(p_pass);
    o_more := v.more;
    IF v.kind IS NULL THEN
        RETURN;
    END IF;
    SELECT r.* INTO v_pol FROM retention_pass s JOIN retention_policy r ON r.name = s.policy WHERE s.id = p_pass;
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name AND u.sweep_id = v.sweep_id AND u.unit_no = v.unit_no;
    o_policy := v_pol.name;
    o_owner := v_pol.owner;
    o_cutoff := v.cutoff;
    o_statuses := v_pol.statuses;
    o_filters := v_pol.filter_values;

    IF v_pol.owner = _owner_role() THEN
        -- A built-in policy: pgsweep's own table, as <schema>_owner, here.
        IF v.kind = 'plan' AND v.pct IS NOT NULL THEN
            v_run := _retention_builtin_exec(o_policy, 'sample', NULL, v.pct, NULL::double precision, o_cutoff);
            PERFORM _retention_plan_from_sample(p_pass, v.now, v.pct, v_run.fraction, v_run.sampled, v_run.times);
        ELSIF v.kind = 'plan' THEN
            PERFORM _retention_plan_from_sample(p_pass, v.now, NULL, NULL, NULL, NULL);
        ELSIF v.kind = 'delete' THEN
            BEGIN
                IF v.strategy = 'tid_range' THEN
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy,
                        format('(%s,0)', v_unit.block_lo)::tid, format('(%s,0)', coalesce(v_unit.block_hi, 4294967295))::tid,
                        o_cutoff);
                ELSE
                    v_run := _retention_builtin_exec(o_policy, 'delete', v.strategy, v_unit.time_lo, v_unit.time_hi, o_cutoff);
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                PERFORM _retention_step_deferred(p_pass, v_unit);
                RETURN;
            END;
            PERFORM _retention_step_done(p_pass, v_unit, v.strategy, v_run.deleted);
        END IF;
        RETURN;
    END IF;

    o_role := v_pol.owner;
    CASE v.kind
    WHEN 'plan' THEN
        IF v.pct IS NULL THEN -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.now, NULL, NULL, NULL, NULL);
            RETURN;
        END IF;
        o_kind := 'sample';
        o_type := 'pg_catalog.float8';
        o_lo := v.pct::text;
        v_sql := _retention_sample_sql(v_pol, v.pct);
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        o_role := coalesce(_retention_run_role(v_pol, v_rel), o_role);
    WHEN 'detach' THEN
        -- every droppable leaf of the parent in one transaction
        -- (retention_partition.sql); droppable: the policy's owner owns
        -- the leaves and the parent, so it is their owner who runs it
        v_b := _retention_detach_claim(p_pass, v_unit, v.target::regclass, o_cutoff);
        IF v_b.o_parent IS NULL THEN -- no longer a partition (a runner's concurrent detach): its own step finds out
            PERFORM _retention_step_detached(p_pass, v_unit, v_b.o_units, v_b.o_leaves, 0, v.strategy, false);
            RETURN;
        END IF;
        o_kind := 'detach';
        o_type := 'pg_catalog.oid[]';
        o_lo := v_b.o_leaves::text;
        o_hi := o_lo;
        v.units := v_b.o_units;
        v.oids := v_b.o_leaves;
        v_sql := _retention_detach_body(v_b.o_parent, v_b.o_leaves);
    WHEN 'release' THEN
        -- drop the tables earlier passes detached; no lock on the parent
        v_b := _retention_release_claim(p_pass, v_unit);
        IF cardinality(v_b.o_tables) = 0 THEN
            RETURN;
        END IF;
        o_kind := 'release';
        o_type := 'pg_catalog.oid[]';
        o_lo := v_b.o_tables::text;
        o_hi := o_lo;
        v.units := v_b.o_units;
        v.oids := v_b.o_tables;
        v_sql := _retention_release_body(v_b.o_tables);
    ELSE
        o_kind := 'delete';
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
                DELETE FROM retention_unit u
                 WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = v_unit.unit_no;
                o_kind := NULL;
                RETURN;
            END IF;
        ELSE
            v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
            o_role := coalesce(_retention_run_role(v_pol, v_rel), o_role);
        END IF;
        IF v.strategy = 'tid_range' THEN
            o_type := 'pg_catalog.tid';
            o_lo := format('(%s,0)', v_unit.block_lo);
            o_hi := format('(%s,0)', coalesce(v_unit.block_hi, 4294967295));
        ELSE
            o_type := 'pg_catalog.timestamptz';
            o_lo := v_unit.time_lo::text;
            o_hi := v_unit.time_hi::text;
        END IF;
        IF v.shard_id IS NULL THEN
            v_sql := _retention_sweep_sql(v_pol, v.strategy, v.target::regclass);
        END IF;
    END CASE;
    o_settings := _retention_exec_settings(CASE WHEN o_kind = 'delete' AND v.shard_id IS NULL THEN v.strategy END)
                  -- a shard's batch passes its lock_timeout on to the worker (_retention_shard_body)
                  || CASE WHEN v.shard_id IS NOT NULL THEN ' SET citus.propagate_set_commands = local' ELSE '' END;
    o_body := CASE WHEN o_kind = 'delete' AND v.shard_id IS NOT NULL
                   THEN _retention_shard_body(v_pol, v.strategy, v.shard_id, o_lo, o_hi, o_cutoff)
                   ELSE _retention_exec_body(v_sql, o_kind, v.target::regclass) END;
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
        RAISE EXCEPTION 'p_phase must be one of done, locked, detaching, got %', quote_literal(p_phase)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_deleted IS NOT NULL THEN PERFORM _check_int('p_deleted', p_deleted, 0, 9223372036854775807); END IF;
    IF p_sampled IS NOT NULL THEN PERFORM _check_int('p_sampled', p_sampled, 0, 9223372036854775807); END IF;
    IF p_fraction IS NOT NULL AND NOT (p_fraction >= 0 AND p_fraction <= 1) THEN -- NaN is neither
        RAISE EXCEPTION 'p_fraction must be NULL or between 0 and 1, got %', p_fraction
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_pass := _retention_pass_check(p_pass);
    v := v_pass.step;
    IF v.kind IS NULL THEN
        RETURN;
    END IF;
    IF p_phase <> 'detaching' THEN
        UPDATE retention_pass SET step = NULL WHERE id = p_pass;
    END IF;
    IF v.kind = 'plan' THEN
        IF p_phase = 'done' THEN
            PERFORM _retention_plan_from_sample(p_pass, v.now, v.pct, p_fraction, p_sampled, p_times);
        END IF;
        RETURN;
    END IF;
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pass.policy AND u.sweep_id = v.sweep_id AND u.unit_no = v.unit_no;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v.kind = 'detach' THEN
        IF p_phase = 'detaching' THEN
            -- Recorded before the step runs, as if every leaf will be
            -- detached: each unit marked detached (left to a later pass,
            -- which drops the table), the pass's batch and partitions
            -- counted. Done before the parent is locked, so that the lock is
            -- held for the detaches and little else; corrected when a leaf
            -- stays (_retention_step_detached), rolled back with the
            -- detaches when the parent's lock is not granted.
            UPDATE retention_unit u SET kind = 'detached', detached_table = l.oid, deferred_pass = p_pass
              FROM unnest(v.units, v.oids) l(unit_no, oid)
             WHERE u.policy = v_unit.policy AND u.sweep_id = v_unit.sweep_id AND u.unit_no = l.unit_no;
            v.premarked := true;
            UPDATE retention_pass
               SET batches = batches + 1, partitions_dropped = partitions_dropped + cardinality(v.oids),
                   last_batch_at = clock_timestamp(), strategy = v.strategy, step = v
             WHERE id = p_pass;
        ELSIF p_phase = 'locked' THEN
            -- the parent (or the default partition) stayed locked past
            -- retention_lock_timeout, or a session that holds the parent
            -- waited for a leaf this step held: nothing was detached (the
            -- premark rolled back with it), a later pass retries
            PERFORM _retention_step_detached(p_pass, v_unit, v.units, v.oids, 0, v.strategy, false);
        ELSIF p_sampled = cardinality(v.oids) AND v.premarked THEN
            UPDATE retention_pass SET rows_deleted = rows_deleted + v_deleted WHERE id = p_pass;
        ELSE -- a leaf was in use and stays: the record follows the catalog
            PERFORM _retention_step_detached(p_pass, v_unit, v.units, v.oids, v_deleted, v.strategy,
                                             coalesce(v.premarked, false));
        END IF;
    ELSIF v.kind = 'release' THEN
        PERFORM _retention_step_released(p_pass, v_unit, v.units, v.oids);
    ELSIF p_phase = 'locked' THEN
        -- A row of the unit stayed locked past retention_lock_timeout: the
        -- batch rolled back whole; a later pass takes the unit.
        PERFORM _retention_step_deferred(p_pass, v_unit);
    -- A shard's batch reads at most batch_size rows of its unit: one that
    -- read that many and deleted some leaves the unit open for the next
    -- batch (retention_shards.sql).
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
-- pgsweep:end functions/retention_step.sql

-- pgsweep:changed functions/retention_views.sql
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz)
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
            OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.kind = 'detached')
            OR (lp.outcome = 'running' AND NOT EXISTS (
                    SELECT 1 FROM pg_catalog.pg_stat_activity a
                     WHERE a.pid = lp.pid AND (a.backend_start IS NULL OR a.backend_start = lp.backend_start))))
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:changed functions/retention_detach.sql
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
-- pgsweep:end functions/retention_detach.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
