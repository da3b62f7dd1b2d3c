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
        -- Its rights, as rows (queue_rights.sql): only for a new queue, so
        -- an application's queue_create at start-up never undoes a revoke.
        PERFORM _queue_default_grants(p_queue);
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM queue q WHERE q.name = p_queue AND q.max_attempts <> p_max_attempts) THEN
        PERFORM _queue_require(p_queue, 'manage'); -- a change, not just "make sure it exists"
        UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now WHERE name = p_queue;
    END IF;
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
--   max_in_flight       1..100000, or null = no limit: the most messages of
--                       the queue leased at once, across every worker and
--                       replica (flow.sql)
--   rate                'N/s' or 'N/min' (N 1..1000000), or null = none: the
--                       most messages claims take per second or minute, a
--                       token bucket on the database clock (flow.sql)
--   rate_burst          1..1000000, or null = N: the most tokens saved up,
--                       so the most one moment's claims take
--   group_max_in_flight 1..100000, or null = no limit: the most messages of
--                       each group (send's p_group) leased at once
--   group_rate          'N/s' or 'N/min' (N 1..1000000), or null = none: the
--                       most messages of each group claims take per second
--                       or minute (a bucket per group; burst N)
--   group_overrides     {"acme": {"max_in_flight": 10, "rate": "50/s"}}: one
--                       group's own limits, merged into those set before
--                       (a key set to null removes it, a group set to null
--                       its override; null instead of the object: all)
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
    PERFORM _queue_require(p_queue, 'manage');
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan', 'lane_dead', 'max_in_flight',
                         'rate', 'rate_burst', 'group_max_in_flight', 'group_rate', 'group_overrides') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead, max_in_flight, rate, rate_burst, group_max_in_flight, group_rate, group_overrides)', v_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- v_setting names the setting being read, for the error of a value that
    -- does not convert to its type ("soon", 1.5, true, [30]): the message
    -- names the setting and its range like the range checks do, the cast's
    -- own error is the detail. Arrays and objects are refused before any
    -- cast: the interval parser would read '[30]' as 30 seconds.
    BEGIN
        FOR v_setting IN SELECT e.key FROM jsonb_each(p_settings) e
                          WHERE jsonb_typeof(e.value) IN ('array', 'object') AND e.key <> 'group_overrides' LOOP
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
        IF p_settings ? 'max_in_flight' THEN
            v_setting := 'max_in_flight';
            v_q.max_in_flight := (p_settings->>'max_in_flight')::int;
            IF v_q.max_in_flight IS NOT NULL THEN
                PERFORM _check_int('max_in_flight', v_q.max_in_flight, 1, 100000);
            END IF;
        END IF;
        IF p_settings ? 'rate' THEN
            v_setting := 'rate';
            SELECT r.n, r.per INTO v_q.rate, v_q.rate_per FROM _check_rate('rate', p_settings->'rate') r;
        END IF;
        IF p_settings ? 'rate_burst' THEN
            v_setting := 'rate_burst';
            v_q.rate_burst := (p_settings->>'rate_burst')::int;
            IF v_q.rate_burst IS NOT NULL THEN
                PERFORM _check_int('rate_burst', v_q.rate_burst, 1, 1000000);
            END IF;
        END IF;
        IF p_settings ? 'group_max_in_flight' THEN
            v_setting := 'group_max_in_flight';
            v_q.group_max_in_flight := (p_settings->>'group_max_in_flight')::int;
            IF v_q.group_max_in_flight IS NOT NULL THEN
                PERFORM _check_int('group_max_in_flight', v_q.group_max_in_flight, 1, 100000);
            END IF;
        END IF;
        IF p_settings ? 'group_rate' THEN
            v_setting := 'group_rate';
            SELECT r.n, r.per INTO v_q.group_rate, v_q.group_rate_per FROM _check_rate('group_rate', p_settings->'group_rate') r;
        END IF;
        IF p_settings ? 'group_overrides' THEN
            v_setting := 'group_overrides';
            v_q.group_overrides := _check_group_overrides(v_q.group_overrides, p_settings->'group_overrides');
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
                    WHEN 'max_in_flight' THEN 'an integer between 1 and 100000, or null (no limit)'
                    WHEN 'rate_burst' THEN 'an integer between 1 and 1000000, or null (the rate''s N)'
                    WHEN 'rate' THEN '''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate)'
                    WHEN 'group_max_in_flight' THEN 'an integer between 1 and 100000, or null (no limit)'
                    WHEN 'group_rate' THEN '''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate)'
                    WHEN 'group_overrides' THEN 'an object of groups, each {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} or null (no override)'
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
           max_in_flight = v_q.max_in_flight,
           rate = v_q.rate,
           rate_per = v_q.rate_per,
           rate_burst = v_q.rate_burst,
           group_max_in_flight = v_q.group_max_in_flight,
           group_rate = v_q.group_rate,
           group_rate_per = v_q.group_rate_per,
           group_overrides = v_q.group_overrides,
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    IF p_settings ?| ARRAY['max_in_flight', 'rate', 'rate_burst', 'group_max_in_flight', 'group_rate', 'group_overrides'] THEN
        PERFORM _flow_set(v_q, p_settings ?| ARRAY['max_in_flight', 'group_max_in_flight', 'group_overrides'], clock_timestamp());
    END IF;
    RETURN v_q;
END
$$;

-- _notify_channel is the LISTEN/NOTIFY channel of this schema's queues:
-- '<schema>_messages', the schema cut to 54 bytes so the channel stays within
-- PostgreSQL's 63-byte limit. The payload of each notification is the queue name.
CREATE OR REPLACE FUNCTION notify_channel()
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN left(current_schema(), 54) || '_messages'; -- PL/pgSQL: planned once, not at every settle (flow.sql)
END
$$;
