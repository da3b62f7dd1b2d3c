-- pgsweep 0.2: queues and messages (the lease store).
--
-- Three message tables, so that the claim path never sees rows kept only for
-- retention:
--   message            live rows: pending, processing (leased) or failed (waiting to retry)
--   message_processed  completed inbox rows, kept for de-duplication until retention
--   message_dead       dead letters: rows that used their last attempt
-- A claim scans only `message`; its cost does not grow with processed or dead rows.
-- Every key leads with the queue column (scale-out rule: queue is the future
-- distribution column), and every statement filters by queue.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- Per-queue settings live in the database so that every instance agrees.
CREATE TABLE queue (
    name                text PRIMARY KEY,
    kind                text NOT NULL CHECK (kind IN ('outbox', 'inbox')),
    max_attempts        int NOT NULL DEFAULT 10 CHECK (max_attempts BETWEEN 1 AND 1000),
    -- retry delay after attempt n: least(backoff_max, backoff_base * 2^(n-1))
    backoff_base        interval NOT NULL DEFAULT '1 second',
    backoff_max         interval NOT NULL DEFAULT '1 hour',
    -- lease used when claim/renew get p_lease NULL
    lease_default       interval NOT NULL DEFAULT '30 seconds',
    -- how long processed inbox rows and dead letters are kept; NULL = forever.
    -- Read by retention and maintenance.
    processed_retention interval DEFAULT '7 days',
    dead_retention      interval DEFAULT '30 days',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (backoff_max >= backoff_base)
);
COMMENT ON TABLE queue IS 'pgsweep queues and their settings; change them with queue_configure';

-- One id sequence for all three tables: a message keeps its id when it moves
-- to message_processed or message_dead.
CREATE SEQUENCE message_id_seq AS bigint;

-- Column notes:
--   visible_at  the one time that decides claimability: for pending rows the
--               delivery time, for failed rows the retry time, for processing
--               rows the lease expiry. A claim takes rows with visible_at <= now
--               and attempt < max_attempts, so expired leases need no second scan.
--   owner       the lease holder; non-NULL exactly while status = 'processing'.
--               renew/complete/fail are fenced by it: a takeover changes it.
--   dedup       true for inbox rows with a key; they are unique per queue.
-- fillfactor 40: room on each page for a second version of every row, so
-- that the claim's UPDATE (which changes only non-indexed columns) and fail's
-- UPDATE are HOT: no new index entries. That matters more than it seems: a
-- non-HOT claim inserts index entries at the head of the claim index, which
-- keeps changing the very leaf pages that the next claims read, and btree then
-- cannot mark the entries of completed rows dead (it only sets LP_DEAD on a
-- page that did not change since it was read) -- every claim re-walks them.
-- Measured (docs/benchmarks.md): fillfactor 70 gave 41% HOT updates and
-- 39k msg/s, 50 gave 94% and 59k, 40 gave 100% and 83k. The live table is
-- small by nature (rows leave on completion), so the space is cheap.
-- Aggressive autovacuum for the same reason: a queue table is mostly dead
-- tuples over time.
CREATE TABLE message (
    queue       text NOT NULL,
    id          bigint NOT NULL DEFAULT nextval('message_id_seq'),
    key         text,
    dedup       boolean NOT NULL DEFAULT false,
    payload     jsonb NOT NULL,
    headers     jsonb NOT NULL DEFAULT '{}',
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'failed')),
    attempt     int NOT NULL DEFAULT 0,
    owner       text,
    visible_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL,
    last_error  text,
    PRIMARY KEY (queue, id)
) WITH (fillfactor = 40, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER SEQUENCE message_id_seq OWNED BY message.id;

-- The claim index: equality on queue, then the FIFO order. It holds only
-- columns that never change after insert, so claim/renew/fail updates are HOT.
-- The claim walks it in order and checks visible_at/attempt on the heap:
-- rows in flight and rows waiting for a retry or a schedule at the head of the
-- queue are walked over (see docs/claim-explain.md).
CREATE INDEX message_claim ON message (queue, created_at, id);
-- Inbox de-duplication among live rows (processed rows: see message_processed).
CREATE UNIQUE INDEX message_inbox_key ON message (queue, key) WHERE dedup;

CREATE TABLE message_processed (
    queue        text NOT NULL,
    id           bigint NOT NULL,
    key          text, -- NULL for inbox messages sent without a key
    payload      jsonb NOT NULL,
    headers      jsonb NOT NULL,
    attempts     int NOT NULL,
    created_at   timestamptz NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (queue, id),
    UNIQUE (queue, key)
);
CREATE INDEX message_processed_retention ON message_processed (queue, processed_at);
COMMENT ON TABLE message_processed IS 'completed inbox messages, kept for de-duplication until queue.processed_retention';

CREATE TABLE message_dead (
    queue      text NOT NULL,
    id         bigint NOT NULL,
    key        text,
    payload    jsonb NOT NULL,
    headers    jsonb NOT NULL,
    attempts   int NOT NULL,
    last_error text,
    created_at timestamptz NOT NULL,
    dead_at    timestamptz NOT NULL,
    PRIMARY KEY (queue, id)
);
CREATE INDEX message_dead_retention ON message_dead (queue, dead_at);
COMMENT ON TABLE message_dead IS 'dead letters: messages that used their last attempt, kept until queue.dead_retention';

-- queue_recover's keyset cursor, one row per queue (see functions/recover.sql).
CREATE TABLE queue_recovery (
    queue      text PRIMARY KEY,
    position   bigint NOT NULL DEFAULT 0,
    boundary   bigint,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- pgsweep:include functions/queue.sql
-- Queues: creation, settings, and the lookup every message function starts with.

-- _queue_get returns the queue row or raises 22023 naming p_queue. Every
-- message function calls it first: an unknown queue is the caller's error and
-- nothing may change.
CREATE OR REPLACE FUNCTION _queue_get(p_queue text)
RETURNS queue
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    SELECT * INTO v_q FROM queue WHERE name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_queue must name an existing queue, got unknown queue "%"', p_queue
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v_q;
END
$$;

-- queue_create is idempotent so that every application instance can call it
-- at start-up. A second call with another max_attempts updates it (the code's
-- latest word wins); changing the kind of an existing queue is refused,
-- because outbox and inbox rows are completed differently.
CREATE OR REPLACE FUNCTION queue_create(p_queue text, p_kind text DEFAULT 'outbox', p_max_attempts int DEFAULT 10)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz := now(); -- plain value for the UPDATE (scale-out rule)
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    IF p_kind IS NULL OR p_kind NOT IN ('outbox', 'inbox') THEN
        RAISE EXCEPTION 'p_kind must be outbox or inbox, got %', coalesce(p_kind, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_int('p_max_attempts', p_max_attempts, 1, 1000);

    INSERT INTO queue (name, kind, max_attempts) VALUES (p_queue, p_kind, p_max_attempts)
    ON CONFLICT (name) DO NOTHING;
    IF FOUND THEN
        -- The claim cursor, at the head: otherwise the queue's first claims
        -- would race to insert it and wait for each other once.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, '-infinity', -9223372036854775808, '-infinity')
        ON CONFLICT (queue) DO NOTHING;
        RETURN;
    END IF;
    SELECT kind INTO v_kind FROM queue WHERE name = p_queue FOR UPDATE;
    IF v_kind <> p_kind THEN
        RAISE EXCEPTION 'p_kind must match the existing queue "%" (%), got %', p_queue, v_kind, p_kind
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE queue SET max_attempts = p_max_attempts, updated_at = v_now
     WHERE name = p_queue AND max_attempts <> p_max_attempts;
END
$$;

-- queue_configure changes a queue's settings. p_settings is a JSON object
-- whose keys are the settings to change (others stay):
--   max_attempts        1..1000
--   backoff_base        '0 seconds'..'1 day'
--   backoff_max         backoff_base..'7 days'
--   backoff_jitter      0..1: each fail call draws its delays from
--                       [delay * (1 - jitter), delay]; 0 = exact
--   lease_default       '1 second'..'1 hour'
--   claim_rescan        '0 seconds'..'1 minute': how long claims may trust the
--                       claim cursor (see claim.sql); 0 = exact oldest-first order
--   processed_retention '1 second'..'100 years', or null = keep forever
--   dead_retention      '1 second'..'100 years', or null = keep forever
-- JSON rather than one parameter per setting because NULL must be a value
-- here (keep forever), not "unchanged". Returns the queue row as it is now.
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
    IF p_settings IS NULL OR jsonb_typeof(p_settings) <> 'object' THEN
        RAISE EXCEPTION 'p_settings must be a JSON object, got %', coalesce(jsonb_typeof(p_settings), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_key IN SELECT jsonb_object_keys(p_settings) LOOP
        IF v_key NOT IN ('max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter', 'lease_default',
                         'processed_retention', 'dead_retention', 'claim_rescan') THEN
            RAISE EXCEPTION 'p_settings: unknown setting "%" (have max_attempts, backoff_base, backoff_max, backoff_jitter, lease_default, processed_retention, dead_retention, claim_rescan)', v_key
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
           updated_at = v_now
     WHERE name = p_queue
    RETURNING * INTO v_q;
    RETURN v_q;
END
$$;

-- _notify_channel is the LISTEN/NOTIFY channel of this schema's queues:
-- '<schema>_messages', the schema cut to 54 bytes so the channel stays within
-- PostgreSQL's 63-byte limit. The payload of each notification is the queue name.
CREATE OR REPLACE FUNCTION notify_channel()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT left(current_schema(), 54) || '_messages' $$;
-- pgsweep:end functions/queue.sql
-- pgsweep:include functions/send.sql
-- Sending: one message or a batch. Sends run inside the caller's transaction
-- (that is the point of an outbox): the rows and the notification appear when
-- it commits, not before.
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
CREATE OR REPLACE FUNCTION _inbox_key_kept(p_queue text, p_key text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM message_processed p WHERE p.queue = p_queue AND p.key = p_key)
        OR EXISTS (SELECT 1 FROM message_dead d WHERE d.queue = p_queue AND d.key = p_key)
$$;

-- _send inserts one message into a queue already looked up and checked.
CREATE OR REPLACE FUNCTION _send(p_q queue, p_payload jsonb, p_headers jsonb, p_key text, p_deliver_at timestamptz, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_headers jsonb := coalesce(p_headers, '{}');
    v_visible timestamptz := coalesce(p_deliver_at, p_now);
    v_parked timestamptz := CASE WHEN p_deliver_at > p_now THEN p_deliver_at END; -- see claim.sql
BEGIN
    IF p_q.kind = 'inbox' AND p_key IS NOT NULL THEN
        IF _inbox_key_kept(p_q.name, p_key) THEN
            RETURN NULL;
        END IF;
        INSERT INTO message (queue, key, dedup, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, true, p_payload, v_headers, v_visible, p_now, v_parked)
        ON CONFLICT (queue, key) WHERE dedup DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NULL THEN
            RETURN NULL;
        END IF;
        IF _inbox_key_kept(p_q.name, p_key) THEN
            DELETE FROM message WHERE queue = p_q.name AND id = v_id;
            RETURN NULL;
        END IF;
    ELSE
        INSERT INTO message (queue, key, payload, headers, visible_at, created_at, parked_until)
        VALUES (p_q.name, p_key, p_payload, v_headers, v_visible, p_now, v_parked)
        RETURNING id INTO v_id;
    END IF;
    RETURN v_id;
END
$$;

-- send returns the new message's id, or NULL for an inbox duplicate.
-- p_deliver_at in the future schedules the message; NULL or past = now.
CREATE OR REPLACE FUNCTION send(p_queue text, p_payload jsonb, p_headers jsonb DEFAULT '{}', p_key text DEFAULT NULL,
                                p_deliver_at timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_queue);
    v_id bigint;
BEGIN
    PERFORM _check_message(p_payload, p_headers, p_key);
    v_id := _send(v_q, p_payload, p_headers, p_key, p_deliver_at, clock_timestamp());
    IF v_id IS NOT NULL THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- send_batch sends up to 10000 messages at once and returns one id per input
-- element, in input order (NULL for an inbox duplicate, also a duplicate
-- within the batch). p_headers, p_keys and p_deliver_at are NULL or arrays of
-- the same length as p_payloads. One notification per batch.
CREATE OR REPLACE FUNCTION send_batch(p_queue text, p_payloads jsonb[], p_headers jsonb[] DEFAULT NULL,
                                      p_keys text[] DEFAULT NULL, p_deliver_at timestamptz[] DEFAULT NULL)
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
    FOR i IN 1 .. v_n LOOP
        PERFORM _check_message(p_payloads[i], p_headers[i], p_keys[i]);
    END LOOP;
    v_now := clock_timestamp();

    IF v_q.kind = 'inbox' AND p_keys IS NOT NULL THEN
        -- De-duplication needs the per-message steps of _send.
        FOR i IN 1 .. v_n LOOP
            v_ids[i] := _send(v_q, p_payloads[i], p_headers[i], p_keys[i], p_deliver_at[i], v_now);
            v_any := v_any OR v_ids[i] IS NOT NULL;
        END LOOP;
    ELSE
        -- Ids are drawn first so that they can be returned in input order
        -- (INSERT … RETURNING does not promise an order).
        v_ids := ARRAY(SELECT nextval('message_id_seq') FROM generate_series(1, v_n));
        INSERT INTO message (queue, id, key, payload, headers, visible_at, created_at, parked_until)
        SELECT v_q.name, v_ids[g], p_keys[g], p_payloads[g], coalesce(p_headers[g], '{}'),
               coalesce(p_deliver_at[g], v_now), v_now, CASE WHEN p_deliver_at[g] > v_now THEN p_deliver_at[g] END
          FROM generate_series(1, v_n) g;
        v_any := true;
    END IF;
    IF v_any THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/send.sql
-- pgsweep:include functions/claim.sql
-- claim: lease up to p_batch due messages of one queue to p_owner.
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
-- owner, attempt, visible_at), so it is a HOT update.
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
-- The clock is read once into v_now (scale-out rule: plain values in UPDATE).
-- p_lease NULL means the queue's lease_default. Rows come back oldest first.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz)
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
BEGIN
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error.
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour' THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, c.created_at, c.id, c.rescanned_at
      INTO v_max, v_lease, v_rescan_every, v_cursor_at, v_cursor_id, v_rescanned
      FROM queue q LEFT JOIN claim_cursor c ON c.queue = q.name
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
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

    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at
    )
    SELECT * FROM claimed ORDER BY 6, 1;
END
$$;

CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT '30 seconds')
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
-- pgsweep:end functions/claim.sql
-- pgsweep:include functions/ack.sql
-- renew and complete: act only on rows p_owner still holds, return their ids.
--
-- Fencing is by the owner column: a claim that takes over an expired lease
-- writes its own owner, and fail/queue_recover clear it, so a stale owner's
-- call matches nothing and the caller learns exactly which leases it lost.
-- A lease that expired but was not taken over is still the owner's: completing
-- it then is the best outcome (no redelivery), and nobody else held it meanwhile.
-- Owners must be unique per worker process (the Go Worker draws a random one).

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

-- renew extends the leases to p_lease from now (NULL: the queue's lease_default).
CREATE OR REPLACE FUNCTION renew(p_queue text, p_owner text, p_ids bigint[], p_lease interval, p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_until timestamptz;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    IF p_lease IS NOT NULL THEN
        PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
    END IF;
    v_q := _queue_get(p_queue);
    v_until := coalesce(p_now, clock_timestamp()) + coalesce(p_lease, v_q.lease_default);
    RETURN QUERY
    UPDATE message m SET visible_at = v_until
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner
    RETURNING m.id;
END
$$;

CREATE OR REPLACE FUNCTION renew(p_queue text, p_owner text, p_ids bigint[], p_lease interval)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT renew(p_queue, p_owner, p_ids, p_lease, NULL::timestamptz);
END
$$;

-- complete: outbox rows are deleted; inbox rows move to message_processed,
-- where they keep de-duplicating their key until retention removes them.
CREATE OR REPLACE FUNCTION complete(p_queue text, p_owner text, p_ids bigint[], p_now timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind text;
    v_now timestamptz;
BEGIN
    IF p_owner IS NULL OR p_owner = '' OR length(p_owner) > 200 OR p_ids IS NULL
       OR cardinality(p_ids) = 0 OR cardinality(p_ids) > 10000 THEN
        PERFORM _check_text('p_owner', p_owner);
        PERFORM _check_ids(p_ids);
    END IF;
    SELECT q.kind INTO v_kind FROM queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue);
    END IF;
    IF v_kind = 'outbox' THEN
        RETURN QUERY
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner
        RETURNING m.id;
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    RETURN QUERY
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
    )
    INSERT INTO message_processed AS p (queue, id, key, payload, headers, attempts, created_at, processed_at)
    SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, d.created_at, v_now FROM d
    RETURNING p.id;
END
$$;

CREATE OR REPLACE FUNCTION complete(p_queue text, p_owner text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT complete(p_queue, p_owner, p_ids, NULL::timestamptz);
END
$$;

-- release: give messages back unprocessed, as if the claim had not happened:
-- the attempt is taken back, the owner cleared, and the row is due at once
-- (status 'pending' again, or 'failed' when an earlier attempt had failed).
-- For messages claimed but never started -- a worker shutting down releases
-- what it has not begun -- so a restart or a deploy neither waits for their
-- leases to expire nor spends an attempt on them. A message whose handler ran
-- must be completed or failed instead: releasing it would hide that attempt.
CREATE OR REPLACE FUNCTION release(p_queue text, p_owner text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_ids(p_ids);
    PERFORM _queue_get(p_queue);
    v_now := clock_timestamp();
    RETURN QUERY
    UPDATE message m
       SET status = CASE WHEN m.attempt > 1 THEN 'failed' ELSE 'pending' END,
           owner = NULL, attempt = m.attempt - 1, visible_at = v_now
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner
    RETURNING m.id;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
END
$$;
-- pgsweep:end functions/ack.sql
-- pgsweep:include functions/fail.sql
-- fail: the handler failed. Rows that used their last attempt move to
-- message_dead (payload, headers, attempts, last error and timestamps kept);
-- the others wait for a retry: status 'failed', owner cleared, visible again
-- after p_retry_after or the queue's exponential backoff:
--     delay(attempt n) = least(backoff_max, backoff_base * 2^(n-1))
-- shortened by the queue's backoff_jitter: each call draws one factor r in
-- [1 - backoff_jitter, 1] and waits delay * r, so that messages failed at
-- the same moment (an outage) by many workers do not all come back at once.
-- Acts only on rows p_owner still holds (see ack.sql on fencing).
--
-- The retry times are computed into an array indexed by attempt before the
-- UPDATE (scale-out rule: no timestamptz arithmetic applied to columns in
-- SET); delays stop growing at backoff_max, so the array has at most ~40
-- entries and attempt is capped to its length.

CREATE OR REPLACE FUNCTION fail_details(p_queue text, p_owner text, p_ids bigint[], p_error text,
                                        p_retry_after interval DEFAULT NULL, p_now timestamptz DEFAULT NULL)
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
BEGIN
    PERFORM _check_text('p_owner', p_owner);
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

    RETURN QUERY
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner AND m.attempt >= v_q.max_attempts
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.created_at
    )
    INSERT INTO message_dead AS x (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
    SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt, v_error, d.created_at, v_now FROM d
    RETURNING x.id, true;

    RETURN QUERY
    UPDATE message m
       SET status = 'failed', owner = NULL, visible_at = v_due[least(m.attempt, v_k)], last_error = v_error,
           parked_until = CASE WHEN v_due[least(m.attempt, v_k)] > v_now THEN v_due[least(m.attempt, v_k)] END
     WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.owner = p_owner AND m.attempt < v_q.max_attempts
    RETURNING m.id, false;
END
$$;

CREATE OR REPLACE FUNCTION fail(p_queue text, p_owner text, p_ids bigint[], p_error text, p_retry_after interval DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT f.id FROM fail_details(p_queue, p_owner, p_ids, p_error, p_retry_after, NULL) f;
END
$$;
-- pgsweep:end functions/fail.sql
-- pgsweep:include functions/recover.sql
-- queue_recover: the recovery building block that maintenance calls per queue.
--
--   queue_recover(p_queue, p_batch, p_now DEFAULT NULL) RETURNS TABLE(recovered int, dead_lettered int)
--
-- Looks at up to p_batch rows of the queue whose lease expired (and rows that
-- are due but have no attempt left, e.g. after max_attempts was lowered):
--   * attempt < max_attempts: the lease is lost; the row is released (owner
--     cleared, status 'failed', last_error 'lease expired', visible now), so
--     the old owner's late complete/fail/renew act on nothing. claim would take
--     such a row anyway; recovery makes the loss visible and fences the owner.
--   * attempt >= max_attempts: moved to message_dead. claim never hands these
--     out, so without recovery they would stay in the queue.
--
-- Traversal (as in seed 002): keyset in id order, from a cursor up to a
-- boundary (the queue's highest id when the traversal started), so that a
-- stream of new messages cannot keep the pass from reaching old rows. A pass
-- that finds nothing up to the boundary wraps: the next call starts again
-- from the beginning with a new boundary. The cursor lives in queue_recovery
-- and its row lock serialises concurrent calls for one queue. Rows locked by
-- others are skipped (FOR UPDATE SKIP LOCKED): someone is acting on them.
CREATE OR REPLACE FUNCTION queue_recover(p_queue text, p_batch int, p_now timestamptz DEFAULT NULL)
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
BEGIN
    PERFORM _check_int('p_batch', p_batch, 1, 10000);
    v_q := _queue_get(p_queue);

    INSERT INTO queue_recovery (queue) VALUES (p_queue) ON CONFLICT (queue) DO NOTHING;
    SELECT r.position, r.boundary INTO v_pos, v_bound FROM queue_recovery r WHERE r.queue = p_queue FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp());
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
        RETURNING m.queue, m.id, m.key, m.payload, m.headers, m.attempt, m.owner, m.last_error, m.created_at
    ), x AS (
        INSERT INTO message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
        SELECT d.queue, d.id, d.key, d.payload, d.headers, d.attempt,
               CASE WHEN d.owner IS NULL THEN d.last_error
                    ELSE 'lease of ' || d.owner || ' expired on the last attempt' END,
               d.created_at, v_now
          FROM d
        RETURNING 1
    )
    SELECT count(*) INTO v_dead FROM x;

    UPDATE message m
       SET status = 'failed', owner = NULL, visible_at = v_now, last_error = 'lease expired'
     WHERE m.queue = p_queue AND m.id = ANY (v_ids) AND m.owner IS NOT NULL AND m.attempt < v_q.max_attempts;
    GET DIAGNOSTICS v_rec = ROW_COUNT;

    UPDATE queue_recovery SET position = v_last, boundary = v_bound, updated_at = v_now WHERE queue = p_queue;
    RETURN QUERY SELECT v_rec, v_dead;
END
$$;
-- pgsweep:end functions/recover.sql
-- pgsweep:include functions/queue_stats.sql
-- queue_stats: one row per queue.
--   pending             status pending (including scheduled ones not yet due)
--   processing          leased (live or expired leases)
--   failed              waiting for a retry
--   processed           inbox rows kept for de-duplication
--   dead                dead letters
--   oldest_pending_age  age (since it was sent) of the oldest due, unleased
--                       row: pending or failed and visible now; NULL when none
-- Counting is O(rows of the queue): meant for dashboards and psql, not hot paths.
--
-- Scale-out rules: every statement on a message table filters by one queue,
-- and the clock is read once into a variable, never applied in a filter. So
-- the counting is a function of one queue, _queue_stats, that runs one
-- statement per table, and the view calls it per queue row (LATERAL).
-- `SELECT * FROM queue_stats WHERE queue = 'x'` counts only queue x: the
-- filter applies to the queue scan before the call.
--
-- STABLE, so that its three statements read the caller's one snapshot: a
-- message that a concurrent complete/fail moves from message to
-- message_processed or message_dead is counted exactly once. p_now pins the
-- clock (tests); NULL reads clock_timestamp() once per call.
CREATE OR REPLACE FUNCTION _queue_stats(p_queue text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (pending bigint, processing bigint, failed bigint, processed bigint, dead bigint,
               oldest_pending_age interval)
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_oldest timestamptz;
BEGIN
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= v_now)
      INTO pending, processing, failed, v_oldest
      FROM message m
     WHERE m.queue = p_queue;
    SELECT count(*) INTO processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO dead FROM message_dead d WHERE d.queue = p_queue;
    oldest_pending_age := v_now - v_oldest;
    RETURN NEXT;
END
$$;

CREATE OR REPLACE VIEW queue_stats AS
SELECT q.name AS queue,
       q.kind,
       s.pending,
       s.processing,
       s.failed,
       s.processed,
       s.dead,
       s.oldest_pending_age
  FROM queue q
 CROSS JOIN LATERAL _queue_stats(q.name) s;
-- pgsweep:end functions/queue_stats.sql
