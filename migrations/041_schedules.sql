-- pgsweep 0.41: periodic schedules.
--
-- Schedules send a fixed message to a queue at every slot of a cron
-- expression in a time zone (issue 25; docs/schedules.md): the cron
-- arithmetic (schedule_cron.sql), the verbs and the view (schedule.sql), and
-- the fourth maintenance part, 'schedules', which sends each due slot
-- exactly once (maintain_schedules.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- the fourth maintenance part
ALTER TABLE maintain_state DROP CONSTRAINT maintain_state_part_check;
ALTER TABLE maintain_state ADD CONSTRAINT maintain_state_part_check CHECK (part IN ('recovery', 'schedules', 'stats', 'retention'));
INSERT INTO maintain_state (part) VALUES ('schedules') ON CONFLICT (part) DO NOTHING;

-- One row per schedule: a small shared table, written one row at a time
-- (a reference table on Citus, like queue: citus.sql, _citus_tables). Its
-- queue's rows go with the queue (queue_drop). The parsed expression
-- (schedule_cron.sql, _cron_parse) is kept beside its text, so a pass
-- computes next slots without parsing. last_slot: every slot up to it is
-- handled (sent, or skipped by the catch-up mode); next_at: the first slot
-- after it (NULL: none within the search bound).
CREATE TABLE schedule (
    name        text PRIMARY KEY,
    queue       text NOT NULL REFERENCES queue (name) ON DELETE CASCADE,
    cron        text NOT NULL,
    time_zone   text NOT NULL,
    catch_up    text NOT NULL CHECK (catch_up IN ('none', 'latest', 'all')),
    payload     jsonb NOT NULL,
    headers     jsonb NOT NULL,
    lane        text,
    minutes     int[],
    hours       int[],
    doms        int[],
    months      int[],
    dows        int[],
    day_or      boolean,
    every_secs  bigint,
    owner_name  name NOT NULL,
    paused      boolean NOT NULL DEFAULT false,
    next_at     timestamptz,
    last_slot   timestamptz NOT NULL,
    last_at     timestamptz,
    last_id     bigint,
    last_error  text,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
-- what the part probes every pass: the due schedules
CREATE INDEX schedule_due ON schedule (next_at) WHERE NOT paused;
-- queue_drop's cascade
CREATE INDEX schedule_queue ON schedule (queue);

-- browse_maintenance_passes gains the part's column (browse_passes.sql):
-- a function's result columns change only by dropping it
DROP FUNCTION browse_maintenance_passes(bigint, int);

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('schedule_missed_after', '5 minutes', 'interval', '5 minutes', '1 second', '1 day', false,
     'a schedule with catch-up none does not send a slot that is older than this when a pass finds it (maintain_schedules.sql)')
ON CONFLICT (name) DO NOTHING;

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
        'maintain_step_schedules', -- the part 'schedules' (maintain_schedules.sql)
        'schedule_create', 'schedule_pause', 'schedule_resume', 'schedule_drop', -- periodic schedules (schedule.sql)
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
        'schedule_next_times', -- a cron expression's next slots (schedule_cron.sql): reads no table
        'schedule_rows']) r -- the schedules view's rows (schedule.sql): no payload, no header
$$;

CREATE OR REPLACE FUNCTION _view_grants(OUT role_kind text, OUT view_name text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'monitor', v FROM pg_catalog.unnest(ARRAY[
        'queue_stats', 'leases', 'retention_policies', 'retention_passes', 'maintenance_passes',
        'maintenance_runs', 'settings', 'schedules']) v
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/history.sql
CREATE OR REPLACE VIEW maintenance_passes AS
SELECT p.id,
       p.owner,
       p.started_at,
       p.finished_at,
       p.finished_at - p.started_at AS duration,
       p.parts ->> 'recovery' AS recovery,
       p.parts ->> 'retention' AS retention,
       coalesce((SELECT jsonb_object_agg(r.part, r.counts) FROM maintain_run r WHERE r.pass_id = p.id), '{}') AS counts,
       p.error,
       p.parts ->> 'stats' AS stats, -- a view's new column goes at its end
       p.parts ->> 'schedules' AS schedules
  FROM maintain_pass p;
-- pgsweep:end functions/history.sql

-- pgsweep:changed functions/maintain.sql
CREATE OR REPLACE FUNCTION _maintain_step(p_run bigint, p_part text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.part <> p_part OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run,
                               CASE p_part
                                   WHEN 'recovery' THEN _maintain_recovery(v_run.owner, v_run.deadline)
                                   WHEN 'stats' THEN _stats_snapshot(NULL)
                                   WHEN 'schedules' THEN _schedule_run(NULL, 100)
                               END,
                               NULL, v_run.deadline, NULL);
END
$$;

CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner pg_catalog.text;
    v_run bigint;
    v_more boolean;
    v_failed boolean;
    v_msg pg_catalog.text;
    v_state pg_catalog.text;
BEGIN
    SELECT b.o_pass, b.o_owner INTO v_pass, v_owner FROM {{ .schema | default "pgsweep" }}.maintain_step_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'recovery');
    COMMIT;
    IF v_run IS NOT NULL THEN
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step_recovery(v_run);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                v_failed := true;
            END;
            IF v_failed THEN
                PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
                v_more := false;
            END IF;
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- schedules: steps of at most 100 due schedules each, committed one by
    -- one, until none is due or the budget is spent (maintain_schedules.sql).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'schedules');
    COMMIT;
    IF v_run IS NOT NULL THEN
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step_schedules(v_run);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                v_failed := true;
            END;
            IF v_failed THEN
                PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
                v_more := false;
            END IF;
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- stats: one step, the queue snapshots (stats.sql), every stats_interval.
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'stats');
    COMMIT;
    IF v_run IS NOT NULL THEN
        v_failed := false;
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}.maintain_step_stats(v_run);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
        END IF;
        COMMIT;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'retention');
    COMMIT;
    IF v_run IS NOT NULL THEN
        CALL {{ .schema | default "pgsweep" }}.maintain_step_retention(v_run);
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}.maintain_step_end(v_pass);
    COMMIT;
END
$$;
-- pgsweep:end functions/maintain.sql

-- pgsweep:changed functions/maintain_part.sql
CREATE OR REPLACE FUNCTION _maintain_parts()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['recovery', 'schedules', 'stats', 'retention'] $$;

CREATE OR REPLACE FUNCTION _maintain_interval(p_part text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_part
           WHEN 'recovery' THEN setting_interval('recovery_interval')
           -- every pass: a slot is sent by the first pass after it (one
           -- index probe when nothing is due: maintain_schedules.sql)
           WHEN 'schedules' THEN interval '0'
           -- at most an hour: one slow run (a lock wait, an I/O stall) must
           -- not silence the snapshots, and the findings read from them,
           -- for ten times as long
           WHEN 'stats' THEN greatest(setting_interval('stats_interval'),
                                      least(coalesce((SELECT (r.finished_at - r.started_at) * 10 FROM maintain_run r
                                                       WHERE r.part = 'stats' AND r.finished_at IS NOT NULL
                                                       ORDER BY r.id DESC LIMIT 1), interval '0'), interval '1 hour'))
           ELSE setting_interval('retention_check_interval') END
$$;
-- pgsweep:end functions/maintain_part.sql

-- pgsweep:changed functions/maintain_schedules.sql
CREATE OR REPLACE FUNCTION _schedule_slot_text(p_slot timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT to_char(p_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') $$;

CREATE OR REPLACE FUNCTION _schedule_run(p_now timestamptz DEFAULT NULL, p_limit int DEFAULT 100)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_missed interval := setting_interval('schedule_missed_after');
    s schedule;
    v_q queue;
    v_slots timestamptz[];
    v_slot timestamptz;
    v_latest timestamptz;
    v_id bigint;
    v_last_id bigint;
    v_rows int := 0; -- schedules moved on
    v_sent int := 0;
    v_fired int := 0;
    v_skipped int := 0;
    v_refused int := 0;
    v_more boolean := false;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    FOR s IN SELECT * FROM schedule x
              WHERE NOT x.paused AND x.next_at <= v_now
              ORDER BY x.last_error IS NOT NULL, x.next_at -- a refused schedule (it stays due) does not hold up the others
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED LOOP
        SELECT * INTO v_q FROM queue q WHERE q.name = s.queue FOR KEY SHARE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND; -- being dropped (or locked by hand): the next step sees
        IF NOT _schedule_owner_may_send(s.queue, s.owner_name) THEN
            v_refused := v_refused + 1;
            UPDATE schedule x
               SET last_error = format('role "%s" lacks send on queue "%s": nothing sent (queue_grant, or re-create the schedule as a role that holds it)',
                                       s.owner_name, s.queue)
             WHERE x.name = s.name;
            CONTINUE;
        END IF;
        IF s.catch_up = 'all' THEN
            v_slots := ARRAY(SELECT t FROM _cron_next(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or,
                                                       s.every_secs, s.time_zone, s.last_slot, 1000, v_now) t);
            v_latest := v_slots[cardinality(v_slots)];
            IF cardinality(v_slots) = 1000 AND _schedule_next(s, v_latest) <= v_now THEN
                v_more := true;
            END IF;
        ELSE
            v_latest := _cron_latest(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or, s.every_secs,
                                     s.time_zone, s.last_slot, v_now);
            v_slots := CASE WHEN v_latest IS NULL THEN '{}'
                            WHEN s.catch_up = 'none' AND v_latest < v_now - v_missed THEN '{}'
                            ELSE ARRAY[v_latest] END;
            IF v_latest IS NOT NULL AND (cardinality(v_slots) = 0 OR v_latest > s.next_at) THEN
                v_skipped := v_skipped + 1;
            END IF;
        END IF;
        v_last_id := s.last_id;
        FOREACH v_slot IN ARRAY v_slots LOOP
            v_id := _send(v_q, s.payload,
                          s.headers || jsonb_build_object('pgsweep-schedule', s.name, 'pgsweep-slot', _schedule_slot_text(v_slot)),
                          'pgsweep-schedule:' || s.name || '@' || _schedule_slot_text(v_slot), NULL, v_now, s.lane);
            IF v_id IS NOT NULL THEN
                v_sent := v_sent + 1;
                v_last_id := v_id;
            END IF;
        END LOOP;
        IF cardinality(v_slots) > 0 THEN
            v_fired := v_fired + 1;
            PERFORM pg_notify(notify_channel(), s.queue);
        END IF;
        v_rows := v_rows + 1;
        v_latest := coalesce(v_latest, s.next_at); -- (no slot found: the next is past the bound; move on)
        UPDATE schedule x
           SET last_slot = v_latest,
               next_at = _schedule_next(s, v_latest),
               last_at = CASE WHEN cardinality(v_slots) > 0 THEN v_now ELSE x.last_at END,
               last_id = v_last_id,
               last_error = NULL
         WHERE x.name = s.name;
    END LOOP;
    RETURN jsonb_build_object('sent', v_sent, 'fired', v_fired, 'skipped', v_skipped, 'refused', v_refused,
                              'more', v_more OR v_rows = p_limit);
END
$$;

CREATE OR REPLACE FUNCTION maintain_step_schedules(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN _maintain_step(p_run, 'schedules');
END
$$;
-- pgsweep:end functions/maintain_schedules.sql

-- pgsweep:changed functions/schedule.sql
CREATE OR REPLACE FUNCTION _schedule_caller()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

CREATE OR REPLACE FUNCTION _schedule_owner_may_send(p_name text, p_role name)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_role = current_user THEN
        RETURN true;
    END IF;
    IF pg_catalog.to_regrole(pg_catalog.quote_ident(p_role)) IS NULL THEN
        RETURN false;
    END IF;
    IF (SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = p_role) THEN
        RETURN true;
    END IF;
    RETURN EXISTS (SELECT 1 FROM queue_right r
                    WHERE r.queue = p_name AND r.privilege = 'send'
                      AND r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee)
                      AND pg_catalog.pg_has_role(p_role, r.grantee, 'MEMBER'));
END
$$;

CREATE OR REPLACE FUNCTION _schedule_manage(p_name text, p_must boolean)
RETURNS schedule
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule;
    v_caller name := _schedule_caller();
BEGIN
    PERFORM _check_text('p_name', p_name, 200);
    SELECT * INTO v FROM schedule s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        IF p_must THEN
            RAISE EXCEPTION 'p_name must name an existing schedule, got %', quote_literal(p_name)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN v;
    END IF;
    IF v_caller = current_user
       OR (pg_catalog.to_regrole(pg_catalog.quote_ident(v.owner_name)) IS NOT NULL
           AND pg_catalog.pg_has_role(v_caller, pg_catalog.to_regrole(pg_catalog.quote_ident(v.owner_name)), 'MEMBER')) THEN
        RETURN v;
    END IF;
    IF NOT _queue_allowed(v.queue, 'manage') THEN
        RAISE EXCEPTION 'permission denied: role "%" may not change schedule "%" (it belongs to "%"; manage on queue "%" would do)',
            v_caller, p_name, v.owner_name, v.queue
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION _schedule_next(s schedule, p_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT t FROM _cron_next(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or, s.every_secs,
                                     s.time_zone, p_after, 1) t);
END
$$;

CREATE OR REPLACE FUNCTION schedule_create(p_name text, p_queue text, p_cron text, p_payload jsonb DEFAULT '{}',
    p_headers jsonb DEFAULT '{}', p_lane text DEFAULT NULL, p_time_zone text DEFAULT 'UTC',
    p_catch_up text DEFAULT 'latest')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_parsed record;
    v_old schedule;
    v_new schedule;
BEGIN
    PERFORM _check_text('p_name', p_name, 200);
    PERFORM _queue_get(p_queue);
    v_parsed := _cron_parse(p_cron);
    PERFORM _check_message(p_payload, p_headers, NULL);
    IF p_headers IS NULL THEN
        RAISE EXCEPTION 'p_headers must be a JSON object, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
    PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
    PERFORM _check_lane('p_lane', p_lane);
    PERFORM _check_schedule_time_zone('p_time_zone', p_time_zone);
    PERFORM _check_text('p_catch_up', p_catch_up, 20); -- (the message below echoes it)
    IF p_catch_up NOT IN ('none', 'latest', 'all') THEN
        RAISE EXCEPTION 'p_catch_up must be one of none, latest, all, got %', quote_literal(p_catch_up)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_require(p_queue, 'send'); -- the schedule sends as its creator
    v_old := _schedule_manage(p_name, false);

    v_new := v_old;
    v_new.name := p_name;
    v_new.queue := p_queue;
    v_new.cron := p_cron;
    v_new.time_zone := p_time_zone;
    v_new.catch_up := p_catch_up;
    v_new.payload := p_payload;
    v_new.headers := p_headers;
    v_new.lane := p_lane;
    v_new.minutes := v_parsed.minutes;
    v_new.hours := v_parsed.hours;
    v_new.doms := v_parsed.doms;
    v_new.months := v_parsed.months;
    v_new.dows := v_parsed.dows;
    v_new.day_or := v_parsed.day_or;
    v_new.every_secs := v_parsed.every_secs;
    v_new.owner_name := _schedule_caller();
    v_new.updated_at := v_now;
    IF v_old.name IS NULL THEN
        v_new.paused := false;
        v_new.created_at := v_now;
        v_new.last_slot := v_now;
        v_new.next_at := _schedule_next(v_new, v_now);
        INSERT INTO schedule SELECT (v_new).*;
    ELSE
        IF v_old.cron IS DISTINCT FROM p_cron OR v_old.time_zone IS DISTINCT FROM p_time_zone THEN
            v_new.last_slot := greatest(v_old.last_slot, v_now);
            v_new.next_at := _schedule_next(v_new, v_new.last_slot);
        END IF;
        v_new.last_error := NULL;
        UPDATE schedule s
           SET queue = v_new.queue, cron = v_new.cron, time_zone = v_new.time_zone, catch_up = v_new.catch_up,
               payload = v_new.payload, headers = v_new.headers, lane = v_new.lane, minutes = v_new.minutes,
               hours = v_new.hours, doms = v_new.doms, months = v_new.months, dows = v_new.dows,
               day_or = v_new.day_or, every_secs = v_new.every_secs, owner_name = v_new.owner_name,
               next_at = v_new.next_at, last_slot = v_new.last_slot, last_error = NULL, updated_at = v_now
         WHERE s.name = p_name;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION schedule_pause(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, true);
BEGIN
    UPDATE schedule s SET paused = true, updated_at = clock_timestamp() WHERE s.name = p_name AND NOT s.paused;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION schedule_resume(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, true);
    v_now timestamptz := clock_timestamp();
BEGIN
    IF NOT v.paused THEN
        RETURN false;
    END IF;
    v.last_slot := greatest(v.last_slot, v_now);
    UPDATE schedule s
       SET paused = false, last_slot = v.last_slot, next_at = _schedule_next(v, v.last_slot), last_error = NULL,
           updated_at = v_now
     WHERE s.name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION schedule_drop(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, false);
BEGIN
    IF v.name IS NULL THEN
        RETURN false;
    END IF;
    DELETE FROM schedule s WHERE s.name = p_name;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION schedule_rows()
RETURNS TABLE (name text, queue text, cron text, time_zone text, next_at timestamptz, last_at timestamptz,
               last_id bigint, paused boolean, catch_up text, lane text, owner text, last_slot timestamptz,
               last_error text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.name, s.queue, s.cron, s.time_zone, s.next_at, s.last_at, s.last_id, s.paused, s.catch_up, s.lane,
           s.owner_name::text, s.last_slot, s.last_error, s.created_at, s.updated_at
      FROM schedule s
$$;

CREATE OR REPLACE VIEW schedules AS
SELECT name, queue, cron, time_zone, next_at, last_at, last_id, paused, catch_up, lane, owner, last_slot,
       last_error, created_at, updated_at
  FROM schedule_rows();
-- pgsweep:end functions/schedule.sql

-- pgsweep:changed functions/browse_passes.sql
CREATE OR REPLACE FUNCTION browse_maintenance_passes(p_before bigint DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS TABLE (id bigint, owner text, started_at timestamptz, finished_at timestamptz, duration interval,
               recovery text, retention text, counts jsonb, error text, stats text, schedules text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_before IS NOT NULL THEN
        PERFORM _check_int('p_before', p_before, 1, 9223372036854775807);
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT v.id, v.owner, v.started_at, v.finished_at, v.duration, v.recovery, v.retention, v.counts, v.error, v.stats,
           v.schedules
      FROM maintenance_passes v
     WHERE v.id < coalesce(p_before, 9223372036854775807)
     ORDER BY v.id DESC
     LIMIT p_limit;
END
$$;
-- pgsweep:end functions/browse_passes.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
