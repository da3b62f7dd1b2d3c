-- renew and complete: act only on rows whose current claim carries p_token,
-- return their ids.
--
-- Fencing is by the claim token (claim.sql): every claim call stores a fresh
-- token in the rows it takes, and fail, release and queue_recover end the
-- claim (status no longer 'processing'), so a call with the token of an
-- earlier claim matches nothing and the caller learns exactly which leases it
-- lost -- also when the row was taken again by the same owner, which the
-- owner label could not tell apart. A lease that expired but was not taken
-- over still carries its token: completing it then is the best outcome (no
-- redelivery), and nobody else held it meanwhile.
--
-- The verbs (renew, complete, fail, release without p_now) are SECURITY
-- DEFINER: workers hold no privilege on the tables, so the token is the only
-- way to a row. The p_now overloads are for tests.

CREATE OR REPLACE FUNCTION _check_ids(p_ids bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'p_ids must hold 1 to 10000 ids, got %',
            CASE WHEN p_ids IS NULL THEN 'NULL' ELSE cardinality(p_ids)::text END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_size('p_ids', cardinality(p_ids), 'max_batch');
END
$$;

CREATE OR REPLACE FUNCTION _check_token(p_token uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'p_token must be the token claim returned, got NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

-- renew extends the leases to p_lease from now (NULL: the queue's lease_default).
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

CREATE OR REPLACE FUNCTION renew(p_queue text, p_token uuid, p_ids bigint[], p_lease interval)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT renew(p_queue, p_token, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- complete: outbox rows are deleted; inbox rows move to message_processed,
-- where they keep de-duplicating their key until retention removes them.
-- A completed lane head makes its lane move on to its next message, in this
-- transaction (lane.sql): the lane's row is locked for that, so a completion
-- waits for a transaction that is sending to the same lane.
--
-- The common case pays nothing for lanes: when the queue has no lane row at
-- all, none of the rows completed here has a lane (a lane's row exists, and
-- is committed, for as long as the lane has a message, and the rows completed
-- here are in flight), so the DELETE returns the ids straight away instead
-- of gathering ids and lanes into arrays first, work that would otherwise
-- show in every claim + complete.
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

CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT complete(p_queue, p_token, p_ids, NULL::timestamptz);
END
$$;

-- release: give messages back unprocessed, as if the claim had not happened:
-- the attempt is taken back, owner and token cleared, and the row is due at
-- once (status 'pending' again, or 'failed' when an earlier attempt had
-- failed). For messages claimed but never started -- a worker shutting down
-- releases what it has not begun -- so a restart or a deploy neither waits
-- for their leases to expire nor spends an attempt on them. A message whose
-- handler ran must be completed or failed instead: releasing it would hide
-- that attempt.
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
