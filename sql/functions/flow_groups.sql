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

-- _group_room: how many more rows a claim at p_now may look for in group
-- p_grp of queue p_queue, having taken p_taken of them already: its
-- max_in_flight minus what its live grants hold, its bucket's whole tokens
-- (the settings: p_overrides, p_group_max, p_group_rate per p_group_per);
-- NULL: no bound. Read without locks: _flow_keep decides.
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

-- _check_group_overrides: queue_configure's group_overrides p_given merged
-- into the overrides p_have: an object whose keys are group names (the
-- name rule of _check_group), each value null (the group's override goes)
-- or an object of the group's own settings, merged into its earlier ones:
-- "max_in_flight" 1..100000, "rate" 'N/s' or 'N/min' (N 1..1000000; kept
-- as _flow_rate_text writes it), a setting null to remove it. Null instead
-- of the object removes them all. At most 10000 groups have overrides.
-- NULL when none is left.
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
