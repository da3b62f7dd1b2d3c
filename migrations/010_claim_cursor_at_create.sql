-- pgsweep 0.10: queue_create creates the queue's claim cursor (at the head of
-- the queue), and queues without one get it now. Before, the first claims of
-- a new queue raced to insert the cursor row, and all but one waited for the
-- winner's transaction: the one case in which claims waited for each other.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
SELECT q.name, '-infinity', -9223372036854775808, '-infinity' FROM queue q
ON CONFLICT (queue) DO NOTHING;

{{ template "functions/queue.sql" . }}
