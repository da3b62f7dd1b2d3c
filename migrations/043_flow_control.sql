-- pgsweep 0.43: flow control (issue 26). A queue's max_in_flight
-- (queue_configure) bounds the messages of the queue leased at once, across
-- every worker and replica: a claim records what it keeps in a grant, under
-- a gate's lock (flow_gate, flow_grant; flow.sql); a queue's rate ('N/s', 'N/min', with
-- rate_burst) is a token bucket in flow_bucket that claims refill and spend.
-- A queue without either has no rows there and pays nothing.
-- Groups: send's p_group puts a message in a group (message.grp); claims
-- take turns between the groups with due messages (message_group, each
-- claimer's place in the rotation in group_cursor), and group_max_in_flight with the
-- per-group group_overrides bound each group's leases with a gate of its own
-- (flow_gate.grp), group_rate each group's claims with a bucket of its own
-- (flow_bucket.grp). Grouped rows leave message_claim and
-- message_claim_priority, which are built again (a lock on message while
-- they build: for the rows waiting or in flight).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DO $$
BEGIN
    EXECUTE 'ALTER TABLE queue ADD COLUMN max_in_flight int, ADD COLUMN rate int, ADD COLUMN rate_per interval, '
            'ADD COLUMN rate_burst int, ADD COLUMN group_max_in_flight int, ADD COLUMN group_rate int, '
            'ADD COLUMN group_rate_per interval, ADD COLUMN group_overrides jsonb';
END
$$;
DO $$
BEGIN
    EXECUTE 'ALTER TABLE message ADD COLUMN grp text';
END
$$;
DO $$
BEGIN
    EXECUTE 'ALTER TABLE message_dead ADD COLUMN grp text';
END
$$;
DO $$
BEGIN
    EXECUTE 'DROP INDEX message_claim';
END
$$;
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_claim ON message (queue, created_at, id) WHERE parked_until IS NULL AND priority = 0 AND grp IS NULL';
END
$$;
DO $$
BEGIN
    EXECUTE 'DROP INDEX message_claim_priority';
END
$$;
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_claim_priority ON message (queue, priority DESC, created_at, id) '
            'WHERE parked_until IS NULL AND priority <> 0 AND grp IS NULL';
END
$$;
-- the claimable grouped rows: a claim's rotation walks the groups of a
-- queue in name order (one descent per group) and each group by priority,
-- then age (claim.sql, _claim_groups)
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_group ON message (queue, grp, priority DESC, created_at, id) '
            'WHERE parked_until IS NULL AND grp IS NOT NULL';
END
$$;
-- the parked grouped rows (scheduled, behind a lane's head): group_stats
-- reads a queue's grouped rows through the two, never its other rows
DO $$
BEGIN
    EXECUTE 'CREATE INDEX message_group_parked ON message (queue, grp) WHERE parked_until IS NOT NULL AND grp IS NOT NULL';
END
$$;
-- Each claimer's place in the rotation of a queue's groups (claim.sql,
-- _claim_groups): where its next claim starts (after group_after; NULL: the
-- first group), how many groups its last claim served (the share it leaves
-- the messages without a group). One row per queue and owner: claimers
-- that go round on their own serve each group alike, where a shared place
-- would have concurrent claims serve the same groups. Recovery removes the
-- rows of owners that have not claimed for a day.
CREATE TABLE group_cursor (
    queue       text NOT NULL,
    owner       text NOT NULL,
    group_after text,
    group_count int NOT NULL,
    at          timestamptz NOT NULL,
    PRIMARY KEY (queue, owner)
);
COMMENT ON TABLE group_cursor IS 'pgsweep: each claimer''s place in the rotation of a queue''s groups (claim.sql)';

-- max_in_flight (flow.sql): a claim keeps rows under a gate's row lock and
-- records them in a grant; the messages leased are the ids of the live
-- grants. A queue's limit has up to eight gates, a limited group one.
CREATE TABLE flow_gate (
    queue  text NOT NULL,
    grp    text NOT NULL, -- '' the queue's own gates, else a group's (group names are never empty)
    stripe int NOT NULL,
    cap    int NOT NULL,  -- its share of the limit, read under its lock
    turns  bigint NOT NULL DEFAULT 0, -- bumped by every claim and renew that takes it: a REPEATABLE READ
                                       -- transaction whose snapshot predates one fails (40001)
    PRIMARY KEY (queue, grp, stripe)
);
COMMENT ON TABLE flow_gate IS 'pgsweep max_in_flight gates: the row a claim locks to take room (flow.sql)';
CREATE TABLE flow_grant (
    queue      text NOT NULL,
    grp        text NOT NULL,
    stripe     int NOT NULL,
    token      uuid NOT NULL,      -- the claim's
    ids        bigint[] NOT NULL,  -- the messages it holds
    expires_at timestamptz NOT NULL, -- its leases' expiry: counts for nothing once passed
    PRIMARY KEY (queue, grp, stripe, token)
);
COMMENT ON TABLE flow_grant IS 'pgsweep max_in_flight grants: the messages a claim holds under a gate (flow.sql)';
-- complete, fail, release, dead_letter and renew find their claim's grants by token
CREATE INDEX flow_grant_token ON flow_grant (queue, token);

CREATE TABLE flow_bucket (
    queue  text NOT NULL,
    grp    text NOT NULL, -- '' the queue's own bucket, else a group's (group_rate)
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL,
    PRIMARY KEY (queue, grp)
);
COMMENT ON TABLE flow_bucket IS 'pgsweep rate token buckets: one per queue with a rate, one per group with a group rate (flow.sql)';

DROP FUNCTION send(text, jsonb, jsonb, text, timestamptz, text, text, interval, smallint);
DROP FUNCTION send_unique(text, jsonb, jsonb, text, timestamptz, text, text, interval, smallint);
DROP FUNCTION _send_one(text, jsonb, jsonb, text, timestamptz, text, text, interval, smallint);
DROP FUNCTION _send(queue, jsonb, jsonb, text, timestamptz, timestamptz, text, text, interval, smallint);
DROP FUNCTION send_batch(text, jsonb[], jsonb[], text[], timestamptz[], text[], text[], interval[], smallint[]);
DROP FUNCTION send_batch_unique(text, jsonb[], jsonb[], text[], timestamptz[], text[], text[], interval[], smallint[]);
DROP FUNCTION _send_batch(text, jsonb[], jsonb[], text[], timestamptz[], text[], text[], interval[], smallint[]);

-- pgsweep:changed functions/flow.sql
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

CREATE OR REPLACE FUNCTION _flow_group_limited(p_group_max int, p_group_rate int, p_overrides jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN p_group_max IS NOT NULL OR p_group_rate IS NOT NULL OR p_overrides IS NOT NULL;
END
$$;

CREATE OR REPLACE FUNCTION _flow_limited(p_max int, p_group_max int, p_overrides jsonb)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN p_max IS NOT NULL OR _flow_group_limited(p_group_max, NULL, p_overrides);
END
$$;

CREATE OR REPLACE FUNCTION _flow_group_limit_of(p_overrides jsonb, p_default int, p_grp text)
RETURNS int
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN coalesce((p_overrides -> p_grp ->> 'max_in_flight')::int, p_default);
END
$$;

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

CREATE OR REPLACE FUNCTION _flow_rate_text(p_n int, p_per interval)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_n || CASE WHEN p_per = interval '1 second' THEN '/s' ELSE '/min' END
$$;
-- pgsweep:end functions/flow.sql
-- pgsweep:changed functions/flow_groups.sql
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

CREATE OR REPLACE FUNCTION _group_room(p_queue text, p_overrides jsonb, p_group_max int, p_group_rate int,
                                       p_group_per interval, p_grp text, p_taken int, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lim int := _flow_group_limit_of(p_overrides, p_group_max, p_grp);
    v_rate record;
    v_room int;
BEGIN
    IF v_lim IS NOT NULL THEN
        v_room := v_lim - _flow_used(p_queue, p_grp, NULL, p_now);
    END IF;
    SELECT r.n, r.per INTO v_rate FROM _flow_group_rate_of(p_overrides, p_group_rate, p_group_per, p_grp) r;
    IF v_rate.n IS NOT NULL THEN
        -- least ignores a NULL: no max_in_flight
        v_room := least(v_room, coalesce(_flow_tokens(p_queue, p_grp, v_rate.n / extract(epoch FROM v_rate.per), v_rate.n, p_now),
                                         v_rate.n));
    END IF;
    RETURN CASE WHEN v_room IS NOT NULL THEN greatest(0, v_room - p_taken) END; -- greatest(0, NULL) is 0
END
$$;

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
    v_limited boolean := _flow_group_limited(p_q.group_max_in_flight, p_q.group_rate, p_q.group_overrides);
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
                            LIMIT CASE WHEN NOT v_limited THEN v_quantum
                                       ELSE least(v_quantum, _group_room(p_q.name, p_q.group_overrides, p_q.group_max_in_flight,
                                                                         p_q.group_rate, p_q.group_rate_per, r.g,
                                                                         coalesce(cardinality(array_positions(v_all_g, r.g)), 0),
                                                                         p_now)) END
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

CREATE OR REPLACE FUNCTION _check_group_overrides(p_have jsonb, p_given jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_e record;
    v_k record;
    v_out jsonb := coalesce(p_have, '{}');
    v_group jsonb;
    v_lim int;
    v_rate record;
    v_shape constant text := '{"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} (either, a setting null removes it) or null (no override)';
BEGIN
    IF jsonb_typeof(p_given) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_given) <> 'object' THEN
        RAISE EXCEPTION 'group_overrides must be an object of groups, each %, got %', v_shape, p_given
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_e IN SELECT e.key, e.value FROM jsonb_each(p_given) e ORDER BY e.key LOOP
        PERFORM _check_group(format('group_overrides key %s', to_jsonb(v_e.key)), v_e.key);
        IF jsonb_typeof(v_e.value) = 'null' THEN
            v_out := v_out - v_e.key;
            CONTINUE;
        END IF;
        IF jsonb_typeof(v_e.value) <> 'object' OR v_e.value = '{}'
           OR EXISTS (SELECT 1 FROM jsonb_object_keys(v_e.value) k WHERE k NOT IN ('max_in_flight', 'rate')) THEN
            RAISE EXCEPTION 'group_overrides.% must be %, got %', v_e.key, v_shape, v_e.value
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_group := coalesce(v_out -> v_e.key, '{}');
        FOR v_k IN SELECT k.key, k.value FROM jsonb_each(v_e.value) k ORDER BY k.key LOOP
            IF jsonb_typeof(v_k.value) = 'null' THEN
                v_group := v_group - v_k.key;
            ELSIF v_k.key = 'max_in_flight' THEN
                IF jsonb_typeof(v_k.value) <> 'number' THEN
                    RAISE EXCEPTION 'group_overrides.%.max_in_flight must be an integer between 1 and 100000, or null (no override), got %',
                        v_e.key, v_k.value
                        USING ERRCODE = 'invalid_parameter_value';
                END IF;
                v_lim := (v_k.value #>> '{}')::int; -- 1.5: 22P02, named by queue_configure
                PERFORM _check_int(format('group_overrides.%s.max_in_flight', v_e.key), v_lim, 1, 100000);
                v_group := v_group || jsonb_build_object('max_in_flight', v_lim);
            ELSE
                SELECT r.n, r.per INTO v_rate FROM _check_rate(format('group_overrides.%s.rate', v_e.key), v_k.value) r;
                v_group := v_group || jsonb_build_object('rate', _flow_rate_text(v_rate.n, v_rate.per));
            END IF;
        END LOOP;
        v_out := CASE WHEN v_group = '{}' THEN v_out - v_e.key ELSE v_out || jsonb_build_object(v_e.key, v_group) END;
    END LOOP;
    IF (SELECT count(*) FROM jsonb_object_keys(v_out)) > 10000 THEN
        RAISE EXCEPTION 'group_overrides must hold at most 10000 groups, got %', (SELECT count(*) FROM jsonb_object_keys(v_out))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN nullif(v_out, '{}');
END
$$;
-- pgsweep:end functions/flow_groups.sql
-- pgsweep:changed functions/flow_stats.sql
CREATE OR REPLACE FUNCTION _flow_rate_used(p_queue text, p_grp text, p_n int, p_per interval, p_burst int,
                                           p_now timestamptz)
RETURNS int
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_n IS NOT NULL
                THEN p_burst - coalesce(_flow_tokens(p_queue, p_grp, p_n / extract(epoch FROM p_per), p_burst, p_now), p_burst) END
$$;

CREATE OR REPLACE FUNCTION flow_stats(p_queue text)
RETURNS TABLE (max_in_flight int, in_flight int, rate text, rate_burst int, rate_used int,
               group_max_in_flight int, group_rate text, group_overrides int)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz := clock_timestamp();
BEGIN
    v_q := _queue_get(p_queue);
    RETURN QUERY
    SELECT v_q.max_in_flight,
           CASE WHEN v_q.max_in_flight IS NOT NULL THEN _flow_used(p_queue, '', NULL, v_now) END,
           _flow_rate_text(v_q.rate, v_q.rate_per),
           coalesce(v_q.rate_burst, v_q.rate),
           _flow_rate_used(p_queue, '', v_q.rate, v_q.rate_per, coalesce(v_q.rate_burst, v_q.rate), v_now),
           v_q.group_max_in_flight,
           _flow_rate_text(v_q.group_rate, v_q.group_rate_per),
           (SELECT count(*)::int FROM jsonb_object_keys(coalesce(v_q.group_overrides, '{}')));
END
$$;

CREATE OR REPLACE FUNCTION group_stats(p_queue text, p_limit int DEFAULT 1000)
RETURNS TABLE (group_name text, in_flight bigint, waiting bigint, oldest_age interval, max_in_flight int,
               rate text, rate_used int)
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
    SELECT g.grp, g.in_flight, g.waiting, g.oldest_age,
           _flow_group_limit_of(v_q.group_overrides, v_q.group_max_in_flight, g.grp),
           _flow_rate_text(r.n, r.per), _flow_rate_used(p_queue, g.grp, r.n, r.per, r.n, v_now)
      FROM (SELECT m.grp,
                   count(*) FILTER (WHERE m.status = 'processing' AND m.visible_at > v_now) AS in_flight,
                   count(*) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS waiting,
                   v_now - min(m.created_at) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS oldest_age
              FROM (SELECT m.grp, m.status, m.visible_at, m.created_at FROM message m -- message_group
                     WHERE m.queue = p_queue AND m.parked_until IS NULL AND m.grp IS NOT NULL
                    UNION ALL
                    SELECT m.grp, m.status, m.visible_at, m.created_at FROM message m -- message_group_parked
                     WHERE m.queue = p_queue AND m.parked_until IS NOT NULL AND m.grp IS NOT NULL) m
             GROUP BY m.grp) g
     CROSS JOIN LATERAL _flow_group_rate_of(v_q.group_overrides, v_q.group_rate, v_q.group_rate_per, g.grp) r
     ORDER BY g.oldest_age DESC NULLS LAST, g.grp
     LIMIT p_limit;
END
$$;
-- pgsweep:end functions/flow_stats.sql

-- pgsweep:changed functions/ack.sql
CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_until timestamptz;
    v_held bigint[];
    v_adopt_grps text[];
    v_adopt_ids bigint[];
    v_gates text[];
    v_more text[];
    v_lost bigint[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + coalesce(p_lease, v_q.lease_default);
    IF NOT _flow_limited(v_q.max_in_flight, v_q.group_max_in_flight, v_q.group_overrides) THEN
        RETURN QUERY
        UPDATE message m SET visible_at = v_until
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.id;
        RETURN;
    END IF;
    -- Flow control (flow.sql). First the gates of the claim's grants, in
    -- the order every taker of several gates uses, their turns bumped: no
    -- claim decides under them meanwhile (a claim held open in a
    -- transaction makes renew wait: claim from autocommit); then the
    -- claim's grants, in order (settles take grants, then messages); then
    -- the clock again. A lease is renewed while the grants that hold it
    -- (the queue's, its group's) are live and under a gate this renew holds,
    -- and those grants last as long; a lease that is live but has no grant
    -- (claimed while the queue or its group had no limit, or by a claim
    -- that read the queue just before a limit was set) gets one on the
    -- first gate, when that gate is free (SKIP LOCKED: else the next renew);
    -- a lease whose grant expired is not renewed: its room may have been
    -- taken.
    -- (the locks first, then the turns in a statement of their own, which
    -- sees the rows' latest versions)
    SELECT coalesce(array_agg(k.grp || '/' || k.stripe), '{}') INTO v_gates
      FROM (SELECT k.grp, k.stripe FROM flow_gate k
             WHERE k.queue = p_queue
               AND (k.grp, k.stripe) IN (SELECT f.grp, f.stripe FROM flow_grant f WHERE f.queue = p_queue AND f.token = p_token)
             ORDER BY k.grp COLLATE "C", k.stripe
               FOR UPDATE) k;
    UPDATE flow_gate g SET turns = g.turns + 1 WHERE g.queue = p_queue AND g.grp || '/' || g.stripe = ANY (v_gates);
    PERFORM 1 FROM flow_grant f WHERE f.queue = p_queue AND f.token = p_token ORDER BY f.grp COLLATE "C", f.stripe FOR UPDATE;
    IF p_now IS NULL THEN
        v_now := clock_timestamp();
        v_until := v_now + coalesce(p_lease, v_q.lease_default);
    END IF;
    -- Per message and kind (the queue's limit, its group's): held, whether
    -- a grant of this claim holds it live under a gate this renew holds
    -- (NULL: no grant holds it, so a live lease is adopted).
    SELECT array_agg(DISTINCT x.id) FILTER (WHERE x.ok),
           array_agg(x.grp) FILTER (WHERE x.ok AND x.held IS NULL AND x.lim IS NOT NULL),
           array_agg(x.id) FILTER (WHERE x.ok AND x.held IS NULL AND x.lim IS NOT NULL)
      INTO v_held, v_adopt_grps, v_adopt_ids
      FROM (SELECT m.id, k.grp, k.lim, h.held,
                   bool_and(k.lim IS NULL OR coalesce(h.held, m.visible_at > v_now)) OVER (PARTITION BY m.id) AS ok
              FROM message m
             CROSS JOIN LATERAL (VALUES ('', v_q.max_in_flight), (m.grp, _flow_group_limit_of(v_q.group_overrides, v_q.group_max_in_flight, m.grp))) k(grp, lim)
             CROSS JOIN LATERAL (SELECT bool_or(g.expires_at > v_now AND g.grp || '/' || g.stripe = ANY (v_gates)) AS held
                                   FROM flow_grant g
                                  WHERE g.queue = p_queue AND g.grp = k.grp AND g.token = p_token AND m.id = ANY (g.ids)) h
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
               AND k.grp IS NOT NULL) x;
    IF v_adopt_ids IS NOT NULL THEN
        -- the first gate of each: taken SKIP LOCKED (renew holds others
        -- already); the leases whose gate is busy wait for the next renew
        SELECT coalesce(array_agg(k.grp || '/1'), '{}') INTO v_more
          FROM (SELECT k.grp FROM flow_gate k
                 WHERE k.queue = p_queue AND k.stripe = 1 AND k.grp = ANY (v_adopt_grps)
                   AND NOT (k.grp || '/1') = ANY (v_gates)
                 ORDER BY k.grp COLLATE "C"
                   FOR UPDATE SKIP LOCKED) k;
        UPDATE flow_gate g SET turns = g.turns + 1 WHERE g.queue = p_queue AND g.grp || '/' || g.stripe = ANY (v_more);
        v_gates := v_gates || v_more;
        SELECT array_agg(a.id) INTO v_lost
          FROM unnest(v_adopt_grps, v_adopt_ids) a(grp, id)
         WHERE NOT (a.grp || '/1') = ANY (v_gates);
        v_held := ARRAY(SELECT h FROM unnest(v_held) h WHERE NOT h = ANY (coalesce(v_lost, '{}')));
        INSERT INTO flow_grant AS f (queue, grp, stripe, token, ids, expires_at)
        SELECT p_queue, a.grp, 1, p_token, array_agg(a.id ORDER BY a.id), v_until
          FROM unnest(v_adopt_grps, v_adopt_ids) a(grp, id)
         WHERE (a.grp || '/1') = ANY (v_gates)
         GROUP BY a.grp
        ON CONFLICT (queue, grp, stripe, token) DO UPDATE -- an expired grant is replaced, not brought back
           SET ids = CASE WHEN f.expires_at > v_now THEN f.ids || excluded.ids ELSE excluded.ids END,
               expires_at = CASE WHEN f.expires_at > v_now THEN f.expires_at ELSE excluded.expires_at END;
    END IF;
    RETURN QUERY
    WITH r AS (
        UPDATE message m SET visible_at = v_until
         WHERE m.queue = p_queue AND m.id = ANY (v_held) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.id
    ), g AS (
        UPDATE flow_grant g SET expires_at = greatest(g.expires_at, v_until)
         WHERE g.queue = p_queue AND g.token = p_token AND g.expires_at > v_now AND g.ids && v_held
           AND g.grp || '/' || g.stripe = ANY (v_gates)
    )
    SELECT r.id FROM r;
END
$$;

CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_limited boolean;
    v_now timestamptz;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- (_check_size passes any size up to 100 without a read: validate.sql)
    IF p_token IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 100 THEN
        PERFORM _check_token(p_token);
        PERFORM _check_ids(p_ids);
        PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
    END IF;
    SELECT q.kind, _flow_limited(q.max_in_flight, q.group_max_in_flight, q.group_overrides) INTO v_kind, v_limited FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_limited THEN
        PERFORM _flow_free(p_queue, p_token, p_ids); -- grants before messages, in every verb (flow.sql)
    END IF;
    IF NOT EXISTS (SELECT 1 FROM lane l WHERE l.queue = p_queue) THEN
        IF v_kind = 'outbox' THEN
            RETURN QUERY
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id;
        ELSE
            RETURN QUERY
            WITH d AS (
                DELETE FROM message m
                 WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
                RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
            )
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id;
        END IF;
        RETURN;
    END IF;
    IF v_kind = 'outbox' THEN
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.id, m.lane
        )
        SELECT array_agg(d.id), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL) INTO v_ids, v_lanes FROM d;
    ELSE
        WITH d AS (
            DELETE FROM message m
             WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
            RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane
        ), p AS (
            INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
            SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
            RETURNING p.id
        )
        SELECT (SELECT array_agg(p.id) FROM p), (SELECT array_agg(DISTINCT d.lane) FROM d WHERE d.lane IS NOT NULL)
          INTO v_ids, v_lanes;
    END IF;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, NULL, false, v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

CREATE OR REPLACE FUNCTION release(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_q queue;
BEGIN
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    IF _flow_limited(v_q.max_in_flight, v_q.group_max_in_flight, v_q.group_overrides) THEN
        PERFORM _flow_free(p_queue, p_token, p_ids); -- grants before messages, in every verb (flow.sql)
    END IF;
    v_now := clock_timestamp();
    RETURN QUERY
    UPDATE message m
       SET status = CASE WHEN m.attempt > 1 THEN 'failed' ELSE 'pending' END,
           owner = NULL, token = NULL, attempt = m.attempt - 1, visible_at = v_now
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;
-- pgsweep:end functions/ack.sql

-- pgsweep:changed functions/claim.sql
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rescan_every interval;
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_cursor_at timestamptz;
    v_cursor_id bigint;
    v_rescanned timestamptz;
    v_rescan boolean;
    v_from_at timestamptz;
    v_from_id bigint;
    v_to_at timestamptz;
    v_to_id bigint;
    v_tids tid[];
    v_ids bigint[];
    v_all tid[] := '{}';
    v_all_ids bigint[] := '{}';
    v_n int := 0;
    v_at timestamptz;
    v_id bigint;
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
    v_held boolean;
    v_read_at timestamptz;
    v_read_id bigint;
    v_lv smallint[];
    v_la timestamptz[];
    v_li bigint[];
    v_prescanned timestamptz;
    v_prescan boolean;
    v_due smallint[];
    v_kinds int[] := '{}';
    v_los int[] := '{}';
    v_his int[] := '{}';
    v_pos int[] := '{}';
    v_seg int;
    v_kind int;
    v_lo int;
    v_hi int;
    v_prev int;
    v_l int;
    v_fa timestamptz;
    v_fi bigint;
    v_lvls smallint[];
    v_ats timestamptz[];
    v_tp smallint[] := '{}';
    v_ta timestamptz[] := '{}';
    v_ti bigint[] := '{}';
    v_limit int;
    v_rate double precision;
    v_burst int;
    v_batch int;
    v_kept bigint[];
    v_q queue;
    v_gafter text;
    v_gcount int;
    v_gshare int;
    v_grouped boolean;
    v_gplace boolean := false;
    v_x numeric;
    v_gr record;
    v_glast text;
    v_g_ids bigint[] := '{}';
    v_g_grps text[] := '{}';
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error. The
    -- expression is a conservative pre-filter, the rules stay in validate.sql:
    -- an owner of ASCII letters, digits and _.:/@- (no control, invisible or
    -- white space characters) of at most 200 characters passes the name rule
    -- (_check_text); a lease of time only (no days, months or years: no
    -- mixed signs) within the bounds passes _check_interval. Anything else
    -- goes to the _check_* calls, in the order the arguments come.
    IF p_owner IS NULL OR length(p_owner) > 200 OR p_owner !~ '^[A-Za-z0-9_.:/@-]+$'
       OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour'
       OR extract(day FROM p_lease) <> 0 OR extract(month FROM p_lease) <> 0 OR extract(year FROM p_lease) <> 0 THEN
        PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql): control characters, spaces
        IF p_lease IS NOT NULL THEN
            PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
        END IF;
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
    END IF;
    -- Two statements, not a join: on Citus queue is a reference table and
    -- claim_cursor a distributed one, and a delegated claim may only touch
    -- its own shard (each statement filters by the queue).
    -- The settings every claim uses; the whole row (v_q) only when the
    -- queue has groups or limits (below): a row of every column costs a
    -- claim more than these few.
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused, q.max_in_flight,
           q.rate / extract(epoch FROM q.rate_per), coalesce(q.rate_burst, q.rate)
      INTO v_max, v_lease, v_rescan_every, v_paused, v_limit, v_rate, v_burst
      FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    -- The rights ride along with the cursor (queue_rights.sql): a plain
    -- grant is the common case, read by this statement (both tables are
    -- placed by queue on Citus: one shard group); anything else, or no
    -- cursor row, asks _queue_require, the rule.
    SELECT c.created_at, c.id, c.rescanned_at,
           c.priority_levels, c.priority_ats, c.priority_ids, c.priority_rescanned_at,
           EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume')
      INTO v_cursor_at, v_cursor_id, v_rescanned, v_lv, v_la, v_li, v_prescanned, v_held
      FROM claim_cursor c WHERE c.queue = p_queue;
    IF v_held IS NOT TRUE THEN
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    v_read_at := v_cursor_at;
    v_read_id := v_cursor_id;
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;
    -- Flow control (flow.sql): look for as many rows as there are free
    -- room and tokens, at most.
    v_batch := p_batch;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        v_batch := _flow_room(p_queue, v_limit, v_rate, v_burst, p_batch, v_now);
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;

    -- The cursor is trusted only within claim_rescan after the last rescan, on
    -- the clock the caller uses (tests pin p_now in both directions).
    -- Pass 1 scans from the cursor on; pass 2 scans the rows before it, when
    -- the cursor is not trusted or pass 1 could not fill the batch.
    v_rescan := v_rescanned IS NULL OR v_now < v_rescanned OR v_now >= v_rescanned + v_rescan_every;
    IF v_rescan THEN
        v_cursor_at := '-infinity';
        v_cursor_id := -9223372036854775808;
    END IF;
    v_from_at := v_cursor_at;
    v_from_id := v_cursor_id;
    v_to_at := 'infinity';
    v_to_id := 9223372036854775807;
    -- Parked rows that came due join the claim index, where the scans below
    -- (or the next claims) find them. When none is due this is one probe of
    -- message_parked; rows other claims are promoting are skipped.
    SELECT array_agg(p.ctid), array_agg(p.id) INTO v_tids, v_ids
      FROM (SELECT d.ctid, d.id FROM message d
             WHERE d.queue = p_queue AND d.parked_until <= v_now
             ORDER BY d.parked_until
             LIMIT 4 * p_batch
               FOR UPDATE SKIP LOCKED) p;
    IF v_tids IS NOT NULL THEN
        -- By ctid and id both: whichever the planner takes, it touches only
        -- these rows. With ctid alone and the queue's statistics stale (a
        -- queue that grew since the last ANALYZE looks tiny), it took the
        -- primary key on queue and walked the whole queue.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
    END IF;
    -- The segments of the claim indexes, in the order claims take them (see
    -- the header): kind 1 the levels lo..hi of message_claim_priority from
    -- their head, 2 one level from its position (v_pos: its place in the
    -- arrays), 0 the default priority (message_claim: the passes below).
    -- Positions are trusted within claim_rescan after the last rescan of the
    -- priority index, and then only the levels with a due row at or after
    -- their position are scanned (v_due: one probe, an index descent per
    -- level); the levels without a position, in the gaps, from their head.
    v_prescan := v_lv IS NULL OR v_prescanned IS NULL OR v_now < v_prescanned OR v_now >= v_prescanned + v_rescan_every;
    IF v_prescan THEN
        v_kinds := '{1,0,1}';
        v_los := '{1,0,-32768}';
        v_his := '{32767,0,-1}';
        v_pos := '{0,0,0}';
    ELSE
        SELECT array_agg(l.lvl) INTO v_due
          FROM unnest(v_lv, v_la, v_li) l(lvl, at, id)
         WHERE EXISTS (SELECT 1 FROM message s
                        WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority <> 0 AND s.priority = l.lvl
                          AND (s.created_at, s.id) >= (l.at, l.id) AND s.visible_at <= v_now AND s.attempt < v_max);
        v_prev := 32767;
        -- v_lv is sorted highest first; one step past its end (below every
        -- level) closes the last gap
        FOR j IN 1 .. cardinality(v_lv) + 1 LOOP
            v_l := CASE WHEN j <= cardinality(v_lv) THEN v_lv[j] ELSE -32769 END;
            IF v_l < 0 AND v_prev >= 0 THEN -- the default priority lies between the positive and the negative levels
                IF v_prev >= 1 THEN
                    v_kinds := v_kinds || 1; v_los := v_los || 1; v_his := v_his || v_prev; v_pos := v_pos || 0;
                END IF;
                v_kinds := v_kinds || 0; v_los := v_los || 0; v_his := v_his || 0; v_pos := v_pos || 0;
                v_prev := -1;
            END IF;
            IF v_l + 1 <= v_prev THEN
                v_kinds := v_kinds || 1; v_los := v_los || (v_l + 1); v_his := v_his || v_prev; v_pos := v_pos || 0;
            END IF;
            IF v_l = ANY (v_due) THEN
                v_kinds := v_kinds || 2; v_los := v_los || v_l; v_his := v_his || v_l; v_pos := v_pos || j;
            END IF;
            v_prev := v_l - 1;
        END LOOP;
    END IF;
    -- Groups (flow.sql): the groups' part of the batch first, all but the
    -- share of the messages without a group (one part in the groups this
    -- claimer's last claim served + 1, at least 1), from this claimer's
    -- place in the rotation. A queue whose messages have no group pays one
    -- probe of message_group here.
    v_grouped := EXISTS (SELECT 1 FROM message s WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NOT NULL);
    IF v_grouped THEN
        SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
        SELECT g.group_after, g.group_count, true INTO v_gafter, v_gcount, v_gplace
          FROM group_cursor g WHERE g.queue = p_queue AND g.owner = p_owner;
        -- g/(g+1) of the batch, rounded at random so that a claim of one
        -- row serves the groups as often as their share says
        v_x := v_batch * greatest(v_gcount, 1) / (greatest(v_gcount, 1) + 1.0);
        v_gshare := floor(v_x)::int + CASE WHEN random() < v_x - floor(v_x) THEN 1 ELSE 0 END;
        IF v_gshare > 0 THEN
            SELECT g.tids, g.ids, g.grps, g.last_grp INTO v_gr FROM _claim_groups(v_q, v_gafter, v_gshare, NULL, NULL, v_now) g;
            v_all := v_gr.tids;
            v_all_ids := v_gr.ids;
            v_g_ids := v_gr.ids;
            v_g_grps := v_gr.grps;
            v_glast := v_gr.last_grp;
            v_n := cardinality(v_all);
        END IF;
    END IF;
    v_seg := 0;
    LOOP
        EXIT WHEN v_n = v_batch;
        v_seg := v_seg + 1;
        IF v_seg > cardinality(v_kinds) THEN
            -- A claim short of its batch takes the rows behind the positions
            -- last (kind 3: every level from its head, but the rows taken),
            -- and counts as a rescan, as the default passes do.
            EXIT WHEN v_prescan;
            v_kinds := v_kinds || 3; v_los := v_los || -32768; v_his := v_his || 32767; v_pos := v_pos || 0;
            v_prescan := true;
        END IF;
        v_kind := v_kinds[v_seg];
        v_lo := v_los[v_seg];
        v_hi := v_his[v_seg];
        CONTINUE WHEN v_lo > v_hi;
        IF v_kind = 0 THEN
            -- The default priority: pass 1 from the cursor on, pass 2 before it.
            FOR pass IN 1 .. 2 LOOP
                EXIT WHEN v_n = v_batch;
                SELECT array_agg(c.ctid), array_agg(c.id),
                       (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
                       (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
                  INTO v_tids, v_ids, v_at, v_id
                  FROM (SELECT s.ctid, s.created_at, s.id
                          FROM message s
                         WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority = 0
                           AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                           AND (s.created_at, s.id) < (v_to_at, v_to_id)
                           AND s.visible_at <= v_now AND s.attempt < v_max
                         ORDER BY s.created_at, s.id
                         LIMIT v_batch - v_n
                           FOR UPDATE SKIP LOCKED) c;
                IF v_tids IS NOT NULL THEN
                    v_all := v_all || v_tids;
                    v_all_ids := v_all_ids || v_ids;
                    v_n := cardinality(v_all);
                    IF v_last_at IS NULL THEN -- pass 1's rows are the newest
                        v_last_at := v_at;
                        v_last_id := v_id;
                    END IF;
                END IF;
                EXIT WHEN v_n = v_batch OR v_rescan;
                v_rescan := true;
                v_from_at := '-infinity';
                v_from_id := -9223372036854775808;
                v_to_at := v_cursor_at;
                v_to_id := v_cursor_id;
            END LOOP;
            CONTINUE;
        END IF;
        IF v_kind = 2 THEN
            v_fa := v_la[v_pos[v_seg]];
            v_fi := v_li[v_pos[v_seg]];
        ELSE
            v_fa := '-infinity';
            v_fi := -9223372036854775808;
        END IF;
        SELECT array_agg(c.ctid), array_agg(c.id), array_agg(c.priority), array_agg(c.created_at)
          INTO v_tids, v_ids, v_lvls, v_ats
          FROM (SELECT s.ctid, s.id, s.priority, s.created_at
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority <> 0
                   AND s.priority >= v_lo AND s.priority <= v_hi
                   AND (s.created_at, s.id) >= (v_fa, v_fi)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                   AND (v_kind <> 3 OR NOT s.id = ANY (v_all_ids))
                 ORDER BY s.priority DESC, s.created_at, s.id
                 LIMIT v_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
            v_tp := v_tp || v_lvls;
            v_ta := v_ta || v_ats;
            v_ti := v_ti || v_ids;
        END IF;
    END LOOP;
    -- The groups again when the batch has room: the rest of their turns,
    -- or every group's when the last claim served none.
    IF v_n < v_batch AND v_grouped THEN
        SELECT g.tids, g.ids, g.grps, g.last_grp INTO v_gr
          FROM _claim_groups(v_q, coalesce(v_glast, v_gafter), v_batch - v_n, v_g_ids, v_g_grps, v_now) g;
        IF cardinality(v_gr.ids) > 0 THEN
            v_all := v_all || v_gr.tids;
            v_all_ids := v_all_ids || v_gr.ids;
            v_g_ids := v_g_ids || v_gr.ids;
            v_g_grps := v_g_grps || v_gr.grps;
            v_n := cardinality(v_all);
        END IF;
        v_glast := coalesce(v_gr.last_grp, v_glast);
    END IF;
    IF v_n = 0 THEN
        IF v_grouped AND v_glast IS NOT NULL THEN
            -- the groups walked had nothing to give (in flight, at their
            -- limits): the next claim goes on after them
            PERFORM _group_place(p_queue, p_owner, v_glast, 0, v_now, v_gplace);
        END IF;
        RETURN;
    END IF;
    -- Flow control (flow.sql): keep the rows the claim has room and tokens
    -- for, under the gates of the queue and of its groups. In a race that
    -- cut it no cursor or position moves: the rows let go stay where the
    -- next claim looks.
    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL
       OR (cardinality(v_g_ids) > 0 AND _flow_group_limited(v_q.group_max_in_flight, v_q.group_rate, v_q.group_overrides)) THEN
        IF v_q.name IS NULL THEN -- not read above (no groups)
            SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
        END IF;
        v_kept := _flow_keep(v_q, v_all_ids, v_g_ids, v_g_grps, v_token, v_until, v_now);
        IF cardinality(v_kept) = 0 THEN
            RETURN;
        ELSIF cardinality(v_kept) < v_n THEN
            SELECT array_agg(u.t ORDER BY u.o), array_agg(u.i ORDER BY u.o) INTO v_all, v_all_ids
              FROM unnest(v_all, v_all_ids) WITH ORDINALITY u(t, i, o)
             WHERE u.i = ANY (v_kept);
            v_n := cardinality(v_all);
            v_last_at := NULL;
            v_tp := '{}';
            v_prescan := false;
        END IF;
    END IF;

    IF v_last_at IS NULL THEN
        NULL; -- no row of the default priority: the cursor stays
    ELSIF v_rescanned IS NULL THEN
        -- No cursor row: queue_create makes one, so only a deleted row gets here.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, v_last_at, v_last_id, v_now)
        ON CONFLICT (queue) DO NOTHING;
    ELSE
        -- A rescan may move the cursor back (to the stragglers it found);
        -- other claims only move it forward, and not when it went back
        -- since this claim read it (below what it read): a rescan, or the
        -- new heads of lanes (lane.sql, _lane_next), which a claim moving it
        -- past them would leave to the pass before the cursor.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR ((c.created_at, c.id) < (v_last_at, v_last_id)
                             AND (c.created_at, c.id) >= (v_read_at, v_read_id)))
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    -- The positions move forward to the last row taken at each level, as the
    -- default cursor does (and not when one went back since this claim read
    -- it: _lane_next); a level first taken from its head gains one; a rescan
    -- sets each level it took rows of wherever its rows lead and records
    -- itself. A queue whose claims never took a row of another priority has
    -- none, and pays no update here.
    IF (cardinality(v_tp) > 0 OR (v_prescan AND v_lv IS NOT NULL)) AND v_rescan_every > interval '0' THEN
        UPDATE claim_cursor c
           SET (priority_levels, priority_ats, priority_ids) =
               (SELECT array_agg(x.lvl ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_at ELSE x.s_at END ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_id ELSE x.s_id END ORDER BY x.lvl DESC)
                  FROM (SELECT coalesce(st.lvl, m.lvl) AS lvl, st.at AS s_at, st.id AS s_id, m.at AS m_at, m.id AS m_id,
                               m.lvl IS NOT NULL AND (st.lvl IS NULL OR v_prescan
                                   OR ((st.at, st.id) < (m.at, m.id)
                                       AND NOT EXISTS (SELECT 1 FROM unnest(v_lv, v_la, v_li) r(lvl, at, id)
                                                        WHERE r.lvl = st.lvl AND (st.at, st.id) < (r.at, r.id)))) AS take
                          FROM unnest(c.priority_levels, c.priority_ats, c.priority_ids) st(lvl, at, id)
                          FULL JOIN (SELECT DISTINCT ON (t.lvl) t.lvl, t.at, t.id
                                       FROM unnest(v_tp, v_ta, v_ti) t(lvl, at, id)
                                      ORDER BY t.lvl, t.at DESC, t.id DESC) m ON m.lvl = st.lvl) x),
               priority_rescanned_at = CASE WHEN v_prescan THEN v_now ELSE c.priority_rescanned_at END
         WHERE c.queue = p_queue
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    IF v_grouped THEN
        -- where this claimer's next claim starts, and how many groups this
        -- one served (none: the messages without a group get whole
        -- batches); its row is taken SKIP LOCKED: a claim of the same owner
        -- in progress keeps it. (Plain values: Citus takes no subquery in
        -- an INSERT.)
        v_gcount := cardinality(ARRAY(SELECT DISTINCT u.g FROM unnest(v_g_ids, v_g_grps) u(id, g) WHERE u.id = ANY (v_all_ids)));
        v_gafter := coalesce(v_glast, v_gafter);
        PERFORM _group_place(p_queue, p_owner, v_gafter, v_gcount, v_now, v_gplace);
    END IF;
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane, m.priority
    )
    SELECT c.id, c.key, c.payload, c.headers, c.attempt, c.created_at, c.visible_at, c.token, c.lane
      FROM claimed c ORDER BY c.priority DESC, c.created_at, c.id;
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:changed functions/claim_ids.sql
CREATE OR REPLACE FUNCTION claim_ids(p_queue text, p_owner text, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_tids tid[];
    v_ids bigint[];
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
    v_limit int;
    v_rate double precision;
    v_burst int;
    v_allowed int;
    v_q queue;
    v_grps text[];
    v_kept bigint[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    v_max := v_q.max_attempts;
    v_lease := coalesce(p_lease, v_q.lease_default);
    v_paused := v_q.paused;
    v_limit := v_q.max_in_flight;
    v_rate := v_q.rate / extract(epoch FROM v_q.rate_per);
    v_burst := coalesce(v_q.rate_burst, v_q.rate);
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN -- flow control (flow.sql): as many rows as room and tokens
        v_allowed := _flow_room(p_queue, v_limit, v_rate, v_burst, cardinality(p_ids), v_now);
        IF v_allowed = 0 THEN
            RETURN;
        END IF;
    END IF;

    -- (the cursor walks the rows of the default priority only: claim.sql)
    SELECT array_agg(c.ctid), array_agg(c.id), array_agg(c.grp),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0 AND c.grp IS NULL))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0 AND c.grp IS NULL))[1]
      INTO v_tids, v_ids, v_grps, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id, s.priority, s.grp
              FROM message s
             WHERE s.queue = p_queue AND s.id = ANY (p_ids)
               AND s.visible_at <= v_now AND s.attempt < v_max
               AND (s.parked_until IS NULL OR s.parked_until <= v_now)
             ORDER BY s.created_at, s.id
             LIMIT v_allowed -- NULL: no limit
               FOR UPDATE SKIP LOCKED) c;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;
    -- flow control (flow.sql): keep what the claim has room and tokens for
    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL OR _flow_group_limited(v_q.group_max_in_flight, v_q.group_rate, v_q.group_overrides) THEN
        v_kept := _flow_keep(v_q, v_ids,
                             ARRAY(SELECT u.id FROM unnest(v_ids, v_grps) u(id, g) WHERE u.g IS NOT NULL),
                             ARRAY(SELECT u.g FROM unnest(v_ids, v_grps) u(id, g) WHERE u.g IS NOT NULL),
                             v_token, v_until, v_now);
        IF cardinality(v_kept) = 0 THEN
            RETURN;
        ELSIF cardinality(v_kept) < cardinality(v_ids) THEN
            SELECT array_agg(u.t ORDER BY u.o), array_agg(u.i ORDER BY u.o) INTO v_tids, v_ids
              FROM unnest(v_tids, v_ids) WITH ORDINALITY u(t, i, o)
             WHERE u.i = ANY (v_kept);
            v_last_at := NULL; -- no cursor move
        END IF;
    END IF;

    -- Forward only, and only when the cursor row's lock is free (claim.sql).
    UPDATE claim_cursor c
       SET created_at = v_last_at, id = v_last_id
     WHERE c.queue = p_queue
       AND (c.created_at, c.id) < (v_last_at, v_last_id)
       AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until,
               parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids) -- see claim's promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    IF _flow_limited(v_q.max_in_flight, v_q.group_max_in_flight, v_q.group_overrides) THEN
        PERFORM _flow_free(p_queue, p_token, p_ids); -- grants before messages, in every verb (flow.sql)
    END IF;
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority, m.grp
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority, grp)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority, d.grp FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_dead) u;
END
$$;
-- pgsweep:end functions/claim_ids.sql

-- pgsweep:changed functions/fail.sql
CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval, p_now timestamptz)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_due timestamptz[];
    v_k int := 1;
    v_delay interval;
    v_jitter double precision;
    v_error text := p_error; -- at most max_error_bytes (_check_size below): refused, never truncated
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _check_size('p_error', octet_length(p_error), 'max_error_bytes');
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'consume');
    v_now := coalesce(p_now, clock_timestamp());
    IF _flow_limited(v_q.max_in_flight, v_q.group_max_in_flight, v_q.group_overrides) THEN
        PERFORM _flow_free(p_queue, p_token, p_ids); -- grants before messages, in every verb (flow.sql)
    END IF;

    IF p_retry_after IS NOT NULL THEN
        v_due := ARRAY[v_now + p_retry_after];
    ELSE
        v_jitter := 1 - v_q.backoff_jitter * random();
        LOOP
            v_delay := least(v_q.backoff_max, v_q.backoff_base * power(2, v_k - 1));
            v_due[v_k] := v_now + v_delay * v_jitter;
            EXIT WHEN v_delay >= v_q.backoff_max OR v_k >= v_q.max_attempts OR v_q.backoff_base = interval '0';
            v_k := v_k + 1;
        END LOOP;
    END IF;
    v_k := cardinality(v_due);

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
           AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority, m.grp
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority, grp)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority, d.grp FROM d
        RETURNING x.id, x.lane
    )
    SELECT array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL) INTO v_dead, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead, v_q.lane_dead = 'block', v_now);
    END IF;
    RETURN QUERY SELECT u, true FROM unnest(v_dead) u;

    RETURN QUERY
    UPDATE message m
       -- coalesce: Citus 13.2 mistakes a bare array element at the top of a
       -- SET for an array assignment and crashes; every element is set
       SET status = 'failed', owner = NULL, token = NULL, visible_at = coalesce(v_due[least(m.attempt, v_k)], v_now),
           last_error = v_error,
           parked_until = CASE WHEN v_due[least(m.attempt, v_k)] > v_now THEN coalesce(v_due[least(m.attempt, v_k)], v_now) END
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
       AND m.attempt < v_q.max_attempts
    RETURNING m.id, false;
END
$$;
-- pgsweep:end functions/fail.sql

-- pgsweep:changed functions/queue.sql
CREATE OR REPLACE FUNCTION queue_configure(p_queue text, p_settings jsonb)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_key text;
    v_setting text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan', 'lane_dead', 'max_in_flight',
                         'rate', 'rate_burst', 'group_max_in_flight', 'group_rate', 'group_overrides') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead, max_in_flight, rate, rate_burst, group_max_in_flight, group_rate, group_overrides)', v_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- v_setting names the setting being read, for the error of a value that
    -- does not convert to its type ("soon", 1.5, true, [30]): the message
    -- names the setting and its range like the range checks do, the cast's
    -- own error is the detail. Arrays and objects are refused before any
    -- cast: the interval parser would read '[30]' as 30 seconds.
    BEGIN
        FOR v_setting IN SELECT e.key FROM jsonb_each(p_settings) e
                          WHERE jsonb_typeof(e.value) IN ('array', 'object') AND e.key <> 'group_overrides' LOOP
            RAISE EXCEPTION 'a JSON % is not a value of %', jsonb_typeof(p_settings->v_setting), v_setting
                USING ERRCODE = 'invalid_text_representation';
        END LOOP;
        IF p_settings ? 'max_attempts' THEN
            v_setting := 'max_attempts';
            v_q.max_attempts := (p_settings->>'max_attempts')::int;
            PERFORM _check_int('max_attempts', v_q.max_attempts, 1, 1000);
        END IF;
        IF p_settings ? 'backoff_base' THEN
            v_setting := 'backoff_base';
            v_q.backoff_base := (p_settings->>'backoff_base')::interval;
            PERFORM _check_interval('backoff_base', v_q.backoff_base, interval '0 seconds', interval '1 day');
        END IF;
        IF p_settings ? 'backoff_max' THEN
            v_setting := 'backoff_max';
            v_q.backoff_max := (p_settings->>'backoff_max')::interval;
        END IF;
        PERFORM _check_interval('backoff_max', v_q.backoff_max, v_q.backoff_base, interval '7 days');
        IF p_settings ? 'backoff_jitter' THEN
            v_setting := 'backoff_jitter';
            v_q.backoff_jitter := (p_settings->>'backoff_jitter')::double precision;
            IF v_q.backoff_jitter IS NULL OR NOT v_q.backoff_jitter BETWEEN 0 AND 1 THEN
                RAISE EXCEPTION 'backoff_jitter must be a number between 0 and 1, got %', coalesce(p_settings->>'backoff_jitter', 'null')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        IF p_settings ? 'lease_default' THEN
            v_setting := 'lease_default';
            v_q.lease_default := (p_settings->>'lease_default')::interval;
            PERFORM _check_interval('lease_default', v_q.lease_default, interval '1 second', interval '1 hour');
        END IF;
        IF p_settings ? 'claim_rescan' THEN
            v_setting := 'claim_rescan';
            v_q.claim_rescan := (p_settings->>'claim_rescan')::interval;
            PERFORM _check_interval('claim_rescan', v_q.claim_rescan, interval '0 seconds', interval '1 minute');
        END IF;
        IF p_settings ? 'lane_dead' THEN
            v_setting := 'lane_dead';
            IF jsonb_typeof(p_settings->'lane_dead') IS DISTINCT FROM 'string'
               OR p_settings->>'lane_dead' NOT IN ('move_on', 'block') THEN
                RAISE EXCEPTION 'lane_dead must be "move_on" or "block", got %', p_settings->'lane_dead'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            v_q.lane_dead := p_settings->>'lane_dead';
        END IF;
        IF p_settings ? 'max_in_flight' THEN
            v_setting := 'max_in_flight';
            v_q.max_in_flight := (p_settings->>'max_in_flight')::int;
            IF v_q.max_in_flight IS NOT NULL THEN
                PERFORM _check_int('max_in_flight', v_q.max_in_flight, 1, 100000);
            END IF;
        END IF;
        IF p_settings ? 'rate' THEN
            v_setting := 'rate';
            SELECT r.n, r.per INTO v_q.rate, v_q.rate_per FROM _check_rate('rate', p_settings->'rate') r;
        END IF;
        IF p_settings ? 'rate_burst' THEN
            v_setting := 'rate_burst';
            v_q.rate_burst := (p_settings->>'rate_burst')::int;
            IF v_q.rate_burst IS NOT NULL THEN
                PERFORM _check_int('rate_burst', v_q.rate_burst, 1, 1000000);
            END IF;
        END IF;
        IF p_settings ? 'group_max_in_flight' THEN
            v_setting := 'group_max_in_flight';
            v_q.group_max_in_flight := (p_settings->>'group_max_in_flight')::int;
            IF v_q.group_max_in_flight IS NOT NULL THEN
                PERFORM _check_int('group_max_in_flight', v_q.group_max_in_flight, 1, 100000);
            END IF;
        END IF;
        IF p_settings ? 'group_rate' THEN
            v_setting := 'group_rate';
            SELECT r.n, r.per INTO v_q.group_rate, v_q.group_rate_per FROM _check_rate('group_rate', p_settings->'group_rate') r;
        END IF;
        IF p_settings ? 'group_overrides' THEN
            v_setting := 'group_overrides';
            v_q.group_overrides := _check_group_overrides(v_q.group_overrides, p_settings->'group_overrides');
        END IF;
        IF p_settings ? 'processed_retention' THEN
            v_setting := 'processed_retention';
            v_q.processed_retention := (p_settings->>'processed_retention')::interval;
            IF v_q.processed_retention IS NOT NULL THEN
                PERFORM _check_interval('processed_retention', v_q.processed_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
        IF p_settings ? 'dead_retention' THEN
            v_setting := 'dead_retention';
            v_q.dead_retention := (p_settings->>'dead_retention')::interval;
            IF v_q.dead_retention IS NOT NULL THEN
                PERFORM _check_interval('dead_retention', v_q.dead_retention, interval '1 second', interval '100 years');
            END IF;
        END IF;
    EXCEPTION
        WHEN invalid_text_representation OR invalid_datetime_format OR datetime_field_overflow
             OR numeric_value_out_of_range OR interval_field_overflow THEN
            RAISE EXCEPTION '% must be %, got %', v_setting,
                CASE v_setting
                    WHEN 'max_attempts' THEN 'an integer between 1 and 1000'
                    WHEN 'backoff_base' THEN 'an interval between 0 seconds and 1 day'
                    WHEN 'backoff_max' THEN 'an interval between backoff_base and 7 days'
                    WHEN 'backoff_jitter' THEN 'a number between 0 and 1'
                    WHEN 'lease_default' THEN 'an interval between 1 second and 1 hour'
                    WHEN 'claim_rescan' THEN 'an interval between 0 seconds and 1 minute'
                    WHEN 'lane_dead' THEN '"move_on" or "block"'
                    WHEN 'max_in_flight' THEN 'an integer between 1 and 100000, or null (no limit)'
                    WHEN 'rate_burst' THEN 'an integer between 1 and 1000000, or null (the rate''s N)'
                    WHEN 'rate' THEN '''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate)'
                    WHEN 'group_max_in_flight' THEN 'an integer between 1 and 100000, or null (no limit)'
                    WHEN 'group_rate' THEN '''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate)'
                    WHEN 'group_overrides' THEN 'an object of groups, each {"max_in_flight": 1..100000, "rate": "N/s" or "N/min"} or null (no override)'
                    ELSE 'an interval between 1 second and 100 years, or null (keep forever)' END,
                p_settings->v_setting
                USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;

    UPDATE queue
       SET max_attempts = v_q.max_attempts,
           backoff_base = v_q.backoff_base,
           backoff_max = v_q.backoff_max,
           backoff_jitter = v_q.backoff_jitter,
           lease_default = v_q.lease_default,
           claim_rescan = v_q.claim_rescan,
           processed_retention = v_q.processed_retention,
           dead_retention = v_q.dead_retention,
           lane_dead = v_q.lane_dead,
           max_in_flight = v_q.max_in_flight,
           rate = v_q.rate,
           rate_per = v_q.rate_per,
           rate_burst = v_q.rate_burst,
           group_max_in_flight = v_q.group_max_in_flight,
           group_rate = v_q.group_rate,
           group_rate_per = v_q.group_rate_per,
           group_overrides = v_q.group_overrides,
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    IF p_settings ?| ARRAY['max_in_flight', 'rate', 'rate_burst', 'group_max_in_flight', 'group_rate', 'group_overrides'] THEN
        PERFORM _flow_set(v_q, p_settings ?| ARRAY['max_in_flight', 'group_max_in_flight', 'group_overrides'], clock_timestamp());
    END IF;
    RETURN v_q;
END
$$;

CREATE OR REPLACE FUNCTION notify_channel()
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN left(current_schema(), 54) || '_messages'; -- PL/pgSQL: planned once, not at every settle (flow.sql)
END
$$;
-- pgsweep:end functions/queue.sql

-- pgsweep:changed functions/queue_ops.sql
CREATE OR REPLACE FUNCTION queue_drop(p_queue text, p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_n bigint;
    v_live bigint;
BEGIN
    IF p_force IS NULL THEN
        RAISE EXCEPTION 'p_force must be true or false, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_manage(p_queue);
    -- Sends hold the queue row FOR KEY SHARE (send.sql): this waits for the
    -- sends in progress, and a later send finds no queue. So no message is
    -- committed after the DELETE below: none is left without its queue.
    PERFORM 1 FROM queue q WHERE q.name = p_queue FOR UPDATE;
    v_now := clock_timestamp();
    -- Flow control's gates (in the order every taker of several gates uses),
    -- grants and bucket before the messages: the lock order of every verb
    -- (flow.sql).
    PERFORM 1 FROM flow_gate g WHERE g.queue = p_queue ORDER BY g.grp COLLATE "C", g.stripe FOR UPDATE;
    DELETE FROM flow_grant f WHERE f.queue = p_queue;
    DELETE FROM flow_bucket b WHERE b.queue = p_queue;
    -- Delete first, then look: the DELETE waits for claims in progress and
    -- sees what they committed, so no lease slips in between check and act.
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue
        RETURNING m.status, m.visible_at
    )
    SELECT count(*), count(*) FILTER (WHERE d.status = 'processing' AND d.visible_at > v_now) INTO v_n, v_live FROM d;
    IF v_live > 0 AND NOT p_force THEN
        RAISE EXCEPTION 'queue "%" has % message(s) in flight; stop its workers first, or drop it anyway with p_force', p_queue, v_live
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT queue_drop(%L, p_force => true) drops it with them; their workers'' calls then fail (unknown queue)', p_queue);
    END IF;
    -- the lanes after the messages (a completion in progress holds its heads
    -- and then locks their lanes), in the one lane order (lane.sql)
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name COLLATE "C" FOR UPDATE;
    DELETE FROM lane l WHERE l.queue = p_queue;
    DELETE FROM message_processed p WHERE p.queue = p_queue;
    DELETE FROM message_dead d WHERE d.queue = p_queue;
    DELETE FROM message_unique u WHERE u.queue = p_queue;
    DELETE FROM claim_cursor c WHERE c.queue = p_queue;
    DELETE FROM group_cursor c WHERE c.queue = p_queue;
    -- the gates last, and the grants again: the message DELETE above waited
    -- for the claims in progress, which may have made a gate or a grant
    DELETE FROM flow_gate f WHERE f.queue = p_queue;
    DELETE FROM flow_grant f WHERE f.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
-- pgsweep:end functions/queue_ops.sql

-- pgsweep:changed functions/citus.sql
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE notifying(name) AS (
        -- the functions whose body calls pg_notify, or calls one of those;
        -- not _notify_local, which never notifies on Citus (flow.sql)
        SELECT p.proname::text FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ '\mpg_notify\M' AND p.proname <> '_notify_local'
        UNION
        SELECT p.proname::text FROM pg_catalog.pg_proc p, notifying n
         WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND p.prosrc ~ ('\m' || n.name || '\s*\(')
    )
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.proname::text NOT IN (SELECT n.name FROM notifying n)
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.unnest(p.proargnames) WITH ORDINALITY a(name, n)
     WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
       AND p.prokind = 'f'
       AND a.name = 'p_queue'
       AND a.n <= p.pronargs
       AND (p.proargmodes IS NULL OR p.proargmodes[a.n] IN ('i', 'b'))
       AND p.proargtypes[a.n - 1] = 'pg_catalog.text'::pg_catalog.regtype
       AND p.proname <> '_queue_get'
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'reference'
                          AND p.prosrc ~* ('\m(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+' || t.table_name || '\M'))
       -- a routine that reads a coordinator-only table (stats_history reads
       -- maintain_snapshot) runs where that table is, not on a worker
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'local' AND p.prosrc ~ ('\m' || t.table_name || '\M'))
     ORDER BY 1
$$;
-- pgsweep:end functions/citus.sql

-- pgsweep:changed functions/dead.sql
CREATE OR REPLACE FUNCTION dead_requeue(p_queue text, p_ids bigint[], p_deliver_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_visible timestamptz;
    v_ids bigint[];
    v_lanes text[];
    v_lane text;
    v_l record;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    v_q := _queue_get(p_queue);
    PERFORM _queue_require(p_queue, 'manage');
    v_now := clock_timestamp();
    v_visible := coalesce(p_deliver_at, v_now);

    WITH d AS (
        DELETE FROM message_dead x
         WHERE x.queue = p_queue AND x.id = ANY (p_ids)
           AND NOT (v_q.kind = 'inbox' AND x.key IS NOT NULL AND (
                    EXISTS (SELECT 1 FROM message l WHERE l.queue = p_queue AND l.key = x.key AND l.dedup)
                 OR EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = x.key)))
        RETURNING x.queue, x.id, x.key, x.payload, x.headers, x.last_error, x.created_at, x.lane, x.priority, x.grp
    ), i AS (
        -- a lane's letters wait in their lane (infinity); the head is chosen below
        INSERT INTO message AS m (queue, id, key, dedup, payload, headers, status, attempt, visible_at, created_at, last_error,
                                  parked_until, lane, priority, grp)
        SELECT d.queue, d.id, d.key, v_q.kind = 'inbox' AND d.key IS NOT NULL, d.payload, d.headers, 'pending', 0,
               v_visible, d.created_at, d.last_error,
               CASE WHEN d.lane IS NOT NULL THEN 'infinity'::timestamptz WHEN v_visible > v_now THEN v_visible END, d.lane,
               d.priority, d.grp
          FROM d
        RETURNING m.id, m.lane
    )
    SELECT array_agg(i.id), array_agg(DISTINCT i.lane) FILTER (WHERE i.lane IS NOT NULL) INTO v_ids, v_lanes FROM i;

    -- Each lane, locked in name order (lane.sql), after the letters are in:
    -- a lane that emptied meanwhile is created again by _lane_lock.
    FOR v_lane IN SELECT u FROM unnest(v_lanes) u ORDER BY u COLLATE "C" LOOP
        v_l := _lane_lock(p_queue, v_lane, v_now);
        IF v_l.blocked_id = ANY (v_ids) THEN
            -- the letter that stopped the lane: its head again
            UPDATE message m SET parked_until = CASE WHEN v_visible > v_now THEN v_visible END
             WHERE m.queue = p_queue AND m.id = v_l.blocked_id;
            UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        ELSIF v_l.created THEN
            -- a lane that had no message: its oldest requeued letter leads
            PERFORM _lane_next(p_queue, ARRAY[v_lane], v_now, false);
        ELSE
            PERFORM _lane_busy(p_queue, v_lane, v_l.blocked_id, v_now); -- a head, or the lane is blocked
        END IF;
    END LOOP;

    IF v_ids IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/dead.sql

-- pgsweep:changed functions/maintain_schedules.sql
CREATE OR REPLACE FUNCTION _schedule_run(p_now timestamptz DEFAULT NULL, p_limit int DEFAULT 100)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_missed interval := setting_interval('schedule_missed_after');
    s schedule;
    v_q queue;
    v_slots timestamptz[];
    v_slot timestamptz;
    v_latest timestamptz;
    v_r record;
    v_key text;
    v_last_id bigint;
    v_rows int := 0; -- schedules moved on
    v_sent int := 0;
    v_fired int := 0;
    v_skipped int := 0;
    v_refused int := 0;
    v_more boolean := false;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    FOR s IN SELECT * FROM schedule x
              WHERE NOT x.paused AND x.next_at <= v_now
              ORDER BY x.last_error IS NOT NULL, x.next_at -- a refused schedule (it stays due) does not hold up the others
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED LOOP
        SELECT * INTO v_q FROM queue q WHERE q.name = s.queue FOR KEY SHARE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND; -- being dropped (or locked by hand): the next step sees
        IF NOT _queue_role_holds(s.owner_name, s.queue, 'send') THEN
            v_refused := v_refused + 1;
            UPDATE schedule x
               SET last_error = format('role "%s" lacks send on queue "%s": nothing sent (queue_grant, or re-create the schedule as a role that holds it)',
                                       s.owner_name, s.queue)
             WHERE x.name = s.name;
            CONTINUE;
        END IF;
        IF s.catch_up = 'all' THEN
            v_slots := ARRAY(SELECT t FROM _cron_next(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or,
                                                       s.every_secs, s.time_zone, s.last_slot, 1000, v_now) t);
            v_latest := v_slots[cardinality(v_slots)];
            IF cardinality(v_slots) = 1000 AND _schedule_next(s, v_latest) <= v_now THEN
                v_more := true;
            END IF;
        ELSE
            v_latest := _cron_latest(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or, s.every_secs,
                                     s.time_zone, s.last_slot, v_now);
            v_slots := CASE WHEN v_latest IS NULL THEN '{}'
                            WHEN s.catch_up = 'none' AND v_latest < v_now - v_missed THEN '{}'
                            ELSE ARRAY[v_latest] END;
            IF v_latest IS NOT NULL AND (cardinality(v_slots) = 0 OR v_latest > s.next_at) THEN
                v_skipped := v_skipped + 1;
            END IF;
        END IF;
        v_last_id := s.last_id;
        FOREACH v_slot IN ARRAY v_slots LOOP
            -- the slot is the message's key (its identity for a relay, the
            -- de-duplication of an inbox) and, on an outbox, its unique key:
            -- a slot sent twice would be a duplicate while the first is live
            v_key := 'pgsweep-schedule:' || s.name || '@' || _schedule_slot_text(v_slot);
            v_r := _send(v_q, s.payload,
                         s.headers || jsonb_build_object('pgsweep-schedule', s.name, 'pgsweep-slot', _schedule_slot_text(v_slot)),
                         v_key, NULL, v_now, s.lane, CASE WHEN v_q.kind = 'outbox' THEN v_key END, NULL, 0::smallint, NULL::text);
            IF NOT v_r.duplicate THEN
                v_sent := v_sent + 1;
                v_last_id := v_r.id;
            END IF;
        END LOOP;
        IF cardinality(v_slots) > 0 THEN
            v_fired := v_fired + 1;
            PERFORM pg_notify(notify_channel(), s.queue);
        END IF;
        v_rows := v_rows + 1;
        v_latest := coalesce(v_latest, s.next_at); -- (no slot found: the next is past the bound; move on)
        UPDATE schedule x
           SET last_slot = v_latest,
               next_at = _schedule_next(s, v_latest),
               last_at = CASE WHEN cardinality(v_slots) > 0 THEN v_now ELSE x.last_at END,
               last_id = v_last_id,
               last_error = NULL
         WHERE x.name = s.name;
    END LOOP;
    RETURN jsonb_build_object('sent', v_sent, 'fired', v_fired, 'skipped', v_skipped, 'refused', v_refused,
                              'more', v_more OR v_rows = p_limit);
END
$$;
-- pgsweep:end functions/maintain_schedules.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'send_unique', 'send_batch_unique', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        'queue_info', -- the Worker reads the queue's lease_default and max_attempts (no payloads; consume, queue_rights.sql)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'dead_delete', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'queue_grant', 'queue_revoke', 'queue_rights', -- per-queue rights (queue_rights.sql)
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker wrappers call: the owner proof's definer halves
        -- (retention_register.sql) and the pg_cron command (cron.sql)
        'retention_register_proved', 'retention_unregister_proved', 'retention_set_filter_proved',
        'retention_set_lease_ttl_proved', 'retention_set_strategy_proved', 'retention_set_time_zone_proved',
        'retention_owner_proof', 'retention_owner_proof_drop',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'schedule_create', 'schedule_pause', 'schedule_resume', 'schedule_drop', -- periodic schedules (schedule.sql)
        'maintain_fail_owner', -- the runner: a pass whose session is gone
        'retention_step_begin', 'retention_step', 'retention_step_claim', 'retention_step_record',
        'retention_step_end', 'retention_step_unlock', 'retention_step_pass', 'retention_step_session_state', 'retention_step_session_restore']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'group_stats', 'flow_stats', 'version',
        'lease_rows', 'setting_rows', 'queue_rows', -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
        'stats_latest', 'stats_history', -- the queue snapshots (stats.sql): counts, never payloads
        'health', 'health_server', 'health_install', -- the findings (health.sql): no payload, header or query text
        'cron_job_name', -- the name health_server looks for in pg_cron's jobs (cron.sql)
        'browse_messages', 'browse_message', -- a queue's messages by state, one by id (browse.sql): payloads only with the browse right
        'browse_lanes', 'browse_leases', -- keyset pages of a queue's lanes (browse_lanes.sql) and of the leases (lease.sql)
        'browse_maintenance_passes', 'browse_retention_passes', -- keyset pages of the pass histories (browse_passes.sql)
        'schedule_next_times', -- a cron expression's next slots (schedule_cron.sql): reads no table
        'schedule_rows']) r -- the schedules view's rows (schedule.sql): no payload, no header
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/recover.sql
CREATE OR REPLACE FUNCTION _queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (recovered int, dead_lettered int)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz;
    v_pos bigint;
    v_bound bigint;
    v_ids bigint[];
    v_last bigint;
    v_rec int := 0;
    v_dead int := 0;
    v_dead_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_int('p_batch', p_batch, 1, 10000);
    PERFORM _check_now('p_now', p_now);
    v_q := _queue_get(p_queue);

    INSERT INTO queue_recovery (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT r.position, r.boundary INTO v_pos, v_bound FROM queue_recovery r WHERE r.queue = p_queue FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
    -- Expired unique windows (send.sql) go too, up to p_batch a call: a send
    -- would replace one anyway; this keeps keys never sent again from piling up.
    DELETE FROM message_unique u
     WHERE u.queue = p_queue
       AND u.unique_key = ANY (ARRAY(SELECT w.unique_key FROM message_unique w
                                      WHERE w.queue = p_queue AND w.until <= v_now
                                      LIMIT p_batch FOR UPDATE SKIP LOCKED))
       AND u.until <= v_now;
    -- So do the places in the groups' rotation (group_cursor) of owners
    -- that have not claimed for a day, expired flow-control grants (flow.sql:
    -- they count for nothing, and a settle would remove them), and the gates
    -- of groups without a live grant (a group's next claim makes its gate
    -- again; one a claim holds is skipped), and the buckets of groups no
    -- claim took from for a minute: full again (a group rate's burst is its
    -- N, refilled each second or minute), the same as none (a group's next
    -- claim makes its bucket full).
    DELETE FROM group_cursor g WHERE g.queue = p_queue AND g.at < v_now - interval '1 day';
    DELETE FROM flow_grant g
     WHERE g.queue = p_queue
       AND g.ctid = ANY (ARRAY(SELECT f.ctid FROM flow_grant f WHERE f.queue = p_queue AND f.expires_at <= v_now
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
    DELETE FROM flow_gate g
     WHERE g.queue = p_queue
       AND g.ctid = ANY (ARRAY(SELECT k.ctid FROM flow_gate k
                                WHERE k.queue = p_queue AND k.grp <> ''
                                  AND NOT EXISTS (SELECT 1 FROM flow_grant f
                                                   WHERE f.queue = p_queue AND f.grp = k.grp AND f.expires_at > v_now)
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
    DELETE FROM flow_bucket b
     WHERE b.queue = p_queue AND b.grp <> '' AND b.at <= v_now - interval '1 minute'
       AND b.ctid = ANY (ARRAY(SELECT k.ctid FROM flow_bucket k
                                WHERE k.queue = p_queue AND k.grp <> '' AND k.at <= v_now - interval '1 minute'
                                LIMIT p_batch FOR UPDATE SKIP LOCKED));
    IF v_bound IS NULL THEN
        SELECT max(m.id) INTO v_bound FROM message m WHERE m.queue = p_queue;
        v_bound := coalesce(v_bound, 0);
        v_pos := 0;
    END IF;

    SELECT array_agg(s.id ORDER BY s.id), max(s.id) INTO v_ids, v_last
      FROM (SELECT m.id
              FROM message m
             WHERE m.queue = p_queue AND m.id > v_pos AND m.id <= v_bound AND m.visible_at <= v_now
               AND (m.owner IS NOT NULL OR m.attempt >= v_q.max_attempts)
             ORDER BY m.id
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED) s;

    IF v_ids IS NULL THEN
        -- empty pass: wrap; the next call captures a new boundary
        UPDATE queue_recovery SET position = 0, boundary = NULL, updated_at = v_now WHERE queue = p_queue;
        RETURN QUERY SELECT 0, 0;
        RETURN;
    END IF;

    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at, m.lane, m.dedup, m.priority, m.grp
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority, grp)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now, d.lane, d.dedup, d.priority, d.grp
          FROM d
        RETURNING message_dead.id, message_dead.lane
    )
    SELECT count(*), array_agg(x.id), array_agg(DISTINCT x.lane) FILTER (WHERE x.lane IS NOT NULL)
      INTO v_dead, v_dead_ids, v_lanes FROM x;
    IF v_lanes IS NOT NULL THEN
        PERFORM _lane_after(p_queue, v_lanes, v_dead_ids, v_q.lane_dead = 'block', v_now);
    END IF;

    UPDATE message m
       SET status = 'failed', owner = NULL, token = NULL, visible_at = v_now, last_error = 'lease expired'
     WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.owner IS NOT NULL AND m.attempt < v_q.max_attempts;
    GET DIAGNOSTICS v_rec = ROW_COUNT;

    UPDATE queue_recovery SET position = v_last, boundary = v_bound, updated_at = v_now WHERE queue = p_queue;
    RETURN QUERY SELECT v_rec, v_dead;
END
$$;
-- pgsweep:end functions/recover.sql

-- pgsweep:changed functions/send.sql
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text, p_unique_key text, p_unique_for interval,
                                 p_priority smallint, p_group text, OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_dup bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
    v_created timestamptz := p_now;
    v_inbox boolean := p_q.kind = 'inbox' AND p_key IS NOT NULL;
    v_snapshot boolean; -- REPEATABLE READ or SERIALIZABLE: one snapshot for the transaction
    v_free boolean;
    v_lane record;
    v_head boolean;
BEGIN
    duplicate := false;
    IF v_inbox THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            duplicate := true;
            RETURN;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            duplicate := true;
            RETURN; -- 1b
        END IF;
    END IF;
    IF p_lane IS NOT NULL THEN
        v_lane := _lane_lock(p_q.name, p_lane, p_now);
        v_created := greatest(p_now, v_lane.last_at);
        v_head := v_lane.created OR NOT _lane_busy(p_q.name, p_lane, v_lane.blocked_id, p_now);
        IF NOT v_head THEN
            v_parked := 'infinity';
        END IF;
    END IF;

    <<ins>>
    BEGIN
        IF v_inbox THEN
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority, p_group)
            ON CONFLICT (queue, key) WHERE dedup DO NOTHING
            RETURNING message.id INTO v_id;
            EXIT ins WHEN v_id IS NULL;
            IF v_snapshot THEN
                -- 3b: raises 40001 when a processed row with the key committed after our snapshot.
                INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
                VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now)
                ON CONFLICT (queue, key) DO NOTHING
                RETURNING true INTO v_free;
                IF v_free THEN
                    DELETE FROM message_processed p WHERE p.queue = p_q.name AND p.id = v_id;
                    -- 3c: the same for a dead letter with the key (message_dead's
                    -- inbox keys are unique since 0.23)
                    v_free := NULL;
                    INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, created_at, dead_at, dedup)
                    VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now, true)
                    ON CONFLICT (queue, key) WHERE dedup DO NOTHING
                    RETURNING true INTO v_free;
                    IF v_free THEN
                        DELETE FROM message_dead x WHERE x.queue = p_q.name AND x.id = v_id;
                        EXIT ins;
                    END IF;
                END IF;
                DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                v_id := NULL;
                EXIT ins;
            END IF;
            IF _inbox_key_kept(p_q.name, p_key) THEN
                DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                v_id := NULL;
            END IF;
        ELSIF p_unique_key IS NULL THEN
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority, p_group)
            RETURNING message.id INTO v_id;
        ELSE
            -- unique send, step 1 (header)
            LOOP
                INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane, priority,
                                     unique_key, grp)
                VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane, p_priority,
                        p_unique_key, p_group)
                ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
                RETURNING message.id INTO v_id;
                EXIT WHEN v_id IS NOT NULL;
                SELECT m.id INTO v_dup FROM message m WHERE m.queue = p_q.name AND m.unique_key = p_unique_key;
                EXIT WHEN v_dup IS NOT NULL;
            END LOOP;
            IF v_id IS NOT NULL THEN
                -- step 2: the window
                v_dup := _unique_window(p_q.name, p_unique_key, v_id, p_unique_for, p_now,
                                        current_setting('transaction_isolation') IN ('repeatable read', 'serializable'));
                IF v_dup IS NOT NULL THEN
                    DELETE FROM message m WHERE m.queue = p_q.name AND m.id = v_id;
                    v_id := NULL;
                END IF;
            END IF;
        END IF;
    END ins;

    IF p_lane IS NOT NULL THEN
        IF v_id IS NULL THEN
            -- a duplicate: the lane is as it was (a row we created goes again)
            IF v_lane.created THEN
                DELETE FROM lane l WHERE l.queue = p_q.name AND l.name = p_lane;
            END IF;
        ELSIF NOT v_lane.created THEN
            UPDATE lane l SET last_at = v_created WHERE l.queue = p_q.name AND l.name = p_lane;
        END IF;
    END IF;
    IF v_id IS NULL THEN
        id := v_dup;
        duplicate := true;
    ELSE
        id := v_id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION _send_one(p_queue text, p_payload jsonb, p_headers jsonb, p_key text,
                                     p_deliver_at timestamptz, p_lane text, p_unique_key text,
                                     p_unique_for interval, p_priority smallint, p_group text,
                                     OUT id bigint, OUT duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_for_send(p_queue);
    v_r record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'send') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'send');
    END IF;
    PERFORM _check_message(p_payload, p_headers, p_key);
    -- (_check_size passes any size up to 100 without a read: validate.sql)
    IF pg_column_size(p_payload) > 100 OR pg_column_size(p_headers) > 100 OR octet_length(p_key) > 100 THEN
        PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
        PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
        PERFORM _check_size('p_key', octet_length(p_key), 'max_key_bytes');
    END IF;
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    PERFORM _check_lane('p_lane', p_lane);
    PERFORM _check_group('p_group', p_group);
    IF p_priority IS DISTINCT FROM 0 THEN
        PERFORM _check_priority('p_priority', p_priority);
    END IF;
    IF p_unique_key IS NOT NULL OR p_unique_for IS NOT NULL THEN
        PERFORM _check_unique('p_unique_key', p_unique_key, 'p_unique_for', p_unique_for,
                              v_q.kind = 'inbox' AND p_key IS NOT NULL);
    END IF;
    v_r := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane,
                 p_unique_key, p_unique_for, p_priority, p_group);
    id := v_r.id;
    duplicate := v_r.duplicate;
    IF NOT duplicate THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL,
                                p_unique_key text DEFAULT NULL, p_unique_for interval DEFAULT NULL,
                                p_priority smallint DEFAULT 0, p_group text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_r record;
BEGIN
    v_r := _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key, p_unique_for, p_priority,
                     p_group);
    RETURN v_r.id;
END
$$;

CREATE OR REPLACE FUNCTION send_unique(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}',
                                       p_key text DEFAULT NULL, p_deliver_at timestamptz DEFAULT NULL,
                                       p_lane text DEFAULT NULL, p_unique_key text DEFAULT NULL,
                                       p_unique_for interval DEFAULT NULL, p_priority smallint DEFAULT 0,
                                       p_group text DEFAULT NULL)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT s.id, s.duplicate
                   FROM _send_one(p_queue, p_payload, p_headers, p_key, p_deliver_at, p_lane, p_unique_key,
                                  p_unique_for, p_priority, p_group) s;
END
$$;

CREATE OR REPLACE FUNCTION _send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[], p_keys text[],
                                       p_deliver_at timestamptz[], p_lanes text[], p_unique_keys text[],
                                       p_unique_for interval[], p_priorities smallint[], p_groups text[])
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_q queue := _queue_for_send(p_queue);
    v_r record;
    v_dups boolean[];
    v_n int := coalesce(cardinality(p_payloads), 0);
    v_now timestamptz;
    v_ids bigint[];
    v_any boolean := false;
    v_lane record;
    v_l record;
    v_names text[] := '{}';
    v_firsts bigint[] := '{}';
    v_busies boolean[] := '{}';
    v_lasts timestamptz[] := '{}';
    v_news boolean[] := '{}';
    i int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'send') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'send');
    END IF;
    -- (_check_size passes any size up to 100 without a read: validate.sql)
    IF p_payloads IS NULL OR v_n < 1 OR v_n > 100 THEN
        PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
        PERFORM _check_size('p_payloads', cardinality(p_payloads), 'max_batch');
    END IF;
    IF (SELECT max(greatest(pg_column_size(u.p), pg_column_size(u.h), octet_length(u.k)))
          FROM unnest(p_payloads, p_headers, p_keys) u(p, h, k)) > 100 THEN
        PERFORM _check_size('p_payloads', (SELECT max(pg_column_size(x)) FROM unnest(p_payloads) x), 'max_payload_bytes'); -- its largest element
        PERFORM _check_size('p_headers', (SELECT max(pg_column_size(x)) FROM unnest(p_headers) x), 'max_headers_bytes');
        PERFORM _check_size('p_keys', (SELECT max(octet_length(x)) FROM unnest(p_keys) x), 'max_key_bytes');
    END IF;
    PERFORM _check_elements('p_headers', cardinality(p_headers), v_n);
    PERFORM _check_elements('p_keys', cardinality(p_keys), v_n);
    PERFORM _check_elements('p_deliver_at', cardinality(p_deliver_at), v_n);
    PERFORM _check_elements('p_lanes', cardinality(p_lanes), v_n);
    PERFORM _check_elements('p_unique_keys', cardinality(p_unique_keys), v_n);
    PERFORM _check_elements('p_unique_for', cardinality(p_unique_for), v_n);
    PERFORM _check_elements('p_priorities', cardinality(p_priorities), v_n);
    PERFORM _check_elements('p_groups', cardinality(p_groups), v_n);
    IF p_groups IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_groups) x WHERE length(x) > 200 OR x !~ '^[A-Za-z0-9_.:/@-]+$') THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_group(format('p_groups[%s]', i), p_groups[i]);
        END LOOP;
    END IF;
    IF p_priorities IS NOT NULL AND EXISTS (SELECT 1 FROM unnest(p_priorities) x WHERE x IS NULL OR x < -100 OR x > 100) THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_priority(format('p_priorities[%s]', i), p_priorities[i]);
        END LOOP;
    END IF;
    IF p_unique_keys IS NOT NULL OR p_unique_for IS NOT NULL THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_unique(format('p_unique_keys[%s]', i), p_unique_keys[i], format('p_unique_for[%s]', i),
                                  p_unique_for[i], v_q.kind = 'inbox' AND p_keys[i] IS NOT NULL);
        END LOOP;
    END IF;
    -- The elements: one plain statement finds whether any could be bad (a
    -- conservative pre-filter: NULL payload, headers not an object, a key or
    -- lane that is not ASCII letters, digits and _.:/@- within its length, a
    -- deliver_at not plainly within range); only then the _check_* calls,
    -- element by element, name the first bad one.
    IF EXISTS (SELECT 1 FROM unnest(p_payloads, p_headers, p_keys, p_deliver_at, p_lanes) u(p, h, k, d, l)
                WHERE u.p IS NULL OR jsonb_typeof(u.h) <> 'object'
                   OR length(u.k) > 1000 OR u.k !~ '^[A-Za-z0-9_.:/@-]+$'
                   OR NOT (isfinite(u.d) AND u.d <= clock_timestamp() + interval '10 years')
                   OR length(u.l) > 200 OR u.l !~ '^[A-Za-z0-9_.:/@-]+$') THEN
        FOR i IN 1 .. v_n LOOP
            PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
            PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
            PERFORM _check_lane(format('p_lanes[%s]', i), p_lanes[i]);
        END LOOP;
    END IF;
    v_now := clock_timestamp();

    -- The lanes, each locked once, in name order; busy: it has a head (or is
    -- blocked), so every message of the batch waits; otherwise the batch's
    -- first message of the lane (first: its index) becomes its head.
    -- (unnest, not subscripts, in the statements below: a subscript of a
    -- text or jsonb array walks the array from its start, once per row.)
    FOR v_lane IN SELECT u.lane, min(u.k) AS first FROM unnest(p_lanes) WITH ORDINALITY u(lane, k)
                   WHERE u.lane IS NOT NULL GROUP BY u.lane ORDER BY u.lane COLLATE "C" LOOP
        v_l := _lane_lock(v_q.name, v_lane.lane, v_now);
        v_names := v_names || v_lane.lane;
        v_firsts := v_firsts || v_lane.first;
        v_busies := v_busies || (NOT v_l.created AND _lane_busy(v_q.name, v_lane.lane, v_l.blocked_id, v_now));
        v_lasts := v_lasts || v_l.last_at;
        v_news := v_news || v_l.created;
    END LOOP;

    IF (v_q.kind = 'inbox' AND p_keys IS NOT NULL) OR p_unique_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send (which finds
        -- the lanes locked already).
        FOR i IN 1 .. v_n LOOP
            v_r := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now, p_lanes[i],
                         p_unique_keys[i], p_unique_for[i], coalesce(p_priorities[i], 0::smallint), p_groups[i]);
            v_ids[i] := v_r.id;
            v_dups[i] := v_r.duplicate;
            v_any := v_any OR NOT v_r.duplicate;
        END LOOP;
        -- lanes created above whose every message was a duplicate
        IF true = ANY (v_news) THEN
            DELETE FROM lane l
             WHERE l.queue = v_q.name AND l.name = ANY (ARRAY(SELECT x.name FROM unnest(v_names, v_news) x(name, new) WHERE x.new))
               AND NOT EXISTS (SELECT 1 FROM message m WHERE m.queue = v_q.name AND m.lane = l.name);
        END IF;
    ELSE
        -- Ids are drawn first (after the lane locks) so that they can be
        -- returned in input order (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane, priority, grp)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane, coalesce(u.priority, 0), u.grp
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes, p_priorities, p_groups)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, priority, grp, k)
          LEFT JOIN unnest(v_names, v_firsts, v_busies, v_lasts) x(name, first, busy, last_at) ON x.name = u.lane;
        IF false = ANY (v_news) THEN -- a lane created here has last_at = v_now already
            UPDATE lane l SET last_at = greatest(v_now, x.last_at)
              FROM unnest(v_names, v_lasts, v_news) x(name, last_at, new)
             WHERE l.queue = v_q.name AND l.name = ANY (v_names) AND l.name = x.name AND NOT x.new;
        END IF;
        v_any := true;
    END IF;
    IF v_any THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u.id, coalesce(u.dup, false) FROM unnest(v_ids, v_dups) u(id, dup);
END
$$;

CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                      p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL,
                                      p_groups text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                              p_unique_keys, p_unique_for, p_priorities, p_groups) b;
END
$$;

CREATE OR REPLACE FUNCTION send_batch_unique(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                             p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                             p_lanes text[] DEFAULT NULL, p_unique_keys text[] DEFAULT NULL,
                                             p_unique_for interval[] DEFAULT NULL, p_priorities smallint[] DEFAULT NULL,
                                             p_groups text[] DEFAULT NULL)
RETURNS TABLE (id bigint, duplicate boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT b.id, b.duplicate
                   FROM _send_batch(p_queue, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes,
                                    p_unique_keys, p_unique_for, p_priorities, p_groups) b;
END
$$;
-- pgsweep:end functions/send.sql

-- pgsweep:changed functions/lane.sql
CREATE OR REPLACE FUNCTION _lane_next(p_queue text, p_lanes text[], p_now timestamptz, p_drop_empty boolean)
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until timestamptz;
    v_one bigint;
    v_ids bigint[];
    v_later bigint[];
    v_at timestamptz[];
    v_promoted text[];
    v_low_at timestamptz;
    v_low_id bigint;
    v_tids tid[];
    v_p_lvls smallint[];
    v_p_ats timestamptz[];
    v_p_ids bigint[];
BEGIN
    SELECT array_agg(x.id), array_agg(x.ctid), array_agg(u.name),
           array_agg(x.id) FILTER (WHERE x.visible_at > p_now), array_agg(x.visible_at) FILTER (WHERE x.visible_at > p_now),
           (array_agg(x.created_at ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0 AND x.grp IS NULL))[1],
           (array_agg(x.id ORDER BY x.created_at, x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority = 0 AND x.grp IS NULL))[1],
           array_agg(x.priority) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL),
           array_agg(x.created_at) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL),
           array_agg(x.id) FILTER (WHERE x.visible_at <= p_now AND x.priority <> 0 AND x.grp IS NULL)
      INTO v_ids, v_tids, v_promoted, v_later, v_at, v_low_at, v_low_id, v_p_lvls, v_p_ats, v_p_ids
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.ctid, m.id, m.visible_at, m.created_at, m.priority, m.grp FROM message m
                          WHERE m.queue = p_queue AND m.lane = u.name
                          ORDER BY m.created_at, m.id
                          LIMIT 1) x;
    IF v_ids IS NOT NULL THEN
        -- By ctid (and id, as claim does: whichever the planner takes, it
        -- touches only these rows): the rows are locked by nobody else --
        -- waiting messages are touched only under their lane's lock, which
        -- the caller holds -- so their ctids stay. By id alone, each row cost
        -- a descent of the primary key.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
        IF v_low_at IS NOT NULL THEN
            -- The new heads usually lie behind the claim cursor (their lanes
            -- were sent long ago), where only a claim's pass before the
            -- cursor finds them, walking every dead entry and row in flight
            -- from the head of the queue (claim.sql). Move the cursor back to
            -- the oldest of them, so the next claims start there. Only when
            -- the row is free (SKIP LOCKED, like the claims' own updates):
            -- the cursor is a hint, and the pass before it still finds every
            -- due row.
            UPDATE claim_cursor c SET created_at = v_low_at, id = v_low_id
             WHERE c.queue = p_queue
               AND c.ctid = (SELECT k.ctid FROM claim_cursor k
                              WHERE k.queue = p_queue AND (k.created_at, k.id) > (v_low_at, v_low_id)
                                FOR UPDATE SKIP LOCKED);
        END IF;
        IF v_p_lvls IS NOT NULL THEN
            -- The same for the priority positions (claim.sql): a level's
            -- position goes back to the oldest new head of that level behind
            -- it (a level without a position is scanned from its head).
            UPDATE claim_cursor c
               SET (priority_ats, priority_ids) =
                   (SELECT array_agg(coalesce(h.at, st.at) ORDER BY st.n), array_agg(coalesce(h.id, st.id) ORDER BY st.n)
                      FROM unnest(c.priority_levels, c.priority_ats, c.priority_ids) WITH ORDINALITY st(lvl, at, id, n)
                      LEFT JOIN LATERAL (SELECT x.at, x.id FROM unnest(v_p_lvls, v_p_ats, v_p_ids) x(lvl, at, id)
                                          WHERE x.lvl = st.lvl AND (x.at, x.id) < (st.at, st.id)
                                          ORDER BY x.at, x.id LIMIT 1) h ON true)
             WHERE c.queue = p_queue
               AND c.ctid = (SELECT k.ctid FROM claim_cursor k
                              WHERE k.queue = p_queue
                                AND EXISTS (SELECT 1 FROM unnest(k.priority_levels, k.priority_ats, k.priority_ids) st(lvl, at, id)
                                              JOIN unnest(v_p_lvls, v_p_ats, v_p_ids) x(lvl, at, id)
                                                ON x.lvl = st.lvl AND (x.at, x.id) < (st.at, st.id))
                                FOR UPDATE SKIP LOCKED);
        END IF;
        IF v_later IS NOT NULL THEN
            -- scheduled for later: parked until its time, as send parks it
            -- (plain values: Citus 13.2 crashes on a bare array element at the
            -- top of an UPDATE's SET)
            FOR i IN 1 .. cardinality(v_later) LOOP
                v_until := v_at[i];
                v_one := v_later[i];
                UPDATE message m SET parked_until = v_until WHERE m.queue = p_queue AND m.id = v_one;
            END LOOP;
        END IF;
    END IF;
    IF p_drop_empty AND coalesce(cardinality(v_ids), 0) < cardinality(p_lanes) THEN
        DELETE FROM lane l
         WHERE l.queue = p_queue AND l.name = ANY (p_lanes) AND NOT l.name = ANY (coalesce(v_promoted, '{}'));
    END IF;
    RETURN coalesce(cardinality(v_ids), 0);
END
$$;
-- pgsweep:end functions/lane.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
