-- pgsweep 0.34: per-queue rights (issue 23: no boundary between applications).
--
-- A queue verb now acts only for a caller holding the verb's right on the
-- queue (send, consume, browse, manage; functions/queue_rights.sql), 42501
-- otherwise. Rights are rows of queue_right; every existing queue gets the
-- rows that keep today's behaviour (send and consume to S_worker, browse and
-- manage to S_admin), so nothing changes until a DBA revokes them. Setting
-- queue_default_grants (1) says what a new queue gets (0: no worker right).
-- The functions the Worker and the queue_stats view call lose their
-- underscore (no role but S_owner executes an underscore function):
-- _queue_get for the Worker becomes queue_info (_queue_get stays, the
-- owner's), _queue_stats and _queue_rows become queue_counts and queue_rows.
-- maintain()'s recovery calls _queue_recover (no right: pgsweep's own
-- housekeeping); queue_recover needs manage.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- One row per (queue, right, grantee); the key leads with the queue (on
-- Citus it is placed like the message tables: distributed by queue,
-- colocated). grantee is the role's oid, grantee_name its name at grant
-- time: a row counts only while they still agree (an oid reused by a new
-- role inherits nothing).
CREATE TABLE queue_right (
    queue        text NOT NULL REFERENCES queue (name) ON DELETE CASCADE,
    privilege    text NOT NULL CHECK (privilege IN ('send', 'consume', 'browse', 'manage')),
    grantee      oid NOT NULL,
    grantee_name name NOT NULL,
    PRIMARY KEY (queue, privilege, grantee)
);
COMMENT ON TABLE queue_right IS 'per-queue rights: which role may send to, consume, browse or manage which queue; change with queue_grant and queue_revoke';

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('queue_default_grants', '1', 'integer', '1', '0', '1', false,
     'rights a new queue starts with: 1 = send and consume to <schema>_worker, browse and manage to <schema>_admin; 0 = browse and manage to <schema>_admin only (private: queue_grant gives workers their rights)')
ON CONFLICT (name) DO NOTHING;

-- Existing queues keep working as before: their rights, as rows.
INSERT INTO queue_right (queue, privilege, grantee, grantee_name)
SELECT q.name, g.privilege, r.oid, r.rolname
  FROM queue q
 CROSS JOIN (VALUES ('_worker', 'send'), ('_worker', 'consume'), ('_admin', 'browse'), ('_admin', 'manage')) g(suffix, privilege)
  JOIN pg_catalog.pg_roles r ON r.rolname = pg_catalog.current_schema() || g.suffix
ON CONFLICT DO NOTHING;

-- The views' and the Worker's functions lose their underscore.
DROP VIEW queue_stats;
DROP FUNCTION _queue_stats(text, timestamptz);
DROP FUNCTION _queue_rows();

-- pgsweep:include functions/queue_rights.sql
-- Per-queue rights (docs/queues.md, "Per-queue rights"; docs/security.md).
--
-- A queue verb acts only for a caller that holds the verb's right on the
-- queue; the others get 42501 naming the queue and the right:
--   send     send, send_batch
--   consume  claim, claim_ids, renew, complete, fail, fail_details, release,
--            dead_letter (the relay), queue_info (the Worker)
--   browse   anything that returns payloads to a non-consumer (the
--            dashboard's message views)
--   manage   queue_configure, queue_pause, queue_resume, queue_purge,
--            message_cancel, dead_requeue, queue_drop, lane_skip,
--            queue_recover, queue_grant and queue_revoke
-- The function grants of privileges.sql still decide which verbs a role may
-- call at all (S_worker: send and consume verbs; S_admin: the manage verbs);
-- the rights below decide on which queues.
--
-- Storage: table queue_right, one row per (queue, privilege, grantee), its
-- key leading with the queue (it is placed like the message tables on
-- Citus: distributed by queue, colocated, so a delegated verb reads its
-- queue's rights on the queue's own worker). A queue's rows go with it
-- (ON DELETE CASCADE; queue_drop). The grantee is a role's oid (pg_authid)
-- and its name when granted: a row counts only while the role with that oid
-- still has that name, so a role dropped and a new one created with the same
-- oid (oids wrap around) inherits nothing; such orphans are deleted by the
-- next queue_grant or queue_revoke on the queue (_queue_rights_clean). A
-- renamed role loses its rights on queues until granted again.
--
-- Defaults (queue_create): a new queue's rights are rows like any other,
-- so queue_revoke makes it private:
--   setting queue_default_grants 1 (default): send and consume to S_worker,
--     browse and manage to S_admin -- what every role had before 0.34;
--   setting queue_default_grants 0: browse and manage to S_admin only; no
--     worker may use the queue until queue_grant says so.
-- The migration that introduced rights (035) gave every existing queue the
-- rows of setting 1, so an upgraded install behaves as before.

-- _queue_require raises 42501 unless the calling session holds p_right on
-- p_queue (an existing queue: the verbs look it up first, so an unknown
-- queue is their 22023). It is the one place that says who the caller is
-- and whether it holds a right; every verb calls it, and _queue_allowed
-- asks it.
--
-- The caller is the role the session acts as. The verbs are SECURITY
-- DEFINER, so current_user inside them is S_owner; the session's role is
-- what SET ROLE set (current_setting('role')), or the session user when
-- none was set. PostgreSQL refuses SET ROLE and SET SESSION AUTHORIZATION
-- inside a SECURITY DEFINER function, so this is always a role the session
-- itself may be: a SECURITY DEFINER function of another role that calls a
-- verb acts with its caller's session rights on queues (docs/security.md).
--
-- The caller holds p_right when it is a member (pg_has_role MEMBER:
-- directly or through other roles, inheriting or not, as SET ROLE allows)
-- of a role granted it, and when it is a superuser (as PostgreSQL's own
-- checks). A grant counts only while its grantee's oid still has the name
-- it was granted to (a dropped role's oid taken by a new role inherits
-- nothing).
--
-- Cost: one function call, one probe of queue_right's primary key and
-- pg_has_role (PostgreSQL caches role membership) per verb call. The
-- caller's name and the check are inline rather than in functions of their
-- own: each call of a function with a pinned search_path costs about as
-- much as the probe itself (docs/benchmarks.md, "Per-queue rights").
CREATE OR REPLACE FUNCTION _queue_require(p_queue text, p_right text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                          ELSE pg_catalog.current_setting('role')::name END;
BEGIN
    IF EXISTS (SELECT 1 FROM queue_right r
                WHERE r.queue = p_queue AND r.privilege = p_right
                  AND pg_catalog.pg_has_role(v_caller, r.grantee, 'MEMBER')
                  AND pg_catalog.pg_get_userbyid(r.grantee) = r.grantee_name)
       OR (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = v_caller) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied: role "%" lacks % on queue "%"', v_caller, p_right, p_queue
        USING ERRCODE = 'insufficient_privilege',
              HINT = pg_catalog.format('A role holding manage on the queue grants it: SELECT queue_grant(%L, %L, ARRAY[%L])',
                                       p_queue, v_caller, p_right);
END
$$;

-- _queue_allowed: does the calling session hold p_right on p_queue? (Not on
-- hot paths: it asks _queue_require.)
CREATE OR REPLACE FUNCTION _queue_allowed(p_queue text, p_right text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_require(p_queue, p_right);
    RETURN true;
EXCEPTION WHEN insufficient_privilege THEN
    RETURN false;
END
$$;

-- _queue_rights_valid: the names of the rights, for the checks and their messages.
CREATE OR REPLACE FUNCTION _queue_rights_valid()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['send', 'consume', 'browse', 'manage']::text[] $$;

-- _queue_rights_check validates queue_grant's and queue_revoke's arguments
-- (22023 naming the argument and the allowed values) and returns the rights,
-- without duplicates.
CREATE OR REPLACE FUNCTION _queue_rights_check(p_queue text, p_role regrole, p_rights text[])
RETURNS text[]
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad text;
BEGIN
    PERFORM _queue_get(p_queue);
    IF p_role IS NULL OR p_role::oid = 0 THEN
        RAISE EXCEPTION 'p_role must name an existing role, got %', CASE WHEN p_role IS NULL THEN 'NULL' ELSE 'PUBLIC (-)' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_rights IS NULL OR cardinality(p_rights) = 0 OR cardinality(p_rights) > 4 THEN
        RAISE EXCEPTION 'p_rights must be an array of 1 to 4 of send, consume, browse, manage, got %',
            CASE WHEN p_rights IS NULL THEN 'NULL' ELSE cardinality(p_rights) || ' elements' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT coalesce(quote_literal(r), 'NULL') INTO v_bad FROM unnest(p_rights) r
     WHERE r IS NULL OR NOT r = ANY (_queue_rights_valid()) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'p_rights must hold only send, consume, browse, manage, got %', v_bad
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN ARRAY(SELECT DISTINCT r FROM unnest(p_rights) r ORDER BY 1);
END
$$;

-- _queue_rights_clean deletes the queue's rows whose grantee was dropped
-- (or renamed, or whose oid now belongs to another role): they count for
-- nothing already (_queue_allowed), this only tidies up.
CREATE OR REPLACE FUNCTION _queue_rights_clean(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM queue_right r
     WHERE r.queue = p_queue
       AND pg_catalog.pg_get_userbyid(r.grantee) IS DISTINCT FROM r.grantee_name;
END
$$;

-- _queue_grant_rows inserts rights without any check (queue_create's
-- defaults, queue_grant). A grantee's row is refreshed to its current name.
CREATE OR REPLACE FUNCTION _queue_grant_rows(p_queue text, p_role oid, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO queue_right (queue, privilege, grantee, grantee_name)
    SELECT p_queue, r, p_role, pg_catalog.pg_get_userbyid(p_role) FROM unnest(p_rights) r
    ON CONFLICT (queue, privilege, grantee) DO UPDATE SET grantee_name = excluded.grantee_name;
END
$$;

-- _queue_default_grants: the rights a new queue starts with (see the top of
-- this file), as rows.
CREATE OR REPLACE FUNCTION _queue_default_grants(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_roles record := _role_names();
    v_admin oid := pg_catalog.to_regrole(pg_catalog.quote_ident(v_roles.admin_role));
    v_worker oid := pg_catalog.to_regrole(pg_catalog.quote_ident(v_roles.worker_role));
BEGIN
    IF v_admin IS NOT NULL THEN
        PERFORM _queue_grant_rows(p_queue, v_admin, ARRAY['browse', 'manage']);
    END IF;
    IF v_worker IS NOT NULL AND setting_int('queue_default_grants') = 1 THEN
        PERFORM _queue_grant_rows(p_queue, v_worker, ARRAY['send', 'consume']);
    END IF;
END
$$;

-- queue_grant gives p_role the rights p_rights ('send', 'consume', 'browse',
-- 'manage') on p_queue; granting a right held already changes nothing.
-- The caller needs manage on the queue.
CREATE OR REPLACE FUNCTION queue_grant(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    PERFORM _queue_grant_rows(p_queue, p_role, v_rights);
END
$$;

-- queue_revoke takes the rights p_rights from p_role on p_queue; revoking a
-- right not held is a no-op. Only p_role's own rows go: a member of another
-- role holding the right keeps it through that role. The caller needs manage
-- on the queue (revoking the last manage leaves the queue to superusers).
CREATE OR REPLACE FUNCTION queue_revoke(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    DELETE FROM queue_right r
     WHERE r.queue = p_queue AND r.privilege = ANY (v_rights) AND r.grantee = p_role;
END
$$;

-- queue_rights lists the grants on p_queue (role names, for people and the
-- dashboard). The caller needs manage or browse on the queue.
CREATE OR REPLACE FUNCTION queue_rights(p_queue text)
RETURNS TABLE (queue text, role_name text, rights text[])
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_get(p_queue);
    IF NOT _queue_allowed(p_queue, 'browse') THEN
        PERFORM _queue_require(p_queue, 'manage');
    END IF;
    RETURN QUERY
    SELECT p_queue, r.grantee_name::text, array_agg(r.privilege ORDER BY array_position(_queue_rights_valid(), r.privilege))
      FROM queue_right r
     WHERE r.queue = p_queue AND pg_catalog.pg_get_userbyid(r.grantee) = r.grantee_name
     GROUP BY r.grantee_name
     ORDER BY 2;
END
$$;

-- queue_info: the settings a consumer needs (the Worker reads
-- lease_default); no payloads. The caller needs consume on the queue.
-- Columns spelled out: a function returning the queue row type made
-- citus_distribute fail (circular dependency, citus.sql).
CREATE OR REPLACE FUNCTION queue_info(p_queue text)
RETURNS TABLE (name text, kind text, max_attempts int, lease_default interval, paused boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
BEGIN
    PERFORM _queue_require(p_queue, 'consume');
    RETURN QUERY SELECT v_q.name, v_q.kind, v_q.max_attempts, v_q.lease_default, v_q.paused;
END
$$;
-- pgsweep:end functions/queue_rights.sql

-- pgsweep:include functions/queue.sql
-- Queues: creation, settings, and the lookup every message function starts with.

-- _queue_get returns the queue row or raises 22023 naming p_queue. Every
-- message function calls it first: an unknown queue is the caller's error and
-- nothing may change.
CREATE OR REPLACE FUNCTION _queue_get(p_queue text)
RETURNS queue
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    SELECT * INTO v_q FROM queue WHERE name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_queue must name an existing queue, got unknown queue "%"', p_queue
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_q;
END
$$;

-- queue_create is idempotent so that every application instance can call it
-- at start-up. A second call with another max_attempts updates it (the code's
-- latest word wins); changing the kind of an existing queue is refused,
-- because outbox and inbox rows are completed differently.
--
-- A queue name has at most 172 characters: the queue's built-in retention
-- policy is named 'pgsweep.processed:<queue>' (retention_builtin.sql), and
-- policy names have at most 190 (their lease is 'retention:<name>', and
-- lease names at most 200). Every name queue_create accepts works
-- everywhere; lookups (_queue_get) still accept up to 200 characters, so a
-- longer queue made by an older version keeps working (without built-in
-- retention, see retention_builtin_sync).
CREATE OR REPLACE FUNCTION queue_create(p_queue text, p_kind text DEFAULT 'outbox', p_max_attempts int DEFAULT 10)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    IF p_queue IS NULL OR p_queue = '' OR length(p_queue) > 172 THEN
        RAISE EXCEPTION 'p_queue must be a non-empty string of at most 172 characters (its retention policy pgsweep.processed:<queue> must fit in 190), got %',
            CASE WHEN p_queue IS NULL THEN 'NULL'
                 WHEN p_queue = '' THEN 'an empty string'
                 ELSE length(p_queue) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_kind IS NULL OR p_kind NOT IN ('outbox', 'inbox') THEN
        RAISE EXCEPTION 'p_kind must be outbox or inbox, got %', coalesce(p_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_int('p_max_attempts', p_max_attempts, 1, 1000);

    INSERT INTO queue (name, kind, max_attempts) VALUES (p_queue, p_kind, p_max_attempts)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        -- The claim cursor, at the head: otherwise the queue's first claims
        -- would race to insert it and wait for each other once.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, '-infinity', -9223372036854775808, '-infinity')
        ON CONFLICT (queue) DO NOTHING;
        -- Its rights, as rows (queue_rights.sql): only for a new queue, so
        -- an application's queue_create at start-up never undoes a revoke.
        PERFORM _queue_default_grants(p_queue);
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM queue q WHERE q.name = p_queue AND q.max_attempts <> p_max_attempts) THEN
        PERFORM _queue_require(p_queue, 'manage'); -- a change, not just "make sure it exists"
        UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now WHERE name = p_queue;
    END IF;
END
$$;

-- queue_configure changes a queue's settings. p_settings is a JSON object
-- whose keys are the settings to change (others stay):
--   max_attempts        1..1000
--   backoff_base        '0 seconds'..'1 day'
--   backoff_max         backoff_base..'7 days'
--   backoff_jitter      0..1: each fail call draws its delays from
--                       [delay * (1 - jitter), delay]; 0 = exact
--   lease_default       '1 second'..'1 hour'
--   claim_rescan        '0 seconds'..'1 minute': how long claims may trust the
--                       claim cursor (see claim.sql); 0 = exact oldest-first order
--   processed_retention '1 second'..'100 years', or null = keep forever
--   dead_retention      '1 second'..'100 years', or null = keep forever
--   lane_dead           'move_on' (default): a dead-lettered lane head lets its
--                       lane go on with its next message; 'block': the lane
--                       stops until dead_requeue or lane_skip (lane.sql).
--                       Lanes blocked already stay blocked when it changes.
-- JSON rather than one parameter per setting because NULL must be a value
-- here (keep forever), not "unchanged". Returns the queue row as it is now.
CREATE OR REPLACE FUNCTION queue_configure(p_queue text, p_settings jsonb)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_key text;
    v_setting text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan', 'lane_dead') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead)', v_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- v_setting names the setting being read, for the error of a value that
    -- does not convert to its type ("soon", 1.5, true, [30]): the message
    -- names the setting and its range like the range checks do, the cast's
    -- own error is the detail. Arrays and objects are refused before any
    -- cast: the interval parser would read '[30]' as 30 seconds.
    BEGIN
        FOR v_setting IN SELECT e.key FROM jsonb_each(p_settings) e WHERE jsonb_typeof(e.value) IN ('array', 'object') LOOP
            RAISE EXCEPTION 'a JSON % is not a value of %', jsonb_typeof(p_settings->v_setting), v_setting
                USING ERRCODE = 'invalid_text_representation';
        END LOOP;
        IF p_settings ? 'max_attempts' THEN
            v_setting := 'max_attempts';
            v_q.max_attempts := (p_settings->>'max_attempts')::int;
            PERFORM _check_int('max_attempts', v_q.max_attempts, 1, 1000);
        END IF;
        IF p_settings ? 'backoff_base' THEN
            v_setting := 'backoff_base';
            v_q.backoff_base := (p_settings->>'backoff_base')::interval;
            PERFORM _check_interval('backoff_base', v_q.backoff_base, interval '0 seconds', interval '1 day');
        END IF;
        IF p_settings ? 'backoff_max' THEN
            v_setting := 'backoff_max';
            v_q.backoff_max := (p_settings->>'backoff_max')::interval;
        END IF;
        PERFORM _check_interval('backoff_max', v_q.backoff_max, v_q.backoff_base, interval '7 days');
        IF p_settings ? 'backoff_jitter' THEN
            v_setting := 'backoff_jitter';
            v_q.backoff_jitter := (p_settings->>'backoff_jitter')::double precision;
            IF v_q.backoff_jitter IS NULL OR NOT v_q.backoff_jitter BETWEEN 0 AND 1 THEN
                RAISE EXCEPTION 'backoff_jitter must be a number between 0 and 1, got %', coalesce(p_settings->>'backoff_jitter', 'null')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        IF p_settings ? 'lease_default' THEN
            v_setting := 'lease_default';
            v_q.lease_default := (p_settings->>'lease_default')::interval;
            PERFORM _check_interval('lease_default', v_q.lease_default, interval '1 second', interval '1 hour');
        END IF;
        IF p_settings ? 'claim_rescan' THEN
            v_setting := 'claim_rescan';
            v_q.claim_rescan := (p_settings->>'claim_rescan')::interval;
            PERFORM _check_interval('claim_rescan', v_q.claim_rescan, interval '0 seconds', interval '1 minute');
        END IF;
        IF p_settings ? 'lane_dead' THEN
            v_setting := 'lane_dead';
            IF jsonb_typeof(p_settings->'lane_dead') IS DISTINCT FROM 'string'
               OR p_settings->>'lane_dead' NOT IN ('move_on', 'block') THEN
                RAISE EXCEPTION 'lane_dead must be "move_on" or "block", got %', p_settings->'lane_dead'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            v_q.lane_dead := p_settings->>'lane_dead';
        END IF;
        IF p_settings ? 'processed_retention' THEN
            v_setting := 'processed_retention';
            v_q.processed_retention := (p_settings->>'processed_retention')::interval;
            IF v_q.processed_retention IS NOT NULL THEN
                PERFORM _check_interval('processed_retention', v_q.processed_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
        IF p_settings ? 'dead_retention' THEN
            v_setting := 'dead_retention';
            v_q.dead_retention := (p_settings->>'dead_retention')::interval;
            IF v_q.dead_retention IS NOT NULL THEN
                PERFORM _check_interval('dead_retention', v_q.dead_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
    EXCEPTION
        WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
             OR numeric_value_out_of_range OR interval_field_overflow THEN
            RAISE EXCEPTION '% must be %, got %', v_setting,
                CASE v_setting
                    WHEN 'max_attempts' THEN 'an integer between 1 and 1000'
                    WHEN 'backoff_base' THEN 'an interval between 0 seconds and 1 day'
                    WHEN 'backoff_max' THEN 'an interval between backoff_base and 7 days'
                    WHEN 'backoff_jitter' THEN 'a number between 0 and 1'
                    WHEN 'lease_default' THEN 'an interval between 1 second and 1 hour'
                    WHEN 'claim_rescan' THEN 'an interval between 0 seconds and 1 minute'
                    WHEN 'lane_dead' THEN '"move_on" or "block"'
                    ELSE 'an interval between 1 second and 100 years, or null (keep forever)' END,
                p_settings->v_setting
                USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;

    UPDATE queue
       SET max_attempts = v_q.max_attempts,
           backoff_base = v_q.backoff_base,
           backoff_max = v_q.backoff_max,
           backoff_jitter = v_q.backoff_jitter,
           lease_default = v_q.lease_default,
           claim_rescan = v_q.claim_rescan,
           processed_retention = v_q.processed_retention,
           dead_retention = v_q.dead_retention,
           lane_dead = v_q.lane_dead,
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    RETURN v_q;
END
$$;

-- _notify_channel is the LISTEN/NOTIFY channel of this schema's queues:
-- '<schema>_messages', the schema cut to 54 bytes so the channel stays within
-- PostgreSQL's 63-byte limit. The payload of each notification is the queue name.
CREATE OR REPLACE FUNCTION notify_channel()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT left(current_schema(), 54) || '_messages' $$;
-- pgsweep:end functions/queue.sql

-- pgsweep:include functions/send.sql
-- Sending: one message or a batch. Sends run inside the caller's transaction
-- (that is the point of an outbox): the rows and the notification appear when
-- it commits, not before.
--
-- p_deliver_at: NULL (now) or a finite time at most 10 years after the
-- database clock (_check_deliver_at, validate.sql); a past time means now.
--
-- Inbox de-duplication. On inbox queues the key is the message's identity: a
-- key that is live (message), processed (message_processed) or dead
-- (message_dead) is refused with NULL, until retention removes the record.
-- Indexes hold it (message_inbox_key, message_processed's (queue, key),
-- message_dead_key), and the order of the steps closes the gap between them:
--  1. a processed or dead row with the key?   → duplicate
--  2. INSERT … ON CONFLICT (live key) DO NOTHING → duplicate when a live row has it.
--     If a complete or fail is moving the live row to message_processed or
--     message_dead right now, the insert waits for that transaction (unique
--     check) and proceeds only after it committed;
--  3. so a processed or dead row with the key is re-checked with a fresh snapshot
--     (READ COMMITTED: each statement sees what committed before it) and, if
--     found, our row is deleted again: the call returns NULL, net change nothing.
-- A concurrent duplicate send waits at step 2 for the first sender's
-- transaction and then sees its row. Proven by TestInboxDedupConcurrent.
--
-- REPEATABLE READ and SERIALIZABLE. There every statement reads the
-- transaction's snapshot, so step 3 sees nothing new: a complete that
-- committed after the snapshot was taken (the live row gone, its processed
-- row invisible) would let the key in twice. There instead:
--  1b. a live row with the key that the snapshot sees → duplicate (NULL),
--      whatever happened to it since (completed, dead-lettered: either way
--      the key is taken);
--  2.  the insert of step 2 raises 40001 (serialization_failure) by itself
--      when the live row that holds the key committed after the snapshot;
--  3b. a probe for the processed row that the snapshot cannot see: our row
--      is inserted into message_processed ON CONFLICT (queue, key) DO
--      NOTHING. A unique check sees every committed row, and PostgreSQL
--      raises 40001 when the conflicting row is invisible to the snapshot
--      (a complete committed after it); a visible one → duplicate (NULL);
--      no conflict → the probe row is deleted at once and the send stands.
--      The probe runs after our live row is in: from then on no other
--      transaction can complete a row with the key, so the probe never
--      waits for one (and never deadlocks with one).
-- The caller retries a 40001 as for any serialization failure; the retry
-- sees the processed row and returns NULL. Proven by inbox_isolation_test.go.
--  3c. the same probe for a dead letter with the key (message_dead's inbox
--      keys are unique since 0.23): a key sent and dead-lettered after the
--      snapshot raises 40001 too.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'p_payload must be a JSON value, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'p_headers must be a JSON object, got %', jsonb_typeof(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_key IS NOT NULL THEN
        PERFORM _check_text('p_key', p_key, 1000);
    END IF;
END
$$;

-- _inbox_key_kept: does a processed message or a dead letter of the queue
-- hold the key? (Live rows are checked by the unique index instead.)
-- PL/pgSQL, not LANGUAGE sql: Citus cannot plan a parameterized SQL
-- function inside a delegated call (DESIGN: claim paths are PL/pgSQL).
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key);
END
$$;

-- _send inserts one message into a queue already looked up and checked;
-- p_now is the send's clock. With a lane (lane.sql) it first locks the
-- lane's row: the message is the lane's head when the lane had no row (no
-- message, not blocked), otherwise it waits (parked at infinity); its
-- created_at is greatest(p_now, the lane's newest) and its id is drawn after
-- the lock, so (created_at, id) increases in the order the sends commit. A
-- lane whose head vanished without moving it on (a message deleted by hand)
-- moves on here (_lane_busy). An inbox duplicate changes no lane.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
    v_created timestamptz := p_now;
    v_inbox boolean := p_q.kind = 'inbox' AND p_key IS NOT NULL;
    v_snapshot boolean; -- REPEATABLE READ or SERIALIZABLE: one snapshot for the transaction
    v_free boolean;
    v_lane record;
    v_head boolean;
BEGIN
    IF v_inbox THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            RETURN NULL; -- 1b
        END IF;
    END IF;
    IF p_lane IS NOT NULL THEN
        v_lane := _lane_lock(p_q.name, p_lane, p_now);
        v_created := greatest(p_now, v_lane.last_at);
        v_head := v_lane.created OR NOT _lane_busy(p_q.name, p_lane, v_lane.blocked_id, p_now);
        IF NOT v_head THEN
            v_parked := 'infinity';
        END IF;
    END IF;

    <<ins>>
    BEGIN
        IF v_inbox THEN
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            ON CONFLICT (queue, key) WHERE dedup DO NOTHING
            RETURNING id INTO v_id;
            EXIT ins WHEN v_id IS NULL;
            IF v_snapshot THEN
                -- 3b: raises 40001 when a processed row with the key committed after our snapshot.
                INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
                VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now)
                ON CONFLICT (queue, key) DO NOTHING
                RETURNING true INTO v_free;
                IF v_free THEN
                    DELETE FROM message_processed p WHERE p.queue = p_q.name AND p.id = v_id;
                    -- 3c: the same for a dead letter with the key (message_dead's
                    -- inbox keys are unique since 0.23)
                    v_free := NULL;
                    INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, created_at, dead_at, dedup)
                    VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now, true)
                    ON CONFLICT (queue, key) WHERE dedup DO NOTHING
                    RETURNING true INTO v_free;
                    IF v_free THEN
                        DELETE FROM message_dead x WHERE x.queue = p_q.name AND x.id = v_id;
                        EXIT ins;
                    END IF;
                END IF;
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
                EXIT ins;
            END IF;
            IF _inbox_key_kept(p_q.name, p_key) THEN
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
            END IF;
        ELSE
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            RETURNING id INTO v_id;
        END IF;
    END ins;

    IF p_lane IS NOT NULL THEN
        IF v_id IS NULL THEN
            -- a duplicate: the lane is as it was (a row we created goes again)
            IF v_lane.created THEN
                DELETE FROM lane l WHERE l.queue = p_q.name AND l.name = p_lane;
            END IF;
        ELSIF NOT v_lane.created THEN
            UPDATE lane l SET last_at = v_created WHERE l.queue = p_q.name AND l.name = p_lane;
        END IF;
    END IF;
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message (at most 10 years ahead);
-- NULL or past = now. p_lane (NULL: none; else at most 200 characters)
-- puts it in that ordered lane of the queue (lane.sql): it is handed out
-- only after every message sent to the lane before it has left the queue.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
BEGIN
    PERFORM _queue_require(p_queue, 'send');
    PERFORM _check_message(p_payload, p_headers, p_key);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    PERFORM _check_lane('p_lane', p_lane);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane);
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys, p_deliver_at and p_lanes are NULL or
-- arrays of the same length as p_payloads; each p_deliver_at[i] as send's
-- p_deliver_at, each p_lanes[i] as send's p_lane (NULL: no lane). The lanes
-- of a batch are locked once each, in name order (two batches never wait for
-- each other in a cycle); messages of one lane keep their input order. One
-- notification per batch.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_n int := coalesce(cardinality(p_payloads), 0);
    v_now timestamptz;
    v_ids bigint[];
    v_any boolean := false;
    v_lane record;
    v_l record;
    v_names text[] := '{}';
    v_firsts bigint[] := '{}';
    v_busies boolean[] := '{}';
    v_lasts timestamptz[] := '{}';
    v_news boolean[] := '{}';
    i int;
BEGIN
    PERFORM _queue_require(p_queue, 'send');
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
    IF p_headers IS NOT NULL AND cardinality(p_headers) <> v_n THEN
        RAISE EXCEPTION 'p_headers must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_keys IS NOT NULL AND cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_keys must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_keys)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_deliver_at IS NOT NULL AND cardinality(p_deliver_at) <> v_n THEN
        RAISE EXCEPTION 'p_deliver_at must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_deliver_at)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) <> v_n THEN
        RAISE EXCEPTION 'p_lanes must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_lanes)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
        PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
        PERFORM _check_lane(format('p_lanes[%s]', i), p_lanes[i]);
    END LOOP;
    v_now := clock_timestamp();

    -- The lanes, each locked once, in name order; busy: it has a head (or is
    -- blocked), so every message of the batch waits; otherwise the batch's
    -- first message of the lane (first: its index) becomes its head.
    -- (unnest, not subscripts, in the statements below: a subscript of a
    -- text or jsonb array walks the array from its start, once per row.)
    FOR v_lane IN SELECT u.lane, min(u.k) AS first FROM unnest(p_lanes) WITH ORDINALITY u(lane, k)
                   WHERE u.lane IS NOT NULL GROUP BY u.lane ORDER BY u.lane LOOP
        v_l := _lane_lock(v_q.name, v_lane.lane, v_now);
        v_names := v_names || v_lane.lane;
        v_firsts := v_firsts || v_lane.first;
        v_busies := v_busies || (NOT v_l.created AND _lane_busy(v_q.name, v_lane.lane, v_l.blocked_id, v_now));
        v_lasts := v_lasts || v_l.last_at;
        v_news := v_news || v_l.created;
    END LOOP;

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send (which finds
        -- the lanes locked already).
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now, p_lanes[i]);
            v_any := v_any OR v_ids[i] IS NOT NULL;
        END LOOP;
        -- lanes created above whose every message was a duplicate
        IF true = ANY (v_news) THEN
            DELETE FROM lane l
             WHERE l.queue = v_q.name AND l.name = ANY (ARRAY(SELECT x.name FROM unnest(v_names, v_news) x(name, new) WHERE x.new))
               AND NOT EXISTS (SELECT 1 FROM message m WHERE m.queue = v_q.name AND m.lane = l.name);
        END IF;
    ELSE
        -- Ids are drawn first (after the lane locks) so that they can be
        -- returned in input order (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, k)
          LEFT JOIN unnest(v_names, v_firsts, v_busies, v_lasts) x(name, first, busy, last_at) ON x.name = u.lane;
        IF false = ANY (v_news) THEN -- a lane created here has last_at = v_now already
            UPDATE lane l SET last_at = greatest(v_now, x.last_at)
              FROM unnest(v_names, v_lasts, v_news) x(name, last_at, new)
             WHERE l.queue = v_q.name AND l.name = ANY (v_names) AND l.name = x.name AND NOT x.new;
        END IF;
        v_any := true;
    END IF;
    IF v_any THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/send.sql

-- pgsweep:include functions/claim.sql
-- claim: lease up to p_batch due messages of one queue to p_owner.
--
-- The token. Every claim call draws a fresh, unguessable token
-- (gen_random_uuid()), stores it in message.token of every row it takes and
-- returns it with each of them: renew, complete, fail and release act only on
-- rows whose current claim carries their p_token (ack.sql). p_owner is only a
-- label -- who holds the row, for people and metrics -- so an owner that takes
-- its own expired lease back gets a new token and its old token acts on
-- nothing. token is in no index: claims stay HOT updates.
--
-- Candidates: rows with visible_at <= now and attempt < max_attempts. visible_at
-- is the delivery/retry time of pending and failed rows and the lease expiry
-- of processing rows, so expired leases are taken by the same scan. A row that
-- used its last attempt (attempt >= max_attempts) is never handed out again:
-- fail dead-letters it, and queue_recover dead-letters one whose lease expired.
--
-- The scan walks message_claim (queue, created_at, id) in order, locks up to
-- n rows FOR UPDATE SKIP LOCKED and stops: rows another claimer has locked
-- are skipped, not waited for, and a row that a concurrent claim updated and
-- committed meanwhile is re-checked against the predicate before it is
-- locked, so two claimers never get the same row. The UPDATE then finds the
-- locked rows by ctid (stable: we hold their locks) instead of descending the
-- primary key once per row, and changes only columns no index holds (status,
-- owner, token, attempt, visible_at), so it is a HOT update.
--
-- Parked rows. A row that is not due for a while -- a scheduled message, a
-- retry waiting for its backoff, a requeued dead letter with a delivery time
-- -- is parked: parked_until holds its due time. It is not in message_claim,
-- whose predicate is parked_until IS NULL, but in message_parked (queue,
-- parked_until). Without this, every scan from the head walked all of them
-- (measured: 100,000 messages scheduled for tomorrow made a quiet queue's
-- claims 30 times slower). Each claim first promotes the parked rows that
-- came due (one probe of message_parked when none did). Leases are not
-- parked, and parked_until is a column of its own rather than visible_at:
-- claims set visible_at every time, and an indexed column they change --
-- even one only a partial index holds -- would end their HOT updates. Rows
-- in flight number at most the workers' batches.
--
-- The claim cursor (table claim_cursor, one row per queue) is why a claim
-- does not slow down as a queue drains. Completed rows leave dead entries at
-- the head of message_claim until VACUUM removes them, and rows in flight sit
-- there too; a scan from the start walks all of them, on every claim, so the
-- cost grows with the rows processed since the last vacuum (measured: from 100
-- to 2,000 buffers per claim while 200,000 messages drained). The cursor is
-- the newest (created_at, id) any claim has taken, and the scan starts there.
-- Rows behind it are in flight, waiting for a retry or a schedule, or gone --
-- except those that became due since: expired leases, retries and scheduled
-- rows whose time came, rows of a claim that rolled back, and rows committed
-- late by a long transaction (created_at is the send time, not the commit
-- time). A rescan from the start finds them: the first claim more than the
-- queue's claim_rescan (default 1 second) after the last rescan does one, and
-- so does every claim that cannot fill its batch from the cursor on (it takes
-- the rest from the rows before the cursor). So a due row waits behind the
-- cursor only while claims fill whole batches with newer rows -- the queue has
-- a backlog -- and then at most about claim_rescan: oldest first is exact when
-- a queue keeps up, and within claim_rescan when it does not. A queue that
-- needs the exact order always sets claim_rescan to 0: every claim then scans
-- from the head and pays for the dead index entries there (docs/benchmarks.md).
-- The cursor row is updated only by a claim that gets its lock (SKIP LOCKED):
-- claims never wait for each other; a skipped update only means the next
-- claim starts a little further back.
--
-- Ordered lanes (lane.sql) need nothing here: only a lane's head is ever in
-- the claim index; the messages waiting behind it are parked until
-- 'infinity', which the promotion below never reaches. So a claim never
-- returns two messages of one lane, and its cost does not grow with the
-- messages waiting behind heads (sql/tests/lanes.sql counts the scans). A
-- lane's next head usually lies behind the cursor (its lane was sent long
-- ago); the promotion moves the cursor back to it (_lane_next), so claims
-- find it from the cursor on instead of in the pass before it.
--
-- Each row carries its lane (NULL: none) last, so that a consumer knows which
-- of its messages must keep their order among themselves.
--
-- A paused queue (queue_pause, queue_ops.sql) claims nothing: the flag is read
-- with the settings the claim reads anyway.
--
-- The clock is read once into v_now and the token drawn once into v_token
-- (scale-out rule: plain values in UPDATE). p_lease NULL means the queue's
-- lease_default. Rows come back oldest first.
--
-- This overload takes the time from its caller (p_now, NULL = the clock): for
-- tests only. claim(p_queue, p_owner, p_batch, p_lease) below is the verb.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rescan_every interval;
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_cursor_at timestamptz;
    v_cursor_id bigint;
    v_rescanned timestamptz;
    v_rescan boolean;
    v_from_at timestamptz;
    v_from_id bigint;
    v_to_at timestamptz;
    v_to_id bigint;
    v_tids tid[];
    v_ids bigint[];
    v_all tid[] := '{}';
    v_all_ids bigint[] := '{}';
    v_n int := 0;
    v_at timestamptz;
    v_id bigint;
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
    v_read_at timestamptz;
    v_read_id bigint;
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    -- Two statements, not a join: on Citus queue is a reference table and
    -- claim_cursor a distributed one, and a delegated claim may only touch
    -- its own shard (each statement filters by the queue).
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused
      INTO v_max, v_lease, v_rescan_every, v_paused
      FROM queue q
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    SELECT c.created_at, c.id, c.rescanned_at INTO v_cursor_at, v_cursor_id, v_rescanned
      FROM claim_cursor c WHERE c.queue = p_queue;
    v_read_at := v_cursor_at;
    v_read_id := v_cursor_id;
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    -- The cursor is trusted only within claim_rescan after the last rescan, on
    -- the clock the caller uses (tests pin p_now in both directions).
    -- Pass 1 scans from the cursor on; pass 2 scans the rows before it, when
    -- the cursor is not trusted or pass 1 could not fill the batch.
    v_rescan := v_rescanned IS NULL OR v_now < v_rescanned OR v_now >= v_rescanned + v_rescan_every;
    IF v_rescan THEN
        v_cursor_at := '-infinity';
        v_cursor_id := -9223372036854775808;
    END IF;
    v_from_at := v_cursor_at;
    v_from_id := v_cursor_id;
    v_to_at := 'infinity';
    v_to_id := 9223372036854775807;
    -- Parked rows that came due join the claim index, where the scans below
    -- (or the next claims) find them. When none is due this is one probe of
    -- message_parked; rows other claims are promoting are skipped.
    SELECT array_agg(p.ctid), array_agg(p.id) INTO v_tids, v_ids
      FROM (SELECT d.ctid, d.id FROM message d
             WHERE d.queue = p_queue AND d.parked_until <= v_now
             ORDER BY d.parked_until
             LIMIT 4 * p_batch
               FOR UPDATE SKIP LOCKED) p;
    IF v_tids IS NOT NULL THEN
        -- By ctid and id both: whichever the planner takes, it touches only
        -- these rows. With ctid alone and the queue's statistics stale (a
        -- queue that grew since the last ANALYZE looks tiny), it took the
        -- primary key on queue and walked the whole queue.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
    END IF;
    FOR pass IN 1 .. 2 LOOP
        SELECT array_agg(c.ctid), array_agg(c.id),
               (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
               (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
          INTO v_tids, v_ids, v_at, v_id
          FROM (SELECT s.ctid, s.created_at, s.id
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL
                   AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                   AND (s.created_at, s.id) < (v_to_at, v_to_id)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                 ORDER BY s.created_at, s.id
                 LIMIT p_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
            IF v_last_at IS NULL THEN -- pass 1's rows are the newest
                v_last_at := v_at;
                v_last_id := v_id;
            END IF;
        END IF;
        EXIT WHEN v_n = p_batch OR v_rescan;
        v_rescan := true;
        v_from_at := '-infinity';
        v_from_id := -9223372036854775808;
        v_to_at := v_cursor_at;
        v_to_id := v_cursor_id;
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    IF v_rescanned IS NULL THEN
        -- No cursor row: queue_create makes one, so only a deleted row gets here.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, v_last_at, v_last_id, v_now)
        ON CONFLICT (queue) DO NOTHING;
    ELSE
        -- A rescan may move the cursor back (to the stragglers it found);
        -- other claims only move it forward, and not when it went back
        -- since this claim read it (below what it read): a rescan, or the
        -- new heads of lanes (lane.sql, _lane_next), which a claim moving it
        -- past them would leave to the pass before the cursor.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR ((c.created_at, c.id) < (v_last_at, v_last_id)
                             AND (c.created_at, c.id) >= (v_read_at, v_read_id)))
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:include functions/claim_ids.sql
-- claim_ids: claim exactly the given messages, for direct dispatch.
--
-- A relay that publishes an outbox to a broker (docs/relay.md) dispatches a
-- message at once after the transaction that sent it commits: it knows the
-- ids, and claim_ids leases those ids -- and only those -- to p_owner, so the
-- message reaches the broker without waiting for the next claim. Whatever
-- claim_ids does not take (the row is in flight elsewhere, not due yet, gone)
-- is left to claim: direct dispatch is a shortcut, never the only way a
-- message leaves the table.
--
-- It claims exactly what claim would hand out now, by the same rules:
--  * claimable: visible_at <= now and attempt < max_attempts -- pending or
--    failed rows that are due, and rows whose lease expired (visible_at is
--    the lease expiry of a processing row, so a live lease is never taken:
--    the fence of its claim holds) -- and not parked beyond now: a row
--    scheduled or in its backoff is taken only once due, and a message that
--    waits behind its lane's head (parked until 'infinity', lane.sql) never:
--    only a lane's head is claimable, as for claim.
--  * a paused queue (queue_pause) hands out nothing, as claim.
--  * FOR UPDATE SKIP LOCKED: rows another claimer has locked are skipped,
--    never waited for, so claim_ids and claim (or two claim_ids with the same
--    ids, on two relays) never hand out one row twice.
--  * the row update is claim's, column for column: status 'processing',
--    owner, a fresh token (one per call, the same for all its rows),
--    attempt + 1, visible_at = the lease expiry; and parked_until = NULL,
--    which is what claim's promotion does to a parked row that came due
--    before it is claimed (a row that was not parked keeps NULL, and its
--    update stays HOT).
--  * the claim cursor moves forward to the newest row taken, as a claim's
--    does (never back; only when its row lock is free): without it, claims
--    would walk the dead index entries of every message direct dispatch
--    completed. A due row behind the cursor is found by claim's rescan, as
--    for any claim (claim.sql).
-- Rows come back oldest first by (created_at, id), as claim's, each with its
-- lane (NULL: none) last.
--
-- p_ids: 1 to 10000 ids (_check_ids); ids that are not messages of the queue
-- are ignored. p_lease NULL is the queue's lease_default. This overload takes
-- the time from its caller (p_now, NULL = the clock): for tests only.
CREATE OR REPLACE FUNCTION claim_ids(p_queue text, p_owner text, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_tids tid[];
    v_ids bigint[];
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.paused INTO v_max, v_lease, v_paused
      FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    SELECT array_agg(c.ctid), array_agg(c.id),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
      INTO v_tids, v_ids, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id
              FROM message s
             WHERE s.queue = p_queue AND s.id = ANY (p_ids)
               AND s.visible_at <= v_now AND s.attempt < v_max
               AND (s.parked_until IS NULL OR s.parked_until <= v_now)
             ORDER BY s.created_at, s.id
               FOR UPDATE SKIP LOCKED) c;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;

    -- Forward only, and only when the cursor row's lock is free (claim.sql).
    UPDATE claim_cursor c
       SET created_at = v_last_at, id = v_last_id
     WHERE c.queue = p_queue
       AND (c.created_at, c.id) < (v_last_at, v_last_id)
       AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until,
               parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids) -- see claim's promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim_ids(p_queue text, p_owner text, p_ids bigint[], p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim_ids(p_queue, p_owner, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- dead_letter: a permanent failure. The rows the claim whose token is p_token
-- holds move to message_dead at once, whatever attempts they have left, with
-- p_error as their last error -- what fail does to a row on its last attempt
-- (fail.sql), for a message that no retry can deliver (a relay's broker
-- refused it for good: too large, malformed). A dead lane head lets its lane
-- move on, or blocks it, by the queue's lane_dead, in this transaction, as
-- fail's dead letters do. dead_requeue sends it back once the cause is fixed.
-- Returns the ids it acted on; a stale or wrong token acts on nothing
-- (ack.sql). This overload takes the time from its caller (p_now, NULL = the
-- clock): for tests only.
CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_error text := left(p_error, 10000);
    v_dead bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_dead) u;
END
$$;

CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT dead_letter(p_queue, p_token, p_ids, p_error, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim_ids.sql

-- pgsweep:include functions/ack.sql
-- renew and complete: act only on rows whose current claim carries p_token,
-- return their ids.
--
-- Fencing is by the claim token (claim.sql): every claim call stores a fresh
-- token in the rows it takes, and fail, release and queue_recover end the
-- claim (status no longer 'processing'), so a call with the token of an
-- earlier claim matches nothing and the caller learns exactly which leases it
-- lost -- also when the row was taken again by the same owner, which the
-- owner label could not tell apart. A lease that expired but was not taken
-- over still carries its token: completing it then is the best outcome (no
-- redelivery), and nobody else held it meanwhile.
--
-- The verbs (renew, complete, fail, release without p_now) are SECURITY
-- DEFINER: workers hold no privilege on the tables, so the token is the only
-- way to a row. The p_now overloads are for tests.

CREATE OR REPLACE FUNCTION _check_ids(p_ids bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'p_ids must hold 1 to 10000 ids, got %',
            CASE WHEN p_ids IS NULL THEN 'NULL' ELSE cardinality(p_ids)::text END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_token(p_token uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'p_token must be the token claim returned, got NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- renew extends the leases to p_lease from now (NULL: the queue's lease_default).
CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_until timestamptz;
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_until := coalesce(p_now, clock_timestamp()) + coalesce(p_lease, v_q.lease_default);
    RETURN QUERY
    UPDATE message m SET visible_at = v_until
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
END
$$;

CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT renew(p_queue, p_token, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- complete: outbox rows are deleted; inbox rows move to message_processed,
-- where they keep de-duplicating their key until retention removes them.
-- A completed lane head makes its lane move on to its next message, in this
-- transaction (lane.sql): the lane's row is locked for that, so a completion
-- waits for a transaction that is sending to the same lane.
--
-- The common case pays nothing for lanes: when the queue has no lane row at
-- all, none of the rows completed here has a lane (a lane's row exists, and
-- is committed, for as long as the lane has a message, and the rows completed
-- here are in flight), so the DELETE returns the ids straight away. Gathering
-- ids and lanes into arrays and returning the ids from them cost 13% more CPU
-- per claim + complete (docs/benchmarks.md, "security").
CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    IF p_token IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        PERFORM _check_token(p_token);
        PERFORM _check_ids(p_ids);
    END IF;
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    IF NOT EXISTS (SELECT 1 FROM lane l WHERE l.queue = p_queue) THEN
        IF v_kind = 'outbox' THEN
            RETURN QUERY
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id;
        ELSE
            RETURN QUERY
            WITH d AS (
                DELETE FROM message m
                 WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
                RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
            )
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id;
        END IF;
        RETURN;
    END IF;
    IF v_kind = 'outbox' THEN
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id, m.lane
        )
        SELECT array_agg(d.id), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL) INTO v_ids, v_lanes FROM d;
    ELSE
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane
        ), p AS (
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id
        )
        SELECT (SELECT array_agg(p.id) FROM p), (SELECT array_agg(DISTINCT d.lane) FROM d WHERE d.lane IS NOT NULL)
          INTO v_ids, v_lanes;
    END IF;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, NULL, false, v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT complete(p_queue, p_token, p_ids, NULL::timestamptz);
END
$$;

-- release: give messages back unprocessed, as if the claim had not happened:
-- the attempt is taken back, owner and token cleared, and the row is due at
-- once (status 'pending' again, or 'failed' when an earlier attempt had
-- failed). For messages claimed but never started -- a worker shutting down
-- releases what it has not begun -- so a restart or a deploy neither waits
-- for their leases to expire nor spends an attempt on them. A message whose
-- handler ran must be completed or failed instead: releasing it would hide
-- that attempt.
CREATE OR REPLACE FUNCTION release(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := clock_timestamp();
    RETURN QUERY
    UPDATE message m
       SET status = CASE WHEN m.attempt > 1 THEN 'failed' ELSE 'pending' END,
           owner = NULL, token = NULL, attempt = m.attempt - 1, visible_at = v_now
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;
-- pgsweep:end functions/ack.sql

-- pgsweep:include functions/fail.sql
-- fail: the handler failed. Rows that used their last attempt move to
-- message_dead (payload, headers, attempts, last error and timestamps kept);
-- the others wait for a retry: status 'failed', owner and token cleared, visible again
-- after p_retry_after (NULL = backoff, else 0 seconds to 30 days) or the
-- queue's exponential backoff:
--     delay(attempt n) = least(backoff_max, backoff_base * 2^(n-1))
-- shortened by the queue's backoff_jitter: each call draws one factor r in
-- [1 - backoff_jitter, 1] and waits delay * r, so that messages failed at
-- the same moment (an outage) by many workers do not all come back at once.
-- Acts only on rows whose current claim carries p_token (see ack.sql on
-- fencing).
--
-- The retry times are computed into an array indexed by attempt before the
-- UPDATE (scale-out rule: no timestamptz arithmetic applied to columns in
-- SET); delays stop growing at backoff_max, so the array has at most ~40
-- entries and attempt is capped to its length.
--
-- Lanes (lane.sql): a failing lane head stays the head -- its retry is parked
-- for its backoff like any other, and the lane waits. A dead-lettered head
-- makes its lane move on (lane_dead 'move_on', the default) or stop until
-- dead_requeue or lane_skip (lane_dead 'block'), in this transaction.
--
-- fail_details says what it did with each id (dead: moved to message_dead);
-- this overload takes the time from its caller (p_now, NULL = the clock) and
-- is for tests. The verbs below -- fail, and fail_details without p_now for
-- callers that count dead letters (the Go Worker) -- use the clock.
CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval, p_now timestamptz)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_due timestamptz[];
    v_k int := 1;
    v_delay interval;
    v_jitter double precision;
    v_error text := left(p_error, 10000);
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());

    IF p_retry_after IS NOT NULL THEN
        v_due := ARRAY[v_now + p_retry_after];
    ELSE
        v_jitter := 1 - v_q.backoff_jitter * random();
        LOOP
            v_delay := least(v_q.backoff_max, v_q.backoff_base * power(2, v_k - 1));
            v_due[v_k] := v_now + v_delay * v_jitter;
            EXIT WHEN v_delay >= v_q.backoff_max OR v_k >= v_q.max_attempts OR v_q.backoff_base = interval '0';
            v_k := v_k + 1;
        END LOOP;
    END IF;
    v_k := cardinality(v_due);

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
           AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u, true FROM unnest(v_dead) u;

    RETURN QUERY
    UPDATE message m
       -- coalesce: Citus 13.2 mistakes a bare array element at the top of a
       -- SET for an array assignment and crashes; every element is set
       SET status = 'failed', owner = NULL, token = NULL, visible_at = coalesce(v_due[least(m.attempt, v_k)], v_now),
           last_error = v_error,
           parked_until = CASE WHEN v_due[least(m.attempt, v_k)] > v_now THEN coalesce(v_due[least(m.attempt, v_k)], v_now) END
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
       AND m.attempt < v_q.max_attempts
    RETURNING m.id, false;
END
$$;

CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval DEFAULT NULL)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz);
END
$$;

CREATE OR REPLACE FUNCTION fail(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_retry_after interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT f.id FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz) f;
END
$$;
-- pgsweep:end functions/fail.sql

-- pgsweep:include functions/queue_ops.sql
-- Queue operations for operators (admin role): pause and resume, cancel
-- messages, purge a queue, drop it. docs/queues.md, "Operating a queue".
--
-- Every one of them acts on one queue (scale-out rule) and raises 22023 for
-- an unknown queue or a bad argument before it changes anything. Messages of
-- lanes that leave make their lanes move on in the same transaction
-- (lane.sql): the lanes are locked first, in name order, then the messages
-- are deleted.

-- queue_pause: claims of a paused queue return nothing (claim.sql checks
-- the flag it reads anyway); sends, renewals, completions and failures go on,
-- so work in flight finishes and new messages wait. Returns true when the
-- queue was running (false: it was paused already, nothing changed).
CREATE OR REPLACE FUNCTION queue_pause(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    UPDATE queue q SET paused = true, updated_at = v_now WHERE q.name = p_queue AND NOT q.paused;
    RETURN FOUND;
END
$$;

-- queue_resume: claims take messages again; listeners are notified so that
-- idle workers claim at once. Returns true when the queue was paused.
CREATE OR REPLACE FUNCTION queue_resume(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    UPDATE queue q SET paused = false, updated_at = v_now WHERE q.name = p_queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- _lanes_lock locks the rows of the given lanes of a queue, in name order.
CREATE OR REPLACE FUNCTION _lanes_lock(p_queue text, p_lanes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) > 0 THEN
        PERFORM 1 FROM lane l WHERE l.queue = p_queue AND l.name = ANY (p_lanes) ORDER BY l.name FOR UPDATE;
    END IF;
END
$$;

-- message_cancel deletes messages that are pending -- due, scheduled, or
-- waiting in their lane -- and returns the ids it deleted. Messages in flight
-- (processing) or waiting for a retry (failed) are not touched, nor are ids
-- that are not live messages of the queue (completed, dead, never sent), so a
-- repeated call is harmless. A cancelled lane head makes its lane move on. A
-- cancelled inbox message is gone, not processed: its key can be sent again.
CREATE OR REPLACE FUNCTION message_cancel(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_ids(p_ids);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _lanes_lock(p_queue, ARRAY(SELECT DISTINCT m.lane FROM message m
                                         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.lane IS NOT NULL));
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.status = 'pending'
        RETURNING m.id, m.lane, m.parked_until
    )
    SELECT array_agg(d.id),
           array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_ids, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

-- queue_purge deletes every pending message of the queue (due, scheduled,
-- waiting in a lane) and returns how many. Messages in flight and retries
-- stay; so do processed inbox rows and dead letters (retention's). Lanes
-- whose head was pending are emptied; a lane whose head is in flight or
-- waiting for its retry keeps it.
CREATE OR REPLACE FUNCTION queue_purge(p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n bigint;
    v_lanes text[];
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name FOR UPDATE;
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue AND m.status = 'pending'
        RETURNING m.lane, m.parked_until
    )
    SELECT count(*), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_n, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN v_n;
END
$$;

-- queue_drop removes a queue and everything of it: its messages (live,
-- processed, dead), lanes, claim cursor, recovery cursor and built-in
-- retention policies. It refuses (SQLSTATE 55006, object_in_use; nothing
-- changed) while a message of the queue is in flight -- leased, lease not
-- expired -- unless p_force: stop the queue's workers first (or pause it and
-- let them finish). Their late calls then fail as calls to an unknown queue
-- (22023) and change nothing. Returns the number of live messages deleted.
--
-- Sends that commit after the drop leave messages without a queue, which no
-- verb reaches: stop the senders first. (A send does not lock the queue
-- row: that would put every send of a queue in line behind one row.)
CREATE OR REPLACE FUNCTION queue_drop(p_queue text, p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_n bigint;
    v_live bigint;
BEGIN
    IF p_force IS NULL THEN
        RAISE EXCEPTION 'p_force must be true or false, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM 1 FROM queue q WHERE q.name = p_queue FOR UPDATE;
    v_now := clock_timestamp();
    DELETE FROM lane l WHERE l.queue = p_queue;
    -- Delete first, then look: the DELETE waits for claims in progress and
    -- sees what they committed, so no lease slips in between check and act.
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue
        RETURNING m.status, m.visible_at
    )
    SELECT count(*), count(*) FILTER (WHERE d.status = 'processing' AND d.visible_at > v_now) INTO v_n, v_live FROM d;
    IF v_live > 0 AND NOT p_force THEN
        RAISE EXCEPTION 'queue "%" has % message(s) in flight; stop its workers first, or drop it anyway with p_force', p_queue, v_live
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT queue_drop(%L, p_force => true) drops it with them; their workers'' calls then fail (unknown queue)', p_queue);
    END IF;
    DELETE FROM message_processed p WHERE p.queue = p_queue;
    DELETE FROM message_dead d WHERE d.queue = p_queue;
    DELETE FROM claim_cursor c WHERE c.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
-- pgsweep:end functions/queue_ops.sql

-- pgsweep:include functions/lane.sql
-- Ordered lanes (DESIGN.md, "Ordered lanes"; docs/queues.md, "Ordered lanes").
--
-- A message sent with a lane (send's p_lane, send_batch's p_lanes) belongs to
-- that lane of its queue. A lane hands out one message at a time, oldest
-- first by (created_at, id): the next becomes claimable only when the one
-- before it has left `message` (completed, dead-lettered, cancelled or
-- purged). Different lanes, and messages without a lane, are claimed in
-- parallel as before.
--
-- The head. At most one message of a lane is its head; every other one waits
-- parked with parked_until = 'infinity'. A parked row is out of the claim
-- index (message_claim is partial on parked_until IS NULL, claim.sql), and the
-- claim's promotion of parked rows (parked_until <= now) never reaches
-- infinity, so a message waiting behind its head costs a claim nothing: the
-- claim does not know lanes at all, it only ever sees heads. The head itself
-- is an ordinary message: pending (due or scheduled), in flight, or failed and
-- waiting for its retry -- the lane waits meanwhile (head-of-line blocking, the
-- price of the order). Recovery of an expired lease keeps it the head.
--
-- Why 'infinity' and not a lane column in the claim index: a claim scans one
-- index in (created_at, id) order and takes what it can lock; filtering out
-- the non-heads there would make every claim walk them (100,000 messages
-- behind 10,000 heads: 100,000 index entries per claim). Parked at infinity
-- they are not in that index. The promotion (parked_until back to NULL, or to
-- the message's own delivery time when it was scheduled for later) happens in
-- the transaction of the statement that made the head leave. Its cost: one
-- probe of message_lane and one UPDATE per message, and that UPDATE is not
-- HOT (the row enters the claim index): docs/benchmarks.md, "Ordered lanes".
-- A new head usually lies behind the claim cursor (claim.sql): the
-- promotion moves the cursor back to the oldest new head, so the next claims
-- find it from the cursor on, not in their pass from the head of the queue.
--
-- The lane row. Table lane holds one row per lane that has messages (or is
-- blocked): blocked_id and last_at, the created_at of the newest message
-- sent to it. A lane row that is not blocked always has a head, so the row's
-- existence says whether a new message waits; the head itself is not
-- recorded (that would be one more row version per message). Its row lock is
-- what serialises a lane:
--  * send locks it (_lane_lock) before it decides whether its message is the
--    head (the lane had no row: no message, not blocked) or waits, and holds it
--    until its transaction ends. Sends to one lane therefore serialise, and
--    created_at = greatest(now, last_at) with an id drawn after the lock
--    keeps (created_at, id) increasing in lock order, which is commit order:
--    a lane hands out its messages in the order their sends committed.
--  * a head that leaves locks it too (_lane_after) and promotes the oldest
--    waiting message (_lane_next: one lookup and one UPDATE by id for all
--    the lanes of a completion). A send that is still open when the head
--    leaves makes the promotion wait for it (then it sees its message): keep
--    transactions that send to a lane short. Without the lock a head could
--    leave between a send's "there is a head" and its commit, and the new
--    message would wait behind nothing, forever.
--  * the row goes when the lane is empty (no message, not blocked), so the
--    table holds only active lanes; queue_stats counts them.
-- Advisory locks would be no guard (DESIGN: never the only one); the row is
-- the truth, and under Citus it lives with its queue.
--
-- Lock order: lane rows first, in name order, then the waiting messages of
-- those lanes. complete, fail and recovery hold only their own in-flight
-- heads when they take the lane locks; cancel and purge lock the lanes before
-- they delete. A transaction that sends to several lanes takes their locks in
-- the order it sends; send_batch takes them in name order. Two transactions
-- that lock lanes in opposite orders may deadlock (PostgreSQL detects it and
-- fails one, to be retried): send to several lanes in name order.
--
-- A dead head (its last attempt failed, or its lease expired on it): with the
-- queue's lane_dead 'move_on' (the default) the lane moves on to its next
-- message; with 'block' the lane stops, blocked_id names the dead letter, and
-- its messages wait until dead_requeue puts that letter back at the head of
-- its lane or lane_skip(p_queue, p_lane) moves on without it (dead.sql).

-- _check_lane: NULL (no lane) or a non-empty name of at most 200 characters.
CREATE OR REPLACE FUNCTION _check_lane(p_arg text, p_lane text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lane IS NOT NULL AND (p_lane = '' OR length(p_lane) > 200) THEN
        PERFORM _check_text(p_arg, p_lane, 200);
    END IF;
END
$$;

-- _lane_lock locks a lane's row, creating it when the lane has none (created
-- true: the lane had no message and was not blocked). The row lock is held
-- until the caller's transaction ends. A row deleted meanwhile (its lane
-- emptied) is created again.
CREATE OR REPLACE FUNCTION _lane_lock(p_queue text, p_lane text, p_now timestamptz,
                                      OUT created boolean, OUT blocked_id bigint, OUT last_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    LOOP
        INSERT INTO lane AS l (queue, name, last_at) VALUES (p_queue, p_lane, p_now)
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING true INTO created;
        IF created THEN
            last_at := p_now;
            RETURN;
        END IF;
        SELECT l.blocked_id, l.last_at INTO blocked_id, last_at
          FROM lane l WHERE l.queue = p_queue AND l.name = p_lane
           FOR UPDATE;
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- _lane_busy: a lane whose row the caller holds locked, not created by it --
-- is a message of it handed out next (blocked, or it has a head)? A lane row
-- that is not blocked has a head (the invariant every verb keeps), unless a
-- message was deleted by hand: then the lane's oldest message becomes its
-- head here (and the lane is busy), or, when it has none, the lane is free.
-- The head is normally the lane's oldest message: the probe reads one or
-- two entries of message_lane.
CREATE OR REPLACE FUNCTION _lane_busy(p_queue text, p_lane text, p_blocked bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_blocked IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM message m
                WHERE m.queue = p_queue AND m.lane = p_lane AND m.parked_until IS DISTINCT FROM 'infinity') THEN
        RETURN true;
    END IF;
    RETURN _lane_next(p_queue, ARRAY[p_lane], p_now, false) > 0;
END
$$;

-- _lane_next: the lanes p_lanes (locked by the caller, none blocked) have no
-- head. The oldest message of each, by (created_at, id), becomes its head:
-- claimable now, or parked until its delivery time when it was scheduled for
-- later -- one statement for all the lanes. A lane with no message left loses
-- its row when p_drop_empty (the lane is empty); otherwise (a send is about
-- to add one) it keeps it. Returns how many were promoted.
CREATE OR REPLACE FUNCTION _lane_next(p_queue text, p_lanes text[], p_now timestamptz, p_drop_empty boolean)
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until timestamptz;
    v_one bigint;
    v_ids bigint[];
    v_later bigint[];
    v_at timestamptz[];
    v_promoted text[];
    v_low_at timestamptz;
    v_low_id bigint;
    v_tids tid[];
BEGIN
    SELECT array_agg(x.id), array_agg(x.ctid), array_agg(u.name),
           array_agg(x.id) FILTER (WHERE x.visible_at > p_now), array_agg(x.visible_at) FILTER (WHERE x.visible_at > p_now),
           (array_agg(x.created_at ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now))[1],
           (array_agg(x.id ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now))[1]
      INTO v_ids, v_tids, v_promoted, v_later, v_at, v_low_at, v_low_id
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.ctid, m.id, m.visible_at, m.created_at FROM message m
                          WHERE m.queue = p_queue AND m.lane = u.name
                          ORDER BY m.created_at, m.id
                          LIMIT 1) x;
    IF v_ids IS NOT NULL THEN
        -- By ctid (and id, as claim does: whichever the planner takes, it
        -- touches only these rows): the rows are locked by nobody else --
        -- waiting messages are touched only under their lane's lock, which
        -- the caller holds -- so their ctids stay. By id alone, each row cost
        -- a descent of the primary key.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
        IF v_low_at IS NOT NULL THEN
            -- The new heads usually lie behind the claim cursor (their lanes
            -- were sent long ago), where only a claim's pass before the
            -- cursor finds them, walking every dead entry and row in flight
            -- from the head of the queue (claim.sql). Move the cursor back to
            -- the oldest of them, so the next claims start there. Only when
            -- the row is free (SKIP LOCKED, like the claims' own updates):
            -- the cursor is a hint, and the pass before it still finds every
            -- due row.
            UPDATE claim_cursor c SET created_at = v_low_at, id = v_low_id
             WHERE c.queue = p_queue
               AND c.ctid = (SELECT k.ctid FROM claim_cursor k
                              WHERE k.queue = p_queue AND (k.created_at, k.id) > (v_low_at, v_low_id)
                                FOR UPDATE SKIP LOCKED);
        END IF;
        IF v_later IS NOT NULL THEN
            -- scheduled for later: parked until its time, as send parks it
            -- (plain values: Citus 13.2 crashes on a bare array element at the
            -- top of an UPDATE's SET)
            FOR i IN 1 .. cardinality(v_later) LOOP
                v_until := v_at[i];
                v_one := v_later[i];
                UPDATE message m SET parked_until = v_until WHERE m.queue = p_queue AND m.id = v_one;
            END LOOP;
        END IF;
    END IF;
    IF p_drop_empty AND coalesce(cardinality(v_ids), 0) < cardinality(p_lanes) THEN
        DELETE FROM lane l
         WHERE l.queue = p_queue AND l.name = ANY (p_lanes) AND NOT l.name = ANY (coalesce(v_promoted, '{}'));
    END IF;
    RETURN coalesce(cardinality(v_ids), 0);
END
$$;

-- _lane_after: the heads of the lanes p_lanes left `message` (completed,
-- dead-lettered, cancelled, purged): the callers know, because only a
-- lane's head is ever in flight (complete, fail, recovery) and a cancelled
-- or purged message that was not parked until infinity was its lane's head.
-- Each lane moves on to its next message -- unless p_block (the queue's
-- lane_dead is 'block') and its head was dead-lettered (its id is in
-- p_dead): then the lane stops, blocked by that dead letter. Lanes are
-- locked in name order (see the header).
CREATE OR REPLACE FUNCTION _lane_after(p_queue text, p_lanes text[], p_dead bigint[], p_block boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_next text[];
    v_block_names text[];
    v_block_ids bigint[];
BEGIN
    IF p_lanes IS NULL OR cardinality(p_lanes) = 0 THEN
        RETURN;
    END IF;
    -- A join with the names, not name = ANY (p_lanes): on a table of a few
    -- thousand lanes the planner scans it whole and compares every row with
    -- every name (1,000 lanes, 100 names: 1.1 ms of a 3.5 ms completion).
    SELECT array_agg(l.name) FILTER (WHERE l.blocked_id IS NULL) INTO v_next
      FROM (SELECT k.name, k.blocked_id FROM unnest(p_lanes) u(name)
              JOIN lane k ON k.queue = p_queue AND k.name = u.name
             ORDER BY k.name
               FOR UPDATE OF k) l;
    IF v_next IS NULL THEN
        RETURN;
    END IF;
    IF p_block AND p_dead IS NOT NULL THEN
        SELECT array_agg(d.lane), array_agg(d.id) INTO v_block_names, v_block_ids
          FROM message_dead d
         WHERE d.queue = p_queue AND d.id = ANY (p_dead) AND d.lane = ANY (v_next);
        IF v_block_names IS NOT NULL THEN
            UPDATE lane l SET blocked_id = b.id
              FROM unnest(v_block_names, v_block_ids) b(name, id)
             WHERE l.queue = p_queue AND l.name = ANY (v_block_names) AND l.name = b.name;
            v_next := ARRAY(SELECT u FROM unnest(v_next) u WHERE NOT u = ANY (v_block_names));
        END IF;
    END IF;
    IF cardinality(v_next) > 0 THEN
        PERFORM _lane_next(p_queue, v_next, p_now, true);
    END IF;
END
$$;

-- lane_skip: a lane stopped by a dead letter (lane_dead 'block') moves on
-- without it: its next message becomes the head. The dead letter stays in
-- message_dead (dead_requeue can still send it back; it then waits its turn
-- like any message of the lane). Returns true when the lane was blocked,
-- false (nothing changed) otherwise -- also for a lane that does not exist.
CREATE OR REPLACE FUNCTION lane_skip(p_queue text, p_lane text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocked bigint;
BEGIN
    PERFORM _check_text('p_lane', p_lane, 200);
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    SELECT l.blocked_id INTO v_blocked FROM lane l WHERE l.queue = p_queue AND l.name = p_lane FOR UPDATE;
    IF v_blocked IS NULL THEN
        RETURN false;
    END IF;
    UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = p_lane;
    IF _lane_next(p_queue, ARRAY[p_lane], clock_timestamp(), true) > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN true;
END
$$;

-- lane_stats: the lanes of one queue that most need an operator, at most
-- p_limit (1..10000) of them: blocked lanes first, then the lanes whose head
-- is oldest. It reads every lane of the queue to choose them (a probe of
-- each lane's first messages) and counts the waiting messages of the lanes
-- it returns only.
--   waiting       messages waiting behind the head (or behind the block)
--   head_id       the head; for a blocked lane, the dead letter it waits for
--   head_attempt  the head's attempts so far (the dead letter's attempts)
--   head_state    pending, scheduled (pending, due later), processing,
--                 failed (waiting for its retry) or dead (blocked)
--   oldest_age    age (since it was sent) of the lane's oldest message, the
--                 dead letter's included
CREATE OR REPLACE FUNCTION lane_stats(p_queue text, p_limit int DEFAULT 100)
RETURNS TABLE (queue text, lane text, waiting bigint, head_id bigint, head_attempt int, head_state text,
               oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    PERFORM _queue_get(p_queue);
    RETURN QUERY
    SELECT p_queue, t.name, w.n, coalesce(t.blocked_id, t.h_id), coalesce(t.d_attempts, t.h_attempt),
           CASE WHEN t.blocked_id IS NOT NULL THEN 'dead'
                WHEN t.h_status = 'pending' AND t.h_parked > v_now THEN 'scheduled'
                ELSE t.h_status END,
           v_now - least(t.d_created, o.created_at)
      FROM (SELECT l.name, l.blocked_id, h.id AS h_id, h.attempt AS h_attempt, h.status AS h_status,
                   h.parked_until AS h_parked, d.attempts AS d_attempts, d.created_at AS d_created,
                   coalesce(d.created_at, h.created_at) AS since
              FROM lane l
              LEFT JOIN LATERAL (SELECT m.id, m.attempt, m.status, m.parked_until, m.created_at FROM message m
                                  WHERE m.queue = p_queue AND m.lane = l.name AND m.parked_until IS DISTINCT FROM 'infinity'
                                  ORDER BY m.created_at, m.id LIMIT 1) h ON true
              LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
             WHERE l.queue = p_queue
             ORDER BY l.blocked_id IS NULL, coalesce(d.created_at, h.created_at) NULLS LAST, l.name
             LIMIT p_limit) t
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM message c
                          WHERE c.queue = p_queue AND c.lane = t.name AND c.parked_until = 'infinity') w
      LEFT JOIN LATERAL (SELECT c.created_at FROM message c WHERE c.queue = p_queue AND c.lane = t.name
                          ORDER BY c.created_at, c.id LIMIT 1) o ON true
     ORDER BY t.blocked_id IS NULL, t.since NULLS LAST, t.name;
END
$$;
-- pgsweep:end functions/lane.sql

-- pgsweep:include functions/dead.sql
-- Dead letters: sending them back to their queue.
--
-- A dead letter is a message that used its last attempt. Once the cause is
-- fixed, an operator sends it back with dead_requeue: the row returns to
-- `message` as pending with its id, key, payload, headers and created_at, a
-- fresh set of attempts, and its last error kept for reference. It is due at
-- p_deliver_at (NULL = now; at most 10 years ahead, as for send). Being
-- older than the claim cursor, it is taken by the next rescan, within about
-- the queue's claim_rescan (see claim.sql).
--
-- Inbox keys: a dead letter holds its key (send refuses duplicates of it), so
-- requeueing is the way to process a dead inbox message again. A dead letter
-- whose key a live or processed row holds meanwhile (possible only for rows
-- that died before pgsweep 0.6 refused such duplicates) is left where it is
-- and not returned: requeueing it would process the message a second time.
--
-- Lanes (lane.sql). A dead letter of a lane goes back into its lane. The
-- letter that stopped its lane (lane_dead 'block') becomes the lane's head
-- again: the lane resumes with it, then goes on in order. Any other letter
-- waits in its lane like the messages there, ordered by its created_at, so
-- it is handed out when the messages before it have left -- which usually
-- means next, being older than them. A lane that has no message and is not
-- blocked takes its oldest requeued letter as its head.
--
-- Returns the ids that were requeued. Ids that are not dead letters of the
-- queue (never were, already requeued, removed by retention) are ignored, so
-- a repeated call is harmless.
CREATE OR REPLACE FUNCTION dead_requeue(p_queue text, p_ids bigint[], p_deliver_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_visible timestamptz;
    v_ids bigint[];
    v_lanes text[];
    v_lane text;
    v_l record;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    v_now := clock_timestamp();
    v_visible := coalesce(p_deliver_at, v_now);

    WITH d AS (
        DELETE FROM message_dead x
         WHERE x.queue = p_queue AND x.id = ANY (p_ids)
           AND NOT (v_q.kind = 'inbox' AND x.key IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM message l WHERE l.queue = p_queue AND l.key = x.key AND l.dedup)
                 OR EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = x.key)))
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane
          FROM d
        RETURNING m.id, m.lane
    )
    SELECT array_agg(i.id), array_agg(DISTINCT i.lane) FILTER (WHERE i.lane IS NOT NULL) INTO v_ids, v_lanes FROM i;

    -- Each lane, locked in name order (lane.sql), after the letters are in:
    -- a lane that emptied meanwhile is created again by _lane_lock.
    FOR v_lane IN SELECT u FROM unnest(v_lanes) u ORDER BY 1 LOOP
        v_l := _lane_lock(p_queue, v_lane, v_now);
        IF v_l.blocked_id = ANY (v_ids) THEN
            -- the letter that stopped the lane: its head again
            UPDATE message m SET parked_until = CASE WHEN v_visible > v_now THEN v_visible END
             WHERE m.queue = p_queue AND m.id = v_l.blocked_id;
            UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        ELSIF v_l.created THEN
            -- a lane that had no message: its oldest requeued letter leads
            PERFORM _lane_next(p_queue, ARRAY[v_lane], v_now, false);
        ELSE
            PERFORM _lane_busy(p_queue, v_lane, v_l.blocked_id, v_now); -- a head, or the lane is blocked
        END IF;
    END LOOP;

    IF v_ids IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/dead.sql

-- pgsweep:include functions/recover.sql
-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch, p_now DEFAULT NULL) RETURNS TABLE(recovered int, dead_lettered int)
--
-- p_batch 1..10000; p_now NULL (the clock) or within 10 years of it (tests).
--
-- Looks at up to p_batch rows of the queue whose lease expired (and rows that
-- are due but have no attempt left, e.g. after max_attempts was lowered):
--   * attempt < max_attempts: the lease is lost; the row is released (owner
--     cleared, status 'failed', last_error 'lease expired', visible now), so
--     the old owner's late complete/fail/renew act on nothing. claim would take
--     such a row anyway; recovery makes the loss visible and fences the owner.
--   * attempt >= max_attempts: moved to message_dead. claim never hands these
--     out, so without recovery they would stay in the queue.
--
-- Lanes (lane.sql): a released lane head stays its lane's head (the lane
-- keeps its order: the head is claimed again first). A head dead-lettered
-- here makes its lane move on or stop, by the queue's lane_dead, as in fail.
--
-- Traversal (as in seed 002): keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
--
-- queue_recover needs manage on the queue (queue_rights.sql);
-- _queue_recover, the work itself, is what maintain() calls for every queue
-- (maintain_recovery.sql): recovery is not a right of whoever runs
-- maintenance, it is pgsweep's own housekeeping.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    RETURN QUERY SELECT * FROM _queue_recover(p_queue, p_batch, p_now);
END
$$;

CREATE OR REPLACE FUNCTION _queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_pos bigint;
    v_bound bigint;
    v_ids bigint[];
    v_last bigint;
    v_rec int := 0;
    v_dead int := 0;
    v_dead_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_int('p_batch', p_batch, 1, 10000);
    PERFORM _check_now('p_now', p_now);
    v_q := _queue_get(p_queue);

    INSERT INTO queue_recovery (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT r.position, r.boundary INTO v_pos, v_bound FROM queue_recovery r WHERE r.queue = p_queue FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_bound IS NULL THEN
        SELECT max(m.id) INTO v_bound FROM message m WHERE m.queue = p_queue;
        v_bound := coalesce(v_bound, 0);
        v_pos := 0;
    END IF;

    SELECT array_agg(s.id ORDER BY s.id), max(s.id) INTO v_ids, v_last
      FROM (SELECT m.id
              FROM message m
             WHERE m.queue = p_queue AND m.id > v_pos AND m.id <= v_bound AND m.visible_at <= v_now
               AND (m.owner IS NOT NULL OR m.attempt >= v_q.max_attempts)
             ORDER BY m.id
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) s;

    IF v_ids IS NULL THEN
        -- empty pass: wrap; the next call captures a new boundary
        UPDATE queue_recovery SET position = 0, boundary = NULL, updated_at = v_now WHERE queue = p_queue;
        RETURN QUERY SELECT 0, 0;
        RETURN;
    END IF;

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup
          FROM d
        RETURNING message_dead.id, message_dead.lane
    )
    SELECT count(*), array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL)
      INTO v_dead, v_dead_ids, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead_ids, v_q.lane_dead = 'block', v_now);
    END IF;

    UPDATE message m
       SET status = 'failed', owner = NULL, token = NULL, visible_at = v_now, last_error = 'lease expired'
     WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.owner IS NOT NULL AND m.attempt < v_q.max_attempts;
    GET DIAGNOSTICS v_rec = ROW_COUNT;

    UPDATE queue_recovery SET position = v_last, boundary = v_bound, updated_at = v_now WHERE queue = p_queue;
    RETURN QUERY SELECT v_rec, v_dead;
END
$$;
-- pgsweep:end functions/recover.sql

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
-- the counting is a function of one queue, queue_counts, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION queue_counts(p_queue text, p_now timestamptz DEFAULT NULL)
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

-- queue_rows: the queues as queue_stats shows them, read as S_owner (see
-- _lease_rows, lease.sql, for why a view reads its table through a
-- function). queue_rows and queue_counts are granted to S_monitor and carry
-- no underscore: no role but S_owner executes an underscore function.
-- Counts only, no payloads: no per-queue right is needed. `WHERE queue = 'x'` on the view still filters the queues
-- before queue_counts is called: the filter applies to this function's
-- rows.
CREATE OR REPLACE FUNCTION queue_rows()
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
  FROM queue_rows() q
 CROSS JOIN LATERAL queue_counts(q.name) s;
-- pgsweep:end functions/queue_stats.sql

-- pgsweep:include functions/maintain_recovery.sql
-- The recovery part of maintain(): one STEP of recovery of expired claims,
-- over every queue, through queue_recover (functions/recover.sql): rows whose
-- lease expired become claimable again and their old owner is fenced out
-- (each counts as a lost lease); rows that used their last attempt move to
-- the dead letters. queue_recover keeps each queue's keyset traversal (id
-- order up to a boundary captured when the traversal starts, wrapping after
-- an empty pass), so continuous new traffic cannot starve older rows.
--
-- Contract with maintain(): one call = one bounded step, at most
-- setting_int('recovery_batch_size') rows per queue; no COMMIT (maintain
-- commits after each step and renews the lease); returns
-- {"recovered", "lost_leases", "dead_lettered", "more"} where "more" says a
-- queue filled its batch, so another step is worth it while time remains.
CREATE OR REPLACE FUNCTION _maintain_recovery(p_owner text, p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_batch int := setting_int('recovery_batch_size');
    v_queue text;
    v_r record;
    v_recovered int := 0;
    v_dead int := 0;
    v_more boolean := false;
BEGIN
    FOR v_queue IN SELECT q.name FROM queue q ORDER BY q.name LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true; -- queues left unvisited this step
            EXIT;
        END IF;
        SELECT * INTO v_r FROM _queue_recover(v_queue, v_batch);
        v_recovered := v_recovered + v_r.recovered;
        v_dead := v_dead + v_r.dead_lettered;
        IF v_r.recovered + v_r.dead_lettered >= v_batch THEN
            v_more := true;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('recovered', v_recovered, 'lost_leases', v_recovered,
                              'dead_lettered', v_dead, 'more', v_more);
END
$$;
-- pgsweep:end functions/maintain_recovery.sql

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
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'version',
        '_lease_rows', '_setting_rows', 'queue_rows']) r -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
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
        -- queue_recover, queue_counts: p_now has a default) is granted as the
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
