-- pgsweep 0.43: flow control (issue 26). A queue's max_in_flight
-- (queue_configure) bounds the messages of the queue leased at once, across
-- every worker and replica: a claim takes a free slot of flow_slot for each
-- message it takes (flow.sql); a queue's rate ('N/s', 'N/min', with
-- rate_burst) is a token bucket in flow_bucket that claims refill and spend.
-- A queue without either has no rows there and pays nothing.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DO $$
BEGIN
    EXECUTE 'ALTER TABLE queue ADD COLUMN max_in_flight int, ADD COLUMN rate int, ADD COLUMN rate_per interval, '
            'ADD COLUMN rate_burst int';
END
$$;

CREATE TABLE flow_slot (
    queue      text NOT NULL,
    n          int NOT NULL,
    message_id bigint,
    token      uuid,
    -- free once passed: '-infinity' when settled, the lease's expiry while held
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (queue, n)
);
COMMENT ON TABLE flow_slot IS 'pgsweep max_in_flight slots: one row per message a queue may have in flight (flow.sql)';
-- claims find the free slots (expires_at passed) without reading the held ones
CREATE INDEX flow_slot_free ON flow_slot (queue, expires_at);
-- complete, fail, release, dead_letter and renew find their claim's slots by token
CREATE INDEX flow_slot_token ON flow_slot (queue, token) WHERE token IS NOT NULL;

CREATE TABLE flow_bucket (
    queue  text PRIMARY KEY,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL
);
COMMENT ON TABLE flow_bucket IS 'pgsweep rate token buckets: one row per queue with a rate (flow.sql)';

-- pgsweep:changed functions/flow.sql
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
-- pgsweep:end functions/flow.sql

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
    IF v_q.max_in_flight IS NULL THEN
        RETURN QUERY
        UPDATE message m SET visible_at = v_until
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.id;
        RETURN;
    END IF;
    -- max_in_flight (flow.sql): the claim's slots first (the lock order of
    -- every verb), a lease renewed only while its slot is still its own --
    -- and not a slot above a lowered limit that expired: claims may have
    -- used the room since -- then the slots of the leases renewed.
    SELECT array_agg(x.message_id) INTO v_held
      FROM (SELECT s.message_id FROM flow_slot s
             WHERE s.queue = p_queue AND s.token = p_token AND s.message_id = ANY (p_ids)
               AND (s.n <= v_q.max_in_flight OR s.expires_at > v_now)
               FOR UPDATE) x;
    RETURN QUERY
    WITH r AS (
        UPDATE message m SET visible_at = v_until
         WHERE m.queue = p_queue AND m.id = ANY (v_held) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.id
    ), s AS (
        UPDATE flow_slot s SET expires_at = v_until
         WHERE s.queue = p_queue AND s.token = p_token AND s.message_id IN (SELECT r.id FROM r)
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
    v_limit int;
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
    SELECT q.kind, q.max_in_flight INTO v_kind, v_limit FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    IF v_limit IS NOT NULL THEN
        PERFORM _flow_free(p_queue, p_token, p_ids, v_limit); -- slots before messages, in every verb (flow.sql)
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
    v_limit int;
BEGIN
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    v_limit := (_queue_get(p_queue)).max_in_flight;
    PERFORM _queue_require(p_queue, 'consume');
    IF v_limit IS NOT NULL THEN
        PERFORM _flow_free(p_queue, p_token, p_ids, v_limit); -- slots before messages, in every verb (flow.sql)
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
    v_keep int;
    v_slots tid[];
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
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused,
           q.max_in_flight, q.rate / extract(epoch FROM q.rate_per), coalesce(q.rate_burst, q.rate)
      INTO v_max, v_lease, v_rescan_every, v_paused, v_limit, v_rate, v_burst
      FROM queue q
     WHERE q.name = p_queue;
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
    -- slots and tokens, at most.
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
                        WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0 AND s.priority = l.lvl
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
                         WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority = 0
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
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0
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
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- Flow control: keep as many rows as the claim locks slots and tokens
    -- for. In a race that cut it no cursor or position moves: the rows let
    -- go stay where the next claim looks.
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        SELECT a.slots, a.allowed INTO v_slots, v_keep FROM _flow_allow(p_queue, v_limit, v_rate, v_burst, v_n, v_now) a;
        IF v_keep = 0 THEN
            RETURN;
        ELSIF v_keep < v_n THEN
            v_all := v_all[1:v_keep];
            v_all_ids := v_all_ids[1:v_keep];
            v_n := v_keep;
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

    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        PERFORM _flow_claimed(p_queue, v_slots, v_all_ids, v_token, v_until, v_rate IS NOT NULL);
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
    v_slots tid[];
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.paused,
           q.max_in_flight, q.rate / extract(epoch FROM q.rate_per), coalesce(q.rate_burst, q.rate)
      INTO v_max, v_lease, v_paused, v_limit, v_rate, v_burst
      FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    PERFORM _queue_require(p_queue, 'consume');
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN -- flow control (flow.sql): as many rows as slots and tokens
        v_allowed := _flow_room(p_queue, v_limit, v_rate, v_burst, cardinality(p_ids), v_now);
        IF v_allowed = 0 THEN
            RETURN;
        END IF;
    END IF;

    -- (the cursor walks the rows of the default priority only: claim.sql)
    SELECT array_agg(c.ctid), array_agg(c.id),
           (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0))[1],
           (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC) FILTER (WHERE c.priority = 0))[1]
      INTO v_tids, v_ids, v_last_at, v_last_id
      FROM (SELECT s.ctid, s.created_at, s.id, s.priority
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
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN -- keep what the claim locks slots and tokens for
        SELECT a.slots, a.allowed INTO v_slots, v_allowed FROM _flow_allow(p_queue, v_limit, v_rate, v_burst, cardinality(v_ids), v_now) a;
        IF v_allowed = 0 THEN
            RETURN;
        ELSIF v_allowed < cardinality(v_ids) THEN
            v_tids := v_tids[1:v_allowed];
            v_ids := v_ids[1:v_allowed];
            v_last_at := NULL; -- no cursor move
        END IF;
    END IF;

    -- Forward only, and only when the cursor row's lock is free (claim.sql).
    UPDATE claim_cursor c
       SET created_at = v_last_at, id = v_last_id
     WHERE c.queue = p_queue
       AND (c.created_at, c.id) < (v_last_at, v_last_id)
       AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);

    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        PERFORM _flow_claimed(p_queue, v_slots, v_ids, v_token, v_until, v_rate IS NOT NULL);
    END IF;
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
    IF v_q.max_in_flight IS NOT NULL THEN
        PERFORM _flow_free(p_queue, p_token, p_ids, v_q.max_in_flight); -- slots before messages, in every verb (flow.sql)
    END IF;
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority FROM d
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
    IF v_q.max_in_flight IS NOT NULL THEN
        PERFORM _flow_free(p_queue, p_token, p_ids, v_q.max_in_flight); -- slots before messages, in every verb (flow.sql)
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane, m.dedup, m.priority
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane, dedup, priority)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane, d.dedup, d.priority FROM d
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
                         'rate', 'rate_burst') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan, lane_dead, max_in_flight, rate, rate_burst)', v_key
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- v_setting names the setting being read, for the error of a value that
    -- does not convert to its type ("soon", 1.5, true, [30]): the message
    -- names the setting and its range like the range checks do, the cast's
    -- own error is the detail. Arrays and objects are refused before any
    -- cast: the interval parser would read '[30]' as 30 seconds.
    BEGIN
        FOR v_setting IN SELECT e.key FROM jsonb_each(p_settings) e WHERE jsonb_typeof(e.value) IN ('array', 'object') LOOP
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
            IF jsonb_typeof(p_settings->'rate') = 'null' THEN
                v_q.rate := NULL;
                v_q.rate_per := NULL;
            ELSIF jsonb_typeof(p_settings->'rate') <> 'string' OR p_settings->>'rate' !~ '^[0-9]{1,7}/(s|min)$' THEN
                RAISE EXCEPTION 'rate must be ''N/s'' or ''N/min'' with N between 1 and 1000000, or null (no rate), got %',
                    p_settings->'rate'
                    USING ERRCODE = 'invalid_parameter_value';
            ELSE
                v_q.rate := split_part(p_settings->>'rate', '/', 1)::int;
                PERFORM _check_int('rate', v_q.rate, 1, 1000000);
                v_q.rate_per := CASE split_part(p_settings->>'rate', '/', 2) WHEN 's' THEN interval '1 second' ELSE interval '1 minute' END;
            END IF;
        END IF;
        IF p_settings ? 'rate_burst' THEN
            v_setting := 'rate_burst';
            v_q.rate_burst := (p_settings->>'rate_burst')::int;
            IF v_q.rate_burst IS NOT NULL THEN
                PERFORM _check_int('rate_burst', v_q.rate_burst, 1, 1000000);
            END IF;
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
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    IF p_settings ?| ARRAY['max_in_flight', 'rate', 'rate_burst'] THEN
        PERFORM _flow_set(p_queue, v_q.max_in_flight, p_settings ? 'max_in_flight', v_q.rate IS NOT NULL,
                          coalesce(v_q.rate_burst, v_q.rate), clock_timestamp());
    END IF;
    RETURN v_q;
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
    -- Flow control's slots and bucket before the messages: the lock order
    -- of every verb (flow.sql).
    DELETE FROM flow_slot f WHERE f.queue = p_queue;
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

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
