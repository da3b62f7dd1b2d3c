-- pgsweep 0.25: the monitor's views work on Citus.
--
-- On a distributed install Citus reads a reference or distributed table
-- behind a view with the privileges of the querying role, not the view's
-- owner (citusdata/citus#6161), and S_monitor holds no table privilege: the
-- views leases, settings and queue_stats failed for a monitor login there.
-- They now read their tables through SECURITY DEFINER functions owned by
-- S_owner (_lease_rows, _setting_rows, _queue_rows), granted to S_monitor;
-- the views' columns (names, types, order) are unchanged, so CREATE OR
-- REPLACE VIEW replaces them in place. The functions spell their result
-- columns out: returning the tables' row types made citus_distribute fail
-- with a circular dependency. On a distributed install, call
-- citus_distribute() again after this migration (as after every one): it
-- distributes the new functions, and it now also re-creates on the
-- coordinator alone the views that Citus copied to the workers (this
-- migration's CREATE OR REPLACE VIEW does, on a distributed install).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:include functions/lease.sql
-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still), read after the lease row is locked. The overloads
-- taking p_now let tests pin the clock; NULL there means the database clock,
-- and the contract's forms pass NULL. p_now must be within 10 years of the
-- database clock (_check_now, validate.sql).
--
-- Token rules: a new tenure (first acquire, takeover after expiry, acquire
-- after release, or re-acquire by a holder whose lease lapsed) gets token + 1;
-- a holder re-acquiring a live lease keeps its token. Rows are never deleted,
-- so tokens for a name only ever increase.

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);

    LOOP
        -- Read the clock only once the row is locked: a contender that
        -- waited for the lock must not act on a time from before the wait,
        -- or its tenure could appear to start before the previous one ended.
        SELECT * INTO v_lease FROM lease WHERE name = p_name FOR UPDATE;
        v_now := coalesce(p_now, clock_timestamp());
        IF NOT FOUND THEN
            INSERT INTO lease (name, owner, token, acquired_at, expires_at)
            VALUES (p_name, p_owner, 1, v_now, v_now + p_ttl)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                RETURN 1;
            END IF;
            CONTINUE; -- a concurrent first acquire won the insert: lock its row
        END IF;

        IF v_lease.owner = p_owner AND v_lease.expires_at > v_now THEN
            UPDATE lease SET expires_at = v_now + p_ttl WHERE name = p_name;
            RETURN v_lease.token;
        END IF;
        IF v_lease.owner IS NULL OR v_lease.expires_at <= v_now THEN
            UPDATE lease
               SET owner = p_owner, token = v_lease.token + 1, acquired_at = v_now, expires_at = v_now + p_ttl
             WHERE name = p_name;
            RETURN v_lease.token + 1;
        END IF;
        RETURN NULL;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire(p_name, p_owner, p_ttl, NULL) $$;

-- A renew succeeds only while the caller's lease is live: a lapsed holder must
-- acquire again (and may get a new token), so it learns that it lapsed.
CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);

    SELECT * INTO v_lease FROM lease WHERE name = p_name AND owner = p_owner FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT FOUND OR v_lease.expires_at <= v_now THEN
        RETURN false;
    END IF;
    UPDATE lease SET expires_at = v_now + p_ttl WHERE name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_renew(p_name, p_owner, p_ttl, NULL) $$;

-- Release ends the tenure at once so that another owner need not wait for the
-- TTL. The row (and its token) stays so the next tenure's token is higher.
CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_now('p_now', p_now);

    SELECT * INTO v_lease FROM lease WHERE name = p_name AND owner = p_owner FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    UPDATE lease SET owner = NULL, expires_at = least(expires_at, v_now) WHERE name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_release(p_name, p_owner, NULL) $$;

CREATE OR REPLACE FUNCTION lease_release_owner(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    RETURN QUERY
    UPDATE lease
       SET owner = NULL,
           expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
    RETURNING name;
END
$$;

-- _lease_rows: the rows of the leases view, read as S_owner (SECURITY
-- DEFINER, like every function here). The view reads its table through it
-- because a monitor holds no privilege on any table, and on Citus a view's
-- tables are read with the privileges of the querying role, not the view's
-- owner (citusdata/citus#6161): `FROM lease` failed there for a monitor
-- login. The columns are spelled out, not RETURNS SETOF lease: with the
-- table's row type as its result, citus_distribute fails ("Citus can not
-- handle circular dependencies between distributed objects") when it
-- distributes the function. Granted to S_monitor
-- (the caller of a view needs EXECUTE on what it calls); it returns what
-- the view shows, no more.
CREATE OR REPLACE FUNCTION _lease_rows()
RETURNS TABLE (name text, owner text, token bigint, acquired_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT l.name, l.owner, l.token, l.acquired_at, l.expires_at FROM lease l $$;

CREATE OR REPLACE VIEW leases AS
SELECT name,
       owner,
       token,
       acquired_at,
       expires_at,
       (owner IS NOT NULL AND expires_at > clock_timestamp()) AS live
  FROM _lease_rows();
-- pgsweep:end functions/lease.sql

-- pgsweep:include functions/settings.sql
-- Settings shared by every instance (table setting). setting_set validates a
-- value against the row's kind and range and stores its normalised form; a
-- change is read by the next maintain pass and the runners' next sleep.

-- _setting_parse returns p_value normalised for setting s, or raises 22023
-- naming the setting and its range. Nothing is written here.
CREATE OR REPLACE FUNCTION _setting_parse(s setting, p_value text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_interval interval;
    v_int bigint;
    v_range text;
BEGIN
    IF s.kind = 'interval' THEN
        v_range := format('between %s and %s', _interval_text(s.min_value::interval), _interval_text(s.max_value::interval));
        IF s.infinite_ok THEN
            v_range := v_range || ', or infinite';
            IF lower(trim(p_value)) = 'infinite' THEN
                RETURN 'infinite';
            END IF;
        END IF;
        BEGIN
            v_interval := trim(p_value)::interval;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION '% must be an interval %, got %', s.name, v_range, quote_literal(p_value)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        IF v_interval IS NULL OR v_interval < s.min_value::interval OR v_interval > s.max_value::interval THEN
            RAISE EXCEPTION '% must be %, got %', s.name, v_range,
                CASE WHEN p_value IS NULL THEN 'NULL' ELSE _interval_text(v_interval) END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN _interval_text(v_interval);
    END IF;

    v_range := format('between %s and %s', s.min_value, s.max_value);
    BEGIN
        v_int := trim(p_value)::bigint;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION '% must be an integer %, got %', s.name, v_range, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    PERFORM _check_int(s.name, v_int, s.min_value::bigint, s.max_value::bigint);
    RETURN v_int::text;
END
$$;

CREATE OR REPLACE FUNCTION _setting_row(p_name text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting;
BEGIN
    SELECT * INTO v FROM setting WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_name must be one of %, got %',
            (SELECT string_agg(name, ', ' ORDER BY name) FROM setting),
            coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

-- setting_set validates and stores a setting; it returns the stored
-- (normalised) value, e.g. setting_set('runner_interval', '00:00:30') = '30 seconds'.
CREATE OR REPLACE FUNCTION setting_set(p_name text, p_value text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_value text := _setting_parse(_setting_row(p_name), p_value);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v_value, updated_at = v_now WHERE name = p_name;
    RETURN v_value;
END
$$;

-- setting_reset puts a setting back to its default and returns it.
CREATE OR REPLACE FUNCTION setting_reset(p_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v.default_value, updated_at = v_now WHERE name = p_name;
    RETURN v.default_value;
END
$$;

CREATE OR REPLACE FUNCTION setting_get(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (_setting_row(p_name)).value;
END
$$;

-- Typed getters for SQL that uses settings. setting_interval returns NULL for
-- 'infinite' (keep forever), the same meaning NULL has in retention_register.
CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'interval' THEN
        RAISE EXCEPTION 'p_name must name an interval setting, % is an integer', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v.value = 'infinite' THEN
        RETURN NULL;
    END IF;
    RETURN v.value::interval;
END
$$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'integer' THEN
        RAISE EXCEPTION 'p_name must name an integer setting, % is an interval', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v.value::bigint;
END
$$;

-- _setting_rows: the rows of the settings view, read as S_owner (see
-- _lease_rows, lease.sql, for why a view reads its table through a
-- function).
CREATE OR REPLACE FUNCTION _setting_rows()
RETURNS TABLE (name text, value text, default_value text, kind text, min_value text, max_value text,
               infinite_ok boolean, description text, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.name, s.value, s.default_value, s.kind, s.min_value, s.max_value, s.infinite_ok, s.description, s.updated_at
      FROM setting s
$$;

CREATE OR REPLACE VIEW settings AS
SELECT name,
       value,
       default_value,
       kind,
       CASE WHEN infinite_ok THEN format('%s .. %s, or infinite', min_value, max_value)
            ELSE format('%s .. %s', min_value, max_value) END AS range,
       description,
       updated_at
  FROM _setting_rows();
-- pgsweep:end functions/settings.sql

-- pgsweep:include functions/queue_stats.sql
-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due
--                       and those waiting in their lane behind its head)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row that a claim could take: pending or failed and
--                       visible now, not waiting in a lane; NULL when none
--                       (a lane's wait shows in lane_stats, lane.sql)
--   paused              queue_pause'd: claims return nothing (queue_ops.sql)
--   lanes               lanes with messages, or blocked (lane.sql)
--   blocked_lanes       lanes stopped by a dead letter (lane_dead 'block'),
--                       waiting for dead_requeue or lane_skip
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, _queue_stats, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION _queue_stats(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval, lanes bigint, blocked_lanes bigint)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now
                                       AND m.parked_until IS DISTINCT FROM 'infinity')
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    SELECT count(*), count(*) FILTER (WHERE l.blocked_id IS NOT NULL) INTO lanes, blocked_lanes
      FROM lane l WHERE l.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

-- _queue_rows: the queues as queue_stats shows them, read as S_owner (see
-- _lease_rows, lease.sql, for why a view reads its table through a
-- function). `WHERE queue = 'x'` on the view still filters the queues
-- before _queue_stats is called: the filter applies to this function's
-- rows.
CREATE OR REPLACE FUNCTION _queue_rows()
RETURNS TABLE (name text, kind text, paused boolean)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT q.name, q.kind, q.paused FROM queue q $$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age,
       q.paused,
       s.lanes,
       s.blocked_lanes
  FROM _queue_rows() q
 CROSS JOIN LATERAL _queue_stats(q.name) s;
-- pgsweep:end functions/queue_stats.sql

-- pgsweep:include functions/citus.sql
-- Citus: pgsweep scaled out over worker nodes (docs/operations.md, "Scaling
-- out with Citus").
--
-- citus_distribute(), called on the Citus coordinator after a migration (also
-- `pgsweep migrate --citus`), makes an install distributed:
--   * message tables -- every table whose primary key leads with a text
--     column named queue: message, message_processed, message_dead,
--     claim_cursor, queue_recovery, lane -- are distributed by queue,
--     colocated with message: all rows of one queue live in one shard group,
--     on one worker;
--   * the bookkeeping of retention and maintenance (retention_policy,
--     retention_sweep, retention_unit, retention_pass, maintain_state,
--     maintain_pass, maintain_run) and tern's schema_version stay plain
--     tables of the coordinator: maintain() and retention_run run there, and
--     nothing on a worker reads them (see _citus_tables for why not
--     reference tables);
--   * every other table (queue, lease, setting, installed_role) becomes a
--     reference table: a copy on every node, so a verb running on a worker
--     reads its queue's settings locally, and the lease rows -- the truth of
--     leadership -- are one table cluster-wide;
--   * every function is propagated to every node but those that read a
--     coordinator table or take its rows (version(), the retention and
--     maintenance internals), and the queue verbs
--     (_citus_delegated) are distributed with p_queue as the distribution
--     argument, colocated with message: `SELECT claim('orders', ...)` on the
--     coordinator runs, whole, on the worker that holds queue 'orders'; those
--     that may, also inside a transaction block (force_delegation; see
--     _citus_delegated for which, and why send is not one of them).
-- What the verbs may then do is what they already do (DESIGN.md, "Built to
-- scale out later"): every statement on a message table filters by one
-- queue, so it stays in the shard of the distribution argument.
--
-- Idempotent: it converts only what is not converted yet and reports every
-- object with what it did. Call it again after every migration: a table or
-- function a later migration added is distributed by the same rules (DDL on
-- tables and functions that are already distributed is propagated by Citus
-- itself). Without Citus, or with a NOLOGIN owner role, it raises 55000 and
-- says what to do.
--
-- Who may call it: S_admin. It runs as S_owner, which owns every table and
-- function it converts; Citus opens its connections to the workers as that
-- role, so S_owner must be able to log in there (_citus_owner_can_login).

-- _citus_available: is the citus extension installed in this database?
CREATE OR REPLACE FUNCTION _citus_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') $$;

-- _citus_require raises 55000 (object_not_in_prerequisite_state) unless this
-- is a Citus coordinator. Citus functions are reached through EXECUTE only,
-- so this file installs everywhere.
CREATE OR REPLACE FUNCTION _citus_require()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_coordinator boolean;
BEGIN
    IF NOT _citus_available() THEN
        RAISE EXCEPTION 'citus_distribute needs the Citus extension in database %, and it is not installed',
            quote_ident(current_database())
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install Citus (its own packages, https://docs.citusdata.com), put citus first in shared_preload_libraries on the coordinator and every worker, CREATE EXTENSION citus in this database on each of them, register the workers on the coordinator with citus_add_node, then call citus_distribute() again on the coordinator.';
    END IF;
    EXECUTE 'SELECT pg_catalog.citus_is_coordinator()' INTO v_coordinator;
    IF NOT v_coordinator THEN
        RAISE EXCEPTION 'citus_distribute must run on the Citus coordinator, and database % on this server is not one',
            quote_ident(current_database())
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Connect to the coordinator (the node where citus_add_node registered the workers) and call it there.';
    END IF;
END
$$;

-- _citus_tables: how each table of the schema is placed.
--   'distributed'  the message tables: primary key leading with a text column
--                  named queue;
--   'local'        tern's schema_version and the retention and maintenance
--                  bookkeeping (retention_*, maintain_*): they stay plain
--                  tables of the coordinator. As reference tables they would
--                  deadlock: Citus keeps the copies of a reference table
--                  alike by taking a cluster-wide lock on the whole table for
--                  every UPDATE and DELETE (and, for a foreign key, on the
--                  table it references), so parallel cleaners that record
--                  their units and passes in those tables in different orders
--                  deadlock on those locks -- eight cleaners of one policy
--                  did, six of them, in TestCitusRetentionCAP. As coordinator
--                  tables they take row locks, as on one server; only the
--                  coordinator runs maintain() and retention_run, and no verb
--                  on a worker reads them. A table that references a table
--                  Citus manages cannot stay local (Citus would turn it into
--                  a "Citus local table", a new table in its place): it is
--                  made a reference table instead;
--   'reference'    the rest: queue (read by every verb, on the workers), lease,
--                  setting, installed_role -- written one row at a time.
-- p_order is the order of conversion: message first among the distributed
-- ones (the colocation group's anchor), then by depth in the foreign keys.
CREATE OR REPLACE FUNCTION _citus_tables(OUT table_name text, OUT placement text, OUT p_order int)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE t AS (
        SELECT c.oid, c.relname::text AS relname,
               CASE WHEN c.relname = 'schema_version' THEN 'local'
                    WHEN (c.relname LIKE 'retention\_%' OR c.relname LIKE 'maintain\_%')
                         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint f
                                           JOIN pg_catalog.pg_class r ON r.oid = f.confrelid
                                          WHERE f.contype = 'f' AND f.conrelid = c.oid
                                            AND NOT (r.relname LIKE 'retention\_%' OR r.relname LIKE 'maintain\_%'))
                    THEN 'local'
                    WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                                  WHERE i.indrelid = c.oid AND i.indisprimary
                                    AND a.attname = 'queue' AND a.atttypid = 'pg_catalog.text'::pg_catalog.regtype)
                    THEN 'distributed'
                    ELSE 'reference' END AS placement
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    ), fk AS (
        SELECT con.conrelid AS child, con.confrelid AS parent
          FROM pg_catalog.pg_constraint con
         WHERE con.contype = 'f' AND con.conrelid <> con.confrelid
           AND con.conrelid IN (SELECT oid FROM t) AND con.confrelid IN (SELECT oid FROM t)
    ), depth AS (
        SELECT t.oid, 0 AS d FROM t
        UNION ALL
        SELECT fk.child, depth.d + 1 FROM depth JOIN fk ON fk.parent = depth.oid WHERE depth.d < 100
    )
    SELECT t.relname, t.placement,
           (max(depth.d) * 10 + CASE WHEN t.relname = 'message' THEN 0 WHEN t.placement = 'distributed' THEN 1 ELSE 0 END)::int
      FROM t JOIN depth ON depth.oid = t.oid
     GROUP BY t.relname, t.placement
     ORDER BY 3, 1
$$;

-- _citus_delegated: the functions distributed with p_queue as their
-- distribution argument -- every function of the schema with a text
-- argument named p_queue (the queue verbs, their p_now overloads for tests,
-- queue_recover, _queue_stats, lane_stats, and whatever verb a later
-- migration adds) but those that write a reference table (queue_create,
-- queue_configure, queue_pause, queue_resume, queue_drop: changing the
-- queues is the coordinator's business, and a forced call could not) and
-- _queue_get, which only reads the queue's row (a reference table, read
-- locally wherever it runs).
--
-- force: delegated also inside a transaction block (force_delegation). Only
-- where that is safe, and only there is it worth anything: outside a
-- transaction block every delegated verb runs on its worker anyway, and
-- inside one a verb run on the coordinator reads the queue (a reference
-- table) from the coordinator's own copy and sends each statement on a
-- message table to the queue's shard -- one round trip for renew, complete
-- or release, a few for claim or an inbox send. Not forced:
--   * the verbs that NOTIFY (send, send_batch, release, dead_requeue: their
--     body calls pg_notify). Run on a worker inside a transaction that also
--     wrote on another node -- the outbox pattern: the application's rows and
--     the send in one transaction -- they would make the commit fail, since
--     PostgreSQL cannot PREPARE (two-phase commit) a transaction that ran
--     NOTIFY. Unforced, inside a transaction they run on the coordinator: the
--     message's INSERT goes to the queue's shard in the same distributed
--     transaction, and the notification is sent by the coordinator, where
--     the Workers LISTEN.
--   * claim: it reads its queue and its claim cursor in one statement
--     (queue LEFT JOIN claim_cursor ON c.queue = q.name WHERE q.name =
--     p_queue), and a forced call may only run statements whose queue Citus
--     reads off their own WHERE clause ("queries must filter by the
--     distribution argument ..."). Once claim reads the cursor in a statement
--     of its own (WHERE c.queue = p_queue), drop it from this list. (Done in
--     0.22: claim reads the queue and its cursor in two statements.)
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.prosrc !~ '\mpg_notify\M'
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.unnest(p.proargnames) WITH ORDINALITY a(name, n)
     WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
       AND p.prokind = 'f'
       AND a.name = 'p_queue'
       AND a.n <= p.pronargs
       AND (p.proargmodes IS NULL OR p.proargmodes[a.n] IN ('i', 'b'))
       AND p.proargtypes[a.n - 1] = 'pg_catalog.text'::pg_catalog.regtype
       AND p.proname <> '_queue_get'
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'reference'
                          AND p.prosrc ~* ('\m(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+' || t.table_name || '\M'))
     ORDER BY 1
$$;

-- _citus_owner_can_login raises 55000 unless S_owner may log in. Citus opens
-- its connections to the other nodes as the role that runs the statement,
-- and pgsweep's functions run as S_owner (SECURITY DEFINER): a NOLOGIN owner
-- fails every statement the coordinator sends to a worker ("role ... is not
-- permitted to log in"; citusdata/citus#7719).
CREATE OR REPLACE FUNCTION _citus_owner_can_login()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner text := (_role_names()).owner_role;
BEGIN
    IF NOT coalesce((SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.rolname = v_owner), false) THEN
        RAISE EXCEPTION 'citus_distribute needs role % to log in: Citus connects to the workers as the role that runs a statement, and pgsweep''s functions run as %', v_owner, v_owner
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = pg_catalog.format('As a superuser on the coordinator: ALTER ROLE %I LOGIN (Citus propagates it to the workers). Give it no password the applications know: let the nodes authenticate it to each other (pg_hba.conf for the nodes'' addresses, certificates in citus.node_conninfo, or a password in pg_dist_authinfo).', v_owner);
    END IF;
END
$$;

-- citus_distribute: see the top of this file. Returns one row per table and
-- function: what it is (table, function), its placement (distributed by
-- queue, reference, local, delegated by p_queue, on every node) and whether
-- this call changed it.
--
-- Foreign keys between pgsweep's tables (claim_cursor -> queue, the retention
-- and maintenance bookkeeping) are dropped before the tables are converted
-- and added again, with their names and definitions, after: otherwise Citus
-- turns a table that references a new reference table into a "Citus local
-- table" on the spot, which renames the table to a shard and puts a new
-- table (a new row type) in its place -- the functions that take
-- retention_sweep or retention_unit rows would then name the shard's type.
-- Converted this way, every table keeps its oid and row type.
--
-- The schema's views are dropped before the tables are converted and created
-- again after, on the coordinator only (citus.enable_ddl_propagation off),
-- with their definitions, comments and grants (_view_grants). They are read
-- on the coordinator, never by a verb on a worker. Left in place, Citus would
-- copy every view over a converted table to the workers with the view's
-- dependencies -- and retention_passes reads pg_catalog.pg_stat_activity,
-- which Citus then tries to create on the workers: only a superuser may.
-- The same happens when there is no table to convert but Citus has copied a
-- view to the workers anyway: a migration's CREATE OR REPLACE VIEW on a
-- distributed install propagates the view and the functions it calls (025:
-- leases, settings, queue_stats). Dropped (on the workers too) and created
-- again on the coordinator alone, the views of an upgraded install are
-- where a fresh install's are.
CREATE OR REPLACE FUNCTION citus_distribute()
RETURNS TABLE (object_kind text, object_name text, placement text, changed boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_message text := pg_catalog.format('%I.%I', pg_catalog.current_schema(), 'message');
    v_rel text;
    r record;
    v_method "char";
    v_repmodel "char";
    v_colocation int;
    v_message_colocation int;
    v_pending text[];
    v_converted text[] := '{}';
    v_fk_rel text[];
    v_fk_name text[];
    v_fk_def text[];
    v_views text[];
    v_view_defs text[];
    v_view_opts text[];
    v_view_comments text[];
    v_left int[];
    v_again int[];
    v_ddl text;
    i int;
BEGIN
    PERFORM _citus_require();
    PERFORM _citus_owner_can_login();
    -- Foreign keys between distributed and reference tables, in one
    -- transaction with the conversions: one connection per node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- The tables still to convert, and the foreign keys that touch them.
    SELECT pg_catalog.array_agg(t.table_name) INTO v_pending
      FROM _citus_tables() t
      LEFT JOIN pg_catalog.pg_dist_partition d
             ON d.logicalrelid = pg_catalog.format('%I.%I', v_schema, t.table_name)::pg_catalog.regclass
     WHERE (t.placement = 'reference' AND (d.partmethod IS DISTINCT FROM 'n' OR d.repmodel IS DISTINCT FROM 't'))
        OR (t.placement = 'distributed' AND d.partmethod IS DISTINCT FROM 'h');
    SELECT pg_catalog.array_agg(f.rel ORDER BY f.conname), pg_catalog.array_agg(f.conname ORDER BY f.conname),
           pg_catalog.array_agg(f.def ORDER BY f.conname)
      INTO v_fk_rel, v_fk_name, v_fk_def
      FROM (SELECT c.conrelid::pg_catalog.regclass::text AS rel, c.conname::text AS conname,
                   pg_catalog.pg_get_constraintdef(c.oid) AS def
              FROM pg_catalog.pg_constraint c
              JOIN pg_catalog.pg_class ch ON ch.oid = c.conrelid
              JOIN pg_catalog.pg_class pa ON pa.oid = c.confrelid
             WHERE c.contype = 'f'
               AND ch.relnamespace = v_schema::pg_catalog.regnamespace
               AND (ch.relname = ANY (v_pending) OR pa.relname = ANY (v_pending))) f;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk_rel[i], v_fk_name[i]);
    END LOOP;
    IF v_pending IS NOT NULL
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND o.objid = c.oid AND o.objsubid = 0
                   WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v') THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v';
        IF v_views IS NOT NULL THEN
            EXECUTE 'DROP VIEW ' || (SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I', v_schema, v), ', ')
                                       FROM pg_catalog.unnest(v_views) v);
        END IF;
    END IF;

    -- Tables, message first.
    FOR r IN SELECT t.table_name, t.placement FROM _citus_tables() t ORDER BY t.p_order, t.table_name LOOP
        v_rel := pg_catalog.format('%I.%I', v_schema, r.table_name);
        SELECT d.partmethod, d.repmodel, d.colocationid INTO v_method, v_repmodel, v_colocation
          FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
        object_kind := 'table';
        object_name := r.table_name;
        changed := false;
        IF r.placement = 'local' THEN
            placement := 'local (coordinator)';
        ELSIF r.placement = 'reference' THEN
            placement := 'reference';
            IF v_method IS DISTINCT FROM 'n' OR v_repmodel IS DISTINCT FROM 't' THEN
                PERFORM pg_catalog.create_reference_table(v_rel::pg_catalog.regclass);
                v_converted := v_converted || v_rel;
                changed := true;
            END IF;
        ELSE
            placement := 'distributed by queue';
            IF r.table_name = 'message' THEN
                IF v_method IS DISTINCT FROM 'h' THEN
                    PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue');
                    v_converted := v_converted || v_rel;
                    changed := true;
                END IF;
                SELECT d.colocationid INTO v_message_colocation
                  FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
            ELSIF v_method IS DISTINCT FROM 'h' THEN
                PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue', colocate_with => v_message);
                v_converted := v_converted || v_rel;
                changed := true;
            ELSIF v_colocation IS DISTINCT FROM v_message_colocation THEN
                PERFORM pg_catalog.update_distributed_table_colocation(v_rel::pg_catalog.regclass, colocate_with => v_message);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;

    -- The rows a conversion copied into the shards stay behind, invisible, in
    -- the coordinator's own table: drop them.
    FOREACH v_rel IN ARRAY v_converted LOOP
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(v_rel::pg_catalog.regclass);
    END LOOP;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk_rel[i], v_fk_name[i], v_fk_def[i]);
    END LOOP;

    -- The views again, on the coordinator only; a view over another view
    -- waits for it (the order of creation is not always the order of the
    -- dependencies: CREATE OR REPLACE may have changed them).
    IF v_views IS NOT NULL THEN
        v_ddl := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        v_left := ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(v_views)));
        WHILE pg_catalog.cardinality(v_left) > 0 LOOP
            v_again := '{}';
            FOREACH i IN ARRAY v_left LOOP
                BEGIN
                    EXECUTE pg_catalog.format('CREATE VIEW %I.%I%s AS %s', v_schema, v_views[i], v_view_opts[i], v_view_defs[i]);
                    IF v_view_comments[i] IS NOT NULL THEN
                        EXECUTE pg_catalog.format('COMMENT ON VIEW %I.%I IS %L', v_schema, v_views[i], v_view_comments[i]);
                    END IF;
                EXCEPTION WHEN undefined_table THEN
                    v_again := v_again || i;
                END;
            END LOOP;
            IF pg_catalog.cardinality(v_again) = pg_catalog.cardinality(v_left) THEN
                RAISE EXCEPTION 'citus_distribute could not create the views % again', v_views
                    USING ERRCODE = 'internal_error';
            END IF;
            v_left := v_again;
        END LOOP;
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', v_ddl, true);
        FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g WHERE g.view_name = ANY (v_views) LOOP
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END LOOP;
    END IF;

    -- Functions: the verbs by p_queue (forced where _citus_delegated says);
    -- every other routine on every node (a delegated verb calls them there)
    -- but those that read a coordinator table or take its rows: they stay
    -- on the coordinator, where maintain() and retention_run call them.
    FOR r IN SELECT p.oid, p.oid::pg_catalog.regprocedure::text AS sig, d.arg_index, d.force,
                    o.distribution_argument_index AS cur_arg, o.colocationid AS cur_colocation,
                    coalesce(o.force_delegation, false) AS cur_force, o.objid IS NOT NULL AS is_distributed,
                    EXISTS (SELECT 1 FROM _citus_tables() t
                              JOIN pg_catalog.pg_class c
                                ON c.relname = t.table_name AND c.relnamespace = v_schema::pg_catalog.regnamespace
                             WHERE t.placement = 'local'
                               AND (p.prosrc ~ ('\m' || t.table_name || '\M')
                                    OR c.reltype = ANY (p.proargtypes::pg_catalog.oid[] || p.prorettype))) AS local_only
               FROM pg_catalog.pg_proc p
               LEFT JOIN _citus_delegated() d ON d.routine = p.oid
               LEFT JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = p.oid AND o.objsubid = 0
              WHERE p.pronamespace = v_schema::pg_catalog.regnamespace
              ORDER BY 2 LOOP
        object_kind := 'function';
        object_name := r.sig;
        changed := false;
        IF r.arg_index IS NOT NULL THEN
            placement := CASE WHEN r.force THEN 'delegated by p_queue' ELSE 'delegated by p_queue (not in transaction blocks)' END;
            IF NOT r.is_distributed OR r.cur_arg IS DISTINCT FROM r.arg_index
               OR r.cur_colocation IS DISTINCT FROM v_message_colocation OR r.cur_force IS DISTINCT FROM r.force THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure, '$' || (r.arg_index + 1),
                                                               colocate_with := v_message, force_delegation := r.force);
                changed := true;
            END IF;
        ELSIF r.local_only THEN
            placement := 'coordinator only';
        ELSE
            placement := 'on every node';
            IF NOT r.is_distributed OR r.cur_arg IS NOT NULL THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- pgsweep:end functions/citus.sql

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
        -- what the invoker functions (retention_register's wrappers, the
        -- retention steps, cron) call: argument checks, pure
        '_check_text', '_check_int', '_check_interval', '_interval_text', '_retention_invalid',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_retention_dropped', '_owner_role',
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_retention_run', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
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
