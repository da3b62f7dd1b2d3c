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
    -- days and time of opposite signs ('1 day -1 second'): each on its own,
    -- as the caller wrote them, not summed into a length they never have
    IF extract(day FROM p_value) <> 0 AND p_value <> make_interval(days => extract(day FROM p_value)::int)
       AND sign(extract(day FROM p_value)) <> sign(extract(epoch FROM p_value - make_interval(days => extract(day FROM p_value)::int))) THEN
        RETURN _interval_text(make_interval(days => extract(day FROM p_value)::int)) || ' '
            || _interval_text(p_value - make_interval(days => extract(day FROM p_value)::int));
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

-- Names. Every name-like argument -- queue, policy, lease, schedule and
-- setting names, owner labels, lanes, message keys, column and table names
-- given as text, time zones -- obeys one rule, checked here:
--   * not NULL, not empty, at most p_max_len characters (200 unless the
--     caller says otherwise: names that other names are built from are
--     shorter, e.g. queue names 172, policy names 190; keys 1000);
--   * no control characters (U+0001-U+001F, U+007F-U+009F: newlines and
--     escapes would forge lines in logs), no format or invisible characters
--     (Unicode category Cf: soft hyphen, zero-width spaces and joiners
--     U+200B-U+200F, bidirectional controls U+202A-U+202E and
--     U+2066-U+2069, U+2060-U+2064, U+FEFF, ...) and no line or paragraph
--     separators (U+2028, U+2029): two names that print alike are the same
--     name;
--   * no whitespace at either end (so not only whitespace): ' q' and 'q'
--     would be two queues that print alike.
-- Keys and lanes get the same rule (only a longer length for keys): they are
-- identities from other systems, compared byte for byte and shown in logs
-- and the dashboard, where an invisible or trailing character is always a
-- bug or an attack. Free text (fail's p_error, dead_letter's p_reason) is
-- not a name: newlines are allowed there, only its size is capped
-- (_check_size).
CREATE OR REPLACE FUNCTION _check_text(p_arg text, p_value text, p_max_len int DEFAULT 200)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pos int;
    v_char text;
BEGIN
    -- The common case pays for one length and one regular expression (a
    -- literal, so compiled once per session). NUL cannot occur in text. The
    -- first class is the forbidden characters (Cc, Cf, U+2028, U+2029); the
    -- second is whitespace: space, no-break spaces, the U+2000 block's
    -- spaces, ideographic space (tabs and line breaks are control characters).
    IF p_value <> '' AND length(p_value) <= p_max_len
       AND p_value !~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ufffe\uffff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]|^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]|[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]$' THEN
        RETURN;
    END IF;
    IF p_value IS NULL OR p_value = '' OR length(p_value) > p_max_len THEN
        RAISE EXCEPTION '% must be a non-empty string of at most % characters, got %', p_arg, p_max_len,
            CASE WHEN p_value IS NULL THEN 'NULL'
                 WHEN p_value = '' THEN 'an empty string'
                 ELSE length(p_value) || ' characters' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_char := substring(p_value FROM '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ufffe\uffff\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]');
    IF v_char IS NOT NULL THEN
        -- the value itself is not echoed: it is what a log must not show
        v_pos := strpos(p_value, v_char);
        RAISE EXCEPTION '% must hold printable characters only (no control, format or invisible characters), got U+% at character %',
            p_arg, upper(lpad(to_hex(ascii(v_char)), greatest(4, length(to_hex(ascii(v_char)))), '0')), v_pos
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_value ~ '^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]+$' THEN
        RAISE EXCEPTION '% must not be only whitespace, got % whitespace characters', p_arg, length(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RAISE EXCEPTION '% must not begin or end with whitespace, got % characters that %', p_arg, length(p_value),
        CASE WHEN p_value ~ '^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]' THEN 'begin with whitespace' ELSE 'end with whitespace' END
        USING ERRCODE = 'invalid_parameter_value';
END
$$;

-- Intervals. PostgreSQL keeps an interval as three parts -- months, days,
-- microseconds -- and compares intervals as if a month were 30 days and a
-- day 24 hours: '1 mon -30 days 1 sec' compares equal to one second, but is
-- one day on 2 March and minus one day on 1 February. So:
--   * no interval may mix signs between its parts ('1 day -1 sec',
--     '1 mon -30 days 1 sec'): refused everywhere;
--   * a duration -- a TTL, a lease, a budget, retry_after, lease_default,
--     backoffs, the runners' and maintenance intervals -- must have a fixed
--     length: no months or years (weeks, days, hours, minutes, seconds are
--     fine; a day counts 24 hours). _check_interval treats an argument as a
--     duration when the bounds its caller gives are fixed lengths;
--   * a retention period (retention_register's p_older_than, a queue's
--     processed_retention and dead_retention, the settings
--     inbox_processed_retention and dead_letter_retention) is a calendar
--     period: months and years are allowed ('3 months' keeps three calendar
--     months). Its callers give an upper bound in years ('100 years'), which
--     is what tells _check_interval to accept months.
-- Comparisons are exact, never with 30-day months: with no months on either
-- side, days and microseconds are compared as microseconds; a value is
-- within a bound only if it is within it on every date (a month counts as
-- 28 to 31 days, a year as 365 or 366: _interval_le).
-- The ranges, per argument (docs/operations.md, "Argument ranges"):
--   lease_acquire/lease_renew p_ttl, retention_set_lease_ttl p_ttl,
--   claim/claim_ids/renew p_lease, queue lease_default   1 second .. 1 hour
--   maintain/cron_schedule p_budget                        1 second .. 1 hour
--   retention_run p_budget                                 0 .. 1 day
--   fail/fail_details p_retry_after                        0 .. 30 days
--   queue backoff_base 0 .. 1 day, backoff_max backoff_base .. 7 days,
--   claim_rescan 0 .. 1 minute
--   retention_register p_older_than                        0 .. 100 years (calendar)
--   retention_register p_interval                          1 second .. 1 day
--   queue processed_retention, dead_retention              1 second .. 100 years (calendar)
--   settings of kind interval                              the row's range (settings view)

-- _interval_parts splits an interval into its three stored parts.
CREATE OR REPLACE FUNCTION _interval_parts(p_value interval, OUT months int, OUT days int, OUT micros numeric)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    months := extract(year FROM p_value)::int * 12 + extract(month FROM p_value)::int;
    days := extract(day FROM p_value)::int;
    micros := extract(epoch FROM p_value - make_interval(months => months, days => days)) * 1000000;
END
$$;

-- _interval_le: is a no longer than b on every date? Both without mixed
-- signs. Months count as their shortest (28 days a month, 365 a year) where
-- they lengthen b, and as their longest (31, 366) where they lengthen a.
CREATE OR REPLACE FUNCTION _interval_le(a interval, b interval)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    pa record := _interval_parts(a);
    pb record := _interval_parts(b);
    c_day constant numeric := 86400000000;
    v_dm int := pb.months - pa.months;
BEGIN
    IF v_dm >= 0 THEN
        RETURN pa.days * c_day + pa.micros
            <= pb.days * c_day + pb.micros + ((v_dm / 12) * 365 + (v_dm % 12) * 28) * c_day;
    END IF;
    v_dm := -v_dm;
    RETURN pa.days * c_day + pa.micros + ((v_dm / 12) * 366 + (v_dm % 12) * 31) * c_day
        <= pb.days * c_day + pb.micros;
END
$$;

CREATE OR REPLACE FUNCTION _check_interval(p_arg text, p_value interval, p_min interval, p_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_calendar boolean;
    v_range text;
BEGIN
    -- The common case, without a call: a fixed, non-negative length (no
    -- months; days and time not negative) within fixed bounds, where interval
    -- comparison is exact (it counts 30-day months only when there are months).
    IF p_value >= p_min AND p_value <= p_max
       AND extract(month FROM p_value) = 0 AND extract(year FROM p_value) = 0 AND extract(day FROM p_value) >= 0
       AND extract(epoch FROM p_value) >= extract(day FROM p_value) * 86400
       AND extract(month FROM p_max) = 0 AND extract(year FROM p_max) = 0
       AND extract(month FROM p_min) = 0 AND extract(year FROM p_min) = 0 THEN
        RETURN;
    END IF;
    v := _interval_parts(p_value);
    v_calendar := (_interval_parts(p_max)).months <> 0 OR (_interval_parts(p_min)).months <> 0;
    v_range := format('between %s and %s', _interval_text(p_min), _interval_text(p_max));
    IF p_value IS NULL THEN
        RAISE EXCEPTION '% must be %, got NULL', p_arg, v_range
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The message stays '<arg> must be between <min> and <max>, got <value>'
    -- (what callers and tests match); DETAIL says which rule was broken.
    IF (v.months > 0 OR v.days > 0 OR v.micros > 0) AND (v.months < 0 OR v.days < 0 OR v.micros < 0) THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Its months, days and time must all have one sign: they are counted apart, so a mixed interval has no single length.';
    END IF;
    IF v.months <> 0 AND NOT v_calendar THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'It must be a fixed length (weeks, days, hours, minutes, seconds): a month or a year has no fixed length.';
    END IF;
    IF NOT (_interval_le(p_min, p_value) AND _interval_le(p_value, p_max)) THEN
        RAISE EXCEPTION '% must be %, got %', p_arg, v_range, _interval_text(p_value)
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
    PERFORM _check_text(p_arg, p_value, 100); -- zone names are short; the messages below echo it
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

-- Sizes. What a caller can make pgsweep store or hold in memory is capped by
-- integer settings (setting table, docs/operations.md "Caps"):
--   max_payload_bytes  p_payload of send, each of send_batch's p_payloads
--                      (pg_column_size: the stored jsonb, before compression)
--   max_headers_bytes  p_headers of send, each of send_batch's p_headers
--   max_error_bytes    p_error of fail and fail_details, p_reason of dead_letter
--                      (octet_length; refused, never truncated)
--   max_key_bytes      p_key of send, each of send_batch's p_keys (a key is in a
--                      unique index, whose entries cannot exceed ~2700 bytes)
--   max_batch          every id array (p_ids) and send_batch's p_payloads;
--                      below the fixed 10000 of claim's p_batch and _check_ids
-- _check_size raises 22023 naming the argument, the limit and the setting
-- when p_size (measured by the caller, cheaply) exceeds the setting. Every
-- cap setting's minimum is at least 100 (a test says so), so a size up to
-- 100 passes without reading the table; a larger one costs one primary-key
-- read. NULL (an argument not given) passes.
CREATE OR REPLACE FUNCTION _check_size(p_arg text, p_size bigint, p_setting text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max bigint;
    v_top text;
BEGIN
    IF p_size IS NULL OR p_size <= 100 THEN
        RETURN;
    END IF;
    SELECT s.value::bigint, s.max_value INTO v_max, v_top FROM setting s WHERE s.name = p_setting;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsweep: no setting % (the migration that adds the caps did not run)', p_setting
            USING ERRCODE = 'internal_error';
    END IF;
    IF p_size > v_max THEN
        RAISE EXCEPTION '% must be at most % % (setting %, which setting_set can raise up to %), got %',
            p_arg, v_max,
            CASE WHEN p_setting LIKE '%\_bytes' THEN 'bytes' ELSE 'elements' END,
            p_setting, v_top, p_size
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
