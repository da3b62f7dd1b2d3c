-- claim: lease up to p_batch due messages of one queue to p_owner.
--
-- Candidates: rows with visible_at <= now and attempt < max_attempts. visible_at
-- is the delivery/retry time of pending and failed rows and the lease expiry
-- of processing rows, so expired leases are taken by the same scan. A row that
-- used its last attempt (attempt >= max_attempts) is never handed out again:
-- fail dead-letters it, and queue_recover dead-letters one whose lease expired.
--
-- One statement: UPDATE … WHERE id = ANY (ARRAY(SELECT … ORDER BY created_at,
-- id LIMIT n FOR UPDATE SKIP LOCKED)). The ARRAY() sub-select is an InitPlan,
-- run exactly once; a plain UPDATE … FROM (sub-select) can be planned with the
-- sub-select on the inner side of a nested loop and re-run per outer row,
-- locking and returning more than n rows (seen here). The inner scan walks message_claim (queue,
-- created_at, id) in order and stops after n rows; rows another claimer has
-- locked are skipped, not waited for; a row updated by a concurrent claim that
-- committed meanwhile is re-checked against the predicate before it is locked,
-- so two claimers never get the same row. The UPDATE changes only columns no
-- index holds (status, owner, attempt, visible_at), so it is a HOT update.
--
-- The clock is read once into v_now (scale-out rule: plain values in UPDATE).
-- p_lease NULL means the queue's lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
BEGIN
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default) INTO v_max, v_lease FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    -- Rows come back in the order of the ids (the primary key scan); the
    -- Go client sorts them by (created_at, id).
    RETURN QUERY
    UPDATE message m
       SET status = 'processing', owner = p_owner, attempt = m.attempt + 1, visible_at = v_until
     WHERE m.queue = p_queue
       AND m.id = ANY (ARRAY(
               SELECT s.id
                 FROM message s
                WHERE s.queue = p_queue AND s.visible_at <= v_now AND s.attempt < v_max
                ORDER BY s.created_at, s.id
                LIMIT p_batch
                  FOR UPDATE SKIP LOCKED))
    RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at;
END
$$;

CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT '30 seconds')
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
