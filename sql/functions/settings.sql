-- Settings shared by every instance (table setting). setting_set validates a
-- value against the row's kind and range and stores its normalised form; a
-- change is read by the next maintain pass and the runners' next sleep.

-- _setting_parse returns p_value normalised for setting s, or raises 22023
-- naming the setting and its range. Nothing is written here.
CREATE OR REPLACE FUNCTION _setting_parse(s setting, p_value text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_interval interval;
    v_int bigint;
    v_range text;
BEGIN
    -- a value is short and printable; leading and trailing spaces are trimmed
    IF p_value IS NOT NULL THEN
        PERFORM _check_text('p_value', trim(p_value), 100);
    END IF;
    IF s.kind = 'interval' THEN
        v_range := format('between %s and %s', _interval_text(s.min_value::interval), _interval_text(s.max_value::interval));
        IF s.infinite_ok THEN
            v_range := v_range || ', or infinite';
            IF lower(trim(p_value)) = 'infinite' THEN
                RETURN 'infinite';
            END IF;
        END IF;
        BEGIN
            v_interval := trim(p_value)::interval;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION '% must be an interval %, got %', s.name, v_range, quote_literal(p_value)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        -- compared exactly (_interval_le), not with 30-day months
        IF v_interval IS NULL OR NOT (_interval_le(s.min_value::interval, v_interval)
                                      AND _interval_le(v_interval, s.max_value::interval)) THEN
            RAISE EXCEPTION '% must be %, got %', s.name, v_range,
                CASE WHEN p_value IS NULL THEN 'NULL' ELSE _interval_text(v_interval) END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- the rules of every interval argument (validate.sql): no mixed
        -- signs; months only where the range is given in years (the
        -- retention periods)
        PERFORM _check_interval(s.name, v_interval, s.min_value::interval, s.max_value::interval);
        RETURN _interval_text(v_interval);
    END IF;

    v_range := format('between %s and %s', s.min_value, s.max_value);
    BEGIN
        v_int := trim(p_value)::bigint;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION '% must be an integer %, got %', s.name, v_range, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    PERFORM _check_int(s.name, v_int, s.min_value::bigint, s.max_value::bigint);
    RETURN v_int::text;
END
$$;

CREATE OR REPLACE FUNCTION _setting_row(p_name text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting;
BEGIN
    PERFORM _check_text('p_name', p_name, 63); -- the message below echoes it
    SELECT * INTO v FROM setting WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_name must be one of %, got %',
            (SELECT string_agg(name, ', ' ORDER BY name) FROM setting),
            coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

-- setting_set validates and stores a setting; it returns the stored
-- (normalised) value, e.g. setting_set('runner_interval', '00:00:30') = '30 seconds'.
CREATE OR REPLACE FUNCTION setting_set(p_name text, p_value text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_value text := _setting_parse(_setting_row(p_name), p_value);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v_value, updated_at = v_now WHERE name = p_name;
    RETURN v_value;
END
$$;

-- setting_reset puts a setting back to its default and returns it.
CREATE OR REPLACE FUNCTION setting_reset(p_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v.default_value, updated_at = v_now WHERE name = p_name;
    RETURN v.default_value;
END
$$;

CREATE OR REPLACE FUNCTION setting_get(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (_setting_row(p_name)).value;
END
$$;

-- _setting_typed: the row of setting p_name, which must be of kind p_kind
-- ('interval' or 'integer'); 22023 otherwise.
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

-- Typed getters for SQL that uses settings. setting_interval returns NULL for
-- 'infinite' (keep forever), the same meaning NULL has in retention_register.
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

-- setting_rows: the rows of the settings view, read as S_owner (see
-- lease_rows, lease.sql, for why a view reads its table through a
-- function). Executable by S_monitor: no underscore (privileges.sql).
CREATE OR REPLACE FUNCTION setting_rows()
RETURNS TABLE (name text, value text, default_value text, kind text, min_value text, max_value text,
               infinite_ok boolean, description text, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.name, s.value, s.default_value, s.kind, s.min_value, s.max_value, s.infinite_ok, s.description, s.updated_at
      FROM setting s
$$;

CREATE OR REPLACE VIEW settings AS
SELECT name,
       value,
       default_value,
       kind,
       CASE WHEN infinite_ok THEN format('%s .. %s, or infinite', min_value, max_value)
            ELSE format('%s .. %s', min_value, max_value) END AS range,
       description,
       updated_at
  FROM setting_rows();
