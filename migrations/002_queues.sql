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

{{ template "functions/queue.sql" . }}
{{ template "functions/send.sql" . }}
{{ template "functions/claim.sql" . }}
{{ template "functions/ack.sql" . }}
{{ template "functions/fail.sql" . }}
{{ template "functions/recover.sql" . }}
{{ template "functions/queue_stats.sql" . }}
