-- Queue operations for operators (admin role): pause and resume, cancel
-- messages, purge a queue, drop it. docs/queues.md, "Operating a queue".
--
-- Every one of them acts on one queue (scale-out rule) and raises 22023 for
-- an unknown queue or a bad argument before it changes anything. Messages of
-- lanes that leave make their lanes move on in the same transaction
-- (lane.sql): the lanes are locked first, in name order, then the messages
-- are deleted.

-- _queue_manage returns the queue p_name (_queue_get: 22023 for a NULL,
-- empty or unknown queue) when the caller holds manage on it
-- (_queue_require: 42501 otherwise): what every operation here checks
-- first. Its argument is not named p_queue: like _queue_get it runs where
-- its caller runs, never delegated to a queue's node on Citus (citus.sql,
-- _citus_delegated).
CREATE OR REPLACE FUNCTION _queue_manage(p_name text)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_name);
BEGIN
    PERFORM _queue_require(p_name, 'manage');
    RETURN v_q;
END
$$;

-- queue_pause: claims of a paused queue return nothing (claim.sql checks
-- the flag it reads anyway); sends, renewals, completions and failures go on,
-- so work in flight finishes and new messages wait. Returns true when the
-- queue was running (false: it was paused already, nothing changed).
CREATE OR REPLACE FUNCTION queue_pause(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_manage(p_queue);
    UPDATE queue q SET paused = true, updated_at = v_now WHERE q.name = p_queue AND NOT q.paused;
    RETURN FOUND;
END
$$;

-- queue_resume: claims take messages again; listeners are notified so that
-- idle workers claim at once. Returns true when the queue was paused.
CREATE OR REPLACE FUNCTION queue_resume(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_manage(p_queue);
    UPDATE queue q SET paused = false, updated_at = v_now WHERE q.name = p_queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- _lanes_lock locks the rows of the given lanes of a queue, in name order.
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

-- message_cancel deletes messages that are pending -- due, scheduled, or
-- waiting in their lane -- and returns the ids it deleted. Messages in flight
-- (processing) or waiting for a retry (failed) are not touched, nor are ids
-- that are not live messages of the queue (completed, dead, never sent), so a
-- repeated call is harmless. A cancelled lane head makes its lane move on. A
-- cancelled inbox message is gone, not processed: its key can be sent again.
CREATE OR REPLACE FUNCTION message_cancel(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_ids(p_ids);
    v_q := _queue_manage(p_queue);
    PERFORM _lanes_lock(p_queue, ARRAY(SELECT DISTINCT m.lane FROM message m
                                         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.lane IS NOT NULL));
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.status = 'pending'
        RETURNING m.id, m.lane, m.parked_until
    )
    SELECT array_agg(d.id),
           array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_ids, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

-- queue_purge deletes every pending message of the queue (due, scheduled,
-- waiting in a lane) and returns how many. Messages in flight and retries
-- stay; so do processed inbox rows and dead letters (retention's). Lanes
-- whose head was pending are emptied; a lane whose head is in flight or
-- waiting for its retry keeps it.
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

-- queue_drop removes a queue and everything of it: its messages (live,
-- processed, dead), lanes, claim cursor, recovery cursor and built-in
-- retention policies. It refuses (SQLSTATE 55006, object_in_use; nothing
-- changed) while a message of the queue is in flight -- leased, lease not
-- expired -- unless p_force: stop the queue's workers first (or pause it and
-- let them finish). Their late calls then fail as calls to an unknown queue
-- (22023) and change nothing. Returns the number of live messages deleted.
--
-- A send in progress makes the drop wait (sends hold the queue row FOR KEY
-- SHARE, a shared lock: they do not wait for each other) and its message
-- goes with the rest; a send after the drop fails as a send to an unknown
-- queue. No message outlives its queue (TestQueueDropRacesSend).
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
    -- Flow control's gates (in the order every taker of several gates uses),
    -- grants and bucket before the messages: the lock order of every verb
    -- (flow.sql).
    PERFORM 1 FROM flow_gate g WHERE g.queue = p_queue ORDER BY g.grp COLLATE "C", g.stripe FOR UPDATE;
    DELETE FROM flow_grant f WHERE f.queue = p_queue;
    DELETE FROM flow_bucket b WHERE b.queue = p_queue;
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
    DELETE FROM group_cursor c WHERE c.queue = p_queue;
    -- the gates last, and the grants again: the message DELETE above waited
    -- for the claims in progress, which may have made a gate or a grant
    DELETE FROM flow_gate f WHERE f.queue = p_queue;
    DELETE FROM flow_grant f WHERE f.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
