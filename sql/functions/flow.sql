-- Flow control: a queue's max_in_flight and rate, its groups' limits
-- (queue_configure; groups below, at "Groups").
--
-- max_in_flight: grants under gates. A claim that keeps rows of a limited
-- queue records them in a grant (flow_grant: the claim's token, the ids it
-- holds, until when: the lease's expiry), and the messages leased at once
-- are the ids of the grants not yet expired. The check and the grant are
-- made under a gate's row lock (flow_gate), so two claims never both take
-- the same room. A queue's limit is split over up to eight gates (stripes:
-- 20 = 3+3+3+3+2+2+2+2), each with its own grants, so up to eight claims
-- decide at once; a claim locks the gates it needs FOR UPDATE SKIP LOCKED,
-- starting from one its session picks, and never waits: a claim that gets
-- no gate keeps nothing. It costs a claim a lock, a sum over the gate's few
-- grants and an insert -- per claim, not per message -- and settling costs
-- an update of the claim's grant: the ids settled leave it (by token; an
-- empty grant goes). An expired grant counts for nothing: a crashed
-- worker's room comes back when its leases end, with no reconciliation.
--
-- A claim first reads its room without locks (_flow_room: the limit minus
-- the ids of the live grants, and the bucket's whole tokens) and looks for
-- at most that many rows; then it takes what it keeps under the gates
-- (_flow_keep). A claim that lost a race keeps fewer rows, and then moves
-- no claim cursor: the rows it let go are found by the next claim.
--
-- complete, fail, release and dead_letter take their ids out of their
-- claim's grants first (the lock order of every verb: grants, then
-- messages) and notify the queue's channel, so waiting workers claim again.
-- renew renews a lease only while the grants that hold it are live: an
-- expired grant's room may have been taken, and is never brought back.
--
-- Changing the limit rebalances the queue's live grants over its gates
-- (_flow_set, under every gate's lock: it waits for the claims deciding):
-- each gate holds at most its share, and what is left over -- the leases
-- above a lowered limit -- is held by the first gate, so claims take
-- nothing until the queue is below its new limit; leases are never taken
-- away. Setting a limit on a busy queue gives the leases already out
-- grants the same way. NULL removes the limit, the gates and the grants.
-- A queue without a limit has no gate, and its verbs never read the grants:
-- the limits are read with the queue row they read anyway.
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
-- holds its gates and the bucket until it commits (and renews of grants
-- under those gates wait for it): limited and rated queues want autocommit
-- claims.
--
-- Lock order: gates (several at once in order of grp COLLATE "C", then
-- stripe: renew, _flow_set, queue_drop; claims take theirs SKIP LOCKED and
-- never wait), then grants (renew, the settle verbs), then messages.
-- queue_drop takes every gate of the queue, deletes the grants and the
-- bucket, then the messages (which waits for the claims in progress), then
-- the gates and any grant such a claim made.

-- _flow_stripes: the gates a limit p_limit is split over; _flow_cap: the
-- share of gate p_stripe (1.._flow_stripes).
CREATE OR REPLACE FUNCTION _flow_stripes(p_limit int)
RETURNS int
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT least(8, p_limit) $$;

CREATE OR REPLACE FUNCTION _flow_cap(p_limit int, p_stripe int)
RETURNS int
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_limit / least(8, p_limit) + CASE WHEN p_stripe <= p_limit % least(8, p_limit) THEN 1 ELSE 0 END $$;

-- _flow_used: the messages held at p_now by the live grants of p_grp (''
-- the queue's own) of queue p_queue, of gate p_stripe (NULL: every gate).
CREATE OR REPLACE FUNCTION _flow_used(p_queue text, p_grp text, p_stripe int, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
-- plpgsql, not sql: Citus cannot plan a SQL function's statements on a
-- distributed table with its parameters in them
DECLARE
    v_used int;
BEGIN
    SELECT coalesce(sum(cardinality(g.ids)), 0)::int INTO v_used
      FROM flow_grant g
     WHERE g.queue = p_queue AND g.grp = p_grp AND (p_stripe IS NULL OR g.stripe = p_stripe) AND g.expires_at > p_now;
    RETURN v_used;
END
$$;

-- _flow_room: how many messages a claim of p_want at p_now may look for:
-- the room under the limit p_limit, the whole tokens of the bucket
-- (p_per_second, p_burst). Read without locks; _flow_keep then takes what
-- the claim keeps.
CREATE OR REPLACE FUNCTION _flow_room(p_queue text, p_limit int, p_per_second double precision, p_burst int,
                                      p_want int, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_room int := p_want;
BEGIN
    IF p_limit IS NOT NULL THEN
        v_room := least(v_room, p_limit - _flow_used(p_queue, '', NULL, p_now));
    END IF;
    IF p_per_second IS NOT NULL AND v_room > 0 THEN
        SELECT least(v_room, floor(least(p_burst, b.tokens + p_per_second * greatest(0, extract(epoch FROM p_now - b.at))))::int)
          INTO v_room
          FROM flow_bucket b WHERE b.queue = p_queue;
        v_room := coalesce(v_room, 0);
    END IF;
    RETURN greatest(v_room, 0);
END
$$;

-- _flow_gates: the room a claim may take under the limit p_limit of p_grp
-- ('' the queue's own) of queue p_queue at p_now, for at most p_want
-- messages: the gates it took and the room under each, in the order to
-- fill them. A gate is taken FOR UPDATE SKIP LOCKED (from one the
-- session picks; a group's first claim makes the group's gate), and its
-- turns bumped: a REPEATABLE READ or SERIALIZABLE claim whose snapshot
-- predates another claim's turn fails with 40001 instead of counting old
-- grants. A gate's share (cap) is read under its lock, so a claim that read
-- the queue before its limit changed uses the new shares. A gate locked by
-- another claim is skipped, not waited for. While the queue holds more
-- than a gate's share on some gate (the leases above a lowered limit,
-- _flow_set), a claim takes room only with every gate locked, up to the
-- limit minus all the live grants.
CREATE OR REPLACE FUNCTION _flow_gates(p_queue text, p_grp text, p_limit int, p_want int, p_now timestamptz,
                                       OUT stripes int[], OUT rooms int[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n int := CASE WHEN p_grp = '' THEN _flow_stripes(p_limit) ELSE 1 END; -- a group: one gate
    v_s int;
    v_cap int;
    v_room int;
    v_got int := 0;
    v_gate record;
BEGIN
    stripes := '{}';
    rooms := '{}';
    FOR v_i IN 0 .. v_n - 1 LOOP
        EXIT WHEN v_got >= p_want;
        v_s := 1 + (pg_backend_pid() + v_i) % v_n;
        -- the lock first, then the turn in a statement of its own (it sees
        -- the row's latest version, which a claim that committed since this
        -- statement began may have made)
        PERFORM 1 FROM flow_gate k WHERE k.queue = p_queue AND k.grp = p_grp AND k.stripe = v_s FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE flow_gate g SET turns = g.turns + 1
             WHERE g.queue = p_queue AND g.grp = p_grp AND g.stripe = v_s
            RETURNING g.cap INTO v_cap;
        ELSE
            CONTINUE WHEN p_grp = ''; -- the queue's gates exist (_flow_set): locked by another claim
            -- a group's gate is made by its first claim (one that makes it at
            -- the same moment waits for this one's commit); one that exists
            -- was locked by another claim
            -- (a gate that exists, locked or being removed by recovery, is
            -- skipped without waiting; the share is read from the queue row
            -- now, not from the claim's earlier read)
            CONTINUE WHEN EXISTS (SELECT 1 FROM flow_gate k WHERE k.queue = p_queue AND k.grp = p_grp AND k.stripe = v_s);
            INSERT INTO flow_gate (queue, grp, stripe, cap, turns)
            SELECT p_queue, p_grp, v_s, _flow_group_limit_of(q.group_overrides, q.group_max_in_flight, p_grp), 1
              FROM queue q WHERE q.name = p_queue
            ON CONFLICT DO NOTHING
            RETURNING cap INTO v_cap;
            CONTINUE WHEN NOT FOUND OR v_cap IS NULL;
        END IF;
        CONTINUE WHEN v_cap <= 0;
        IF p_grp = '' AND EXISTS (SELECT 1 FROM flow_gate k
                                   WHERE k.queue = p_queue AND k.grp = ''
                                     AND k.cap < (SELECT coalesce(sum(cardinality(f.ids)), 0) FROM flow_grant f
                                                   WHERE f.queue = p_queue AND f.grp = '' AND f.stripe = k.stripe
                                                     AND f.expires_at > p_now)) THEN
            -- above a lowered limit: every gate, or nothing
            IF (SELECT count(*) FROM (SELECT 1 FROM flow_gate k WHERE k.queue = p_queue AND k.grp = '' AND k.stripe <> v_s
                                         FOR UPDATE SKIP LOCKED) x)
               < (SELECT count(*) FROM flow_gate k WHERE k.queue = p_queue AND k.grp = '' AND k.stripe <> v_s) THEN
                RETURN;
            END IF;
            -- each gate's room under its share, at most the limit minus all
            v_room := least(p_want, (SELECT sum(k.cap) FROM flow_gate k WHERE k.queue = p_queue AND k.grp = '')::int
                                    - _flow_used(p_queue, '', NULL, p_now));
            FOR v_gate IN SELECT k.stripe, k.cap - _flow_used(p_queue, '', k.stripe, p_now) AS free
                            FROM flow_gate k WHERE k.queue = p_queue AND k.grp = '' AND k.cap > 0 ORDER BY k.stripe LOOP
                EXIT WHEN v_got >= v_room;
                CONTINUE WHEN v_gate.free <= 0;
                stripes := stripes || v_gate.stripe;
                rooms := rooms || least(v_gate.free, v_room - v_got);
                v_got := v_got + least(v_gate.free, v_room - v_got);
            END LOOP;
            RETURN;
        END IF;
        v_room := least(p_want - v_got, v_cap - _flow_used(p_queue, p_grp, v_s, p_now));
        IF v_room > 0 THEN
            stripes := stripes || v_s;
            rooms := rooms || v_room;
            v_got := v_got + v_room;
        END IF;
    END LOOP;
END
$$;

-- _flow_keep: of the rows p_ids a claim p_token of queue p_q found at p_now
-- (in the order it took them; the grouped ones p_gids with their groups
-- p_ggrps), those it keeps, in order: a row of a limited group only with
-- room under its group's gate, every row only with room under the queue's
-- gates and a token of its bucket. It records what it keeps: a grant per
-- gate, held until p_until, and the tokens spent.
CREATE OR REPLACE FUNCTION _flow_keep(p_q queue, p_ids bigint[], p_gids bigint[], p_ggrps text[], p_token uuid,
                                      p_until timestamptz, p_now timestamptz)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kept bigint[] := p_ids;
    v_g record;
    v_gate record;
    v_allowed int;
    v_group_ids bigint[] := '{}';
    v_group_grps text[] := '{}';
    v_rate double precision := p_q.rate / extract(epoch FROM p_q.rate_per);
BEGIN
    -- the groups' gates, in name order (one lock order)
    IF (p_q.group_max_in_flight IS NOT NULL OR p_q.group_overrides IS NOT NULL) AND cardinality(p_gids) > 0 THEN
        FOR v_g IN SELECT u.g, _flow_group_limit(p_q, u.g) AS lim, array_agg(u.id ORDER BY u.o) AS ids
                     FROM unnest(p_gids, p_ggrps) WITH ORDINALITY u(id, g, o)
                    GROUP BY u.g
                    ORDER BY u.g COLLATE "C" LOOP
            CONTINUE WHEN v_g.lim IS NULL;
            SELECT f.stripes, f.rooms INTO v_gate FROM _flow_gates(p_q.name, v_g.g, v_g.lim, cardinality(v_g.ids), p_now) f;
            v_allowed := coalesce((SELECT sum(r) FROM unnest(v_gate.rooms) r), 0)::int;
            IF v_allowed < cardinality(v_g.ids) THEN
                v_kept := ARRAY(SELECT k FROM unnest(v_kept) WITH ORDINALITY x(k, o)
                                 WHERE NOT k = ANY (v_g.ids[v_allowed + 1:]) ORDER BY o);
            END IF;
            IF v_allowed > 0 THEN
                v_group_ids := v_group_ids || v_g.ids[1:v_allowed];
                v_group_grps := v_group_grps || array_fill(v_g.g, ARRAY[v_allowed]);
            END IF;
        END LOOP;
    END IF;
    -- the queue's gates
    IF p_q.max_in_flight IS NOT NULL AND cardinality(v_kept) > 0 THEN
        SELECT f.stripes, f.rooms INTO v_gate FROM _flow_gates(p_q.name, '', p_q.max_in_flight, cardinality(v_kept), p_now) f;
        v_kept := v_kept[1:coalesce((SELECT sum(r) FROM unnest(v_gate.rooms) r), 0)::int];
    END IF;
    -- the bucket
    IF v_rate IS NOT NULL AND cardinality(v_kept) > 0 THEN
        UPDATE flow_bucket b
           SET tokens = least(coalesce(p_q.rate_burst, p_q.rate), b.tokens + v_rate * greatest(0, extract(epoch FROM p_now - b.at))),
               at = greatest(b.at, p_now)
         WHERE b.queue = p_q.name
           AND b.ctid = (SELECT k.ctid FROM flow_bucket k WHERE k.queue = p_q.name FOR UPDATE SKIP LOCKED)
        RETURNING least(cardinality(v_kept), floor(b.tokens)::int) INTO v_allowed;
        v_kept := v_kept[1:coalesce(v_allowed, 0)];
        IF cardinality(v_kept) > 0 THEN
            UPDATE flow_bucket b SET tokens = b.tokens - cardinality(v_kept) WHERE b.queue = p_q.name;
        END IF;
    END IF;
    IF cardinality(v_kept) = 0 THEN
        RETURN v_kept;
    END IF;
    -- the grants of what is kept: the queue's, filling its gates in order
    IF p_q.max_in_flight IS NOT NULL THEN
        INSERT INTO flow_grant (queue, grp, stripe, token, ids, expires_at)
        SELECT p_q.name, '', x.stripe, p_token, v_kept[x.upto - x.room + 1:least(x.upto, cardinality(v_kept))], p_until
          FROM (SELECT s.stripe, s.room, sum(s.room) OVER (ORDER BY s.o)::int AS upto
                  FROM unnest(v_gate.stripes, v_gate.rooms) WITH ORDINALITY s(stripe, room, o)) x
         WHERE x.upto - x.room < cardinality(v_kept);
    END IF;
    -- and each group's
    IF cardinality(v_group_ids) > 0 THEN
        INSERT INTO flow_grant (queue, grp, stripe, token, ids, expires_at)
        SELECT p_q.name, u.g, 1, p_token, array_agg(u.id ORDER BY u.id), p_until
          FROM unnest(v_group_ids, v_group_grps) u(id, g)
         WHERE u.id = ANY (v_kept)
         GROUP BY u.g;
    END IF;
    RETURN v_kept;
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
-- _flow_free: the claim p_token settled p_ids (complete, fail, release,
-- dead_letter): they leave its grants, an empty grant goes, and a NOTIFY
-- wakes the Workers waiting for room (_notify_local; at commit, once per
-- transaction: PostgreSQL folds equal notifications). Whether or not each
-- message was still the claim's: a lease that was not had expired, and its
-- grant with it.
CREATE OR REPLACE FUNCTION _flow_free(p_queue text, p_token uuid, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    -- the claim's grants in order: settles of one claim running at once
    -- (a Worker completes its handlers' messages as they finish) would
    -- otherwise lock two grants in opposite orders
    PERFORM 1 FROM flow_grant g
     WHERE g.queue = p_queue AND g.token = p_token AND g.ids && p_ids
     ORDER BY g.grp COLLATE "C", g.stripe
       FOR UPDATE;
    UPDATE flow_grant g SET ids = ARRAY(SELECT x FROM unnest(g.ids) x WHERE NOT x = ANY (p_ids))
     WHERE g.queue = p_queue AND g.token = p_token AND g.ids && p_ids;
    IF FOUND THEN
        DELETE FROM flow_grant g WHERE g.queue = p_queue AND g.token = p_token AND cardinality(g.ids) = 0;
        PERFORM _notify_local(p_queue);
    END IF;
END
$$;

-- _flow_set: the gates, grants and bucket of queue p_q (its row as
-- queue_configure just wrote it) at p_now. The queue's gates for its
-- max_in_flight (none without one: its gates and grants go); the groups'
-- gates and grants go when the queue has no group limit left; the bucket
-- for a rate (a new bucket starts full: rate_burst tokens). p_leases (a
-- limit was just set or changed): under every gate's lock, the leases out
-- that no live grant holds get one (leases claimed while the queue or
-- their group had no limit), and the queue's live grants are spread over
-- its gates again (header).
CREATE OR REPLACE FUNCTION _flow_set(p_q queue, p_leases boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_limit int := p_q.max_in_flight;
    v_tokens uuid[];
    v_ids bigint[];
    v_untils timestamptz[];
BEGIN
    IF p_q.rate IS NOT NULL THEN
        INSERT INTO flow_bucket (queue, tokens, at) VALUES (p_q.name, coalesce(p_q.rate_burst, p_q.rate), p_now)
        ON CONFLICT (queue) DO UPDATE SET tokens = least(flow_bucket.tokens, excluded.tokens);
    ELSE
        DELETE FROM flow_bucket b WHERE b.queue = p_q.name;
    END IF;
    -- every gate, in one order: the claims deciding now finish first
    -- (claims never wait for a gate, settles take none)
    PERFORM 1 FROM flow_gate g WHERE g.queue = p_q.name ORDER BY g.grp COLLATE "C", g.stripe FOR UPDATE;
    IF p_q.group_max_in_flight IS NULL AND p_q.group_overrides IS NULL THEN
        DELETE FROM flow_grant g WHERE g.queue = p_q.name AND g.grp <> '';
        DELETE FROM flow_gate g WHERE g.queue = p_q.name AND g.grp <> '';
    ELSE
        UPDATE flow_gate g SET cap = coalesce(_flow_group_limit(p_q, g.grp), 0) WHERE g.queue = p_q.name AND g.grp <> '';
    END IF;
    IF v_limit IS NULL THEN
        DELETE FROM flow_grant g WHERE g.queue = p_q.name AND g.grp = '';
        DELETE FROM flow_gate g WHERE g.queue = p_q.name AND g.grp = '';
    ELSE
        -- eight gates; those past the limit's stripes have no share
        INSERT INTO flow_gate (queue, grp, stripe, cap)
        SELECT p_q.name, '', s, CASE WHEN s <= _flow_stripes(v_limit) THEN _flow_cap(v_limit, s) ELSE 0 END
          FROM generate_series(1, 8) s
        ON CONFLICT (queue, grp, stripe) DO UPDATE SET cap = excluded.cap;
    END IF;
    IF NOT p_leases OR NOT _flow_limited(p_q.max_in_flight, p_q.group_max_in_flight, p_q.group_overrides) THEN
        RETURN;
    END IF;
    -- The leases out that no live grant holds (a read of the queue's
    -- messages: queue_configure is rare): a grant for each claim, on the
    -- queue's first gate and on their group's.
    INSERT INTO flow_grant (queue, grp, stripe, token, ids, expires_at)
    SELECT p_q.name, k.grp, 1, m.token, array_agg(m.id ORDER BY m.id), max(m.visible_at)
      FROM message m
     CROSS JOIN LATERAL (VALUES ('', v_limit), (m.grp, _flow_group_limit(p_q, m.grp))) k(grp, lim)
     WHERE m.queue = p_q.name AND m.status = 'processing' AND m.visible_at > p_now
       AND k.grp IS NOT NULL AND k.lim IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM flow_grant g
                        WHERE g.queue = p_q.name AND g.grp = k.grp AND g.token = m.token AND m.id = ANY (g.ids)
                          AND g.expires_at > p_now)
     GROUP BY k.grp, m.token
    ON CONFLICT (queue, grp, stripe, token) DO UPDATE -- an expired grant is not brought back: replaced
       SET ids = CASE WHEN flow_grant.expires_at > p_now THEN flow_grant.ids || excluded.ids ELSE excluded.ids END,
           expires_at = CASE WHEN flow_grant.expires_at > p_now THEN greatest(flow_grant.expires_at, excluded.expires_at)
                             ELSE excluded.expires_at END;
    -- the gates of the groups holding grants (renew takes a grant's gate)
    INSERT INTO flow_gate (queue, grp, stripe, cap)
    SELECT DISTINCT p_q.name, f.grp, 1, coalesce(_flow_group_limit(p_q, f.grp), 0)
      FROM flow_grant f WHERE f.queue = p_q.name AND f.grp <> ''
    ON CONFLICT DO NOTHING;
    IF v_limit IS NULL THEN
        RETURN;
    END IF;
    -- The queue's live grants over its gates again: their ids in order,
    -- gate by gate up to its share, the rest (above the limit) on the first.
    SELECT array_agg(u.token ORDER BY u.token, u.id), array_agg(u.id ORDER BY u.token, u.id),
           array_agg(u.expires_at ORDER BY u.token, u.id)
      INTO v_tokens, v_ids, v_untils
      FROM (SELECT g.token, x.id, g.expires_at FROM flow_grant g, unnest(g.ids) x(id)
             WHERE g.queue = p_q.name AND g.grp = '' AND g.expires_at > p_now) u;
    DELETE FROM flow_grant g WHERE g.queue = p_q.name AND g.grp = '';
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO flow_grant (queue, grp, stripe, token, ids, expires_at)
    SELECT p_q.name, '', coalesce(c.stripe, 1), u.token, array_agg(u.id ORDER BY u.id), max(u.until)
      FROM unnest(v_tokens, v_ids, v_untils) WITH ORDINALITY u(token, id, until, k)
      LEFT JOIN LATERAL (SELECT s.stripe
                           FROM (SELECT s, sum(_flow_cap(v_limit, s)) OVER (ORDER BY s) AS upto
                                   FROM generate_series(1, _flow_stripes(v_limit)) s) s(stripe, upto)
                          WHERE s.upto >= u.k
                          ORDER BY s.stripe LIMIT 1) c ON true
     GROUP BY coalesce(c.stripe, 1), u.token;
END
$$;

-- Groups. send's p_group puts a message in a group of its queue (a tenant,
-- a customer, a downstream host). Its rows are in message_group (queue,
-- grp, priority DESC, created_at, id), not in the claim indexes of the
-- messages without a group, and claims take turns between the groups:
--
-- The rotation (_claim_groups). A claim walks the queue's groups that have
-- rows in message_group in name order, starting after the group its
-- claimer's last claim stopped at (group_cursor, one row per queue and
-- owner) and going round once: a group's turn takes its best due rows
-- (priority, then age) up to the turn's quantum, locked FOR UPDATE SKIP
-- LOCKED. The first round gives each group one row; if the batch is not
-- full then, each next round gives every group that still had rows an
-- equal part of what is left. Finding the next group is one descent of
-- message_group (a skip scan: the rows waiting in a group are never
-- walked), so a group with 100,000 due messages and a group with 10 are
-- each one step of the round, and a claim of n rows serves n groups one
-- row each before any group gets a second.
-- Each claimer goes round on its own: every claimer serves every group
-- once per round, so between two groups with due messages the service
-- differs by at most a turn per claimer. (One shared place would not do:
-- concurrent claims read it before any of them moves it, serve the same
-- groups, and the groups they skip fall behind.) Fairness is per turn, not
-- per message size or processing time (round-robin, not weighted: a slow
-- tenant's messages take their turns like the others).
--
-- The messages without a group take part as one more participant: a claim
-- first leaves them their share of the batch (one part in the groups the
-- claimer's last claim served + 1: group_cursor.group_count), takes the
-- groups' part, lets the ungrouped messages fill the batch (claim.sql's
-- passes), and goes round the groups again when room is left. A queue
-- whose messages have no group pays one probe of message_group a claim.
--
-- Group limits. group_max_in_flight (queue_configure) bounds the leases of
-- every group of the queue, group_overrides one group's ({"acme":
-- {"max_in_flight": 10}}: the override wins, changeable live). They are
-- grants like the queue's own, under one gate per group (flow_gate rows
-- whose grp is the group; the queue's have ''), made by the group's first
-- claim: a group's turn looks for at most its limit minus what its live
-- grants hold, and the claim then keeps only what it has room for under
-- the group's gate (_flow_keep). A group at its limit costs its turn one
-- sum over its grants, and its waiting rows are never read. A lowered
-- group limit takes no lease away: the group gets no turn until its leases
-- are below the new limit. Recovery removes the gates of groups without
-- a live grant (a group's next claim makes its gate again), and they all
-- go with the last group limit. Claims of one row serve the groups as a
-- whole about as often as the messages without a group (their share is
-- one part in the groups the claimer's last claim served + 1, and a claim
-- of one row serves one group).
--
-- Lanes and groups. A message may have both: its lane decides which of the
-- lane's messages is claimable (only the head is in message_group; the
-- rest wait parked), its group when its turn comes and how many of the
-- group's messages are in flight. A lane is a group with limit one whose
-- order is FIFO; a group is a lane that lets several through at once, in
-- priority and age order.

-- _flow_group_limit_of: the max_in_flight of group p_grp from the queue's
-- group_overrides p_overrides and group_max_in_flight p_default (plain values: on Citus a
-- row read from the queue table is of its shard's type).
CREATE OR REPLACE FUNCTION _flow_group_limit_of(p_overrides jsonb, p_default int, p_grp text)
RETURNS int
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce((p_overrides -> p_grp ->> 'max_in_flight')::int, p_default)
$$;

-- _flow_group_limit: the max_in_flight of group p_grp of queue p_q (NULL:
-- none): its override, else the queue's group_max_in_flight.
CREATE OR REPLACE FUNCTION _flow_group_limit(p_q queue, p_grp text)
RETURNS int
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT _flow_group_limit_of(p_q.group_overrides, p_q.group_max_in_flight, p_grp)
$$;


-- _flow_limited: the verbs of a queue with max_in_flight p_max,
-- group_max_in_flight p_group_max and group_overrides p_overrides keep
-- grants (a limit on the queue or on its groups). Plain values, not the
-- queue row: on Citus a row read from the queue table is of its shard's
-- type.
CREATE OR REPLACE FUNCTION _flow_limited(p_max int, p_group_max int, p_overrides jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_max IS NOT NULL OR p_group_max IS NOT NULL OR p_overrides IS NOT NULL
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

-- _group_place: claimer p_owner's place in the rotation of queue p_queue's
-- groups is after p_after, its last claim served p_count groups (p_exists:
-- it has a row). The row is taken SKIP LOCKED: a claim of the same owner in
-- progress keeps it. Plain values: Citus takes no subquery in an INSERT.
CREATE OR REPLACE FUNCTION _group_place(p_queue text, p_owner text, p_after text, p_count int, p_now timestamptz,
                                        p_exists boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_exists THEN
        UPDATE group_cursor g SET group_after = p_after, group_count = p_count, at = p_now
         WHERE g.queue = p_queue AND g.owner = p_owner
           AND g.ctid = (SELECT k.ctid FROM group_cursor k WHERE k.queue = p_queue AND k.owner = p_owner FOR UPDATE SKIP LOCKED);
    ELSE
        INSERT INTO group_cursor (queue, owner, group_after, group_count, at)
        VALUES (p_queue, p_owner, p_after, p_count, p_now)
        ON CONFLICT (queue, owner) DO NOTHING;
    END IF;
END
$$;

-- _group_walk_end: the group at which a walk of queue p_queue's groups
-- after p_from (up to p_to; NULL: the last) stops after p_visits groups;
-- NULL when the range has fewer.
CREATE OR REPLACE FUNCTION _group_walk_end(p_queue text, p_from text, p_to text, p_visits int)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_end text;
BEGIN
    WITH RECURSIVE r(g, k) AS (
        SELECT (SELECT min(s.grp) FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NOT NULL AND s.grp > p_from), 1
        UNION ALL
        SELECT (SELECT min(s.grp) FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NOT NULL AND s.grp > r.g), r.k + 1
          FROM r
         WHERE r.g IS NOT NULL AND (p_to IS NULL OR r.g < p_to) AND r.k < p_visits
    )
    SELECT r.g INTO v_end FROM r WHERE r.k = p_visits AND (p_to IS NULL OR r.g <= p_to);
    RETURN v_end;
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
    -- the most groups one walk visits: a claim's work stays bounded however
    -- many groups have rows in flight or at their limits
    v_visits int := 4 * p_want + 64;
    v_end text;
    v_stopped boolean := false;
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
                 WHERE r.g IS NOT NULL AND (v_to IS NULL OR r.g < v_to) AND r.k < v_visits
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
                                                - _flow_used(p_q.name, r.g, NULL, p_now)
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
            IF cardinality(ids) < p_want THEN
                -- The walk ended before the batch was full: at the end of
                -- its range, or after v_visits groups with nothing (more) to
                -- give (in flight, at their limits). Then the round ends
                -- where it stopped, and the claimer's next claim goes on after
                -- it, not over the groups before it again.
                v_end := _group_walk_end(p_q.name, v_from, v_to, v_visits);
                IF v_end IS NOT NULL THEN
                    last_grp := v_end;
                    v_stopped := true;
                    EXIT;
                END IF;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(ids) >= p_want OR v_served = 0 OR v_stopped;
        -- the next round: an equal part of what is left for each group served
        v_quantum := ceil((p_want - cardinality(ids))::numeric / v_served)::int;
    END LOOP;
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
        RAISE EXCEPTION 'group_overrides must hold at most 10000 groups, got %', (SELECT count(*) FROM jsonb_object_keys(v_out))
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
