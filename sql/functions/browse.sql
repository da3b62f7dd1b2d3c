-- _browse_state and _browse_at: a live message's state as the browse
-- functions name it, and the time that state is about (see browse_messages).
CREATE OR REPLACE FUNCTION _browse_state(p_status text, p_parked_until timestamptz, p_now timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_status = 'processing' THEN 'in_flight'
                WHEN p_status = 'failed' THEN 'failed'
                WHEN p_parked_until > p_now AND p_parked_until <> 'infinity' THEN 'scheduled'
                ELSE 'pending' END
$$;

CREATE OR REPLACE FUNCTION _browse_at(p_state text, p_created_at timestamptz, p_visible_at timestamptz, p_parked_until timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_state WHEN 'scheduled' THEN p_parked_until
                        WHEN 'pending' THEN CASE WHEN p_parked_until = 'infinity' THEN NULL
                                                 ELSE greatest(p_created_at, p_visible_at, p_parked_until) END
                        ELSE p_visible_at END
$$;

-- _browse_live: the live messages of p_queue with p_from < id <= p_to in
-- state p_state (NULL: any) whose last error contains p_error (NULL: any),
-- as browse_messages returns them, at most p_limit, oldest id first.
CREATE OR REPLACE FUNCTION _browse_live(p_queue text, p_from bigint, p_to bigint, p_state text, p_error text,
                                        p_browse boolean, p_now timestamptz, p_limit int)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    -- PL/pgSQL, not SQL: its statement is planned with the queue's value,
    -- so that Citus routes it to the queue's shard (a SQL function's
    -- generic plan could not be, nor could a LATERAL over the shard)
    RETURN QUERY
    SELECT m.id, m.id, m.state, m.lane, m.attempt, m.created_at, _browse_at(m.state, m.created_at, m.visible_at, m.parked_until),
           CASE WHEN m.state = 'in_flight' THEN m.owner END, m.parked_until IS NOT DISTINCT FROM 'infinity', m.last_error,
           pg_column_size(m.payload), pg_column_size(m.headers),
           CASE WHEN p_browse THEN m.key END, CASE WHEN p_browse THEN m.payload END, CASE WHEN p_browse THEN m.headers END
      FROM (SELECT x.*, _browse_state(x.status, x.parked_until, p_now) AS state
              FROM message x
             WHERE x.queue = p_queue AND x.id > p_from AND x.id <= p_to) m
     WHERE (p_state IS NULL OR m.state = p_state)
       AND (p_error IS NULL OR strpos(m.last_error, p_error) > 0)
     ORDER BY m.id
     LIMIT p_limit;
END
$$;

-- browse_messages (monitor): a queue's messages in one state, a page at a
-- time, oldest id first, with keyset pagination (p_after: the last id of
-- the previous page; 0 for the first page). A page is stable under
-- concurrent claims: it never repeats or skips an id that stays in the
-- state (ids only grow; a message that changes state between two calls is
-- simply in the other state's pages).
--
-- States:
--   pending    waiting for a claim: due now, or waiting in its lane behind
--              the lane's head (waiting_in_lane); "at" is when it became due
--   scheduled  sent for later (send's deliver_at); "at" is that time
--   in_flight  leased: holder is the lease's owner, "at" the lease's expiry
--   failed     waiting for its retry: last_error, "at" the retry time
--   dead       a dead letter: last_error, "at" when it died
--   processed  an inbox message kept for de-duplication: "at" when it was processed
--
-- p_error (NULL: every message) keeps the messages whose last error
-- contains it (case-sensitive; at most 1000 characters): the dead letters
-- of one cause, to requeue or delete them together. A message without an
-- error never matches.
--
-- Who sees what: ids, states, attempts, times, lanes, errors and sizes for
-- anyone who may call it (the monitor role); the payload, the headers and
-- the key only for a caller that holds the queue's browse right
-- (queue_rights.sql: by default S_admin), NULL for the others. The payload
-- is not even read for them: sizes are pg_column_size, which reads the
-- stored length, not the value.
--
-- Cost. dead and processed walk their table's primary key (queue, id) from
-- p_after: O(page); with p_error, at most browse_scan rows, as below. The four states of table message share its primary key
-- and no index says a row's state (one would cost every verb an index
-- update), so a call reads at most p_limit matching rows and at most
-- browse_scan rows (10000) in all: a state that is rare among many
-- messages (a few in flight among millions pending) can fill a page only
-- partly. Then the last row returned has id NULL and, in cursor, the last
-- id read: call again with p_after = cursor to go on. Every other row's
-- cursor is its id; a page with fewer than p_limit rows and no such row is
-- the last.
CREATE OR REPLACE FUNCTION browse_messages(p_queue text, p_state text, p_after bigint DEFAULT 0, p_limit int DEFAULT 50,
                                           p_error text DEFAULT NULL)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_scan int := 10000;
    v_browse boolean;
    v_rows int := 0;
    v_read int := 0;
    v_got int;
    v_n int;
    v_chunk int := 1000;
    v_last bigint;
    v_end bigint;
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _check_text('p_state', p_state, 20);
    IF NOT p_state = ANY (ARRAY['pending', 'scheduled', 'in_flight', 'failed', 'dead', 'processed']) THEN
        RAISE EXCEPTION 'p_state must be one of pending, scheduled, in_flight, failed, dead, processed, got %',
            quote_literal(p_state) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_int('p_after', p_after, 0, 9223372036854775807);
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    IF p_error IS NOT NULL THEN
        PERFORM _check_text('p_error', p_error, 1000);
    END IF;
    v_browse := _queue_allowed(p_queue, 'browse');

    IF p_state = 'dead' THEN
        RETURN QUERY
        SELECT d.id, d.id, 'dead'::text, d.lane, d.attempts, d.created_at, d.dead_at, NULL::text, false, d.last_error,
               pg_column_size(d.payload), pg_column_size(d.headers),
               CASE WHEN v_browse THEN d.key END, CASE WHEN v_browse THEN d.payload END, CASE WHEN v_browse THEN d.headers END
          FROM (SELECT * FROM message_dead x
                 WHERE x.queue = p_queue AND x.id > p_after
                 ORDER BY x.id
                 LIMIT CASE WHEN p_error IS NULL THEN p_limit ELSE v_scan END) d
         WHERE p_error IS NULL OR strpos(d.last_error, p_error) > 0
         ORDER BY d.id
         LIMIT p_limit;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF p_error IS NOT NULL AND v_rows < p_limit THEN
            SELECT count(*), max(s.id) INTO v_read, v_last
              FROM (SELECT x.id FROM message_dead x WHERE x.queue = p_queue AND x.id > p_after ORDER BY x.id LIMIT v_scan) s;
            IF v_read >= v_scan THEN
                -- the scan stopped before the page filled: say where to go on
                RETURN QUERY SELECT NULL::bigint, v_last, p_state, NULL::text, NULL::int, NULL::timestamptz, NULL::timestamptz,
                                    NULL::text, NULL::boolean, NULL::text, NULL::int, NULL::int, NULL::text, NULL::jsonb, NULL::jsonb;
            END IF;
        END IF;
        RETURN;
    END IF;
    IF p_state = 'processed' THEN
        RETURN QUERY
        SELECT p.id, p.id, 'processed'::text, NULL::text, p.attempts, p.created_at, p.processed_at, NULL::text, false, NULL::text,
               pg_column_size(p.payload), pg_column_size(p.headers),
               CASE WHEN v_browse THEN p.key END, CASE WHEN v_browse THEN p.payload END, CASE WHEN v_browse THEN p.headers END
          FROM message_processed p
         WHERE p.queue = p_queue AND p.id > p_after AND p_error IS NULL -- processed messages have no error
         ORDER BY p.id
         LIMIT p_limit;
        RETURN;
    END IF;

    -- in chunks of v_chunk ids: how far a chunk reaches is an index-only
    -- range of the primary key that stops early (one query LIMIT v_scan
    -- would be planned to read the whole queue); its rows in the state are
    -- then one statement
    v_last := p_after;
    <<chunks>>
    LOOP
        SELECT count(*), max(c.id) INTO v_got, v_end
          FROM (SELECT m.id FROM message m WHERE m.queue = p_queue AND m.id > v_last ORDER BY m.id LIMIT v_chunk) c;
        EXIT chunks WHEN v_got = 0;
        RETURN QUERY SELECT * FROM _browse_live(p_queue, v_last, v_end, p_state, p_error, v_browse, v_now, p_limit - v_rows);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_rows := v_rows + v_n;
        v_read := v_read + v_got;
        v_last := v_end;
        EXIT chunks WHEN v_rows >= p_limit OR v_got < v_chunk; -- a full page, or the end of the queue
        IF v_read >= v_scan THEN
            -- the scan stopped before the page filled: say where to go on
            RETURN QUERY SELECT NULL::bigint, v_last, p_state, NULL::text, NULL::int, NULL::timestamptz, NULL::timestamptz,
                                NULL::text, NULL::boolean, NULL::text, NULL::int, NULL::int, NULL::text, NULL::jsonb, NULL::jsonb;
            EXIT chunks;
        END IF;
    END LOOP;
END
$$;

-- browse_message (monitor): one message of a queue by id, in whichever
-- state it is, with the columns of browse_messages (cursor is the id); no
-- row when the queue holds no message with that id. At most three
-- primary-key probes. Payload, headers and key as for browse_messages: only with the
-- queue's browse right.
CREATE OR REPLACE FUNCTION browse_message(p_queue text, p_id bigint)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_browse boolean;
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _check_int('p_id', p_id, 1, 9223372036854775807);
    v_browse := _queue_allowed(p_queue, 'browse');
    RETURN QUERY SELECT * FROM _browse_live(p_queue, p_id - 1, p_id, NULL, NULL, v_browse, v_now, 1);
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM browse_messages(p_queue, 'dead', p_id - 1, 1) b WHERE b.id = p_id;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM browse_messages(p_queue, 'processed', p_id - 1, 1) b WHERE b.id = p_id;
    END IF;
END
$$;
