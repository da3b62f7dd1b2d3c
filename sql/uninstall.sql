-- pgsweep uninstall, for a DBA with psql and without the pgsweep binary.
--
--   psql -X -v schema=pgsweep -v force=0 -d "$DATABASE_URL" -f sql/uninstall.sql
--
-- Variables:
--   schema  the install schema (default pgsweep)
--   force   0 (default): refuse while the install holds messages not yet
--           delivered (pending, in flight, scheduled, waiting to retry);
--           1: drop them too. They are lost for good, with the dead
--           letters, processed inbox keys, leases, retention policies and
--           the maintenance history.
--
-- It does what `pgsweep uninstall --database-url URL --schema S [--force]`
-- does, in one transaction; on any error nothing is changed:
--   1. refuses a schema that does not exist or is not a pgsweep install (no
--      <schema>.schema_version table);
--   2. locks <schema>.message (waiting at most 10 s: stop the workers and
--      runners first) and refuses while it holds messages, unless force=1;
--   3. unschedules the install's pg_cron job (pgsweep-maintain:<schema>) when
--      pg_cron is installed in this database;
--   4. DROP SCHEMA <schema> CASCADE (CASCADE also drops objects elsewhere that
--      depend on pgsweep's, for example a view over queue_stats: the NOTICE
--      lists them);
--   5. for each role the install created (listed in <schema>.installed_role;
--      roles that existed before the install are kept): DROP OWNED BY, which
--      drops what it owns and revokes what it was granted in this database,
--      then DROP ROLE. A role that still has privileges or objects in another
--      database cannot be dropped: the script stops, names the role and the
--      databases, and changes nothing; run DROP OWNED BY <role> in each of
--      them and run the script again.
-- Run it as a superuser, or as the role that installed pgsweep (a member of
-- <schema>_owner) with CREATEROLE.
\set ON_ERROR_STOP on
\if :{?schema}
\else
\set schema pgsweep
\endif
\if :{?force}
\else
\set force 0
\endif

BEGIN;
SET LOCAL lock_timeout = '10s';
SELECT set_config('pgsweep.uninstall_schema', :'schema', true) AS pgsweep_uninstall_schema,
       set_config('pgsweep.uninstall_force', :'force', true) AS pgsweep_uninstall_force \gset

DO $uninstall$
DECLARE
    v_schema text := current_setting('pgsweep.uninstall_schema');
    v_force boolean;
    v_version int;
    v_pending bigint := 0;
    v_inflight bigint := 0;
    v_scheduled bigint := 0;
    v_retrying bigint := 0;
    v_dead bigint := 0;
    v_job text;
    v_id bigint;
    v_roles text[] := '{}';
    v_kept text[];
    v_role text;
    v_detail text;
BEGIN
    BEGIN
        v_force := current_setting('pgsweep.uninstall_force')::boolean;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION 'force must be 0 or 1, got %', current_setting('pgsweep.uninstall_force')
            USING ERRCODE = 'invalid_parameter_value';
    END;
    IF v_schema !~ '^[a-z_][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'schema %: must be lower-case letters, digits and _, at most 63 characters', quote_literal(v_schema)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Not while a migration of any schema runs (pgsweep migrate takes this lock).
    PERFORM pg_advisory_xact_lock(8099569411488575537);

    IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = v_schema) THEN
        RAISE EXCEPTION 'uninstall %: pgsweep is not installed there: schema % does not exist; nothing was changed', v_schema, v_schema
            USING ERRCODE = 'undefined_object';
    END IF;
    IF to_regclass(format('%I.schema_version', v_schema)) IS NULL THEN
        RAISE EXCEPTION 'uninstall %: pgsweep is not installed there: schema % has no %.schema_version table, so it is not a pgsweep install (uninstall drops only installs); nothing was changed',
            v_schema, v_schema, quote_ident(v_schema)
            USING ERRCODE = 'undefined_object';
    END IF;
    EXECUTE format('SELECT version FROM %I.schema_version', v_schema) INTO v_version;

    IF to_regclass(format('%I.message', v_schema)) IS NOT NULL THEN
        -- The lock keeps senders out between the count and the drop.
        EXECUTE format('LOCK TABLE %I.message IN ACCESS EXCLUSIVE MODE', v_schema);
        EXECUTE format($q$SELECT count(*) FILTER (WHERE status = 'pending' AND visible_at <= now()),
                                 count(*) FILTER (WHERE status = 'processing'),
                                 count(*) FILTER (WHERE status = 'pending' AND visible_at > now()),
                                 count(*) FILTER (WHERE status = 'failed')
                            FROM %I.message$q$, v_schema)
            INTO v_pending, v_inflight, v_scheduled, v_retrying;
        IF to_regclass(format('%I.message_dead', v_schema)) IS NOT NULL THEN
            EXECUTE format('SELECT count(*) FROM %I.message_dead', v_schema) INTO v_dead;
        END IF;
        IF v_pending + v_inflight + v_scheduled + v_retrying > 0 AND NOT v_force THEN
            RAISE EXCEPTION 'uninstall %: messages are pending: the schema holds % message(s) not yet delivered (% pending, % in flight, % scheduled, % waiting to retry); nothing was changed',
                v_schema, v_pending + v_inflight + v_scheduled + v_retrying, v_pending, v_inflight, v_scheduled, v_retrying
                USING ERRCODE = 'object_in_use',
                      HINT = format('Let the workers drain the queues (SELECT * FROM %I.queue_stats) and run the script again, or run it with -v force=1, which loses them for good, together with %s dead letter(s), the processed inbox keys, leases, retention policies and history.',
                                    v_schema, v_dead);
        END IF;
    END IF;

    -- The pg_cron job (cron_job_name()'s name, computed here so that it works on every version).
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
        v_job := 'pgsweep-maintain:' || v_schema;
        IF octet_length(v_job) > 63 THEN
            v_job := left(v_job, 54) || ':' || left(md5(v_job), 8);
        END IF;
        FOR v_id IN EXECUTE 'SELECT jobid FROM cron.job WHERE database = current_database() AND jobname = $1 ORDER BY jobid' USING v_job LOOP
            EXECUTE 'SELECT cron.unschedule($1::bigint)' USING v_id;
            RAISE NOTICE 'unscheduled pg_cron job % (%)', v_id, v_job;
        END LOOP;
    END IF;

    -- The roles the install created, read before their list goes with the schema.
    IF to_regclass(format('%I.installed_role', v_schema)) IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(array_agg(r.rolname::text ORDER BY r.rolname), ''{}'') FROM pg_roles r
                         WHERE r.rolname IN (SELECT role_name FROM %I.installed_role)', v_schema) INTO v_roles;
    END IF;
    SELECT array_agg(r.rolname::text ORDER BY r.rolname) INTO v_kept
      FROM pg_roles r
     WHERE r.rolname IN (v_schema || '_owner', v_schema || '_admin', v_schema || '_worker', v_schema || '_monitor')
       AND r.rolname::text <> ALL (v_roles);

    EXECUTE format('DROP SCHEMA %I CASCADE', v_schema);

    FOREACH v_role IN ARRAY v_roles LOOP
        EXECUTE format('DROP OWNED BY %I', v_role);
        BEGIN
            EXECUTE format('DROP ROLE %I', v_role);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
            RAISE EXCEPTION 'uninstall %: role % cannot be dropped: it still has privileges or objects in another database (%); nothing was changed',
                v_schema, v_role, replace(v_detail, E'\n', '; ')
                USING ERRCODE = 'dependent_objects_still_exist',
                      HINT = format('Connect to each database named there and run DROP OWNED BY %I (it revokes what the role was granted there and drops what it owns), then run this script again.', v_role);
        END;
    END LOOP;

    RAISE NOTICE 'pgsweep % uninstalled from schema %: % message(s) dropped, roles dropped: %, roles kept (they existed before the install): %',
        '0.' || v_version || '.0', v_schema, v_pending + v_inflight + v_scheduled + v_retrying,
        coalesce(nullif(array_to_string(v_roles, ', '), ''), 'none'), coalesce(array_to_string(v_kept, ', '), 'none');
END
$uninstall$;

COMMIT;
