-- pgsweep 0.17: retention of partitioned tables (retention_partition.sql).
--
-- retention_register accepts a partitioned table; a sweep plans units per
-- leaf, and a RANGE leaf on the time column wholly older than the cutoff is
-- detached and dropped (under retention_lock_timeout) instead of deleted row
-- by row.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

ALTER TABLE retention_unit
    ADD COLUMN leaf_schema text,
    ADD COLUMN leaf_name text,
    ADD COLUMN action text NOT NULL DEFAULT 'delete' CHECK (action IN ('delete', 'drop'));
ALTER TABLE retention_pass ADD COLUMN partitions_dropped int NOT NULL DEFAULT 0;
-- These take (or return) the unit's leaf now.
DROP FUNCTION _retention_as_owner(retention_policy, text, text, anyelement, anyelement, timestamptz);
DROP FUNCTION _retention_step_claim(bigint);
DROP FUNCTION _retention_exec_body(text, text);
DROP FUNCTION _retention_sweep_sql(retention_policy, text);
-- The policy owner comes from a proof the caller creates, never from an
-- argument (retention_register.sql).
DROP FUNCTION _retention_register(text, regclass, text, interval, text, text[], int, text, interval, regrole, boolean);
DROP VIEW retention_policies;
DROP VIEW retention_passes;


-- pgsweep:include functions/retention_check.sql
-- Retention: catalog look-ups shared by registration and by every batch.
--
-- Policies store names; every use resolves them again in the catalog, so a
-- dropped or retyped column is an error at the next batch, never a wrong
-- DELETE. Names reach SQL only through %I / regclass quoting.

-- _retention_column returns a column's type, resolved through domains, as a
-- qualified type name safe to splice into SQL ("pg_catalog"."varchar"), and its
-- type category; NULL when the table has no such (live, user) column.
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
    IF v_typ IS NULL THEN
        RETURN;
    END IF;
    -- The declared type (a domain keeps its checks) for casts ...
    SELECT format('%I.%I', n.nspname, t.typname) INTO type_sql
      FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
     WHERE t.oid = v_typ;
    -- ... and the base type to decide what kind of column it is.
    WHILE (SELECT t.typtype FROM pg_catalog.pg_type t WHERE t.oid = v_typ) = 'd' LOOP
        SELECT t.typbasetype INTO v_typ FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
    END LOOP;
    base_type := v_typ::regtype;
    SELECT t.typcategory INTO category FROM pg_catalog.pg_type t WHERE t.oid = v_typ;
END
$$;

-- _retention_table resolves a policy's table by its stored names.
CREATE OR REPLACE FUNCTION _retention_table(p_schema text, p_table text)
RETURNS regclass
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
BEGIN
    SELECT c.oid INTO v_rel
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = p_schema AND c.relname = p_table AND c.relkind IN ('r', 'p');
    IF v_rel IS NULL THEN
        RAISE EXCEPTION 'retention: table %.% no longer exists', quote_ident(p_schema), quote_ident(p_table)
            USING ERRCODE = 'undefined_table';
    END IF;
    RETURN v_rel;
END
$$;

-- _retention_index names a btree index that can drive the keyset walk: its
-- first key column is the time column, or every key column before the time
-- column is one the policy pins to a list of values (status, filter). NULL
-- when there is none: then only a walk over the whole heap can find the rows.
CREATE OR REPLACE FUNCTION _retention_index(p_table regclass, p_time_column text, p_status_column text,
    p_filter_column text)
RETURNS regclass
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT i.indexrelid::regclass
      FROM pg_catalog.pg_index i
      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
      JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
      CROSS JOIN LATERAL (
          SELECT array_agg(a.attname ORDER BY k.ord) AS cols
            FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
            LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
           WHERE k.ord <= i.indnkeyatts) kc
     WHERE i.indrelid = p_table AND i.indisvalid AND i.indpred IS NULL
       AND p_time_column = ANY (kc.cols)
       AND (SELECT bool_and(coalesce(c = p_status_column, false) OR coalesce(c = p_filter_column, false))
              FROM unnest(kc.cols[1:array_position(kc.cols, p_time_column::name) - 1]) c) IS NOT FALSE
     ORDER BY array_position(kc.cols, p_time_column::name), i.indexrelid
     LIMIT 1
$$;
-- pgsweep:end functions/retention_check.sql

-- pgsweep:include functions/retention_builtin.sql
-- Built-in retention of the rows pgsweep itself keeps: per queue, processed
-- inbox records (message_processed, by processed_at) after
-- queue.processed_retention, and dead letters (message_dead, by dead_at)
-- after queue.dead_retention. NULL periods keep rows forever.
--
-- Each is an ordinary retention policy restricted to one queue by the policy
-- filter (queue = '<queue>'), named 'pgsweep.processed:<queue>' and
-- 'pgsweep.dead:<queue>', so the retention engine's guarantees, leases and
-- history apply unchanged and a DBA sees them in retention_policies.
-- Undelivered messages (table message) are never under any policy: an outbox
-- row leaves only by being completed.
--
-- maintain() calls retention_builtin_sync() at the start of every retention
-- part, so a queue created or reconfigured by SQL is covered on the next
-- pass; a DBA driving retention_run by hand calls it once after such changes.
--
-- Policy names have at most 190 characters, so queue_create accepts names of
-- at most 172 (18 for 'pgsweep.processed:'). A longer queue made by an older
-- version gets no policy whose name would not fit -- a WARNING names it and
-- says to move its messages to a shorter queue -- and every other queue
-- keeps its retention.
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
    v_pol retention_policy;
    v_name text;
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
        SELECT * INTO v_pol FROM retention_policy WHERE name = v_want.name;
        IF FOUND AND v_pol.older_than IS NOT DISTINCT FROM v_want.period
           AND v_pol.filter_column = 'queue' AND v_pol.filter_values = ARRAY[v_want.queue] THEN
            CONTINUE;
        END IF;
        -- register and filter in one transaction: no pass ever sees the
        -- policy without its queue filter.
        PERFORM _retention_policy_put(v_want.name, v_want.tbl, v_want.col, v_want.period, NULL, NULL,
                                    1000, 'exclusive', interval '1 minute', _owner_role(), true);
        PERFORM retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;

    FOR v_name IN
        SELECT p.name FROM retention_policy p
         WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
            OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name))
    LOOP
        PERFORM retention_unregister(v_name);
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
-- pgsweep:end functions/retention_builtin.sql

-- pgsweep:include functions/retention_register.sql
-- Retention: registering policies and their options.
--
-- Every argument is checked before anything changes (SQLSTATE 22023 naming the
-- argument). Re-registering a policy with the same definition changes nothing
-- but updated_at, so every replica may register its tables at start-up; a
-- changed definition drops the open sweep (its units were planned for the old
-- definition) and the next run plans a new one.

CREATE OR REPLACE FUNCTION _retention_invalid(p_message text, VARIADIC p_args text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = format(p_message, VARIADIC p_args), ERRCODE = 'invalid_parameter_value';
END
$$;

-- Ownership: a policy belongs to the role that registers it, and every
-- run deletes as that role (retention_sql.sql, _retention_as_owner).
-- A SECURITY DEFINER function cannot see the role that called it, and a
-- role name passed in could be anyone's; so the caller proves who it is:
-- retention_register runs as its caller and creates an empty temporary
-- table (pg_temp.pgsweep_owner_proof_<random>), which only the calling role
-- can have created and which PostgreSQL records as owned by it;
-- _retention_register (SECURITY DEFINER) takes the policy's owner from that
-- table's owner, accepting only such a table of this session; then the
-- wrapper drops it (an error in between rolls its creation back: a proof
-- exists only while its own registration runs, and no other code runs
-- then). Code running as another role
-- in the same session (a SECURITY DEFINER trigger of a hostile admin, say)
-- can prove only its own role, never the session's. The owner needs SELECT
-- and DELETE on the table (42501 otherwise); pgsweep's own tables cannot be
-- registered (the built-in policies cover them). Registering a name again
-- re-points it, under the new caller's name and rights.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_oid regclass;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    v_oid := pg_catalog.to_regclass(v_proof);
    PERFORM _retention_register(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                p_batch_size, p_mode, p_interval, v_oid);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

-- _retention_register takes the owner from the proof table (see above).
CREATE OR REPLACE FUNCTION _retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval, p_proof regclass)
RETURNS void
LANGUAGE plpgsql
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
        RAISE EXCEPTION 'retention_register: no proof of the calling role (call retention_register, not _retention_register)'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM _retention_policy_put(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                  p_batch_size, p_mode, p_interval, v_owner, false);
END
$$;

-- _retention_policy_put validates and stores a policy for p_owner. Only
-- SECURITY DEFINER code calls it (_retention_register, the built-in sync):
-- nobody else may execute it.
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
    IF p_mode IS NULL OR p_mode NOT IN ('exclusive', 'parallel') THEN
        PERFORM _retention_invalid('p_mode must be ''exclusive'' or ''parallel'', got %s', coalesce(quote_literal(p_mode), 'NULL'));
    END IF;
    IF p_interval IS NULL OR p_interval <= interval '0' THEN
        PERFORM _retention_invalid('p_interval must be greater than 0, got %s', _interval_text(p_interval));
    END IF;

    -- Checks done: from here on the call succeeds.
    SELECT * INTO v_old FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF FOUND AND (v_old.table_schema, v_old.table_name, v_old.time_column, v_old.time_type, v_old.older_than,
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode, v_old.owner)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_owner) THEN
        DELETE FROM retention_unit WHERE policy = p_name;
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

-- _retention_resolve resolves a table name on the given search_path (the
-- caller's), or raises 22023 naming p_table.
CREATE OR REPLACE FUNCTION _retention_resolve(p_name text, p_table text, p_search_path text)
RETURNS regclass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
    v_pinned text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    PERFORM _check_text('p_table', p_table, 300);
    BEGIN
        PERFORM pg_catalog.set_config('search_path', coalesce(p_search_path, ''), true);
        v_rel := pg_catalog.to_regclass(p_table);
        PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
        v_rel := NULL;
    END;
    PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    IF v_rel IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got %s', quote_literal(p_table));
    END IF;
    RETURN v_rel;
END
$$;

-- The same, for a table given by name, resolved on the CALLER's
-- search_path like every PostgreSQL command (retention_register('x',
-- 'orders_archive', ...) finds public.orders_archive). This overload pins no
-- search_path so that it can read the caller's; its body is one call with
-- every name schema-qualified, and the lookup itself runs in
-- _retention_resolve, which pins its own path and only resolves the name. A
-- name that resolves to no table is a 22023 naming p_table. A string literal
-- argument resolves to this overload.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
AS $$
    SELECT {{ .schema | default "pgsweep" }}.retention_register(p_name,
        {{ .schema | default "pgsweep" }}._retention_resolve(p_name, p_table, pg_catalog.current_setting('search_path')),
        p_time_column, p_older_than, p_status_column, p_statuses, p_batch_size, p_mode, p_interval)
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    DELETE FROM retention_policy WHERE name = p_name;
    RETURN FOUND;
END
$$;

-- _retention_policy_for_update loads a policy for a setter, or raises 22023.
CREATE OR REPLACE FUNCTION _retention_policy_for_update(p_name text)
RETURNS retention_policy
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    PERFORM _check_text('p_name', p_name);
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    RETURN v_pol;
END
$$;

-- The time zone in which a timestamp-without-time-zone (or date) column is
-- read: CAP writes local times. NULL: the database's TimeZone at run time.
-- A zone whose UTC offset ever exceeds 15 hours ('UTC-99') is refused.
CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    v_at := clock_timestamp();
    UPDATE retention_policy SET time_zone = p_time_zone, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name; -- the open sweep's cutoff was computed in the old zone
END
$$;

-- An extra fixed filter: only rows whose p_column is one of p_values are
-- deleted. pgsweep's built-in policies use it for per-queue periods
-- (queue = 'orders'). p_column NULL removes the filter.
CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
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
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        IF p_values IS NULL OR cardinality(p_values) = 0 OR array_position(p_values, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_values must be a non-empty array without NULLs, got %s', coalesce(p_values::text, 'NULL'));
        END IF;
        -- Values are cast to the column's type in every batch: fail now, not then.
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
    DELETE FROM retention_unit WHERE policy = p_name;
END
$$;

-- How a sweep walks the table: 'auto' (the default) picks per sweep, see
-- _retention_plan; 'tid_range' or 'keyset' force one.
CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET strategy = p_strategy, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name;
END
$$;

-- The TTL of an exclusive policy's lease retention:<name>: how long another
-- cleaner waits after a crash. A live cleaner renews it every third of it.
CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    v_at := clock_timestamp();
    UPDATE retention_policy SET lease_ttl = p_ttl, updated_at = v_at WHERE name = p_name;
END
$$;
-- pgsweep:end functions/retention_register.sql

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
-- Locks: DETACH and DROP take an ACCESS EXCLUSIVE lock on the parent. The
-- drop runs with lock_timeout = retention_lock_timeout (1 s by default):
-- writers and readers queue behind the request at most that long, and a
-- drop that cannot get the lock in time (a long transaction reading the old
-- partition, say) is deferred to a later pass (outcome 'deferred') instead
-- of waiting while everyone queues behind it. DETACH ... CONCURRENTLY is not
-- used: it cannot run in a function or procedure (so not under pg_cron or
-- CALL maintain()), it waits for every older snapshot, and a run killed
-- between its two transactions leaves a partition half-detached for a DBA
-- to finalize. The short-lock DETACH works the same for pg_cron-only
-- installs and for the Go runner.
--
-- The rows a dropped leaf held are counted (count(*), before the lock is
-- requested, so the count does not hold writers up) and reported as
-- deleted, as a swept leaf's are.

-- _retention_leaf_upper: the exclusive upper bound of a RANGE leaf on the
-- policy's time column, encoded like the cutoff (_retention_cutoff); NULL
-- when the leaf is not such a range (LIST, HASH, DEFAULT, a multi-column or
-- other-column key, MAXVALUE).
CREATE OR REPLACE FUNCTION _retention_leaf_upper(p_pol retention_policy, p_leaf regclass)
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
    v_upper text;
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
    v_upper := substring(v_bound FROM ' TO \((.*)\)$');
    IF v_upper IS NULL OR v_upper ILIKE '%MAXVALUE%' OR v_upper ILIKE '%MINVALUE%' THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT %s', _retention_encode(p_pol, format('(%s)::%s', v_upper,
        CASE p_pol.time_type WHEN 'timestamptz' THEN 'timestamptz' WHEN 'timestamp' THEN 'timestamp' ELSE 'date' END)))
       INTO v_bound;
    RETURN v_bound::timestamptz;
END
$$;

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
         ORDER BY n.nspname, c.relname
    LOOP
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
-- policy's owner: count its rows, detach it from its parent, drop it.
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
    count_sql := format('SELECT count(*) FROM ONLY %s', v_leaf);
    detach_sql := format('ALTER TABLE %s DETACH PARTITION %s', v_parent, v_leaf);
    drop_sql := format('DROP TABLE %s', v_leaf);
END
$$;
-- pgsweep:end functions/retention_partition.sql

-- pgsweep:include functions/retention_sql.sql
-- Retention: the SQL each batch runs against the policy's table.
--
-- Safety rule: a row is deleted only if it is eligible when it is deleted.
-- Every DELETE carries the policy's full predicate in its own WHERE clause.
-- Under READ COMMITTED, when a DELETE meets a row version that a concurrent
-- transaction updated, PostgreSQL follows the update to the newest version and
-- re-evaluates the whole WHERE clause on it (EvalPlanQual): a row re-queued
-- meanwhile (status or time changed) no longer matches and is skipped. The
-- range condition (ctid range, ctid list) is re-checked too; a new version
-- that moved outside the range is skipped, which is safe, and a still-eligible
-- row skipped that way is deleted by a later sweep. CAP's
-- DELETE ... WHERE "Id" IN (SELECT ... LIMIT n) re-checks only "Id", which is
-- why it deletes re-queued rows. sql/tests/retention_run.sql and the Go tests
-- prove the difference.
--
-- Parameters, the same in every statement: $1, $2 the range (TIDs, or the
-- keyset lower bound), $3 the cutoff, $4 the statuses, $5 the filter values.
-- Values travel as parameters, never as SQL text; names through %I.
--
-- Time: the cutoff is carried as timestamptz. For a timestamp column it holds
-- the local cutoff (now - older_than, in the policy's time zone) encoded as if
-- it were UTC, and the SQL decodes it with AT TIME ZONE 'UTC' applied to the
-- parameter (immutable, so the index on the column still serves); a date
-- column compares with the local cutoff's date, so a day is deleted only when
-- all of it is older than the cutoff.

-- _retention_cutoff computes a policy's cutoff for a clock reading.
CREATE OR REPLACE FUNCTION _retention_cutoff(p_pol retention_policy, p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_pol.time_type = 'timestamptz' THEN
        RETURN p_now - p_pol.older_than;
    END IF;
    RETURN ((p_now - p_pol.older_than) AT TIME ZONE coalesce(p_pol.time_zone, current_setting('TimeZone')))
           AT TIME ZONE 'UTC';
END
$$;

-- _retention_param decodes an encoded time parameter into the column's type.
CREATE OR REPLACE FUNCTION _retention_param(p_pol retention_policy, p_param text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_param
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_param)
        ELSE format('(%s AT TIME ZONE ''UTC'')::date', p_param) END
$$;

-- _retention_encode encodes a column value (an SQL expression) like the cutoff.
CREATE OR REPLACE FUNCTION _retention_encode(p_pol retention_policy, p_expr text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_expr
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_expr)
        ELSE format('(%s::timestamp AT TIME ZONE ''UTC'')', p_expr) END
$$;

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, '$3'));
    v_col record;
BEGIN
    IF p_pol.status_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.status_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.status_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($4::%s[])', p_pol.status_column, v_col.type_sql);
    END IF;
    IF p_pol.filter_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.filter_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.filter_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($5::%s[])', p_pol.filter_column, v_col.type_sql);
    END IF;
    RETURN v_sql;
END
$$;

-- _retention_sweep_sql builds a unit's DELETE on the policy's table, or on
-- p_target, one leaf of it (a partitioned policy's units name their leaf).
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_tbl text := format('%I.%I', p_pol.table_schema, p_pol.table_name);
    v_pred text := _retention_predicate(p_pol, v_rel);
BEGIN
    IF p_target IS NOT NULL THEN
        SELECT format('%I.%I', n.nspname, c.relname) INTO v_tbl
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_target;
    END IF;
    IF p_strategy = 'tid_range' THEN
        RETURN format('DELETE FROM %s WHERE ctid >= $1 AND ctid < $2 AND %s', v_tbl, v_pred);
    END IF;
    RETURN format('DELETE FROM %s WHERE %I >= %s AND %I < %s AND %s', v_tbl, p_pol.time_column,
                  _retention_param(p_pol, '$1'), p_pol.time_column, _retention_param(p_pol, '$2'), v_pred);
END
$$;

-- _retention_sample_sql builds the planning sample (see retention_plan.sql):
-- the eligible fraction, the sample size and the eligible rows' encoded
-- times in order, over about p_pct percent of the table's blocks.
CREATE OR REPLACE FUNCTION _retention_sample_sql(p_pol retention_policy, p_pct double precision)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
BEGIN
    RETURN format('SELECT count(*) FILTER (WHERE %1$s)::float8 / nullif(count(*), 0), count(*), '
                  'array_agg(%2$s ORDER BY %3$I) FILTER (WHERE %1$s) FROM %4$I.%5$I TABLESAMPLE SYSTEM (%6$s)',
                  _retention_predicate(p_pol, v_rel), _retention_encode(p_pol, quote_ident(p_pol.time_column)),
                  p_pol.time_column, p_pol.table_schema, p_pol.table_name, p_pct);
END
$$;

-- Running a policy's statements as its owner.
--
-- A policy belongs to the role that registered it, and every statement a
-- run makes on the policy's table (the planning sample, each batch's
-- DELETE) runs as that role: the table's privileges, row-level security and
-- triggers apply to the owner, never to whoever runs maintenance (pg_cron's
-- superuser included). A plain SET ROLE is not enough: a trigger of the
-- owner's could RESET ROLE back to a superuser session user. So the
-- statement runs inside a SECURITY DEFINER function owned by the policy's
-- owner, where PostgreSQL forbids SET ROLE and SET SESSION AUTHORIZATION:
-- _retention_as_owner creates it in this session's pg_temp (built now from
-- validated policy fields; no stored SQL), hands it to the owner, calls it
-- once and drops it, all in the caller's transaction, so no other session
-- ever sees it and it is never called twice. Creating and dropping costs
-- about 0.2 ms a batch. The caller (maintain's or retention_run's session
-- role) must be able to act as the owner (be a member of it, or a
-- superuser); otherwise the run of that policy fails with 42501 and says
-- which GRANT is missing, and other policies still run.
--
-- The owner's code (triggers, rules, row-level security policies) runs in
-- the maintenance session, between the caller's own statements. Whatever it
-- leaves in that session would act later with the caller's rights, which
-- may be a superuser's: a search_path set with plain SET outlives the
-- function that pins it (PostgreSQL keeps a SET made inside a function with a
-- SET clause), so the caller's next unqualified name would resolve in the
-- owner's schema; a temporary view or type would shadow a catalog name; a
-- prepared statement would stand in for the client's; and a role's
-- membership is checked against the session user, so a call made inside the
-- statement could register a policy as any role the caller may act as. So
-- _retention_as_owner checks, before it looks up any name again, that the
-- statement left search_path, every setting a role may SET, the session's
-- prepared statements, retention_policy and the catalogs' object rows
-- (pg_class, pg_type, pg_proc inserts) as it found them. If not, it deletes
-- the new prepared statements (they outlive a rollback) and raises 42501:
-- the batch rolls back with everything the statement did (settings,
-- objects, rows); the error is recorded on the policy's pass and other
-- policies still run. The check costs about 0.1 ms a batch
-- (_retention_session_state). docs/security.md tells the whole story.
--
-- Built-in policies (owner <schema>_owner, pgsweep's own tables) run in
-- _retention_builtin_exec instead, a SECURITY DEFINER function of
-- <schema>_owner that builds the statement from the policy itself.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        WHEN 'drop' THEN (SELECT pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L INTO n; EXECUTE %L; EXECUTE %L; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END',
            d.count_sql, d.detach_sql, d.drop_sql) FROM _retention_drop_sql(p_target) d)
        WHEN 'delete' THEN pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L USING $1, $2, $3, $4, $5; GET DIAGNOSTICS n = ROW_COUNT; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', p_sql)
        ELSE pg_catalog.format(
            'BEGIN RETURN QUERY EXECUTE %L USING $1, $2, $3, $4, $5; END',
            'SELECT NULL::bigint, s.* FROM (' || p_sql || ') s') END
$$;

-- _retention_exec_settings: the settings a statement runs with: a
-- tid_range DELETE is pinned to its Tid Range Scan (see retention_plan.sql);
-- JIT off everywhere, batches are too short to gain from it; and it waits
-- for no lock longer than retention_lock_timeout (a row an application holds
-- locked defers the unit to a later pass, _retention_step).
CREATE OR REPLACE FUNCTION _retention_exec_settings(p_strategy text)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_strategy
        WHEN 'tid_range' THEN ' SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off SET jit = off'
        ELSE ' SET jit = off' END
        || pg_catalog.format(' SET lock_timeout = %L',
                             (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms')
$$;

-- _retention_session_state: what _retention_as_owner compares before and
-- after a statement run as a policy's owner. settings: every setting a role
-- may SET (context 'user' in PostgreSQL 15; a name a server lacks reads as
-- NULL) but search_path, which is pinned here (the caller compares its own);
-- prepared: the session's prepared statements (name and text); writes: rows
-- this transaction wrote to retention_policy and inserted into pg_class,
-- pg_type and pg_proc (a new table, view, type or function), from the
-- transaction's statistics counters, or, with track_counts off, a digest of
-- the policies and of this session's temporary objects.
CREATE OR REPLACE FUNCTION _retention_session_state(OUT settings text[], OUT prepared text[], OUT writes text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    settings := ARRAY(SELECT n || '=' || coalesce(pg_catalog.current_setting(n, true), '<unset>') FROM pg_catalog.unnest(ARRAY[
        'DateStyle', 'IntervalStyle', 'TimeZone', 'application_name', 'array_nulls', 'backend_flush_after',
        'backslash_quote', 'bytea_output', 'check_function_bodies', 'client_connection_check_interval',
        'client_encoding', 'client_min_messages', 'commit_siblings', 'constraint_exclusion', 'cpu_index_tuple_cost',
        'cpu_operator_cost', 'cpu_tuple_cost', 'cursor_tuple_fraction', 'debug_pretty_print', 'debug_print_parse',
        'debug_print_plan', 'debug_print_rewritten', 'default_statistics_target', 'default_table_access_method',
        'default_tablespace', 'default_text_search_config', 'default_toast_compression',
        'default_transaction_deferrable', 'default_transaction_isolation', 'default_transaction_read_only',
        'effective_cache_size', 'effective_io_concurrency', 'enable_async_append', 'enable_bitmapscan',
        'enable_gathermerge', 'enable_hashagg', 'enable_hashjoin', 'enable_incremental_sort', 'enable_indexonlyscan',
        'enable_indexscan', 'enable_material', 'enable_memoize', 'enable_mergejoin', 'enable_nestloop',
        'enable_parallel_append', 'enable_parallel_hash', 'enable_partition_pruning', 'enable_partitionwise_aggregate',
        'enable_partitionwise_join', 'enable_seqscan', 'enable_sort', 'enable_tidscan', 'escape_string_warning',
        'exit_on_error', 'extra_float_digits', 'force_parallel_mode', 'from_collapse_limit', 'geqo', 'geqo_effort',
        'geqo_generations', 'geqo_pool_size', 'geqo_seed', 'geqo_selection_bias', 'geqo_threshold',
        'gin_fuzzy_search_limit', 'gin_pending_list_limit', 'hash_mem_multiplier',
        'idle_in_transaction_session_timeout', 'idle_session_timeout', 'jit', 'jit_above_cost', 'jit_expressions',
        'jit_inline_above_cost', 'jit_optimize_above_cost', 'jit_tuple_deforming', 'join_collapse_limit',
        'lc_monetary', 'lc_numeric', 'lc_time', 'local_preload_libraries', 'lock_timeout',
        'log_parameter_max_length_on_error', 'logical_decoding_work_mem', 'maintenance_io_concurrency',
        'maintenance_work_mem', 'max_parallel_maintenance_workers', 'max_parallel_workers',
        'max_parallel_workers_per_gather', 'min_parallel_index_scan_size', 'min_parallel_table_scan_size',
        'parallel_leader_participation', 'parallel_setup_cost', 'parallel_tuple_cost', 'password_encryption',
        'plan_cache_mode', 'quote_all_identifiers', 'random_page_cost', 'recursive_worktable_factor',
        'restrict_nonsystem_relation_kind', 'row_security', 'seq_page_cost', 'standard_conforming_strings',
        'statement_timeout', 'stats_fetch_consistency', 'synchronize_seqscans', 'synchronous_commit',
        'tcp_keepalives_count', 'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_user_timeout', 'temp_buffers',
        'temp_tablespaces', 'timezone_abbreviations', 'trace_notify', 'trace_sort', 'transaction_deferrable',
        'transaction_isolation', 'transaction_read_only', 'transform_null_equals', 'vacuum_cost_delay',
        'vacuum_cost_limit', 'vacuum_cost_page_dirty', 'vacuum_cost_page_hit', 'vacuum_cost_page_miss',
        'vacuum_failsafe_age', 'vacuum_freeze_min_age', 'vacuum_freeze_table_age', 'vacuum_multixact_failsafe_age',
        'vacuum_multixact_freeze_min_age', 'vacuum_multixact_freeze_table_age', 'wal_sender_timeout',
        'wal_skip_threshold', 'work_mem', 'xmlbinary', 'xmloption', 'plpgsql.check_asserts', 'plpgsql.extra_errors',
        'plpgsql.extra_warnings', 'plpgsql.print_strict_params']) n);
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

-- _retention_session_restore deletes the prepared statements that are not
-- in p_prepared (as _retention_session_state lists them): a statement run
-- as a policy's owner made them, and they outlive a rollback. It returns
-- their names.
CREATE OR REPLACE FUNCTION _retention_session_restore(p_prepared text[])
RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_names text[] := ARRAY(SELECT p.name FROM pg_catalog.pg_prepared_statements p
                             WHERE NOT (p.name || ' ' || p.statement) = ANY (coalesce(p_prepared, '{}')) ORDER BY 1);
    v_name text;
BEGIN
    FOREACH v_name IN ARRAY v_names LOOP
        EXECUTE pg_catalog.format('DEALLOCATE %I', v_name);
    END LOOP;
    RETURN v_names;
END
$$;

-- _retention_as_owner runs one statement of a policy as its owner and
-- returns the DELETE's row count or the sample's three values. It runs as
-- its caller (SECURITY INVOKER): the caller must be able to act as the owner.
CREATE OR REPLACE FUNCTION _retention_as_owner(p_pol retention_policy, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz, p_target regclass,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text;
    v_type text := pg_catalog.format_type(pg_catalog.pg_typeof(p_lo), NULL);
    v_sig text;
    v_path text := pg_catalog.current_setting('search_path');
    v_before record;
    v_after record;
    v_changed text;
BEGIN
    IF p_pol.owner = _owner_role() THEN
        SELECT * INTO deleted, fraction, sampled, times
          FROM _retention_builtin_exec(p_pol.name, p_kind, p_strategy, p_lo, p_hi, p_cutoff);
        RETURN;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, p_pol.owner, 'MEMBER') THEN
        RAISE EXCEPTION 'retention policy %: % cannot act as the policy''s owner %', p_pol.name, current_user, p_pol.owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Run maintenance as a role that can act as %s: GRANT %I TO %I.',
                                           p_pol.owner, p_pol.owner::text, current_user);
    END IF;
    IF p_kind = 'delete' THEN
        v_sql := _retention_sweep_sql(p_pol, p_strategy, p_target);
    ELSIF p_kind = 'drop' THEN
        v_sql := NULL; -- _retention_exec_body builds the drop from p_target
    ELSE
        v_sql := _retention_sample_sql(p_pol, p_lo::text::double precision);
    END IF;
    v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v_type, v_type);
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
        'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L',
        v_sig, _retention_exec_settings(CASE WHEN p_kind = 'delete' THEN p_strategy END), _retention_exec_body(v_sql, p_kind, p_target));
    EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, p_pol.owner::text);
    v_before := _retention_session_state();
    BEGIN
        EXECUTE pg_catalog.format('SELECT * FROM %s', pg_catalog.replace(v_sig,
                pg_catalog.format('(%s, %s, timestamptz, text[], text[])', v_type, v_type), '($1, $2, $3, $4, $5)'))
           INTO deleted, fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, p_pol.statuses, p_pol.filter_values;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        -- Rolled back with the block: settings, objects, rows. Not prepared statements.
        PERFORM _retention_session_restore(v_before.prepared);
        RAISE;
    END;
    -- The owner's code may have set search_path for the session: compare it
    -- before any name is looked up again (pg_catalog only, no operator).
    IF NOT pg_catalog.texteq(pg_catalog.current_setting('search_path'), v_path) THEN
        v_changed := 'search_path';
    ELSE
        v_after := _retention_session_state();
        v_changed := CASE
            WHEN v_after.settings IS DISTINCT FROM v_before.settings THEN
                'settings ' || (SELECT pg_catalog.string_agg(pg_catalog.split_part(a.s, '=', 1), ', ')
                                  FROM pg_catalog.unnest(v_after.settings) a(s) WHERE NOT a.s = ANY (v_before.settings))
            WHEN v_after.prepared IS DISTINCT FROM v_before.prepared THEN 'prepared statements'
            WHEN v_after.writes IS DISTINCT FROM v_before.writes THEN 'retention policies or database objects' END;
    END IF;
    IF v_changed IS NOT NULL THEN
        PERFORM {{ .schema | default "pgsweep" }}._retention_session_restore(v_before.prepared);
        RAISE EXCEPTION 'retention policy %: a statement run as its owner % changed the maintenance session (%); nothing it did is kept',
            p_pol.name, p_pol.owner, v_changed
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Triggers, rules and row-level security policies on a policy''s table run inside maintenance: '
                         'they must not SET parameters, create objects, prepare statements or register retention policies.';
    END IF;
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_sig);
END
$$;

-- _retention_builtin_exec runs one statement of a built-in policy (owned by
-- <schema>_owner, on pgsweep's own tables) as <schema>_owner. It takes no
-- SQL: it builds the statement from the policy, and refuses any other policy.
CREATE OR REPLACE FUNCTION _retention_builtin_exec(p_name text, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_pol retention_policy;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND OR v_pol.owner <> _owner_role() OR v_pol.table_schema <> pg_catalog.current_schema()
       OR v_pol.table_name NOT IN ('message_processed', 'message_dead') THEN
        RAISE EXCEPTION 'retention policy %: not a built-in policy', p_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_kind = 'delete' THEN
        -- as _retention_exec_settings: wait on no lock longer than retention_lock_timeout
        PERFORM pg_catalog.set_config('lock_timeout',
            (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms', true);
        EXECUTE _retention_sweep_sql(v_pol, p_strategy) USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    ELSE
        EXECUTE _retention_sample_sql(v_pol, p_lo::text::double precision) INTO fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
    END IF;
END
$$;
-- pgsweep:end functions/retention_sql.sql

-- pgsweep:include functions/retention_plan.sql
-- Retention: planning a sweep.
--
-- A sweep fixes the cutoff and the strategy and cuts the work into units:
--
-- tid_range: consecutive heap block ranges, each sized so that it holds about
--   one batch of rows. Each unit is one DELETE with the full predicate over a
--   Tid Range Scan (PostgreSQL 14+): it reads only its own blocks, so draining
--   a backlog never re-walks what earlier batches deleted, and no row is
--   locked before it is deleted (locking first writes every row twice:
--   measured 0.45x of one DELETE, against 0.85x-1.0x for this walk). Parallel
--   cleaners take different units, so they touch disjoint rows. The last unit
--   is open-ended: blocks the table grows by during the sweep belong to it.
-- keyset: windows of the time column, each expected to hold about one batch
--   of eligible rows (cut at the quantiles of the eligible rows' times in a
--   sample of the table). Each unit is one DELETE with the full predicate and
--   time >= lo AND time < hi: the planner drives it from an index that leads
--   with the time column (Bitmap Index Scan for a sparse window), so a sparse
--   backlog (measured: 1% eligible) reads only the index range of old rows
--   and the heap blocks that hold eligible rows, where a heap walk would read
--   the whole table. Windows are disjoint, so parallel cleaners split them.
--   A first version walked the index in time order (ORDER BY time LIMIT
--   batch, then delete by TID); in PostgreSQL 15 such an ordered scan cannot
--   use the status list as an index condition and fetched the heap row of
--   every old row of any status: 0.75x of one DELETE at 1% eligible.
--
-- 'auto' takes keyset when such an index exists and at most
-- retention_keyset_fraction() (5%) of the table is eligible, else tid_range.
-- The fraction is measured on a sample of about 400 random blocks
-- (TABLESAMPLE SYSTEM: a millisecond or two on 1M rows), not taken from the
-- planner, whose estimate was 8.6x too high for a 1% backlog (it multiplies
-- the time and status selectivities as if they were independent), and not
-- counted through the index, which reads the same index range as the keyset
-- walk itself and so doubled the cost of a sparse pass (measured: 25-180 ms).
-- The threshold is measured (docs/benchmarks.md): at 10% eligible the TID
-- walk ran 0.70x of one DELETE and the keyset walk 0.40x; at 1% the keyset
-- walk ran 1.0x (2.1x with a cold cache) and the TID walk 0.55x.

CREATE OR REPLACE FUNCTION retention_keyset_fraction()
RETURNS double precision
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 0.05::double precision $$;

-- _retention_sample_pct: the share of the table's blocks the planning
-- sample reads (about 400 blocks), NULL for an empty table.
CREATE OR REPLACE FUNCTION _retention_sample_pct(p_pol retention_policy)
RETURNS double precision
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocks bigint := pg_catalog.pg_relation_size(_retention_table(p_pol.table_schema, p_pol.table_name))
                       / current_setting('block_size')::int;
BEGIN
    IF v_blocks > 0 THEN
        RETURN least(100, 400 * 100.0 / v_blocks);
    END IF;
    RETURN NULL;
END
$$;

-- _retention_sweep_trim keeps a policy's sweep history bounded: finished
-- sweeps beyond the last 20 go.
CREATE OR REPLACE FUNCTION _retention_sweep_trim(p_policy text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    DELETE FROM retention_sweep s
     WHERE s.policy = p_policy
       AND s.id < (SELECT s2.id FROM retention_sweep s2 WHERE s2.policy = p_policy ORDER BY s2.id DESC OFFSET 20 LIMIT 1)
       AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = s.policy AND u.sweep_id = s.id)
$$;

-- _retention_plan plans a sweep from the sample the caller took as the
-- policy's owner (p_pct NULL: the table was empty, no sample).
CREATE OR REPLACE FUNCTION _retention_plan(p_pol retention_policy, p_now timestamptz, p_owner text,
    p_pct double precision, p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_strategy text := p_pol.strategy;
    v_block_size int := current_setting('block_size')::int;
    v_pct double precision := p_pct;
    v_fraction double precision := p_fraction;
    v_sampled bigint := p_sampled;
    v_times timestamptz[] := p_times;
    v_bounds timestamptz[];
    v_eligible double precision;
    v_tuples double precision;
    v_pages double precision;
    v_width double precision;
    v_rpb double precision;
    v_blocks bigint;
    v_step bigint;
    v_sweep bigint;
    v_units int;
    v_n int;
    v_at timestamptz;
BEGIN
    IF (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = v_rel) = 'p' THEN
        RETURN _retention_plan_partitioned(p_pol, p_now, p_owner);
    END IF;
    SELECT c.reltuples, c.relpages INTO v_tuples, v_pages FROM pg_catalog.pg_class c WHERE c.oid = v_rel;
    v_blocks := pg_catalog.pg_relation_size(v_rel) / v_block_size;
    -- The sample (taken by the caller, as the policy's owner, over
    -- p_pct percent of the blocks; _retention_sample_sql): the eligible
    -- fraction, and the eligible rows' times in order (the keyset walk cuts
    -- its windows at their quantiles).
    IF v_strategy = 'auto' THEN
        -- No index, or a sample of empty blocks: walk the heap.
        v_strategy := CASE
            WHEN v_fraction <= retention_keyset_fraction()
                 AND _retention_index(v_rel, p_pol.time_column, p_pol.status_column, p_pol.filter_column) IS NOT NULL
            THEN 'keyset' ELSE 'tid_range' END;
    END IF;

    IF v_strategy = 'tid_range' THEN
        -- Rows per block: the larger of the statistics' average (which a mostly
        -- deleted table drags down), what the rows' average width allows, and
        -- the sample's, so that a unit of dense blocks does not hold many batches.
        SELECT (v_block_size - 24) / (sum(s.avg_width) + 28) INTO v_width
          FROM pg_catalog.pg_stats s WHERE s.schemaname = p_pol.table_schema AND s.tablename = p_pol.table_name;
        v_rpb := greatest(CASE WHEN v_tuples > 0 AND v_pages > 0 THEN v_tuples / v_pages END, v_width,
                          v_sampled / (v_pct / 100 * v_blocks), 1);
        v_step := greatest(1, ceil(p_pol.batch_size / v_rpb))::bigint;
    ELSE
        -- Windows of the time column, each expected to hold one batch of
        -- eligible rows, cut at the quantiles of the sampled eligible times.
        -- The first starts at -infinity and the last ends at +infinity, so
        -- together they cover every row whatever the sample missed.
        v_eligible := coalesce(v_fraction * v_sampled * 100 / v_pct, 0);
        v_n := least(greatest(ceil(v_eligible / p_pol.batch_size), 1), coalesce(cardinality(v_times), 1), 100000)::int;
        SELECT coalesce(array_agg(DISTINCT v_times[ceil(i * cardinality(v_times)::float8 / v_n)::int]), '{}')
          INTO v_bounds
          FROM generate_series(1, v_n - 1) i;
        v_bounds := '{-infinity}'::timestamptz[] || v_bounds || '{infinity}'::timestamptz[];
    END IF;

    v_at := clock_timestamp();
    INSERT INTO retention_sweep (policy, strategy, cutoff, planned_at, planned_by, units, blocks, step_blocks,
                                 eligible_fraction)
    VALUES (p_pol.name, v_strategy, v_cutoff, v_at, p_owner, 0, v_blocks, v_step, v_fraction)
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
-- 'delete' (the unit o_unit is locked for this transaction), or NULL with
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
    -- A partitioned policy's unit names its leaf (retention_partition.sql).
    IF v_unit.leaf_name IS NOT NULL THEN
        -- by the catalog, not to_regclass: this runs as <schema>_owner, which
        -- need not have USAGE on the table's schema
        SELECT c.oid INTO o_target
          FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = v_unit.leaf_schema AND c.relname = v_unit.leaf_name AND c.relkind = 'r';
        IF o_target IS NULL THEN -- the leaf is gone (dropped by someone else): nothing left to do
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
    o_action := CASE WHEN v_unit.action = 'drop' THEN 'drop' ELSE 'delete' END;
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

-- _retention_dropped counts a leaf the pass removed whole.
CREATE OR REPLACE FUNCTION _retention_dropped(p_pass bigint)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ UPDATE retention_pass SET partitions_dropped = partitions_dropped + 1 WHERE id = p_pass $$;

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
BEGIN
    v := _retention_step_claim(p_pass);
    IF v.o_action = 'plan' THEN
        IF v.o_pct IS NOT NULL THEN
            v_run := _retention_as_owner(v.o_pol, 'sample', NULL, v.o_pct, NULL::double precision, v.o_cutoff, NULL);
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
        ELSE -- an empty table, or a partitioned one (planned per leaf): no sample
            PERFORM _retention_plan_from_sample(p_pass, v.o_now, NULL, NULL, NULL, NULL);
        END IF;
    ELSIF v.o_action IN ('delete', 'drop') THEN
        BEGIN
            IF v.o_action = 'drop' THEN
                v_run := _retention_as_owner(v.o_pol, 'drop', NULL, NULL::tid, NULL::tid, v.o_cutoff, v.o_target);
                PERFORM _retention_dropped(p_pass);
            ELSIF v.o_strategy = 'tid_range' THEN
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy,
                    pg_catalog.format('(%s,0)', (v.o_unit).block_lo)::tid,
                    pg_catalog.format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295))::tid, v.o_cutoff, v.o_target);
            ELSE
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy, (v.o_unit).time_lo, (v.o_unit).time_hi,
                    v.o_cutoff, v.o_target);
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- A row of the unit stayed locked past retention_lock_timeout:
            -- the batch rolled back whole; a later pass takes the unit.
            PERFORM _retention_step_deferred(p_pass, v.o_unit);
            RETURN true;
        END;
        PERFORM _retention_step_done(p_pass, v.o_unit, v.o_strategy, v_run.deleted);
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
                           FROM retention_pass p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred')
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
                 'cron_schedule', 'cron_unschedule', 'cron_job', '_cron_available', '_cron_require']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so a p_now overload is excluded by
-- its argument count in _grant_all).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        '_queue_get', -- the Worker reads the queue's lease_default and max_attempts (no payloads)
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_retention_dropped', '_owner_role',
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'version']) r
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone.
        CONTINUE WHEN r.has_now AND r.proname NOT IN ('_queue_stats', '_retention_begin');
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
