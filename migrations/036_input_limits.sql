-- pgsweep 0.34: input limits (issue 23, "bad input accepted").
--
-- * Names (queues, policies, leases, owners, lanes, keys, schedules,
--   settings, columns, time zones) obey one rule (_check_text,
--   validate.sql): no control or invisible characters, no whitespace at
--   either end, not empty, a maximum length.
-- * Intervals (_check_interval): no mixed signs between months, days and
--   time; no months or years where a fixed length is meant (TTLs, leases,
--   budgets, retry_after, backoffs, the runners' settings); compared exactly,
--   never with 30-day months. Retention periods stay calendar periods.
-- * Caps, as settings (below): payload, headers, error text and key bytes,
--   and array lengths; refused with 22023 naming the argument, the limit and
--   the setting, never truncated.
-- * inbox_processed_retention and dead_letter_retention: their upper bound
--   is now '100 years' (was '36500 days'), a calendar bound, so that they
--   accept months like the queue and policy periods do; every value the old
--   range accepted is still accepted.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('max_payload_bytes', '1048576', 'integer', '1048576', '1024', '268435456', false,
     'largest payload send and send_batch accept, in bytes (the jsonb as stored, before compression)'),
    ('max_headers_bytes', '65536', 'integer', '65536', '1024', '16777216', false,
     'largest headers object send and send_batch accept, in bytes'),
    ('max_error_bytes', '65536', 'integer', '65536', '1024', '16777216', false,
     'longest error text fail, fail_details and dead_letter accept, in bytes (refused, never truncated)'),
    ('max_key_bytes', '2000', 'integer', '2000', '100', '2000', false,
     'longest message key (p_key) send accepts, in bytes (and at most 1000 characters); keys are in a unique index, whose entries cannot exceed about 2700 bytes'),
    ('max_batch', '10000', 'integer', '10000', '100', '10000', false,
     'most elements of an id array (p_ids of renew, complete, fail, release, claim_ids, dead_letter, dead_requeue, message_cancel), of send_batch''s arrays and of a retention filter''s values')
ON CONFLICT (name) DO NOTHING;
UPDATE setting SET max_value = '100 years'
 WHERE name IN ('inbox_processed_retention', 'dead_letter_retention') AND max_value = '36500 days';

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
-- pgsweep:end functions/validate.sql

-- pgsweep:include functions/settings.sql
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

-- Typed getters for SQL that uses settings. setting_interval returns NULL for
-- 'infinite' (keep forever), the same meaning NULL has in retention_register.
CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'interval' THEN
        RAISE EXCEPTION 'p_name must name an interval setting, % is an integer', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v.value = 'infinite' THEN
        RETURN NULL;
    END IF;
    RETURN v.value::interval;
END
$$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'integer' THEN
        RAISE EXCEPTION 'p_name must name an integer setting, % is an interval', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v.value::bigint;
END
$$;

-- _setting_rows: the rows of the settings view, read as S_owner (see
-- _lease_rows, lease.sql, for why a view reads its table through a
-- function).
CREATE OR REPLACE FUNCTION _setting_rows()
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
  FROM _setting_rows();
-- pgsweep:end functions/settings.sql

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
    PERFORM _check_message(p_payload, p_headers, p_key);
    PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
    PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
    PERFORM _check_size('p_key', octet_length(p_key), 'max_key_bytes');
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
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
    PERFORM _check_size('p_payloads', cardinality(p_payloads), 'max_batch');
    PERFORM _check_size('p_payloads', (SELECT max(pg_column_size(x)) FROM unnest(p_payloads) x), 'max_payload_bytes'); -- its largest element
    PERFORM _check_size('p_headers', (SELECT max(pg_column_size(x)) FROM unnest(p_headers) x), 'max_headers_bytes');
    PERFORM _check_size('p_keys', (SELECT max(octet_length(x)) FROM unnest(p_keys) x), 'max_key_bytes');
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
    IF p_lane IS NOT NULL THEN PERFORM _check_text(p_arg, p_lane, 200); END IF;
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
    PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
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
    PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
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
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
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
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    v_q := _queue_get(p_queue);
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
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql): control characters, spaces
    IF p_lease IS NOT NULL THEN PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour'); END IF;
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
    PERFORM _check_text('p_queue', p_queue, 172); -- the name rule (validate.sql)
    PERFORM _check_int('p_max_attempts', p_max_attempts, 1, 1000);

    INSERT INTO queue (name, kind, max_attempts) VALUES (p_queue, p_kind, p_max_attempts)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        -- The claim cursor, at the head: otherwise the queue's first claims
        -- would race to insert it and wait for each other once.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, '-infinity', -9223372036854775808, '-infinity')
        ON CONFLICT (queue) DO NOTHING;
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now
     WHERE name = p_queue AND max_attempts <> p_max_attempts;
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

-- pgsweep:include functions/retention_register.sql
-- Retention: registering policies and their options.
--
-- Every argument is checked before anything changes (SQLSTATE 22023 naming the
-- argument). Re-registering a policy with the same definition changes nothing
-- but updated_at, so every replica may register its tables at start-up; a
-- changed definition drops the open sweep (its units were planned for the old
-- definition) and the next run plans a new one.

CREATE OR REPLACE FUNCTION _retention_invalid(p_message text, VARIADIC p_args text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = format(p_message, VARIADIC p_args), ERRCODE = 'invalid_parameter_value';
END
$$;

-- Ownership: a policy belongs to the role that registers it, and every
-- run deletes as that role (retention_sql.sql, _retention_as_owner).
-- A SECURITY DEFINER function cannot see the role that called it, and a
-- role name passed in could be anyone's; so the caller proves who it is:
-- retention_register runs as its caller and creates an empty temporary
-- table (pg_temp.pgsweep_owner_proof_<random>), which only the calling role
-- can have created and which PostgreSQL records as owned by it;
-- _retention_register (SECURITY DEFINER) takes the policy's owner from that
-- table's owner, accepting only such a table of this session; then the
-- wrapper drops it (an error in between rolls its creation back: a proof
-- exists only while its own registration runs, and no other code runs
-- then). Code running as another role
-- in the same session (a SECURITY DEFINER trigger of a hostile admin, say)
-- can prove only its own role, never the session's. The owner needs SELECT
-- and DELETE on the table (42501 otherwise); pgsweep's own tables cannot be
-- registered (the built-in policies cover them). Registering a name again
-- re-points it, under the new caller's name and rights.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_proof text := pg_catalog.format('pg_temp.%I',
        'pgsweep_owner_proof_' || pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''));
    v_oid regclass;
BEGIN
    EXECUTE pg_catalog.format('CREATE TEMPORARY TABLE %s ()', v_proof);
    v_oid := pg_catalog.to_regclass(v_proof);
    PERFORM _retention_register(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                p_batch_size, p_mode, p_interval, v_oid);
    EXECUTE pg_catalog.format('DROP TABLE %s', v_proof);
END
$$;

-- _retention_register takes the owner from the proof table (see above).
CREATE OR REPLACE FUNCTION _retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval, p_proof regclass)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner regrole;
BEGIN
    SELECT c.relowner::regrole INTO v_owner
      FROM pg_catalog.pg_class c
     WHERE c.oid = p_proof AND c.relnamespace = pg_catalog.pg_my_temp_schema() AND c.relpersistence = 't'
       AND c.relname LIKE 'pgsweep\_owner\_proof\_%';
    IF v_owner IS NULL THEN
        RAISE EXCEPTION 'retention_register: no proof of the calling role (call retention_register, not _retention_register)'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM _retention_policy_put(p_name, p_table, p_time_column, p_older_than, p_status_column, p_statuses,
                                  p_batch_size, p_mode, p_interval, v_owner, false);
END
$$;

-- _retention_policy_put validates and stores a policy for p_owner. Only
-- SECURITY DEFINER code calls it (_retention_register, the built-in sync):
-- nobody else may execute it.
CREATE OR REPLACE FUNCTION _retention_policy_put(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text, p_statuses text[], p_batch_size int, p_mode text, p_interval interval,
    p_owner regrole, p_builtin boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text;
    v_table text;
    v_kind "char";
    v_persistence "char";
    v_time record;
    v_status record;
    v_time_type text;
    v_old retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    IF p_table IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got NULL');
    END IF;
    SELECT n.nspname, c.relname, c.relkind, c.relpersistence INTO v_schema, v_table, v_kind, v_persistence
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = p_table;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_table must be an existing table, got oid %s', p_table::oid::text);
    END IF;
    -- Only plain tables: the TID-range walk needs one heap. A partitioned
    -- table's partitions are registered one by one (or dropped when old).
    -- Ordinary or partitioned (retention_partition.sql: every leaf, present
    -- and future), never temporary: a cleaner runs in another session.
    IF v_kind NOT IN ('r', 'p') OR v_persistence = 't' THEN
        PERFORM _retention_invalid('p_table must be an ordinary or partitioned, non-temporary table, got %s (relkind %s)',
            p_table::text, v_kind::text);
    END IF;
    IF p_builtin THEN
        IF p_owner <> _owner_role() OR v_schema <> pg_catalog.current_schema()
           OR v_table NOT IN ('message_processed', 'message_dead') THEN
            RAISE EXCEPTION 'built-in retention policies belong to % and cover pgsweep''s own tables', _owner_role()
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    ELSE
        IF (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = p_table) = _owner_role() THEN
            PERFORM _retention_invalid('p_table must not be one of pgsweep''s own tables (their built-in policies '
                'cover them: queue_configure processed_retention/dead_retention), got %s', p_table::text);
        END IF;
        IF NOT pg_catalog.has_table_privilege(p_owner, p_table, 'SELECT')
           OR NOT pg_catalog.has_table_privilege(p_owner, p_table, 'DELETE') THEN
            RAISE EXCEPTION 'retention_register: role % needs SELECT and DELETE on % to register a policy for it', p_owner, p_table
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Every run deletes as the role that registered the policy.';
        END IF;
    END IF;

    PERFORM _check_text('p_time_column', p_time_column, 63);
    v_time := _retention_column(p_table, p_time_column);
    IF v_time.type_sql IS NULL THEN
        PERFORM _retention_invalid('p_time_column must name a column of %s, got %s', p_table::text, quote_ident(p_time_column));
    END IF;
    v_time_type := CASE v_time.base_type
        WHEN 'timestamptz'::regtype THEN 'timestamptz'
        WHEN 'timestamp'::regtype THEN 'timestamp'
        WHEN 'date'::regtype THEN 'date' END;
    IF v_time_type IS NULL THEN
        PERFORM _retention_invalid('p_time_column must be of type timestamptz, timestamp or date, got %s of type %s',
            quote_ident(p_time_column), v_time.base_type::text);
    END IF;

    -- 0 is allowed: for an expiry column (CAP's ExpiresAt) the cutoff is now.
    -- At most 100 years, so that now() - p_older_than is a valid moment.
    IF p_older_than IS NOT NULL AND (p_older_than < interval '0' OR p_older_than > interval '100 years'
                                     OR NOT pg_catalog.isfinite(p_older_than)) THEN
        PERFORM _retention_invalid('p_older_than must be between 0 seconds and 100 years, or NULL to keep rows forever, got %s',
            _interval_text(p_older_than));
    END IF;

    IF p_older_than IS NOT NULL THEN PERFORM _check_interval('p_older_than', p_older_than, interval '0', interval '100 years'); END IF;
    IF p_status_column IS NOT NULL THEN
        PERFORM _check_text('p_status_column', p_status_column, 63);
        v_status := _retention_column(p_table, p_status_column);
        IF v_status.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_status_column must name a column of %s, got %s', p_table::text,
                quote_ident(p_status_column));
        END IF;
        IF v_status.category <> 'S' THEN
            PERFORM _retention_invalid('p_status_column must be text-like (text, varchar, char), got %s of type %s',
                quote_ident(p_status_column), v_status.base_type::text);
        END IF;
        IF p_statuses IS NULL OR cardinality(p_statuses) = 0 OR array_position(p_statuses, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_statuses must be a non-empty array without NULLs when p_status_column is given, got %s',
                coalesce(p_statuses::text, 'NULL'));
        END IF;
    ELSIF p_statuses IS NOT NULL THEN
        PERFORM _retention_invalid('p_statuses needs p_status_column, got statuses %s and no status column', p_statuses::text);
    END IF;

    PERFORM _check_int('p_batch_size', p_batch_size, 1, 10000);
    PERFORM _check_size('p_statuses', cardinality(p_statuses), 'max_batch');
    IF p_mode IS NULL OR p_mode NOT IN ('exclusive', 'parallel') THEN
        PERFORM _retention_invalid('p_mode must be ''exclusive'' or ''parallel'', got %s', coalesce(quote_literal(p_mode), 'NULL'));
    END IF;
    IF p_interval IS NULL OR p_interval <= interval '0' THEN
        PERFORM _retention_invalid('p_interval must be greater than 0, got %s', _interval_text(p_interval));
    END IF;
    PERFORM _check_interval('p_interval', p_interval, interval '1 second', interval '30 days');

    -- Checks done: from here on the call succeeds.
    SELECT * INTO v_old FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF FOUND AND (v_old.table_schema, v_old.table_name, v_old.time_column, v_old.time_type, v_old.older_than,
                  v_old.status_column, v_old.statuses, v_old.batch_size, v_old.mode, v_old.owner)
                 IS DISTINCT FROM
                 (v_schema, v_table, p_time_column, v_time_type, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_owner) THEN
        DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
    END IF;
    INSERT INTO retention_policy AS p (name, table_schema, table_name, time_column, time_type, older_than,
                                       status_column, statuses, batch_size, mode, run_interval,
                                       registered_at, updated_at, owner)
    VALUES (p_name, v_schema, v_table, p_time_column, v_time_type, p_older_than,
            p_status_column, p_statuses, p_batch_size, p_mode, p_interval, v_now, v_now, p_owner)
    ON CONFLICT (name) DO UPDATE
       SET table_schema = excluded.table_schema, table_name = excluded.table_name, owner = excluded.owner,
           time_column = excluded.time_column, time_type = excluded.time_type, older_than = excluded.older_than,
           status_column = excluded.status_column, statuses = excluded.statuses,
           batch_size = excluded.batch_size, mode = excluded.mode, run_interval = excluded.run_interval,
           -- a filter names a column of the old table: it cannot carry over to another table
           filter_column = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_column END,
           filter_values = CASE WHEN (p.table_schema, p.table_name) = (excluded.table_schema, excluded.table_name)
                                THEN p.filter_values END,
           updated_at = excluded.updated_at;

    IF _retention_index(p_table, p_time_column, p_status_column,
                        (SELECT filter_column FROM retention_policy WHERE name = p_name)) IS NULL THEN
        RAISE NOTICE 'retention policy %: no btree index of % leads with %, so every pass reads the whole table',
            p_name, p_table::text, quote_ident(p_time_column)
            USING HINT = format('CREATE INDEX ON %s (%I)', p_table::text, p_time_column);
    END IF;
END
$$;

-- _retention_resolve resolves a table name on the given search_path (the
-- caller's), or raises 22023 naming p_table.
CREATE OR REPLACE FUNCTION _retention_resolve(p_name text, p_table text, p_search_path text)
RETURNS regclass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass;
    v_pinned text := pg_catalog.current_setting('search_path');
BEGIN
    PERFORM _check_text('p_name', p_name, 190); -- the lease is named retention:<name>
    PERFORM _check_text('p_table', p_table, 300);
    BEGIN
        PERFORM pg_catalog.set_config('search_path', coalesce(p_search_path, ''), true);
        v_rel := pg_catalog.to_regclass(p_table);
        PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    EXCEPTION WHEN OTHERS THEN -- malformed names such as 'a.b.c.d'
        v_rel := NULL;
    END;
    PERFORM pg_catalog.set_config('search_path', v_pinned, true);
    IF v_rel IS NULL THEN
        PERFORM _retention_invalid('p_table must be an existing table, got %s', quote_literal(p_table));
    END IF;
    RETURN v_rel;
END
$$;

-- The same, for a table given by name, resolved on the CALLER's
-- search_path like every PostgreSQL command (retention_register('x',
-- 'orders_archive', ...) finds public.orders_archive). This overload pins no
-- search_path so that it can read the caller's; its body is one call with
-- every name schema-qualified, and the lookup itself runs in
-- _retention_resolve, which pins its own path and only resolves the name. A
-- name that resolves to no table is a 22023 naming p_table. A string literal
-- argument resolves to this overload.
CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table text, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
AS $$
    SELECT {{ .schema | default "pgsweep" }}.retention_register(p_name,
        {{ .schema | default "pgsweep" }}._retention_resolve(p_name, p_table, pg_catalog.current_setting('search_path')),
        p_time_column, p_older_than, p_status_column, p_statuses, p_batch_size, p_mode, p_interval)
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_table text;
BEGIN
    PERFORM _check_text('p_name', p_name);
    -- partitions a pass detached and no pass dropped yet stay behind
    FOR v_table IN
        SELECT c.oid::regclass::text FROM retention_unit u JOIN pg_catalog.pg_class c ON c.oid = u.block_hi::oid
         WHERE u.policy = p_name AND _retention_unit_detached(u.action, u.block_lo)
    LOOP
        RAISE NOTICE 'retention policy %: the detached partition % is left in place (DROP TABLE it)', p_name, v_table;
    END LOOP;
    DELETE FROM retention_policy WHERE name = p_name;
    RETURN FOUND;
END
$$;

-- _retention_policy_for_update loads a policy for a setter, or raises 22023.
CREATE OR REPLACE FUNCTION _retention_policy_for_update(p_name text)
RETURNS retention_policy
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
BEGIN
    PERFORM _check_text('p_name', p_name);
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    RETURN v_pol;
END
$$;

-- The time zone in which a timestamp-without-time-zone (or date) column is
-- read: CAP writes local times. NULL: the database's TimeZone at run time.
-- A zone whose UTC offset ever exceeds 15 hours ('UTC-99') is refused.
CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_time_zone('p_time_zone', p_time_zone); -- a UTC offset within 15 hours
    v_at := clock_timestamp();
    UPDATE retention_policy SET time_zone = p_time_zone, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo); -- the open sweep's cutoff was computed in the old zone
END
$$;

-- An extra fixed filter: only rows whose p_column is one of p_values are
-- deleted. pgsweep's built-in policies use it for per-queue periods
-- (queue = 'orders'). p_column NULL removes the filter.
CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy := _retention_policy_for_update(p_name);
    v_rel regclass := _retention_table(v_pol.table_schema, v_pol.table_name);
    v_col record;
    v_at timestamptz;
BEGIN
    IF p_column IS NOT NULL THEN
        PERFORM _check_text('p_column', p_column, 63);
        PERFORM _check_size('p_values', cardinality(p_values), 'max_batch');
        v_col := _retention_column(v_rel, p_column);
        IF v_col.type_sql IS NULL THEN
            PERFORM _retention_invalid('p_column must name a column of %s, got %s', v_rel::text, quote_ident(p_column));
        END IF;
        IF p_values IS NULL OR cardinality(p_values) = 0 OR array_position(p_values, NULL) IS NOT NULL THEN
            PERFORM _retention_invalid('p_values must be a non-empty array without NULLs, got %s', coalesce(p_values::text, 'NULL'));
        END IF;
        -- Values are cast to the column's type in every batch: fail now, not then.
        BEGIN
            EXECUTE format('SELECT $1::%s[]', v_col.type_sql) USING p_values;
        EXCEPTION WHEN OTHERS THEN
            PERFORM _retention_invalid('p_values must be valid values of %s (type %s), got %s', quote_ident(p_column),
                v_col.base_type::text, p_values::text);
        END;
    ELSIF p_values IS NOT NULL THEN
        PERFORM _retention_invalid('p_values needs p_column, got values %s and no column', p_values::text);
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET filter_column = p_column, filter_values = p_values, updated_at = v_at
     WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
END
$$;

-- How a sweep walks the table: 'auto' (the default) picks per sweep, see
-- _retention_plan; 'tid_range' or 'keyset' force one.
CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    IF p_strategy IS NULL OR p_strategy NOT IN ('auto', 'tid_range', 'keyset') THEN
        PERFORM _retention_invalid('p_strategy must be ''auto'', ''tid_range'' or ''keyset'', got %s',
            coalesce(quote_literal(p_strategy), 'NULL'));
    END IF;
    v_at := clock_timestamp();
    UPDATE retention_policy SET strategy = p_strategy, updated_at = v_at WHERE name = p_name;
    DELETE FROM retention_unit WHERE policy = p_name AND NOT _retention_unit_detached(action, block_lo);
END
$$;

-- The TTL of an exclusive policy's lease retention:<name>: how long another
-- cleaner waits after a crash. A live cleaner renews it every third of it.
CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at timestamptz;
BEGIN
    PERFORM _retention_policy_for_update(p_name);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    v_at := clock_timestamp();
    UPDATE retention_policy SET lease_ttl = p_ttl, updated_at = v_at WHERE name = p_name;
END
$$;
-- pgsweep:end functions/retention_register.sql

-- pgsweep:include functions/retention_detach.sql
-- Retention of partitioned tables: DETACH PARTITION ... CONCURRENTLY, run by
-- the Go runner (docs/retention.md, "Partitioned tables").
--
-- Why: a pass removes an expired leaf with a plain DETACH, which holds an
-- ACCESS EXCLUSIVE lock on the parent for a moment; every insert into the
-- table in that moment waits for it (one insert a pass waited 3-4 ms in
-- `bench cleanup --partitioned`, docs/benchmarks.md). DETACH ...
-- CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on the parent, which no insert
-- and no query waits for, and ACCESS EXCLUSIVE on the leaf only after every
-- transaction that could still see it has ended. PostgreSQL runs it outside
-- any transaction block only, so neither maintain() nor retention_run
-- (procedures, pg_cron) can: the Go runner runs it before each maintenance
-- pass, from the claims these functions hand out. Installs run by pg_cron
-- alone keep the pass's plain DETACH (retention_partition.sql).
--
-- The protocol (Client.RetentionDetachConcurrently in Go):
--   1. retention_detach_claim(owner) claims, among the policies retention_due
--      lists, the leaves to remove:
--        'detach'   a droppable leaf (_retention_leaf_droppable) of a parent
--                   without a DEFAULT partition (PostgreSQL refuses
--                   CONCURRENTLY there: those keep the pass's DETACH), owned,
--                   with its parent, by roles the caller can act as
--                   (otherwise the pass, as the policy's owner, does it);
--        'finalize' a leaf this protocol left half-detached (a runner killed,
--                   or its lock_timeout reached, between DETACH's two
--                   transactions): DETACH ... FINALIZE;
--        'drop'     a table this protocol detached (by an earlier call: the
--                   commit of a DROP releases the files, 25-50 ms a leaf of
--                   1,000,000 rows, CPU and I/O taken from the inserts, so
--                   it is left out of the call that removes the rows, as
--                   the pass does since 0.30).
--      A claim is a row of retention_detaching held for the policy's
--      lease_ttl: two runners never work on one leaf at once; one that died
--      leaves its leaf to the next runner after the TTL.
--   2. The runner counts the leaf's rows (count_sql, from the statistics, as
--      itself), sets lock_timeout to retention_lock_timeout, runs the DETACH
--      (or FINALIZE) and renames the detached table pgsweep_detached_c<oid>
--      (its name is free again at once), or the DROP, each statement in its
--      own transaction.
--   3. retention_detach_done(owner, leaf, rows) records what the catalog
--      says, whatever failed in between: a leaf out of its parent under the
--      runner's name (or dropped) counts its rows as deleted, once, in a
--      retention_pass of strategy 'detach_concurrently' (which retention_due
--      does not count as the policy's pass) and stays claimed for DROP; a
--      leaf still half-detached stays claimed for FINALIZE; a leaf still
--      attached (lock_timeout) is released, and the pass's plain DETACH or a
--      later claim takes it; a leaf out of its parent under another name
--      (detached by a maintenance pass, by a DBA keeping it, or the rename
--      failed) is released, not counted, and left in place.
-- The pass plans nothing for a leaf that is claimed or half-detached
-- (retention_partition.sql) and sweeps nothing that left its parent since
-- it planned (retention_step.sql); its plain DETACH defers a leaf a runner
-- detached or half-detached meanwhile.

-- _retention_detach_runner_name: the name the runner gives a table it
-- detached, until its next call drops it (0.32). Not the pass's
-- pgsweep_detached_<oid>: the name is the proof of who detached it, so
-- that neither counts or drops the other's tables, and a table someone
-- else detached (a DBA keeping it, an archive job) is never counted or
-- dropped.
CREATE OR REPLACE FUNCTION _retention_detach_runner_name(p_leaf oid)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 'pgsweep_detached_c' || p_leaf::text $$;

-- _retention_detach_caller: the role the caller of a SECURITY DEFINER
-- function acts as (SET ROLE, else the login role).
CREATE OR REPLACE FUNCTION _retention_detach_caller()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

-- _retention_detach_statements: the statements for a leaf, names quoted
-- (the count and the DROP are the pass's: _retention_drop_sql).
CREATE OR REPLACE FUNCTION _retention_detach_statements(p_leaf oid, p_attached boolean, p_finalize boolean,
    OUT count_sql text, OUT detach_sql text, OUT rename_sql text, OUT drop_sql text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql record := _retention_drop_sql(p_leaf::regclass);
BEGIN
    count_sql := v_sql.count_sql;
    IF p_attached THEN
        detach_sql := v_sql.detach_sql || CASE WHEN p_finalize THEN ' FINALIZE' ELSE ' CONCURRENTLY' END;
    END IF;
    SELECT pg_catalog.format('ALTER TABLE %I.%I RENAME TO %I', n.nspname, c.relname, _retention_detach_runner_name(p_leaf))
      INTO rename_sql
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_leaf;
    drop_sql := v_sql.drop_sql;
END
$$;

-- _retention_detach_claim_for: the claims of retention_detach_claim (below),
-- at most p_limit.
CREATE OR REPLACE FUNCTION _retention_detach_claim_for(p_owner text, p_now timestamptz, p_limit int)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _retention_detach_caller();
    v_now timestamptz := clock_timestamp();
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_pol retention_policy;
    v_rel regclass;
    v_cutoff timestamptz;
    v_c record;
    v_s record;
    v_n int := 0;
    v_taken oid;
    v_due boolean;
    v_r record;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    PERFORM _check_now('p_now', p_now);
    -- Claims of a policy that was unregistered go with it (ON DELETE
    -- CASCADE); expired claims whose table is gone are forgotten (a live
    -- claim's holder may have dropped its table and not recorded it yet).
    DELETE FROM retention_detaching d
     WHERE d.expires_at <= v_now AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = d.leaf);
    -- New leaves only of the policies that are due (the runner's pass
    -- follows); leaves this protocol left half-detached whenever.
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_detaching d WHERE d.policy = r.name))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_due := v_r.due;
        v_rel := _retention_table(v_pol.table_schema, v_pol.table_name);
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        FOR v_c IN
            SELECT c.oid AS leaf, i.inhparent AS parent, i.inhdetachpending AS pending
              -- pg_partition_tree omits half-detached leaves: the claims name them
              FROM (SELECT t.relid FROM pg_catalog.pg_partition_tree(v_rel) t WHERE t.isleaf
                    UNION
                    SELECT d.leaf FROM retention_detaching d WHERE d.policy = v_pol.name) x
              JOIN pg_catalog.pg_class c ON c.oid = x.relid
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
              LEFT JOIN retention_detaching d ON d.leaf = c.oid
             WHERE c.relkind = 'r'
               -- free, or claimed by this owner, or a claim whose holder died
               AND (d.leaf IS NULL OR d.owner = p_owner OR d.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN d.leaf IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_due AND pt.partdefid = 0 AND _retention_leaf_droppable(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
               AND pg_catalog.pg_has_role(v_caller, c.relowner, 'USAGE')
               AND pg_catalog.pg_has_role(v_caller, p.relowner, 'USAGE')
             ORDER BY i.inhdetachpending DESC, c.oid
        LOOP
            EXIT WHEN v_n >= p_limit;
            v_s := _retention_detach_statements(v_c.leaf, true, v_c.pending);
            INSERT INTO retention_detaching AS d (leaf, policy, parent, leaf_schema, leaf_name, leaf_owner, owner,
                                                  began_at, expires_at)
            SELECT v_c.leaf, v_pol.name, v_c.parent, n.nspname, c.relname, c.relowner, p_owner, v_now, v_now + v_pol.lease_ttl
              FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = v_c.leaf
            ON CONFLICT ON CONSTRAINT retention_detaching_pkey DO UPDATE
               SET owner = excluded.owner, expires_at = excluded.expires_at
             WHERE d.owner = excluded.owner OR d.expires_at <= v_now
            RETURNING d.leaf INTO v_taken;
            -- another runner claimed it since the list was read
            CONTINUE WHEN v_taken IS NULL;
            v_taken := NULL;
            v_n := v_n + 1;
            policy := v_pol.name;
            leaf := v_c.leaf;
            parent := v_c.parent;
            action := CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END;
            count_sql := v_s.count_sql;
            detach_sql := v_s.detach_sql;
            rename_sql := v_s.rename_sql;
            drop_sql := NULL; -- by the next call: the files' release is not this pass's
            lock_timeout_ms := v_timeout;
            RETURN NEXT;
        END LOOP;
    END LOOP;
    -- Tables this protocol detached and renamed (earlier calls): dropped
    -- now. Only a table under the runner's name (the proof that its DETACH
    -- and rename succeeded), that the policy's owner and the caller can
    -- still act as the owner of, and that nothing outside it depends on (a
    -- view made on it since: DROP would fail every call): such a table is
    -- left in place, its claim closed, a NOTICE names it, as the pass does.
    FOR v_c IN
        SELECT d.leaf, d.policy, d.parent, d.counted,
               (c.relname = _retention_detach_runner_name(d.leaf) AND NOT c.relispartition
                AND pg_catalog.pg_has_role(r.owner, c.relowner, 'USAGE')
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_detaching d
          JOIN pg_catalog.pg_class c ON c.oid = d.leaf
          JOIN retention_policy r ON r.name = d.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (d.owner = p_owner OR d.expires_at <= v_now)
           AND pg_catalog.pg_has_role(v_caller, c.relowner, 'USAGE')
         ORDER BY d.leaf
           FOR UPDATE OF d SKIP LOCKED
    LOOP
        IF NOT v_c.droppable THEN
            RAISE NOTICE 'retention policy %: the detached partition % is left in place', v_c.policy, v_c.leaf::regclass::text;
            DELETE FROM retention_detaching d WHERE d.leaf = v_c.leaf;
            CONTINUE;
        END IF;
        EXIT WHEN v_n >= p_limit;
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_c.policy;
        UPDATE retention_detaching SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl WHERE retention_detaching.leaf = v_c.leaf;
        v_s := _retention_detach_statements(v_c.leaf, false, false);
        v_n := v_n + 1;
        policy := v_c.policy;
        leaf := v_c.leaf;
        parent := v_c.parent;
        action := 'drop';
        -- a runner that died between its rename and its record: counted now
        count_sql := CASE WHEN NOT v_c.counted THEN v_s.count_sql END;
        detach_sql := NULL;
        rename_sql := NULL;
        drop_sql := v_s.drop_sql;
        lock_timeout_ms := v_timeout;
        RETURN NEXT;
    END LOOP;
END
$$;

-- retention_detach_claim: what the Go runner detaches concurrently now (see
-- above), at most 64 leaves; p_owner names the runner (1-200 characters).
-- The p_now overload is for tests (S_owner only).
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, p_now, 64) $$;

CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, count_sql text, detach_sql text, rename_sql text, drop_sql text,
               lock_timeout_ms bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM _retention_detach_claim_for(p_owner, NULL, 64) $$;

-- retention_detach_done records a claimed leaf from the catalog (see
-- above) and returns its state: 'dropped', 'detached' (out of its parent,
-- not dropped yet: claimed again for DROP), 'pending' (half-detached:
-- claimed again for FINALIZE), 'attached' (released) or 'taken' (a
-- maintenance pass detached it first: released, not counted). p_rows is the
-- leaf's rows as count_sql found them (NULL: unknown, counted 0); a leaf is
-- counted once. A claim held by another owner, or a caller that cannot act
-- as the leaf's owner, changes nothing ('other').
CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, p_rows bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_d retention_detaching;
    v_pol retention_policy;
    v_state text;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    IF p_rows < 0 THEN
        PERFORM _retention_invalid('p_rows must be NULL or at least 0, got %s', p_rows::text);
    END IF;
    SELECT * INTO v_d FROM retention_detaching d WHERE d.leaf = p_leaf FOR UPDATE;
    -- only the claim's holder, acting as the leaf's owner, records it
    IF NOT FOUND OR v_d.owner IS DISTINCT FROM p_owner
       OR NOT pg_catalog.pg_has_role(_retention_detach_caller(), v_d.leaf_owner, 'USAGE') THEN
        RETURN 'other';
    END IF;
    SELECT CASE WHEN c.oid IS NULL THEN 'dropped'
                WHEN i.inhdetachpending THEN 'pending'
                WHEN i.inhrelid IS NOT NULL THEN 'attached'
                -- out of its parent under the runner's name: its DETACH and
                -- rename succeeded
                WHEN c.relname = _retention_detach_runner_name(p_leaf)
                     AND n.nspname = v_d.leaf_schema THEN 'detached'
                -- detached by someone else (a maintenance pass, which
                -- renamed it pgsweep_detached_<oid> and counts it; a DBA
                -- keeping the table), or the runner's rename failed: not
                -- counted, never dropped by the runner
                ELSE 'taken' END
      INTO v_state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF v_state IN ('dropped', 'detached') AND NOT v_d.counted THEN
        SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_d.policy;
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_d.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_d.began_at, v_d.expires_at, v_now, v_now, coalesce(p_rows, 0), 1, 1, 1, 'detach_concurrently', 'drained');
    END IF;
    IF v_state = 'taken' AND NOT v_d.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_d.policy, v_d.leaf_schema, v_d.leaf_name;
    END IF;
    IF v_state IN ('dropped', 'attached', 'taken') THEN
        DELETE FROM retention_detaching d WHERE d.leaf = p_leaf;
    ELSE
        UPDATE retention_detaching d SET counted = d.counted OR v_state = 'detached' WHERE d.leaf = p_leaf;
    END IF;
    RETURN v_state;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
