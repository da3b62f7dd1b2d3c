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
--     body calls pg_notify, or calls a function of the schema that does, as
--     send calls _send_one). Run on a worker inside a transaction that also
--     wrote on another node -- the outbox pattern: the application's rows and
--     the send in one transaction -- they would make the commit fail, since
--     PostgreSQL cannot PREPARE (two-phase commit) a transaction that ran
--     NOTIFY. Unforced, inside a transaction they run on the coordinator: the
--     message's INSERT goes to the queue's shard in the same distributed
--     transaction, and the notification is sent by the coordinator, where
--     the Workers LISTEN.
-- A forced call may only run statements whose queue Citus reads off their
-- own WHERE clause ("queries must filter by the distribution argument
-- ..."): that is why claim reads its queue and its claim cursor in two
-- statements, each filtered by p_queue, rather than in one join.
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE notifying(name) AS (
        -- the functions whose body calls pg_notify, or calls one of those;
        -- not _notify_local, which never notifies on Citus (flow.sql)
        SELECT p.proname::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ '\mpg_notify\M' AND p.proname <> '_notify_local'
        UNION
        SELECT p.proname::text FROM pg_catalog.pg_proc p, notifying n
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ ('\m' || n.name || '\s*\(')
    )
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.proname::text NOT IN (SELECT n.name FROM notifying n)
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
       -- a routine that reads a coordinator-only table (stats_history reads
       -- maintain_snapshot) runs where that table is, not on a worker
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'local' AND p.prosrc ~ ('\m' || t.table_name || '\M'))
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
-- distributed install propagates the view and the functions it calls
-- (leases, settings, queue_stats). Dropped (on the workers too) and created
-- again on the coordinator alone, the views of an upgraded install are
-- where a fresh install's are. The internal views (a name starting with _:
-- _queue_right_held, which the verbs read on the workers) are the exception:
-- they read only tables Citus places and pg_catalog, and stay where Citus
-- puts them, on every node.
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
                   WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
                     AND pg_catalog.left(c.relname, 1) <> '_') THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
           AND pg_catalog.left(c.relname, 1) <> '_'; -- not LIKE '\_%': with standard_conforming_strings off that is '_%'
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) c WHERE c LIKE 'plan_cache_mode=%') AS pins_plans,
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
        -- Custom plans on Citus: a routine that asks for generic ones (claim,
        -- claim.sql) gets the default back, on every node (Citus propagates
        -- the ALTER). Citus routes a statement to its shard by the queue's
        -- value, which a generic plan does not have ("could not create
        -- distributed plan").
        IF r.pins_plans THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET plan_cache_mode', r.sig);
            changed := true;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
