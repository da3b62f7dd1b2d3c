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
    v_limit int;
    v_rate double precision;
    v_burst int;
    v_allowed int;
    v_q queue;
    v_grps text[];
    v_kept bigint[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    v_max := v_q.max_attempts;
    v_lease := coalesce(p_lease, v_q.lease_default);
    v_paused := v_q.paused;
    v_limit := v_q.max_in_flight;
    v_rate := v_q.rate / extract(epoch FROM v_q.rate_per);
    v_burst := coalesce(v_q.rate_burst, v_q.rate);
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN -- flow control (flow.sql): as many rows as room and tokens
        v_allowed := _flow_room(p_queue, v_limit, v_rate, v_burst, cardinality(p_ids), v_now);
        IF v_allowed = 0 THEN
            RETURN;
        END IF;
    END IF;

    -- (the cursor walks the rows of the default priority only: claim.sql)
    SELECT array_agg(c.ctid), array_agg(c.id), array_agg(c.grp),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0 AND c.grp IS NULL))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0 AND c.grp IS NULL))[1]
      INTO v_tids, v_ids, v_grps, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id, s.priority, s.grp
              FROM message s
             WHERE s.queue = p_queue AND s.id = ANY (p_ids)
               AND s.visible_at <= v_now AND s.attempt < v_max
               AND (s.parked_until IS NULL OR s.parked_until <= v_now)
             ORDER BY s.created_at, s.id
             LIMIT v_allowed -- NULL: no limit
               FOR UPDATE SKIP LOCKED) c;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;
    -- flow control (flow.sql): keep what the claim has room and tokens for
    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL OR _flow_group_limited(v_q.group_max_in_flight, v_q.group_rate, v_q.group_overrides) THEN
        v_kept := _flow_keep(v_q, v_ids,
                             ARRAY(SELECT u.id FROM unnest(v_ids, v_grps) u(id, g) WHERE u.g IS NOT NULL),
                             ARRAY(SELECT u.g FROM unnest(v_ids, v_grps) u(id, g) WHERE u.g IS NOT NULL),
                             v_token, v_until, v_now);
        IF cardinality(v_kept) = 0 THEN
            RETURN;
        ELSIF cardinality(v_kept) < cardinality(v_ids) THEN
            SELECT array_agg(u.t ORDER BY u.o), array_agg(u.i ORDER BY u.o) INTO v_tids, v_ids
              FROM unnest(v_tids, v_ids) WITH ORDINALITY u(t, i, o)
             WHERE u.i = ANY (v_kept);
            v_last_at := NULL; -- no cursor move
        END IF;
    END IF;

    -- Forward only, and only when the cursor row's lock is free (claim.sql).
    UPDATE claim_cursor c
       SET created_at = v_last_at, id = v_last_id
     WHERE c.queue = p_queue
       AND (c.created_at, c.id) < (v_last_at, v_last_id)
       AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);

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
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    IF _flow_limited(v_q.max_in_flight, v_q.group_max_in_flight, v_q.group_overrides) THEN
        PERFORM _flow_free(p_queue, p_token, p_ids); -- grants before messages, in every verb (flow.sql)
    END IF;
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority, m.grp
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority, grp)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority, d.grp FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_dead) u;
END
$$;

-- The verb: the database clock. A LANGUAGE sql wrapper, unlike the claim
-- and ack verbs' PL/pgSQL ones (whose plans are cached; a LANGUAGE sql
-- function's statement is planned at every call before PostgreSQL 18): a
-- dead letter is rare, not a step of every message.
CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text)
RETURNS SETOF bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$ SELECT dead_letter(p_queue, p_token, p_ids, p_error, NULL::timestamptz) $$;
