-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row: pending or failed and visible now; NULL when none
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, _queue_stats, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its three statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests; within 10 years of the database clock, see _check_now);
-- NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION _queue_stats(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    PERFORM _check_now('p_now', p_now);
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now)
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age
  FROM queue q
 CROSS JOIN LATERAL _queue_stats(q.name) s;
