-- pgsweep 0.16: maintenance under faults.
--
-- * A retention pass that left work behind (budget, lost lease, units
--   deferred, or its session died) makes its policy due at once
--   (retention_due), and a failed or abandoned maintain run leaves its part
--   due at once (backlog), instead of waiting for the policy's interval.
-- * Abandoned runs get an end (finished_at at the takeover) and their pass
--   is closed, so the documented no-overlap query holds.
-- * Background retention paces itself adaptively by default
--   (retention_duty_cycle 0); a fixed duty cycle stays available.
-- * A cleaner never waits on another transaction's lock longer than
--   retention_lock_timeout: the unit is deferred to a later pass (outcome
--   'deferred'), the budget holds, and no row is deleted that it could not
--   lock while eligible.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('retention_lock_timeout', '1 second', 'interval', '1 second', '10 milliseconds', '1 minute', false,
     'longest a cleaner waits on a lock another transaction holds (a row of a unit): past it the unit is left to a later pass')
ON CONFLICT (name) DO NOTHING;
-- retention_duty_cycle 0 (the new default): adaptive pacing (maintain_retention.sql).
UPDATE setting
   SET value = CASE WHEN value = default_value THEN '0' ELSE value END, default_value = '0', min_value = '0',
       description = 'background retention pacing: 0 adapts the share of time maintain() spends deleting to what the database shows (slower batches, busy sessions, lock waits); 1..100 is a fixed percent: after a batch that took t it pauses t*(100-d)/d (100: no pause; CALL retention_run never pauses)'
 WHERE name = 'retention_duty_cycle';
ALTER TABLE retention_unit ADD COLUMN deferred_pass bigint;
-- the session of a pass: a takeover closes the passes of dead sessions
ALTER TABLE maintain_pass ADD COLUMN pid int, ADD COLUMN backend_start timestamptz;
ALTER TABLE retention_pass ADD COLUMN deferred int NOT NULL DEFAULT 0;
ALTER TABLE retention_pass DROP CONSTRAINT retention_pass_outcome_check;
ALTER TABLE retention_pass ADD CONSTRAINT retention_pass_outcome_check
    CHECK (outcome IN ('running', 'drained', 'budget', 'lease_lost', 'deferred', 'error'));


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
    PERFORM _check_now('p_now', p_now);
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
    PERFORM _check_now('p_now', p_now);
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
                -- An abandoned run ended before now: give it that end (the
                -- no-overlap query needs one) and treat its part as a
                -- backlog (it stopped with its work unfinished; we run it
                -- now). Its pass is not closed here: a pass whose part
                -- raised goes on with its next part.
                UPDATE maintain_run
                   SET status = 'abandoned', finished_at = v_now,
                       error = coalesce(error, 'the pass ended before this part finished: its session died or the part raised an error (see the caller''s log or cron.job_run_details)')
                 WHERE part = p_part AND status = 'running';
                -- A pass whose session is gone (kill -9, a crash) ends too:
                -- nobody else would ever close it.
                UPDATE maintain_pass mp
                   SET finished_at = v_now,
                       error = coalesce(mp.error || '; ', '') || 'its session ended before the pass did (taken over)'
                 WHERE mp.finished_at IS NULL AND mp.pid IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                                    WHERE a.pid = mp.pid AND a.backend_start IS NOT DISTINCT FROM mp.backend_start);
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
    PERFORM _check_now('p_now', p_now);
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
    PERFORM _check_now('p_now', p_now);
    UPDATE maintain_run
       SET finished_at = v_now,
           status = CASE WHEN status = 'running' THEN 'done' ELSE status END
     WHERE id = p_run
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE maintain_state
       SET last_finished_at = v_now, last_status = v_run.status, backlog = v_run.more
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
    PERFORM _check_now('p_now', p_now);
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
    INSERT INTO maintain_pass (owner, started_at, budget, pid, backend_start)
    SELECT o_owner, v_now, p_budget, pg_catalog.pg_backend_pid(), a.backend_start
      FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid()
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
    PERFORM _check_now('p_now', p_now);
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
    PERFORM _check_now('p_now', p_now);
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
    -- Its runs stopped with their work unfinished: their parts are due
    -- again at once (backlog), whoever runs next.
    WITH failed AS (
        UPDATE maintain_run SET status = 'failed', finished_at = v_now, error = coalesce(error, p_error)
         WHERE owner = p_owner AND status = 'running'
        RETURNING part)
    UPDATE maintain_state s SET backlog = true FROM failed WHERE s.part = failed.part;
    UPDATE maintain_run SET finished_at = v_now
     WHERE owner = p_owner AND status = 'abandoned' AND finished_at IS NULL;
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

-- pgsweep:include functions/retention_views.sql
-- Retention: what a DBA looks at, and what maintain() asks.

-- retention_passes: the pass history. A pass still marked running whose
-- session is gone (killed, crashed) shows as abandoned.
CREATE OR REPLACE VIEW retention_passes AS
SELECT p.id,
       p.policy,
       p.owner,
       p.mode,
       p.strategy,
       CASE WHEN p.outcome = 'running' AND NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = p.pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
            THEN 'abandoned' ELSE p.outcome END AS outcome,
       p.started_at,
       p.finished_at,
       p.last_batch_at,
       coalesce(p.finished_at, p.last_batch_at, p.started_at) - p.started_at AS elapsed,
       p.rows_deleted,
       p.batches,
       p.units,
       p.lease_token,
       p.planned_sweep,
       p.error,
       p.deferred
  FROM retention_pass p;

-- retention_policies: every policy with its last pass.
CREATE OR REPLACE VIEW retention_policies AS
SELECT r.name,
       format('%I.%I', r.table_schema, r.table_name) AS table_name,
       r.time_column,
       r.time_type,
       r.older_than,
       r.status_column,
       r.statuses,
       r.filter_column,
       r.filter_values,
       r.batch_size,
       r.mode,
       r.run_interval,
       coalesce(r.time_zone, current_setting('TimeZone')) AS time_zone,
       r.lease_ttl,
       r.strategy,
       (SELECT count(*) FROM retention_unit u WHERE u.policy = r.name) AS open_units,
       lp.started_at AS last_started_at,
       lp.finished_at AS last_finished_at,
       lp.outcome AS last_outcome,
       lp.owner AS last_owner,
       lp.strategy AS last_strategy,
       lp.rows_deleted AS last_rows_deleted,
       lp.batches AS last_batches,
       lp.elapsed AS last_elapsed,
       lp.error AS last_error
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the policies that are due, oldest first: what
-- maintain() runs. A policy is due when its interval has passed since its
-- last pass began (or it never ran), and at once when its last pass left
-- work behind: it stopped on its budget ('budget'), lost its lease
-- ('lease_lost'), skipped units a transaction held locked ('deferred'), or
-- its session died mid-pass (still 'running' with the session gone:
-- abandoned, e.g. a runner stopped by SIGTERM or kill -9). A pass that ended
-- in an error waits for the interval (a persistent error would otherwise
-- repeat every pass). Policies that keep rows forever are never due.
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz DEFAULT NULL)
RETURNS SETOF text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
BEGIN
    RETURN QUERY
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT p.started_at AS at, p.outcome, p.pid, p.backend_start
                           FROM retention_pass p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= v_now
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred')
            OR (lp.outcome = 'running' AND NOT EXISTS (
                    SELECT 1 FROM pg_catalog.pg_stat_activity a
                     WHERE a.pid = lp.pid AND (a.backend_start IS NULL OR a.backend_start = lp.backend_start))))
     ORDER BY lp.at NULLS FIRST, r.name;
END
$$;
-- pgsweep:end functions/retention_views.sql

-- pgsweep:include functions/retention_step.sql
-- Retention: the steps of a pass. retention_run (a procedure, so that it can
-- commit) calls them and commits after each; all logic lives here, in
-- functions that pin search_path (a procedure that commits cannot).
--
-- Exclusive mode takes two locks for the whole pass, in this order:
--   1. pg_try_advisory_lock on the policy (session level, held across the
--      pass's commits): while a cleaner is connected and in its pass, no other
--      session can start one, even if the lease expired because the cleaner
--      stalled. Failing it returns at once: no waiting, no retry loop.
--   2. the lease retention:<name> (lease.sql), the truth that survives the
--      session: a crashed cleaner's lease blocks others until its TTL ends, and
--      every batch first checks that this pass still holds it (renewing it
--      every third of the TTL), so a pass that lost it stops before deleting.
-- The advisory lock is released only after the commit that released the
-- lease and recorded the end of the pass, so pass records never overlap.

CREATE OR REPLACE FUNCTION _retention_lock_key(p_name text)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT pg_catalog.hashtextextended(current_schema() || ' retention:' || p_name, 0) $$;

-- _retention_unlock releases every hold this session has on the policy's
-- advisory lock: after a pass, and before the next one, in case an aborted
-- call (a cancel between steps) left one behind on a pooled connection.
CREATE OR REPLACE FUNCTION _retention_unlock(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint := _retention_lock_key(p_name);
    v_held int;
BEGIN
    SELECT count(*) INTO v_held
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
       AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid;
    -- pg_locks shows a lock once however often it was taken; unlock until it is gone.
    WHILE v_held > 0 LOOP
        EXIT WHEN NOT pg_catalog.pg_advisory_unlock(v_key);
        SELECT count(*) INTO v_held
          FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1 AND l.granted
           AND l.classid = ((v_key >> 32) & 4294967295)::oid AND l.objid = (v_key & 4294967295)::oid;
    END LOOP;
END
$$;

-- _retention_begin starts a pass and returns its id, or NULL when there is
-- nothing to do: the policy keeps rows forever, or (exclusive) another
-- cleaner holds it.
CREATE OR REPLACE FUNCTION _retention_begin(p_name text, p_owner text, p_budget interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pol retention_policy;
    v_owner text;
    v_token bigint;
    v_id bigint;
    v_start timestamptz;
    v_at timestamptz;
BEGIN
    PERFORM _check_text('p_name', p_name);
    IF p_owner IS NOT NULL THEN
        PERFORM _check_text('p_owner', p_owner);
    END IF;
    PERFORM _check_interval('p_budget', p_budget, interval '0', interval '1 day');
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM _retention_invalid('p_name must name a registered retention policy, got %s', quote_literal(p_name));
    END IF;
    IF v_pol.older_than IS NULL THEN
        RETURN NULL; -- keep forever
    END IF;
    v_owner := coalesce(p_owner,
        format('pid%s-%s', pg_catalog.pg_backend_pid(), substr(md5(random()::text || clock_timestamp()::text), 1, 8)));

    IF v_pol.mode = 'exclusive' THEN
        PERFORM _retention_unlock(p_name);
        IF NOT pg_catalog.pg_try_advisory_lock(_retention_lock_key(p_name)) THEN
            RAISE NOTICE 'retention policy %: another cleaner is running it; nothing done', p_name;
            RETURN NULL;
        END IF;
        v_token := lease_acquire('retention:' || p_name, v_owner, v_pol.lease_ttl);
        IF v_token IS NULL THEN
            PERFORM pg_catalog.pg_advisory_unlock(_retention_lock_key(p_name));
            RAISE NOTICE 'retention policy %: lease retention:% is held by another cleaner; nothing done', p_name, p_name;
            RETURN NULL;
        END IF;
    END IF;

    SELECT a.backend_start INTO v_start FROM pg_catalog.pg_stat_activity a WHERE a.pid = pg_catalog.pg_backend_pid();
    v_at := clock_timestamp(); -- after both locks: the pass may delete from now on
    INSERT INTO retention_pass (policy, owner, mode, lease_token, pid, backend_start, started_at, deadline,
                                now_override, renewed_at)
    VALUES (p_name, v_owner, v_pol.mode, v_token, pg_catalog.pg_backend_pid(), v_start, v_at,
            v_at + p_budget, p_now, v_at)
    RETURNING id INTO v_id;
    RETURN v_id;
END
$$;

-- _retention_step_claim does the bookkeeping of one step (as <schema>_owner)
-- and tells _retention_step what to run as the policy's owner: o_action
-- 'plan' (take the planning sample, then _retention_plan_from_sample),
-- 'delete' (the unit o_unit is locked for this transaction), or NULL with
-- o_more false when the pass is over (outcome recorded) and true to be
-- called again.
CREATE OR REPLACE FUNCTION _retention_step_claim(p_pass bigint, OUT o_action text, OUT o_more boolean,
    OUT o_pol retention_policy, OUT o_strategy text, OUT o_unit retention_unit, OUT o_cutoff timestamptz,
    OUT o_now timestamptz, OUT o_pct double precision)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_unit retention_unit;
    v_sweep retention_sweep;
    v_now timestamptz := clock_timestamp();
BEGIN
    o_more := false;
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    IF NOT FOUND THEN
        RETURN; -- the policy was unregistered during the pass
    END IF;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;

    -- The budget bounds the pass; a pass always gets its first batch.
    IF v_now >= v_pass.deadline AND v_pass.batches > 0 THEN
        UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
        RETURN;
    END IF;

    IF v_pass.mode = 'exclusive' THEN
        IF v_now >= v_pass.renewed_at + v_pol.lease_ttl / 3 THEN
            IF NOT lease_renew('retention:' || v_pol.name, v_pass.owner, v_pol.lease_ttl) THEN
                UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
                RETURN;
            END IF;
            v_now := clock_timestamp();
            UPDATE retention_pass SET renewed_at = v_now WHERE id = p_pass;
        ELSIF NOT EXISTS (SELECT 1 FROM lease l WHERE l.name = 'retention:' || v_pol.name AND l.owner = v_pass.owner
                             AND l.token = v_pass.lease_token AND l.expires_at > v_now) THEN
            UPDATE retention_pass SET outcome = 'lease_lost' WHERE id = p_pass;
            RETURN;
        END IF;
    END IF;

    -- Claim a unit. SKIP LOCKED: a unit another cleaner is on is skipped,
    -- never waited for; a unit this pass deferred (a row of it was locked by
    -- another transaction past retention_lock_timeout) waits for a later pass.
    SELECT * INTO v_unit FROM retention_unit u
     WHERE u.policy = v_pol.name AND u.deferred_pass IS DISTINCT FROM p_pass
     ORDER BY u.sweep_id, u.unit_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- A pass works one sweep: it joins the open one or plans one. Units
        -- left but locked belong to cleaners that will finish them.
        IF v_pass.deferred > 0 THEN
            UPDATE retention_pass SET outcome = 'deferred' WHERE id = p_pass;
            RETURN;
        END IF;
        IF v_pass.batches > 0 OR v_pass.planned_sweep IS NOT NULL
           OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass;
            RETURN;
        END IF;
        -- Plan under the policy row's lock, taken without waiting; a cleaner
        -- that finds it taken polls briefly for the units being planned.
        PERFORM 1 FROM retention_policy WHERE name = v_pol.name FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF v_now >= v_pass.deadline THEN -- the row stayed locked (a register left open?)
                UPDATE retention_pass SET outcome = 'budget' WHERE id = p_pass;
                RETURN;
            END IF;
            PERFORM pg_catalog.pg_sleep(0.005);
            o_more := true;
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = v_pol.name) THEN
            o_more := true; -- planned and committed by another cleaner just now
            RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM retention_sweep s WHERE s.policy = v_pol.name AND s.planned_at >= v_pass.started_at) THEN
            UPDATE retention_pass SET outcome = 'drained' WHERE id = p_pass; -- swept since this pass began
            RETURN;
        END IF;
        o_action := 'plan';
        o_more := true;
        o_pol := v_pol;
        o_now := coalesce(v_pass.now_override, clock_timestamp());
        o_cutoff := _retention_cutoff(v_pol, o_now);
        o_pct := _retention_sample_pct(v_pol);
        RETURN;
    END IF;

    SELECT * INTO v_sweep FROM retention_sweep WHERE id = v_unit.sweep_id;
    o_action := 'delete';
    o_more := true;
    o_pol := v_pol;
    o_strategy := v_sweep.strategy;
    o_unit := v_unit;
    o_cutoff := v_sweep.cutoff;
END
$$;

-- _retention_step_done records a unit's batch: the unit is done.
CREATE OR REPLACE FUNCTION _retention_step_done(p_pass bigint, p_unit retention_unit, p_strategy text, p_deleted bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    DELETE FROM retention_unit
     WHERE policy = p_unit.policy AND sweep_id = p_unit.sweep_id AND unit_no = p_unit.unit_no;
    v_now := clock_timestamp(); -- after the DELETE: the pass deleted until now
    UPDATE retention_pass
       SET rows_deleted = rows_deleted + p_deleted, batches = batches + 1, units = units + 1,
           last_batch_at = v_now, strategy = p_strategy
     WHERE id = p_pass;
END
$$;

-- _retention_step_deferred leaves a unit to a later pass: one of its rows
-- was locked by another transaction for longer than retention_lock_timeout.
-- The cleaner never waits longer than that on anyone (an idle-in-transaction
-- session cannot stall a policy) and never deletes a row it could not lock,
-- so it cannot delete a row that is no longer eligible.
CREATE OR REPLACE FUNCTION _retention_step_deferred(p_pass bigint, p_unit retention_unit)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE retention_unit SET deferred_pass = p_pass
     WHERE policy = p_unit.policy AND sweep_id = p_unit.sweep_id AND unit_no = p_unit.unit_no;
    UPDATE retention_pass SET deferred = deferred + 1 WHERE id = p_pass;
END
$$;

-- _retention_plan_from_sample plans the pass's sweep from the sample.
CREATE OR REPLACE FUNCTION _retention_plan_from_sample(p_pass bigint, p_now timestamptz, p_pct double precision,
    p_fraction double precision, p_sampled bigint, p_times timestamptz[])
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_pol retention_policy;
    v_sweep_id bigint;
BEGIN
    SELECT * INTO v_pass FROM retention_pass WHERE id = p_pass;
    SELECT * INTO v_pol FROM retention_policy WHERE name = v_pass.policy;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_sweep_id := _retention_plan(v_pol, p_now, v_pass.owner, p_pct, p_fraction, p_sampled, p_times);
    UPDATE retention_pass SET planned_sweep = v_sweep_id WHERE id = p_pass;
END
$$;

-- _retention_step does one step of a pass: at most one batch. It returns
-- false when the pass is over (outcome recorded), true to be called again.
-- It runs as its caller: the bookkeeping runs as <schema>_owner
-- (_retention_step_claim, _retention_step_done), the statements on the
-- policy's table as the policy's owner (_retention_as_owner).
CREATE OR REPLACE FUNCTION _retention_step(p_pass bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
    v_run record;
BEGIN
    v := _retention_step_claim(p_pass);
    IF v.o_action = 'plan' THEN
        IF v.o_pct IS NOT NULL THEN
            v_run := _retention_as_owner(v.o_pol, 'sample', NULL, v.o_pct, NULL::double precision, v.o_cutoff);
        END IF;
        PERFORM _retention_plan_from_sample(p_pass, v.o_now, v.o_pct, v_run.fraction, v_run.sampled, v_run.times);
    ELSIF v.o_action = 'delete' THEN
        BEGIN
            IF v.o_strategy = 'tid_range' THEN
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy,
                    pg_catalog.format('(%s,0)', (v.o_unit).block_lo)::tid,
                    pg_catalog.format('(%s,0)', coalesce((v.o_unit).block_hi, 4294967295))::tid, v.o_cutoff);
            ELSE
                v_run := _retention_as_owner(v.o_pol, 'delete', v.o_strategy, (v.o_unit).time_lo, (v.o_unit).time_hi, v.o_cutoff);
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            -- A row of the unit stayed locked past retention_lock_timeout:
            -- the batch rolled back whole; a later pass takes the unit.
            PERFORM _retention_step_deferred(p_pass, v.o_unit);
            RETURN true;
        END;
        PERFORM _retention_step_done(p_pass, v.o_unit, v.o_strategy, v_run.deleted);
    END IF;
    RETURN v.o_more;
END
$$;

-- _retention_finish records the end of a pass and releases its lease. The
-- caller commits, then releases the advisory lock (_retention_unlock).
CREATE OR REPLACE FUNCTION _retention_finish(p_pass bigint, p_outcome text, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass retention_pass;
    v_at timestamptz := clock_timestamp();
BEGIN
    UPDATE retention_pass
       SET finished_at = v_at,
           outcome = coalesce(p_outcome, CASE WHEN outcome = 'running' THEN 'drained' ELSE outcome END),
           error = p_error
     WHERE id = p_pass
    RETURNING * INTO v_pass;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_pass.mode = 'exclusive' THEN
        PERFORM lease_release('retention:' || v_pass.policy, v_pass.owner);
    END IF;
    -- A bounded history: the last 1000 passes of each policy.
    DELETE FROM retention_pass p
     WHERE p.policy = v_pass.policy
       AND p.id <= (SELECT p2.id FROM retention_pass p2 WHERE p2.policy = v_pass.policy
                     ORDER BY p2.id DESC OFFSET 1000 LIMIT 1);
END
$$;
-- pgsweep:end functions/retention_step.sql

-- pgsweep:include functions/retention_sql.sql
-- Retention: the SQL each batch runs against the policy's table.
--
-- Safety rule: a row is deleted only if it is eligible when it is deleted.
-- Every DELETE carries the policy's full predicate in its own WHERE clause.
-- Under READ COMMITTED, when a DELETE meets a row version that a concurrent
-- transaction updated, PostgreSQL follows the update to the newest version and
-- re-evaluates the whole WHERE clause on it (EvalPlanQual): a row re-queued
-- meanwhile (status or time changed) no longer matches and is skipped. The
-- range condition (ctid range, ctid list) is re-checked too; a new version
-- that moved outside the range is skipped, which is safe, and a still-eligible
-- row skipped that way is deleted by a later sweep. CAP's
-- DELETE ... WHERE "Id" IN (SELECT ... LIMIT n) re-checks only "Id", which is
-- why it deletes re-queued rows. sql/tests/retention_run.sql and the Go tests
-- prove the difference.
--
-- Parameters, the same in every statement: $1, $2 the range (TIDs, or the
-- keyset lower bound), $3 the cutoff, $4 the statuses, $5 the filter values.
-- Values travel as parameters, never as SQL text; names through %I.
--
-- Time: the cutoff is carried as timestamptz. For a timestamp column it holds
-- the local cutoff (now - older_than, in the policy's time zone) encoded as if
-- it were UTC, and the SQL decodes it with AT TIME ZONE 'UTC' applied to the
-- parameter (immutable, so the index on the column still serves); a date
-- column compares with the local cutoff's date, so a day is deleted only when
-- all of it is older than the cutoff.

-- _retention_cutoff computes a policy's cutoff for a clock reading.
CREATE OR REPLACE FUNCTION _retention_cutoff(p_pol retention_policy, p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_pol.time_type = 'timestamptz' THEN
        RETURN p_now - p_pol.older_than;
    END IF;
    RETURN ((p_now - p_pol.older_than) AT TIME ZONE coalesce(p_pol.time_zone, current_setting('TimeZone')))
           AT TIME ZONE 'UTC';
END
$$;

-- _retention_param decodes an encoded time parameter into the column's type.
CREATE OR REPLACE FUNCTION _retention_param(p_pol retention_policy, p_param text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_param
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_param)
        ELSE format('(%s AT TIME ZONE ''UTC'')::date', p_param) END
$$;

-- _retention_encode encodes a column value (an SQL expression) like the cutoff.
CREATE OR REPLACE FUNCTION _retention_encode(p_pol retention_policy, p_expr text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_pol.time_type
        WHEN 'timestamptz' THEN p_expr
        WHEN 'timestamp' THEN format('(%s AT TIME ZONE ''UTC'')', p_expr)
        ELSE format('(%s::timestamp AT TIME ZONE ''UTC'')', p_expr) END
$$;

-- _retention_predicate is the policy's full eligibility test as SQL over $3..$5.
CREATE OR REPLACE FUNCTION _retention_predicate(p_pol retention_policy, p_rel regclass)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text := format('%I < %s', p_pol.time_column, _retention_param(p_pol, '$3'));
    v_col record;
BEGIN
    IF p_pol.status_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.status_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.status_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($4::%s[])', p_pol.status_column, v_col.type_sql);
    END IF;
    IF p_pol.filter_column IS NOT NULL THEN
        v_col := _retention_column(p_rel, p_pol.filter_column);
        IF v_col.type_sql IS NULL THEN
            RAISE EXCEPTION 'retention policy %: column % of % no longer exists', p_pol.name,
                quote_ident(p_pol.filter_column), p_rel::text USING ERRCODE = 'undefined_column';
        END IF;
        v_sql := v_sql || format(' AND %I = ANY ($5::%s[])', p_pol.filter_column, v_col.type_sql);
    END IF;
    RETURN v_sql;
END
$$;

-- _retention_sweep_sql builds a sweep's DELETE (see retention_sweep).
CREATE OR REPLACE FUNCTION _retention_sweep_sql(p_pol retention_policy, p_strategy text)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
    v_tbl text := format('%I.%I', p_pol.table_schema, p_pol.table_name);
    v_pred text := _retention_predicate(p_pol, v_rel);
BEGIN
    IF p_strategy = 'tid_range' THEN
        RETURN format('DELETE FROM %s WHERE ctid >= $1 AND ctid < $2 AND %s', v_tbl, v_pred);
    END IF;
    RETURN format('DELETE FROM %s WHERE %I >= %s AND %I < %s AND %s', v_tbl, p_pol.time_column,
                  _retention_param(p_pol, '$1'), p_pol.time_column, _retention_param(p_pol, '$2'), v_pred);
END
$$;

-- _retention_sample_sql builds the planning sample (see retention_plan.sql):
-- the eligible fraction, the sample size and the eligible rows' encoded
-- times in order, over about p_pct percent of the table's blocks.
CREATE OR REPLACE FUNCTION _retention_sample_sql(p_pol retention_policy, p_pct double precision)
RETURNS text
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rel regclass := _retention_table(p_pol.table_schema, p_pol.table_name);
BEGIN
    RETURN format('SELECT count(*) FILTER (WHERE %1$s)::float8 / nullif(count(*), 0), count(*), '
                  'array_agg(%2$s ORDER BY %3$I) FILTER (WHERE %1$s) FROM %4$I.%5$I TABLESAMPLE SYSTEM (%6$s)',
                  _retention_predicate(p_pol, v_rel), _retention_encode(p_pol, quote_ident(p_pol.time_column)),
                  p_pol.time_column, p_pol.table_schema, p_pol.table_name, p_pct);
END
$$;

-- Running a policy's statements as its owner.
--
-- A policy belongs to the role that registered it, and every statement a
-- run makes on the policy's table (the planning sample, each batch's
-- DELETE) runs as that role: the table's privileges, row-level security and
-- triggers apply to the owner, never to whoever runs maintenance (pg_cron's
-- superuser included). A plain SET ROLE is not enough: a trigger of the
-- owner's could RESET ROLE back to a superuser session user. So the
-- statement runs inside a SECURITY DEFINER function owned by the policy's
-- owner, where PostgreSQL forbids SET ROLE and SET SESSION AUTHORIZATION:
-- _retention_as_owner creates it in this session's pg_temp (built now from
-- validated policy fields; no stored SQL), hands it to the owner, calls it
-- once and drops it, all in the caller's transaction, so no other session
-- ever sees it and it is never called twice. Creating and dropping costs
-- about 0.2 ms a batch. The caller (maintain's or retention_run's session
-- role) must be able to act as the owner (be a member of it, or a
-- superuser); otherwise the run of that policy fails with 42501 and says
-- which GRANT is missing, and other policies still run.
--
-- Built-in policies (owner <schema>_owner, pgsweep's own tables) run in
-- _retention_builtin_exec instead, a SECURITY DEFINER function of
-- <schema>_owner that builds the statement from the policy itself.

-- _retention_exec_body is the PL/pgSQL body that runs p_sql with $1..$5.
CREATE OR REPLACE FUNCTION _retention_exec_body(p_sql text, p_kind text)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_kind
        WHEN 'delete' THEN pg_catalog.format(
            'DECLARE n bigint; BEGIN EXECUTE %L USING $1, $2, $3, $4, $5; GET DIAGNOSTICS n = ROW_COUNT; '
            'RETURN QUERY SELECT n, NULL::float8, NULL::bigint, NULL::timestamptz[]; END', p_sql)
        ELSE pg_catalog.format(
            'BEGIN RETURN QUERY EXECUTE %L USING $1, $2, $3, $4, $5; END',
            'SELECT NULL::bigint, s.* FROM (' || p_sql || ') s') END
$$;

-- _retention_exec_settings: the settings a statement runs with: a
-- tid_range DELETE is pinned to its Tid Range Scan (see retention_plan.sql);
-- JIT off everywhere, batches are too short to gain from it; and it waits
-- for no lock longer than retention_lock_timeout (a row an application holds
-- locked defers the unit to a later pass, _retention_step).
CREATE OR REPLACE FUNCTION _retention_exec_settings(p_strategy text)
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_strategy
        WHEN 'tid_range' THEN ' SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off SET jit = off'
        ELSE ' SET jit = off' END
        || pg_catalog.format(' SET lock_timeout = %L',
                             (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms')
$$;

-- _retention_as_owner runs one statement of a policy as its owner and
-- returns the DELETE's row count or the sample's three values. It runs as
-- its caller (SECURITY INVOKER): the caller must be able to act as the owner.
CREATE OR REPLACE FUNCTION _retention_as_owner(p_pol retention_policy, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_sql text;
    v_type text := pg_catalog.format_type(pg_catalog.pg_typeof(p_lo), NULL);
    v_sig text;
BEGIN
    IF p_pol.owner = _owner_role() THEN
        SELECT * INTO deleted, fraction, sampled, times
          FROM _retention_builtin_exec(p_pol.name, p_kind, p_strategy, p_lo, p_hi, p_cutoff);
        RETURN;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, p_pol.owner, 'MEMBER') THEN
        RAISE EXCEPTION 'retention policy %: % cannot act as the policy''s owner %', p_pol.name, current_user, p_pol.owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = pg_catalog.format('Run maintenance as a role that can act as %s: GRANT %I TO %I.',
                                           p_pol.owner, p_pol.owner::text, current_user);
    END IF;
    IF p_kind = 'delete' THEN
        v_sql := _retention_sweep_sql(p_pol, p_strategy);
    ELSE
        v_sql := _retention_sample_sql(p_pol, p_lo::text::double precision);
    END IF;
    v_sig := pg_catalog.format('pg_temp.pgsweep_retention_as_owner(%s, %s, timestamptz, text[], text[])', v_type, v_type);
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION %s RETURNS TABLE (deleted bigint, fraction float8, sampled bigint, times timestamptz[]) '
        'LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp%s AS %L',
        v_sig, _retention_exec_settings(CASE WHEN p_kind = 'delete' THEN p_strategy END), _retention_exec_body(v_sql, p_kind));
    EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %I', v_sig, p_pol.owner::text);
    EXECUTE pg_catalog.format('SELECT * FROM %s', pg_catalog.replace(v_sig,
            pg_catalog.format('(%s, %s, timestamptz, text[], text[])', v_type, v_type), '($1, $2, $3, $4, $5)'))
       INTO deleted, fraction, sampled, times
      USING p_lo, p_hi, p_cutoff, p_pol.statuses, p_pol.filter_values;
    EXECUTE pg_catalog.format('DROP FUNCTION %s', v_sig);
END
$$;

-- _retention_builtin_exec runs one statement of a built-in policy (owned by
-- <schema>_owner, on pgsweep's own tables) as <schema>_owner. It takes no
-- SQL: it builds the statement from the policy, and refuses any other policy.
CREATE OR REPLACE FUNCTION _retention_builtin_exec(p_name text, p_kind text, p_strategy text,
    p_lo anyelement, p_hi anyelement, p_cutoff timestamptz,
    OUT deleted bigint, OUT fraction double precision, OUT sampled bigint, OUT times timestamptz[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_pol retention_policy;
    v_lock_timeout text := pg_catalog.current_setting('lock_timeout');
BEGIN
    SELECT * INTO v_pol FROM retention_policy WHERE name = p_name;
    IF NOT FOUND OR v_pol.owner <> _owner_role() OR v_pol.table_schema <> pg_catalog.current_schema()
       OR v_pol.table_name NOT IN ('message_processed', 'message_dead') THEN
        RAISE EXCEPTION 'retention policy %: not a built-in policy', p_name USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_kind = 'delete' THEN
        -- as _retention_exec_settings: wait on no lock longer than retention_lock_timeout
        PERFORM pg_catalog.set_config('lock_timeout',
            (extract(epoch FROM setting_interval('retention_lock_timeout')) * 1000)::bigint || 'ms', true);
        EXECUTE _retention_sweep_sql(v_pol, p_strategy) USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
        GET DIAGNOSTICS deleted = ROW_COUNT;
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    ELSE
        EXECUTE _retention_sample_sql(v_pol, p_lo::text::double precision) INTO fraction, sampled, times
          USING p_lo, p_hi, p_cutoff, v_pol.statuses, v_pol.filter_values;
    END IF;
END
$$;
-- pgsweep:end functions/retention_sql.sql

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
-- took t, maintain() sleeps t*(100-d)/d. 0 (the default) paces adaptively,
-- additive increase / multiplicative decrease of the duty cycle between 5%
-- and 100%, from signals the database shows about the harm the cleaner does:
--   * a batch slower per row than the fastest recent one by more than half
--     (the cleaner competes for CPU or I/O with something), and
--   * more than one other session of this database running right after
--     the batch (live traffic that would queue behind the next batch), and
--   * sessions waiting on a lock.
-- Any of them halves the duty cycle at once; a batch without them raises it
-- by 5 points. Measured in `pgsweep bench mixed` (docs/benchmarks.md).
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
    v_duty double precision := coalesce((p_state ->> 'duty')::double precision, 25);
    v_best double precision := (p_state ->> 'best')::double precision;
    v_rows bigint;
    v_batch_rows bigint;
    v_per_row double precision;
    v_busy int;
    v_harm boolean := false;
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
            v_harm := v_per_row > v_best * 1.5;
        END IF;
        SELECT count(*) FILTER (WHERE a.state = 'active' AND a.wait_event_type IS DISTINCT FROM 'Activity'),
               count(*) FILTER (WHERE a.wait_event_type = 'Lock')
          INTO v_busy, v_rows
          FROM pg_catalog.pg_stat_activity a
         WHERE a.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND a.pid <> pg_catalog.pg_backend_pid() AND a.backend_type = 'client backend';
        -- busy: more sessions running right now than the one other core
        -- the smallest machine leaves them while we delete
        v_harm := v_harm OR v_busy > 1 OR v_rows > 0;
        v_duty := CASE WHEN v_harm THEN greatest(5, v_duty / 2) ELSE least(100, v_duty + 5) END;
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
-- overloads: a routine is listed by name, so a p_now overload is excluded by
-- its argument count in _grant_all).
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        '_queue_get', -- the Worker reads the queue's lease_default and max_attempts (no payloads)
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        -- what the procedures (running as their caller) call
        '_maintain_pass_begin', '_maintain_pass_end', '_maintain_part_begin', '_maintain_part_step',
        '_maintain_part_end', '_maintain_recovery', '_maintain_retention', '_maintain_renew',
        '_maintain_fail_owner', '_retention_begin', '_retention_step', '_retention_finish', '_retention_unlock',
        '_retention_step_claim', '_retention_step_done', '_retention_step_deferred', '_owner_role',
        '_retention_sweep_sql', '_retention_sample_sql', '_retention_exec_settings', '_retention_exec_body', '_retention_sample_done', '_retention_builtin_exec',
        '_retention_as_owner', '_retention_finish_error', '_cron_available', '_cron_require', '_maintain_recovery_deadline', '_maintain_running',
        '_maintain_ret_errors', '_maintain_ret_counts', '_maintain_ret_go', '_maintain_ret_budget',
        '_maintain_ret_error', '_maintain_ret_put', '_maintain_ret_pace', '_maintain_ret_renew_due', '_maintain_ret_tally', '_maintain_ret_result',
        '_retention_register', '_retention_resolve', '_retention_plan_from_sample', '_retention_proc_error', '_maintain_retention_error']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['_queue_stats', 'version']) r
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
                    EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargnames) a WHERE a = 'p_now') AS has_now
               FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_schema::regnamespace ORDER BY 4 LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s OWNER TO %I', r.sig, v_owner);
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC, %I, %I, %I', r.sig,
                                  v_roles.admin_role, v_roles.worker_role, v_roles.monitor_role);
        IF r.prokind = 'f' THEN
            EXECUTE pg_catalog.format('ALTER FUNCTION %s %s', r.sig,
                CASE WHEN r.proname = ANY (_invoker_routines()) THEN 'SECURITY INVOKER' ELSE 'SECURITY DEFINER' END);
        END IF;
        -- p_now overloads are for tests: S_owner alone.
        CONTINUE WHEN r.has_now AND r.proname NOT IN ('_queue_stats', '_retention_begin');
        FOR v_role IN SELECT v_schema || '_' || g.role_kind FROM _routine_grants() g WHERE g.routine = r.proname LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', r.sig, v_role);
        END LOOP;
    END LOOP;
END
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
