-- pgsweep 0.24: inbox de-duplication under REPEATABLE READ and SERIALIZABLE
-- covers dead letters too.
--
-- fail, queue_recover and the dead-lettering of claim_ids copy dedup into
-- message_dead (unique inbox keys there since 023), and send's snapshot
-- probe (send.sql, 3c) inserts a probe row into message_dead ON CONFLICT: a
-- key sent and dead-lettered after the sender's snapshot raises 40001 instead
-- of letting the key in a second time.
--
-- complete skips its lane bookkeeping when the queue has no lane (ack.sql):
-- the CPU cost of claim + complete is back within 3% of 0.13's.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

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
    v_error text := left(p_error, 10000);
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
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
    v_error text := left(p_error, 10000);
    v_dead bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
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

-- pgsweep:include functions/recover.sql
-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch, p_now DEFAULT NULL) RETURNS TABLE(recovered int, dead_lettered int)
--
-- p_batch 1..10000; p_now NULL (the clock) or within 10 years of it (tests).
--
-- Looks at up to p_batch rows of the queue whose lease expired (and rows that
-- are due but have no attempt left, e.g. after max_attempts was lowered):
--   * attempt < max_attempts: the lease is lost; the row is released (owner
--     cleared, status 'failed', last_error 'lease expired', visible now), so
--     the old owner's late complete/fail/renew act on nothing. claim would take
--     such a row anyway; recovery makes the loss visible and fences the owner.
--   * attempt >= max_attempts: moved to message_dead. claim never hands these
--     out, so without recovery they would stay in the queue.
--
-- Lanes (lane.sql): a released lane head stays its lane's head (the lane
-- keeps its order: the head is claimed again first). A head dead-lettered
-- here makes its lane move on or stop, by the queue's lane_dead, as in fail.
--
-- Traversal (as in seed 002): keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
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

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
