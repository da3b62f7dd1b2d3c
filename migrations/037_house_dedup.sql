-- pgsweep 0.37: house dedup (issue 28, "done means": no repeated code).
--
-- No behaviour changes: the same results, errors and messages, written once.
--   lease_acquire, lease_renew, lease_release (the clock-less verbs) call
--     their p_now overload with NULL instead of repeating its body;
--   setting_interval and setting_int read the row through _setting_typed
--     (the kind check, once);
--   queue_grant and queue_revoke check and tidy through
--     _queue_rights_change (argument check, manage, orphaned rows), once.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:changed functions/lease.sql
CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire(p_name, p_owner, p_ttl, NULL::timestamptz) $$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_renew(p_name, p_owner, p_ttl, NULL::timestamptz) $$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_release(p_name, p_owner, NULL::timestamptz) $$;
-- pgsweep:end functions/lease.sql

-- pgsweep:changed functions/queue_rights.sql
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

CREATE OR REPLACE FUNCTION queue_grant(p_queue text, p_role regrole, p_rights text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_grant_rows(p_queue, p_role, _queue_rights_change(p_queue, p_role, p_rights));
END
$$;

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
-- pgsweep:end functions/queue_rights.sql

-- pgsweep:changed functions/settings.sql
CREATE OR REPLACE FUNCTION _setting_typed(p_name text, p_kind text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> p_kind THEN
        RAISE EXCEPTION 'p_name must name an % setting, % is an %', p_kind, p_name, v.kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT nullif(s.value, 'infinite')::interval FROM _setting_typed(p_name, 'interval') s $$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT s.value::bigint FROM _setting_typed(p_name, 'integer') s $$;
-- pgsweep:end functions/settings.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
