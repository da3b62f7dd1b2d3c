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

-- pgsweep:include functions/settings.sql
-- Settings shared by every instance (table setting). setting_set validates a
-- value against the row's kind and range and stores its normalised form; a
-- change is read by the next maintain pass and the runners' next sleep.

-- _setting_parse returns p_value normalised for setting s, or raises 22023
-- naming the setting and its range. Nothing is written here.
CREATE OR REPLACE FUNCTION _setting_parse(s setting, p_value text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_interval interval;
    v_int bigint;
    v_range text;
BEGIN
    IF s.kind = 'interval' THEN
        v_range := format('between %s and %s', _interval_text(s.min_value::interval), _interval_text(s.max_value::interval));
        IF s.infinite_ok THEN
            v_range := v_range || ', or infinite';
            IF lower(trim(p_value)) = 'infinite' THEN
                RETURN 'infinite';
            END IF;
        END IF;
        BEGIN
            v_interval := trim(p_value)::interval;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION '% must be an interval %, got %', s.name, v_range, quote_literal(p_value)
                USING ERRCODE = 'invalid_parameter_value';
        END;
        IF v_interval IS NULL OR v_interval < s.min_value::interval OR v_interval > s.max_value::interval THEN
            RAISE EXCEPTION '% must be %, got %', s.name, v_range,
                CASE WHEN p_value IS NULL THEN 'NULL' ELSE _interval_text(v_interval) END
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN _interval_text(v_interval);
    END IF;

    v_range := format('between %s and %s', s.min_value, s.max_value);
    BEGIN
        v_int := trim(p_value)::bigint;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION '% must be an integer %, got %', s.name, v_range, quote_literal(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END;
    PERFORM _check_int(s.name, v_int, s.min_value::bigint, s.max_value::bigint);
    RETURN v_int::text;
END
$$;

CREATE OR REPLACE FUNCTION _setting_row(p_name text)
RETURNS setting
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting;
BEGIN
    SELECT * INTO v FROM setting WHERE name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'p_name must be one of %, got %',
            (SELECT string_agg(name, ', ' ORDER BY name) FROM setting),
            coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$$;

-- setting_set validates and stores a setting; it returns the stored
-- (normalised) value, e.g. setting_set('runner_interval', '00:00:30') = '30 seconds'.
CREATE OR REPLACE FUNCTION setting_set(p_name text, p_value text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_value text := _setting_parse(_setting_row(p_name), p_value);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v_value, updated_at = v_now WHERE name = p_name;
    RETURN v_value;
END
$$;

-- setting_reset puts a setting back to its default and returns it.
CREATE OR REPLACE FUNCTION setting_reset(p_name text)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
    v_now timestamptz;
BEGIN
    v_now := clock_timestamp();
    UPDATE setting SET value = v.default_value, updated_at = v_now WHERE name = p_name;
    RETURN v.default_value;
END
$$;

CREATE OR REPLACE FUNCTION setting_get(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (_setting_row(p_name)).value;
END
$$;

-- Typed getters for SQL that uses settings. setting_interval returns NULL for
-- 'infinite' (keep forever), the same meaning NULL has in retention_register.
CREATE OR REPLACE FUNCTION setting_interval(p_name text)
RETURNS interval
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'interval' THEN
        RAISE EXCEPTION 'p_name must name an interval setting, % is an integer', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v.value = 'infinite' THEN
        RETURN NULL;
    END IF;
    RETURN v.value::interval;
END
$$;

CREATE OR REPLACE FUNCTION setting_int(p_name text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v setting := _setting_row(p_name);
BEGIN
    IF v.kind <> 'integer' THEN
        RAISE EXCEPTION 'p_name must name an integer setting, % is an interval', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v.value::bigint;
END
$$;

CREATE OR REPLACE VIEW settings AS
SELECT name,
       value,
       default_value,
       kind,
       CASE WHEN infinite_ok THEN format('%s .. %s, or infinite', min_value, max_value)
            ELSE format('%s .. %s', min_value, max_value) END AS range,
       description,
       updated_at
  FROM setting;
-- pgsweep:end functions/settings.sql

-- New queues keep processed inbox rows and dead letters for the periods in
-- settings (inbox_processed_retention, dead_letter_retention; 'infinite'
-- gives NULL = forever); queue_configure overrides them per queue.
ALTER TABLE queue
    ALTER COLUMN processed_retention SET DEFAULT setting_interval('inbox_processed_retention'),
    ALTER COLUMN dead_retention SET DEFAULT setting_interval('dead_letter_retention');
-- pgsweep:include functions/maintain_part.sql
-- The parts of a maintain pass. Each part ('recovery', 'retention') runs under
--   * the lease 'maintain:<part>' (the truth: holder, fencing token, expiry by
--     the database clock; TTL from the setting maintain_lease_ttl, renewed
--     after every step), and
--   * a session advisory lock for the part while it runs, so that even a
--     lease that expired during a long step cannot let a second session on
--     this server overlap the run.
-- A part whose lease or lock is busy is skipped at once (no waiting); a part
-- that is not due (its interval since its last run has not passed, and that
-- run left no backlog) is skipped too. The procedure maintain() strings these
-- functions together with a COMMIT after each, so every state change below is
-- visible to other sessions as soon as it is made.

CREATE OR REPLACE FUNCTION _maintain_parts()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['recovery', 'retention'] $$;

-- The advisory lock key of a part: per schema, so installs side by side in
-- one database do not block each other.
CREATE OR REPLACE FUNCTION _maintain_lock_key(p_part text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT hashtextextended('pgsweep maintain ' || current_schema() || ' ' || p_part, 0) $$;

-- _maintain_lock_held: does this session hold the part's advisory lock?
-- (A bigint key shows in pg_locks as classid = high 32 bits, objid = low 32.)
CREATE OR REPLACE FUNCTION _maintain_lock_held(p_part text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
         WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND objsubid = 1 AND granted
           AND classid = ((_maintain_lock_key(p_part) >> 32) & 4294967295)::oid
           AND objid = (_maintain_lock_key(p_part) & 4294967295)::oid)
$$;

CREATE OR REPLACE FUNCTION _maintain_interval(p_part text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT setting_interval(CASE p_part WHEN 'recovery' THEN 'recovery_interval' ELSE 'retention_check_interval' END)
$$;

-- A part is due when it never finished a run, when its last run stopped with
-- work left, or when its interval has passed since its last run finished.
CREATE OR REPLACE FUNCTION _maintain_due(p_part text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_state;
BEGIN
    SELECT * INTO v FROM maintain_state WHERE part = p_part;
    RETURN v.backlog OR v.last_finished_at IS NULL OR v.last_finished_at + _maintain_interval(p_part) <= p_now;
END
$$;

-- _maintain_note records what a part did in its pass row (parts->part) and,
-- for a failure, appends '<part>: <error>' to the pass's error.
CREATE OR REPLACE FUNCTION _maintain_note(p_pass bigint, p_part text, p_status text, p_error text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_error text;
BEGIN
    IF p_error IS NOT NULL THEN
        v_error := p_part || ': ' || p_error;
    END IF;
    UPDATE maintain_pass
       SET parts = parts || jsonb_build_object(p_part, p_status),
           error = CASE WHEN v_error IS NULL THEN error
                        WHEN error IS NULL THEN v_error
                        ELSE error || '; ' || v_error END
     WHERE id = p_pass;
END
$$;

-- _maintain_part_begin decides whether this session runs p_part now. o_status:
--   'running'   it does: it holds the lease (o_token) and the advisory lock,
--               and o_run is its maintain_run row;
--   'busy'      another session holds the part's advisory lock or lease;
--   'not due'   the part ran recently and left no backlog;
--   'no budget' the pass's deadline has passed.
-- Runs of this part that were left 'running' by a session that died (or whose
-- pass raised) are marked 'abandoned' here: holding the lease and the lock
-- proves nobody runs them any more.
CREATE OR REPLACE FUNCTION _maintain_part_begin(p_pass bigint, p_part text, p_owner text, p_deadline timestamptz,
    p_now timestamptz DEFAULT NULL, OUT o_status text, OUT o_run bigint, OUT o_token bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_key bigint := _maintain_lock_key(p_part);
BEGIN
    IF NOT p_part = ANY (_maintain_parts()) THEN
        RAISE EXCEPTION 'p_part must be one of %, got %', array_to_string(_maintain_parts(), ', '),
            coalesce(quote_literal(p_part), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_now >= p_deadline THEN
        o_status := 'no budget';
    ELSIF NOT _maintain_due(p_part, v_now) THEN
        o_status := 'not due';
    ELSIF NOT pg_try_advisory_lock(v_key) THEN
        o_status := 'busy';
    ELSE
        o_token := lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), p_now);
        IF o_token IS NULL THEN
            PERFORM pg_advisory_unlock(v_key);
            o_status := 'busy';
        ELSE
            -- Re-check under the lease: another session may have finished a
            -- run between our first look and our acquire.
            PERFORM 1 FROM maintain_state WHERE part = p_part FOR UPDATE;
            v_now := coalesce(p_now, clock_timestamp());
            IF NOT _maintain_due(p_part, v_now) THEN
                PERFORM lease_release('maintain:' || p_part, p_owner, p_now);
                PERFORM pg_advisory_unlock(v_key);
                o_status := 'not due';
            ELSE
                UPDATE maintain_run
                   SET status = 'abandoned',
                       error = coalesce(error, 'the pass ended before this part finished: its session died or the part raised an error (see the caller''s log or cron.job_run_details)')
                 WHERE part = p_part AND status = 'running';
                INSERT INTO maintain_run (pass_id, part, owner, token, status, started_at)
                VALUES (p_pass, p_part, p_owner, o_token, 'running', v_now)
                RETURNING id INTO o_run;
                UPDATE maintain_state SET last_started_at = v_now, last_owner = p_owner WHERE part = p_part;
                o_status := 'running';
            END IF;
        END IF;
    END IF;
    PERFORM _maintain_note(p_pass, p_part, o_status);
END
$$;

-- _maintain_part_step records one step of a running part: its counts (numbers
-- are added to the run's totals, objects merged one level deep, so
-- {"deleted": {"policy": 10}} adds up per policy) or its error, and renews the
-- lease. It returns true when the part should take another step: the step
-- said {"more": true}, the deadline has not passed, and the lease is still ours.
CREATE OR REPLACE FUNCTION _maintain_part_step(p_run bigint, p_result jsonb, p_error text, p_deadline timestamptz,
    p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_counts jsonb;
    v_more boolean := coalesce(jsonb_typeof(p_result -> 'more') = 'boolean' AND (p_result ->> 'more')::boolean, false);
    v_now timestamptz;
BEGIN
    SELECT * INTO v_run FROM maintain_run WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    v_counts := _maintain_add_counts(v_run.counts, coalesce(p_result, '{}') - 'more');
    IF p_error IS NOT NULL THEN
        UPDATE maintain_run SET counts = v_counts, steps = steps + 1, more = v_more, status = 'failed', error = p_error
         WHERE id = p_run;
        RETURN false;
    END IF;
    IF lease_acquire('maintain:' || v_run.part, v_run.owner, setting_interval('maintain_lease_ttl'), p_now) IS NULL THEN
        UPDATE maintain_run
           SET counts = v_counts, steps = steps + 1, more = v_more, status = 'lost',
               error = format('lease maintain:%s was taken over by another owner during the run', v_run.part)
         WHERE id = p_run;
        RETURN false;
    END IF;
    UPDATE maintain_run SET counts = v_counts, steps = steps + 1, more = v_more WHERE id = p_run;
    v_now := coalesce(p_now, clock_timestamp());
    RETURN v_more AND v_now < p_deadline;
END
$$;

-- _maintain_renew extends the caller's lease on a part by maintain_lease_ttl
-- and says whether it still holds it. maintain() renews after every step; a
-- part body that runs long inside one call (retention, one CALL per policy)
-- calls it between units of work and stops when it returns false.
CREATE OR REPLACE FUNCTION _maintain_renew(p_part text, p_owner text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl')) IS NOT NULL $$;

CREATE OR REPLACE FUNCTION _maintain_add_counts(p_total jsonb, p_add jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_out jsonb := coalesce(p_total, '{}');
    v_key text;
    v_val jsonb;
BEGIN
    IF p_add IS NULL OR jsonb_typeof(p_add) <> 'object' THEN
        RETURN v_out;
    END IF;
    FOR v_key, v_val IN SELECT key, value FROM jsonb_each(p_add) LOOP
        IF jsonb_typeof(v_val) = 'number' AND jsonb_typeof(v_out -> v_key) = 'number' THEN
            v_out := v_out || jsonb_build_object(v_key, (v_out ->> v_key)::numeric + v_val::text::numeric);
        ELSIF jsonb_typeof(v_val) = 'object' AND jsonb_typeof(v_out -> v_key) = 'object' THEN
            v_out := v_out || jsonb_build_object(v_key, _maintain_add_counts(v_out -> v_key, v_val));
        ELSE
            v_out := v_out || jsonb_build_object(v_key, v_val);
        END IF;
    END LOOP;
    RETURN v_out;
END
$$;

-- _maintain_part_end closes a run: finished_at, final status ('done' unless a
-- step failed or lost the lease), the part's state for the next due check,
-- and the pass row; then it gives the lease and the advisory lock back.
CREATE OR REPLACE FUNCTION _maintain_part_end(p_run bigint, p_now timestamptz DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    UPDATE maintain_run
       SET finished_at = v_now,
           status = CASE WHEN status = 'running' THEN 'done' ELSE status END
     WHERE id = p_run
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE maintain_state
       SET last_finished_at = v_now, last_status = v_run.status, backlog = v_run.more AND v_run.status = 'done'
     WHERE part = v_run.part;
    PERFORM _maintain_note(v_run.pass_id, v_run.part, v_run.status, v_run.error);
    PERFORM lease_release('maintain:' || v_run.part, v_run.owner, p_now);
    PERFORM pg_advisory_unlock(_maintain_lock_key(v_run.part));
    RETURN v_run.status;
END
$$;
-- pgsweep:end functions/maintain_part.sql
-- pgsweep:include functions/history.sql
-- The maintenance history: every pass is recorded when it starts (and
-- committed, so a pass that dies stays visible) and completed when it ends.
-- The history bounds itself: each pass deletes passes older than
-- history_retention and beyond history_max_rows.

-- _maintain_pass_begin validates maintain's arguments (22023, before anything
-- is written), derives an owner when none is given, and records the pass.
CREATE OR REPLACE FUNCTION _maintain_pass_begin(p_owner text, p_budget interval, p_now timestamptz DEFAULT NULL,
    OUT o_pass bigint, OUT o_owner text, OUT o_deadline timestamptz)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_part text;
BEGIN
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    o_owner := coalesce(p_owner, format('maintain:pid%s:%s', pg_backend_pid(), substr(md5(random()::text), 1, 8)));
    PERFORM _check_text('p_owner', o_owner);
    -- A maintain that raised in this session may have left its session-level
    -- part locks behind; no pass of this session is running now (a session
    -- runs one statement at a time), so any such lock is a leftover.
    FOREACH v_part IN ARRAY _maintain_parts() LOOP
        WHILE _maintain_lock_held(v_part) LOOP
            PERFORM pg_advisory_unlock(_maintain_lock_key(v_part));
        END LOOP;
    END LOOP;
    INSERT INTO maintain_pass (owner, started_at, budget) VALUES (o_owner, v_now, p_budget)
    RETURNING id INTO o_pass;
    o_deadline := v_now + p_budget;
END
$$;

-- _maintain_pass_end completes the pass row and trims the history. Trimming
-- is done by one session at a time (others skip it), in a bounded batch, and
-- never touches a pass that may still be running.
CREATE OR REPLACE FUNCTION _maintain_pass_end(p_pass bigint, p_now timestamptz DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    UPDATE maintain_pass SET finished_at = v_now WHERE id = p_pass;
    PERFORM _maintain_history_trim(v_now);
END
$$;

CREATE OR REPLACE FUNCTION _maintain_history_trim(p_now timestamptz, p_limit int DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_before timestamptz := p_now - setting_interval('history_retention');
    -- A pass can last at most an hour (maintain's budget); one unfinished for
    -- two is dead and may go, an unfinished younger one may still be running.
    v_dead timestamptz := p_now - interval '2 hours';
    v_cut bigint;
    v_deleted bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(_maintain_lock_key('history')) THEN
        RETURN 0;
    END IF;
    SELECT id INTO v_cut FROM maintain_pass ORDER BY id DESC OFFSET setting_int('history_max_rows') LIMIT 1;
    DELETE FROM maintain_pass
     WHERE id IN (SELECT id FROM maintain_pass
                   WHERE (id <= v_cut OR started_at < v_before)
                     AND (finished_at IS NOT NULL OR started_at < v_dead)
                   ORDER BY id
                   LIMIT p_limit);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- _maintain_fail_owner records an error that maintain() could not record
-- itself (a part that raised through a COMMIT, see maintain.sql) against the
-- owner's unfinished passes and runs, and releases the owner's leases. The Go
-- runner calls it after a pass that failed with an SQL error; call it only
-- when the failed session is known to be over.
CREATE OR REPLACE FUNCTION _maintain_fail_owner(p_owner text, p_error text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_n bigint;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    UPDATE maintain_run SET status = 'failed', finished_at = v_now, error = coalesce(error, p_error)
     WHERE owner = p_owner AND status = 'running';
    UPDATE maintain_pass SET finished_at = v_now, error = coalesce(error || '; ', '') || p_error
     WHERE owner = p_owner AND finished_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM lease_release_owner(p_owner);
    RETURN v_n;
END
$$;

CREATE OR REPLACE VIEW maintenance_passes AS
SELECT p.id,
       p.owner,
       p.started_at,
       p.finished_at,
       p.finished_at - p.started_at AS duration,
       p.parts ->> 'recovery' AS recovery,
       p.parts ->> 'retention' AS retention,
       coalesce((SELECT jsonb_object_agg(r.part, r.counts) FROM maintain_run r WHERE r.pass_id = p.id), '{}') AS counts,
       p.error
  FROM maintain_pass p;

CREATE OR REPLACE VIEW maintenance_runs AS
SELECT id, pass_id, part, owner, token, status, started_at, finished_at,
       finished_at - started_at AS duration, steps, counts, error
  FROM maintain_run;
-- pgsweep:end functions/history.sql
-- pgsweep:include functions/maintain_recovery.sql
-- The recovery part of maintain(): one STEP of recovery of expired claims,
-- over every queue, through queue_recover (functions/recover.sql): rows whose
-- lease expired become claimable again and their old owner is fenced out
-- (each counts as a lost lease); rows that used their last attempt move to
-- the dead letters. queue_recover keeps each queue's keyset traversal (id
-- order up to a boundary captured when the traversal starts, wrapping after
-- an empty pass), so continuous new traffic cannot starve older rows.
--
-- Contract with maintain(): one call = one bounded step, at most
-- setting_int('recovery_batch_size') rows per queue; no COMMIT (maintain
-- commits after each step and renews the lease); returns
-- {"recovered", "lost_leases", "dead_lettered", "more"} where "more" says a
-- queue filled its batch, so another step is worth it while time remains.
CREATE OR REPLACE FUNCTION _maintain_recovery(p_owner text, p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_batch int := setting_int('recovery_batch_size');
    v_queue text;
    v_r record;
    v_recovered int := 0;
    v_dead int := 0;
    v_more boolean := false;
BEGIN
    FOR v_queue IN SELECT q.name FROM queue q ORDER BY q.name LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true; -- queues left unvisited this step
            EXIT;
        END IF;
        SELECT * INTO v_r FROM queue_recover(v_queue, v_batch);
        v_recovered := v_recovered + v_r.recovered;
        v_dead := v_dead + v_r.dead_lettered;
        IF v_r.recovered + v_r.dead_lettered >= v_batch THEN
            v_more := true;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('recovered', v_recovered, 'lost_leases', v_recovered,
                              'dead_lettered', v_dead, 'more', v_more);
END
$$;
-- pgsweep:end functions/maintain_recovery.sql
-- pgsweep:include functions/retention_builtin.sql
-- Built-in retention of the rows pgsweep itself keeps: per queue, processed
-- inbox records (message_processed, by processed_at) after
-- queue.processed_retention, and dead letters (message_dead, by dead_at)
-- after queue.dead_retention. NULL periods keep rows forever.
--
-- Each is an ordinary retention policy restricted to one queue by the policy
-- filter (queue = '<queue>'), named 'pgsweep.processed:<queue>' and
-- 'pgsweep.dead:<queue>', so the retention engine's guarantees, leases and
-- history apply unchanged and a DBA sees them in retention_policies.
-- Undelivered messages (table message) are never under any policy: an outbox
-- row leaves only by being completed.
--
-- maintain() calls retention_builtin_sync() at the start of every retention
-- part, so a queue created or reconfigured by SQL is covered on the next
-- pass; a DBA driving retention_run by hand calls it once after such changes.
CREATE OR REPLACE FUNCTION retention_builtin_sync()
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- retention_register's "no index leads with the time column" NOTICE does not
-- apply: the filter (queue) and time column lead the tables' retention indexes.
SET client_min_messages = warning
AS $$
DECLARE
    v_changed int := 0;
    v_want record;
    v_pol retention_policy;
    v_name text;
BEGIN
    FOR v_want IN
        SELECT 'pgsweep.processed:' || q.name AS name, 'message_processed'::regclass AS tbl,
               'processed_at' AS col, q.processed_retention AS period, q.name AS queue
          FROM queue q WHERE q.kind = 'inbox'
        UNION ALL
        SELECT 'pgsweep.dead:' || q.name, 'message_dead'::regclass, 'dead_at', q.dead_retention, q.name
          FROM queue q
         ORDER BY 1
    LOOP
        SELECT * INTO v_pol FROM retention_policy WHERE name = v_want.name;
        IF FOUND AND v_pol.older_than IS NOT DISTINCT FROM v_want.period
           AND v_pol.filter_column = 'queue' AND v_pol.filter_values = ARRAY[v_want.queue] THEN
            CONTINUE;
        END IF;
        -- register and filter in one transaction: no pass ever sees the
        -- policy without its queue filter.
        PERFORM retention_register(v_want.name, v_want.tbl, v_want.col, v_want.period);
        PERFORM retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;

    FOR v_name IN
        SELECT p.name FROM retention_policy p
         WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
            OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (
                    SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name))
    LOOP
        PERFORM retention_unregister(v_name);
        v_changed := v_changed + 1;
    END LOOP;
    RETURN v_changed;
END
$$;
-- pgsweep:end functions/retention_builtin.sql
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
-- name below is qualified with the install schema.
--
-- Returns in p_result {"deleted": {"<policy>": rows}, "errors": {"<policy>":
-- "message"}, "more": bool}; "more" means a policy stopped on the budget with
-- rows left, or due policies were not reached, so the part is due again at once.
CREATE OR REPLACE PROCEDURE _maintain_retention(p_owner text, p_deadline timestamptz, INOUT p_result jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due text[];
    v_name text;
    v_pass bigint;
    v_step_more boolean;
    v_error text;
    v_deleted jsonb := '{}';
    v_errors jsonb := '{}';
    v_more boolean := false;
    v_outcome text;
    v_rows bigint;
    v_renewed timestamptz := clock_timestamp();
    v_duty int := {{ $s }}.setting_int('retention_duty_cycle');
    v_batch_start timestamptz;
BEGIN
    BEGIN
        PERFORM {{ $s }}.retention_builtin_sync();
    EXCEPTION WHEN OTHERS THEN
        v_errors := v_errors || jsonb_build_object('builtin_sync', format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE));
    END;
    COMMIT;

    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true;
            EXIT;
        END IF;
        IF NOT {{ $s }}._maintain_renew('retention', p_owner) THEN
            v_more := true; -- lost the part's lease: another owner goes on
            EXIT;
        END IF;
        COMMIT;

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}._retention_begin(v_name, p_owner, greatest(p_deadline - clock_timestamp(), interval '0'), NULL);
        EXCEPTION WHEN OTHERS THEN
            v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_unlock(v_name);
            COMMIT;
            v_errors := v_errors || jsonb_build_object(v_name, v_error);
            CONTINUE;
        END IF;
        COMMIT;
        CONTINUE WHEN v_pass IS NULL; -- busy elsewhere, or keeps rows forever

        LOOP
            v_batch_start := clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}._retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic: pause in proportion to
            -- the batch just done (retention_duty_cycle), never past the deadline.
            IF v_duty < 100 THEN
                PERFORM pg_catalog.pg_sleep(least(
                    extract(epoch FROM clock_timestamp() - v_batch_start) * (100 - v_duty) / v_duty,
                    greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
            END IF;
            -- keep the part's lease alive through a long policy, at a
            -- third of its TTL so a renewal is never late
            IF clock_timestamp() - v_renewed > {{ $s }}.setting_interval('maintain_lease_ttl') / 3 THEN
                IF NOT {{ $s }}._maintain_renew('retention', p_owner) THEN
                    v_error := 'lost the maintain:retention lease during the pass';
                    EXIT;
                END IF;
                v_renewed := clock_timestamp();
                COMMIT;
            END IF;
        END LOOP;

        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_finish(v_pass, 'error', v_error);
            v_errors := v_errors || jsonb_build_object(v_name, v_error);
        ELSE
            PERFORM {{ $s }}._retention_finish(v_pass, NULL, NULL);
        END IF;
        COMMIT;
        PERFORM {{ $s }}._retention_unlock(v_name);

        SELECT p.outcome, p.rows_deleted INTO v_outcome, v_rows FROM {{ $s }}.retention_passes p WHERE p.id = v_pass;
        v_deleted := v_deleted || jsonb_build_object(v_name, coalesce(v_rows, 0));
        IF v_outcome = 'budget' THEN
            v_more := true;
        END IF;
    END LOOP;

    p_result := jsonb_build_object('deleted', v_deleted, 'more', v_more);
    IF v_errors <> '{}' THEN
        p_result := p_result || jsonb_build_object('errors', v_errors);
    END IF;
END
$$;
-- pgsweep:end functions/maintain_retention.sql
-- pgsweep:include functions/maintain.sql
-- CALL maintain(p_owner, p_budget): one maintenance pass. pg_cron and any
-- number of `pgsweep run` replicas call it side by side; each part runs in at
-- most one session at a time (see maintain_part.sql) and every pass is
-- recorded (history.sql).
--
-- It is a PROCEDURE so that it can COMMIT after every step: the lease, the
-- history rows and each batch of work become visible (and durable) at once,
-- and no transaction stays open for the whole pass. Call it outside a
-- transaction block (psql autocommit, pg_cron, the Go runner).
--
-- PostgreSQL forbids COMMIT in a procedure that has a SET clause, so unlike
-- every function this one cannot pin search_path: instead every name in its
-- body is qualified with the install schema (a template value, validated as a
-- plain lower-case identifier), so the caller's search_path cannot redirect it.
CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner text;
    v_deadline timestamptz;
    v_recovery_deadline timestamptz;
    v_part record;
    v_result jsonb;
    v_error text;
    v_more boolean;
BEGIN
    SELECT b.o_pass, b.o_owner, b.o_deadline INTO v_pass, v_owner, v_deadline
      FROM {{ .schema | default "pgsweep" }}._maintain_pass_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_recovery_deadline := v_deadline - p_budget / 2;
    SELECT * INTO v_part FROM {{ .schema | default "pgsweep" }}._maintain_part_begin(v_pass, 'recovery', v_owner, v_recovery_deadline);
    COMMIT;
    IF v_part.o_status = 'running' THEN
        LOOP
            v_result := NULL;
            v_error := NULL;
            BEGIN
                v_result := {{ .schema | default "pgsweep" }}._maintain_recovery(v_owner, v_recovery_deadline);
            EXCEPTION WHEN OTHERS THEN
                v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            END;
            v_more := {{ .schema | default "pgsweep" }}._maintain_part_step(v_part.o_run, v_result, v_error, v_recovery_deadline);
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_end(v_part.o_run);
        COMMIT;
    END IF;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    SELECT * INTO v_part FROM {{ .schema | default "pgsweep" }}._maintain_part_begin(v_pass, 'retention', v_owner, v_deadline);
    COMMIT;
    IF v_part.o_status = 'running' THEN
        v_result := '{}';
        CALL {{ .schema | default "pgsweep" }}._maintain_retention(v_owner, v_deadline, v_result);
        v_error := NULL;
        IF jsonb_typeof(v_result -> 'errors') = 'object' AND v_result -> 'errors' <> '{}' THEN
            SELECT string_agg(format('policy %s: %s', key, value #>> '{}'), '; ' ORDER BY key) INTO v_error
              FROM jsonb_each(v_result -> 'errors');
        END IF;
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_step(v_part.o_run, v_result - 'errors', v_error, v_deadline);
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_end(v_part.o_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}._maintain_pass_end(v_pass);
    COMMIT;
END
$$;
-- pgsweep:end functions/maintain.sql
-- pgsweep:include functions/cron.sql
-- Scheduling maintain() with pg_cron, for databases that have it.
--
-- pg_cron lives in the one database named by cron.database_name. pgsweep does
-- not depend on it: these functions reach cron.* through EXECUTE only, so they
-- install everywhere, and without pg_cron they explain what to do instead.
-- The job name is unique per install schema, so scheduling again updates the
-- job (cron.schedule upserts by job name since pg_cron 1.4) and installs in
-- other schemas of the same database get their own job.

-- pg_cron job names are of type name (at most 63 bytes): a long schema name
-- is cut and made unique again with a hash of the full name.
CREATE OR REPLACE FUNCTION cron_job_name()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN octet_length(n) <= 63 THEN n ELSE left(n, 54) || ':' || left(md5(n), 8) END
      FROM (SELECT 'pgsweep-maintain:' || current_schema() AS n) x
$$;

CREATE OR REPLACE FUNCTION _cron_available()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') $$;

CREATE OR REPLACE FUNCTION _cron_require()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT _cron_available() THEN
        RAISE EXCEPTION 'pg_cron is not installed in database %: install it there (CREATE EXTENSION pg_cron, in the database named by cron.database_name, now %) or run `pgsweep run` instead',
            quote_ident(current_database()),
            coalesce(quote_literal(current_setting('cron.database_name', true)), 'unset: pg_cron is not in shared_preload_libraries')
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = '`pgsweep run --database-url URL` calls maintain() on an interval from outside the database; run it next to your applications, as many replicas as you like.';
    END IF;
END
$$;

-- cron_schedule schedules CALL <schema>.maintain('pg_cron', p_budget) on
-- p_schedule (pg_cron syntax, e.g. '* * * * *') and returns the job id.
-- Scheduling again replaces the schedule and budget of the same job.
-- p_budget should stay below the schedule's period: pg_cron starts no second
-- run of a job while one is still running.
CREATE OR REPLACE FUNCTION cron_schedule(p_schedule text DEFAULT '* * * * *', p_budget interval DEFAULT '50 seconds')
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
    v_command text;
BEGIN
    PERFORM _check_text('p_schedule', p_schedule, 100);
    PERFORM _check_interval('p_budget', p_budget, interval '1 second', interval '1 hour');
    PERFORM _cron_require();
    v_command := format('CALL %I.maintain(%L, %L)', current_schema(), 'pg_cron', _interval_text(p_budget));
    BEGIN
        EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO v_id USING cron_job_name(), p_schedule, v_command;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'p_schedule must be a pg_cron schedule such as ''* * * * *'', got %', quote_literal(p_schedule)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
    END;
    RETURN v_id;
END
$$;

-- cron_unschedule removes this schema's maintain job; false when there was
-- none (also when pg_cron is not installed: then nothing can be scheduled).
CREATE OR REPLACE FUNCTION cron_unschedule()
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT _cron_available() THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT jobid FROM cron.job WHERE jobname = $1 AND username = current_user' INTO v_id USING cron_job_name();
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT cron.unschedule($1)' USING v_id;
    RETURN true;
END
$$;

-- cron_job shows this schema's maintain job, if any (no rows without pg_cron).
CREATE OR REPLACE FUNCTION cron_job(OUT jobid bigint, OUT schedule text, OUT command text, OUT active boolean)
RETURNS SETOF record
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF _cron_available() THEN
        RETURN QUERY EXECUTE 'SELECT jobid, schedule, command, active FROM cron.job WHERE jobname = $1 AND username = current_user'
            USING cron_job_name();
    END IF;
END
$$;
-- pgsweep:end functions/cron.sql
