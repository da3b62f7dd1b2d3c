-- Scheduling maintain() with pg_cron, for databases that have it.
--
-- pg_cron lives in the one database named by cron.database_name. pgsweep does
-- not depend on it: these functions reach cron.* through EXECUTE only, so they
-- install everywhere, and without pg_cron they explain what to do instead.
-- The job name is unique per install schema, so scheduling again updates the
-- job (cron.schedule upserts by job name since pg_cron 1.4) and installs in
-- other schemas of the same database get their own job.

-- pg_cron job names are of type name (at most 63 bytes): a long schema name
-- is cut and made unique again with a hash of the full name.
CREATE OR REPLACE FUNCTION cron_job_name()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN octet_length(n) <= 63 THEN n ELSE left(n, 54) || ':' || left(md5(n), 8) END
      FROM (SELECT 'pgsweep-maintain:' || current_schema() AS n) x
$$;

-- cron_available: whether pg_cron is installed in this database.
CREATE OR REPLACE FUNCTION cron_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') $$;

-- cron_command: the job's command for a budget, the arguments checked
-- (22023). The cron functions run as their caller (pg_cron schedules as
-- current_user), so they call only such non-underscore routines.
CREATE OR REPLACE FUNCTION cron_command(p_schedule text, p_budget interval)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_schedule', p_schedule, 100);
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    RETURN format('CALL %I.maintain(%L, %L)', current_schema(), 'pg_cron', _interval_text(p_budget));
END
$$;

-- cron_schedule schedules CALL <schema>.maintain('pg_cron', p_budget) on
-- p_schedule (pg_cron syntax, e.g. '* * * * *') and returns the job id.
-- Scheduling again replaces the schedule and budget of the same job.
-- p_budget should stay below the schedule's period: pg_cron starts no second
-- run of a job while one is still running.
CREATE OR REPLACE FUNCTION cron_schedule(p_schedule text DEFAULT '* * * * *', p_budget interval DEFAULT '50 seconds')
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_command text := cron_command(p_schedule, p_budget);
BEGIN
    -- pg_cron's presence, checked here, as the caller: cron.database_name
    -- is a setting only superusers and pg_read_all_settings may read, which
    -- cron_command's role, <schema>_owner, is not.
    IF NOT cron_available() THEN
        RAISE EXCEPTION 'pg_cron is not installed in database %: install it there (CREATE EXTENSION pg_cron, in the database named by cron.database_name, now %) or run `pgsweep run` instead',
            pg_catalog.quote_ident(pg_catalog.current_database()),
            coalesce(pg_catalog.quote_literal(pg_catalog.current_setting('cron.database_name', true)), 'unset: pg_cron is not in shared_preload_libraries')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = '`pgsweep run --database-url URL` calls maintain() on an interval from outside the database; run it next to your applications, as many replicas as you like.';
    END IF;
    BEGIN
        EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_id USING cron_job_name(), p_schedule, v_command;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'p_schedule must be a pg_cron schedule such as ''* * * * *'', got %', pg_catalog.quote_literal(p_schedule)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;
    RETURN v_id;
END
$$;

-- cron_unschedule removes this schema's maintain job; false when there was
-- none (also when pg_cron is not installed: then nothing can be scheduled).
CREATE OR REPLACE FUNCTION cron_unschedule()
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT cron_available() THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT jobid FROM cron.job WHERE jobname = $1 AND username = current_user' INTO v_id USING cron_job_name();
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT cron.unschedule($1)' USING v_id;
    RETURN true;
END
$$;

-- cron_job shows this schema's maintain job, if any (no rows without pg_cron).
CREATE OR REPLACE FUNCTION cron_job(OUT jobid bigint, OUT schedule text, OUT command text, OUT active boolean)
RETURNS SETOF record
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF cron_available() THEN
        RETURN QUERY EXECUTE 'SELECT jobid, schedule, command, active FROM cron.job WHERE jobname = $1 AND username = current_user'
            USING cron_job_name();
    END IF;
END
$$;
