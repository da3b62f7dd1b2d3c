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
--      keys are unique, message_dead_inbox_key): a key sent and
--      dead-lettered after the snapshot raises 40001 too.
--
-- Unique sends (p_unique_key, p_unique_for; docs/queues.md, "Unique sends").
-- Not the inbox's key: any queue kind, and the key is held only while a
-- message has it, not for as long as a record of it is kept. Two things
-- hold a unique key of a queue:
--  * a live message with it (message.unique_key; message_unique_key, a unique
--    index on (queue, unique_key) WHERE unique_key IS NOT NULL): pending,
--    scheduled, in flight, failed and waiting for its retry. A message that
--    leaves `message` (completed, dead-lettered, cancelled, purged) frees
--    it; a dead letter does not keep it (dead_requeue sends it back without
--    one);
--  * a window (table message_unique, primary key (queue, unique_key)): a
--    message sent with p_unique_for holds its key until sent_at +
--    p_unique_for, whatever became of it (the row is not touched by
--    complete, so it survives the outbox's delete).
-- The steps, none of them a check-then-insert:
--  1. INSERT … ON CONFLICT (queue, unique_key) DO NOTHING: a live holder,
--     committed or not, makes it a duplicate (an uncommitted one is waited
--     for, and counts only if it commits); the holder's id is read with the
--     next statement, and when the holder left meanwhile (READ COMMITTED: a
--     fresh snapshot) the insert is tried again. So of any number of
--     concurrent sends exactly one inserts (TestUniqueSendConcurrent: 64).
--  2. Our row holds the live key: no other send of the key can pass step 1
--     until we commit or roll back, so the window is read (or written) by
--     one sender at a time. An unexpired window → a duplicate: our row is
--     deleted again, the call returns the window's message id (which may
--     have been completed already). Otherwise, with p_unique_for, our
--     window replaces the expired one.
-- REPEATABLE READ and SERIALIZABLE, as the inbox: step 1 raises 40001 by
-- itself when the live holder committed after our snapshot; step 2 probes
-- with an INSERT … ON CONFLICT DO NOTHING into message_unique (removed
-- again when the send has no window), which raises 40001 when a window
-- committed after our snapshot; a visible one is read as in READ COMMITTED.
-- A transaction that sends two unique keys holds the first while it waits
-- for the second: send them in one order everywhere, as lanes.
-- An inbox send with a message key (p_key) cannot take a unique key: its key
-- already de-duplicates (22023).
--
-- Priorities (p_priority, -100..100, default 0; claim.sql): stored, never
-- changed; a dead letter requeued comes back with the default.
--
-- The queue row. send and send_batch read their queue FOR KEY SHARE (what a
-- foreign key would take): queue_drop locks the row FOR UPDATE before it
-- deletes the queue's messages, so a send in progress makes the drop wait
-- and its message is deleted with the rest, and a send that comes later
-- finds no queue (22023; 40001 under REPEATABLE READ when the drop
-- committed after its snapshot). Shared locks: sends do not wait for each
-- other.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql STABLE
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

-- _check_priority: a priority is -100..100 (higher first; 0 the default).
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

-- _check_unique: a unique key follows the name rule (at most 1000
-- characters); a window (p_unique_for) needs a key and lasts 1 second to 365
-- days; an inbox message key (p_key on an inbox queue) takes no unique key.
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

-- _queue_for_send: the queue, its row locked FOR KEY SHARE until the
-- transaction ends (see the header: queue_drop).
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

-- _unique_window: step 2 of a unique send (header). Our message p_id holds
-- the live key p_key. Returns the id of the message whose window still holds
-- the key (a duplicate), or NULL: then, with p_unique_for, the key's window
-- is ours.
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

-- _send inserts one message into a queue already looked up and checked;
-- p_now is the send's clock. With a lane (lane.sql) it first locks the
-- lane's row: the message is the lane's head when the lane had no row (no
-- message, not blocked), otherwise it waits (parked at infinity); its
-- created_at is greatest(p_now, the lane's newest) and its id is drawn after
-- the lock, so (created_at, id) increases in the order the sends commit. A
-- lane whose head vanished without moving it on (a message deleted by hand)
-- moves on here (_lane_busy). A duplicate changes no lane.
-- Returns the new message's id (duplicate false); an inbox duplicate: NULL
-- and true; a unique duplicate (header): the id of the message that holds
-- the key, and true.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text, p_unique_key text, p_unique_for interval,
                                 p_priority smallint, p_group text, OUT id bigint, OUT duplicate boolean)
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
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority, p_group)
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
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority, p_group)
            RETURNING message.id INTO v_id;
        ELSE
            -- unique send, step 1 (header)
            LOOP
                INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority,
                                     unique_key, grp)
                VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority,
                        p_unique_key, p_group)
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

-- _send_one: send and send_unique (below): the checks, the queue's lock,
-- _send, the notification.
CREATE OR REPLACE FUNCTION _send_one(p_queue text, p_payload jsonb, p_headers jsonb, p_key text,
                                     p_deliver_at timestamptz, p_lane text, p_unique_key text,
                                     p_unique_for interval, p_priority smallint, p_group text,
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
    PERFORM _check_group('p_group', p_group);
    IF p_priority IS DISTINCT FROM 0 THEN
        PERFORM _check_priority('p_priority', p_priority);
    END IF;
    IF p_unique_key IS NOT NULL OR p_unique_for IS NOT NULL THEN
        PERFORM _check_unique('p_unique_key', p_unique_key, 'p_unique_for', p_unique_for,
                              v_q.kind = 'inbox' AND p_key IS NOT NULL);
    END IF;
    v_r := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane,
                 p_unique_key, p_unique_for, p_priority, p_group);
    id := v_r.id;
    duplicate := v_r.duplicate;
    IF NOT duplicate THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate, or, for
-- a unique duplicate (p_unique_key held: header), the id of the message that
-- holds the key. p_deliver_at in the future schedules the message (at most
-- 10 years ahead); NULL or past = now. p_lane (NULL: none; else at most 200
-- characters) puts it in that ordered lane of the queue (lane.sql): it is
-- handed out only after every message sent to the lane before it has left
-- the queue. p_unique_key (at most 1000 characters) and p_unique_for (1
-- second to 365 days): see the header. p_priority -100..100, higher claimed
-- first (claim.sql). p_group (NULL: none; else at most 200 characters)
-- puts it in that group of the queue: claims take turns between the groups
-- with due messages, and group limits apply to it (flow.sql). send_unique
-- says which of the ids are duplicates.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL,
                                p_unique_key text DEFAULT NULL, p_unique_for interval DEFAULT NULL,
                                p_priority smallint DEFAULT 0, p_group text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_r record;
BEGIN
    v_r := _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key, p_unique_for, p_priority,
                     p_group);
    RETURN v_r.id;
END
$$;

-- send_unique is send with the answer to "was it a duplicate?": id as send
-- returns it, duplicate true when nothing was inserted (an inbox duplicate:
-- id NULL; a unique key held: the holder's id). The Go client calls it.
CREATE OR REPLACE FUNCTION send_unique(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}',
                                       p_key text DEFAULT NULL, p_deliver_at timestamptz DEFAULT NULL,
                                       p_lane text DEFAULT NULL, p_unique_key text DEFAULT NULL,
                                       p_unique_for interval DEFAULT NULL, p_priority smallint DEFAULT 0,
                                       p_group text DEFAULT NULL)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT s.id, s.duplicate
                   FROM _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key,
                                  p_unique_for, p_priority, p_group) s;
END
$$;

-- _check_elements: an optional array argument of a batch (p_arg, p_got
-- elements; NULL: not given) has one element per payload (p_want).
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

-- _send_batch: send_batch and send_batch_unique (below). The lanes of a
-- batch are locked once each, in byte order (COLLATE "C", the one order
-- every statement that locks lane rows uses: lane.sql), so a batch never
-- waits for a completion or another batch in a cycle; messages of one lane
-- keep their input order. A batch with unique keys sends message by message
-- (_send), as an inbox batch with keys does; a second element with a key
-- the batch already holds is a duplicate of the first. One notification
-- per batch.
CREATE OR REPLACE FUNCTION _send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[], p_keys text[],
                                       p_deliver_at timestamptz[], p_lanes text[], p_unique_keys text[],
                                       p_unique_for interval[], p_priorities smallint[], p_groups text[])
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
    PERFORM _check_elements('p_groups', cardinality(p_groups), v_n);
    IF p_groups IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_groups) x WHERE length(x) > 200 OR x !~ '^[A-Za-z0-9_.:/@-]+$') THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_group(format('p_groups[%s]', i), p_groups[i]);
        END LOOP;
    END IF;
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
                         p_unique_keys[i], p_unique_for[i], coalesce(p_priorities[i], 0::smallint), p_groups[i]);
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
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane, coalesce(u.priority, 0), u.grp
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes, p_priorities, p_groups)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, priority, grp, k)
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

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order, as send returns it (NULL for an inbox duplicate,
-- also a duplicate within the batch; a unique duplicate: the holder's id).
-- p_headers, p_keys, p_deliver_at, p_lanes, p_unique_keys, p_unique_for,
-- p_priorities and p_groups are NULL or arrays of the same length as p_payloads; each
-- element as send's argument of that name (NULL: none; a priority may not
-- be NULL). send_batch_unique says which are duplicates.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                      p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL,
                                      p_groups text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                              p_unique_keys, p_unique_for, p_priorities, p_groups) b;
END
$$;

-- send_batch_unique is send_batch with duplicate: true for each element
-- that inserted nothing (as send_unique).
CREATE OR REPLACE FUNCTION send_batch_unique(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                             p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                             p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                             p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL,
                                             p_groups text[] DEFAULT NULL)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id, b.duplicate
                   FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                    p_unique_keys, p_unique_for, p_priorities, p_groups) b;
END
$$;
