-- pgsweep: coordinated retention of any registered table.
--
-- A policy names a table, a time column and an age; optionally a status column
-- with the statuses that may be deleted and one more fixed filter (for example
-- queue = 'orders', which pgsweep's own built-in policies use). retention_run
-- plans a sweep over the table as work units and deletes unit by unit, one
-- committed batch at a time; see functions/retention_run.sql for the rules.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

CREATE TABLE retention_policy (
    name          text PRIMARY KEY,
    -- The table by name, not by oid, so that a dump and restore keeps the policy.
    table_schema  text NOT NULL,
    table_name    text NOT NULL,
    time_column   text NOT NULL,
    time_type     text NOT NULL CHECK (time_type IN ('timestamptz', 'timestamp', 'date')),
    older_than    interval,            -- NULL: keep rows forever
    status_column text,
    statuses      text[],
    filter_column text,                -- extra fixed filter: filter_column = ANY (filter_values)
    filter_values text[],
    batch_size    int NOT NULL CHECK (batch_size BETWEEN 1 AND 10000),
    mode          text NOT NULL CHECK (mode IN ('exclusive', 'parallel')),
    run_interval  interval NOT NULL CHECK (run_interval > interval '0'),
    time_zone     text,                -- for timestamp/date columns; NULL: the database's TimeZone
    lease_ttl     interval NOT NULL DEFAULT interval '30 seconds',
    strategy      text NOT NULL DEFAULT 'auto' CHECK (strategy IN ('auto', 'tid_range', 'keyset')),
    registered_at timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    CHECK ((status_column IS NULL) = (statuses IS NULL)),
    CHECK ((filter_column IS NULL) = (filter_values IS NULL))
);
COMMENT ON TABLE retention_policy IS 'pgsweep retention policies; see retention_register';

-- A sweep is one planned walk over a policy's table with a fixed cutoff. Its
-- work units are claimed FOR UPDATE SKIP LOCKED, so parallel cleaners never
-- wait on each other and a crashed cleaner's unit is simply claimed again.
CREATE TABLE retention_sweep (
    id             bigserial PRIMARY KEY,
    policy         text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    strategy       text NOT NULL CHECK (strategy IN ('tid_range', 'keyset')),
    -- The cutoff as timestamptz; for timestamp and date columns it encodes the
    -- local cutoff as if it were UTC (see _retention_cutoff).
    cutoff         timestamptz NOT NULL,
    planned_at     timestamptz NOT NULL,
    planned_by     text NOT NULL,
    units          int NOT NULL,
    blocks         bigint,             -- tid_range: table size in blocks when planned
    step_blocks    bigint,             -- tid_range: blocks per unit
    eligible_fraction double precision, -- auto: the eligible fraction of a sample of the table
    -- The statements of this sweep, built once at planning from the catalog
    -- (names quoted with %I): a dropped or retyped column makes them fail,
    -- never delete the wrong rows.
    delete_sql     text NOT NULL
);
CREATE INDEX ON retention_sweep (policy, id);

-- Open work: a unit row exists until its range is done.
CREATE TABLE retention_unit (
    policy   text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    sweep_id bigint NOT NULL REFERENCES retention_sweep (id) ON DELETE CASCADE,
    unit_no  int NOT NULL,
    block_lo bigint,                   -- tid_range: blocks [block_lo, block_hi); NULL hi: to the end
    block_hi bigint,
    time_lo  timestamptz,              -- keyset: times [time_lo, time_hi), encoded like retention_sweep.cutoff
    time_hi  timestamptz,
    PRIMARY KEY (policy, sweep_id, unit_no)
);

-- One row per retention_run call that did work (a busy cleaner records nothing).
CREATE TABLE retention_pass (
    id             bigserial PRIMARY KEY,
    policy         text NOT NULL REFERENCES retention_policy (name) ON DELETE CASCADE,
    owner          text NOT NULL,
    mode           text NOT NULL,
    lease_token    bigint,             -- exclusive mode: the lease's fencing token
    pid            int NOT NULL,       -- with backend_start, tells a live pass from an abandoned one
    backend_start  timestamptz,
    started_at     timestamptz NOT NULL,
    deadline       timestamptz NOT NULL,
    now_override   timestamptz,        -- p_now, when a test pinned the clock
    renewed_at     timestamptz,
    last_batch_at  timestamptz,
    finished_at    timestamptz,
    rows_deleted   bigint NOT NULL DEFAULT 0,
    batches        int NOT NULL DEFAULT 0,
    units          int NOT NULL DEFAULT 0,   -- units finished by this pass
    planned_sweep  bigint,
    strategy       text,
    outcome        text NOT NULL DEFAULT 'running'
                   CHECK (outcome IN ('running', 'drained', 'budget', 'lease_lost', 'error')),
    error          text
);
CREATE INDEX ON retention_pass (policy, id);
COMMENT ON TABLE retention_pass IS 'pgsweep retention history: one row per cleaner pass, bounded per policy';

{{ template "functions/retention_check.sql" . }}
{{ template "functions/retention_register.sql" . }}
{{ template "functions/retention_sql.sql" . }}
{{ template "functions/retention_plan.sql" . }}
{{ template "functions/retention_step.sql" . }}
{{ template "functions/retention_run.sql" . }}
{{ template "functions/retention_views.sql" . }}
