-- pgsweep 0.22: what the Citus tier found, fixed for every install.
--
-- * claim reads the queue and its cursor in two statements (a forced,
--   delegated claim may only touch its own shard), so citus_distribute
--   forces claim's delegation too.
-- * fail and the lane promotion: no bare array element at the top of an
--   UPDATE's SET (Citus 13.2 crashes on it); _inbox_key_kept is PL/pgSQL
--   (Citus cannot plan a parameterized SQL function in a delegated call).
-- * An admin may CALL retention_run(name): it called the p_now overload
--   (owner only); both now call _retention_run.
-- * The verbs skip the p_now check when they pass no p_now (hot path).
-- * Adaptive retention pacing settles at 15-25% under live traffic and
--   speeds up to 100% on an idle database (maintain_retention.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- pgsweep:include functions/claim.sql
-- claim: lease up to p_batch due messages of one queue to p_owner.
--
-- The token. Every claim call draws a fresh, unguessable token
-- (gen_random_uuid()), stores it in message.token of every row it takes and
-- returns it with each of them: renew, complete, fail and release act only on
-- rows whose current claim carries their p_token (ack.sql). p_owner is only a
-- label -- who holds the row, for people and metrics -- so an owner that takes
-- its own expired lease back gets a new token and its old token acts on
-- nothing. token is in no index: claims stay HOT updates.
--
-- Candidates: rows with visible_at <= now and attempt < max_attempts. visible_at
-- is the delivery/retry time of pending and failed rows and the lease expiry
-- of processing rows, so expired leases are taken by the same scan. A row that
-- used its last attempt (attempt >= max_attempts) is never handed out again:
-- fail dead-letters it, and queue_recover dead-letters one whose lease expired.
--
-- The scan walks message_claim (queue, created_at, id) in order, locks up to
-- n rows FOR UPDATE SKIP LOCKED and stops: rows another claimer has locked
-- are skipped, not waited for, and a row that a concurrent claim updated and
-- committed meanwhile is re-checked against the predicate before it is
-- locked, so two claimers never get the same row. The UPDATE then finds the
-- locked rows by ctid (stable: we hold their locks) instead of descending the
-- primary key once per row, and changes only columns no index holds (status,
-- owner, token, attempt, visible_at), so it is a HOT update.
--
-- Parked rows. A row that is not due for a while -- a scheduled message, a
-- retry waiting for its backoff, a requeued dead letter with a delivery time
-- -- is parked: parked_until holds its due time. It is not in message_claim,
-- whose predicate is parked_until IS NULL, but in message_parked (queue,
-- parked_until). Without this, every scan from the head walked all of them
-- (measured: 100,000 messages scheduled for tomorrow made a quiet queue's
-- claims 30 times slower). Each claim first promotes the parked rows that
-- came due (one probe of message_parked when none did). Leases are not
-- parked, and parked_until is a column of its own rather than visible_at:
-- claims set visible_at every time, and an indexed column they change --
-- even one only a partial index holds -- would end their HOT updates. Rows
-- in flight number at most the workers' batches.
--
-- The claim cursor (table claim_cursor, one row per queue) is why a claim
-- does not slow down as a queue drains. Completed rows leave dead entries at
-- the head of message_claim until VACUUM removes them, and rows in flight sit
-- there too; a scan from the start walks all of them, on every claim, so the
-- cost grows with the rows processed since the last vacuum (measured: from 100
-- to 2,000 buffers per claim while 200,000 messages drained). The cursor is
-- the newest (created_at, id) any claim has taken, and the scan starts there.
-- Rows behind it are in flight, waiting for a retry or a schedule, or gone --
-- except those that became due since: expired leases, retries and scheduled
-- rows whose time came, rows of a claim that rolled back, and rows committed
-- late by a long transaction (created_at is the send time, not the commit
-- time). A rescan from the start finds them: the first claim more than the
-- queue's claim_rescan (default 1 second) after the last rescan does one, and
-- so does every claim that cannot fill its batch from the cursor on (it takes
-- the rest from the rows before the cursor). So a due row waits behind the
-- cursor only while claims fill whole batches with newer rows -- the queue has
-- a backlog -- and then at most about claim_rescan: oldest first is exact when
-- a queue keeps up, and within claim_rescan when it does not. A queue that
-- needs the exact order always sets claim_rescan to 0: every claim then scans
-- from the head and pays for the dead index entries there (docs/benchmarks.md).
-- The cursor row is updated only by a claim that gets its lock (SKIP LOCKED):
-- claims never wait for each other; a skipped update only means the next
-- claim starts a little further back.
--
-- Ordered lanes (lane.sql) need nothing here: only a lane's head is ever in
-- the claim index; the messages waiting behind it are parked until
-- 'infinity', which the promotion below never reaches. So a claim never
-- returns two messages of one lane, and its cost does not grow with the
-- messages waiting behind heads (sql/tests/lanes.sql counts the scans).
--
-- Each row carries its lane (NULL: none) last, so that a consumer knows which
-- of its messages must keep their order among themselves.
--
-- A paused queue (queue_pause, queue_ops.sql) claims nothing: the flag is read
-- with the settings the claim reads anyway.
--
-- The clock is read once into v_now and the token drawn once into v_token
-- (scale-out rule: plain values in UPDATE). p_lease NULL means the queue's
-- lease_default. Rows come back oldest first.
--
-- This overload takes the time from its caller (p_now, NULL = the clock): for
-- tests only. claim(p_queue, p_owner, p_batch, p_lease) below is the verb.
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
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
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
    SELECT c.created_at, c.id, c.rescanned_at INTO v_cursor_at, v_cursor_id, v_rescanned
      FROM claim_cursor c WHERE c.queue = p_queue;
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
        -- other claims only move it forward.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR (c.created_at, c.id) < (v_last_at, v_last_id))
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

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:include functions/ack.sql
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
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'p_ids must hold 1 to 10000 ids, got %',
            CASE WHEN p_ids IS NULL THEN 'NULL' ELSE cardinality(p_ids)::text END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
    v_until timestamptz;
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
    v_until := coalesce(p_now, clock_timestamp()) + coalesce(p_lease, v_q.lease_default);
    RETURN QUERY
    UPDATE message m SET visible_at = v_until
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.token = p_token AND m.status = 'processing'
    RETURNING m.id;
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
    IF p_token IS NULL OR p_ids IS NULL OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        PERFORM _check_token(p_token);
        PERFORM _check_ids(p_ids);
    END IF;
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
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
BEGIN
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    PERFORM _queue_get(p_queue);
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

-- pgsweep:include functions/lane.sql
-- Ordered lanes (DESIGN.md, "Ordered lanes"; docs/queues.md, "Ordered lanes").
--
-- A message sent with a lane (send's p_lane, send_batch's p_lanes) belongs to
-- that lane of its queue. A lane hands out one message at a time, oldest
-- first by (created_at, id): the next becomes claimable only when the one
-- before it has left `message` (completed, dead-lettered, cancelled or
-- purged). Different lanes, and messages without a lane, are claimed in
-- parallel as before.
--
-- The head. At most one message of a lane is its head; every other one waits
-- parked with parked_until = 'infinity'. A parked row is out of the claim
-- index (message_claim is partial on parked_until IS NULL, claim.sql), and the
-- claim's promotion of parked rows (parked_until <= now) never reaches
-- infinity, so a message waiting behind its head costs a claim nothing: the
-- claim does not know lanes at all, it only ever sees heads. The head itself
-- is an ordinary message: pending (due or scheduled), in flight, or failed and
-- waiting for its retry -- the lane waits meanwhile (head-of-line blocking, the
-- price of the order). Recovery of an expired lease keeps it the head.
--
-- Why 'infinity' and not a lane column in the claim index: a claim scans one
-- index in (created_at, id) order and takes what it can lock; filtering out
-- the non-heads there would make every claim walk them (100,000 messages
-- behind 10,000 heads: 100,000 index entries per claim). Parked at infinity
-- they are not in that index. The promotion (parked_until back to NULL, or to
-- the message's own delivery time when it was scheduled for later) happens in
-- the transaction of the statement that made the head leave. Its cost: one
-- probe of message_lane and one UPDATE per message, and that UPDATE is not
-- HOT (the row enters the claim index): docs/benchmarks.md, "Ordered lanes".
--
-- The lane row. Table lane holds one row per lane that has messages (or is
-- blocked): blocked_id and last_at, the created_at of the newest message
-- sent to it. A lane row that is not blocked always has a head, so the row's
-- existence says whether a new message waits; the head itself is not
-- recorded (that would be one more row version per message). Its row lock is
-- what serialises a lane:
--  * send locks it (_lane_lock) before it decides whether its message is the
--    head (the lane had no row: no message, not blocked) or waits, and holds it
--    until its transaction ends. Sends to one lane therefore serialise, and
--    created_at = greatest(now, last_at) with an id drawn after the lock
--    keeps (created_at, id) increasing in lock order, which is commit order:
--    a lane hands out its messages in the order their sends committed.
--  * a head that leaves locks it too (_lane_after) and promotes the oldest
--    waiting message (_lane_next: one lookup and one UPDATE by id for all
--    the lanes of a completion). A send that is still open when the head
--    leaves makes the promotion wait for it (then it sees its message): keep
--    transactions that send to a lane short. Without the lock a head could
--    leave between a send's "there is a head" and its commit, and the new
--    message would wait behind nothing, forever.
--  * the row goes when the lane is empty (no message, not blocked), so the
--    table holds only active lanes; queue_stats counts them.
-- Advisory locks would be no guard (DESIGN: never the only one); the row is
-- the truth, and under Citus it lives with its queue.
--
-- Lock order: lane rows first, in name order, then the waiting messages of
-- those lanes. complete, fail and recovery hold only their own in-flight
-- heads when they take the lane locks; cancel and purge lock the lanes before
-- they delete. A transaction that sends to several lanes takes their locks in
-- the order it sends; send_batch takes them in name order. Two transactions
-- that lock lanes in opposite orders may deadlock (PostgreSQL detects it and
-- fails one, to be retried): send to several lanes in name order.
--
-- A dead head (its last attempt failed, or its lease expired on it): with the
-- queue's lane_dead 'move_on' (the default) the lane moves on to its next
-- message; with 'block' the lane stops, blocked_id names the dead letter, and
-- its messages wait until dead_requeue puts that letter back at the head of
-- its lane or lane_skip(p_queue, p_lane) moves on without it (dead.sql).

-- _check_lane: NULL (no lane) or a non-empty name of at most 200 characters.
CREATE OR REPLACE FUNCTION _check_lane(p_arg text, p_lane text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_lane IS NOT NULL AND (p_lane = '' OR length(p_lane) > 200) THEN
        PERFORM _check_text(p_arg, p_lane, 200);
    END IF;
END
$$;

-- _lane_lock locks a lane's row, creating it when the lane has none (created
-- true: the lane had no message and was not blocked). The row lock is held
-- until the caller's transaction ends. A row deleted meanwhile (its lane
-- emptied) is created again.
CREATE OR REPLACE FUNCTION _lane_lock(p_queue text, p_lane text, p_now timestamptz,
                                      OUT created boolean, OUT blocked_id bigint, OUT last_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    LOOP
        INSERT INTO lane AS l (queue, name, last_at) VALUES (p_queue, p_lane, p_now)
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING true INTO created;
        IF created THEN
            last_at := p_now;
            RETURN;
        END IF;
        SELECT l.blocked_id, l.last_at INTO blocked_id, last_at
          FROM lane l WHERE l.queue = p_queue AND l.name = p_lane
           FOR UPDATE;
        IF FOUND THEN
            created := false;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- _lane_busy: a lane whose row the caller holds locked, not created by it --
-- is a message of it handed out next (blocked, or it has a head)? A lane row
-- that is not blocked has a head (the invariant every verb keeps), unless a
-- message was deleted by hand: then the lane's oldest message becomes its
-- head here (and the lane is busy), or, when it has none, the lane is free.
-- The head is normally the lane's oldest message: the probe reads one or
-- two entries of message_lane.
CREATE OR REPLACE FUNCTION _lane_busy(p_queue text, p_lane text, p_blocked bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_blocked IS NOT NULL THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM message m
                WHERE m.queue = p_queue AND m.lane = p_lane AND m.parked_until IS DISTINCT FROM 'infinity') THEN
        RETURN true;
    END IF;
    RETURN _lane_next(p_queue, ARRAY[p_lane], p_now, false) > 0;
END
$$;

-- _lane_next: the lanes p_lanes (locked by the caller, none blocked) have no
-- head. The oldest message of each, by (created_at, id), becomes its head:
-- claimable now, or parked until its delivery time when it was scheduled for
-- later -- one statement for all the lanes. A lane with no message left loses
-- its row when p_drop_empty (the lane is empty); otherwise (a send is about
-- to add one) it keeps it. Returns how many were promoted.
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
BEGIN
    SELECT array_agg(x.id), array_agg(u.name),
           array_agg(x.id) FILTER (WHERE x.visible_at > p_now), array_agg(x.visible_at) FILTER (WHERE x.visible_at > p_now)
      INTO v_ids, v_promoted, v_later, v_at
      FROM unnest(p_lanes) u(name)
     CROSS JOIN LATERAL (SELECT m.id, m.visible_at FROM message m
                          WHERE m.queue = p_queue AND m.lane = u.name
                          ORDER BY m.created_at, m.id
                          LIMIT 1) x;
    IF v_ids IS NOT NULL THEN
        -- By id: the rows are locked by nobody else (waiting messages are
        -- touched only under their lane's lock, which the caller holds).
        UPDATE message m SET parked_until = NULL WHERE m.queue = p_queue AND m.id = ANY (v_ids);
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

-- _lane_after: the heads of the lanes p_lanes left `message` (completed,
-- dead-lettered, cancelled, purged): the callers know, because only a
-- lane's head is ever in flight (complete, fail, recovery) and a cancelled
-- or purged message that was not parked until infinity was its lane's head.
-- Each lane moves on to its next message -- unless p_block (the queue's
-- lane_dead is 'block') and its head was dead-lettered (its id is in
-- p_dead): then the lane stops, blocked by that dead letter. Lanes are
-- locked in name order (see the header).
CREATE OR REPLACE FUNCTION _lane_after(p_queue text, p_lanes text[], p_dead bigint[], p_block boolean, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_next text[];
    v_block_names text[];
    v_block_ids bigint[];
BEGIN
    IF p_lanes IS NULL OR cardinality(p_lanes) = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(l.name) FILTER (WHERE l.blocked_id IS NULL) INTO v_next
      FROM (SELECT k.name, k.blocked_id FROM lane k
             WHERE k.queue = p_queue AND k.name = ANY (p_lanes)
             ORDER BY k.name
               FOR UPDATE) l;
    IF v_next IS NULL THEN
        RETURN;
    END IF;
    IF p_block AND p_dead IS NOT NULL THEN
        SELECT array_agg(d.lane), array_agg(d.id) INTO v_block_names, v_block_ids
          FROM message_dead d
         WHERE d.queue = p_queue AND d.id = ANY (p_dead) AND d.lane = ANY (v_next);
        IF v_block_names IS NOT NULL THEN
            UPDATE lane l SET blocked_id = b.id
              FROM unnest(v_block_names, v_block_ids) b(name, id)
             WHERE l.queue = p_queue AND l.name = ANY (v_block_names) AND l.name = b.name;
            v_next := ARRAY(SELECT u FROM unnest(v_next) u WHERE NOT u = ANY (v_block_names));
        END IF;
    END IF;
    IF cardinality(v_next) > 0 THEN
        PERFORM _lane_next(p_queue, v_next, p_now, true);
    END IF;
END
$$;

-- lane_skip: a lane stopped by a dead letter (lane_dead 'block') moves on
-- without it: its next message becomes the head. The dead letter stays in
-- message_dead (dead_requeue can still send it back; it then waits its turn
-- like any message of the lane). Returns true when the lane was blocked,
-- false (nothing changed) otherwise -- also for a lane that does not exist.
CREATE OR REPLACE FUNCTION lane_skip(p_queue text, p_lane text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_blocked bigint;
BEGIN
    PERFORM _check_text('p_lane', p_lane, 200);
    PERFORM _queue_get(p_queue);
    SELECT l.blocked_id INTO v_blocked FROM lane l WHERE l.queue = p_queue AND l.name = p_lane FOR UPDATE;
    IF v_blocked IS NULL THEN
        RETURN false;
    END IF;
    UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = p_lane;
    IF _lane_next(p_queue, ARRAY[p_lane], clock_timestamp(), true) > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN true;
END
$$;

-- lane_stats: the lanes of one queue that most need an operator, at most
-- p_limit (1..10000) of them: blocked lanes first, then the lanes whose head
-- is oldest. It reads every lane of the queue to choose them (a probe of
-- each lane's first messages) and counts the waiting messages of the lanes
-- it returns only.
--   waiting       messages waiting behind the head (or behind the block)
--   head_id       the head; for a blocked lane, the dead letter it waits for
--   head_attempt  the head's attempts so far (the dead letter's attempts)
--   head_state    pending, scheduled (pending, due later), processing,
--                 failed (waiting for its retry) or dead (blocked)
--   oldest_age    age (since it was sent) of the lane's oldest message, the
--                 dead letter's included
CREATE OR REPLACE FUNCTION lane_stats(p_queue text, p_limit int DEFAULT 100)
RETURNS TABLE (queue text, lane text, waiting bigint, head_id bigint, head_attempt int, head_state text,
               oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    PERFORM _queue_get(p_queue);
    RETURN QUERY
    SELECT p_queue, t.name, w.n, coalesce(t.blocked_id, t.h_id), coalesce(t.d_attempts, t.h_attempt),
           CASE WHEN t.blocked_id IS NOT NULL THEN 'dead'
                WHEN t.h_status = 'pending' AND t.h_parked > v_now THEN 'scheduled'
                ELSE t.h_status END,
           v_now - least(t.d_created, o.created_at)
      FROM (SELECT l.name, l.blocked_id, h.id AS h_id, h.attempt AS h_attempt, h.status AS h_status,
                   h.parked_until AS h_parked, d.attempts AS d_attempts, d.created_at AS d_created,
                   coalesce(d.created_at, h.created_at) AS since
              FROM lane l
              LEFT JOIN LATERAL (SELECT m.id, m.attempt, m.status, m.parked_until, m.created_at FROM message m
                                  WHERE m.queue = p_queue AND m.lane = l.name AND m.parked_until IS DISTINCT FROM 'infinity'
                                  ORDER BY m.created_at, m.id LIMIT 1) h ON true
              LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
             WHERE l.queue = p_queue
             ORDER BY l.blocked_id IS NULL, coalesce(d.created_at, h.created_at) NULLS LAST, l.name
             LIMIT p_limit) t
     CROSS JOIN LATERAL (SELECT count(*) AS n FROM message c
                          WHERE c.queue = p_queue AND c.lane = t.name AND c.parked_until = 'infinity') w
      LEFT JOIN LATERAL (SELECT c.created_at FROM message c WHERE c.queue = p_queue AND c.lane = t.name
                          ORDER BY c.created_at, c.id LIMIT 1) o ON true
     ORDER BY t.blocked_id IS NULL, t.since NULLS LAST, t.name;
END
$$;
-- pgsweep:end functions/lane.sql

-- pgsweep:include functions/send.sql
-- Sending: one message or a batch. Sends run inside the caller's transaction
-- (that is the point of an outbox): the rows and the notification appear when
-- it commits, not before.
--
-- p_deliver_at: NULL (now) or a finite time at most 10 years after the
-- database clock (_check_deliver_at, validate.sql); a past time means now.
--
-- Inbox de-duplication. On inbox queues the key is the message's identity: a
-- key that is live (message), processed (message_processed) or dead
-- (message_dead) is refused with NULL, until retention removes the record.
-- Indexes hold it (message_inbox_key, message_processed's (queue, key),
-- message_dead_key), and the order of the steps closes the gap between them:
--  1. a processed or dead row with the key?   → duplicate
--  2. INSERT … ON CONFLICT (live key) DO NOTHING → duplicate when a live row has it.
--     If a complete or fail is moving the live row to message_processed or
--     message_dead right now, the insert waits for that transaction (unique
--     check) and proceeds only after it committed;
--  3. so a processed or dead row with the key is re-checked with a fresh snapshot
--     (READ COMMITTED: each statement sees what committed before it) and, if
--     found, our row is deleted again: the call returns NULL, net change nothing.
-- A concurrent duplicate send waits at step 2 for the first sender's
-- transaction and then sees its row. Proven by TestInboxDedupConcurrent.
--
-- REPEATABLE READ and SERIALIZABLE. There every statement reads the
-- transaction's snapshot, so step 3 sees nothing new: a complete that
-- committed after the snapshot was taken (the live row gone, its processed
-- row invisible) would let the key in twice. There instead:
--  1b. a live row with the key that the snapshot sees → duplicate (NULL),
--      whatever happened to it since (completed, dead-lettered: either way
--      the key is taken);
--  2.  the insert of step 2 raises 40001 (serialization_failure) by itself
--      when the live row that holds the key committed after the snapshot;
--  3b. a probe for the processed row that the snapshot cannot see: our row
--      is inserted into message_processed ON CONFLICT (queue, key) DO
--      NOTHING. A unique check sees every committed row, and PostgreSQL
--      raises 40001 when the conflicting row is invisible to the snapshot
--      (a complete committed after it); a visible one → duplicate (NULL);
--      no conflict → the probe row is deleted at once and the send stands.
--      The probe runs after our live row is in: from then on no other
--      transaction can complete a row with the key, so the probe never
--      waits for one (and never deadlocks with one).
-- The caller retries a 40001 as for any serialization failure; the retry
-- sees the processed row and returns NULL. Proven by inbox_isolation_test.go.
-- Not covered: a message whose key was sent, and dead-lettered, both after
-- the sender's snapshot was taken (message_dead's key index is not unique,
-- so there is nothing to probe); its key can be sent once more.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'p_payload must be a JSON value, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'p_headers must be a JSON object, got %', jsonb_typeof(p_headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_key IS NOT NULL THEN
        PERFORM _check_text('p_key', p_key, 1000);
    END IF;
END
$$;

-- _inbox_key_kept: does a processed message or a dead letter of the queue
-- hold the key? (Live rows are checked by the unique index instead.)
-- PL/pgSQL, not LANGUAGE sql: Citus cannot plan a parameterized SQL
-- function inside a delegated call (DESIGN: claim paths are PL/pgSQL).
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key);
END
$$;

-- _send inserts one message into a queue already looked up and checked;
-- p_now is the send's clock. With a lane (lane.sql) it first locks the
-- lane's row: the message is the lane's head when the lane had no row (no
-- message, not blocked), otherwise it waits (parked at infinity); its
-- created_at is greatest(p_now, the lane's newest) and its id is drawn after
-- the lock, so (created_at, id) increases in the order the sends commit. A
-- lane whose head vanished without moving it on (a message deleted by hand)
-- moves on here (_lane_busy). An inbox duplicate changes no lane.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz,
                                 p_now timestamptz, p_lane text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
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
    IF v_inbox THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        v_snapshot := current_setting('transaction_isolation') IN ('repeatable read', 'serializable');
        IF v_snapshot AND EXISTS (SELECT 1 FROM message m WHERE m.queue = p_q.name AND m.key = p_key AND m.dedup) THEN
            RETURN NULL; -- 1b
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
            INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            ON CONFLICT (queue, key) WHERE dedup DO NOTHING
            RETURNING id INTO v_id;
            EXIT ins WHEN v_id IS NULL;
            IF v_snapshot THEN
                -- 3b: raises 40001 when a processed row with the key committed after our snapshot.
                INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
                VALUES (p_q.name, v_id, p_key, 'null', '{}', 0, p_now, p_now)
                ON CONFLICT (queue, key) DO NOTHING
                RETURNING true INTO v_free;
                IF v_free THEN
                    DELETE FROM message_processed p WHERE p.queue = p_q.name AND p.id = v_id;
                    EXIT ins;
                END IF;
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
                EXIT ins;
            END IF;
            IF _inbox_key_kept(p_q.name, p_key) THEN
                DELETE FROM message WHERE queue = p_q.name AND id = v_id;
                v_id := NULL;
            END IF;
        ELSE
            INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until, lane)
            VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, v_created, v_parked, p_lane)
            RETURNING id INTO v_id;
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
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message (at most 10 years ahead);
-- NULL or past = now. p_lane (NULL: none; else at most 200 characters)
-- puts it in that ordered lane of the queue (lane.sql): it is handed out
-- only after every message sent to the lane before it has left the queue.
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
    PERFORM _check_message(p_payload, p_headers, p_key);
    PERFORM _check_deliver_at('p_deliver_at', p_deliver_at);
    PERFORM _check_lane('p_lane', p_lane);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp(), p_lane);
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys, p_deliver_at and p_lanes are NULL or
-- arrays of the same length as p_payloads; each p_deliver_at[i] as send's
-- p_deliver_at, each p_lanes[i] as send's p_lane (NULL: no lane). The lanes
-- of a batch are locked once each, in name order (two batches never wait for
-- each other in a cycle); messages of one lane keep their input order. One
-- notification per batch.
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
    PERFORM _check_int('cardinality(p_payloads)', cardinality(p_payloads), 1, 10000); -- NULL p_payloads: got NULL
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
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
        PERFORM _check_deliver_at(format('p_deliver_at[%s]', i), p_deliver_at[i]);
        PERFORM _check_lane(format('p_lanes[%s]', i), p_lanes[i]);
    END LOOP;
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

-- pgsweep:include functions/fail.sql
-- fail: the handler failed. Rows that used their last attempt move to
-- message_dead (payload, headers, attempts, last error and timestamps kept);
-- the others wait for a retry: status 'failed', owner and token cleared, visible again
-- after p_retry_after (NULL = backoff, else 0 seconds to 30 days) or the
-- queue's exponential backoff:
--     delay(attempt n) = least(backoff_max, backoff_base * 2^(n-1))
-- shortened by the queue's backoff_jitter: each call draws one factor r in
-- [1 - backoff_jitter, 1] and waits delay * r, so that messages failed at
-- the same moment (an outage) by many workers do not all come back at once.
-- Acts only on rows whose current claim carries p_token (see ack.sql on
-- fencing).
--
-- The retry times are computed into an array indexed by attempt before the
-- UPDATE (scale-out rule: no timestamptz arithmetic applied to columns in
-- SET); delays stop growing at backoff_max, so the array has at most ~40
-- entries and attempt is capped to its length.
--
-- Lanes (lane.sql): a failing lane head stays the head -- its retry is parked
-- for its backoff like any other, and the lane waits. A dead-lettered head
-- makes its lane move on (lane_dead 'move_on', the default) or stop until
-- dead_requeue or lane_skip (lane_dead 'block'), in this transaction.
--
-- fail_details says what it did with each id (dead: moved to message_dead);
-- this overload takes the time from its caller (p_now, NULL = the clock) and
-- is for tests. The verbs below -- fail, and fail_details without p_now for
-- callers that count dead letters (the Go Worker) -- use the clock.
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
    v_error text := left(p_error, 10000);
    v_dead bigint[];
    v_lanes text[];
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    PERFORM _check_token(p_token);
    PERFORM _check_ids(p_ids);
    IF p_retry_after IS NOT NULL THEN
        PERFORM _check_interval('p_retry_after', p_retry_after, interval '0 seconds', interval '30 days');
    END IF;
    v_q := _queue_get(p_queue);
    v_now := coalesce(p_now, clock_timestamp());

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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.lane
    ), x AS (
        INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at, lane)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now, d.lane FROM d
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

CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_token uuid, p_ids bigint[], p_error text,
                                        p_retry_after interval DEFAULT NULL)
RETURNS TABLE (id bigint, dead boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz);
END
$$;

CREATE OR REPLACE FUNCTION fail(p_queue text, p_token uuid, p_ids bigint[], p_error text, p_retry_after interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT f.id FROM fail_details(p_queue, p_token, p_ids, p_error, p_retry_after, NULL::timestamptz) f;
END
$$;
-- pgsweep:end functions/fail.sql

-- pgsweep:include functions/citus.sql
-- Citus: pgsweep scaled out over worker nodes (docs/operations.md, "Scaling
-- out with Citus").
--
-- citus_distribute(), called on the Citus coordinator after a migration (also
-- `pgsweep migrate --citus`), makes an install distributed:
--   * message tables -- every table whose primary key leads with a text
--     column named queue: message, message_processed, message_dead,
--     claim_cursor, queue_recovery, lane -- are distributed by queue,
--     colocated with message: all rows of one queue live in one shard group,
--     on one worker;
--   * the bookkeeping of retention and maintenance (retention_policy,
--     retention_sweep, retention_unit, retention_pass, maintain_state,
--     maintain_pass, maintain_run) and tern's schema_version stay plain
--     tables of the coordinator: maintain() and retention_run run there, and
--     nothing on a worker reads them (see _citus_tables for why not
--     reference tables);
--   * every other table (queue, lease, setting, installed_role) becomes a
--     reference table: a copy on every node, so a verb running on a worker
--     reads its queue's settings locally, and the lease rows -- the truth of
--     leadership -- are one table cluster-wide;
--   * every function is propagated to every node but those that read a
--     coordinator table or take its rows (version(), the retention and
--     maintenance internals), and the queue verbs
--     (_citus_delegated) are distributed with p_queue as the distribution
--     argument, colocated with message: `SELECT claim('orders', ...)` on the
--     coordinator runs, whole, on the worker that holds queue 'orders'; those
--     that may, also inside a transaction block (force_delegation; see
--     _citus_delegated for which, and why send is not one of them).
-- What the verbs may then do is what they already do (DESIGN.md, "Built to
-- scale out later"): every statement on a message table filters by one
-- queue, so it stays in the shard of the distribution argument.
--
-- Idempotent: it converts only what is not converted yet and reports every
-- object with what it did. Call it again after every migration: a table or
-- function a later migration added is distributed by the same rules (DDL on
-- tables and functions that are already distributed is propagated by Citus
-- itself). Without Citus, or with a NOLOGIN owner role, it raises 55000 and
-- says what to do.
--
-- Who may call it: S_admin. It runs as S_owner, which owns every table and
-- function it converts; Citus opens its connections to the workers as that
-- role, so S_owner must be able to log in there (_citus_owner_can_login).

-- _citus_available: is the citus extension installed in this database?
CREATE OR REPLACE FUNCTION _citus_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') $$;

-- _citus_require raises 55000 (object_not_in_prerequisite_state) unless this
-- is a Citus coordinator. Citus functions are reached through EXECUTE only,
-- so this file installs everywhere.
CREATE OR REPLACE FUNCTION _citus_require()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_coordinator boolean;
BEGIN
    IF NOT _citus_available() THEN
        RAISE EXCEPTION 'citus_distribute needs the Citus extension in database %, and it is not installed',
            quote_ident(current_database())
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Install Citus (its own packages, https://docs.citusdata.com), put citus first in shared_preload_libraries on the coordinator and every worker, CREATE EXTENSION citus in this database on each of them, register the workers on the coordinator with citus_add_node, then call citus_distribute() again on the coordinator.';
    END IF;
    EXECUTE 'SELECT pg_catalog.citus_is_coordinator()' INTO v_coordinator;
    IF NOT v_coordinator THEN
        RAISE EXCEPTION 'citus_distribute must run on the Citus coordinator, and database % on this server is not one',
            quote_ident(current_database())
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Connect to the coordinator (the node where citus_add_node registered the workers) and call it there.';
    END IF;
END
$$;

-- _citus_tables: how each table of the schema is placed.
--   'distributed'  the message tables: primary key leading with a text column
--                  named queue;
--   'local'        tern's schema_version and the retention and maintenance
--                  bookkeeping (retention_*, maintain_*): they stay plain
--                  tables of the coordinator. As reference tables they would
--                  deadlock: Citus keeps the copies of a reference table
--                  alike by taking a cluster-wide lock on the whole table for
--                  every UPDATE and DELETE (and, for a foreign key, on the
--                  table it references), so parallel cleaners that record
--                  their units and passes in those tables in different orders
--                  deadlock on those locks -- eight cleaners of one policy
--                  did, six of them, in TestCitusRetentionCAP. As coordinator
--                  tables they take row locks, as on one server; only the
--                  coordinator runs maintain() and retention_run, and no verb
--                  on a worker reads them. A table that references a table
--                  Citus manages cannot stay local (Citus would turn it into
--                  a "Citus local table", a new table in its place): it is
--                  made a reference table instead;
--   'reference'    the rest: queue (read by every verb, on the workers), lease,
--                  setting, installed_role -- written one row at a time.
-- p_order is the order of conversion: message first among the distributed
-- ones (the colocation group's anchor), then by depth in the foreign keys.
CREATE OR REPLACE FUNCTION _citus_tables(OUT table_name text, OUT placement text, OUT p_order int)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH RECURSIVE t AS (
        SELECT c.oid, c.relname::text AS relname,
               CASE WHEN c.relname = 'schema_version' THEN 'local'
                    WHEN (c.relname LIKE 'retention\_%' OR c.relname LIKE 'maintain\_%')
                         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint f
                                           JOIN pg_catalog.pg_class r ON r.oid = f.confrelid
                                          WHERE f.contype = 'f' AND f.conrelid = c.oid
                                            AND NOT (r.relname LIKE 'retention\_%' OR r.relname LIKE 'maintain\_%'))
                    THEN 'local'
                    WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                                  WHERE i.indrelid = c.oid AND i.indisprimary
                                    AND a.attname = 'queue' AND a.atttypid = 'pg_catalog.text'::pg_catalog.regtype)
                    THEN 'distributed'
                    ELSE 'reference' END AS placement
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
           AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    ), fk AS (
        SELECT con.conrelid AS child, con.confrelid AS parent
          FROM pg_catalog.pg_constraint con
         WHERE con.contype = 'f' AND con.conrelid <> con.confrelid
           AND con.conrelid IN (SELECT oid FROM t) AND con.confrelid IN (SELECT oid FROM t)
    ), depth AS (
        SELECT t.oid, 0 AS d FROM t
        UNION ALL
        SELECT fk.child, depth.d + 1 FROM depth JOIN fk ON fk.parent = depth.oid WHERE depth.d < 100
    )
    SELECT t.relname, t.placement,
           (max(depth.d) * 10 + CASE WHEN t.relname = 'message' THEN 0 WHEN t.placement = 'distributed' THEN 1 ELSE 0 END)::int
      FROM t JOIN depth ON depth.oid = t.oid
     GROUP BY t.relname, t.placement
     ORDER BY 3, 1
$$;

-- _citus_delegated: the functions distributed with p_queue as their
-- distribution argument -- every function of the schema with a text
-- argument named p_queue (the queue verbs, their p_now overloads for tests,
-- queue_recover, _queue_stats, lane_stats, and whatever verb a later
-- migration adds) but those that write a reference table (queue_create,
-- queue_configure, queue_pause, queue_resume, queue_drop: changing the
-- queues is the coordinator's business, and a forced call could not) and
-- _queue_get, which only reads the queue's row (a reference table, read
-- locally wherever it runs).
--
-- force: delegated also inside a transaction block (force_delegation). Only
-- where that is safe, and only there is it worth anything: outside a
-- transaction block every delegated verb runs on its worker anyway, and
-- inside one a verb run on the coordinator reads the queue (a reference
-- table) from the coordinator's own copy and sends each statement on a
-- message table to the queue's shard -- one round trip for renew, complete
-- or release, a few for claim or an inbox send. Not forced:
--   * the verbs that NOTIFY (send, send_batch, release, dead_requeue: their
--     body calls pg_notify). Run on a worker inside a transaction that also
--     wrote on another node -- the outbox pattern: the application's rows and
--     the send in one transaction -- they would make the commit fail, since
--     PostgreSQL cannot PREPARE (two-phase commit) a transaction that ran
--     NOTIFY. Unforced, inside a transaction they run on the coordinator: the
--     message's INSERT goes to the queue's shard in the same distributed
--     transaction, and the notification is sent by the coordinator, where
--     the Workers LISTEN.
--   * claim: it reads its queue and its claim cursor in one statement
--     (queue LEFT JOIN claim_cursor ON c.queue = q.name WHERE q.name =
--     p_queue), and a forced call may only run statements whose queue Citus
--     reads off their own WHERE clause ("queries must filter by the
--     distribution argument ..."). Once claim reads the cursor in a statement
--     of its own (WHERE c.queue = p_queue), drop it from this list. (Done in
--     0.22: claim reads the queue and its cursor in two statements.)
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.prosrc !~ '\mpg_notify\M'
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
     ORDER BY 1
$$;

-- _citus_owner_can_login raises 55000 unless S_owner may log in. Citus opens
-- its connections to the other nodes as the role that runs the statement,
-- and pgsweep's functions run as S_owner (SECURITY DEFINER): a NOLOGIN owner
-- fails every statement the coordinator sends to a worker ("role ... is not
-- permitted to log in"; citusdata/citus#7719).
CREATE OR REPLACE FUNCTION _citus_owner_can_login()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_owner text := (_role_names()).owner_role;
BEGIN
    IF NOT coalesce((SELECT r.rolcanlogin FROM pg_catalog.pg_roles r WHERE r.rolname = v_owner), false) THEN
        RAISE EXCEPTION 'citus_distribute needs role % to log in: Citus connects to the workers as the role that runs a statement, and pgsweep''s functions run as %', v_owner, v_owner
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = pg_catalog.format('As a superuser on the coordinator: ALTER ROLE %I LOGIN (Citus propagates it to the workers). Give it no password the applications know: let the nodes authenticate it to each other (pg_hba.conf for the nodes'' addresses, certificates in citus.node_conninfo, or a password in pg_dist_authinfo).', v_owner);
    END IF;
END
$$;

-- citus_distribute: see the top of this file. Returns one row per table and
-- function: what it is (table, function), its placement (distributed by
-- queue, reference, local, delegated by p_queue, on every node) and whether
-- this call changed it.
--
-- Foreign keys between pgsweep's tables (claim_cursor -> queue, the retention
-- and maintenance bookkeeping) are dropped before the tables are converted
-- and added again, with their names and definitions, after: otherwise Citus
-- turns a table that references a new reference table into a "Citus local
-- table" on the spot, which renames the table to a shard and puts a new
-- table (a new row type) in its place -- the functions that take
-- retention_sweep or retention_unit rows would then name the shard's type.
-- Converted this way, every table keeps its oid and row type.
--
-- The schema's views are dropped before the tables are converted and created
-- again after, on the coordinator only (citus.enable_ddl_propagation off),
-- with their definitions, comments and grants (_view_grants). They are read
-- on the coordinator, never by a verb on a worker. Left in place, Citus would
-- copy every view over a converted table to the workers with the view's
-- dependencies -- and retention_passes reads pg_catalog.pg_stat_activity,
-- which Citus then tries to create on the workers: only a superuser may.
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
    IF v_pending IS NOT NULL THEN
        SELECT pg_catalog.array_agg(c.relname::text ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.pg_get_viewdef(c.oid) ORDER BY c.oid),
               pg_catalog.array_agg(coalesce(' WITH (' || pg_catalog.array_to_string(c.reloptions, ', ') || ')', '') ORDER BY c.oid),
               pg_catalog.array_agg(pg_catalog.obj_description(c.oid, 'pg_class') ORDER BY c.oid)
          INTO v_views, v_view_defs, v_view_opts, v_view_comments
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = v_schema::pg_catalog.regnamespace AND c.relkind = 'v';
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

-- pgsweep:include functions/retention_run.sql
-- Retention: retention_run, the procedure that deletes a policy's expired rows
-- in batches, committing each, until the sweep is drained or the budget spent.
--
--   CALL retention_run('cap.published');
--   CALL retention_run('cap.published', 'replica-1', '10 seconds');
--   CALL retention_run('cap.published', NULL, '10 seconds', NULL, NULL);  -- returns p_pass_id
--
-- Must be called outside a transaction block (it commits). Procedures cannot
-- pin search_path (a SET clause forbids COMMIT inside), so these bodies call
-- only schema-qualified functions that pin theirs and use no operator at
-- all (every comparison, concatenation and arithmetic happens inside those
-- functions): an operator or function that the caller's search_path puts
-- before pg_catalog changes nothing. The schema comes from the migration's
-- template data like everywhere else.
--
-- Errors: a step that fails is recorded on the pass (outcome 'error'), its
-- lease and advisory lock are released, and the error is raised again. A
-- cleaner that is killed records nothing more: its last batch is committed or
-- rolled back whole, its unit stays open for the next cleaner, its lease
-- expires after the policy's TTL and the view shows the pass as abandoned.

-- _retention_finish_error records a failed step (for the procedures).
CREATE OR REPLACE FUNCTION _retention_finish_error(p_pass bigint, p_state text, p_message text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_finish(p_pass, 'error', p_state || ': ' || p_message) $$;

-- _retention_run is the pass, for both retention_run procedures below: the
-- verb (no clock of its own, executable by admins) and the p_now overload
-- (tests, S_owner only). p_clock is checked by _retention_begin (within 10
-- years of the clock) like the p_now of the steps an admin's maintain calls.
CREATE OR REPLACE PROCEDURE _retention_run(p_name text, p_owner text, p_budget interval, p_clock timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_failed boolean := false;
    v_state text;
    v_msg text;
    v_detail text;
    v_hint text;
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_clock);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF p_pass_id IS NULL THEN
        RETURN; -- busy, or the policy keeps rows forever
    END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}._retention_step(p_pass_id);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}._retention_finish_error(p_pass_id, v_state, v_msg);
            COMMIT;
            PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''),
                HINT = coalesce(v_hint, '');
        END IF;
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}._retention_finish(p_pass_id, NULL, NULL);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
END
$$;

-- The p_now overload, for tests (it also returns the pass's id).
CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text, p_budget interval, p_now timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    CALL {{ .schema | default "pgsweep" }}._retention_run(p_name, p_owner, p_budget, p_now, p_pass_id);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    CALL {{ .schema | default "pgsweep" }}._retention_run(p_name, p_owner, p_budget, NULL, v_pass);
END
$$;
-- pgsweep:end functions/retention_run.sql

-- pgsweep:include functions/maintain_retention.sql
{{ $s := .schema | default "pgsweep" -}}
-- The retention part of maintain(): sync the built-in policies, then run
-- every due retention policy (own and registered; retention_due lists them,
-- oldest first) until p_deadline.
--
-- It drives each policy's pass through the engine's own steps
-- (_retention_begin / _retention_step / _retention_finish, exactly as
-- retention_run does) rather than CALL retention_run, because a failing
-- policy must not end the whole maintain pass: PL/pgSQL cannot catch an
-- error raised across a COMMIT, so every step is caught here, outside the
-- COMMITs, recorded on that policy's pass, and the part goes on with the
-- next policy.
--
-- A PROCEDURE without a SET clause (it COMMITs after every batch), so every
-- name below is qualified with the install schema and the body uses no
-- operator: comparisons, arithmetic and JSON building live in the pinned
-- functions _maintain_ret_* below, so nothing on the caller's search_path
-- (pg_cron's superuser's included) can stand in for them.
--
-- Returns in p_result {"deleted": {"<policy>": rows}, "errors": {"<policy>":
-- "message"}, "more": bool}; "more" means a policy stopped on the budget with
-- rows left, or due policies were not reached, so the part is due again at once.
-- _maintain_ret_go: whether the part may start another policy (the
-- deadline has not passed and the part's lease was renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_go(p_owner text, p_deadline timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF clock_timestamp() >= p_deadline THEN
        RETURN false;
    END IF;
    RETURN _maintain_renew('retention', p_owner);
END
$$;

-- _maintain_ret_budget: what is left of the part's budget.
CREATE OR REPLACE FUNCTION _maintain_ret_budget(p_deadline timestamptz)
RETURNS interval
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$ SELECT greatest(p_deadline - clock_timestamp(), interval '0') $$;

-- _maintain_ret_error: an error's text as the history records it.
CREATE OR REPLACE FUNCTION _maintain_ret_error(p_message text, p_state text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT format('%s (SQLSTATE %s)', p_message, p_state) $$;

-- _maintain_ret_put: p_obj with p_key set to p_value.
CREATE OR REPLACE FUNCTION _maintain_ret_put(p_obj jsonb, p_key text, p_value jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_obj || jsonb_build_object(p_key, p_value) $$;

-- Pacing: background retention yields to live traffic.
--
-- retention_duty_cycle d in 1..100 is a fixed duty cycle: after a batch that
-- took t, maintain() sleeps t*(100-d)/d. 0 (the default) adapts the duty
-- cycle after every batch to what the database shows:
--   * sessions waiting on a lock: halve it (at least 10%): the cleaner may
--     be in someone's way;
--   * a batch more than twice as slow per row as the fastest recent one:
--     cut it by 30% (at least 20%): the cleaner competes for CPU or I/O;
--   * other sessions of the database running, or active within the last
--     100 ms (live traffic): raise it by 5 points, to at most 30%;
--   * nothing else running: raise it by 10 points, to 100% (an idle
--     database drains at full speed).
-- It starts at 20%. The 30% cap under traffic and the 20% floor come from
-- the duty-cycle sweep of `pgsweep bench mixed` (docs/benchmarks.md): at
-- 20-25% the p99 of live claims stayed near the 1.2x target while the drain
-- ran at about a third of the unpaced rate; at 50% and more the p99 grew by
-- half.
-- CALL retention_run never pauses.

-- _maintain_ret_pace sleeps after a batch as the pacing says and returns
-- the pacing state for the next batch ({"duty", "best", "pass", "rows"}).
CREATE OR REPLACE FUNCTION _maintain_ret_pace(p_state jsonb, p_pass bigint, p_batch_start timestamptz,
    p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_fixed int := setting_int('retention_duty_cycle');
    v_elapsed double precision := greatest(extract(epoch FROM clock_timestamp() - p_batch_start), 0);
    v_duty double precision := coalesce((p_state ->> 'duty')::double precision, 20);
    v_best double precision := (p_state ->> 'best')::double precision;
    v_rows bigint;
    v_batch_rows bigint;
    v_per_row double precision;
    v_busy int;
    v_waiting int;
BEGIN
    SELECT p.rows_deleted INTO v_rows FROM retention_pass p WHERE p.id = p_pass;
    v_batch_rows := coalesce(v_rows, 0) - CASE WHEN (p_state ->> 'pass')::bigint = p_pass
                                               THEN coalesce((p_state ->> 'rows')::bigint, 0) ELSE 0 END;
    IF v_fixed BETWEEN 1 AND 100 THEN
        v_duty := v_fixed;
    ELSE
        IF v_batch_rows > 0 THEN
            v_per_row := v_elapsed / v_batch_rows;
            -- the fastest recent batch, drifting up slowly so that a
            -- one-off fast batch does not set the bar forever
            v_best := least(coalesce(v_best * 1.02, v_per_row), v_per_row);
        END IF;
        -- live traffic: sessions running now or within the last 100 ms
        -- (a claim loop is idle most of the time between short statements)
        SELECT count(*) FILTER (WHERE (a.state = 'active' AND a.wait_event_type IS DISTINCT FROM 'Lock')
                                   OR a.state_change > clock_timestamp() - interval '100 milliseconds'),
               count(*) FILTER (WHERE a.wait_event_type = 'Lock')
          INTO v_busy, v_waiting
          FROM pg_catalog.pg_stat_activity a
         WHERE a.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND a.pid <> pg_catalog.pg_backend_pid() AND a.backend_type = 'client backend';
        v_duty := CASE
            WHEN v_waiting > 0 THEN greatest(10, v_duty / 2)
            WHEN v_per_row > v_best * 2 THEN greatest(20, v_duty * 0.7)
            WHEN v_busy > 0 THEN least(30, v_duty + 5)
            ELSE least(100, v_duty + 10) END;
    END IF;
    IF v_duty < 100 THEN
        PERFORM pg_catalog.pg_sleep(least(v_elapsed * (100 - v_duty) / v_duty,
                                          greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
    END IF;
    RETURN jsonb_build_object('duty', v_duty, 'best', v_best, 'pass', p_pass,
                              'rows', coalesce((SELECT p.rows_deleted FROM retention_pass p WHERE p.id = p_pass), 0));
END
$$;

-- _maintain_ret_renew_due: whether the part's lease is due for renewal
-- (every third of maintain_lease_ttl since p_renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_renew_due(p_renewed timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT clock_timestamp() - p_renewed > setting_interval('maintain_lease_ttl') / 3 $$;

-- _maintain_ret_tally adds a finished pass to the part's result: its rows
-- under "deleted", and "more" when it stopped on the budget.
CREATE OR REPLACE FUNCTION _maintain_ret_tally(p_result jsonb, p_name text, p_pass bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_outcome text;
    v_rows bigint;
BEGIN
    SELECT p.outcome, p.rows_deleted INTO v_outcome, v_rows FROM retention_pass p WHERE p.id = p_pass;
    p_result := jsonb_set(p_result, ARRAY['deleted', p_name], to_jsonb(coalesce(v_rows, 0)));
    IF v_outcome = 'budget' THEN
        p_result := jsonb_set(p_result, '{more}', 'true');
    END IF;
    RETURN p_result;
END
$$;

-- _maintain_ret_result: the part's result, errors included when there are any.
CREATE OR REPLACE FUNCTION _maintain_ret_result(p_result jsonb, p_more boolean, p_errors jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT jsonb_build_object('deleted', p_result -> 'deleted',
                              'more', p_more OR coalesce((p_result ->> 'more')::boolean, false))
           || CASE WHEN p_errors <> '{}' THEN jsonb_build_object('errors', p_errors) ELSE '{}' END
$$;

CREATE OR REPLACE PROCEDURE _maintain_retention(p_owner text, p_deadline timestamptz, INOUT p_result jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due text[];
    v_name text;
    v_pass bigint;
    v_step_more boolean;
    v_error text;
    v_errors jsonb := '{}';
    v_tally jsonb := '{"deleted": {}}';
    v_more boolean := false;
    v_renewed timestamptz := pg_catalog.clock_timestamp();
    v_batch_start timestamptz;
    v_go boolean;
    v_renew boolean;
    v_pace jsonb := '{}';
BEGIN
    BEGIN
        PERFORM {{ $s }}.retention_builtin_sync();
    EXCEPTION WHEN OTHERS THEN
        v_errors := {{ $s }}._maintain_ret_put(v_errors, 'builtin_sync', pg_catalog.to_jsonb({{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE)));
    END;
    COMMIT;

    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        v_go := {{ $s }}._maintain_ret_go(p_owner, p_deadline);
        IF NOT v_go THEN
            v_more := true; -- out of budget, or lost the part's lease: another owner goes on
            EXIT;
        END IF;
        COMMIT;

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}._retention_begin(v_name, p_owner, {{ $s }}._maintain_ret_budget(p_deadline), NULL);
        EXCEPTION WHEN OTHERS THEN
            v_error := {{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_unlock(v_name);
            COMMIT;
            v_errors := {{ $s }}._maintain_ret_put(v_errors, v_name, pg_catalog.to_jsonb(v_error));
            CONTINUE;
        END IF;
        COMMIT;
        IF v_pass IS NULL THEN
            -- busy elsewhere (or keeps rows forever): a cleaner that died may
            -- still hold the policy's lease, so the part is not done with it:
            -- due again at once, and the lease's expiry lets the next pass in
            v_more := true;
            CONTINUE;
        END IF;

        LOOP
            v_batch_start := pg_catalog.clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}._retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := {{ $s }}._maintain_ret_error(SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic (retention_duty_cycle,
            -- adaptive by default); keep the part's lease alive through a
            -- long policy.
            v_pace := {{ $s }}._maintain_ret_pace(v_pace, v_pass, v_batch_start, p_deadline);
            v_renew := {{ $s }}._maintain_ret_renew_due(v_renewed);
            IF v_renew THEN
                v_go := {{ $s }}._maintain_renew('retention', p_owner);
                IF NOT v_go THEN
                    v_error := 'lost the maintain:retention lease during the pass';
                    EXIT;
                END IF;
                v_renewed := pg_catalog.clock_timestamp();
                COMMIT;
            END IF;
        END LOOP;

        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_finish(v_pass, 'error', v_error);
            v_errors := {{ $s }}._maintain_ret_put(v_errors, v_name, pg_catalog.to_jsonb(v_error));
        ELSE
            PERFORM {{ $s }}._retention_finish(v_pass, NULL, NULL);
        END IF;
        COMMIT;
        PERFORM {{ $s }}._retention_unlock(v_name);
        v_tally := {{ $s }}._maintain_ret_tally(v_tally, v_name, v_pass);
    END LOOP;

    p_result := {{ $s }}._maintain_ret_result(v_tally, v_more, v_errors);
END
$$;
-- pgsweep:end functions/maintain_retention.sql

-- pgsweep:include functions/privileges.sql
-- The role model, in one place (docs/security.md).
--
-- Installing into schema S uses four NOLOGIN roles (created by the
-- migration when missing, see _ensure_roles):
--   S_owner    owns the schema and every object in it; never a superuser
--   S_admin    queues, settings, retention policies, cron, maintenance (and S_monitor)
--   S_worker   send, claim, renew, complete, fail, release, leases
--   S_monitor  the stats views; never payloads
-- DBAs grant one of them to an application's own login role. PUBLIC gets
-- nothing: not the schema, not a table, not a function.
--
-- Every function is SECURITY DEFINER (runs as S_owner, search_path pinned
-- with pg_temp last) except the few that must run as their caller
-- (_invoker_routines): the retention_register wrappers, which pass the
-- caller's role on as the policy owner, the retention steps that delete as
-- the policy's owner, and the pg_cron functions (the job runs as the role
-- that scheduled it, which needs pg_cron's own grants). Worker and monitor roles hold no privilege on any
-- table, so a fence cannot be bypassed with a direct UPDATE, and payloads
-- are reachable only through the verbs. Procedures (maintain, retention_run)
-- cannot be SECURITY DEFINER (they commit): they run as their caller and
-- call only schema-qualified functions.
--
-- Every migration ends with SELECT _grant_all(): ownership, security and
-- grants are re-applied from this file, so an upgraded install's ACLs equal
-- a fresh one's.

-- _role_names: the four role names of this install.
CREATE OR REPLACE FUNCTION _role_names(OUT owner_role text, OUT admin_role text, OUT worker_role text, OUT monitor_role text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.current_schema() || '_owner', pg_catalog.current_schema() || '_admin',
           pg_catalog.current_schema() || '_worker', pg_catalog.current_schema() || '_monitor'
$$;

-- _owner_role: S_owner as a regrole (built-in retention policies belong to it).
CREATE OR REPLACE FUNCTION _owner_role()
RETURNS regrole
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT (pg_catalog.current_schema() || '_owner')::pg_catalog.regrole $$;

-- Routines that run as their caller; every other function is SECURITY DEFINER.
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY['retention_register', '_retention_resolve', '_retention_step', '_retention_as_owner', '_grant_all',
                 -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
                 'cron_schedule', 'cron_unschedule', 'cron_job', '_cron_available', '_cron_require']::text[]
$$;

-- The grant matrix: which role may execute which routine. Routines not
-- listed are callable by S_owner only (internal helpers, the p_now test
-- overloads: a routine is listed by name, so _grant_all leaves out a
-- signature that takes p_now when the routine has one without it).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        '_queue_get', -- the Worker reads the queue's lease_default and max_attempts (no payloads)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        -- what the invoker functions (retention_register's wrappers, the
        -- retention steps, cron) call: argument checks, pure
        '_check_text', '_check_int', '_check_interval', '_interval_text', '_retention_invalid',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_retention_dropped', '_owner_role',
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_retention_run', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
        -- the session check of _retention_as_owner (retention_sql.sql)
        '_retention_session_state', '_retention_session_restore',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'lane_stats', 'version']) r
$$;

-- The views each role may read (all run as S_owner, their owner).
CREATE OR REPLACE FUNCTION _view_grants(OUT role_kind text, OUT view_name text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'monitor', v FROM pg_catalog.unnest(ARRAY[
        'queue_stats', 'leases', 'retention_policies', 'retention_passes', 'maintenance_passes',
        'maintenance_runs', 'settings']) v
$$;

-- _grant_all applies the model to everything in the schema. It runs as the
-- migrating role (which must be S_owner's member or a superuser), at the end
-- of every migration; it is idempotent.
CREATE OR REPLACE FUNCTION _grant_all()
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles record := _role_names();
    v_owner text := v_roles.owner_role;
    r record;
    v_role text;
BEGIN
    IF (SELECT ro.rolsuper FROM pg_catalog.pg_roles ro WHERE ro.rolname = v_owner) THEN
        RAISE EXCEPTION 'role % is a superuser: pgsweep''s objects must not be owned by one', v_owner
            USING ERRCODE = 'insufficient_privilege', HINT = pg_catalog.format('ALTER ROLE %I NOSUPERUSER', v_owner);
    END IF;
    EXECUTE pg_catalog.format('ALTER SCHEMA %I OWNER TO %I', v_schema, v_owner);
    EXECUTE pg_catalog.format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', v_schema);
    EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA %I TO %I, %I, %I', v_schema,
                              v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    EXECUTE pg_catalog.format('GRANT %I TO %I', v_roles.monitor_role, v_roles.admin_role);

    -- Relations: owned by S_owner, nobody else holds a privilege. A sequence
    -- owned by a column follows its table.
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                 WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid
                                   AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('ALTER %s %I.%I OWNER TO %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
            v_schema, r.relname, v_owner);
    END LOOP;
    FOR r IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
              WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
              ORDER BY c.relname LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %I.%I FROM PUBLIC, %I, %I, %I',
            CASE r.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, v_schema, r.relname,
            v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
    END LOOP;
    FOR r IN SELECT g.role_kind, g.view_name FROM _view_grants() g LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', v_schema, r.view_name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT SELECT ON %I.%I TO %I', v_schema, r.view_name, v_schema || '_' || r.role_kind);
        END IF;
    END LOOP;

    -- Routines: owned by S_owner, SECURITY DEFINER unless listed as
    -- invoker, executable by nobody but the roles the matrix names.
    FOR r IN SELECT p.proname, p.prokind, p.pronargs,
                    pg_catalog.format('%I.%I(%s)', v_schema, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)) AS sig,
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now, p.oid
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone. A routine whose every
        -- signature takes p_now (the maintenance steps, retention_due,
        -- queue_recover, _queue_stats: p_now has a default) is granted as the
        -- matrix says, or no role but S_owner could call it at all.
        CONTINUE WHEN r.has_now AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_proc q
             WHERE q.pronamespace = v_schema::regnamespace AND q.proname = r.proname AND q.oid <> r.oid
               AND NOT 'p_now' = ANY (coalesce(q.proargnames, '{}')));
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
