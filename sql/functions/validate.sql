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

-- Times. The bounds are relative to the database clock (clock_timestamp(),
-- read when the check runs) and are the same for every function:
--
--   p_now        NULL (the database clock) or within 10 years of the clock,
--                either side. The p_now overloads exist for tests, which pin
--                fixed dates near today; a time further away (or +/-infinity)
--                would hold a lease or a claim for centuries, expire every
--                row at once, or overflow the arithmetic that adds a TTL.
--   p_deliver_at NULL (now) or a finite time at most 10 years ahead of the
--                clock; a time in the past means now.
--
-- Both raise 22023 naming the argument and the bound, and echo the value
-- given (in the session's TimeZone).
CREATE OR REPLACE FUNCTION _check_now(p_arg text, p_value timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_clock timestamptz;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    v_clock := clock_timestamp();
    IF NOT (p_value >= v_clock - interval '10 years' AND p_value <= v_clock + interval '10 years') THEN
        RAISE EXCEPTION '% must be NULL (the database clock) or a time within 10 years of the database clock, got %',
            p_arg, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_deliver_at(p_arg text, p_value timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NOT NULL AND NOT (isfinite(p_value) AND p_value <= clock_timestamp() + interval '10 years') THEN
        RAISE EXCEPTION '% must be NULL (now) or a finite time at most 10 years after the database clock, got %',
            p_arg, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- _check_time_zone: a time zone for AT TIME ZONE (a name from pg_timezone_names,
-- an abbreviation or a POSIX spec such as 'UTC-3' or 'EST5EDT') whose UTC
-- offset stays within 15 hours either side (real zones span -12 to +14).
-- PostgreSQL accepts POSIX offsets up to 167 hours ('UTC-99'), which would
-- shift a retention cutoff by days. The offset is read at every hour of a
-- fixed year (2001: POSIX rules repeat yearly, so a daylight-saving offset
-- in force for an hour is seen too). NULL is accepted (the caller's default).
CREATE OR REPLACE FUNCTION _check_time_zone(p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_offset interval;
BEGIN
    IF p_value IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        SELECT o INTO v_offset
          FROM (SELECT (t AT TIME ZONE p_value) - (t AT TIME ZONE 'UTC') AS o
                  FROM generate_series(timestamptz '2001-01-01 00:00:00+00', timestamptz '2001-12-31 23:00:00+00',
                                       interval '1 hour') t) x
         ORDER BY abs(extract(epoch FROM o)) DESC
         LIMIT 1;
    EXCEPTION WHEN OTHERS THEN -- unknown zone, or a malformed spec
        RAISE EXCEPTION '% must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got %, which is not a time zone',
            p_arg, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    IF abs(extract(epoch FROM v_offset)) > 15 * 3600 THEN
        RAISE EXCEPTION '% must be NULL (the database''s TimeZone) or a time zone whose UTC offset is within 15 hours, got %, whose UTC offset is %',
            p_arg, quote_literal(p_value),
            CASE WHEN v_offset < interval '0' THEN '-' ELSE '+' END || _interval_text(CASE WHEN v_offset < interval '0' THEN -v_offset ELSE v_offset END)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
