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
-- and its name when granted; the check goes by the NAME: on Citus a role
-- has another oid on every node, and a delegated verb checks on the queue's
-- worker. So a renamed role loses its rights on queues until granted again,
-- and a role dropped and created again under the same name gets the old
-- one's rights back: revoke a role's queue rights before dropping it
-- (queue_rights lists them; docs/queues.md). Rows whose oid no longer has
-- their name are deleted by the next queue_grant or queue_revoke on the
-- queue (_queue_rights_clean).
--
-- Defaults (queue_create): a new queue's rights are rows like any other,
-- so queue_revoke makes it private:
--   setting queue_default_grants 1 (default): send and consume to S_worker,
--     browse and manage to S_admin -- what each role may do by its
--     function grants alone;
--   setting queue_default_grants 0: browse and manage to S_admin only; no
--     worker may use the queue until queue_grant says so.
-- An upgrade from a release without rights gives every existing queue the
-- rows of setting 1, so an upgraded install behaves as before.

-- _caller_role: the role the session acts as -- what SET ROLE set, or the
-- session user -- also inside a SECURITY DEFINER function, whose
-- current_user is its owner. The rule of every right check; the hot verbs
-- (_queue_require below, browse_lanes) write its CASE inline, since a call
-- costs as much as their whole check.
CREATE OR REPLACE FUNCTION _caller_role()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

-- _queue_require raises 42501 unless the calling session holds p_right on
-- p_queue (an existing queue: the verbs look it up first, so an unknown
-- queue is their 22023). It is the one place that says who the caller is,
-- and _queue_role_holds (below) the one that says whether a role holds a
-- right; every verb calls it, and _queue_allowed asks it.
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
-- checks). A grant names its grantee (see above for why by name).
--
-- Cost: two function calls, one probe of queue_right's primary key and
-- pg_has_role (PostgreSQL caches role membership). The hot verbs reach it
-- only when _queue_right_held (below, inlined into their statements) has
-- no row for them: each call of a function with a pinned search_path costs
-- about as much as the probe itself (docs/benchmarks.md, "The security
-- model's cost").
CREATE OR REPLACE FUNCTION _queue_require(p_queue text, p_right text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                          ELSE pg_catalog.current_setting('role')::name END;
BEGIN
    -- <schema>_owner owns every queue's rows (on Citus the tier runs as it,
    -- and Citus's own connections to the workers are its).
    IF v_caller = current_user OR _queue_role_holds(v_caller, p_queue, p_right) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied: role "%" lacks % on queue "%"', v_caller, p_right, p_queue
        USING ERRCODE = 'insufficient_privilege',
              HINT = pg_catalog.format('A role holding manage on the queue grants it: SELECT queue_grant(%L, %L, ARRAY[%L])',
                                       p_queue, v_caller, p_right);
END
$$;

-- _queue_role_holds: the rule of _queue_require for any role p_role (a
-- name; a role that does not exist holds nothing): S_owner, a member of a
-- role granted p_right on p_queue, or a superuser. The schedules part asks
-- it for a schedule's owner (maintain_schedules.sql).
CREATE OR REPLACE FUNCTION _queue_role_holds(p_role name, p_queue text, p_right text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_role = current_user THEN
        RETURN true;
    END IF;
    IF pg_catalog.to_regrole(pg_catalog.quote_ident(p_role)) IS NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM queue_right r
                WHERE r.queue = p_queue AND r.privilege = p_right
                  AND pg_catalog.pg_has_role(p_role, pg_catalog.to_regrole(pg_catalog.quote_ident(r.grantee_name)), 'MEMBER')) THEN
        RETURN true;
    END IF;
    -- apart from the probe: on Citus a statement that joins the distributed
    -- queue_right with a catalog view is planned recursively, and the view's
    -- pg_authid is then read with S_owner's rights (permission denied)
    RETURN coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = p_role), false);
END
$$;

-- _queue_right_held: the rights the calling session holds by a plain grant,
-- one row per (queue, privilege): a queue_right row whose oid still has the
-- granted name (then the oid is that role) and whose grantee the caller is
-- a member of. The hot verbs (claim, complete, send, send_batch) read it in
-- their own statement (claim: in its read of the cursor) and ask
-- _queue_require, the rule, only when it has no row: the owner, a
-- superuser on a queue without a valid grant row, a Citus worker (where a
-- role's oid differs from the coordinator's), a renamed or dropped grantee,
-- a refusal. (It admits no one the rule refuses: the name test makes the
-- oid the role to_regrole finds, and the caller is worked out alike.) A view,
-- not a function: the planner inlines it into the verb's statement, where
-- a function call (search_path pinned) would cost as much as the probe.
-- The CASE keeps pg_has_role from an oid that no longer has the name
-- (quals in one WHERE are evaluated in the planner's order, not the text's).
CREATE OR REPLACE VIEW _queue_right_held AS
SELECT r.queue, r.privilege
  FROM queue_right r
 WHERE CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee)
            THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                             ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END;

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

-- _queue_rights_change: what queue_grant and queue_revoke check before they
-- change anything: p_rights valid for p_role (returned as checked), the
-- caller's manage on p_queue; then the rows of dropped grantees go.
CREATE OR REPLACE FUNCTION _queue_rights_change(p_queue text, p_role regrole, p_rights text[])
RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rights text[] := _queue_rights_check(p_queue, p_role, p_rights);
BEGIN
    PERFORM _queue_require(p_queue, 'manage');
    PERFORM _queue_rights_clean(p_queue);
    RETURN v_rights;
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
BEGIN
    PERFORM _queue_grant_rows(p_queue, p_role, _queue_rights_change(p_queue, p_role, p_rights));
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
    v_rights text[] := _queue_rights_change(p_queue, p_role, p_rights);
BEGIN
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
