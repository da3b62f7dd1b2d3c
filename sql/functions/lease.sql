-- Leases: named, expiring ownership with a fencing token.
--
-- The lease row is the truth. Expiry is decided by the database clock
-- (clock_timestamp(), not now(): a caller inside a long transaction must not
-- see time stand still), read after the lease row is locked. The internal
-- _lease_* functions take p_now so that tests can pin the clock (S_owner
-- only, like every underscore routine); NULL there means the database clock.
-- p_now must be within 10 years of the database clock (_check_now,
-- validate.sql).
--
-- Reserved names. pgsweep's own leases (maintain:<part>,
-- retention:<policy>, and anything under pgsweep:) are taken through the
-- internal functions only: lease_acquire, lease_renew and lease_release
-- refuse them to every caller, a superuser included (42501), and
-- lease_release_owner releases them only for an owner none of whose passes
-- still runs. Otherwise any worker could hold maintain:recovery or
-- retention:<policy> forever with lease_renew, and recovery and retention
-- would stop for everyone.
--
-- Token rules: a new tenure (first acquire, takeover after expiry, acquire
-- after release, or re-acquire by a holder whose lease lapsed) gets token + 1;
-- a holder re-acquiring a live lease keeps its token. Rows are never deleted,
-- so tokens for a name only ever increase.

-- _lease_reserved: why a lease name is pgsweep's own (NULL: it is not).
CREATE OR REPLACE FUNCTION _lease_reserved(p_name text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE
        WHEN pg_catalog.starts_with(p_name, 'maintain:') THEN 'maintain() holds it while it runs a part'
        WHEN pg_catalog.starts_with(p_name, 'retention:') THEN 'a retention pass holds it while it runs a policy'
        WHEN pg_catalog.starts_with(p_name, 'pgsweep:') THEN 'names under pgsweep: are pgsweep''s own' END
$$;

-- _lease_unreserved returns p_name, or raises 42501 for a reserved name:
-- the public lease functions pass the name through it.
CREATE OR REPLACE FUNCTION _lease_unreserved(p_verb text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_why text := _lease_reserved(p_name);
BEGIN
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION '%: lease % is reserved for pgsweep itself (%); no role may take, renew or release it',
            p_verb, pg_catalog.quote_literal(p_name), v_why
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Name your leases outside maintain:, retention: and pgsweep:.';
    END IF;
    RETURN p_name;
END
$$;

-- _lease_check: the arguments of a tenure (acquire, renew), by the rules
-- of validate.sql (22023).
CREATE OR REPLACE FUNCTION _lease_check(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);
END
$$;

CREATE OR REPLACE FUNCTION _lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _lease_check(p_name, p_owner, p_ttl, p_now);

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

-- A renew succeeds only while the caller's lease is live: a lapsed holder must
-- acquire again (and may get a new token), so it learns that it lapsed.
CREATE OR REPLACE FUNCTION _lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM _lease_check(p_name, p_owner, p_ttl, p_now);

    PERFORM 1 FROM lease l WHERE l.name = p_name AND l.owner = p_owner FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp()); -- after the lock, as _lease_acquire
    UPDATE lease l SET expires_at = v_now + p_ttl
     WHERE l.name = p_name AND l.owner = p_owner AND l.expires_at > v_now;
    RETURN FOUND;
END
$$;

-- Release ends the tenure at once so that another owner need not wait for the
-- TTL. The row (and its token) stays so the next tenure's token is higher.
CREATE OR REPLACE FUNCTION _lease_release(p_name text, p_owner text, p_now timestamptz)
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

-- The public faces of the three: first with a pinned clock, for tests
-- (S_owner only: no role is granted a clock), then the verbs, on the
-- database clock. Both refuse pgsweep's own leases (_lease_unreserved);
-- maintain and retention take those through the _lease_* functions.
CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_acquire(_lease_unreserved('lease_acquire', p_name), p_owner, p_ttl, p_now) $$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_renew(_lease_unreserved('lease_renew', p_name), p_owner, p_ttl, p_now) $$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_release(_lease_unreserved('lease_release', p_name), p_owner, p_now) $$;

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

CREATE OR REPLACE FUNCTION lease_release_owner(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_live boolean;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    -- computed first: the UPDATE of a reference table (Citus) takes plain values
    v_live := _maintain_owner_live(p_owner);
    RETURN QUERY
    UPDATE lease
       SET owner = NULL,
           expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
       -- pgsweep's own leases of that owner only once no session of it
       -- runs a pass (a runner that stopped, history.sql): nobody ends a
       -- running pass's tenure
       AND (_lease_reserved(name) IS NULL OR NOT v_live)
    RETURNING name;
END
$$;

-- _lease_release_owner_all: every lease of p_owner, pgsweep's own included
-- (maintain_fail_owner, for a pass whose session is gone).
-- PL/pgSQL with the clock in a variable, not a parameterized LANGUAGE sql
-- UPDATE with clock_timestamp() in its SET: Citus plans neither (lease is a
-- reference table there).
CREATE OR REPLACE FUNCTION _lease_release_owner_all(p_owner text)
RETURNS SETOF text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    RETURN QUERY
    UPDATE lease SET owner = NULL, expires_at = least(expires_at, v_now)
     WHERE owner = p_owner
    RETURNING name;
END
$$;

-- lease_rows: the rows of the leases view, read as S_owner (SECURITY
-- DEFINER, like every function here). The view reads its table through it
-- because a monitor holds no privilege on any table, and on Citus a view's
-- tables are read with the privileges of the querying role, not the view's
-- owner (citusdata/citus#6161): `FROM lease` failed there for a monitor
-- login. The columns are spelled out, not RETURNS SETOF lease: with the
-- table's row type as its result, citus_distribute fails ("Citus can not
-- handle circular dependencies between distributed objects") when it
-- distributes the function. Granted to S_monitor
-- (the caller of a view needs EXECUTE on what it calls, so it has no
-- underscore: internals are the owner's); it returns what the view shows,
-- no more.
CREATE OR REPLACE FUNCTION lease_rows()
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
  FROM lease_rows();

-- browse_leases (monitor): the rows of the leases view a page at a time,
-- in name order, keyset-paginated: p_after NULL for the first page, then
-- the last name of the previous page. A page reads at most p_limit (1..1000)
-- entries of lease's primary key from p_after on; a lease that exists
-- throughout is never repeated nor skipped.
CREATE OR REPLACE FUNCTION browse_leases(p_after text DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS TABLE (name text, owner text, token bigint, acquired_at timestamptz, expires_at timestamptz, live boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_after IS NOT NULL THEN
        PERFORM _check_cursor('p_after', p_after); -- browse_lanes.sql
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT l.name, l.owner, l.token, l.acquired_at, l.expires_at, (l.owner IS NOT NULL AND l.expires_at > v_now)
      FROM lease l
     WHERE l.name > coalesce(p_after, '')
     ORDER BY l.name
     LIMIT p_limit;
END
$$;
