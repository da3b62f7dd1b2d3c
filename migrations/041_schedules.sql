-- pgsweep 0.41: schedules.
--
-- TODO: say what this migration changes and why.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:changed functions/schedule_cron.sql
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
-- pgsweep:end functions/schedule_cron.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        'queue_info', -- the Worker reads the queue's lease_default and max_attempts (no payloads; consume, queue_rights.sql)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'dead_delete', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'queue_grant', 'queue_revoke', 'queue_rights', -- per-queue rights (queue_rights.sql)
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker wrappers call: the owner proof's definer halves
        -- (retention_register.sql) and the pg_cron command (cron.sql)
        'retention_register_proved', 'retention_unregister_proved', 'retention_set_filter_proved',
        'retention_set_lease_ttl_proved', 'retention_set_strategy_proved', 'retention_set_time_zone_proved',
        'retention_owner_proof',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step_recovery', 'maintain_step_stats', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'maintain_fail_owner', -- the runner: a pass whose session is gone
        'retention_step_begin', 'retention_step', 'retention_step_claim', 'retention_step_record',
        'retention_step_end', 'retention_step_unlock', 'retention_step_pass', 'retention_step_session_state', 'retention_step_session_restore']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'version',
        'lease_rows', 'setting_rows', 'queue_rows', -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
        'stats_latest', 'stats_history', -- the queue snapshots (stats.sql): counts, never payloads
        'health', 'health_server', 'health_install', -- the findings (health.sql): no payload, header or query text
        'cron_job_name', -- the name health_server looks for in pg_cron's jobs (cron.sql)
        'browse_messages', 'browse_message', -- a queue's messages by state, one by id (browse.sql): payloads only with the browse right
        'browse_lanes', 'browse_leases', -- keyset pages of a queue's lanes (browse_lanes.sql) and of the leases (lease.sql)
        'browse_maintenance_passes', 'browse_retention_passes', -- keyset pages of the pass histories (browse_passes.sql)
        'schedule_next_times']) r -- a cron expression's next slots (schedule_cron.sql): reads no table
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
