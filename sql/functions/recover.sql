-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch [, p_now]) RETURNS TABLE(recovered int, dead_lettered int)
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
-- It also deletes up to p_batch expired unique windows (send.sql).
--
-- Lanes (lane.sql): a released lane head stays its lane's head (the lane
-- keeps its order: the head is claimed again first). A head dead-lettered
-- here makes its lane move on or stop, by the queue's lane_dead, as in fail.
--
-- Traversal: keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
--
-- queue_recover needs manage on the queue (queue_rights.sql);
-- _queue_recover, the work itself, is what maintain() calls for every queue
-- (maintain_recovery.sql): recovery is not a right of whoever runs
-- maintenance, it is pgsweep's own housekeeping.
-- The clock is the owner's: admins call queue_recover(p_queue,
-- p_batch); the p_now overload, for tests, is S_owner's alone. A clock an
-- admin could move forward would recover leases that are still live.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    RETURN QUERY SELECT * FROM _queue_recover(p_queue, p_batch, p_now);
END
$$;

CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT * FROM queue_recover(p_queue, p_batch, NULL::timestamptz) $$;

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
    -- So do the places in the groups' rotation (group_cursor) of owners
    -- that have not claimed for a day, expired flow-control grants (flow.sql:
    -- they count for nothing, and a settle would remove them), and the gates
    -- of groups without a live grant (a group's next claim makes its gate
    -- again; one a claim holds is skipped), and the buckets of groups no
    -- claim took from for a minute: full again (a group rate's burst is its
    -- N, refilled each second or minute), the same as none (a group's next
    -- claim makes its bucket full).
    DELETE FROM group_cursor g WHERE g.queue = p_queue AND g.at < v_now - interval '1 day';
    DELETE FROM flow_grant g
     WHERE g.queue = p_queue
       AND g.ctid = ANY (ARRAY(SELECT f.ctid FROM flow_grant f WHERE f.queue = p_queue AND f.expires_at <= v_now
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
    DELETE FROM flow_gate g
     WHERE g.queue = p_queue
       AND g.ctid = ANY (ARRAY(SELECT k.ctid FROM flow_gate k
                                WHERE k.queue = p_queue AND k.grp <> ''
                                  AND NOT EXISTS (SELECT 1 FROM flow_grant f
                                                   WHERE f.queue = p_queue AND f.grp = k.grp AND f.expires_at > v_now)
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
    DELETE FROM flow_bucket b
     WHERE b.queue = p_queue AND b.grp <> '' AND b.at <= v_now - interval '1 minute'
       AND b.ctid = ANY (ARRAY(SELECT k.ctid FROM flow_bucket k
                                WHERE k.queue = p_queue AND k.grp <> '' AND k.at <= v_now - interval '1 minute'
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup, m.priority, m.grp
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority, grp)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup, d.priority, d.grp
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
