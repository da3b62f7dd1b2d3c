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
