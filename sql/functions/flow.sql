-- Flow control: a queue's max_in_flight (queue_configure), the most messages
-- of the queue leased at once across every worker and replica.
--
-- Slots, not a counter. A limited queue has max_in_flight rows in flow_slot
-- (n = 1..max_in_flight). A claim takes free slots FOR UPDATE SKIP LOCKED
-- before it takes messages, takes at most as many messages as it got slots,
-- and writes into each slot the message it holds, the claim's token and the
-- lease's expiry, in the claim's own transaction. A slot is free when it
-- holds nothing or its lease expired: a crashed worker's slots free
-- themselves when its leases end, with no reconciliation. complete, fail,
-- release and dead_letter empty the slots of their claim (by token and id)
-- and notify the queue's channel, so waiting workers claim again;
-- renew extends a slot with its message's lease, in one statement, and only
-- while the slot is still the message's (a slot that expired and was taken
-- by another claim is not given back: its message is not renewed, so the
-- lease ends and the count stays exact).
--
-- So the messages leased at once never exceed the slots: every leased
-- message was claimed with a slot whose expiry is its lease's, a slot is
-- held by one claim at a time (its row lock, then its token), and claimers
-- never wait for each other (SKIP LOCKED): with every slot taken, a claim
-- returns fewer rows, or none.
--
-- A queue without a limit has no slot rows, and its verbs never read
-- flow_slot: the limit is read with the queue row they read anyway.
--
-- Changing the limit: raising it adds slots at once. Lowering it removes
-- the free slots above the new limit; leases are never taken away, so the
-- slots above it that are held stay until their messages are settled or
-- their leases end, and until then claims take nothing (one probe of the
-- primary key past the limit, which finds nothing once they are gone): the
-- queue never holds more than the new limit because of a claim made after
-- the change. NULL removes the limit and every slot.
--
-- queue_drop deletes a queue's slots with the queue.

-- _flow_take: up to p_want free slots of p_queue at p_now (locked, lowest
-- first), as ctids for _flow_hold; NULL when none is free, or while a slot
-- above the limit is held (the limit was lowered).
CREATE OR REPLACE FUNCTION _flow_take(p_queue text, p_limit int, p_want int, p_now timestamptz)
RETURNS tid[]
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT array_agg(f.ctid)
      FROM (SELECT s.ctid FROM flow_slot s
             WHERE s.queue = p_queue AND s.n <= p_limit AND (s.token IS NULL OR s.expires_at <= p_now)
             ORDER BY s.n
             LIMIT p_want
               FOR UPDATE SKIP LOCKED) f
     WHERE NOT EXISTS (SELECT 1 FROM flow_slot h
                        WHERE h.queue = p_queue AND h.n > p_limit AND h.token IS NOT NULL AND h.expires_at > p_now)
$$;

-- _flow_hold: the slots p_slots (from _flow_take) now hold p_ids, one each
-- in order, under the claim's p_token until p_until; the slots left over
-- stay free.
CREATE OR REPLACE FUNCTION _flow_hold(p_queue text, p_slots tid[], p_ids bigint[], p_token uuid, p_until timestamptz)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    UPDATE flow_slot s SET message_id = x.id, token = p_token, expires_at = p_until
      FROM unnest(p_slots[1:cardinality(p_ids)], p_ids) x(slot, id)
     WHERE s.queue = p_queue AND s.ctid = x.slot
$$;

-- _flow_free: the slots of the claim p_token that hold p_ids are free; a
-- NOTIFY on the queue's channel wakes the workers waiting for one (at
-- commit, and once per transaction: PostgreSQL folds equal notifications).
CREATE OR REPLACE FUNCTION _flow_free(p_queue text, p_token uuid, p_ids bigint[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH f AS (
        UPDATE flow_slot s SET message_id = NULL, token = NULL, expires_at = NULL
         WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids)
        RETURNING 1
    )
    SELECT pg_notify(notify_channel(), p_queue) WHERE EXISTS (SELECT 1 FROM f)
$$;

-- _flow_set: p_queue's slots for max_in_flight p_limit (NULL: none).
CREATE OR REPLACE FUNCTION _flow_set(p_queue text, p_limit int, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_limit IS NULL THEN
        DELETE FROM flow_slot s WHERE s.queue = p_queue;
        RETURN;
    END IF;
    INSERT INTO flow_slot (queue, n) SELECT p_queue, g FROM generate_series(1, p_limit) g
    ON CONFLICT (queue, n) DO NOTHING;
    DELETE FROM flow_slot s
     WHERE s.queue = p_queue AND s.n > p_limit AND (s.token IS NULL OR s.expires_at <= p_now);
END
$$;
