-- queue_stats: one row per queue. Each count is a separate statement per
-- queue (LATERAL on the queue row), never one scan across queues.
--   pending             status pending (including scheduled ones not yet due)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age of the oldest due, unleased row (NULL when none)
-- Counting is O(rows): meant for dashboards and psql, not hot paths.
CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.processing, 0) AS processing,
       coalesce(l.failed, 0) AS failed,
       (SELECT count(*) FROM message_processed p WHERE p.queue = q.name) AS processed,
       (SELECT count(*) FROM message_dead d WHERE d.queue = q.name) AS dead,
       clock_timestamp() - l.oldest_due AS oldest_pending_age
  FROM queue q
  LEFT JOIN LATERAL (
        SELECT count(*) FILTER (WHERE m.status = 'pending') AS pending,
               count(*) FILTER (WHERE m.status = 'processing') AS processing,
               count(*) FILTER (WHERE m.status = 'failed') AS failed,
               min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= clock_timestamp()) AS oldest_due
          FROM message m
         WHERE m.queue = q.name
       ) l ON true;
