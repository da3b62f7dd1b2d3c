-- Cron arithmetic for periodic schedules (schedule.sql, docs/schedules.md).
--
-- Syntax (parsed once, by _cron_parse, when a schedule is created):
--   * five fields: minute (0-59) hour (0-23) day-of-month (1-31) month (1-12
--     or JAN-DEC) day-of-week (0-7 or SUN-SAT; 0 and 7 are both Sunday);
--     names are case-insensitive; each field is a comma list of '*', '?'
--     (the same as '*'), N, N-M, any of them followed by /STEP, and N/STEP
--     meaning N-max/STEP (robfig/cron's reading);
--   * day-of-month and day-of-week: when both are restricted (neither starts
--     with '*' or '?'), a day matches if EITHER matches (Vixie cron, robfig);
--     '*/STEP' with STEP > 1 counts as restricted, '*' and '*/1' do not
--     (robfig's starBit);
--   * '@yearly' ('@annually'), '@monthly', '@weekly', '@daily' ('@midnight'),
--     '@hourly': the five-field expressions robfig gives them;
--   * '@every <interval>' (a PostgreSQL interval of whole seconds, 1 second
--     to 366 days, without months or years: '@every 90 seconds', '@every
--     1h30m' is not an interval -- write '1 hour 30 minutes'): the slots are
--     the epoch (1970-01-01 00:00 UTC) plus every multiple of it, whatever
--     the time zone, so they never move when a schedule is re-created or the
--     server restarts, and a slot is a stable identity.
--
-- The parsed form: the allowed values of each field as a sorted int[] (day
-- of week 0-6), whether the day rule is OR, and @every's seconds.
--
-- Time zones and DST: a five-field schedule fires at every instant, on a
-- whole minute, whose wall-clock time in its zone matches. So a wall-clock
-- time inside the spring-forward gap does not exist that day and does not
-- fire ('30 2 * * *' in Europe/Berlin skips the last Sunday of March), and
-- one inside the repeated fall-back hour exists twice and fires twice, once
-- in summer time and once in standard time. This is what robfig/cron v3
-- does (its Next steps hours and minutes on the absolute time line); the
-- test internal/schedtest checks it on 300+ expressions.
--
-- Search bound: the next slot is looked for up to 9 years after the
-- previous one (a day-of-month 29 of February needs 8: 2096 -> 2104);
-- robfig gives up after 5. An expression that can never fire ('0 0 30 2 *')
-- is refused at parse time.

-- _cron_invalid raises 22023 naming p_cron, echoing it and saying what is wrong.
CREATE OR REPLACE FUNCTION _cron_invalid(p_cron text, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION 'p_cron must be a five-field cron expression or @every <interval>, got %: %', quote_literal(p_cron), p_what
        USING ERRCODE = 'invalid_parameter_value',
              HINT = 'minute hour day-of-month month day-of-week, e.g. ''*/5 * * * *'', ''0 9 * * MON-FRI'', ''@every 30 seconds'' (docs/schedules.md)';
END
$$;

-- _cron_field parses one field into its sorted allowed values (o_values) and
-- whether it counts as '*' (o_star, robfig's starBit). p_names: the names of
-- p_min, p_min+1, ... (months from 1, days from 0), or NULL.
CREATE OR REPLACE FUNCTION _cron_field(p_cron text, p_field text, p_label text, p_min int, p_max int, p_names text[],
    OUT o_values int[], OUT o_star boolean)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_part text;
    v_range text;
    v_step_text text;
    v_lo text;
    v_hi text;
    v_start int;
    v_end int;
    v_step int;
    v_star boolean;
    v_bits boolean[] := array_fill(false, ARRAY[p_max - p_min + 1]);
    v_max int := p_max;
BEGIN
    o_star := false;
    IF p_label = 'day-of-week' THEN
        v_max := 7; -- 7 is Sunday too
        v_bits := array_fill(false, ARRAY[8]);
    END IF;
    FOREACH v_part IN ARRAY string_to_array(p_field, ',') LOOP
        IF v_part = '' THEN
            PERFORM _cron_invalid(p_cron, format('%s field %s has an empty list element', p_label, quote_literal(p_field)));
        END IF;
        IF array_length(string_to_array(v_part, '/'), 1) > 2 THEN
            PERFORM _cron_invalid(p_cron, format('%s %s has more than one /', p_label, quote_literal(v_part)));
        END IF;
        v_range := split_part(v_part, '/', 1);
        v_step_text := CASE WHEN strpos(v_part, '/') > 0 THEN split_part(v_part, '/', 2) END;
        v_star := false;
        IF v_range IN ('*', '?') THEN
            v_start := p_min;
            v_end := p_max;
            v_star := true;
        ELSE
            IF array_length(string_to_array(v_range, '-'), 1) > 2 THEN
                PERFORM _cron_invalid(p_cron, format('%s %s has more than one -', p_label, quote_literal(v_part)));
            END IF;
            v_lo := split_part(v_range, '-', 1);
            v_hi := CASE WHEN strpos(v_range, '-') > 0 THEN split_part(v_range, '-', 2) END;
            v_start := _cron_value(p_cron, v_lo, p_label, p_min, v_max, p_names);
            IF v_hi IS NOT NULL THEN
                v_end := _cron_value(p_cron, v_hi, p_label, p_min, v_max, p_names);
            ELSIF v_step_text IS NOT NULL THEN
                v_end := p_max; -- N/STEP: N-max/STEP
            ELSE
                v_end := v_start;
            END IF;
            IF v_start > v_end THEN
                PERFORM _cron_invalid(p_cron, format('%s range %s begins after it ends', p_label, quote_literal(v_range)));
            END IF;
        END IF;
        v_step := 1;
        IF v_step_text IS NOT NULL THEN
            IF v_step_text !~ '^[0-9]{1,4}$' OR v_step_text::int = 0 THEN
                PERFORM _cron_invalid(p_cron, format('%s step %s must be a positive whole number', p_label, quote_literal(v_step_text)));
            END IF;
            v_step := v_step_text::int;
            IF v_step > 1 THEN
                v_star := false;
            END IF;
        END IF;
        o_star := o_star OR v_star;
        FOR i IN 0 .. (v_end - v_start) / v_step LOOP
            v_bits[v_start + i * v_step - p_min + 1] := true;
        END LOOP;
    END LOOP;
    IF p_label = 'day-of-week' AND v_bits[8] THEN
        v_bits[1] := true;
    END IF;
    o_values := ARRAY(SELECT p_min + i - 1 FROM generate_subscripts(v_bits, 1) i
                       WHERE v_bits[i] AND p_min + i - 1 <= p_max ORDER BY 1);
END
$$;

-- _cron_value reads one value: a number within [p_min, p_max] or a name.
CREATE OR REPLACE FUNCTION _cron_value(p_cron text, p_text text, p_label text, p_min int, p_max int, p_names text[])
RETURNS int
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v int;
BEGIN
    IF p_text ~ '^[0-9]{1,4}$' THEN
        v := p_text::int;
        IF v < p_min OR v > p_max THEN
            PERFORM _cron_invalid(p_cron, format('%s %s out of range %s-%s', p_label, v, p_min, p_max));
        END IF;
        RETURN v;
    END IF;
    v := array_position(p_names, upper(p_text));
    IF p_names IS NULL OR v IS NULL THEN
        PERFORM _cron_invalid(p_cron, format('%s %s is not a number%s', p_label, quote_literal(p_text),
            CASE WHEN p_names IS NULL THEN '' ELSE ' or a name (' || p_names[1] || '-' || p_names[cardinality(p_names)] || ')' END));
    END IF;
    RETURN p_min + v - 1;
END
$$;

-- _cron_parse parses a schedule expression (see the top of this file) or
-- raises 22023 naming p_cron and what is wrong with it.
CREATE OR REPLACE FUNCTION _cron_parse(p_cron text, OUT minutes int[], OUT hours int[], OUT doms int[],
    OUT months int[], OUT dows int[], OUT day_or boolean, OUT every_secs bigint)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expr text;
    v_fields text[];
    v_every interval;
    v_secs numeric;
    f record;
    v_dom_star boolean;
    v_dow_star boolean;
BEGIN
    PERFORM _check_text('p_cron', p_cron, 200);
    v_expr := lower(p_cron);
    IF v_expr LIKE '@every %' THEN
        BEGIN
            v_every := trim(substr(p_cron, 8))::interval;
        EXCEPTION WHEN OTHERS THEN
            PERFORM _cron_invalid(p_cron, format('%s is not an interval', quote_literal(trim(substr(p_cron, 8)))));
        END;
        v_secs := extract(epoch FROM v_every);
        IF extract(year FROM v_every) <> 0 OR extract(month FROM v_every) <> 0 THEN
            PERFORM _cron_invalid(p_cron, '@every takes no months or years (their length varies): use a five-field expression');
        END IF;
        IF v_secs < 1 OR v_secs > 366 * 86400 OR v_secs <> trunc(v_secs) THEN
            PERFORM _cron_invalid(p_cron, format('@every %s must be a whole number of seconds from 1 second to 366 days',
                                                 _interval_text(v_every)));
        END IF;
        every_secs := v_secs::bigint;
        RETURN;
    END IF;
    v_expr := CASE v_expr
        WHEN '@yearly' THEN '0 0 1 1 *' WHEN '@annually' THEN '0 0 1 1 *'
        WHEN '@monthly' THEN '0 0 1 * *' WHEN '@weekly' THEN '0 0 * * 0'
        WHEN '@daily' THEN '0 0 * * *' WHEN '@midnight' THEN '0 0 * * *'
        WHEN '@hourly' THEN '0 * * * *' ELSE p_cron END;
    IF left(v_expr, 1) = '@' THEN
        PERFORM _cron_invalid(p_cron, 'unknown descriptor (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @every <interval>)');
    END IF;
    v_fields := regexp_split_to_array(btrim(v_expr, E' \t'), E'[ \t]+');
    IF cardinality(v_fields) <> 5 THEN
        PERFORM _cron_invalid(p_cron, format('%s fields, expected 5 (minute hour day-of-month month day-of-week)', cardinality(v_fields)));
    END IF;
    f := _cron_field(p_cron, v_fields[1], 'minute', 0, 59, NULL);
    minutes := f.o_values;
    f := _cron_field(p_cron, v_fields[2], 'hour', 0, 23, NULL);
    hours := f.o_values;
    f := _cron_field(p_cron, v_fields[3], 'day-of-month', 1, 31, NULL);
    doms := f.o_values;
    v_dom_star := f.o_star;
    f := _cron_field(p_cron, v_fields[4], 'month', 1, 12,
                     ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']);
    months := f.o_values;
    f := _cron_field(p_cron, v_fields[5], 'day-of-week', 0, 6, ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']);
    dows := f.o_values;
    v_dow_star := f.o_star;
    day_or := NOT (v_dom_star OR v_dow_star);
    -- a day must exist: with the AND rule (day-of-week '*') some allowed
    -- day of the month must occur in some allowed month (29 in February:
    -- leap years)
    IF NOT day_or AND NOT EXISTS (
            SELECT 1 FROM unnest(months) m, unnest(doms) d
             WHERE d <= CASE WHEN m = 2 THEN 29 WHEN m IN (4, 6, 9, 11) THEN 30 ELSE 31 END) THEN
        PERFORM _cron_invalid(p_cron, 'it never fires: no allowed day-of-month occurs in an allowed month');
    END IF;
END
$$;

-- _cron_next: the next p_count slots after p_after (strictly later) and not
-- after p_until, ascending, of a parsed schedule in zone p_zone. Whole days
-- that cannot match are skipped first (month and day rule), then the day's
-- wall-clock times are turned into instants: each local time L of day D is
-- tried with the UTC offset in force a day before D and two days after it,
-- and kept when the instant reads L back in the zone (none in a gap, two in
-- a repeated hour). Stops when no day matches within 9 years.
CREATE OR REPLACE FUNCTION _cron_next(p_minutes int[], p_hours int[], p_doms int[], p_months int[], p_dows int[],
    p_day_or boolean, p_every bigint, p_zone text, p_after timestamptz, p_count int,
    p_until timestamptz DEFAULT 'infinity')
RETURNS SETOF timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_after timestamptz := p_after;
    v_left int := p_count;
    v_day date;
    v_horizon date;
    v_days date[];
    v_per_day int;
    v_n int;
    v_t timestamptz;
    v_k bigint;
BEGIN
    IF p_after IS NULL OR p_count IS NULL OR p_count < 1 OR p_after >= p_until THEN
        RETURN;
    END IF;
    IF p_every IS NOT NULL THEN
        v_k := floor(extract(epoch FROM p_after) / p_every)::bigint + 1;
        RETURN QUERY
            SELECT t FROM (SELECT to_timestamp(0) + make_interval(secs => k * p_every) AS t
                             FROM generate_series(v_k, v_k + p_count - 1) k) x
             WHERE x.t <= p_until ORDER BY 1;
        RETURN;
    END IF;
    v_per_day := cardinality(p_hours) * cardinality(p_minutes);
    v_day := (p_after AT TIME ZONE p_zone)::date;
    v_horizon := v_day + 9 * 366;
    WHILE v_left > 0 LOOP
        v_days := ARRAY(
            SELECT d::date FROM generate_series(v_day, least(v_day + 400, v_horizon), interval '1 day') d
             WHERE extract(month FROM d)::int = ANY (p_months)
               AND CASE WHEN p_day_or THEN extract(day FROM d)::int = ANY (p_doms) OR extract(dow FROM d)::int = ANY (p_dows)
                        ELSE extract(day FROM d)::int = ANY (p_doms) AND extract(dow FROM d)::int = ANY (p_dows) END
             ORDER BY 1
             LIMIT (v_left + v_per_day - 1) / v_per_day + 1);
        IF cardinality(v_days) = 0 THEN
            EXIT WHEN v_day + 400 >= v_horizon;
            v_day := v_day + 401;
            CONTINUE;
        END IF;
        v_n := 0;
        FOR v_t IN
            SELECT DISTINCT c.u
              FROM unnest(v_days) d
             CROSS JOIN LATERAL (SELECT d::timestamp AS midnight) m0
             CROSS JOIN LATERAL (SELECT ((m0.midnight - interval '1 day') AT TIME ZONE 'UTC' AT TIME ZONE p_zone)
                                        - (m0.midnight - interval '1 day') AS off_before,
                                        ((m0.midnight + interval '2 days') AT TIME ZONE 'UTC' AT TIME ZONE p_zone)
                                        - (m0.midnight + interval '2 days') AS off_after) o
             CROSS JOIN unnest(p_hours) h
             CROSS JOIN unnest(p_minutes) mi
             CROSS JOIN LATERAL (SELECT m0.midnight + make_interval(hours => h, mins => mi) AS l) lt
             CROSS JOIN LATERAL (VALUES ((lt.l - o.off_before) AT TIME ZONE 'UTC'),
                                        ((lt.l - o.off_after) AT TIME ZONE 'UTC')) c(u)
             WHERE (c.u AT TIME ZONE p_zone) = lt.l
               AND c.u > v_after AND c.u <= p_until
             ORDER BY 1
             LIMIT v_left
        LOOP
            RETURN NEXT v_t;
            v_n := v_n + 1;
            v_after := v_t;
        END LOOP;
        v_left := v_left - v_n;
        v_day := v_days[cardinality(v_days)] + 1;
        v_horizon := v_day + 9 * 366;
        EXIT WHEN v_day::timestamp - interval '1 day' > (p_until AT TIME ZONE p_zone);
    END LOOP;
END
$$;

-- _cron_latest: the latest slot in (p_after, p_until], or NULL. It looks
-- back from p_until in windows that grow (an hour, a day, 32 days, 367
-- days, all of it), so a frequent schedule reads a few rows however long
-- ago p_after is.
CREATE OR REPLACE FUNCTION _cron_latest(p_minutes int[], p_hours int[], p_doms int[], p_months int[], p_dows int[],
    p_day_or boolean, p_every bigint, p_zone text, p_after timestamptz, p_until timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_window interval;
    v_from timestamptz;
    v_t timestamptz;
BEGIN
    IF p_every IS NOT NULL THEN
        v_t := to_timestamp(0) + make_interval(secs => floor(extract(epoch FROM p_until) / p_every) * p_every);
        RETURN CASE WHEN v_t > p_after THEN v_t END;
    END IF;
    FOREACH v_window IN ARRAY ARRAY[interval '1 hour', interval '1 day', interval '32 days', interval '367 days', NULL] LOOP
        v_from := CASE WHEN v_window IS NULL THEN p_after ELSE greatest(p_after, p_until - v_window) END;
        SELECT max(t) INTO v_t
          FROM _cron_next(p_minutes, p_hours, p_doms, p_months, p_dows, p_day_or, NULL, p_zone, v_from, 1000000, p_until) t;
        IF v_t IS NOT NULL OR v_from = p_after THEN
            RETURN v_t;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- _check_schedule_time_zone raises 22023 naming p_arg unless p_value is a
-- time zone name of pg_timezone_names (an IANA name such as Europe/Berlin,
-- or UTC): schedules follow a zone's daylight-saving rules.
CREATE OR REPLACE FUNCTION _check_schedule_time_zone(p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text(p_arg, p_value, 100);
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names z WHERE z.name = p_value) THEN
        RAISE EXCEPTION '% must be a time zone name of pg_timezone_names (an IANA name such as ''Europe/Berlin'', or ''UTC''), got %',
            p_arg, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- schedule_next_times (admin, monitor): the next p_count (1-10000) slots of
-- a schedule expression after p_after (NULL: now) in zone p_time_zone,
-- ascending; fewer when none comes within 9 years of the previous one.
-- What schedule_create would do with the expression, before creating it
-- (and what internal/schedtest compares with robfig/cron).
CREATE OR REPLACE FUNCTION schedule_next_times(p_cron text, p_time_zone text DEFAULT 'UTC', p_after timestamptz DEFAULT NULL,
    p_count int DEFAULT 10)
RETURNS SETOF timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
BEGIN
    PERFORM _check_int('p_count', p_count, 1, 10000);
    PERFORM _check_schedule_time_zone('p_time_zone', p_time_zone);
    IF p_after IS NOT NULL AND NOT isfinite(p_after) THEN
        RAISE EXCEPTION 'p_after must be NULL (now) or a finite time, got %', p_after USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v := _cron_parse(p_cron);
    RETURN QUERY SELECT * FROM _cron_next(v.minutes, v.hours, v.doms, v.months, v.dows, v.day_or, v.every_secs,
                                          p_time_zone, coalesce(p_after, clock_timestamp()), p_count);
END
$$;
