-- pgsweep 0.41: sends (issue 25): unique sends, priorities, and two
-- defects of sends.
--
-- message gains unique_key (held while the message is live: a unique index
-- on (queue, unique_key), partial, so a message without one adds no entry)
-- and priority (smallint, default 0: adding it rewrites nothing). The claim
-- index message_claim is rebuilt with priority = 0 in its predicate (every
-- existing row has priority 0: it holds the same entries), and
-- message_claim_priority holds the others (claim.sql). message_unique holds
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
           EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume')
      INTO v_cursor_at, v_cursor_id, v_rescanned, v_held
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
    -- Priorities above the default first (see the header).
    SELECT array_agg(c.ctid), array_agg(c.id) INTO v_tids, v_ids
      FROM (SELECT s.ctid, s.id
              FROM message s
             WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0 AND s.priority > 0
               AND s.visible_at <= v_now AND s.attempt < v_max
             ORDER BY s.priority DESC, s.created_at, s.id
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) c;
    IF v_tids IS NOT NULL THEN
        v_all := v_tids;
        v_all_ids := v_ids;
        v_n := cardinality(v_all);
    END IF;
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
    -- Priorities below the default last.
    IF v_n < p_batch THEN
        SELECT array_agg(c.ctid), array_agg(c.id) INTO v_tids, v_ids
          FROM (SELECT s.ctid, s.id
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0 AND s.priority < 0
                   AND s.visible_at <= v_now AND s.attempt < v_max
                 ORDER BY s.priority DESC, s.created_at, s.id
                 LIMIT p_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
        END IF;
    END IF;
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
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup
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
        'browse_maintenance_passes', 'browse_retention_passes']) r -- keyset pages of the pass histories (browse_passes.sql)
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
-- pgsweep:end functions/citus.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
