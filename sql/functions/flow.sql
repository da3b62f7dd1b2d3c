-- Flow control: a queue's max_in_flight and rate (queue_configure).
--
-- max_in_flight: slots, not a counter. A limited queue has a row per slot
-- in flow_slot (n = 1..max_in_flight). A slot is free when its expires_at
-- has passed: '-infinity' once its message is settled, the lease's expiry
-- while it holds one, so a crashed worker's slots free themselves when its
-- leases end, with no reconciliation. A claim first reads how many slots
-- are free (no lock: _flow_room) and scans for at most that many messages;
-- then it locks that many free slots FOR UPDATE SKIP LOCKED (_flow_allow),
-- keeps as many messages as it got slots, and writes into each slot the
-- message, the claim's token and the lease's expiry (_flow_claimed), in its
-- own transaction. So a claim locks no slot it does not use -- but in a
-- race, when another claim took the slots between the two reads; then it
-- moves no claim cursor, and the rows it let go are found by the next
-- claim. complete, fail, release and dead_letter settle their claim's slots
-- (by token and id, before they touch the messages: the lock order of every
-- verb) and notify the queue's channel, so waiting workers claim again;
-- renew locks its claim's slots, renews the leases whose slot is still
-- theirs, and extends those slots to the new expiry.
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
-- Changing the limit: raising it adds slots at once. Leases already out
-- when a limit is set (or claimed by a claim that read the queue just
-- before) get a slot each, above the limit when the free ones run out.
-- Lowering it removes the free slots above the new limit; leases are never
-- taken away, so the slots above it that are held stay until their
-- messages are settled (their slots then go) or their leases end, and
-- until then claims take nothing (one probe of the primary key past the
-- limit), and renew does not bring back such a slot once it expired: the
-- queue never holds more than the new limit because of a claim made after
-- the change. NULL removes the limit and every slot.
--
-- Rate: a queue's rate ('N/s' or 'N/min') is a token bucket on the
-- database clock, one flow_bucket row per rated queue: a claim refills it
-- for the time since its last claim (N tokens a period, at most rate_burst
-- saved, N by default), takes at most as many messages as whole tokens and
-- spends one per message taken, in its transaction. The row is locked for
-- that, once the claim has found its messages; a claim that finds it locked
-- keeps nothing (SKIP LOCKED: claimers never wait), and the next claim
-- finds the tokens the first one left. So over any span of time claims take
-- at most N per period plus rate_burst. A claim inside a longer transaction
-- holds the bucket until it commits: rated queues want autocommit claims.
--
-- queue_drop deletes a queue's slots and bucket with the queue, before its
-- messages (the lock order above).

-- _flow_room: how many messages a claim of p_want at p_now may look for:
-- the free slots within the limit p_limit (none while a slot above it is
-- held), the whole tokens of the bucket (p_per_second, p_burst). Read
-- without locks; _flow_allow then locks what the claim keeps.
CREATE OR REPLACE FUNCTION _flow_room(p_queue text, p_limit int, p_per_second double precision, p_burst int,
                                      p_want int, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
-- plpgsql, not sql: Citus cannot plan a SQL function's statements on a
-- distributed table with its parameters in them
DECLARE
    v_room int := p_want;
BEGIN
    IF p_limit IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM flow_slot h WHERE h.queue = p_queue AND h.n > p_limit AND h.expires_at > p_now) THEN
            RETURN 0;
        END IF;
        SELECT count(*)::int INTO v_room
          FROM (SELECT 1 FROM flow_slot s
                 WHERE s.queue = p_queue AND s.expires_at <= p_now AND s.n <= p_limit
                 LIMIT p_want) f;
    END IF;
    IF p_per_second IS NOT NULL AND v_room > 0 THEN
        SELECT least(v_room, floor(least(p_burst, b.tokens + p_per_second * greatest(0, extract(epoch FROM p_now - b.at))))::int)
          INTO v_room
          FROM flow_bucket b WHERE b.queue = p_queue;
        v_room := coalesce(v_room, 0);
    END IF;
    RETURN v_room;
END
$$;

-- _flow_allow: of the p_want messages a claim found at p_now, how many it
-- keeps, and the free slots it takes for them (locked, lowest expiry
-- first; NULL without a limit p_limit). With a rate (p_per_second tokens a
-- second, at most p_burst saved) the queue's bucket is refilled for the
-- time since it was last, and locked; a claim that finds it locked by
-- another keeps nothing rather than wait (SKIP LOCKED). _flow_claimed
-- spends what was kept.
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
                 WHERE s.queue = p_queue AND s.expires_at <= p_now AND s.n <= p_limit
                 ORDER BY s.expires_at, s.n
                 LIMIT p_want
                   FOR UPDATE SKIP LOCKED) f
         WHERE NOT EXISTS (SELECT 1 FROM flow_slot h
                            WHERE h.queue = p_queue AND h.n > p_limit AND h.expires_at > p_now);
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

-- _notify_local: the queue's NOTIFY (wakes the Workers that LISTEN), but not
-- on Citus. There the verbs that call it run on the worker node that holds
-- the queue, whose notifications no coordinator listener hears, and a
-- NOTIFY would make a two-phase commit fail (PostgreSQL cannot PREPARE a
-- transaction that ran NOTIFY): Workers find what changed at their next
-- poll. _citus_delegated does not count it as a NOTIFY.
CREATE OR REPLACE FUNCTION _notify_local(p_queue text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT _citus_available() THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;

-- _flow_free: the slots of the claim p_token that hold p_ids are settled:
-- free again, or gone when above the limit p_limit (it was lowered); a
-- NOTIFY wakes the Workers waiting for one (_notify_local; at commit, once
-- per transaction: PostgreSQL folds equal notifications).
CREATE OR REPLACE FUNCTION _flow_free(p_queue text, p_token uuid, p_ids bigint[], p_limit int)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_gone boolean;
BEGIN
    DELETE FROM flow_slot s WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids) AND s.n > p_limit;
    v_gone := FOUND;
    UPDATE flow_slot s SET message_id = NULL, token = NULL, expires_at = '-infinity'
     WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids);
    IF FOUND OR v_gone THEN
        PERFORM _notify_local(p_queue);
    END IF;
END
$$;

-- _flow_set: p_queue's slots for max_in_flight p_limit (NULL: none), and
-- its bucket for a rate (p_rated; a new bucket starts full: p_burst
-- tokens). p_leases: give the leases out now that hold no slot one each
-- (the limit was just set or changed).
CREATE OR REPLACE FUNCTION _flow_set(p_queue text, p_limit int, p_leases boolean, p_rated boolean, p_burst int, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
    v_tokens uuid[];
    v_untils timestamptz[];
    v_free int[];
    v_top int;
    v_id bigint;
    v_token uuid;
    v_until timestamptz;
    v_n int;
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
                       WHERE f.queue = p_queue AND f.n > p_limit AND f.expires_at <= p_now
                         FOR UPDATE SKIP LOCKED);
    IF NOT p_leases THEN
        RETURN;
    END IF;
    -- The leases without a slot (claimed while the queue had no limit): one
    -- each, free ones first, then new ones above the limit and every slot
    -- (so that claims wait for them as for a lowered limit). A read of the
    -- queue's messages: queue_configure is rare.
    SELECT array_agg(m.id ORDER BY m.id), array_agg(m.token ORDER BY m.id), array_agg(m.visible_at ORDER BY m.id)
      INTO v_ids, v_tokens, v_untils
      FROM message m
     WHERE m.queue = p_queue AND m.status = 'processing' AND m.visible_at > p_now
       AND NOT EXISTS (SELECT 1 FROM flow_slot s WHERE s.queue = p_queue AND s.token = m.token AND s.message_id = m.id);
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(f.n ORDER BY f.n) INTO v_free
      FROM (SELECT s.n FROM flow_slot s WHERE s.queue = p_queue AND s.n <= p_limit AND s.expires_at <= p_now
              FOR UPDATE SKIP LOCKED) f;
    SELECT greatest(p_limit, max(s.n)) INTO v_top FROM flow_slot s WHERE s.queue = p_queue;
    FOR i IN 1 .. cardinality(v_ids) LOOP
        -- plain values in the statements (Citus: no bare array element in a SET)
        v_id := v_ids[i];
        v_token := v_tokens[i];
        v_until := v_untils[i];
        IF i <= coalesce(cardinality(v_free), 0) THEN
            v_n := v_free[i];
        ELSE
            v_top := v_top + 1;
            v_n := v_top;
            INSERT INTO flow_slot (queue, n) VALUES (p_queue, v_n);
        END IF;
        UPDATE flow_slot s SET message_id = v_id, token = v_token, expires_at = v_until
         WHERE s.queue = p_queue AND s.n = v_n;
    END LOOP;
END
$$;
