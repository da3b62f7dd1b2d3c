-- pgsweep: coordinated retention of any registered table.
--
-- A policy names a table, a time column and an age; optionally a status column
-- with the statuses that may be deleted and one more fixed filter (for example
-- queue = 'orders', which pgsweep's own built-in policies use). retention_run
-- plans a sweep over the table as work units and deletes unit by unit, one
-- committed batch at a time; see functions/retention_run.sql for the rules.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

CREATE TABLE retention_policy (
    name          text PRIMARY KEY,
    -- The table by name, not by oid, so that a dump and restore keeps the policy.
    table_schema  text NOT NULL,
    table_name    text NOT NULL,
    time_column   text NOT NULL,
    time_type     text NOT NULL CHECK (time_type IN ('timestamptz', 'timestamp', 'date')),
    older_than    interval,            -- NULL: keep rows forever
    status_column text,
    statuses      text[],
    filter_column text,                -- extra fixed filter: filter_column = ANY (filter_values)
    filter_values text[],
    batch_size    int NOT NULL CHECK (batch_size BETWEEN 1 AND 10000),
    mode          text NOT NULL CHECK (mode IN ('exclusive', 'parallel')),
    run_interval  interval NOT NULL CHECK (run_interval > interval '0'),
    time_zone     text,                -- for timestamp/date columns; NULL: the database's TimeZone
    lease_ttl     interval NOT NULL DEFAULT interval '30 seconds',
    strategy      text NOT NULL DEFAULT 'auto' CHECK (strategy IN ('auto', 'tid_range', 'keyset')),
    registered_at timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CHECK ((status_column IS NULL) = (statuses IS NULL)),
    CHECK ((filter_column IS NULL) = (filter_values IS NULL))
);
COMMENT ON TABLE retention_policy IS 'pgsweep retention policies; see retention_register';

-- A sweep is one planned walk over a policy's table with a fixed cutoff. Its
-- work units are claimed FOR UPDATE SKIP LOCKED, so parallel cleaners never
-- wait on each other and a crashed cleaner's unit is simply claimed again.
CREATE TABLE retention_sweep (
    id             bigserial PRIMARY KEY,
    policy         text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    strategy       text NOT NULL CHECK (strategy IN ('tid_range', 'keyset')),
    -- The cutoff as timestamptz; for timestamp and date columns it encodes the
    -- local cutoff as if it were UTC (see _retention_cutoff).
    cutoff         timestamptz NOT NULL,
    planned_at     timestamptz NOT NULL,
    planned_by     text NOT NULL,
    units          int NOT NULL,
    blocks         bigint,             -- tid_range: table size in blocks when planned
    step_blocks    bigint,             -- tid_range: blocks per unit
    eligible_fraction double precision, -- auto: the eligible fraction of a sample of the table
    -- The statements of this sweep, built once at planning from the catalog
    -- (names quoted with %I): a dropped or retyped column makes them fail,
    -- never delete the wrong rows.
    delete_sql     text NOT NULL
);
CREATE INDEX ON retention_sweep (policy, id);

-- Open work: a unit row exists until its range is done.
CREATE TABLE retention_unit (
    policy   text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    sweep_id bigint NOT NULL REFERENCES retention_sweep (id) ON DELETE CASCADE,
    unit_no  int NOT NULL,
    block_lo bigint,                   -- tid_range: blocks [block_lo, block_hi); NULL hi: to the end
    block_hi bigint,
    time_lo  timestamptz,              -- keyset: times [time_lo, time_hi), encoded like retention_sweep.cutoff
    time_hi  timestamptz,
    PRIMARY KEY (policy, sweep_id, unit_no)
);

-- One row per retention_run call that did work (a busy cleaner records nothing).
CREATE TABLE retention_pass (
    id             bigserial PRIMARY KEY,
    policy         text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    owner          text NOT NULL,
    mode           text NOT NULL,
    lease_token    bigint,             -- exclusive mode: the lease's fencing token
    pid            int NOT NULL,       -- with backend_start, tells a live pass from an abandoned one
    backend_start  timestamptz,
    started_at     timestamptz NOT NULL,
    deadline       timestamptz NOT NULL,
    now_override   timestamptz,        -- p_now, when a test pinned the clock
    renewed_at     timestamptz,
    last_batch_at  timestamptz,
    finished_at    timestamptz,
    rows_deleted   bigint NOT NULL DEFAULT 0,
    batches        int NOT NULL DEFAULT 0,
    units          int NOT NULL DEFAULT 0,   -- units finished by this pass
    planned_sweep  bigint,
    strategy       text,
    outcome        text NOT NULL DEFAULT 'running'
                   CHECK (outcome IN ('running', 'drained', 'budget', 'lease_lost', 'error')),
    error          text
);
CREATE INDEX ON retention_pass (policy, id);
COMMENT ON TABLE retention_pass IS 'pgsweep retention history: one row per cleaner pass, bounded per policy';

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
     WHERE n.nspname = p_schema AND c.relname = p_table AND c.relkind = 'r';
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

CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
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
    IF v_kind <> 'r' OR v_persistence = 't' THEN
        PERFORM _retention_invalid('p_table must be an ordinary, non-temporary table, got %s (relkind %s)',
            p_table::text, v_kind::text);
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

    IF p_older_than IS NOT NULL AND p_older_than <= interval '0' THEN
        PERFORM _retention_invalid('p_older_than must be greater than 0, or NULL to keep rows forever, got %s',
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
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode) THEN
        DELETE FROM retention_unit WHERE policy = p_name;
    END IF;
    INSERT INTO retention_policy AS p (name, table_schema, table_name, time_column, time_type, older_than,
                                       status_column, statuses, batch_size, mode, run_interval,
                                       registered_at, updated_at)
    VALUES (p_name, v_schema, v_table, p_time_column, v_time_type, p_older_than,
            p_status_column, p_statuses, p_batch_size, p_mode, p_interval, v_now, v_now)
    ON CONFLICT (name) DO UPDATE
       SET table_schema = excluded.table_schema, table_name = excluded.table_name,
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

-- The same, for a table given by name: a name that resolves to no table is a
-- 22023 naming p_table instead of the cast's "relation does not exist". A
-- string literal argument resolves to this overload.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    PERFORM _check_text('p_table', p_table, 300);
    BEGIN
        v_rel := pg_catalog.to_regclass(p_table);
    EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
        v_rel := NULL;
    END;
    IF v_rel IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got %s', quote_literal(p_table));
    END IF;
    PERFORM retention_register(p_name, v_rel, p_time_column, p_older_than, p_status_column, p_statuses,
                               p_batch_size, p_mode, p_interval);
END
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
CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    IF p_time_zone IS NOT NULL THEN
        BEGIN
            PERFORM now() AT TIME ZONE p_time_zone;
        EXCEPTION WHEN OTHERS THEN
            PERFORM _retention_invalid('p_time_zone must be a time zone name or NULL (the database''s TimeZone), got %s',
                quote_literal(p_time_zone));
        END;
    END IF;
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

-- _retention_sweep_sql builds a sweep's DELETE (see retention_sweep).
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_tbl text := format('%I.%I', p_pol.table_schema, p_pol.table_name);
    v_pred text := _retention_predicate(p_pol, v_rel);
BEGIN
    IF p_strategy = 'tid_range' THEN
        RETURN format('DELETE FROM %s WHERE ctid >= $1 AND ctid < $2 AND %s', v_tbl, v_pred);
    END IF;
    RETURN format('DELETE FROM %s WHERE %I >= %s AND %I < %s AND %s', v_tbl, p_pol.time_column,
                  _retention_param(p_pol, '$1'), p_pol.time_column, _retention_param(p_pol, '$2'), v_pred);
END
$$;

-- _retention_delete_range deletes the eligible rows in heap blocks
-- [p_block_lo, p_block_hi) (to the end when p_block_hi is NULL): one Tid Range
-- Scan over those blocks, no index, nothing else read. The planner settings
-- pin that plan; a sweep picks this strategy only where most rows of the
-- blocks are eligible, and there an index walk would cost more. JIT off: the
-- disabled plan types' penalty costs would otherwise trigger JIT compilation
-- of every statement here (measured: 100+ ms per batch), and a batch is far
-- too short to gain from it.
CREATE OR REPLACE FUNCTION _retention_delete_range(p_sweep retention_sweep, p_pol retention_policy,
    p_block_lo bigint, p_block_hi bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_indexscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    -- An open-ended unit runs to the largest block number there can be.
    EXECUTE p_sweep.delete_sql
      USING format('(%s,0)', p_block_lo)::tid, format('(%s,0)', coalesce(p_block_hi, 4294967295))::tid,
            p_sweep.cutoff, p_pol.statuses, p_pol.filter_values;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- _retention_delete_window deletes the eligible rows whose time is in
-- [p_time_lo, p_time_hi); the planner picks the plan (an index on the time
-- column, for the small windows this strategy is chosen for).
CREATE OR REPLACE FUNCTION _retention_delete_window(p_sweep retention_sweep, p_pol retention_policy,
    p_time_lo timestamptz, p_time_hi timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    EXECUTE p_sweep.delete_sql USING p_time_lo, p_time_hi, p_sweep.cutoff, p_pol.statuses, p_pol.filter_values;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
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

CREATE OR REPLACE FUNCTION _retention_plan(p_pol retention_policy, p_now timestamptz, p_owner text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_cutoff timestamptz := _retention_cutoff(p_pol, p_now);
    v_strategy text := p_pol.strategy;
    v_block_size int := current_setting('block_size')::int;
    v_pct double precision;
    v_fraction double precision;
    v_sampled bigint;
    v_times timestamptz[];
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
    SELECT c.reltuples, c.relpages INTO v_tuples, v_pages FROM pg_catalog.pg_class c WHERE c.oid = v_rel;
    v_blocks := pg_catalog.pg_relation_size(v_rel) / v_block_size;
    -- The sample: the eligible fraction, and the eligible rows' times in order
    -- (the keyset walk cuts its windows at their quantiles).
    IF v_blocks > 0 THEN
        v_pct := least(100, 400 * 100.0 / v_blocks);
        EXECUTE format('SELECT count(*) FILTER (WHERE %1$s)::float8 / nullif(count(*), 0), count(*), '
                       'array_agg(%2$s ORDER BY %3$I) FILTER (WHERE %1$s) FROM %4$I.%5$I TABLESAMPLE SYSTEM (%6$s)',
                       _retention_predicate(p_pol, v_rel), _retention_encode(p_pol, quote_ident(p_pol.time_column)),
                       p_pol.time_column, p_pol.table_schema, p_pol.table_name, v_pct)
          INTO v_fraction, v_sampled, v_times
          USING NULL::tid, NULL::tid, v_cutoff, p_pol.statuses, p_pol.filter_values;
    END IF;
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
                                 eligible_fraction, delete_sql)
    VALUES (p_pol.name, v_strategy, v_cutoff, v_at, p_owner, 0, v_blocks, v_step, v_fraction,
            _retention_sweep_sql(p_pol, v_strategy))
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

    -- Keep the sweep history bounded: finished sweeps beyond the last 20 go.
    DELETE FROM retention_sweep s
     WHERE s.policy = p_pol.name
       AND s.id < (SELECT s2.id FROM retention_sweep s2 WHERE s2.policy = p_pol.name ORDER BY s2.id DESC OFFSET 20 LIMIT 1)
       AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = s.policy AND u.sweep_id = s.id);
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
-- pgsweep:end functions/retention_step.sql
-- pgsweep:include functions/retention_run.sql
-- Retention: retention_run, the procedure that deletes a policy's expired rows
-- in batches, committing each, until the sweep is drained or the budget spent.
--
--   CALL retention_run('cap.published');
--   CALL retention_run('cap.published', 'replica-1', '10 seconds');
--   CALL retention_run('cap.published', NULL, '10 seconds', NULL, NULL);  -- returns p_pass_id
--
-- Must be called outside a transaction block (it commits). Procedures cannot
-- pin search_path (a SET clause forbids COMMIT inside), so these bodies call
-- only schema-qualified functions that pin theirs; the schema comes from the
-- migration's template data like everywhere else.
--
-- Errors: a step that fails is recorded on the pass (outcome 'error'), its
-- lease and advisory lock are released, and the error is raised again. A
-- cleaner that is killed records nothing more: its last batch is committed or
-- rolled back whole, its unit stays open for the next cleaner, its lease
-- expires after the policy's TTL and the view shows the pass as abandoned.

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text, p_budget interval, p_now timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_failed boolean := false;
    v_state text;
    v_msg text;
    v_detail text;
    v_hint text;
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_now);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF p_pass_id IS NULL THEN
        RETURN; -- busy, or the policy keeps rows forever
    END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}._retention_step(p_pass_id);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}._retention_finish(p_pass_id, 'error', v_state || ': ' || v_msg);
            COMMIT;
            PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''),
                HINT = coalesce(v_hint, '');
        END IF;
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}._retention_finish(p_pass_id, NULL, NULL);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    CALL {{ .schema | default "pgsweep" }}.retention_run(p_name, p_owner, p_budget, NULL, v_pass);
END
$$;
-- pgsweep:end functions/retention_run.sql
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
       p.error
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
       lp.error AS last_error
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the policies whose interval has passed since their last
-- pass began (or that never ran), oldest first: what maintain() runs. Policies
-- that keep rows forever are never due.
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz DEFAULT NULL)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN QUERY
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT max(p.started_at) AS at FROM retention_pass p WHERE p.policy = r.name) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now)
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;
-- pgsweep:end functions/retention_views.sql
