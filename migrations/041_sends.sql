-- pgsweep 0.41: sends (issue 25): unique sends, priorities, periodic
-- schedules, and two defects of sends.
--
-- message gains unique_key (held while the message is live: a unique index
-- on (queue, unique_key), partial, so a message without one adds no entry)
-- and priority (smallint, default 0: adding it rewrites nothing). The claim
-- index message_claim is rebuilt with priority = 0 in its predicate (every
-- existing row has priority 0: it holds the same entries), and
-- message_claim_priority holds the others, with a cursor of its own in
-- claim_cursor (claim.sql). message_unique holds
-- the unique windows (p_unique_for), keyed by queue like every message table
-- (citus_distribute distributes it with them). DDL on message through
-- EXECUTE, as 023 and 040 do: on a distributed install Citus forwards a DDL
-- statement's query string.
--
-- send and send_batch gain trailing parameters: the old signatures go (an
-- overload beside them would make every existing call ambiguous), the new
-- ones and send_unique / send_batch_unique are created below; _grant_all
-- grants them. Sends lock their queue row FOR KEY SHARE and queue_drop
-- deletes messages before lanes (a late send could leave a message without
-- its queue); every statement that locks several lane rows does it in byte
-- order (COLLATE "C").
--
-- Schedules send a fixed message to a queue at every slot of a cron
-- expression in a time zone (docs/schedules.md): the cron arithmetic
-- (schedule_cron.sql), the verbs and the view (schedule.sql), and the fourth
-- maintenance part, 'schedules', which sends each due slot exactly once
-- (maintain_schedules.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DO $$
BEGIN
    EXECUTE 'ALTER TABLE message ADD COLUMN unique_key text, ADD COLUMN priority smallint NOT NULL DEFAULT 0';
END
$$;
DO $$
BEGIN
    EXECUTE 'CREATE UNIQUE INDEX message_unique_key ON message (queue, unique_key) WHERE unique_key IS NOT NULL';
END
$$;
DO $$
BEGIN
    EXECUTE 'DROP INDEX message_claim';
END
$$;
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_claim ON message (queue, created_at, id) WHERE parked_until IS NULL AND priority = 0';
END
$$;
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_claim_priority ON message (queue, priority DESC, created_at, id) '
            'WHERE parked_until IS NULL AND priority <> 0';
END
$$;

-- A dead letter keeps its message's priority, which dead_requeue gives
-- back (dead.sql); not its unique key (a dead letter is not live, and a new
-- message may hold the key by then).
DO $$
BEGIN
    EXECUTE 'ALTER TABLE message_dead ADD COLUMN priority smallint NOT NULL DEFAULT 0';
END
$$;

-- The priority positions (claim.sql): for each priority level a claim took
-- rows of, where claims start scanning it in message_claim_priority, highest
-- level first; and the last rescan of that index. NULL until a claim takes a
-- row of another priority than the default.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE claim_cursor ADD COLUMN priority_levels smallint[], ADD COLUMN priority_ats timestamptz[], '
            'ADD COLUMN priority_ids bigint[], ADD COLUMN priority_rescanned_at timestamptz';
END
$$;

-- One row per unique key sent with a window: the message that took it,
-- when, and until when it holds the key (send.sql).
CREATE TABLE message_unique (
    queue      text NOT NULL,
    unique_key text NOT NULL,
    id         bigint NOT NULL,
    sent_at    timestamptz NOT NULL,
    until      timestamptz NOT NULL,
    PRIMARY KEY (queue, unique_key)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);
COMMENT ON TABLE message_unique IS 'pgsweep unique-send windows: a key held until "until" (send.sql)';
-- recovery sweeps the expired windows of a queue (recover.sql)
CREATE INDEX message_unique_until ON message_unique (queue, until);

DROP FUNCTION send(text, jsonb, jsonb, text, timestamptz, text);
DROP FUNCTION send_batch(text, jsonb[], jsonb[], text[], timestamptz[], text[]);
DROP FUNCTION _send(queue, jsonb, jsonb, text, timestamptz, timestamptz, text);

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
-- In one DO block, each statement through EXECUTE: on a distributed install
-- the foreign key to queue (a reference table) makes Citus manage the new
-- table at once, and it refuses to propagate DDL from a multi-statement
-- string (as 023 and 040 say).
DO $$
BEGIN
    EXECUTE $ddl$
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
)
    $ddl$;
    -- what the part probes every pass: the due schedules
    EXECUTE 'CREATE INDEX schedule_due ON schedule (next_at) WHERE NOT paused';
    -- queue_drop's cascade
    EXECUTE 'CREATE INDEX schedule_queue ON schedule (queue)';
END
$$;

-- the caller's role has one function now (queue_rights.sql, _caller_role)
DROP FUNCTION _retention_detach_caller();

-- browse_maintenance_passes gains the part's column (browse_passes.sql):
-- a function's result columns change only by dropping it
DROP FUNCTION browse_maintenance_passes(bigint, int);

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('schedule_missed_after', '5 minutes', 'interval', '5 minutes', '1 second', '1 day', false,
     'a schedule with catch-up none does not send a slot that is older than this when a pass finds it (maintain_schedules.sql)')
ON CONFLICT (name) DO NOTHING;

-- pgsweep:changed functions/send.sql
CREATE OR REPLACE FUNCTION _check_priority(p_arg text, p_priority smallint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_priority IS NULL OR p_priority < -100 OR p_priority > 100 THEN
        PERFORM _check_int(p_arg, p_priority, -100, 100);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _check_unique(p_arg_key text, p_unique_key text, p_arg_for text, p_unique_for interval,
                                         p_inbox_key boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_unique_key IS NOT NULL THEN
        PERFORM _check_text(p_arg_key, p_unique_key, 1000);
        IF p_inbox_key THEN
            RAISE EXCEPTION '% must be NULL for an inbox message with a key (p_key already de-duplicates), got "%"',
                p_arg_key, p_unique_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF p_unique_for IS NOT NULL THEN
        IF p_unique_key IS NULL THEN
            RAISE EXCEPTION '% needs a unique key (%), got % without one', p_arg_for, p_arg_key, p_unique_for
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        PERFORM _check_interval(p_arg_for, p_unique_for, interval '1 second', interval '365 days');
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _queue_for_send(p_queue text)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
BEGIN
    SELECT * INTO v_q FROM queue q WHERE q.name = p_queue FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    RETURN v_q;
END
$$;

CREATE OR REPLACE FUNCTION _unique_window(p_queue text, p_key text, p_id bigint, p_unique_for interval,
                                          p_now timestamptz, p_snapshot boolean)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until timestamptz := p_now + coalesce(p_unique_for, interval '0');
    v_new boolean;
    v_id bigint;
    v_at timestamptz;
BEGIN
    IF p_unique_for IS NULL AND NOT p_snapshot THEN
        SELECT w.id INTO v_id FROM message_unique w
         WHERE w.queue = p_queue AND w.unique_key = p_key AND w.until > p_now;
        RETURN v_id;
    END IF;
    LOOP
        INSERT INTO message_unique AS w (queue, unique_key, id, sent_at, until)
        VALUES (p_queue, p_key, p_id, p_now, v_until)
        ON CONFLICT (queue, unique_key) DO NOTHING
        RETURNING true INTO v_new;
        IF v_new THEN
            IF p_unique_for IS NULL THEN -- only a probe (REPEATABLE READ)
                DELETE FROM message_unique w WHERE w.queue = p_queue AND w.unique_key = p_key;
            END IF;
            RETURN NULL;
        END IF;
        SELECT w.id, w.until INTO v_id, v_at FROM message_unique w
         WHERE w.queue = p_queue AND w.unique_key = p_key
           FOR UPDATE;
        IF FOUND THEN
            IF v_at > p_now THEN
                RETURN v_id;
            END IF;
            IF p_unique_for IS NOT NULL THEN
                UPDATE message_unique w SET id = p_id, sent_at = p_now, until = v_until
                 WHERE w.queue = p_queue AND w.unique_key = p_key;
            END IF;
            RETURN NULL;
        END IF;
        -- removed meanwhile (an expired window swept by recovery): again
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text, p_unique_key text, p_unique_for interval,
                                 p_priority smallint, OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_dup bigint;
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
    duplicate := false;
    IF v_inbox THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            duplicate := true;
            RETURN;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            duplicate := true;
            RETURN; -- 1b
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
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane, priority)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority)
            ON CONFLICT (queue, key) WHERE dedup DO NOTHING
            RETURNING message.id INTO v_id;
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
                DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                v_id := NULL;
                EXIT ins;
            END IF;
            IF _inbox_key_kept(p_q.name, p_key) THEN
                DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                v_id := NULL;
            END IF;
        ELSIF p_unique_key IS NULL THEN
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority)
            RETURNING message.id INTO v_id;
        ELSE
            -- unique send, step 1 (header)
            LOOP
                INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority,
                                     unique_key)
                VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority,
                        p_unique_key)
                ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
                RETURNING message.id INTO v_id;
                EXIT WHEN v_id IS NOT NULL;
                SELECT m.id INTO v_dup FROM message m WHERE m.queue = p_q.name AND m.unique_key = p_unique_key;
                EXIT WHEN v_dup IS NOT NULL;
            END LOOP;
            IF v_id IS NOT NULL THEN
                -- step 2: the window
                v_dup := _unique_window(p_q.name, p_unique_key, v_id, p_unique_for, p_now,
                                        current_setting('transaction_isolation') IN ('repeatable read', 'serializable'));
                IF v_dup IS NOT NULL THEN
                    DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                    v_id := NULL;
                END IF;
            END IF;
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
    IF v_id IS NULL THEN
        id := v_dup;
        duplicate := true;
    ELSE
        id := v_id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _send_one(p_queue text, p_payload jsonb, p_headers jsonb, p_key text,
                                     p_deliver_at timestamptz, p_lane text, p_unique_key text,
                                     p_unique_for interval, p_priority smallint,
                                     OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_for_send(p_queue);
    v_r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'send') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'send');
    END IF;
    PERFORM _check_message(p_payload, p_headers, p_key);
    -- (_check_size passes any size up to 100 without a read: validate.sql)
    IF pg_column_size(p_payload) > 100 OR pg_column_size(p_headers) > 100 OR octet_length(p_key) > 100 THEN
        PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
        PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
        PERFORM _check_size('p_key', octet_length(p_key), 'max_key_bytes');
    END IF;
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    PERFORM _check_lane('p_lane', p_lane);
    IF p_priority IS DISTINCT FROM 0 THEN
        PERFORM _check_priority('p_priority', p_priority);
    END IF;
    IF p_unique_key IS NOT NULL OR p_unique_for IS NOT NULL THEN
        PERFORM _check_unique('p_unique_key', p_unique_key, 'p_unique_for', p_unique_for,
                              v_q.kind = 'inbox' AND p_key IS NOT NULL);
    END IF;
    v_r := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane,
                 p_unique_key, p_unique_for, p_priority);
    id := v_r.id;
    duplicate := v_r.duplicate;
    IF NOT duplicate THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL,
                                p_unique_key text DEFAULT NULL, p_unique_for interval DEFAULT NULL,
                                p_priority smallint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_r record;
BEGIN
    v_r := _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key, p_unique_for, p_priority);
    RETURN v_r.id;
END
$$;

CREATE OR REPLACE FUNCTION send_unique(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}',
                                       p_key text DEFAULT NULL, p_deliver_at timestamptz DEFAULT NULL,
                                       p_lane text DEFAULT NULL, p_unique_key text DEFAULT NULL,
                                       p_unique_for interval DEFAULT NULL, p_priority smallint DEFAULT 0)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT s.id, s.duplicate
                   FROM _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key,
                                  p_unique_for, p_priority) s;
END
$$;

CREATE OR REPLACE FUNCTION _check_elements(p_arg text, p_got int, p_want int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_got <> p_want THEN
        RAISE EXCEPTION '% must be NULL or have % elements like p_payloads, got %', p_arg, p_want, p_got
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[], p_keys text[],
                                       p_deliver_at timestamptz[], p_lanes text[], p_unique_keys text[],
                                       p_unique_for interval[], p_priorities smallint[])
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_q queue := _queue_for_send(p_queue);
    v_r record;
    v_dups boolean[];
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
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'send') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'send');
    END IF;
    -- (_check_size passes any size up to 100 without a read: validate.sql)
    IF p_payloads IS NULL OR v_n < 1 OR v_n > 100 THEN
        PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
        PERFORM _check_size('p_payloads', cardinality(p_payloads), 'max_batch');
    END IF;
    IF (SELECT max(greatest(pg_column_size(u.p), pg_column_size(u.h), octet_length(u.k)))
          FROM unnest(p_payloads, p_headers, p_keys) u(p, h, k)) > 100 THEN
        PERFORM _check_size('p_payloads', (SELECT max(pg_column_size(x)) FROM unnest(p_payloads) x), 'max_payload_bytes'); -- its largest element
        PERFORM _check_size('p_headers', (SELECT max(pg_column_size(x)) FROM unnest(p_headers) x), 'max_headers_bytes');
        PERFORM _check_size('p_keys', (SELECT max(octet_length(x)) FROM unnest(p_keys) x), 'max_key_bytes');
    END IF;
    PERFORM _check_elements('p_headers', cardinality(p_headers), v_n);
    PERFORM _check_elements('p_keys', cardinality(p_keys), v_n);
    PERFORM _check_elements('p_deliver_at', cardinality(p_deliver_at), v_n);
    PERFORM _check_elements('p_lanes', cardinality(p_lanes), v_n);
    PERFORM _check_elements('p_unique_keys', cardinality(p_unique_keys), v_n);
    PERFORM _check_elements('p_unique_for', cardinality(p_unique_for), v_n);
    PERFORM _check_elements('p_priorities', cardinality(p_priorities), v_n);
    IF p_priorities IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_priorities) x WHERE x IS NULL OR x < -100 OR x > 100) THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_priority(format('p_priorities[%s]', i), p_priorities[i]);
        END LOOP;
    END IF;
    IF p_unique_keys IS NOT NULL OR p_unique_for IS NOT NULL THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_unique(format('p_unique_keys[%s]', i), p_unique_keys[i], format('p_unique_for[%s]', i),
                                  p_unique_for[i], v_q.kind = 'inbox' AND p_keys[i] IS NOT NULL);
        END LOOP;
    END IF;
    -- The elements: one plain statement finds whether any could be bad (a
    -- conservative pre-filter: NULL payload, headers not an object, a key or
    -- lane that is not ASCII letters, digits and _.:/@- within its length, a
    -- deliver_at not plainly within range); only then the _check_* calls,
    -- element by element, name the first bad one.
    IF EXISTS (SELECT 1 FROM unnest(p_payloads, p_headers, p_keys, p_deliver_at, p_lanes) u(p, h, k, d, l)
                WHERE u.p IS NULL OR jsonb_typeof(u.h) <> 'object'
                   OR length(u.k) > 1000 OR u.k !~ '^[A-Za-z0-9_.:/@-]+$'
                   OR NOT (isfinite(u.d) AND u.d <= clock_timestamp() + interval '10 years')
                   OR length(u.l) > 200 OR u.l !~ '^[A-Za-z0-9_.:/@-]+$') THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
            PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
            PERFORM _check_lane(format('p_lanes[%s]', i), p_lanes[i]);
        END LOOP;
    END IF;
    v_now := clock_timestamp();

    -- The lanes, each locked once, in name order; busy: it has a head (or is
    -- blocked), so every message of the batch waits; otherwise the batch's
    -- first message of the lane (first: its index) becomes its head.
    -- (unnest, not subscripts, in the statements below: a subscript of a
    -- text or jsonb array walks the array from its start, once per row.)
    FOR v_lane IN SELECT u.lane, min(u.k) AS first FROM unnest(p_lanes) WITH ORDINALITY u(lane, k)
                   WHERE u.lane IS NOT NULL GROUP BY u.lane ORDER BY u.lane COLLATE "C" LOOP
        v_l := _lane_lock(v_q.name, v_lane.lane, v_now);
        v_names := v_names || v_lane.lane;
        v_firsts := v_firsts || v_lane.first;
        v_busies := v_busies || (NOT v_l.created AND _lane_busy(v_q.name, v_lane.lane, v_l.blocked_id, v_now));
        v_lasts := v_lasts || v_l.last_at;
        v_news := v_news || v_l.created;
    END LOOP;

    IF (v_q.kind = 'inbox' AND p_keys IS NOT NULL) OR p_unique_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send (which finds
        -- the lanes locked already).
        FOR i IN 1 .. v_n LOOP
            v_r := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now, p_lanes[i],
                         p_unique_keys[i], p_unique_for[i], coalesce(p_priorities[i], 0::smallint));
            v_ids[i] := v_r.id;
            v_dups[i] := v_r.duplicate;
            v_any := v_any OR NOT v_r.duplicate;
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
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane, priority)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane, coalesce(u.priority, 0)
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes, p_priorities)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, priority, k)
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
    RETURN QUERY SELECT u.id, coalesce(u.dup, false) FROM unnest(v_ids, v_dups) u(id, dup);
END
$$;

CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                      p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                              p_unique_keys, p_unique_for, p_priorities) b;
END
$$;

CREATE OR REPLACE FUNCTION send_batch_unique(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                             p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                             p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                             p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id, b.duplicate
                   FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                    p_unique_keys, p_unique_for, p_priorities) b;
END
$$;
-- pgsweep:end functions/send.sql

-- pgsweep:changed functions/claim.sql
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
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
    v_held boolean;
    v_read_at timestamptz;
    v_read_id bigint;
    v_lv smallint[];
    v_la timestamptz[];
    v_li bigint[];
    v_prescanned timestamptz;
    v_prescan boolean;
    v_due smallint[];
    v_kinds int[] := '{}';
    v_los int[] := '{}';
    v_his int[] := '{}';
    v_pos int[] := '{}';
    v_seg int;
    v_kind int;
    v_lo int;
    v_hi int;
    v_prev int;
    v_l int;
    v_fa timestamptz;
    v_fi bigint;
    v_lvls smallint[];
    v_ats timestamptz[];
    v_tp smallint[] := '{}';
    v_ta timestamptz[] := '{}';
    v_ti bigint[] := '{}';
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error. The
    -- expression is a conservative pre-filter, the rules stay in validate.sql:
    -- an owner of ASCII letters, digits and _.:/@- (no control, invisible or
    -- white space characters) of at most 200 characters passes the name rule
    -- (_check_text); a lease of time only (no days, months or years: no
    -- mixed signs) within the bounds passes _check_interval. Anything else
    -- goes to the _check_* calls, in the order the arguments come.
    IF p_owner IS NULL OR length(p_owner) > 200 OR p_owner !~ '^[A-Za-z0-9_.:/@-]+$'
       OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour'
       OR extract(day FROM p_lease) <> 0 OR extract(month FROM p_lease) <> 0 OR extract(year FROM p_lease) <> 0 THEN
        PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql): control characters, spaces
        IF p_lease IS NOT NULL THEN
            PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
        END IF;
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
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
    -- The rights ride along with the cursor (queue_rights.sql): a plain
    -- grant is the common case, read by this statement (both tables are
    -- placed by queue on Citus: one shard group); anything else, or no
    -- cursor row, asks _queue_require, the rule.
    SELECT c.created_at, c.id, c.rescanned_at,
           c.priority_levels, c.priority_ats, c.priority_ids, c.priority_rescanned_at,
           EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume')
      INTO v_cursor_at, v_cursor_id, v_rescanned, v_lv, v_la, v_li, v_prescanned, v_held
      FROM claim_cursor c WHERE c.queue = p_queue;
    IF v_held IS NOT TRUE THEN
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
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
    -- The segments of the claim indexes, in the order claims take them (see
    -- the header): kind 1 the levels lo..hi of message_claim_priority from
    -- their head, 2 one level from its position (v_pos: its place in the
    -- arrays), 0 the default priority (message_claim: the passes below).
    -- Positions are trusted within claim_rescan after the last rescan of the
    -- priority index, and then only the levels with a due row at or after
    -- their position are scanned (v_due: one probe, an index descent per
    -- level); the levels without a position, in the gaps, from their head.
    v_prescan := v_lv IS NULL OR v_prescanned IS NULL OR v_now < v_prescanned OR v_now >= v_prescanned + v_rescan_every;
    IF v_prescan THEN
        v_kinds := '{1,0,1}';
        v_los := '{1,0,-32768}';
        v_his := '{32767,0,-1}';
        v_pos := '{0,0,0}';
    ELSE
        SELECT array_agg(l.lvl) INTO v_due
          FROM unnest(v_lv, v_la, v_li) l(lvl, at, id)
         WHERE EXISTS (SELECT 1 FROM message s
                        WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0 AND s.priority = l.lvl
                          AND (s.created_at, s.id) >= (l.at, l.id) AND s.visible_at <= v_now AND s.attempt < v_max);
        v_prev := 32767;
        FOR j IN 1 .. cardinality(v_lv) + 1 LOOP -- v_lv is sorted highest first
            v_l := CASE WHEN j <= cardinality(v_lv) THEN v_lv[j] ELSE -32769 END;
            IF v_l < 0 AND v_prev >= 0 THEN -- the default priority lies between the positive and the negative levels
                IF v_prev >= 1 THEN
                    v_kinds := v_kinds || 1; v_los := v_los || 1; v_his := v_his || v_prev; v_pos := v_pos || 0;
                END IF;
                v_kinds := v_kinds || 0; v_los := v_los || 0; v_his := v_his || 0; v_pos := v_pos || 0;
                v_prev := -1;
            END IF;
            IF v_l + 1 <= v_prev THEN
                v_kinds := v_kinds || 1; v_los := v_los || (v_l + 1); v_his := v_his || v_prev; v_pos := v_pos || 0;
            END IF;
            IF v_l = ANY (v_due) THEN
                v_kinds := v_kinds || 2; v_los := v_los || v_l; v_his := v_his || v_l; v_pos := v_pos || j;
            END IF;
            v_prev := v_l - 1;
        END LOOP;
    END IF;
    v_seg := 0;
    LOOP
        EXIT WHEN v_n = p_batch;
        v_seg := v_seg + 1;
        IF v_seg > cardinality(v_kinds) THEN
            -- A claim short of its batch takes the rows behind the positions
            -- last (kind 3: every level from its head, but the rows taken),
            -- and counts as a rescan, as the default passes do.
            EXIT WHEN v_prescan;
            v_kinds := v_kinds || 3; v_los := v_los || -32768; v_his := v_his || 32767; v_pos := v_pos || 0;
            v_prescan := true;
        END IF;
        v_kind := v_kinds[v_seg];
        v_lo := v_los[v_seg];
        v_hi := v_his[v_seg];
        CONTINUE WHEN v_lo > v_hi;
        IF v_kind = 0 THEN
            -- The default priority: pass 1 from the cursor on, pass 2 before it.
            FOR pass IN 1 .. 2 LOOP
                EXIT WHEN v_n = p_batch;
                SELECT array_agg(c.ctid), array_agg(c.id),
                       (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
                       (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
                  INTO v_tids, v_ids, v_at, v_id
                  FROM (SELECT s.ctid, s.created_at, s.id
                          FROM message s
                         WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority = 0
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
            CONTINUE;
        END IF;
        IF v_kind = 2 THEN
            v_fa := v_la[v_pos[v_seg]];
            v_fi := v_li[v_pos[v_seg]];
        ELSE
            v_fa := '-infinity';
            v_fi := -9223372036854775808;
        END IF;
        SELECT array_agg(c.ctid), array_agg(c.id), array_agg(c.priority), array_agg(c.created_at)
          INTO v_tids, v_ids, v_lvls, v_ats
          FROM (SELECT s.ctid, s.id, s.priority, s.created_at
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0
                   AND s.priority >= v_lo AND s.priority <= v_hi
                   AND (s.created_at, s.id) >= (v_fa, v_fi)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                   AND (v_kind <> 3 OR NOT s.id = ANY (v_all_ids))
                 ORDER BY s.priority DESC, s.created_at, s.id
                 LIMIT p_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
            v_tp := v_tp || v_lvls;
            v_ta := v_ta || v_ats;
            v_ti := v_ti || v_ids;
        END IF;
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    IF v_last_at IS NULL THEN
        NULL; -- no row of the default priority: the cursor stays
    ELSIF v_rescanned IS NULL THEN
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

    -- The positions move forward to the last row taken at each level, as the
    -- default cursor does (and not when one went back since this claim read
    -- it: _lane_next); a level first taken from its head gains one; a rescan
    -- sets each level it took rows of wherever its rows lead and records
    -- itself. A queue whose claims never took a row of another priority has
    -- none, and pays no update here.
    IF (cardinality(v_tp) > 0 OR (v_prescan AND v_lv IS NOT NULL)) AND v_rescan_every > interval '0' THEN
        UPDATE claim_cursor c
           SET (priority_levels, priority_ats, priority_ids) =
               (SELECT array_agg(x.lvl ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_at ELSE x.s_at END ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_id ELSE x.s_id END ORDER BY x.lvl DESC)
                  FROM (SELECT coalesce(st.lvl, m.lvl) AS lvl, st.at AS s_at, st.id AS s_id, m.at AS m_at, m.id AS m_id,
                               m.lvl IS NOT NULL AND (st.lvl IS NULL OR v_prescan
                                   OR ((st.at, st.id) < (m.at, m.id)
                                       AND NOT EXISTS (SELECT 1 FROM unnest(v_lv, v_la, v_li) r(lvl, at, id)
                                                        WHERE r.lvl = st.lvl AND (st.at, st.id) < (r.at, r.id)))) AS take
                          FROM unnest(c.priority_levels, c.priority_ats, c.priority_ids) st(lvl, at, id)
                          FULL JOIN (SELECT DISTINCT ON (t.lvl) t.lvl, t.at, t.id
                                       FROM unnest(v_tp, v_ta, v_ti) t(lvl, at, id)
                                      ORDER BY t.lvl, t.at DESC, t.id DESC) m ON m.lvl = st.lvl) x),
               priority_rescanned_at = CASE WHEN v_prescan THEN v_now ELSE c.priority_rescanned_at END
         WHERE c.queue = p_queue
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane, m.priority
    )
    SELECT c.id, c.key, c.payload, c.headers, c.attempt, c.created_at, c.visible_at, c.token, c.lane
      FROM claimed c ORDER BY c.priority DESC, c.created_at, c.id;
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:changed functions/claim_ids.sql
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
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    -- (the cursor walks the rows of the default priority only: claim.sql)
    SELECT array_agg(c.ctid), array_agg(c.id),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0))[1]
      INTO v_tids, v_ids, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id, s.priority
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
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_dead) u;
END
$$;
-- pgsweep:end functions/claim_ids.sql

-- pgsweep:changed functions/dead.sql
CREATE OR REPLACE FUNCTION dead_requeue(p_queue text, p_ids bigint[], p_deliver_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_visible timestamptz;
    v_ids bigint[];
    v_lanes text[];
    v_lane text;
    v_l record;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    v_now := clock_timestamp();
    v_visible := coalesce(p_deliver_at, v_now);

    WITH d AS (
        DELETE FROM message_dead x
         WHERE x.queue = p_queue AND x.id = ANY (p_ids)
           AND NOT (v_q.kind = 'inbox' AND x.key IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM message l WHERE l.queue = p_queue AND l.key = x.key AND l.dedup)
                 OR EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = x.key)))
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane, x.priority
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane, priority)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane,
               d.priority
          FROM d
        RETURNING m.id, m.lane
    )
    SELECT array_agg(i.id), array_agg(DISTINCT i.lane) FILTER (WHERE i.lane IS NOT NULL) INTO v_ids, v_lanes FROM i;

    -- Each lane, locked in name order (lane.sql), after the letters are in:
    -- a lane that emptied meanwhile is created again by _lane_lock.
    FOR v_lane IN SELECT u FROM unnest(v_lanes) u ORDER BY u COLLATE "C" LOOP
        v_l := _lane_lock(p_queue, v_lane, v_now);
        IF v_l.blocked_id = ANY (v_ids) THEN
            -- the letter that stopped the lane: its head again
            UPDATE message m SET parked_until = CASE WHEN v_visible > v_now THEN v_visible END
             WHERE m.queue = p_queue AND m.id = v_l.blocked_id;
            UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        ELSIF v_l.created THEN
            -- a lane that had no message: its oldest requeued letter leads
            PERFORM _lane_next(p_queue, ARRAY[v_lane], v_now, false);
        ELSE
            PERFORM _lane_busy(p_queue, v_lane, v_l.blocked_id, v_now); -- a head, or the lane is blocked
        END IF;
    END LOOP;

    IF v_ids IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

CREATE OR REPLACE FUNCTION dead_delete(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
    v_lane text;
    v_moved bigint := 0;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _queue_manage(p_queue);
    WITH d AS (
        DELETE FROM message_dead x WHERE x.queue = p_queue AND x.id = ANY (p_ids) RETURNING x.id
    )
    SELECT array_agg(d.id ORDER BY d.id) INTO v_ids FROM d;
    -- the lanes they stopped, locked in name order (lane.sql)
    FOR v_lane IN SELECT l.name FROM lane l WHERE l.queue = p_queue AND l.blocked_id = ANY (v_ids) ORDER BY l.name COLLATE "C" FOR UPDATE LOOP
        UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        v_moved := v_moved + _lane_next(p_queue, ARRAY[v_lane], clock_timestamp(), true);
    END LOOP;
    IF v_moved > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/dead.sql

-- pgsweep:changed functions/lane.sql
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
    v_p_lvls smallint[];
    v_p_ats timestamptz[];
    v_p_ids bigint[];
BEGIN
    SELECT array_agg(x.id), array_agg(x.ctid), array_agg(u.name),
           array_agg(x.id) FILTER (WHERE x.visible_at > p_now), array_agg(x.visible_at) FILTER (WHERE x.visible_at > p_now),
           (array_agg(x.created_at ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0))[1],
           (array_agg(x.id ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0))[1],
           array_agg(x.priority) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0),
           array_agg(x.created_at) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0),
           array_agg(x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0)
      INTO v_ids, v_tids, v_promoted, v_later, v_at, v_low_at, v_low_id, v_p_lvls, v_p_ats, v_p_ids
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.ctid, m.id, m.visible_at, m.created_at, m.priority FROM message m
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
        IF v_p_lvls IS NOT NULL THEN
            -- The same for the priority positions (claim.sql): a level's
            -- position goes back to the oldest new head of that level behind
            -- it (a level without a position is scanned from its head).
            UPDATE claim_cursor c
               SET (priority_ats, priority_ids) =
                   (SELECT array_agg(coalesce(h.at, st.at) ORDER BY st.n), array_agg(coalesce(h.id, st.id) ORDER BY st.n)
                      FROM unnest(c.priority_levels, c.priority_ats, c.priority_ids) WITH ORDINALITY st(lvl, at, id, n)
                      LEFT JOIN LATERAL (SELECT x.at, x.id FROM unnest(v_p_lvls, v_p_ats, v_p_ids) x(lvl, at, id)
                                          WHERE x.lvl = st.lvl AND (x.at, x.id) < (st.at, st.id)
                                          ORDER BY x.at, x.id LIMIT 1) h ON true)
             WHERE c.queue = p_queue
               AND c.ctid = (SELECT k.ctid FROM claim_cursor k
                              WHERE k.queue = p_queue
                                AND EXISTS (SELECT 1 FROM unnest(k.priority_levels, k.priority_ats, k.priority_ids) st(lvl, at, id)
                                              JOIN unnest(v_p_lvls, v_p_ats, v_p_ids) x(lvl, at, id)
                                                ON x.lvl = st.lvl AND (x.at, x.id) < (st.at, st.id))
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
             ORDER BY k.name COLLATE "C"
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
-- pgsweep:end functions/lane.sql

-- pgsweep:changed functions/queue_ops.sql
CREATE OR REPLACE FUNCTION _lanes_lock(p_queue text, p_lanes text[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) > 0 THEN
        PERFORM 1 FROM lane l WHERE l.queue = p_queue AND l.name = ANY (p_lanes) ORDER BY l.name COLLATE "C" FOR UPDATE;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_purge(p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n bigint;
    v_lanes text[];
BEGIN
    PERFORM _queue_manage(p_queue);
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name COLLATE "C" FOR UPDATE;
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue AND m.status = 'pending'
        RETURNING m.lane, m.parked_until
    )
    SELECT count(*), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_n, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN v_n;
END
$$;

CREATE OR REPLACE FUNCTION queue_drop(p_queue text, p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_n bigint;
    v_live bigint;
BEGIN
    IF p_force IS NULL THEN
        RAISE EXCEPTION 'p_force must be true or false, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_manage(p_queue);
    -- Sends hold the queue row FOR KEY SHARE (send.sql): this waits for the
    -- sends in progress, and a later send finds no queue. So no message is
    -- committed after the DELETE below: none is left without its queue.
    PERFORM 1 FROM queue q WHERE q.name = p_queue FOR UPDATE;
    v_now := clock_timestamp();
    -- Delete first, then look: the DELETE waits for claims in progress and
    -- sees what they committed, so no lease slips in between check and act.
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue
        RETURNING m.status, m.visible_at
    )
    SELECT count(*), count(*) FILTER (WHERE d.status = 'processing' AND d.visible_at > v_now) INTO v_n, v_live FROM d;
    IF v_live > 0 AND NOT p_force THEN
        RAISE EXCEPTION 'queue "%" has % message(s) in flight; stop its workers first, or drop it anyway with p_force', p_queue, v_live
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT queue_drop(%L, p_force => true) drops it with them; their workers'' calls then fail (unknown queue)', p_queue);
    END IF;
    -- the lanes after the messages (a completion in progress holds its heads
    -- and then locks their lanes), in the one lane order (lane.sql)
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name COLLATE "C" FOR UPDATE;
    DELETE FROM lane l WHERE l.queue = p_queue;
    DELETE FROM message_processed p WHERE p.queue = p_queue;
    DELETE FROM message_dead d WHERE d.queue = p_queue;
    DELETE FROM message_unique u WHERE u.queue = p_queue;
    DELETE FROM claim_cursor c WHERE c.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
-- pgsweep:end functions/queue_ops.sql

-- pgsweep:changed functions/recover.sql
CREATE OR REPLACE FUNCTION _queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_pos bigint;
    v_bound bigint;
    v_ids bigint[];
    v_last bigint;
    v_rec int := 0;
    v_dead int := 0;
    v_dead_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_int('p_batch', p_batch, 1, 10000);
    PERFORM _check_now('p_now', p_now);
    v_q := _queue_get(p_queue);

    INSERT INTO queue_recovery (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT r.position, r.boundary INTO v_pos, v_bound FROM queue_recovery r WHERE r.queue = p_queue FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    -- Expired unique windows (send.sql) go too, up to p_batch a call: a send
    -- would replace one anyway; this keeps keys never sent again from piling up.
    DELETE FROM message_unique u
     WHERE u.queue = p_queue
       AND u.unique_key = ANY (ARRAY(SELECT w.unique_key FROM message_unique w
                                      WHERE w.queue = p_queue AND w.until <= v_now
                                      LIMIT p_batch FOR UPDATE SKIP LOCKED))
       AND u.until <= v_now;
    IF v_bound IS NULL THEN
        SELECT max(m.id) INTO v_bound FROM message m WHERE m.queue = p_queue;
        v_bound := coalesce(v_bound, 0);
        v_pos := 0;
    END IF;

    SELECT array_agg(s.id ORDER BY s.id), max(s.id) INTO v_ids, v_last
      FROM (SELECT m.id
              FROM message m
             WHERE m.queue = p_queue AND m.id > v_pos AND m.id <= v_bound AND m.visible_at <= v_now
               AND (m.owner IS NOT NULL OR m.attempt >= v_q.max_attempts)
             ORDER BY m.id
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) s;

    IF v_ids IS NULL THEN
        -- empty pass: wrap; the next call captures a new boundary
        UPDATE queue_recovery SET position = 0, boundary = NULL, updated_at = v_now WHERE queue = p_queue;
        RETURN QUERY SELECT 0, 0;
        RETURN;
    END IF;

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup, m.priority
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup, d.priority
          FROM d
        RETURNING message_dead.id, message_dead.lane
    )
    SELECT count(*), array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL)
      INTO v_dead, v_dead_ids, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead_ids, v_q.lane_dead = 'block', v_now);
    END IF;

    UPDATE message m
       SET status = 'failed', owner = NULL, token = NULL, visible_at = v_now, last_error = 'lease expired'
     WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.owner IS NOT NULL AND m.attempt < v_q.max_attempts;
    GET DIAGNOSTICS v_rec = ROW_COUNT;

    UPDATE queue_recovery SET position = v_last, boundary = v_bound, updated_at = v_now WHERE queue = p_queue;
    RETURN QUERY SELECT v_rec, v_dead;
END
$$;
-- pgsweep:end functions/recover.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'send_unique', 'send_batch_unique', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
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

-- pgsweep:changed functions/citus.sql
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE notifying(name) AS (
        -- the functions whose body calls pg_notify, or calls one of those
        SELECT p.proname::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ '\mpg_notify\M'
        UNION
        SELECT p.proname::text FROM pg_catalog.pg_proc p, notifying n
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ ('\m' || n.name || '\s*\(')
    )
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.proname::text NOT IN (SELECT n.name FROM notifying n)
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.unnest(p.proargnames) WITH ORDINALITY a(name, n)
     WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
       AND p.prokind = 'f'
       AND a.name = 'p_queue'
       AND a.n <= p.pronargs
       AND (p.proargmodes IS NULL OR p.proargmodes[a.n] IN ('i', 'b'))
       AND p.proargtypes[a.n - 1] = 'pg_catalog.text'::pg_catalog.regtype
       AND p.proname <> '_queue_get'
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'reference'
                          AND p.prosrc ~* ('\m(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+' || t.table_name || '\M'))
       -- a routine that reads a coordinator-only table (stats_history reads
       -- maintain_snapshot) runs where that table is, not on a worker
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'local' AND p.prosrc ~ ('\m' || t.table_name || '\M'))
     ORDER BY 1
$$;

CREATE OR REPLACE FUNCTION citus_distribute()
RETURNS TABLE (object_kind text, object_name text, placement text, changed boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_message text := pg_catalog.format('%I.%I', pg_catalog.current_schema(), 'message');
    v_rel text;
    r record;
    v_method "char";
    v_repmodel "char";
    v_colocation int;
    v_message_colocation int;
    v_pending text[];
    v_converted text[] := '{}';
    v_fk_rel text[];
    v_fk_name text[];
    v_fk_def text[];
    v_views text[];
    v_view_defs text[];
    v_view_opts text[];
    v_view_comments text[];
    v_left int[];
    v_again int[];
    v_ddl text;
    i int;
BEGIN
    PERFORM _citus_require();
    PERFORM _citus_owner_can_login();
    -- Foreign keys between distributed and reference tables, in one
    -- transaction with the conversions: one connection per node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- The tables still to convert, and the foreign keys that touch them.
    SELECT pg_catalog.array_agg(t.table_name) INTO v_pending
      FROM _citus_tables() t
      LEFT JOIN pg_catalog.pg_dist_partition d
             ON d.logicalrelid = pg_catalog.format('%I.%I', v_schema, t.table_name)::pg_catalog.regclass
     WHERE (t.placement = 'reference' AND (d.partmethod IS DISTINCT FROM 'n' OR d.repmodel IS DISTINCT FROM 't'))
        OR (t.placement = 'distributed' AND d.partmethod IS DISTINCT FROM 'h');
    SELECT pg_catalog.array_agg(f.rel ORDER BY f.conname), pg_catalog.array_agg(f.conname ORDER BY f.conname),
           pg_catalog.array_agg(f.def ORDER BY f.conname)
      INTO v_fk_rel, v_fk_name, v_fk_def
      FROM (SELECT c.conrelid::pg_catalog.regclass::text AS rel, c.conname::text AS conname,
                   pg_catalog.pg_get_constraintdef(c.oid) AS def
              FROM pg_catalog.pg_constraint c
              JOIN pg_catalog.pg_class ch ON ch.oid = c.conrelid
              JOIN pg_catalog.pg_class pa ON pa.oid = c.confrelid
             WHERE c.contype = 'f'
               AND ch.relnamespace = v_schema::pg_catalog.regnamespace
               AND (ch.relname = ANY (v_pending) OR pa.relname = ANY (v_pending))) f;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk_rel[i], v_fk_name[i]);
    END LOOP;
    IF v_pending IS NOT NULL
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND o.objid = c.oid AND o.objsubid = 0
                   WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
                     AND pg_catalog.left(c.relname, 1) <> '_') THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
           AND pg_catalog.left(c.relname, 1) <> '_'; -- not LIKE '\_%': with standard_conforming_strings off that is '_%'
        IF v_views IS NOT NULL THEN
            EXECUTE 'DROP VIEW ' || (SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I', v_schema, v), ', ')
                                       FROM pg_catalog.unnest(v_views) v);
        END IF;
    END IF;

    -- Tables, message first.
    FOR r IN SELECT t.table_name, t.placement FROM _citus_tables() t ORDER BY t.p_order, t.table_name LOOP
        v_rel := pg_catalog.format('%I.%I', v_schema, r.table_name);
        SELECT d.partmethod, d.repmodel, d.colocationid INTO v_method, v_repmodel, v_colocation
          FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
        object_kind := 'table';
        object_name := r.table_name;
        changed := false;
        IF r.placement = 'local' THEN
            placement := 'local (coordinator)';
        ELSIF r.placement = 'reference' THEN
            placement := 'reference';
            IF v_method IS DISTINCT FROM 'n' OR v_repmodel IS DISTINCT FROM 't' THEN
                PERFORM pg_catalog.create_reference_table(v_rel::pg_catalog.regclass);
                v_converted := v_converted || v_rel;
                changed := true;
            END IF;
        ELSE
            placement := 'distributed by queue';
            IF r.table_name = 'message' THEN
                IF v_method IS DISTINCT FROM 'h' THEN
                    PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue');
                    v_converted := v_converted || v_rel;
                    changed := true;
                END IF;
                SELECT d.colocationid INTO v_message_colocation
                  FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
            ELSIF v_method IS DISTINCT FROM 'h' THEN
                PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue', colocate_with => v_message);
                v_converted := v_converted || v_rel;
                changed := true;
            ELSIF v_colocation IS DISTINCT FROM v_message_colocation THEN
                PERFORM pg_catalog.update_distributed_table_colocation(v_rel::pg_catalog.regclass, colocate_with => v_message);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;

    -- The rows a conversion copied into the shards stay behind, invisible, in
    -- the coordinator's own table: drop them.
    FOREACH v_rel IN ARRAY v_converted LOOP
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(v_rel::pg_catalog.regclass);
    END LOOP;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk_rel[i], v_fk_name[i], v_fk_def[i]);
    END LOOP;

    -- The views again, on the coordinator only; a view over another view
    -- waits for it (the order of creation is not always the order of the
    -- dependencies: CREATE OR REPLACE may have changed them).
    IF v_views IS NOT NULL THEN
        v_ddl := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        v_left := ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(v_views)));
        WHILE pg_catalog.cardinality(v_left) > 0 LOOP
            v_again := '{}';
            FOREACH i IN ARRAY v_left LOOP
                BEGIN
                    EXECUTE pg_catalog.format('CREATE VIEW %I.%I%s AS %s', v_schema, v_views[i], v_view_opts[i], v_view_defs[i]);
                    IF v_view_comments[i] IS NOT NULL THEN
                        EXECUTE pg_catalog.format('COMMENT ON VIEW %I.%I IS %L', v_schema, v_views[i], v_view_comments[i]);
                    END IF;
                EXCEPTION WHEN undefined_table THEN
                    v_again := v_again || i;
                END;
            END LOOP;
            IF pg_catalog.cardinality(v_again) = pg_catalog.cardinality(v_left) THEN
                RAISE EXCEPTION 'citus_distribute could not create the views % again', v_views
                    USING ERRCODE = 'internal_error';
            END IF;
            v_left := v_again;
        END LOOP;
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', v_ddl, true);
        FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g WHERE g.view_name = ANY (v_views) LOOP
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END LOOP;
    END IF;

    -- Functions: the verbs by p_queue (forced where _citus_delegated says);
    -- every other routine on every node (a delegated verb calls them there)
    -- but those that read a coordinator table or take its rows: they stay
    -- on the coordinator, where maintain() and retention_run call them.
    FOR r IN SELECT p.oid, p.oid::pg_catalog.regprocedure::text AS sig, d.arg_index, d.force,
                    o.distribution_argument_index AS cur_arg, o.colocationid AS cur_colocation,
                    coalesce(o.force_delegation, false) AS cur_force, o.objid IS NOT NULL AS is_distributed,
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) c WHERE c LIKE 'plan_cache_mode=%') AS pins_plans,
                    EXISTS (SELECT 1 FROM _citus_tables() t
                              JOIN pg_catalog.pg_class c
                                ON c.relname = t.table_name AND c.relnamespace = v_schema::pg_catalog.regnamespace
                             WHERE t.placement = 'local'
                               AND (p.prosrc ~ ('\m' || t.table_name || '\M')
                                    OR c.reltype = ANY (p.proargtypes::pg_catalog.oid[] || p.prorettype))) AS local_only
               FROM pg_catalog.pg_proc p
               LEFT JOIN _citus_delegated() d ON d.routine = p.oid
               LEFT JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = p.oid AND o.objsubid = 0
              WHERE p.pronamespace = v_schema::pg_catalog.regnamespace
              ORDER BY 2 LOOP
        object_kind := 'function';
        object_name := r.sig;
        changed := false;
        IF r.arg_index IS NOT NULL THEN
            placement := CASE WHEN r.force THEN 'delegated by p_queue' ELSE 'delegated by p_queue (not in transaction blocks)' END;
            IF NOT r.is_distributed OR r.cur_arg IS DISTINCT FROM r.arg_index
               OR r.cur_colocation IS DISTINCT FROM v_message_colocation OR r.cur_force IS DISTINCT FROM r.force THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure, '$' || (r.arg_index + 1),
                                                               colocate_with := v_message, force_delegation := r.force);
                changed := true;
            END IF;
        ELSIF r.local_only THEN
            placement := 'coordinator only';
        ELSE
            placement := 'on every node';
            IF NOT r.is_distributed OR r.cur_arg IS NOT NULL THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure);
                changed := true;
            END IF;
        END IF;
        -- Custom plans on Citus: a routine that asks for generic ones (claim,
        -- claim.sql) gets the default back, on every node (Citus propagates
        -- the ALTER). Citus routes a statement to its shard by the queue's
        -- value, which a generic plan does not have ("could not create
        -- distributed plan").
        IF r.pins_plans THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s RESET plan_cache_mode', r.sig);
            changed := true;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- pgsweep:end functions/citus.sql

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
    v_r record;
    v_key text;
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
        IF NOT _queue_role_holds(s.owner_name, s.queue, 'send') THEN
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
            -- the slot is the message's key (its identity for a relay, the
            -- de-duplication of an inbox) and, on an outbox, its unique key:
            -- a slot sent twice would be a duplicate while the first is live
            v_key := 'pgsweep-schedule:' || s.name || '@' || _schedule_slot_text(v_slot);
            v_r := _send(v_q, s.payload,
                         s.headers || jsonb_build_object('pgsweep-schedule', s.name, 'pgsweep-slot', _schedule_slot_text(v_slot)),
                         v_key, NULL, v_now, s.lane, CASE WHEN v_q.kind = 'outbox' THEN v_key END, NULL, 0::smallint);
            IF NOT v_r.duplicate THEN
                v_sent := v_sent + 1;
                v_last_id := v_r.id;
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
CREATE OR REPLACE FUNCTION _schedule_manage(p_name text, p_must boolean)
RETURNS schedule
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule;
    v_caller name := _caller_role();
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
    v_new.owner_name := _caller_role();
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

-- pgsweep:changed functions/queue_rights.sql
CREATE OR REPLACE FUNCTION _caller_role()
RETURNS name
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                ELSE pg_catalog.current_setting('role')::name END
$$;

CREATE OR REPLACE FUNCTION _queue_require(p_queue text, p_right text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                          ELSE pg_catalog.current_setting('role')::name END;
BEGIN
    -- <schema>_owner owns every queue's rows (on Citus the tier runs as it,
    -- and Citus's own connections to the workers are its).
    IF v_caller = current_user OR _queue_role_holds(v_caller, p_queue, p_right) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'permission denied: role "%" lacks % on queue "%"', v_caller, p_right, p_queue
        USING ERRCODE = 'insufficient_privilege',
              HINT = pg_catalog.format('A role holding manage on the queue grants it: SELECT queue_grant(%L, %L, ARRAY[%L])',
                                       p_queue, v_caller, p_right);
END
$$;

CREATE OR REPLACE FUNCTION _queue_role_holds(p_role name, p_queue text, p_right text)
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
    IF EXISTS (SELECT 1 FROM queue_right r
                WHERE r.queue = p_queue AND r.privilege = p_right
                  AND pg_catalog.pg_has_role(p_role, pg_catalog.to_regrole(pg_catalog.quote_ident(r.grantee_name)), 'MEMBER')) THEN
        RETURN true;
    END IF;
    -- apart from the probe: on Citus a statement that joins the distributed
    -- queue_right with a catalog view is planned recursively, and the view's
    -- pg_authid is then read with S_owner's rights (permission denied)
    RETURN coalesce((SELECT a.rolsuper FROM pg_catalog.pg_roles a WHERE a.rolname = p_role), false);
END
$$;
-- pgsweep:end functions/queue_rights.sql

-- pgsweep:changed functions/retention_detach.sql
CREATE OR REPLACE FUNCTION retention_detach_claim(p_owner text, p_now timestamptz)
RETURNS TABLE (policy text, leaf oid, parent oid, action text, leaf_schema name, leaf_name name,
               parent_schema name, parent_name name, rename_to name, act_as name, lock_timeout_ms bigint,
               reason text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_caller name := _caller_role();
    v_now timestamptz := clock_timestamp();
    v_timeout bigint := (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint;
    v_pol retention_policy;
    v_cutoff timestamptz;
    v_r record;
    v_c record;
    v_n int := 0;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 THEN
        PERFORM _retention_invalid('p_owner must be a name of 1 to 200 characters, got %s',
                                   coalesce(pg_catalog.quote_literal(p_owner), 'NULL'));
    END IF;
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    PERFORM _check_now('p_now', p_now);
    -- expired claims whose table is gone are forgotten
    DELETE FROM retention_unit u
     WHERE u.owner IS NOT NULL AND u.expires_at <= v_now
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = u.leaf);
    -- new leaves of due policies, half-detached ones whenever, of owners the caller can act as
    FOR v_r IN
        WITH due AS (SELECT retention_due(p_now) AS name)
        SELECT r AS pol, r.name IN (SELECT due.name FROM due) AS due FROM retention_policy r
         WHERE (r.name IN (SELECT due.name FROM due)
                OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.owner IS NOT NULL))
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = r.table_schema AND c.relname = r.table_name AND c.relkind = 'p')
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY r.name
    LOOP
        v_pol := v_r.pol;
        v_cutoff := _retention_cutoff(v_pol, coalesce(p_now, v_now));
        -- a due policy without an open sweep gets one, as a pass plans it
        IF v_r.due AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            PERFORM 1 FROM retention_policy r WHERE r.name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
            IF FOUND AND NOT EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
                PERFORM _retention_plan_partitioned(v_pol, coalesce(p_now, v_now), p_owner);
            END IF;
        END IF;
        FOR v_c IN
            SELECT u.sweep_id, u.unit_no, u.kind, c.oid AS leaf, i.inhparent AS parent, n.nspname AS leaf_schema,
                   c.relname AS leaf_name, pn.nspname AS parent_schema, p.relname AS parent_name, i.inhdetachpending AS pending,
                   CASE WHEN c.relowner <> v_pol.owner
                        THEN pg_catalog.format('partition %I.%I is owned by %s', n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner))
                        WHEN p.relowner <> v_pol.owner
                        THEN pg_catalog.format('parent %I.%I is owned by %s', pn.nspname, p.relname, pg_catalog.pg_get_userbyid(p.relowner))
                   END AS foreign_owner
              FROM retention_unit u
              JOIN pg_catalog.pg_namespace n ON n.nspname = u.leaf_schema
              JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = u.leaf_name AND c.relkind = 'r'
              JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
              JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
              JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
              JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = i.inhparent
             WHERE u.policy = v_pol.name AND u.kind <> 'detached' AND (u.leaf IS NULL OR u.leaf = c.oid)
               -- free, or claimed by this owner, or a claim whose holder died
               AND (u.owner IS NULL OR u.owner = p_owner OR u.expires_at <= v_now)
               AND (CASE WHEN i.inhdetachpending THEN u.owner IS NOT NULL -- a DBA's own DETACH is left to the DBA
                         ELSE v_r.due AND pt.partdefid = 0 AND _retention_leaf_expired(v_pol, c.oid::regclass, v_cutoff)
                              -- PostgreSQL detaches one leaf of a parent at a time
                              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits s
                                               WHERE s.inhparent = i.inhparent AND s.inhdetachpending) END)
             ORDER BY i.inhdetachpending DESC, c.oid
               FOR UPDATE OF u SKIP LOCKED
        LOOP
            IF v_c.foreign_owner IS NOT NULL THEN
                RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, 'skip'::text, v_c.leaf_schema, v_c.leaf_name,
                    v_c.parent_schema, v_c.parent_name, NULL::name, NULL::name, NULL::bigint, pg_catalog.format(
                    '%s, not by the policy''s owner %s: the runner acts only on its tables', v_c.foreign_owner,
                    pg_catalog.pg_get_userbyid(v_pol.owner));
                CONTINUE;
            END IF;
            CONTINUE WHEN v_c.kind <> 'drop';
            EXIT WHEN v_n >= 64;
            UPDATE retention_unit u SET owner = p_owner, expires_at = v_now + v_pol.lease_ttl, leaf = v_c.leaf
             WHERE u.policy = v_pol.name AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
            v_n := v_n + 1;
            RETURN QUERY SELECT v_pol.name, v_c.leaf, v_c.parent, CASE WHEN v_c.pending THEN 'finalize' ELSE 'detach' END,
                v_c.leaf_schema, v_c.leaf_name, v_c.parent_schema, v_c.parent_name,
                _retention_detach_runner_name(v_c.leaf)::name, pg_catalog.pg_get_userbyid(v_pol.owner), v_timeout, NULL::text;
        END LOOP;
    END LOOP;
    -- Tables the runner detached (parent: the policy's table): dropped if still under its
    -- name, the policy owner's and depended on by nothing; else left in place, claim closed.
    FOR v_c IN
        SELECT u.sweep_id, u.unit_no, u.policy, u.leaf, n.nspname AS leaf_schema, c.relname AS leaf_name, r.owner AS pol_owner,
               r.lease_ttl, _retention_table(r.table_schema, r.table_name)::oid AS parent,
               (c.relname = _retention_detach_runner_name(u.leaf) AND c.relowner = r.owner
                AND NOT _retention_depended_on(c.oid)) AS droppable
          FROM retention_unit u
          JOIN pg_catalog.pg_class c ON c.oid = u.leaf
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          JOIN retention_policy r ON r.name = u.policy
         WHERE c.relkind = 'r' AND NOT c.relispartition
           AND (u.owner = p_owner OR u.expires_at <= v_now)
           AND _retention_detach_can_act(v_caller, r.owner)
         ORDER BY u.leaf
           FOR UPDATE OF u SKIP LOCKED
    LOOP
        IF NOT v_c.droppable THEN
            RAISE NOTICE 'retention policy %: the detached partition % is left in place', v_c.policy, v_c.leaf::regclass::text;
            DELETE FROM retention_unit u WHERE u.policy = v_c.policy AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
            CONTINUE;
        END IF;
        EXIT WHEN v_n >= 64;
        UPDATE retention_unit u SET owner = p_owner, expires_at = v_now + v_c.lease_ttl
         WHERE u.policy = v_c.policy AND u.sweep_id = v_c.sweep_id AND u.unit_no = v_c.unit_no;
        v_n := v_n + 1;
        RETURN QUERY SELECT v_c.policy, v_c.leaf, v_c.parent, 'drop'::text, v_c.leaf_schema, v_c.leaf_name,
            NULL::name, NULL::name, NULL::name, pg_catalog.pg_get_userbyid(v_c.pol_owner), v_timeout, NULL::text;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION retention_detach_done(p_owner text, p_leaf oid, OUT state text, OUT rows bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_u retention_unit;
    v_pol retention_policy;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql)
    -- a table under two policies is claimed for each: recorded under the first
    SELECT * INTO v_u FROM retention_unit u WHERE u.leaf = p_leaf AND u.owner = p_owner
     ORDER BY u.policy, u.sweep_id, u.unit_no LIMIT 1 FOR UPDATE;
    SELECT * INTO v_pol FROM retention_policy r WHERE r.name = v_u.policy;
    -- only the claim's holder, able to act as the policy's owner, records it
    IF v_u.policy IS NULL OR NOT _retention_detach_can_act(_caller_role(), v_pol.owner) THEN
        state := 'other';
        RETURN;
    END IF;
    SELECT CASE WHEN c.oid IS NULL THEN 'dropped'
                WHEN i.inhdetachpending THEN 'pending'
                WHEN i.inhrelid IS NOT NULL THEN 'attached'
                WHEN c.relname = _retention_detach_runner_name(p_leaf) AND n.nspname = v_u.leaf_schema THEN 'detached'
                ELSE 'taken' END
      INTO state
      FROM (SELECT p_leaf AS oid) x
      LEFT JOIN pg_catalog.pg_class c ON c.oid = x.oid
      LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = x.oid;
    IF state IN ('dropped', 'detached') AND NOT v_u.counted THEN
        -- a table dropped before it was recorded: 0 rows
        rows := coalesce(_retention_detach_estimate(p_leaf), 0);
        INSERT INTO retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, last_batch_at,
                                    finished_at, rows_deleted, batches, units, partitions_dropped, strategy, outcome)
        VALUES (v_u.policy, p_owner, v_pol.mode, pg_catalog.pg_backend_pid(),
                (SELECT a.backend_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()),
                v_u.expires_at - v_pol.lease_ttl, v_u.expires_at, v_now, v_now, rows, 1, 1, 1, 'detach_concurrently', 'drained');
    ELSIF state = 'taken' AND NOT v_u.counted THEN
        RAISE NOTICE 'retention policy %: partition %.% was detached by someone else (or could not be renamed): left in place',
            v_u.policy, v_u.leaf_schema, v_u.leaf_name;
    END IF;
    IF state IN ('dropped', 'taken') THEN
        DELETE FROM retention_unit u WHERE u.leaf = p_leaf AND u.owner = p_owner;
    ELSE
        UPDATE retention_unit u
           SET owner = CASE WHEN state = 'attached' THEN NULL ELSE u.owner END,
               expires_at = CASE WHEN state = 'attached' THEN NULL ELSE u.expires_at END,
               counted = state <> 'attached' AND (u.counted OR state = 'detached')
         WHERE u.leaf = p_leaf AND u.owner = p_owner;
    END IF;
END
$$;
-- pgsweep:end functions/retention_detach.sql

-- pgsweep:changed functions/fail.sql
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
    PERFORM _queue_require(p_queue, 'consume');
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority FROM d
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
-- pgsweep:end functions/fail.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
