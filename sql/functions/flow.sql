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
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN least(8, p_limit);
END
$$;

CREATE OR REPLACE FUNCTION _flow_cap(p_limit int, p_stripe int)
RETURNS int
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN p_limit / least(8, p_limit) + CASE WHEN p_stripe <= p_limit % least(8, p_limit) THEN 1 ELSE 0 END;
END
$$;

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

-- _flow_tokens: the whole tokens of bucket p_grp ('' the queue's own) of
-- queue p_queue at p_now, for a rate of p_per_second and at most p_burst
-- saved (NULL: no bucket: a group's is made full by its first claim).
-- Read without a lock.
CREATE OR REPLACE FUNCTION _flow_tokens(p_queue text, p_grp text, p_per_second double precision, p_burst int,
                                        p_now timestamptz)
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_tokens int;
BEGIN
    SELECT floor(least(p_burst, b.tokens + p_per_second * greatest(0, extract(epoch FROM p_now - b.at))))::int
      INTO v_tokens
      FROM flow_bucket b WHERE b.queue = p_queue AND b.grp = p_grp;
    RETURN v_tokens;
END
$$;

-- _flow_take: how many of p_want messages bucket p_grp of queue p_queue
-- lets a claim keep at p_now (rate p_per_second, at most p_burst saved):
-- its whole tokens, refilled for the time since the last claim. The row
-- is locked FOR UPDATE SKIP LOCKED (a claim that finds it locked keeps
-- nothing: claimers never wait) and stays locked to the claim's commit;
-- _flow_spend then takes the tokens of what the claim kept. A group's
-- missing bucket is made full (one made by another claim at the same
-- moment waits for that claim's commit, then gives nothing).
CREATE OR REPLACE FUNCTION _flow_take(p_queue text, p_grp text, p_per_second double precision, p_burst int,
                                      p_want int, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_tokens double precision;
BEGIN
    -- the lock first, then the refill in a statement of its own (it sees
    -- the row's latest version: _flow_gates)
    PERFORM 1 FROM flow_bucket k WHERE k.queue = p_queue AND k.grp = p_grp FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE flow_bucket b
           SET tokens = least(p_burst, b.tokens + p_per_second * greatest(0, extract(epoch FROM p_now - b.at))),
               at = greatest(b.at, p_now)
         WHERE b.queue = p_queue AND b.grp = p_grp
        RETURNING b.tokens INTO v_tokens;
    ELSIF p_grp <> '' AND NOT EXISTS (SELECT 1 FROM flow_bucket k WHERE k.queue = p_queue AND k.grp = p_grp) THEN
        INSERT INTO flow_bucket (queue, grp, tokens, at) VALUES (p_queue, p_grp, p_burst, p_now)
        ON CONFLICT DO NOTHING
        RETURNING tokens INTO v_tokens;
    END IF;
    RETURN least(p_want, coalesce(floor(v_tokens)::int, 0));
END
$$;

-- _flow_spend: a claim kept p_n messages under bucket p_grp of queue
-- p_queue (locked by its _flow_take).
CREATE OR REPLACE FUNCTION _flow_spend(p_queue text, p_grp text, p_n int)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_n > 0 THEN
        UPDATE flow_bucket b SET tokens = b.tokens - p_n WHERE b.queue = p_queue AND b.grp = p_grp;
    END IF;
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
        v_room := least(v_room, coalesce(_flow_tokens(p_queue, '', p_per_second, p_burst, p_now), 0));
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
-- another claim is skipped, not waited for. While the queue's first gate
-- holds more than its share (the leases above a lowered limit, _flow_set;
-- leases renew adopted), a claim takes room only with every gate locked,
-- up to the limit minus all the live grants.
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
    v_used int;
    v_used1 int;
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
        -- what this gate's live grants hold, and (the queue's gates) the
        -- first gate's, in one read
        SELECT coalesce(sum(cardinality(f.ids)) FILTER (WHERE f.stripe = v_s), 0)::int,
               coalesce(sum(cardinality(f.ids)) FILTER (WHERE f.stripe = 1), 0)::int
          INTO v_used, v_used1
          FROM flow_grant f
         WHERE f.queue = p_queue AND f.grp = p_grp AND f.stripe IN (v_s, 1) AND f.expires_at > p_now;
        -- Above a lowered limit? Only the first gate ever holds more than
        -- its share: _flow_set puts the leases above the limit there,
        -- renew adopts leases there, and claims take only what a gate has
        -- room for. So the first gate tells.
        IF p_grp = '' AND (SELECT k.cap FROM flow_gate k WHERE k.queue = p_queue AND k.grp = '' AND k.stripe = 1) < v_used1 THEN
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
        v_room := least(p_want - v_got, v_cap - v_used);
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
-- room under its group's gate and a token of its group's bucket, every row
-- only with room under the queue's gates and a token of its bucket. It
-- records what it keeps: a grant per gate, held until p_until, and the
-- tokens spent (only those of the rows kept).
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
    v_lim int;
    v_rate record;
    v_allowed int;
    v_group_ids bigint[] := '{}';   -- kept under a group's gate: its grant
    v_group_grps text[] := '{}';
    v_rated_grps text[] := '{}';    -- groups whose bucket the claim holds
    v_rate_s double precision := p_q.rate / extract(epoch FROM p_q.rate_per);
BEGIN
    -- the groups' gates and buckets, in name order (one lock order)
    IF _flow_group_limited(p_q.group_max_in_flight, p_q.group_rate, p_q.group_overrides) AND cardinality(p_gids) > 0 THEN
        FOR v_g IN SELECT u.g, array_agg(u.id ORDER BY u.o) AS ids
                     FROM unnest(p_gids, p_ggrps) WITH ORDINALITY u(id, g, o)
                    GROUP BY u.g
                    ORDER BY u.g COLLATE "C" LOOP
            v_allowed := cardinality(v_g.ids);
            v_lim := _flow_group_limit_of(p_q.group_overrides, p_q.group_max_in_flight, v_g.g);
            IF v_lim IS NOT NULL THEN
                SELECT f.stripes, f.rooms INTO v_gate FROM _flow_gates(p_q.name, v_g.g, v_lim, v_allowed, p_now) f;
                v_allowed := least(v_allowed, coalesce((SELECT sum(r) FROM unnest(v_gate.rooms) r), 0)::int);
            END IF;
            SELECT r.n, r.per INTO v_rate FROM _flow_group_rate_of(p_q.group_overrides, p_q.group_rate, p_q.group_rate_per, v_g.g) r;
            IF v_rate.n IS NOT NULL AND v_allowed > 0 THEN
                v_allowed := _flow_take(p_q.name, v_g.g, v_rate.n / extract(epoch FROM v_rate.per), v_rate.n, v_allowed, p_now);
                v_rated_grps := v_rated_grps || v_g.g;
            END IF;
            IF v_allowed < cardinality(v_g.ids) THEN
                v_kept := ARRAY(SELECT k FROM unnest(v_kept) WITH ORDINALITY x(k, o)
                                 WHERE NOT k = ANY (v_g.ids[v_allowed + 1:]) ORDER BY o);
            END IF;
            IF v_allowed > 0 AND v_lim IS NOT NULL THEN
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
    -- the queue's bucket
    IF v_rate_s IS NOT NULL AND cardinality(v_kept) > 0 THEN
        v_kept := v_kept[1:_flow_take(p_q.name, '', v_rate_s, coalesce(p_q.rate_burst, p_q.rate), cardinality(v_kept), p_now)];
        PERFORM _flow_spend(p_q.name, '', cardinality(v_kept));
    END IF;
    -- the groups' tokens of the rows kept
    FOR v_g IN SELECT u.g, count(*)::int AS n FROM unnest(p_gids, p_ggrps) u(id, g)
                WHERE u.g = ANY (v_rated_grps) AND u.id = ANY (v_kept)
                GROUP BY u.g LOOP
        PERFORM _flow_spend(p_q.name, v_g.g, v_g.n);
    END LOOP;
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
DECLARE
    v_freed boolean;
    v_emptied boolean;
BEGIN
    -- the claim's grants in order: settles of one claim running at once
    -- (a Worker completes its handlers' messages as they finish) would
    -- otherwise lock two grants in opposite orders
    PERFORM 1 FROM flow_grant g
     WHERE g.queue = p_queue AND g.token = p_token AND g.ids && p_ids
     ORDER BY g.grp COLLATE "C", g.stripe
       FOR UPDATE;
    WITH u AS (
        UPDATE flow_grant g SET ids = ARRAY(SELECT x FROM unnest(g.ids) x WHERE NOT x = ANY (p_ids))
         WHERE g.queue = p_queue AND g.token = p_token AND g.ids && p_ids
        RETURNING cardinality(g.ids) = 0 AS empty
    )
    SELECT count(*) > 0, bool_or(u.empty) INTO v_freed, v_emptied FROM u;
    IF v_emptied THEN -- the claim's last settle under a gate (not every settle: one statement less)
        DELETE FROM flow_grant g WHERE g.queue = p_queue AND g.token = p_token AND cardinality(g.ids) = 0;
    END IF;
    IF v_freed THEN
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
        INSERT INTO flow_bucket (queue, grp, tokens, at) VALUES (p_q.name, '', coalesce(p_q.rate_burst, p_q.rate), p_now)
        ON CONFLICT (queue, grp) DO UPDATE SET tokens = least(flow_bucket.tokens, excluded.tokens);
    ELSE
        DELETE FROM flow_bucket b WHERE b.queue = p_q.name AND b.grp = '';
    END IF;
    -- the groups' buckets go with the last group rate (a group's next
    -- claim makes its bucket again, full; a changed rate caps the tokens
    -- saved at the next claim's refill)
    IF p_q.group_rate IS NULL
       AND NOT EXISTS (SELECT 1 FROM jsonb_each(coalesce(p_q.group_overrides, '{}')) e WHERE e.value ? 'rate') THEN
        DELETE FROM flow_bucket b WHERE b.queue = p_q.name AND b.grp <> '';
    END IF;
    -- every gate, in one order: the claims deciding now finish first
    -- (claims never wait for a gate, settles take none)
    PERFORM 1 FROM flow_gate g WHERE g.queue = p_q.name ORDER BY g.grp COLLATE "C", g.stripe FOR UPDATE;
    IF NOT _flow_limited(NULL, p_q.group_max_in_flight, p_q.group_overrides) THEN
        DELETE FROM flow_grant g WHERE g.queue = p_q.name AND g.grp <> '';
        DELETE FROM flow_gate g WHERE g.queue = p_q.name AND g.grp <> '';
    ELSE
        UPDATE flow_gate g SET cap = coalesce(_flow_group_limit_of(p_q.group_overrides, p_q.group_max_in_flight, g.grp), 0) WHERE g.queue = p_q.name AND g.grp <> '';
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
     CROSS JOIN LATERAL (VALUES ('', v_limit), (m.grp, _flow_group_limit_of(p_q.group_overrides, p_q.group_max_in_flight, m.grp))) k(grp, lim)
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
    SELECT DISTINCT p_q.name, f.grp, 1, coalesce(_flow_group_limit_of(p_q.group_overrides, p_q.group_max_in_flight, f.grp), 0)
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

-- The settings as claims read them. Plain values, not the queue row: on
-- Citus a row read from the queue table is of its shard's type. PL/pgSQL,
-- not SQL, for these one-line rules too: a SQL function with its own
-- search_path is not inlined, and was planned again at every call (about
-- 25 us each, every claim and settle of a limited queue).

-- _flow_group_limited: the groups of a queue with group_max_in_flight
-- p_group_max, group_rate p_group_rate and group_overrides p_overrides
-- have limits (claims take their grouped rows under their gates and
-- buckets).
CREATE OR REPLACE FUNCTION _flow_group_limited(p_group_max int, p_group_rate int, p_overrides jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN p_group_max IS NOT NULL OR p_group_rate IS NOT NULL OR p_overrides IS NOT NULL;
END
$$;

-- _flow_limited: the verbs of a queue with max_in_flight p_max,
-- group_max_in_flight p_group_max and group_overrides p_overrides keep
-- grants (a limit on the queue or on its groups: an override may set one).
CREATE OR REPLACE FUNCTION _flow_limited(p_max int, p_group_max int, p_overrides jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN p_max IS NOT NULL OR _flow_group_limited(p_group_max, NULL, p_overrides);
END
$$;

-- _flow_group_limit_of: the max_in_flight of group p_grp (NULL: none): its
-- entry in the queue's group_overrides p_overrides, else the queue's
-- group_max_in_flight p_default.
CREATE OR REPLACE FUNCTION _flow_group_limit_of(p_overrides jsonb, p_default int, p_grp text)
RETURNS int
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN coalesce((p_overrides -> p_grp ->> 'max_in_flight')::int, p_default);
END
$$;

-- _flow_group_rate_of: the rate of group p_grp, n per per (NULL: none):
-- its entry in p_overrides ("rate": 'N/s' or 'N/min', as _check_rate let
-- it in), else the queue's group_rate p_n per p_per.
CREATE OR REPLACE FUNCTION _flow_group_rate_of(p_overrides jsonb, p_n int, p_per interval, p_grp text,
                                               OUT n int, OUT per interval)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_r text := p_overrides -> p_grp ->> 'rate';
BEGIN
    IF v_r IS NULL THEN
        n := p_n;
        per := p_per;
    ELSE
        n := split_part(v_r, '/', 1)::int;
        per := CASE WHEN v_r LIKE '%/s' THEN interval '1 second' ELSE interval '1 minute' END;
    END IF;
END
$$;

-- _check_rate: the rate setting p_arg given as p_value (JSON): 'N/s' or
-- 'N/min' with N 1..1000000 is n per per; JSON null is none (NULLs).
CREATE OR REPLACE FUNCTION _check_rate(p_arg text, p_value jsonb, OUT n int, OUT per interval)
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF jsonb_typeof(p_value) = 'null' THEN
        RETURN;
    END IF;
    IF jsonb_typeof(p_value) IS DISTINCT FROM 'string' OR p_value #>> '{}' !~ '^[0-9]{1,7}/(s|min)$' THEN
        RAISE EXCEPTION '% must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got %',
            p_arg, p_value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := split_part(p_value #>> '{}', '/', 1)::int;
    PERFORM _check_int(p_arg, n, 1, 1000000);
    per := CASE split_part(p_value #>> '{}', '/', 2) WHEN 's' THEN interval '1 second' ELSE interval '1 minute' END;
END
$$;

-- _flow_rate_text: the rate n per per as queue_configure takes it ('N/s',
-- 'N/min'; NULL: none).
CREATE OR REPLACE FUNCTION _flow_rate_text(p_n int, p_per interval)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_n || CASE WHEN p_per = interval '1 second' THEN '/s' ELSE '/min' END
$$;
