-- pgsweep 0.35: the checks 0.34 put on the hot path (claim, complete, send,
-- send_batch) cost what 0.33 cost. Each verb asks one inline expression
-- whether an argument could be bad, or whether the caller holds the queue
-- right by a plain grant, and calls the _check_* function or _queue_require
-- (the rules, unchanged) only then. No behaviour or error message changes.
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
-- messages waiting behind heads (sql/tests/lanes.sql counts the scans). A
-- lane's next head usually lies behind the cursor (its lane was sent long
-- ago); the promotion moves the cursor back to it (_lane_next), so claims
-- find it from the cursor on instead of in the pass before it.
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
    -- The rights (queue_rights.sql): a grant to a role the caller is a
    -- member of, whose oid still has the granted name, is the common case and
    -- costs one probe here; anything else asks _queue_require, the rule.
    IF NOT EXISTS (SELECT 1 FROM queue_right r
                    WHERE r.queue = p_queue AND r.privilege = 'consume'
                      AND CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee) -- then the oid is the role of that name
                               THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                                                ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END) THEN
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    SELECT c.created_at, c.id, c.rescanned_at INTO v_cursor_at, v_cursor_id, v_rescanned
      FROM claim_cursor c WHERE c.queue = p_queue;
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
    PERFORM _queue_require(p_queue, 'consume');
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
--
-- The common case pays nothing for lanes: when the queue has no lane row at
-- all, none of the rows completed here has a lane (a lane's row exists, and
-- is committed, for as long as the lane has a message, and the rows completed
-- here are in flight), so the DELETE returns the ids straight away. Gathering
-- ids and lanes into arrays and returning the ids from them cost 13% more CPU
-- per claim + complete (docs/benchmarks.md, "security").
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
    IF NOT EXISTS (SELECT 1 FROM queue_right r -- the common case inline, the rule in _queue_require (as in claim.sql)
                    WHERE r.queue = p_queue AND r.privilege = 'consume'
                      AND CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee) -- then the oid is the role of that name
                               THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                                                ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END) THEN
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
    PERFORM _queue_require(p_queue, 'consume');
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
--  3c. the same probe for a dead letter with the key (message_dead's inbox
--      keys are unique since 0.23): a key sent and dead-lettered after the
--      snapshot raises 40001 too.

CREATE OR REPLACE FUNCTION _check_message(p_payload jsonb, p_headers jsonb, p_key text)
RETURNS void
LANGUAGE plpgsql STABLE
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
    IF NOT EXISTS (SELECT 1 FROM queue_right r -- the common case inline, the rule in _queue_require (as in claim.sql)
                    WHERE r.queue = p_queue AND r.privilege = 'send'
                      AND CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee) -- then the oid is the role of that name
                               THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                                                ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END) THEN
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
    IF NOT EXISTS (SELECT 1 FROM queue_right r -- the common case inline, the rule in _queue_require (as in claim.sql)
                    WHERE r.queue = p_queue AND r.privilege = 'send'
                      AND CASE WHEN r.grantee_name = pg_catalog.pg_get_userbyid(r.grantee) -- then the oid is the role of that name
                               THEN pg_catalog.pg_has_role(CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                                                                ELSE pg_catalog.current_setting('role')::name END, r.grantee, 'MEMBER') END) THEN
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

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
