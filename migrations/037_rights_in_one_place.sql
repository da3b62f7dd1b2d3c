-- pgsweep 0.37: rights in one place.
--
-- The hot verbs' probe of a plain grant is written once, as the view
-- _queue_right_held (queue_rights.sql), not four times inline; claim and
-- complete read it in the statement that reads the queue (one statement
-- fewer a call). _queue_require stays the rule; no behaviour changes.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:changed functions/ack.sql
CREATE OR REPLACE FUNCTION complete(p_queue text, p_token uuid, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
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
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume') THEN -- the rule: _queue_require
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
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
-- pgsweep:end functions/ack.sql

-- pgsweep:changed functions/claim.sql
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
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
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused
      INTO v_max, v_lease, v_rescan_every, v_paused
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
           EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume')
      INTO v_cursor_at, v_cursor_id, v_rescanned, v_held
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
    FOR pass IN 1 .. 2 LOOP
        SELECT array_agg(c.ctid), array_agg(c.id),
               (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
               (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
          INTO v_tids, v_ids, v_at, v_id
          FROM (SELECT s.ctid, s.created_at, s.id
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL
                   AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                   AND (s.created_at, s.id) < (v_to_at, v_to_id)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                 ORDER BY s.created_at, s.id
                 LIMIT p_batch - v_n
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
        EXIT WHEN v_n = p_batch OR v_rescan;
        v_rescan := true;
        v_from_at := '-infinity';
        v_from_id := -9223372036854775808;
        v_to_at := v_cursor_at;
        v_to_id := v_cursor_id;
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    IF v_rescanned IS NULL THEN
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

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:changed functions/queue_rights.sql
CREATE OR REPLACE VIEW _queue_right_held AS
SELECT r.queue, r.privilege
  FROM queue_right r
 WHERE CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee)
            THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                             ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END;
-- pgsweep:end functions/queue_rights.sql

-- pgsweep:changed functions/send.sql
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL, p_lane text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
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
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane);
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL,
                                      p_lanes text[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
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
    IF p_headers IS NOT NULL AND cardinality(p_headers) <> v_n THEN
        RAISE EXCEPTION 'p_headers must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_keys IS NOT NULL AND cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_keys must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_keys)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_deliver_at IS NOT NULL AND cardinality(p_deliver_at) <> v_n THEN
        RAISE EXCEPTION 'p_deliver_at must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_deliver_at)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_lanes IS NOT NULL AND cardinality(p_lanes) <> v_n THEN
        RAISE EXCEPTION 'p_lanes must be NULL or have % elements like p_payloads, got %', v_n, cardinality(p_lanes)
            USING ERRCODE = 'invalid_parameter_value';
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
                   WHERE u.lane IS NOT NULL GROUP BY u.lane ORDER BY u.lane LOOP
        v_l := _lane_lock(v_q.name, v_lane.lane, v_now);
        v_names := v_names || v_lane.lane;
        v_firsts := v_firsts || v_lane.first;
        v_busies := v_busies || (NOT v_l.created AND _lane_busy(v_q.name, v_lane.lane, v_l.blocked_id, v_now));
        v_lasts := v_lasts || v_l.last_at;
        v_news := v_news || v_l.created;
    END LOOP;

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send (which finds
        -- the lanes locked already).
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now, p_lanes[i]);
            v_any := v_any OR v_ids[i] IS NOT NULL;
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
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until, lane)
        SELECT v_q.name, u.id, u.key, u.payload, coalesce(u.headers, '{}'), coalesce(u.deliver_at, v_now),
               CASE WHEN x.name IS NULL THEN v_now ELSE greatest(v_now, x.last_at) END,
               CASE WHEN x.name IS NOT NULL AND (x.busy OR x.first <> u.k) THEN 'infinity'::timestamptz
                    WHEN u.deliver_at > v_now THEN u.deliver_at END,
               u.lane
          FROM unnest(v_ids, p_payloads, p_headers, p_keys, p_deliver_at, p_lanes)
               WITH ORDINALITY u(id, payload, headers, key, deliver_at, lane, k)
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
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/send.sql

-- pgsweep:changed functions/citus.sql
CREATE OR REPLACE FUNCTION citus_distribute()
RETURNS TABLE (object_kind text, object_name text, placement text, changed boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_message text := pg_catalog.format('%I.%I', pg_catalog.current_schema(), 'message');
    v_rel text;
    r record;
    v_method "char";
    v_repmodel "char";
    v_colocation int;
    v_message_colocation int;
    v_pending text[];
    v_converted text[] := '{}';
    v_fk_rel text[];
    v_fk_name text[];
    v_fk_def text[];
    v_views text[];
    v_view_defs text[];
    v_view_opts text[];
    v_view_comments text[];
    v_left int[];
    v_again int[];
    v_ddl text;
    i int;
BEGIN
    PERFORM _citus_require();
    PERFORM _citus_owner_can_login();
    -- Foreign keys between distributed and reference tables, in one
    -- transaction with the conversions: one connection per node.
    PERFORM pg_catalog.set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- The tables still to convert, and the foreign keys that touch them.
    SELECT pg_catalog.array_agg(t.table_name) INTO v_pending
      FROM _citus_tables() t
      LEFT JOIN pg_catalog.pg_dist_partition d
             ON d.logicalrelid = pg_catalog.format('%I.%I', v_schema, t.table_name)::pg_catalog.regclass
     WHERE (t.placement = 'reference' AND (d.partmethod IS DISTINCT FROM 'n' OR d.repmodel IS DISTINCT FROM 't'))
        OR (t.placement = 'distributed' AND d.partmethod IS DISTINCT FROM 'h');
    SELECT pg_catalog.array_agg(f.rel ORDER BY f.conname), pg_catalog.array_agg(f.conname ORDER BY f.conname),
           pg_catalog.array_agg(f.def ORDER BY f.conname)
      INTO v_fk_rel, v_fk_name, v_fk_def
      FROM (SELECT c.conrelid::pg_catalog.regclass::text AS rel, c.conname::text AS conname,
                   pg_catalog.pg_get_constraintdef(c.oid) AS def
              FROM pg_catalog.pg_constraint c
              JOIN pg_catalog.pg_class ch ON ch.oid = c.conrelid
              JOIN pg_catalog.pg_class pa ON pa.oid = c.confrelid
             WHERE c.contype = 'f'
               AND ch.relnamespace = v_schema::pg_catalog.regnamespace
               AND (ch.relname = ANY (v_pending) OR pa.relname = ANY (v_pending))) f;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', v_fk_rel[i], v_fk_name[i]);
    END LOOP;
    IF v_pending IS NOT NULL
       OR EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND o.objid = c.oid AND o.objsubid = 0
                   WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
                     AND c.relname NOT LIKE '\_%') THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v'
           AND c.relname NOT LIKE '\_%';
        IF v_views IS NOT NULL THEN
            EXECUTE 'DROP VIEW ' || (SELECT pg_catalog.string_agg(pg_catalog.format('%I.%I', v_schema, v), ', ')
                                       FROM pg_catalog.unnest(v_views) v);
        END IF;
    END IF;

    -- Tables, message first.
    FOR r IN SELECT t.table_name, t.placement FROM _citus_tables() t ORDER BY t.p_order, t.table_name LOOP
        v_rel := pg_catalog.format('%I.%I', v_schema, r.table_name);
        SELECT d.partmethod, d.repmodel, d.colocationid INTO v_method, v_repmodel, v_colocation
          FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
        object_kind := 'table';
        object_name := r.table_name;
        changed := false;
        IF r.placement = 'local' THEN
            placement := 'local (coordinator)';
        ELSIF r.placement = 'reference' THEN
            placement := 'reference';
            IF v_method IS DISTINCT FROM 'n' OR v_repmodel IS DISTINCT FROM 't' THEN
                PERFORM pg_catalog.create_reference_table(v_rel::pg_catalog.regclass);
                v_converted := v_converted || v_rel;
                changed := true;
            END IF;
        ELSE
            placement := 'distributed by queue';
            IF r.table_name = 'message' THEN
                IF v_method IS DISTINCT FROM 'h' THEN
                    PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue');
                    v_converted := v_converted || v_rel;
                    changed := true;
                END IF;
                SELECT d.colocationid INTO v_message_colocation
                  FROM pg_catalog.pg_dist_partition d WHERE d.logicalrelid = v_rel::pg_catalog.regclass;
            ELSIF v_method IS DISTINCT FROM 'h' THEN
                PERFORM pg_catalog.create_distributed_table(v_rel::pg_catalog.regclass, 'queue', colocate_with => v_message);
                v_converted := v_converted || v_rel;
                changed := true;
            ELSIF v_colocation IS DISTINCT FROM v_message_colocation THEN
                PERFORM pg_catalog.update_distributed_table_colocation(v_rel::pg_catalog.regclass, colocate_with => v_message);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;

    -- The rows a conversion copied into the shards stay behind, invisible, in
    -- the coordinator's own table: drop them.
    FOREACH v_rel IN ARRAY v_converted LOOP
        PERFORM pg_catalog.truncate_local_data_after_distributing_table(v_rel::pg_catalog.regclass);
    END LOOP;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_fk_rel), 0) LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD CONSTRAINT %I %s', v_fk_rel[i], v_fk_name[i], v_fk_def[i]);
    END LOOP;

    -- The views again, on the coordinator only; a view over another view
    -- waits for it (the order of creation is not always the order of the
    -- dependencies: CREATE OR REPLACE may have changed them).
    IF v_views IS NOT NULL THEN
        v_ddl := pg_catalog.current_setting('citus.enable_ddl_propagation');
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
        v_left := ARRAY(SELECT pg_catalog.generate_series(1, pg_catalog.cardinality(v_views)));
        WHILE pg_catalog.cardinality(v_left) > 0 LOOP
            v_again := '{}';
            FOREACH i IN ARRAY v_left LOOP
                BEGIN
                    EXECUTE pg_catalog.format('CREATE VIEW %I.%I%s AS %s', v_schema, v_views[i], v_view_opts[i], v_view_defs[i]);
                    IF v_view_comments[i] IS NOT NULL THEN
                        EXECUTE pg_catalog.format('COMMENT ON VIEW %I.%I IS %L', v_schema, v_views[i], v_view_comments[i]);
                    END IF;
                EXCEPTION WHEN undefined_table THEN
                    v_again := v_again || i;
                END;
            END LOOP;
            IF pg_catalog.cardinality(v_again) = pg_catalog.cardinality(v_left) THEN
                RAISE EXCEPTION 'citus_distribute could not create the views % again', v_views
                    USING ERRCODE = 'internal_error';
            END IF;
            v_left := v_again;
        END LOOP;
        PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', v_ddl, true);
        FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g WHERE g.view_name = ANY (v_views) LOOP
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END LOOP;
    END IF;

    -- Functions: the verbs by p_queue (forced where _citus_delegated says);
    -- every other routine on every node (a delegated verb calls them there)
    -- but those that read a coordinator table or take its rows: they stay
    -- on the coordinator, where maintain() and retention_run call them.
    FOR r IN SELECT p.oid, p.oid::pg_catalog.regprocedure::text AS sig, d.arg_index, d.force,
                    o.distribution_argument_index AS cur_arg, o.colocationid AS cur_colocation,
                    coalesce(o.force_delegation, false) AS cur_force, o.objid IS NOT NULL AS is_distributed,
                    EXISTS (SELECT 1 FROM _citus_tables() t
                              JOIN pg_catalog.pg_class c
                                ON c.relname = t.table_name AND c.relnamespace = v_schema::pg_catalog.regnamespace
                             WHERE t.placement = 'local'
                               AND (p.prosrc ~ ('\m' || t.table_name || '\M')
                                    OR c.reltype = ANY (p.proargtypes::pg_catalog.oid[] || p.prorettype))) AS local_only
               FROM pg_catalog.pg_proc p
               LEFT JOIN _citus_delegated() d ON d.routine = p.oid
               LEFT JOIN pg_catalog.pg_dist_object o
                      ON o.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND o.objid = p.oid AND o.objsubid = 0
              WHERE p.pronamespace = v_schema::pg_catalog.regnamespace
              ORDER BY 2 LOOP
        object_kind := 'function';
        object_name := r.sig;
        changed := false;
        IF r.arg_index IS NOT NULL THEN
            placement := CASE WHEN r.force THEN 'delegated by p_queue' ELSE 'delegated by p_queue (not in transaction blocks)' END;
            IF NOT r.is_distributed OR r.cur_arg IS DISTINCT FROM r.arg_index
               OR r.cur_colocation IS DISTINCT FROM v_message_colocation OR r.cur_force IS DISTINCT FROM r.force THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure, '$' || (r.arg_index + 1),
                                                               colocate_with := v_message, force_delegation := r.force);
                changed := true;
            END IF;
        ELSIF r.local_only THEN
            placement := 'coordinator only';
        ELSE
            placement := 'on every node';
            IF NOT r.is_distributed OR r.cur_arg IS NOT NULL THEN
                PERFORM pg_catalog.create_distributed_function(r.oid::pg_catalog.regprocedure);
                changed := true;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
-- pgsweep:end functions/citus.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
