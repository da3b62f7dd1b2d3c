-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due
--                       and those waiting in their lane behind its head)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row that a claim could take: pending or failed and
--                       visible now, not waiting in a lane; NULL when none
--                       (a lane's wait shows in lane_stats, lane.sql)
--   paused              queue_pause'd: claims return nothing (queue_ops.sql)
--   lanes               lanes with messages, or blocked (lane.sql)
--   blocked_lanes       lanes stopped by a dead letter (lane_dead 'block'),
--                       waiting for dead_requeue or lane_skip
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, queue_counts, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION queue_counts(p_queue text, p_now timestamptz)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval, lanes bigint, blocked_lanes bigint)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    -- the name rule (validate.sql) for a name that is no queue's: a queue
    -- created before 0.34's rule is still counted (the view lists every queue)
    IF NOT EXISTS (SELECT 1 FROM queue q WHERE q.name = p_queue) THEN
        PERFORM _check_text('p_queue', p_queue);
    END IF;
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now
                                       AND m.parked_until IS DISTINCT FROM 'infinity')
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    SELECT count(*), count(*) FILTER (WHERE l.blocked_id IS NOT NULL) INTO lanes, blocked_lanes
      FROM lane l WHERE l.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

-- The monitor's signature: the clock is the owner's (tests pass p_now).
CREATE OR REPLACE FUNCTION queue_counts(p_queue text)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval, lanes bigint, blocked_lanes bigint)
LANGUAGE sql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$ SELECT * FROM queue_counts(p_queue, NULL::timestamptz) $$;

-- queue_rows: the queues as queue_stats shows them, read as S_owner (see
-- lease_rows, lease.sql, for why a view reads its table through a
-- function). queue_rows and queue_counts are granted to S_monitor and carry
-- no underscore: no role but S_owner executes an underscore function.
-- Counts only, no payloads: no per-queue right is needed. `WHERE queue = 'x'` on the view still filters the queues
-- before queue_counts is called: the filter applies to this function's
-- rows.
CREATE OR REPLACE FUNCTION queue_rows()
RETURNS TABLE (name text, kind text, paused boolean)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT q.name, q.kind, q.paused FROM queue q $$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age,
       q.paused,
       s.lanes,
       s.blocked_lanes
  FROM queue_rows() q
 CROSS JOIN LATERAL queue_counts(q.name) s;
