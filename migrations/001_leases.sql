-- pgsweep 0.1: argument checks and leases.
--
-- Every migration starts by pointing search_path at the target schema: objects
-- are created there, and functions pin it with SET search_path FROM CURRENT.
-- The schema comes from the template data (`schema`): `pgsweep migrate --schema`
-- sets it; tern CLI users set it in the [data] section of tern.conf (default pgsweep).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

CREATE TABLE lease (
    name        text PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE lease IS 'pgsweep leases: one row per lease name; the row is the truth, see lease_acquire';

-- pgsweep:include functions/validate.sql
-- Argument checks shared by every public function. Each raises SQLSTATE 22023
-- (invalid_parameter_value) with a message that names the argument and the
-- allowed range, before the caller has changed anything.

-- _interval_text renders an interval the way a person writes it in a call
-- ('1 second', '30 minutes'), so that error messages echo the caller's terms.
CREATE OR REPLACE FUNCTION _interval_text(p_value interval)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_secs numeric := extract(epoch FROM p_value);
    v_months int := extract(year FROM p_value)::int * 12 + extract(month FROM p_value)::int;
    v_rest interval;
    v_n numeric;
    v_unit text;
BEGIN
    IF p_value IS NULL THEN
        RETURN 'NULL';
    END IF;
    -- Months and years stay calendar units: extract(epoch) counts a year as
    -- 365.25 days while interval comparison counts it as 360, so '100 years'
    -- rendered from seconds ('36525 days') would name another bound than the
    -- one checked, and '101 years' would read '885366 hours'.
    IF v_months <> 0 THEN
        v_rest := p_value - make_interval(months => v_months);
        IF v_rest <> interval '0' THEN
            RETURN _interval_text(make_interval(months => v_months)) || ' ' || _interval_text(v_rest);
        END IF;
        IF v_months % 12 = 0 THEN
            v_n := v_months / 12; v_unit := 'year';
        ELSE
            v_n := v_months; v_unit := 'month';
        END IF;
        RETURN v_n::text || ' ' || v_unit || CASE WHEN abs(v_n) = 1 THEN '' ELSE 's' END;
    END IF;
    IF v_secs <> 0 AND v_secs % 86400 = 0 THEN
        v_n := v_secs / 86400; v_unit := 'day';
    ELSIF v_secs <> 0 AND v_secs % 3600 = 0 THEN
        v_n := v_secs / 3600; v_unit := 'hour';
    ELSIF v_secs <> 0 AND v_secs % 60 = 0 THEN
        v_n := v_secs / 60; v_unit := 'minute';
    ELSE
        v_n := v_secs; v_unit := 'second';
    END IF;
    RETURN trim_scale(v_n)::text || ' ' || v_unit || CASE WHEN abs(v_n) = 1 THEN '' ELSE 's' END;
END
$$;

CREATE OR REPLACE FUNCTION _check_text(p_arg text, p_value text, p_max_len int DEFAULT 200)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value = '' OR length(p_value) > p_max_len THEN
        RAISE EXCEPTION '% must be a non-empty string of at most % characters, got %', p_arg, p_max_len,
            CASE WHEN p_value IS NULL THEN 'NULL'
                 WHEN p_value = '' THEN 'an empty string'
                 ELSE length(p_value) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_interval(p_arg text, p_value interval, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
        RAISE EXCEPTION '% must be between % and %, got %', p_arg,
            _interval_text(p_min), _interval_text(p_max), _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_int(p_arg text, p_value bigint, p_min bigint, p_max bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL OR p_value < p_min OR p_value > p_max THEN
        RAISE EXCEPTION '% must be between % and %, got %', p_arg, p_min, p_max,
            coalesce(p_value::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- pgsweep:end functions/validate.sql
-- pgsweep:include functions/lease.sql
-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still), read after the lease row is locked. The overloads
-- taking p_now let tests pin the clock; NULL there means the database clock,
-- and the contract's forms pass NULL.
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

CREATE OR REPLACE VIEW leases AS
SELECT name,
       owner,
       token,
       acquired_at,
       expires_at,
       (owner IS NOT NULL AND expires_at > clock_timestamp()) AS live
  FROM lease;
-- pgsweep:end functions/lease.sql
