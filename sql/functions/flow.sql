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
-- Rate: a queue's rate ('N/s' or 'N/min') is a token bucket on the
-- database clock, one flow_bucket row per rated queue: a claim refills it
-- for the time since its last claim (N tokens a period, at most rate_burst
-- saved, N by default), takes at most as many messages as whole tokens and
-- spends one per message taken, in its transaction. The row is locked for
-- that; a claim that finds it locked takes nothing (SKIP LOCKED: claimers
-- never wait), and the next claim finds the tokens the first one left. So
-- over any span of time claims take at most N per period plus rate_burst.
--
-- queue_drop deletes a queue's slots and bucket with the queue.

-- _flow_allow: how many messages a claim of p_want at p_now may take, and
-- the free slots it takes for them (locked, lowest first; NULL without a
-- max_in_flight p_limit). None while a slot above the limit is held (the
-- limit was lowered). With a rate (p_per_second tokens a second, at most
-- p_burst saved), the queue's bucket is refilled for the time since it was
-- last, and locked: a claim that finds it locked by another takes nothing
-- rather than wait (SKIP LOCKED); _flow_claimed spends what was taken.
CREATE OR REPLACE FUNCTION _flow_allow(p_queue text, p_limit int, p_per_second double precision, p_burst int,
                                       p_want int, p_now timestamptz, OUT slots tid[], OUT allowed int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    allowed := p_want;
    IF p_limit IS NOT NULL THEN
        SELECT array_agg(f.ctid) INTO slots
          FROM (SELECT s.ctid FROM flow_slot s
                 WHERE s.queue = p_queue AND s.n <= p_limit AND (s.token IS NULL OR s.expires_at <= p_now)
                 ORDER BY s.n
                 LIMIT p_want
                   FOR UPDATE SKIP LOCKED) f
         WHERE NOT EXISTS (SELECT 1 FROM flow_slot h
                            WHERE h.queue = p_queue AND h.n > p_limit AND h.token IS NOT NULL AND h.expires_at > p_now);
        allowed := coalesce(cardinality(slots), 0);
        IF allowed = 0 THEN
            RETURN;
        END IF;
    END IF;
    IF p_per_second IS NOT NULL THEN
        UPDATE flow_bucket b
           SET tokens = least(p_burst, b.tokens + p_per_second * greatest(0, extract(epoch FROM p_now - b.at))),
               at = greatest(b.at, p_now)
         WHERE b.queue = p_queue
           AND b.ctid = (SELECT k.ctid FROM flow_bucket k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED)
        RETURNING least(allowed, floor(b.tokens)::int) INTO allowed;
        allowed := coalesce(allowed, 0);
    END IF;
END
$$;

-- _flow_claimed: the claim p_token took p_ids: each of the slots p_slots
-- (from _flow_allow; NULL: no limit) holds one of them, in order, until
-- p_until, the slots left over stay free; p_rated spends a token each.
CREATE OR REPLACE FUNCTION _flow_claimed(p_queue text, p_slots tid[], p_ids bigint[], p_token uuid, p_until timestamptz,
                                         p_rated boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_slots IS NOT NULL THEN
        UPDATE flow_slot s SET message_id = x.id, token = p_token, expires_at = p_until
          FROM unnest(p_slots[1:cardinality(p_ids)], p_ids) x(slot, id)
         WHERE s.queue = p_queue AND s.ctid = x.slot;
    END IF;
    IF p_rated THEN
        UPDATE flow_bucket b SET tokens = b.tokens - cardinality(p_ids) WHERE b.queue = p_queue;
    END IF;
END
$$;

-- _flow_free: the slots of the claim p_token that hold p_ids are free; a
-- NOTIFY on the queue's channel wakes the workers waiting for one (at
-- commit, and once per transaction: PostgreSQL folds equal notifications).
-- Not on Citus: there the verbs that free slots run on the worker node
-- that holds the queue, whose notifications no coordinator listener
-- hears, and a NOTIFY would make a two-phase commit fail (PostgreSQL cannot
-- PREPARE a transaction that ran NOTIFY); Workers find the slots at their
-- next poll.
CREATE OR REPLACE FUNCTION _flow_free(p_queue text, p_token uuid, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE flow_slot s SET message_id = NULL, token = NULL, expires_at = NULL
     WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids);
    IF FOUND AND NOT _citus_available() THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;

-- _flow_set: p_queue's slots for max_in_flight p_limit (NULL: none), and
-- its bucket for a rate (p_rated; a new bucket starts full: p_burst tokens).
CREATE OR REPLACE FUNCTION _flow_set(p_queue text, p_limit int, p_rated boolean, p_burst int, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_rated THEN
        INSERT INTO flow_bucket (queue, tokens, at) VALUES (p_queue, p_burst, p_now)
        ON CONFLICT (queue) DO UPDATE SET tokens = least(flow_bucket.tokens, excluded.tokens);
    ELSE
        DELETE FROM flow_bucket b WHERE b.queue = p_queue;
    END IF;
    IF p_limit IS NULL THEN
        DELETE FROM flow_slot s WHERE s.queue = p_queue;
        RETURN;
    END IF;
    -- Neither statement waits for a claim in progress: the slots that exist
    -- are not inserted again, and a free slot above the limit that a claim
    -- has locked stays (claims take no slot above the limit).
    INSERT INTO flow_slot (queue, n)
    SELECT p_queue, g FROM generate_series(1, p_limit) g
     WHERE NOT EXISTS (SELECT 1 FROM flow_slot e WHERE e.queue = p_queue AND e.n = g)
    ON CONFLICT (queue, n) DO NOTHING;
    DELETE FROM flow_slot s
     WHERE s.queue = p_queue
       AND s.ctid IN (SELECT f.ctid FROM flow_slot f
                       WHERE f.queue = p_queue AND f.n > p_limit AND (f.token IS NULL OR f.expires_at <= p_now)
                         FOR UPDATE SKIP LOCKED);
END
$$;
