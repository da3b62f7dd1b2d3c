-- Dead letters: sending them back to their queue.
--
-- A dead letter is a message that used its last attempt. Once the cause is
-- fixed, an operator sends it back with dead_requeue: the row returns to
-- `message` as pending with its id, key, payload, headers and created_at, a
-- fresh set of attempts, and its last error kept for reference. It is due at
-- p_deliver_at (NULL = now; at most 10 years ahead, as for send). Being
-- older than the claim cursor, it is taken by the next rescan, within about
-- the queue's claim_rescan (see claim.sql).
--
-- Inbox keys: a dead letter holds its key (send refuses duplicates of it), so
-- requeueing is the way to process a dead inbox message again. A dead letter
-- whose key a live or processed row holds meanwhile (possible only for rows
-- left by an early release that did not refuse such duplicates yet) is left
-- where it is and not returned: requeueing it would process the message a
-- second time.
--
-- Lanes (lane.sql). A dead letter of a lane goes back into its lane. The
-- letter that stopped its lane (lane_dead 'block') becomes the lane's head
-- again: the lane resumes with it, then goes on in order. Any other letter
-- waits in its lane like the messages there, ordered by its created_at, so
-- it is handed out when the messages before it have left -- which usually
-- means next, being older than them. A lane that has no message and is not
-- blocked takes its oldest requeued letter as its head.
--
-- A letter comes back with its priority and its group; not with its unique key (the key
-- was free while the message was dead, and another message may hold it).
--
-- Returns the ids that were requeued. Ids that are not dead letters of the
-- queue (never were, already requeued, removed by retention) are ignored, so
-- a repeated call is harmless.
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
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane, x.priority, x.grp
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane, priority, grp)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane,
               d.priority, d.grp
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

-- dead_delete (admin; the queue's manage right): removes dead letters for
-- good. A letter that stops its lane (lane_dead 'block') goes, and the lane
-- moves on to its next message, as lane_skip does. An inbox letter's key
-- goes with it: a later send with that key is a new message. Returns the
-- ids deleted; ids that are not dead letters of the queue are ignored, so
-- a repeated call is harmless.
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
