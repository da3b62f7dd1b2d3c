-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still). Each overload taking p_now exists so tests and
-- callers that batch several decisions can pin the clock; the public forms
-- pass clock_timestamp().
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
    v_token bigint;
    v_expires timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_expires := p_now + p_ttl;

    -- ON CONFLICT re-evaluates the WHERE against the latest committed row
    -- version, so two contenders serialise on the row lock and at most one wins.
    INSERT INTO lease AS l (name, owner, token, acquired_at, expires_at)
    VALUES (p_name, p_owner, 1, p_now, v_expires)
    ON CONFLICT (name) DO UPDATE
        SET owner = excluded.owner,
            token = CASE WHEN l.owner = excluded.owner AND l.expires_at > p_now
                         THEN l.token ELSE l.token + 1 END,
            acquired_at = CASE WHEN l.owner = excluded.owner AND l.expires_at > p_now
                               THEN l.acquired_at ELSE p_now END,
            expires_at = excluded.expires_at
        WHERE l.owner IS NULL OR l.owner = excluded.owner OR l.expires_at <= p_now
    RETURNING l.token INTO v_token;

    RETURN v_token;
END
$$;

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire(p_name, p_owner, p_ttl, clock_timestamp()) $$;

-- A renew succeeds only while the caller's lease is live: a lapsed holder must
-- acquire again (and may get a new token), so it learns that it lapsed.
CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE lease
       SET expires_at = p_now + p_ttl
     WHERE name = p_name AND owner = p_owner AND expires_at > p_now;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_renew(p_name, p_owner, p_ttl, clock_timestamp()) $$;

-- Release ends the tenure at once so that another owner need not wait for the
-- TTL. The row (and its token) stays so the next tenure's token is higher.
CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE lease
       SET owner = NULL,
           expires_at = least(expires_at, p_now)
     WHERE name = p_name AND owner = p_owner;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_release(p_name, p_owner, clock_timestamp()) $$;

-- lease_release_owner releases every lease an owner holds: what a runner calls
-- on shutdown so that its successors need not wait for TTLs.
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
