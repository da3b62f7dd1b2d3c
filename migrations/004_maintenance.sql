-- pgsweep: maintenance — shared settings, the maintain() pass, its bounded
-- history, and pg_cron scheduling.
--
-- One pass (CALL maintain) runs the parts 'recovery' and 'retention', each
-- under its own lease 'maintain:<part>' plus an advisory lock, so pg_cron and
-- any number of `pgsweep run` replicas can call it side by side: a part runs
-- in at most one session at a time, and every pass is recorded.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- Settings that every instance must agree on live here, not in config files.
-- value is the normalised text form; kind, range and default come with the
-- row so that setting_set can validate without a second source of truth.
CREATE TABLE setting (
    name          text PRIMARY KEY,
    value         text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('interval', 'integer')),
    default_value text NOT NULL,
    min_value     text NOT NULL,
    max_value     text NOT NULL,
    infinite_ok   boolean NOT NULL DEFAULT false,
    description   text NOT NULL,
    updated_at    timestamptz
);
COMMENT ON TABLE setting IS 'pgsweep settings shared by every instance; change with setting_set, read with setting_get or the settings view';

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('runner_interval', '10 seconds', 'interval', '10 seconds', '1 second', '1 hour', false,
     'pause between two passes of each `pgsweep run` replica'),
    ('runner_jitter', '2 seconds', 'interval', '2 seconds', '0 seconds', '1 hour', false,
     'random spread (+/-) added to runner_interval so replicas do not call in lock-step; capped at runner_interval'),
    ('maintain_lease_ttl', '1 minute', 'interval', '1 minute', '1 second', '1 hour', false,
     'TTL of the maintain:<part> leases, renewed after every step; how long a crashed pass blocks its part'),
    ('recovery_interval', '5 seconds', 'interval', '5 seconds', '0 seconds', '1 hour', false,
     'minimum time between the end of one recovery run and the start of the next (0: every pass)'),
    ('recovery_batch_size', '1000', 'integer', '1000', '1', '10000', false,
     'rows examined by one recovery step; maintain commits after each step'),
    ('retention_check_interval', '1 minute', 'interval', '1 minute', '0 seconds', '1 day', false,
     'minimum time between two checks for due retention policies (0: every pass)'),
    ('inbox_processed_retention', '7 days', 'interval', '7 days', '1 minute', '36500 days', true,
     'default period processed inbox rows are kept for de-duplication (infinite: keep forever)'),
    ('dead_letter_retention', '30 days', 'interval', '30 days', '1 minute', '36500 days', true,
     'default period dead letters are kept (infinite: keep forever)'),
    ('retention_duty_cycle', '5', 'integer', '5', '1', '100', false,
     'percent of the time maintain() spends deleting while it drains retention backlogs: after a batch that took t it pauses t*(100-d)/d, leaving the CPU and I/O to live traffic (100: no pause; CALL retention_run never pauses)'),
    ('history_retention', '7 days', 'interval', '7 days', '1 minute', '365 days', false,
     'maintenance passes older than this are deleted from the history'),
    ('history_max_rows', '10000', 'integer', '10000', '10', '10000000', false,
     'at most this many maintenance passes are kept in the history');

-- Per-part state: when each part last ran, so that a part runs only when due.
CREATE TABLE maintain_state (
    part             text PRIMARY KEY CHECK (part IN ('recovery', 'retention')),
    last_started_at  timestamptz,
    last_finished_at timestamptz,
    last_owner       text,
    last_status      text,
    backlog          boolean NOT NULL DEFAULT false,
    -- free for the part body, read and written only while it holds the
    -- part's lease: e.g. recovery's traversal position and boundary per queue
    cursor           jsonb NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE maintain_state IS 'pgsweep maintain: last run of each part; backlog = the last run stopped with work left (due again at once); cursor = the part body''s own state between steps and passes';
INSERT INTO maintain_state (part) VALUES ('recovery'), ('retention');

-- The history: one row per pass (inserted when it starts, committed, updated
-- when it ends, so a crashed pass stays visible) ...
CREATE TABLE maintain_pass (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner       text NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    budget      interval NOT NULL,
    parts       jsonb NOT NULL DEFAULT '{}',
    error       text
);
CREATE INDEX maintain_pass_owner ON maintain_pass (owner, id);
CREATE INDEX maintain_pass_started ON maintain_pass (started_at);
COMMENT ON TABLE maintain_pass IS 'pgsweep maintain: one row per pass; parts maps each part to what it did (done, failed, lost, busy, not due, no budget)';

-- ... and one row per part that actually ran, with the lease token it ran
-- under: the proof that no part ever ran twice at once.
CREATE TABLE maintain_run (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pass_id     bigint NOT NULL REFERENCES maintain_pass ON DELETE CASCADE,
    part        text NOT NULL,
    owner       text NOT NULL,
    token       bigint NOT NULL,
    status      text NOT NULL CHECK (status IN ('running', 'done', 'failed', 'lost', 'abandoned')),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    steps       int NOT NULL DEFAULT 0,
    more        boolean NOT NULL DEFAULT false,
    counts      jsonb NOT NULL DEFAULT '{}',
    error       text
);
CREATE INDEX maintain_run_pass ON maintain_run (pass_id);
CREATE INDEX maintain_run_open ON maintain_run (part) WHERE status = 'running';
COMMENT ON TABLE maintain_run IS 'pgsweep maintain: one row per part run: lease token, start, end, counts, error';

{{ template "functions/settings.sql" . }}

-- New queues keep processed inbox rows and dead letters for the periods in
-- settings (inbox_processed_retention, dead_letter_retention; 'infinite'
-- gives NULL = forever); queue_configure overrides them per queue.
ALTER TABLE queue
    ALTER COLUMN processed_retention SET DEFAULT setting_interval('inbox_processed_retention'),
    ALTER COLUMN dead_retention SET DEFAULT setting_interval('dead_letter_retention');
{{ template "functions/maintain_part.sql" . }}
{{ template "functions/history.sql" . }}
{{ template "functions/maintain_recovery.sql" . }}
{{ template "functions/retention_builtin.sql" . }}
{{ template "functions/maintain_retention.sql" . }}
{{ template "functions/maintain.sql" . }}
{{ template "functions/cron.sql" . }}
