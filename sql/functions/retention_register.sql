-- Retention: registering policies and their options. Every argument is
-- checked before anything changes (22023). Registering the same definition
-- again changes only updated_at; a changed one drops the open sweep.

CREATE OR REPLACE FUNCTION _retention_invalid(p_message text, VARIADIC p_args text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = format(p_message, VARIADIC p_args), ERRCODE = 'invalid_parameter_value';
END
$$;

-- Ownership: a policy belongs to the role that registers it, every run deletes
-- as that role, and only a member of it changes, unregisters or re-registers
-- it (42501); built-in policies ('pgsweep.' names) are pgsweep's. A SECURITY
-- DEFINER function cannot see its caller, so each entry point runs as its
-- caller, creates an empty temporary table (retention_owner_proof), which
-- PostgreSQL records as owned by the calling role, calls its SECURITY DEFINER
-- half (retention_*_proved), which takes the role from that owner
-- (_retention_proof_role), and drops the table (retention_owner_proof_drop).
-- Code running as another role in the session can prove only its own role.

-- retention_owner_proof: a new proof of the calling role, its qualified name.
CREATE OR REPLACE FUNCTION retention_owner_proof()
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE 'CREATE TEMPORARY TABLE ' || v_proof || ' ()';
    RETURN v_proof;
END
$$;

-- retention_owner_proof_drop drops the proof p_proof once p_done, the proved
-- call's outcome, is known. Every entry point is one statement:
--   SELECT r FROM retention_owner_proof() p, retention_X_proved(p::regclass, ...) r,
--                 retention_owner_proof_drop(p, r IS NULL)
-- (r depends on p and the drop on r, so they run in that order).
CREATE OR REPLACE FUNCTION retention_owner_proof_drop(p_proof text, p_done boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_proof IS NULL OR p_proof !~ '^pg_temp\.pgsweep_owner_proof_[0-9a-f]{32}$' OR NOT EXISTS (
         SELECT FROM pg_catalog.pg_class c
          WHERE c.oid = pg_catalog.to_regclass(p_proof) AND c.relnamespace = pg_catalog.pg_my_temp_schema()) THEN
        RAISE EXCEPTION 'p_proof must name one of this session''s proofs (retention_owner_proof), got %',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(p_proof, 100)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE 'DROP TABLE ' || p_proof;
END
$$;

-- _retention_proof_role: the role that created this session's proof p_proof (42501: none).
CREATE OR REPLACE FUNCTION _retention_proof_role(p_proof regclass, p_verb text)
RETURNS regrole
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole;
BEGIN
    SELECT c.relowner::regrole INTO v_owner
      FROM pg_catalog.pg_class c
     WHERE c.oid = p_proof AND c.relnamespace = pg_catalog.pg_my_temp_schema() AND c.relpersistence = 't'
       AND c.relname LIKE 'pgsweep\_owner\_proof\_%';
    IF v_owner IS NULL THEN
        RAISE EXCEPTION '%: no proof of the calling role (call %, not %_proved)', p_verb, p_verb, p_verb
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN v_owner;
END
$$;

-- _retention_policy_owned: the policy p_name locked for a change by p_role,
-- NULL when there is none (p_must: 22023); 42501 for a built-in's name or a
-- policy of a role p_role is not a member of.
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

-- retention_register: the caller's proof, then retention_register_proved.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_register_proved(p::regclass, p_name, p_table, p_time_column, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_interval) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

-- retention_register_proved: retention_register's SECURITY DEFINER half.
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

-- _retention_policy_put validates and stores a policy for p_owner.
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

-- retention_table_name_check: the name rule on a table name, for retention_resolve_table.
CREATE OR REPLACE FUNCTION retention_table_name_check(p_table text)
RETURNS void
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT _check_text('p_table', p_table, 300) $$;

-- retention_resolve_table: p_table on the caller's search_path, resolved as the caller (22023: none).
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

-- The same, for a table given by name (no search_path pinned: every name is qualified).
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
AS $$
    SELECT {{ .schema | default "pgsweep" }}.retention_register(p_name,
        {{ .schema | default "pgsweep" }}.retention_resolve_table(p_table, pg_catalog.current_setting('search_path')),
        p_time_column, p_older_than, p_status_column, p_statuses, p_batch_size, p_mode, p_interval)
$$;

-- retention_unregister removes a policy; false when there was none.
CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_unregister_proved(p::regclass, p_name) r,
           retention_owner_proof_drop(p, r IS NULL)
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

-- _retention_unregister removes a policy, whoever owns it.
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

-- The time zone a timestamp or date column is read in (NULL: TimeZone at run time).
CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_time_zone_proved(p::regclass, p_name, p_time_zone) r,
           retention_owner_proof_drop(p, r IS NULL)
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

-- A filter: only rows whose p_column is one of p_values go (NULL: none).
CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_filter_proved(p::regclass, p_name, p_column, p_values) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_filter_proved(p_proof regclass, p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT _retention_policy_owned('retention_set_filter', p_name, _retention_proof_role(p_proof, 'retention_set_filter'), true);
    SELECT _retention_set_filter(p_name, p_column, p_values);
$$;

-- _retention_set_filter sets a policy's filter, whoever owns it; the values
-- are checked against the column's base type (no domain CHECK runs).
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

-- _retention_policy_changed records a change; p_replan drops the open sweep
-- but its detached and runner-held units (tables still to drop).
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

-- How a sweep walks the table: 'auto', 'tid_range' or 'keyset'.
CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_strategy_proved(p::regclass, p_name, p_strategy) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy_proved(p_proof regclass, p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_strategy', p_name, _retention_proof_role(p_proof, 'retention_set_strategy'), true);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    UPDATE retention_policy SET strategy = p_strategy WHERE name = p_name;
    PERFORM _retention_policy_changed(p_name, true);
END
$$;

-- The TTL of an exclusive policy's lease retention:<name>.
CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_lease_ttl_proved(p::regclass, p_name, p_ttl) r,
           retention_owner_proof_drop(p, r IS NULL)
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
