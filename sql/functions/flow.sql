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
        IF EXISTS (SELECT 1 FROM flow_slot h WHERE h.queue = p_queue AND h.grp = '' AND h.n > p_limit AND h.expires_at > p_now) THEN
            RETURN 0;
        END IF;
        SELECT count(*)::int INTO v_room
          FROM (SELECT 1 FROM flow_slot s
                 WHERE s.queue = p_queue AND s.grp = '' AND s.expires_at <= p_now AND s.n <= p_limit
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
                 WHERE s.queue = p_queue AND s.grp = '' AND s.expires_at <= p_now AND s.n <= p_limit
                 ORDER BY s.expires_at, s.n
                 LIMIT p_want
                   FOR UPDATE SKIP LOCKED) f
         WHERE NOT EXISTS (SELECT 1 FROM flow_slot h
                            WHERE h.queue = p_queue AND h.grp = '' AND h.n > p_limit AND h.expires_at > p_now);
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
-- p_until, the slots left over stay free; so does each group slot p_gslots
-- for its id in p_gids (_flow_group_slots), when that id is one of p_ids;
-- p_rated spends a token each.
CREATE OR REPLACE FUNCTION _flow_claimed(p_queue text, p_slots tid[], p_ids bigint[], p_token uuid, p_until timestamptz,
                                         p_rated boolean, p_gslots tid[], p_gids bigint[])
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
    IF cardinality(p_gslots) > 0 THEN
        UPDATE flow_slot s SET message_id = x.id, token = p_token, expires_at = p_until
          FROM unnest(p_gslots, p_gids) x(slot, id)
         WHERE s.queue = p_queue AND s.ctid = x.slot AND x.id = ANY (p_ids);
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
-- free again, or gone when one of the queue's above its limit p_limit (it
-- was lowered; a group's stay, unused above its limit); a
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
    DELETE FROM flow_slot s
     WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids) AND s.grp = '' AND s.n > p_limit;
    v_gone := FOUND;
    UPDATE flow_slot s SET message_id = NULL, token = NULL, expires_at = '-infinity'
     WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids);
    IF FOUND OR v_gone THEN
        PERFORM _notify_local(p_queue);
    END IF;
END
$$;

-- _flow_set: the slots and the bucket of queue p_q (its row as
-- queue_configure just wrote it) at p_now: the queue's slots for its
-- max_in_flight (NULL: none), its groups' for their limits
-- (group_max_in_flight, group_overrides; none without either: their slots
-- go), its bucket for a rate (a new bucket starts full: rate_burst
-- tokens). p_leases: give the leases out now that hold no slot one each
-- (a limit was just set or changed).
CREATE OR REPLACE FUNCTION _flow_set(p_q queue, p_leases boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_limit int := p_q.max_in_flight;
    v_l record;
    v_n int;
    v_id bigint;
    v_token uuid;
    v_until timestamptz;
    v_grp text;
BEGIN
    IF p_q.rate IS NOT NULL THEN
        INSERT INTO flow_bucket (queue, tokens, at) VALUES (p_q.name, coalesce(p_q.rate_burst, p_q.rate), p_now)
        ON CONFLICT (queue) DO UPDATE SET tokens = least(flow_bucket.tokens, excluded.tokens);
    ELSE
        DELETE FROM flow_bucket b WHERE b.queue = p_q.name;
    END IF;
    IF v_limit IS NULL THEN
        DELETE FROM flow_slot s WHERE s.queue = p_q.name AND s.grp = '';
    ELSE
        -- Neither statement waits for a claim in progress: the slots that exist
        -- are not inserted again, and a free slot above the limit that a claim
        -- has locked stays (claims take no slot above the limit).
        INSERT INTO flow_slot (queue, grp, n)
        SELECT p_q.name, '', g FROM generate_series(1, v_limit) g
         WHERE NOT EXISTS (SELECT 1 FROM flow_slot e WHERE e.queue = p_q.name AND e.grp = '' AND e.n = g)
        ON CONFLICT (queue, grp, n) DO NOTHING;
        DELETE FROM flow_slot s
         WHERE s.queue = p_q.name
           AND s.ctid IN (SELECT f.ctid FROM flow_slot f
                           WHERE f.queue = p_q.name AND f.grp = '' AND f.n > v_limit AND f.expires_at <= p_now
                             FOR UPDATE SKIP LOCKED);
    END IF;
    -- the groups' free slots above their limits (none without one); the
    -- groups' first claims make their slots (_flow_group_slots)
    DELETE FROM flow_slot s
     WHERE s.queue = p_q.name
       AND s.ctid IN (SELECT f.ctid FROM flow_slot f
                       WHERE f.queue = p_q.name AND f.grp <> ''
                         AND (f.expires_at <= p_now OR _flow_group_limit(p_q, f.grp) IS NULL)
                         AND f.n > coalesce(_flow_group_limit(p_q, f.grp), 0)
                         FOR UPDATE SKIP LOCKED);
    IF NOT p_leases OR NOT _flow_slotted(p_q) THEN
        RETURN;
    END IF;
    -- The leases without a slot they need (claimed while the queue or their
    -- group had no limit): one each, a free one first, else a new one above
    -- the limit and every slot (so that claims wait for it as for a lowered
    -- limit). A read of the queue's messages: queue_configure is rare.
    FOR v_l IN
        SELECT m.id, m.token, m.visible_at AS until, k.grp, k.lim
          FROM message m
         CROSS JOIN LATERAL (VALUES ('', v_limit), (m.grp, _flow_group_limit(p_q, m.grp))) k(grp, lim)
         WHERE m.queue = p_q.name AND m.status = 'processing' AND m.visible_at > p_now
           AND k.grp IS NOT NULL AND k.lim IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM flow_slot s
                            WHERE s.queue = p_q.name AND s.grp = k.grp AND s.token = m.token AND s.message_id = m.id)
         ORDER BY k.grp, m.id
    LOOP
        SELECT f.n INTO v_n
          FROM flow_slot f
         WHERE f.queue = p_q.name AND f.grp = v_l.grp AND f.n <= v_l.lim AND f.expires_at <= p_now
         ORDER BY f.n
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            -- a group's slot not made yet, else one above the limit
            SELECT coalesce((SELECT g FROM generate_series(1, v_l.lim) g
                              WHERE NOT EXISTS (SELECT 1 FROM flow_slot e WHERE e.queue = p_q.name AND e.grp = v_l.grp AND e.n = g)
                              ORDER BY g LIMIT 1),
                            greatest(v_l.lim, max(f.n)) + 1)
              INTO v_n FROM flow_slot f WHERE f.queue = p_q.name AND f.grp = v_l.grp;
            INSERT INTO flow_slot (queue, grp, n) VALUES (p_q.name, v_l.grp, v_n);
        END IF;
        v_id := v_l.id;
        v_token := v_l.token;
        v_until := v_l.until;
        v_grp := v_l.grp;
        UPDATE flow_slot s SET message_id = v_id, token = v_token, expires_at = v_until
         WHERE s.queue = p_q.name AND s.grp = v_grp AND s.n = v_n;
    END LOOP;
END
$$;


-- Groups. send's p_group puts a message in a group of its queue (a tenant,
-- a customer, a downstream host). Its rows are in message_group (queue,
-- grp, priority DESC, created_at, id), not in the claim indexes of the
-- messages without a group, and claims take turns between the groups:
--
-- The rotation (_claim_groups). A claim walks the queue's groups that have
-- rows in message_group in name order, starting after the group the last
-- claim stopped at (claim_cursor.group_after) and going round once: a
-- group's turn takes its best due rows (priority, then age) up to the
-- turn's quantum, locked FOR UPDATE SKIP LOCKED. The first round gives
-- each group one row; if the batch is not full then, each next round gives
-- every group that still had rows an equal part of what is left. Finding
-- the next group is one descent of message_group (a skip scan: the rows
-- waiting in a group are never walked), so a group with 100,000 due
-- messages and a group with 10 are each one step of the round, and a claim
-- of n rows serves n groups one row each before any group gets a second.
-- Claims run concurrently: each goes round from the shared position and
-- the rows another claim locked are skipped, so a group gives each claim
-- at most its quantum. Fairness is per turn, not per message size or
-- processing time (round-robin, not weighted: a slow tenant's messages
-- take their turns like the others).
--
-- The messages without a group take part as one more participant: a claim
-- first leaves them their share of the batch (one part in groups served by
-- the last claim + 1: claim_cursor.group_count), takes the groups' part,
-- lets the ungrouped messages fill the batch (claim.sql's passes), and
-- goes round the groups again when room is left. A queue whose messages
-- have no group pays one probe of message_group when a claim's batch is
-- not full, nothing otherwise.
--
-- Group limits. group_max_in_flight (queue_configure) bounds the leases of
-- every group of the queue, group_overrides one group's ({"acme":
-- {"max_in_flight": 10}}: the override wins, changeable live). They are
-- slots like the queue's own (flow_slot rows whose grp is the group; the
-- queue's have ''), made by the first claim that needs them: a group's turn
-- looks for at most its limit minus its held slots, and the claim then
-- locks a free slot of the group for each row it took (_flow_group_slots),
-- keeping only the rows it got one for. A group at its limit costs its
-- turn one count of its held slots, and its waiting rows are never read.
-- Settle verbs free a row's slots, the queue's and its group's, by token
-- (_flow_free); renew keeps a lease only while every slot it needs is its
-- own. A lowered group limit takes no lease away: the group gets no turn
-- until its leases are below the new limit.
--
-- Lanes and groups. A message may have both: its lane decides which of the
-- lane's messages is claimable (only the head is in message_group; the
-- rest wait parked), its group when its turn comes and how many of the
-- group's messages are in flight. A lane is a group with limit one whose
-- order is FIFO; a group is a lane that lets several through at once, in
-- priority and age order.

-- _flow_group_limit: the max_in_flight of group p_grp of queue p_q (NULL:
-- none): its override, else the queue's group_max_in_flight.
CREATE OR REPLACE FUNCTION _flow_group_limit(p_q queue, p_grp text)
RETURNS int
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce((p_q.group_overrides -> p_grp ->> 'max_in_flight')::int, p_q.group_max_in_flight)
$$;

-- _flow_slotted: the verbs of queue p_q keep slots (a limit on the queue or
-- on its groups).
CREATE OR REPLACE FUNCTION _flow_slotted(p_q queue)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_q.max_in_flight IS NOT NULL OR p_q.group_max_in_flight IS NOT NULL OR p_q.group_overrides IS NOT NULL
$$;

-- _check_group: NULL (no group) or a name of 1 to 200 characters (the name
-- rule of _check_text).
CREATE OR REPLACE FUNCTION _check_group(p_arg text, p_group text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_group IS NOT NULL THEN
        PERFORM _check_text(p_arg, p_group, 200);
    END IF;
END
$$;

-- _claim_groups: the rotation (above) for a claim of queue p_q at p_now
-- that wants p_want more rows, starting after group p_from (NULL: the
-- first), the rows it holds already (p_taken, their groups p_taken_grps)
-- excluded and counted against their groups' limits; p_max is the queue's
-- max_attempts. Returns the rows in the order taken, their groups, and the
-- last group of the first round (where the next claim starts).
CREATE OR REPLACE FUNCTION _claim_groups(p_q queue, p_from text, p_want int, p_taken bigint[], p_taken_grps text[],
                                         p_now timestamptz, OUT tids tid[], OUT ids bigint[], OUT grps text[],
                                         OUT last_grp text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_quantum int := 1;
    v_served int;
    v_from text;
    v_to text;
    v_t tid[];
    v_i bigint[];
    v_g text[];
    v_all_i bigint[] := coalesce(p_taken, '{}');
    v_all_g text[] := coalesce(p_taken_grps, '{}');
    v_limited boolean := p_q.group_max_in_flight IS NOT NULL OR p_q.group_overrides IS NOT NULL;
BEGIN
    tids := '{}';
    ids := '{}';
    grps := '{}';
    FOR v_round IN 1 .. 8 LOOP
        v_served := 0;
        -- one round: the groups after p_from, then from the first to p_from
        FOR v_half IN 1 .. 2 LOOP
            EXIT WHEN cardinality(ids) >= p_want;
            IF v_half = 1 THEN
                v_from := coalesce(p_from, '');
                v_to := NULL;
            ELSIF p_from IS NULL THEN
                EXIT;
            ELSE
                v_from := '';
                v_to := p_from;
            END IF;
            WITH RECURSIVE r(g, k) AS (
                SELECT (SELECT min(s.grp) FROM message s
                         WHERE s.queue = p_q.name AND s.parked_until IS NULL AND s.grp IS NOT NULL AND s.grp > v_from), 1
                UNION ALL
                SELECT (SELECT min(s.grp) FROM message s
                         WHERE s.queue = p_q.name AND s.parked_until IS NULL AND s.grp IS NOT NULL AND s.grp > r.g), r.k + 1
                  FROM r
                 WHERE r.g IS NOT NULL AND (v_to IS NULL OR r.g < v_to)
            )
            SELECT array_agg(x.ctid ORDER BY x.k, x.priority DESC, x.created_at, x.id),
                   array_agg(x.id ORDER BY x.k, x.priority DESC, x.created_at, x.id),
                   array_agg(x.grp ORDER BY x.k, x.priority DESC, x.created_at, x.id)
              INTO v_t, v_i, v_g
              FROM (SELECT r.k, t.ctid, t.id, t.grp, t.priority, t.created_at
                      FROM r
                     CROSS JOIN LATERAL (
                           SELECT s.ctid, s.id, s.grp, s.priority, s.created_at
                             FROM message s
                            WHERE s.queue = p_q.name AND s.parked_until IS NULL AND s.grp = r.g
                              AND s.visible_at <= p_now AND s.attempt < p_q.max_attempts
                              AND NOT s.id = ANY (v_all_i)
                            ORDER BY s.priority DESC, s.created_at, s.id
                            LIMIT CASE WHEN NOT v_limited OR _flow_group_limit(p_q, r.g) IS NULL THEN v_quantum
                                       ELSE greatest(0, least(v_quantum,
                                                _flow_group_limit(p_q, r.g)
                                                - (SELECT count(*)::int FROM flow_slot f
                                                    WHERE f.queue = p_q.name AND f.grp = r.g AND f.expires_at > p_now)
                                                - coalesce(cardinality(array_positions(v_all_g, r.g)), 0))) END
                              FOR UPDATE SKIP LOCKED) t
                     WHERE r.g IS NOT NULL AND (v_to IS NULL OR r.g <= v_to)
                     LIMIT p_want - cardinality(ids)) x;
            IF v_i IS NOT NULL THEN
                tids := tids || v_t;
                ids := ids || v_i;
                grps := grps || v_g;
                v_all_i := v_all_i || v_i;
                v_all_g := v_all_g || v_g;
                v_served := v_served + (SELECT count(DISTINCT u) FROM unnest(v_g) u)::int;
                IF v_round = 1 THEN
                    last_grp := v_g[cardinality(v_g)];
                END IF;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(ids) >= p_want OR v_served = 0;
        -- the next round: an equal part of what is left for each group served
        v_quantum := ceil((p_want - cardinality(ids))::numeric / v_served)::int;
    END LOOP;
END
$$;

-- _flow_group_slots: of the rows p_ids (groups p_grps, in the order a claim
-- of queue p_q took them at p_now), those it keeps: a row of a limited
-- group keeps a free slot of its group (locked SKIP LOCKED; the group's
-- missing slots are made first, up to its limit), the others keep none.
-- Returns the ids kept, in order, and the slots (slots, slot_ids: the id
-- each slot is for).
CREATE OR REPLACE FUNCTION _flow_group_slots(p_q queue, p_ids bigint[], p_grps text[], p_now timestamptz,
                                             OUT kept bigint[], OUT slots tid[], OUT slot_ids bigint[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_g record;
    v_s tid[];
BEGIN
    slots := '{}';
    slot_ids := '{}';
    FOR v_g IN SELECT u.g, _flow_group_limit(p_q, u.g) AS lim, array_agg(u.id ORDER BY u.o) AS ids
                 FROM unnest(p_ids, p_grps) WITH ORDINALITY u(id, g, o)
                WHERE u.g IS NOT NULL
                GROUP BY u.g
                ORDER BY u.g COLLATE "C" LOOP
        CONTINUE WHEN v_g.lim IS NULL;
        SELECT array_agg(f.ctid) INTO v_s
          FROM (SELECT s.ctid FROM flow_slot s
                 WHERE s.queue = p_q.name AND s.grp = v_g.g AND s.expires_at <= p_now AND s.n <= v_g.lim
                 ORDER BY s.expires_at, s.n
                 LIMIT cardinality(v_g.ids)
                   FOR UPDATE SKIP LOCKED) f;
        IF coalesce(cardinality(v_s), 0) < cardinality(v_g.ids) THEN
            -- the group's first claims: its slots up to the limit (a claim
            -- making the same ones at once waits for this one's commit)
            WITH made AS (
                INSERT INTO flow_slot AS s (queue, grp, n)
                SELECT p_q.name, v_g.g, g.n FROM generate_series(1, v_g.lim) g(n)
                 WHERE NOT EXISTS (SELECT 1 FROM flow_slot e WHERE e.queue = p_q.name AND e.grp = v_g.g AND e.n = g.n)
                 LIMIT cardinality(v_g.ids) - coalesce(cardinality(v_s), 0)
                ON CONFLICT (queue, grp, n) DO NOTHING
                RETURNING s.ctid
            )
            SELECT coalesce(v_s, '{}') || coalesce(array_agg(made.ctid), '{}') INTO v_s FROM made;
        END IF;
        IF cardinality(v_s) > 0 THEN
            slots := slots || v_s;
            slot_ids := slot_ids || v_g.ids[1:cardinality(v_s)];
        END IF;
    END LOOP;
    SELECT array_agg(u.id ORDER BY u.o) INTO kept
      FROM unnest(p_ids, p_grps) WITH ORDINALITY u(id, g, o)
     WHERE u.g IS NULL OR _flow_group_limit(p_q, u.g) IS NULL OR u.id = ANY (slot_ids);
END
$$;

-- _check_group_overrides: queue_configure's group_overrides p_given merged
-- into the overrides p_have: an object whose keys are group names (the
-- name rule of _check_group), each value {"max_in_flight": 1..100000} to
-- set that group's limit or null to remove its override; null instead of
-- the object removes them all. At most 10000 groups have overrides. NULL
-- when none is left.
CREATE OR REPLACE FUNCTION _check_group_overrides(p_have jsonb, p_given jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_e record;
    v_out jsonb := coalesce(p_have, '{}');
    v_lim int;
BEGIN
    IF jsonb_typeof(p_given) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_given) <> 'object' THEN
        RAISE EXCEPTION 'group_overrides must be an object of groups, each {"max_in_flight": 1..100000} or null (no override), got %', p_given
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_e IN SELECT e.key, e.value FROM jsonb_each(p_given) e ORDER BY e.key LOOP
        PERFORM _check_group(format('group_overrides key %s', to_jsonb(v_e.key)), v_e.key);
        IF jsonb_typeof(v_e.value) = 'null' THEN
            v_out := v_out - v_e.key;
            CONTINUE;
        END IF;
        IF jsonb_typeof(v_e.value) <> 'object' OR EXISTS (SELECT 1 FROM jsonb_object_keys(v_e.value) k WHERE k <> 'max_in_flight')
           OR jsonb_typeof(v_e.value->'max_in_flight') IS DISTINCT FROM 'number' THEN
            RAISE EXCEPTION 'group_overrides.% must be {"max_in_flight": 1..100000} or null (no override), got %', v_e.key, v_e.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_lim := (v_e.value->>'max_in_flight')::int; -- 1.5: 22P02, named by queue_configure
        PERFORM _check_int(format('group_overrides.%s.max_in_flight', v_e.key), v_lim, 1, 100000);
        v_out := v_out || jsonb_build_object(v_e.key, jsonb_build_object('max_in_flight', v_lim));
    END LOOP;
    IF (SELECT count(*) FROM jsonb_object_keys(v_out)) > 10000 THEN
        RAISE EXCEPTION 'group_overrides: at most 10000 groups may have an override, got %', (SELECT count(*) FROM jsonb_object_keys(v_out))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN nullif(v_out, '{}');
END
$$;

-- group_stats: the groups of queue p_queue with messages, those waiting
-- longest first, at most p_limit (1..10000): in_flight (leases not yet
-- expired), waiting (every other message of the group: due, scheduled,
-- retrying, behind a lane's head), the age of the oldest waiting one, and
-- the group's max_in_flight (its override, else group_max_in_flight; NULL:
-- none). A read of the queue's grouped messages: a monitor's call, not a
-- hot path.
CREATE OR REPLACE FUNCTION group_stats(p_queue text, p_limit int DEFAULT 1000)
RETURNS TABLE (group_name text, in_flight bigint, waiting bigint, oldest_age interval, max_in_flight int)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    v_q := _queue_get(p_queue);
    RETURN QUERY
    SELECT g.grp, g.in_flight, g.waiting, g.oldest_age, _flow_group_limit(v_q, g.grp)
      FROM (SELECT m.grp,
                   count(*) FILTER (WHERE m.status = 'processing' AND m.visible_at > v_now) AS in_flight,
                   count(*) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS waiting,
                   v_now - min(m.created_at) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS oldest_age
              FROM message m
             WHERE m.queue = p_queue AND m.grp IS NOT NULL
             GROUP BY m.grp) g
     ORDER BY g.oldest_age DESC NULLS LAST, g.grp
     LIMIT p_limit;
END
$$;
