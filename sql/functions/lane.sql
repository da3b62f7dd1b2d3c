-- Ordered lanes (DESIGN.md, "Ordered lanes"; docs/queues.md, "Ordered lanes").
--
-- A message sent with a lane (send's p_lane, send_batch's p_lanes) belongs to
-- that lane of its queue. A lane hands out one message at a time, oldest
-- first by (created_at, id): the next becomes claimable only when the one
-- before it has left `message` (completed, dead-lettered, cancelled or
-- purged). Different lanes, and messages without a lane, are claimed in
-- parallel as before.
--
-- The head. At most one message of a lane is its head; every other one waits
-- parked with parked_until = 'infinity'. A parked row is out of the claim
-- index (message_claim is partial on parked_until IS NULL, claim.sql), and the
-- claim's promotion of parked rows (parked_until <= now) never reaches
-- infinity, so a message waiting behind its head costs a claim nothing: the
-- claim does not know lanes at all, it only ever sees heads. The head itself
-- is an ordinary message: pending (due or scheduled), in flight, or failed and
-- waiting for its retry -- the lane waits meanwhile (head-of-line blocking, the
-- price of the order). Recovery of an expired lease keeps it the head.
--
-- Why 'infinity' and not a lane column in the claim index: a claim scans one
-- index in (created_at, id) order and takes what it can lock; filtering out
-- the non-heads there would make every claim walk them (every message
-- waiting behind a head, on every claim). Parked at infinity they are not
-- in that index. The promotion (parked_until back to NULL, or to
-- the message's own delivery time when it was scheduled for later) happens in
-- the transaction of the statement that made the head leave. Its cost: one
-- probe of message_lane and one UPDATE per message, and that UPDATE is not
-- HOT (the row enters the claim index), so a lane message costs about three
-- times an unordered one (docs/benchmarks.md, "Ordered lanes").
-- A new head usually lies behind the claim cursor (claim.sql): the
-- promotion moves the cursor back to the oldest new head, so the next claims
-- find it from the cursor on, not in their pass from the head of the queue.
--
-- The lane row. Table lane holds one row per lane that has messages (or is
-- blocked): blocked_id and last_at, the created_at of the newest message
-- sent to it. A lane row that is not blocked always has a head, so the row's
-- existence says whether a new message waits; the head itself is not
-- recorded (that would be one more row version per message). Its row lock is
-- what serialises a lane:
--  * send locks it (_lane_lock) before it decides whether its message is the
--    head (the lane had no row: no message, not blocked) or waits, and holds it
--    until its transaction ends. Sends to one lane therefore serialise, and
--    created_at = greatest(now, last_at) with an id drawn after the lock
--    keeps (created_at, id) increasing in lock order, which is commit order:
--    a lane hands out its messages in the order their sends committed.
--  * a head that leaves locks it too (_lane_after) and promotes the oldest
--    waiting message (_lane_next: one lookup and one UPDATE by id for all
--    the lanes of a completion). A send that is still open when the head
--    leaves makes the promotion wait for it (then it sees its message): keep
--    transactions that send to a lane short. Without the lock a head could
--    leave between a send's "there is a head" and its commit, and the new
--    message would wait behind nothing, forever.
--  * the row goes when the lane is empty (no message, not blocked), so the
--    table holds only active lanes; queue_stats counts them.
-- Advisory locks would be no guard (DESIGN: never the only one); the row is
-- the truth, and under Citus it lives with its queue.
--
-- Lock order: lane rows first, in byte order of their names (ORDER BY name
-- COLLATE "C": one order whatever the database's collation, used by every
-- statement that locks several lane rows: send_batch, _lane_after -- so
-- complete, fail, recovery, claim_ids' dead-lettering --, dead_requeue,
-- dead_delete, queue_cancel, queue_purge, queue_drop), then the waiting
-- messages of those lanes. complete, fail and recovery hold only their own
-- in-flight heads when they take the lane locks; cancel and purge lock the
-- lanes before they delete; queue_drop deletes the messages first (waiting
-- for completions in progress) and then locks the lanes. A transaction that
-- sends to several lanes with single sends takes their locks in the order it
-- sends: send them in byte order of their names, or in one send_batch (Two
-- transactions that lock lanes in opposite orders may deadlock: PostgreSQL
-- detects it and fails one, to be retried.)
--
-- A dead head (its last attempt failed, or its lease expired on it): with the
-- queue's lane_dead 'move_on' (the default) the lane moves on to its next
-- message; with 'block' the lane stops, blocked_id names the dead letter, and
-- its messages wait until dead_requeue puts that letter back at the head of
-- its lane or lane_skip(p_queue, p_lane) moves on without it (dead.sql).

-- _check_lane: NULL (no lane) or a non-empty name of at most 200 characters.
CREATE OR REPLACE FUNCTION _check_lane(p_arg text, p_lane text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lane IS NOT NULL AND (p_lane = '' OR length(p_lane) > 200) THEN
        PERFORM _check_text(p_arg, p_lane, 200);
    END IF;
    IF p_lane IS NOT NULL THEN PERFORM _check_text(p_arg, p_lane, 200); END IF;
END
$$;

-- _lane_lock locks a lane's row, creating it when the lane has none (created
-- true: the lane had no message and was not blocked). The row lock is held
-- until the caller's transaction ends. A row deleted meanwhile (its lane
-- emptied) is created again.
CREATE OR REPLACE FUNCTION _lane_lock(p_queue text, p_lane text, p_now timestamptz,
                                      OUT created boolean, OUT blocked_id bigint, OUT last_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    LOOP
        INSERT INTO lane AS l (queue, name, last_at) VALUES (p_queue, p_lane, p_now)
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING true INTO created;
        IF created THEN
            last_at := p_now;
            RETURN;
        END IF;
        SELECT l.blocked_id, l.last_at INTO blocked_id, last_at
          FROM lane l WHERE l.queue = p_queue AND l.name = p_lane
           FOR UPDATE;
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- _lane_busy: a lane whose row the caller holds locked, not created by it --
-- is a message of it handed out next (blocked, or it has a head)? A lane row
-- that is not blocked has a head (the invariant every verb keeps), unless a
-- message was deleted by hand: then the lane's oldest message becomes its
-- head here (and the lane is busy), or, when it has none, the lane is free.
-- The head is normally the lane's oldest message: the probe reads one or
-- two entries of message_lane.
CREATE OR REPLACE FUNCTION _lane_busy(p_queue text, p_lane text, p_blocked bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_blocked IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM message m
                WHERE m.queue = p_queue AND m.lane = p_lane AND m.parked_until IS DISTINCT FROM 'infinity') THEN
        RETURN true;
    END IF;
    RETURN _lane_next(p_queue, ARRAY[p_lane], p_now, false) > 0;
END
$$;

-- _lane_next: the lanes p_lanes (locked by the caller, none blocked) have no
-- head. The oldest message of each, by (created_at, id), becomes its head:
-- claimable now, or parked until its delivery time when it was scheduled for
-- later -- one statement for all the lanes. A lane with no message left loses
-- its row when p_drop_empty (the lane is empty); otherwise (a send is about
-- to add one) it keeps it. Returns how many were promoted.
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
           (array_agg(x.created_at ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0 AND x.grp IS NULL))[1],
           (array_agg(x.id ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0 AND x.grp IS NULL))[1],
           array_agg(x.priority) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL),
           array_agg(x.created_at) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL),
           array_agg(x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL)
      INTO v_ids, v_tids, v_promoted, v_later, v_at, v_low_at, v_low_id, v_p_lvls, v_p_ats, v_p_ids
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.ctid, m.id, m.visible_at, m.created_at, m.priority, m.grp FROM message m
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

-- _lane_after: the heads of the lanes p_lanes left `message` (completed,
-- dead-lettered, cancelled, purged): the callers know, because only a
-- lane's head is ever in flight (complete, fail, recovery) and a cancelled
-- or purged message that was not parked until infinity was its lane's head.
-- Each lane moves on to its next message -- unless p_block (the queue's
-- lane_dead is 'block') and its head was dead-lettered (its id is in
-- p_dead): then the lane stops, blocked by that dead letter. Lanes are
-- locked in name order (see the header).
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

-- lane_skip: a lane stopped by a dead letter (lane_dead 'block') moves on
-- without it: its next message becomes the head. The dead letter stays in
-- message_dead (dead_requeue can still send it back; it then waits its turn
-- like any message of the lane). Returns true when the lane was blocked,
-- false (nothing changed) otherwise -- also for a lane that does not exist.
CREATE OR REPLACE FUNCTION lane_skip(p_queue text, p_lane text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocked bigint;
BEGIN
    PERFORM _check_text('p_lane', p_lane, 200);
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    SELECT l.blocked_id INTO v_blocked FROM lane l WHERE l.queue = p_queue AND l.name = p_lane FOR UPDATE;
    IF v_blocked IS NULL THEN
        RETURN false;
    END IF;
    UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = p_lane;
    IF _lane_next(p_queue, ARRAY[p_lane], clock_timestamp(), true) > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN true;
END
$$;

-- _lane_figures: what lane_stats and browse_lanes show of the lanes
-- p_lanes of p_queue, in p_lanes' order (a name without a lane row is left
-- out):
--   blocked       stopped by a dead letter (lane_dead 'block')
--   waiting       messages waiting behind the head (or behind the block);
--                 counted up to p_cap (NULL: all of them), waiting_more
--                 says there are more than p_cap
--   head_id       the head; for a blocked lane, the dead letter it waits for
--   head_attempt  the head's attempts so far (the dead letter's attempts)
--   head_state    pending, scheduled (pending, due later), processing,
--                 failed (waiting for its retry) or dead (blocked)
--   oldest_age    age (since it was sent) of the lane's oldest message, the
--                 dead letter's included
-- Per lane: a probe of the lane's row, of its head and oldest message
-- (message_lane, which holds the lane's messages in (created_at, id)
-- order), of the dead letter, and the count of its waiting messages.
CREATE OR REPLACE FUNCTION _lane_figures(p_queue text, p_lanes text[], p_cap int, p_now timestamptz)
RETURNS TABLE (lane text, blocked boolean, waiting bigint, waiting_more boolean, head_id bigint, head_attempt int,
               head_state text, oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    SELECT l.name, l.blocked_id IS NOT NULL, least(w.n, p_cap::bigint), coalesce(w.n > p_cap, false),
           coalesce(l.blocked_id, h.id), coalesce(d.attempts, h.attempt),
           CASE WHEN l.blocked_id IS NOT NULL THEN 'dead'
                WHEN h.status = 'pending' AND h.parked_until > p_now THEN 'scheduled'
                ELSE h.status END,
           p_now - least(d.created_at, o.created_at)
      FROM unnest(p_lanes) WITH ORDINALITY u(name, ord)
      JOIN lane l ON l.queue = p_queue AND l.name = u.name
      LEFT JOIN LATERAL (SELECT m.id, m.attempt, m.status, m.parked_until FROM message m
                          WHERE m.queue = p_queue AND m.lane = l.name AND m.parked_until IS DISTINCT FROM 'infinity'
                          ORDER BY m.created_at, m.id LIMIT 1) h ON true
      LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
     CROSS JOIN LATERAL (SELECT count(*) AS n
                           FROM (SELECT 1 FROM message c
                                  WHERE c.queue = p_queue AND c.lane = l.name AND c.parked_until = 'infinity'
                                  LIMIT p_cap::bigint + 1) c) w
      LEFT JOIN LATERAL (SELECT c.created_at FROM message c WHERE c.queue = p_queue AND c.lane = l.name
                          ORDER BY c.created_at, c.id LIMIT 1) o ON true
     ORDER BY u.ord;
END
$$;

-- lane_stats: the lanes of one queue that most need an operator, at most
-- p_limit (1..10000) of them: blocked lanes first, then the lanes whose head
-- is oldest, with the figures of _lane_figures (waiting counted in full).
-- It reads every lane of the queue to choose them (a probe of each lane's
-- first messages): browse_lanes (browse_lanes.sql) pages through the lanes
-- reading only the page's.
CREATE OR REPLACE FUNCTION lane_stats(p_queue text, p_limit int DEFAULT 100)
RETURNS TABLE (queue text, lane text, waiting bigint, head_id bigint, head_attempt int, head_state text,
               oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    PERFORM _queue_get(p_queue);
    RETURN QUERY
    SELECT p_queue, f.lane, f.waiting, f.head_id, f.head_attempt, f.head_state, f.oldest_age
      FROM _lane_figures(p_queue,
               ARRAY(SELECT l.name
                       FROM lane l
                       LEFT JOIN LATERAL (SELECT m.created_at FROM message m
                                           WHERE m.queue = p_queue AND m.lane = l.name
                                             AND m.parked_until IS DISTINCT FROM 'infinity'
                                           ORDER BY m.created_at, m.id LIMIT 1) h ON true
                       LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
                      WHERE l.queue = p_queue
                      ORDER BY l.blocked_id IS NULL, coalesce(d.created_at, h.created_at) NULLS LAST, l.name
                      LIMIT p_limit),
               NULL, v_now) f;
END
$$;
