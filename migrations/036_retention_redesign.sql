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
-- An invoker routine can call only what its caller may execute, so none of
-- them calls an underscore routine (but _grant_all, which is S_owner's).
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY[
        -- the owner proofs: the caller's role becomes (or must own) the policy (retention_register.sql)
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_resolve_table',
        -- the step that runs a statement as the policy's owner (retention_sql.sql)
        'retention_step', '_grant_all',
        -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
        'cron_schedule', 'cron_unschedule', 'cron_job',
        -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
        'maintain_step_traffic']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so _grant_all leaves out a
-- signature that takes p_now when the routine has one without it).
-- Internals are the owner's: _grant_all refuses to grant a routine whose
-- name starts with an underscore (docs/security.md, "Internals are the
-- owner's").
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        'queue_info', -- the Worker reads the queue's lease_default and max_attempts (no payloads; consume, queue_rights.sql)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'queue_grant', 'queue_revoke', 'queue_rights', -- per-queue rights (queue_rights.sql)
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker wrappers call: the owner proof's definer halves
        -- (retention_register.sql) and the pg_cron command (cron.sql)
        'retention_register_proved', 'retention_unregister_proved', 'retention_set_filter_proved',
        'retention_set_lease_ttl_proved', 'retention_set_strategy_proved', 'retention_set_time_zone_proved',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step_recovery', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'maintain_fail_owner', -- the runner: a pass whose session is gone
        'retention_step_begin', 'retention_step', 'retention_step_claim', 'retention_step_record',
        'retention_step_end', 'retention_step_unlock', 'retention_step_pass', 'retention_step_session_state', 'retention_step_session_restore']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'version',
        'lease_rows', 'setting_rows', 'queue_rows']) r -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
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
-- run deletes as that role (retention_sql.sql, retention_step). Only its
-- owner, or a member of it, changes it, unregisters it or registers its
-- name again (42501 otherwise, nothing changed); built-in policies
-- (retention_builtin.sql, names under 'pgsweep.') belong to pgsweep and no
-- caller changes them, a superuser included.
--
-- A SECURITY DEFINER function cannot see the role that called it, and a
-- role name passed in could be anyone's; so the caller proves who it is:
-- every entry point below (retention_register, retention_unregister,
-- retention_set_*) runs as its caller and creates an empty temporary table
-- (pg_temp.pgsweep_owner_proof_<random>), which only the calling role can
-- have created and which PostgreSQL records as owned by it; its SECURITY
-- DEFINER half (retention_*_proved) takes the calling role from that
-- table's owner, accepting only such a table of this session
-- (_retention_proof_role); then the wrapper drops it (an error in between
-- rolls its creation back: a proof exists only while its own call runs,
-- and no other code runs then). Code running as another role in the same
-- session (a SECURITY DEFINER trigger of a hostile admin, say) can prove
-- only its own role, never the session's. The owner needs SELECT and
-- DELETE on the table (42501 otherwise); pgsweep's own tables cannot be
-- registered (the built-in policies cover them).

-- _retention_proof_role: the role that created the proof table p_proof of
-- this session (42501 when it is not one).
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

-- _retention_builtin_name: whether p_name is reserved for a built-in policy.
CREATE OR REPLACE FUNCTION _retention_builtin_name(p_name text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT coalesce(pg_catalog.starts_with(p_name, 'pgsweep.'), false) $$;

-- _retention_policy_owned: the policy p_name for a change by p_role (FOR NO
-- KEY UPDATE), or NULL when there is none (p_must: 22023 instead); 42501
-- when the name is a built-in's or the policy belongs to a role p_role is
-- not a member of.
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
    IF _retention_builtin_name(p_name) AND p_role IS DISTINCT FROM _owner_role() THEN
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
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    PERFORM retention_register_proved(pg_catalog.to_regclass(v_proof), p_name, p_table, p_time_column, p_older_than,
                                      p_status_column, p_statuses, p_batch_size, p_mode, p_interval);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

-- retention_register_proved: retention_register's SECURITY DEFINER half.
CREATE OR REPLACE FUNCTION retention_register_proved(p_proof regclass, p_name text, p_table regclass, p_time_column text,
    p_older_than interval, p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole := _retention_proof_role(p_proof, 'retention_register');
BEGIN
    PERFORM _retention_policy_owned('retention_register', p_name, v_owner, false);
    PERFORM _retention_policy_put(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                  p_batch_size, p_mode, p_interval, v_owner, false);
END
$$;

-- _retention_policy_put validates and stores a policy for p_owner. Only
-- SECURITY DEFINER code calls it (retention_register_proved, the built-in sync):
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

-- retention_table_name_check: the name rule (validate.sql, at most 300
-- characters) on a table name given as text. retention_resolve_table runs
-- as its caller, so it cannot call _check_text (no role but S_owner
-- executes an underscore routine): it calls this SECURITY DEFINER half.
CREATE OR REPLACE FUNCTION retention_table_name_check(p_table text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_table', p_table, 300);
END
$$;

-- retention_resolve_table resolves a table name on the given search_path
-- (the caller's: it runs as its caller, since schemas the caller may use
-- are searched only if the role that looks may use them too), or raises
-- 22023 naming p_table. It calls only pg_catalog and the definer
-- retention_table_name_check: an invoker routine calls nothing its caller
-- could not. p_search_path is only set for the lookup (and restored): it
-- is the caller's own setting, never stored nor shown.
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
            PERFORM pg_catalog.set_config('search_path', v_pinned, true);
        EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
            v_rel := NULL;
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

-- The same, for a table given by name, resolved on the CALLER's
-- search_path like every PostgreSQL command (retention_register('x',
-- 'orders_archive', ...) finds public.orders_archive). This overload pins no
-- search_path so that it can read the caller's; its body is one call with
-- every name schema-qualified, and the lookup itself runs in
-- retention_resolve_table, which pins its own path and only resolves the
-- name. A name that resolves to no table is a 22023 naming p_table. A
-- string literal argument resolves to this overload.
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

-- retention_unregister removes a policy (its owner's, or a member's: see
-- above); false when there was none.
CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_result boolean;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    v_result := retention_unregister_proved(pg_catalog.to_regclass(v_proof), p_name);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
    RETURN v_result;
END
$$;

CREATE OR REPLACE FUNCTION retention_unregister_proved(p_proof regclass, p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _retention_policy_owned('retention_unregister', p_name, _retention_proof_role(p_proof, 'retention_unregister'), false)
       IS NULL THEN
        RETURN false;
    END IF;
    RETURN _retention_unregister(p_name);
END
$$;

-- _retention_unregister: the policy removed, whoever owns it (the built-in
-- sync; retention_unregister checks the caller first).
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

-- The time zone in which a timestamp-without-time-zone (or date) column is
-- read: CAP writes local times. NULL: the database's TimeZone at run time.
-- A zone whose UTC offset ever exceeds 15 hours ('UTC-99') is refused.
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

-- An extra fixed filter: only rows whose p_column is one of p_values are
-- deleted. pgsweep's built-in policies use it for per-queue periods
-- (queue = 'orders'). p_column NULL removes the filter.
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

CREATE OR REPLACE FUNCTION retention_set_filter_proved(p_proof regclass, p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _retention_policy_owned('retention_set_filter', p_name, _retention_proof_role(p_proof, 'retention_set_filter'), true);
    PERFORM _retention_set_filter(p_name, p_column, p_values);
END
$$;

-- _retention_set_filter sets a policy's filter, whoever owns it (the
-- built-in sync; retention_set_filter checks the caller first). The values
-- are checked against the column's BASE type (_retention_column): reading
-- them runs no domain CHECK and no function of any role.
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

-- How a sweep walks the table: 'auto' (the default) picks per sweep, see
-- _retention_plan; 'tid_range' or 'keyset' force one.
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

-- The TTL of an exclusive policy's lease retention:<name>: how long another
-- cleaner waits after a crash. A live cleaner renews it every third of it.
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

CREATE OR REPLACE FUNCTION retention_set_lease_ttl_proved(p_proof regclass, p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_owned('retention_set_lease_ttl', p_name, _retention_proof_role(p_proof, 'retention_set_lease_ttl'), true);
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
-- Values travel as parameters, never as SQL text; names through %I. (One
-- exception: the read a batch on a shard of a distributed (Citus) table
-- sends to the shard's worker takes literals, format %L: it goes there as
-- text. Its DELETE takes parameters like every other; retention_shards.sql.)
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

-- _retention_predicate_with is the same test over the given SQL for the
-- cutoff, the statuses and the filter values: parameters ($3..$5), or
-- literals for a statement sent as text to another node (a shard's batch,
-- _retention_shard_body).
CREATE OR REPLACE FUNCTION _retention_predicate_with(p_pol retention_policy, p_rel regclass,
    p_cutoff text, p_statuses text, p_filters text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, p_cutoff));
    v_col record;
BEGIN
    IF p_pol.status_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.status_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.status_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY (%s::%s[])', p_pol.status_column, p_statuses, v_col.type_sql);
    END IF;
    IF p_pol.filter_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.filter_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.filter_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY (%s::%s[])', p_pol.filter_column, p_filters, v_col.type_sql);
    END IF;
    RETURN v_sql;
END
$$;

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT _retention_predicate_with(p_pol, p_rel, '$3', '$4', '$5') $$;

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

-- Running a policy's statements as its owner (docs/security.md, "Running
-- as the owner" and "Nothing the owner's code does may outlive its
-- statement"). Every statement on the policy's table runs as the policy's
-- owner (or the table's, _retention_run_role), so its privileges, row-level
-- security and triggers apply to that role, never to whoever runs
-- maintenance. SET ROLE is not enough (the owner's trigger could RESET
-- ROLE), so retention_step creates a SECURITY DEFINER function owned by
-- that role in this session's pg_temp, built now from validated policy
-- fields, calls it once and drops it, all in the caller's transaction; the
-- caller must be able to act as the owner (else 42501 naming the GRANT).
-- Around the call, retention_step checks that the owner's code left the
-- session as it found it -- search_path, every setting, the prepared
-- statements, retention_policy and the catalogs' new objects
-- (retention_step_session_state) -- and otherwise rolls the batch back with
-- 42501. Built-in policies (pgsweep's own tables) run in
-- _retention_builtin_exec instead, as <schema>_owner: no code of another
-- role runs there.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text, p_target regclass DEFAULT NULL)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        -- a drop unit's two steps (retention_partition.sql): detach leaves,
        -- later drop the detached tables; bodies built from the catalog there
        WHEN 'detach' THEN p_sql
        WHEN 'release' THEN p_sql
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

-- retention_step_session_state: what retention_step compares before and
-- after a statement run as a policy's owner. settings: every setting the
-- server shows this function's owner (SHOW ALL: a release's new settings
-- and a loaded library's included, no list to keep), but search_path,
-- which is pinned here (the caller compares its own). SHOW ALL rather than
-- pg_settings: the view costs several times more a call, and a setting no
-- session can change does not change within a statement either.
-- prepared: the session's prepared statements (name and text); writes:
-- rows this transaction wrote to retention_policy and inserted into
-- pg_class, pg_type and pg_proc (a new table, view, type or function), from
-- the transaction's statistics counters, or, with track_counts off, a
-- digest of the policies and of this session's temporary objects.
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

-- retention_step_session_restore deletes the prepared statements that are not
-- in p_prepared (as retention_step_session_state lists them): a statement run
-- as a policy's owner made them, and they outlive a rollback. It returns
-- their names.
CREATE OR REPLACE FUNCTION retention_step_session_restore(p_prepared text[])
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

-- retention_step does one step of a pass: at most one batch. It returns
-- false when the pass is over (outcome recorded), true to be called again.
-- It runs as its caller (SECURITY INVOKER): the statement on the policy's
-- table runs as the table's owner (or the policy's, see retention_step_claim)
-- in a temporary SECURITY DEFINER function owned by that role, which only a
-- caller that can act as it may create. Everything else happens in two
-- SECURITY DEFINER step routines, each of which checks that this session
-- opened the pass: retention_step_claim (which unit, the statement built
-- now from the stored policy and the catalog, the cutoff capped at now()
-- minus the policy's older_than) and retention_step_record (what the
-- statement did, for the unit the claim handed out and no other). The
-- caller may call either one alone, in any order: a claim not recorded is
-- void at the next claim, a record without a claim changes nothing.
CREATE OR REPLACE FUNCTION retention_step(p_pass bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_sig text;
    v_path text;
    v_before record;
    v_after record;
    v_changed text;
    v_deleted bigint;
    v_fraction double precision;
    v_sampled bigint;
    v_times timestamptz[];
BEGIN
    v := retention_step_claim(p_pass);
    IF v.o_kind IS NULL THEN
        RETURN v.o_more;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, v.o_role, 'MEMBER') THEN
        RAISE EXCEPTION 'retention policy %: % cannot act as %', v.o_policy, current_user,
            CASE WHEN v.o_role = v.o_owner THEN pg_catalog.format('the policy''s owner %s', v.o_role)
                 ELSE pg_catalog.format('%s, the owner of its table', v.o_role) END
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Run maintenance as a role that can act as %s: GRANT %I TO %I.',
                                           v.o_role, v.o_role::text, current_user);
    END IF;
    BEGIN
        IF v.o_kind = 'detach' THEN
            -- recorded first, as if every leaf will be detached: from the
            -- parent's lock to the commit only the rows are left to add
            PERFORM retention_step_record(p_pass, 'detaching', NULL, NULL, NULL, NULL);
        END IF;
        v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v.o_type, v.o_type);
        EXECUTE pg_catalog.format(
            'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
            'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L', v_sig, v.o_settings, v.o_body);
        EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, v.o_role::text);
        v_path := pg_catalog.current_setting('search_path');
        v_before := retention_step_session_state();
        BEGIN
            EXECUTE pg_catalog.format('SELECT * FROM pg_temp.pgsweep_retention_as_owner($1::%s, $2::%s, $3, $4, $5)',
                                      v.o_type, v.o_type)
               INTO v_deleted, v_fraction, v_sampled, v_times
              USING v.o_lo, v.o_hi, v.o_cutoff, v.o_statuses, v.o_filters;
        EXCEPTION WHEN OTHERS OR query_canceled THEN
            -- Rolled back with the block: settings, objects, rows. Not prepared statements.
            PERFORM retention_step_session_restore(v_before.prepared);
            RAISE;
        END;
        -- The owner's code may have set search_path for the session: compare it
        -- before any name is looked up again (pg_catalog only, no operator).
        IF NOT pg_catalog.texteq(pg_catalog.current_setting('search_path'), v_path) THEN
            v_changed := 'search_path';
        ELSE
            v_after := retention_step_session_state();
            v_changed := CASE
                WHEN v_after.settings IS DISTINCT FROM v_before.settings THEN
                    'settings ' || (SELECT pg_catalog.string_agg(pg_catalog.split_part(a.s, '=', 1), ', ')
                                      FROM pg_catalog.unnest(v_after.settings) a(s) WHERE NOT a.s = ANY (v_before.settings))
                WHEN v_after.prepared IS DISTINCT FROM v_before.prepared THEN 'prepared statements'
                WHEN v_after.writes IS DISTINCT FROM v_before.writes THEN 'retention policies or database objects' END;
        END IF;
        IF v_changed IS NOT NULL THEN
            PERFORM {{ .schema | default "pgsweep" }}.retention_step_session_restore(v_before.prepared);
            RAISE EXCEPTION 'retention policy %: a statement run as its owner % changed the maintenance session (%); nothing it did is kept',
                v.o_policy, v.o_role, v_changed
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Triggers, rules and row-level security policies on a policy''s table run inside maintenance: '
                             'they must not SET parameters, create objects, prepare statements or register retention policies.';
        END IF;
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_sig);
        PERFORM retention_step_record(p_pass, 'done', v_deleted, v_fraction, v_sampled, v_times);
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        -- A row (delete), the parent or a leaf (detach), a detached table
        -- (release) stayed locked past retention_lock_timeout: the step
        -- rolled back whole; its units wait for a later pass.
        IF v.o_kind = 'sample' OR (v.o_kind = 'delete' AND SQLSTATE = '40P01') THEN
            RAISE;
        END IF;
        PERFORM retention_step_record(p_pass, 'locked', NULL, NULL, NULL, NULL);
    END;
    RETURN v.o_more;
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
    -- never later than now() - older_than, whatever the caller says
    p_cutoff := least(p_cutoff, _retention_cutoff(v_pol, pg_catalog.clock_timestamp()));
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

-- pgsweep:include functions/retention_partition.sql
-- Retention of partitioned tables (docs/retention.md, "Partitioned tables").
--
-- A policy on a partitioned table (RANGE, LIST or HASH, any depth) covers
-- every leaf, present and future: each sweep lists the leaves again. A leaf
-- is removed whole (_retention_leaf_droppable) when its parent is
-- partitioned by RANGE on the policy's time column alone, its upper bound is
-- at or before the cutoff, the policy has no status and no filter, and the
-- policy's owner owns the leaf and its parent (owns, not is a member of:
-- the detach runs as that role). Every other leaf is swept like a plain
-- table, in tid_range units of its own, as the leaf's owner when the
-- policy's owner is that role or a member of it; a leaf of another role is
-- skipped, with an error on the pass (_retention_run_role). A RANGE leaf
-- whose lower bound is at or after the cutoff holds nothing eligible: the
-- plan leaves it alone.
--
-- Removing a leaf takes two passes. A drop unit's step detaches every
-- droppable leaf of the sweep under that parent in one transaction
-- (_retention_detach_body: the parent's lock is held for the detaches and
-- little else), renames each pgsweep_detached_<oid> and marks its unit
-- detached; its rows count as deleted at that commit. The next pass
-- (retention_due lists the policy at once) drops the detached tables first,
-- in a transaction that holds no lock on the parent, so the commit that
-- releases the files is out of the pass that removes the rows. Installs
-- with the Go runner detach CONCURRENTLY instead (retention_detach.sql);
-- the leaves it claimed or left half-detached are not planned here.

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

-- _retention_leaf_expired: whether every row a leaf can hold is expired at
-- p_cutoff and the policy deletes them all (no status, no filter): the
-- leaf could be removed whole, were it the policy owner's (see below).
CREATE OR REPLACE FUNCTION _retention_leaf_expired(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_upper timestamptz;
BEGIN
    IF p_pol.status_column IS NOT NULL OR p_pol.filter_column IS NOT NULL THEN
        RETURN false;
    END IF;
    v_upper := _retention_leaf_upper(p_pol, p_leaf);
    RETURN v_upper IS NOT NULL AND v_upper <= p_cutoff;
END
$$;

-- _retention_leaf_droppable: whether a leaf may be removed whole at p_cutoff
-- (see the rules above): expired, and the policy's owner owns it and its
-- parent (not merely a member of their owners): the detach runs as
-- it, and so does whatever code of the leaf's the count, the locks and the
-- DETACH run. The runner's claim (retention_detach.sql) reports an expired
-- leaf of another owner as skipped.
CREATE OR REPLACE FUNCTION _retention_leaf_droppable(p_pol retention_policy, p_leaf regclass, p_cutoff timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_parent regclass;
BEGIN
    IF NOT _retention_leaf_expired(p_pol, p_leaf, p_cutoff) THEN
        RETURN false;
    END IF;
    SELECT i.inhparent INTO v_parent FROM pg_catalog.pg_inherits i WHERE i.inhrelid = p_leaf;
    RETURN (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_leaf) = p_pol.owner
       AND (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = v_parent) = p_pol.owner;
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

-- _retention_depended_on: whether something outside a detached table
-- depends on it -- a view made on it since, a foreign key to it -- so that
-- its DROP would fail (every pass, if nothing stopped trying). The table's
-- own constraints do not count: a CHECK constraint (one inherited from the
-- parent, the one DETACH ... CONCURRENTLY adds) depends on the table's
-- columns. The pass's drops
-- (_retention_release_claim) and the runner's (retention_detach.sql) ask
-- this one function.
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

-- _retention_detached_name: the name a detached leaf gets until a later
-- pass drops it.
CREATE OR REPLACE FUNCTION _retention_detached_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_' || p_leaf::text $$;

-- _retention_detach_body: the PL/pgSQL body (run as the policy's owner by
-- retention_step) that detaches the leaves p_leaves of p_parent in one
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
    IF v_parent IS NULL THEN
        -- The leaf is no longer attached: a runner's DETACH ... CONCURRENTLY
        -- took it between the plan and this step. Nothing to detach; the
        -- caller follows the catalog (_retention_step_detached). Before, the
        -- body read 'LOCK TABLE ONLY  IN ...': a syntax error for the pass.
        RETURN 'BEGIN RETURN QUERY SELECT 0::bigint, NULL::float8, 0::bigint, NULL::timestamptz[]; END';
    END IF;
    FOR v_leaf IN
        SELECT l.oid, l.ord, format('%I.%I', n.nspname, c.relname) AS name
          FROM unnest(p_leaves) WITH ORDINALITY l(oid, ord)
          JOIN pg_catalog.pg_class c ON c.oid = l.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         ORDER BY l.ord
    LOOP
        v_sql := _retention_drop_sql(v_leaf.oid::regclass);
        -- A runner's DETACH ... CONCURRENTLY (retention_detach.sql) may have
        -- detached or dropped the leaf since it was claimed (undefined_table:
        -- gone, or "not a partition"), or left it half-detached
        -- (object_not_in_prerequisite_state: a plain DETACH is refused): the
        -- leaf is skipped, its unit deferred.
        v_counts := v_counts || format('BEGIN EXECUTE %L INTO c; EXCEPTION WHEN undefined_table THEN c := 0; END; r[%s] := c; ',
                                       v_sql.count_sql, v_leaf.ord);
        v_prelocks := v_prelocks || format(
            'BEGIN EXECUTE %L; ok[%s] := true; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; ',
            format('LOCK TABLE ONLY %s IN SHARE UPDATE EXCLUSIVE MODE', v_leaf.name), v_leaf.ord, v_leaf.ord);
        v_steps := v_steps || format(
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN lock_not_available OR undefined_table THEN ok[%s] := false; END; END IF; '
            'IF ok[%s] THEN BEGIN EXECUTE %L; EXCEPTION WHEN object_not_in_prerequisite_state OR undefined_table THEN ok[%s] := false; END; END IF; '
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

-- pgsweep:include functions/retention_step.sql
-- Retention: the steps of a pass. retention_run (a procedure, so that it can
-- commit) calls the step routines below and commits after each; all logic
-- lives here, in functions that pin search_path (a procedure that commits
-- cannot).
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
BEGIN
    -- pg_locks shows a lock once however often it was taken; unlock until it is gone.
    WHILE EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
                     AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid) LOOP
        EXIT WHEN NOT pg_catalog.pg_advisory_unlock(v_key);
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
        v_token := _lease_acquire('retention:' || p_name, v_owner, v_pol.lease_ttl, NULL);
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
-- and returns the step (a retention_step, of the kind the unit's kind
-- makes it): 'plan' (take the planning sample, then
-- _retention_plan_from_sample), 'delete' (the unit is locked for this
-- transaction), 'detach' (a drop unit of the leaf target: detach it and the
-- sweep's other droppable leaves of its parent), 'release' (a detached
-- unit: drop the sweep's detached tables), or no kind, with more false
-- when the pass is over (outcome recorded) and true to be called again.
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

-- _retention_detach_claim gathers a detach step's leaves: p_leaf (the
-- claimed unit's) and the leaves of the sweep's other drop units under the
-- same parent that are still attached, droppable and not taken by another
-- cleaner (FOR UPDATE SKIP LOCKED), at most 64 in all.
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

-- _retention_step_detached records a detach step from the catalog: a leaf
-- now named pgsweep_detached_<oid> and out of its parent was detached: its
-- unit is marked so (kind detached, the oid its detached_table) and left to a later pass,
-- which drops the table; the pass counts its rows (p_rows, all the detached
-- leaves') and the partition. A leaf still attached (locked by another
-- transaction, or the whole step rolled back) is deferred to a later pass.
-- p_premarked: retention_step_record ('detaching') counted every leaf already.
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

-- _retention_release_claim gathers a release step's tables: the sweep's
-- detached units not taken by another cleaner (p_unit's included). A unit
-- whose table is no longer the one it detached (dropped, re-attached,
-- renamed), that the policy's owner can no longer drop (the policy changed
-- hands), or that something else depends on (a view made on it since, a
-- foreign key to it) is closed and its table left alone (a NOTICE names it):
-- a DROP that fails would fail every pass.
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

-- _retention_step_released records a release step: a unit whose table is
-- gone is done; one whose table is still there (locked past lock_timeout by
-- another transaction) is deferred to a later pass. A release is not a
-- batch: the pass goes on to plan its own sweep.
CREATE OR REPLACE FUNCTION _retention_step_released(p_pass bigint, p_unit retention_unit, p_units int[], p_tables oid[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released int;
    v_left int;
BEGIN
    WITH l AS (
        SELECT x.unit_no, EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = x.oid) AS present
          FROM unnest(p_units, p_tables) x(unit_no, oid)
    ), d AS (
        DELETE FROM retention_unit u USING l
         WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = l.unit_no AND NOT l.present
        RETURNING 1
    )
    SELECT count(*) INTO v_released FROM d;
    UPDATE retention_unit u SET deferred_pass = p_pass
     WHERE u.policy = p_unit.policy AND u.sweep_id = p_unit.sweep_id AND u.unit_no = ANY (p_units);
    GET DIAGNOSTICS v_left = ROW_COUNT;
    UPDATE retention_pass SET units = units + v_released, deferred = deferred + v_left WHERE id = p_pass;
END
$$;

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

-- Step routines (docs/security.md, "Step routines"). retention_run and
-- maintain run as their caller, so they call only these, never an internal
-- (underscore) routine, and their caller may call them too, in any order:
--   retention_step_begin   opens a pass for this session (no clock: a pinned
--                          clock is _retention_begin's, S_owner's alone);
--   retention_step         one step (retention_sql.sql): claim, the
--                          statement as the table's owner, record;
--   retention_step_end     records the end of this session's pass;
--   retention_step_unlock  gives back this session's advisory lock on a policy.
-- Every one that names a pass checks that this session opened it
-- (_retention_pass_check): pid and, since a pid is reused, a pass begun
-- before the server started is nobody's.

-- _retention_pass_check: this session's running pass p_pass (NULL when it
-- no longer exists: its policy was unregistered during the pass); 42501
-- when it is another session's or over.
CREATE OR REPLACE FUNCTION _retention_pass_check(p_pass bigint)
RETURNS retention_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v retention_pass;
BEGIN
    SELECT * INTO v FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v.pid IS DISTINCT FROM pg_catalog.pg_backend_pid() OR v.finished_at IS NOT NULL
       OR v.started_at < pg_catalog.pg_postmaster_start_time() THEN
        RAISE EXCEPTION 'retention pass %: not a running pass of this session', p_pass
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL retention_run, CALL maintain).';
    END IF;
    RETURN v;
END
$$;

-- retention_step_begin opens a pass of p_name for this session (see
-- _retention_begin): its id, or NULL when there is nothing to do.
CREATE OR REPLACE FUNCTION retention_step_begin(p_name text, p_owner text, p_budget interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_begin(p_name, p_owner, p_budget, NULL) $$;

-- retention_step_end records the end of this session's pass p_pass (an
-- error when p_error is given) and releases its lease; the caller commits,
-- then gives the advisory lock back (retention_step_unlock).
CREATE OR REPLACE FUNCTION retention_step_end(p_pass bigint, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _retention_pass_check(p_pass) IS NULL THEN
        RETURN;
    END IF;
    PERFORM _retention_finish(p_pass, CASE WHEN p_error IS NOT NULL THEN 'error' END, left(p_error, 2000));
END
$$;

-- retention_step_unlock: this session's advisory lock on a policy, given
-- back (_retention_unlock); a session can only ever release its own. The
-- name rule as in _retention_begin (a name it refuses never took a lock),
-- unless p_name is a registered policy's (maintain unlocks retention_due's
-- names, one registered before 0.34's rule included).
CREATE OR REPLACE FUNCTION retention_step_unlock(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name) THEN
        PERFORM _check_text('p_name', p_name);
    END IF;
    PERFORM _retention_unlock(p_name);
END
$$;

-- _retention_run_role: the role a statement on p_rel (the policy's table,
-- or one of its leaves) runs as: the table's owner when the policy's owner
-- is that role or a member of it (then the table's code -- triggers, rules,
-- row-level security, domains, defaults -- runs as the role that wrote it),
-- else NULL: a leaf is then skipped, and the policy's own table is swept as
-- the policy's owner (a grantee's DELETE, as PostgreSQL runs any).
CREATE OR REPLACE FUNCTION _retention_run_role(p_pol retention_policy, p_rel regclass)
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN c.relowner = p_pol.owner OR pg_catalog.pg_has_role(p_pol.owner, c.relowner, 'MEMBER')
                THEN c.relowner::regrole END
      FROM pg_catalog.pg_class c WHERE c.oid = p_rel
$$;

-- retention_step_claim: the bookkeeping of one step of this session's pass
-- p_pass, as <schema>_owner, and the statement retention_step runs. o_kind
-- NULL: nothing to run (o_more: call again); else o_kind is 'sample',
-- 'delete', 'detach' or 'release', run as o_role (the table's owner, or
-- o_owner, the policy's) with the body o_body
-- (built now from the stored policy and the catalog), the settings
-- o_settings and the parameters ($1, $2 of type o_type as text, $3 the
-- cutoff, never later than now() - older_than, $4 the statuses, $5 the
-- filter values). What it handed out is kept on the pass (step) for
-- retention_step_record. A built-in policy's step runs here whole.
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

-- retention_step_record records what the statement of the step that
-- retention_step_claim handed out did (p_phase 'done'), or that it found a
-- lock held past retention_lock_timeout ('locked': its units wait for a
-- later pass), or, for a detach, that it is about to run ('detaching').
-- It acts only on the unit the claim handed out to this session's pass:
-- a record without a claim changes nothing.
-- The arguments are checked first (22023): p_phase one of the three,
-- p_deleted and p_sampled not negative, p_fraction a fraction (0 to 1).
-- p_times is the sample's times, as many as the sample found (no cap: the
-- plan cuts at most 100000 windows from it).
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
           error = CASE WHEN p_error IS NULL THEN error ELSE coalesce(error || '; ', '') || p_error END,
           step = NULL
     WHERE id = p_pass
    RETURNING * INTO v_pass;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_pass.mode = 'exclusive' THEN
        PERFORM _lease_release('retention:' || v_pass.policy, v_pass.owner, NULL);
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
-- retention_due() reads the database clock; the p_now overload pins it,
-- for tests (S_owner only: no role but the owner passes a clock).
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

CREATE OR REPLACE FUNCTION retention_due()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT retention_due(NULL::timestamptz) $$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:include functions/retention_detach.sql
-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY, run by
-- the Go runner before each maintenance pass (docs/retention.md,
-- "Partitioned tables"; docs/security.md, "The runner's DETACH ...
-- CONCURRENTLY"). A plain DETACH (the pass's, retention_partition.sql)
-- holds ACCESS EXCLUSIVE on the parent, and inserts wait for it; the
-- CONCURRENTLY form takes SHARE UPDATE EXCLUSIVE, which no insert waits
-- for, but runs only outside a transaction block, so no function can.
--
-- The protocol (Client.RetentionDetachConcurrently in Go):
--   1. retention_detach_claim(owner) claims, among the policies retention_due
--      lists, 'detach' (a droppable leaf of a parent without a DEFAULT
--      partition), 'finalize' (a leaf this protocol left half-detached) and
--      'drop' (a table it detached by an earlier call: the DROP's commit is
--      kept out of the call that removes the rows), each a row of
--      retention_detaching held for the policy's lease_ttl; 'skip' rows are
--      not claims: a leaf or parent owned by another role than the
--      policy's owner, with the reason.
--   2. The runner builds each statement from the claim's typed values (no
--      SQL text travels to Go) and runs it as the policy's owner (SET ROLE
--      for that statement): DETACH or FINALIZE, then RENAME to
--      pgsweep_detached_c<oid>, or DROP, each in its own transaction,
--      under retention_lock_timeout.
--   3. retention_detach_done(owner, leaf) records what the catalog says: a
--      leaf out of its parent under the runner's name (or dropped) counts
--      its rows once, from the statistics (nothing reads the leaf), in a
--      retention_pass of strategy 'detach_concurrently', and stays claimed
--      for DROP; a half-detached leaf stays claimed for FINALIZE; an
--      attached one is released; one out of its parent under another name
--      is released, not counted, left in place.
-- The pass plans nothing for a leaf that is claimed or half-detached, and
-- sweeps nothing that left its parent since it planned.

-- _retention_detach_runner_name: the name the runner gives a table it
-- detached, until its next call drops it. Not the pass's
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

-- _retention_detach_can_act: whether p_role may SET ROLE to p_owner (the
-- runner acts as the policy's owner for each statement). PostgreSQL 16
-- grants SET apart from membership.
CREATE OR REPLACE FUNCTION _retention_detach_can_act(p_role name, p_owner oid)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000
                THEN pg_catalog.pg_has_role(p_role, p_owner, 'SET')
                ELSE pg_catalog.pg_has_role(p_role, p_owner, 'MEMBER') END
       -- set_config('role', 'none') means RESET ROLE: a role of that name
       -- would have the runner act as itself
       AND pg_catalog.pg_get_userbyid(p_owner) OPERATOR(pg_catalog.<>) 'none'::name
$$;

-- _retention_detach_estimate: the rows of a table, from the catalog (see
-- above): the statistics' live tuples, else reltuples, else 0. Reads
-- nothing of the table; NULL when the table is gone.
CREATE OR REPLACE FUNCTION _retention_detach_estimate(p_table oid)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.pg_stat_get_live_tuples(c.oid) OPERATOR(pg_catalog.>) 0::bigint
                THEN pg_catalog.pg_stat_get_live_tuples(c.oid)
                WHEN c.reltuples OPERATOR(pg_catalog.>=) 0::real THEN c.reltuples::bigint
                ELSE 0::bigint END
      FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) p_table
$$;

-- _retention_detach_claim_for: the claims of retention_detach_claim (below),
-- at most p_limit ('skip' rows are not claims and not counted).
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

-- retention_detach_claim: what the Go runner detaches concurrently now (see
-- above), at most 64 leaves; p_owner names the runner (1-200 characters).
-- Typed values only: the runner builds each statement from them. The p_now
-- overload is for tests (S_owner only).
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, p_now, 64) $$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, NULL, 64) $$;

-- retention_detach_done records a claimed leaf from the catalog (see
-- above) and returns its state: 'dropped', 'detached' (out of its parent,
-- not dropped yet: claimed again for DROP), 'pending' (half-detached:
-- claimed again for FINALIZE), 'attached' (released) or 'taken' (a
-- maintenance pass detached it first: released, not counted); and rows,
-- the rows this call counted as deleted (the catalog's estimate,
-- _retention_detach_estimate), NULL when it counted nothing: a leaf is
-- counted once, when it is first found out of its parent under the
-- runner's name. A claim held by another owner, or a caller that cannot act
-- as the policy's owner, changes nothing ('other').
CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, OUT state text, OUT rows bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_d retention_detaching;
    v_pol retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    SELECT * INTO v_d FROM retention_detaching d WHERE d.leaf = p_leaf FOR UPDATE;
    IF FOUND THEN
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_d.policy;
    END IF;
    -- only the claim's holder, able to act as the policy's owner, records it
    IF NOT FOUND OR v_d.owner IS DISTINCT FROM p_owner
       OR NOT _retention_detach_can_act(_retention_detach_caller(), v_pol.owner) THEN
        state := 'other';
        RETURN;
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
      INTO state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF state IN ('dropped', 'detached') AND NOT v_d.counted THEN
        -- a table dropped before it was recorded: its rows are unknown (0);
        -- the runner records a table before it drops it
        rows := coalesce(_retention_detach_estimate(p_leaf), 0);
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_d.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_d.began_at, v_d.expires_at, v_now, v_now, rows, 1, 1, 1, 'detach_concurrently', 'drained');
    END IF;
    IF state = 'taken' AND NOT v_d.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_d.policy, v_d.leaf_schema, v_d.leaf_name;
    END IF;
    IF state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
