-- pgsweep 0.7: queue_stats counts one queue per statement, and queue settings
-- are written with plain values (the "built to scale out" rules of the design).
--
-- Before this version the queue_stats view was one statement over every
-- queue, with clock_timestamp() applied in the filter of the oldest due row.
-- Now a function of one queue (_queue_stats) runs one statement per message
-- table with the clock read once into a variable, and the view calls it for
-- each queue row. The view's columns and their types are unchanged.
-- queue_create and queue_configure compute updated_at before their UPDATE
-- instead of calling now() in its SET.
--
-- Error messages (every argument error now has a pgTAP test: queue_errors.sql):
--  * queue_configure: a value that does not convert to its setting's type
--    names the setting and its range (it gave only the cast's error), and a
--    JSON array or object is refused for every setting (the interval parser
--    read {"lease_default": [30]} as 30 seconds);
--  * send_batch with p_payloads NULL says NULL, not 0;
--  * intervals in months or years are named in those units (validate.sql):
--    '100 years' read '36525 days', which is not the bound that is checked
--    (interval comparison counts a year as 360 days).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

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
-- pgsweep:end functions/validate.sql
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
CREATE OR REPLACE FUNCTION queue_create(p_queue text, p_kind text DEFAULT 'outbox', p_max_attempts int DEFAULT 10)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    IF p_kind IS NULL OR p_kind NOT IN ('outbox', 'inbox') THEN
        RAISE EXCEPTION 'p_kind must be outbox or inbox, got %', coalesce(p_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
                         'processed_retention', 'dead_retention', 'claim_rescan') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan)', v_key
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
-- pgsweep:include functions/queue_stats.sql
-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row: pending or failed and visible now; NULL when none
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, _queue_stats, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its three statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests); NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION _queue_stats(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now)
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age
  FROM queue q
 CROSS JOIN LATERAL _queue_stats(q.name) s;
-- pgsweep:end functions/queue_stats.sql
-- pgsweep:include functions/send.sql
-- Sending: one message or a batch. Sends run inside the caller's transaction
-- (that is the point of an outbox): the rows and the notification appear when
-- it commits, not before.
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
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key)
$$;

-- _send inserts one message into a queue already looked up and checked.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
BEGIN
    IF p_q.kind = 'inbox' AND p_key IS NOT NULL THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, p_now, v_parked)
        ON CONFLICT (queue, key) WHERE dedup DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            RETURN NULL;
        END IF;
        IF _inbox_key_kept(p_q.name, p_key) THEN
            DELETE FROM message WHERE queue = p_q.name AND id = v_id;
            RETURN NULL;
        END IF;
    ELSE
        INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, p_now, v_parked)
        RETURNING id INTO v_id;
    END IF;
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message; NULL or past = now.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
BEGIN
    PERFORM _check_message(p_payload, p_headers, p_key);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp());
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys and p_deliver_at are NULL or arrays of
-- the same length as p_payloads. One notification per batch.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL)
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
    i int;
BEGIN
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
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
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
    END LOOP;
    v_now := clock_timestamp();

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send.
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now);
            v_any := v_any OR v_ids[i] IS NOT NULL;
        END LOOP;
    ELSE
        -- Ids are drawn first so that they can be returned in input order
        -- (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until)
        SELECT v_q.name, v_ids[g], p_keys[g], p_payloads[g], coalesce(p_headers[g], '{}'),
               coalesce(p_deliver_at[g], v_now), v_now, CASE WHEN p_deliver_at[g] > v_now THEN p_deliver_at[g] END
          FROM generate_series(1, v_n) g;
        v_any := true;
    END IF;
    IF v_any THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/send.sql
