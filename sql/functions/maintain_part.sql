-- The parts of a maintain pass. Each part ('recovery', 'schedules', 'stats', 'retention') runs under
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
AS $$ SELECT ARRAY['recovery', 'schedules', 'stats', 'retention'] $$;

-- _maintain_part_check raises 22023 naming p_part unless it is one of the
-- parts (the name rule first: the message echoes it).
CREATE OR REPLACE FUNCTION _maintain_part_check(p_part text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_part', p_part, 20);
    IF NOT p_part = ANY (_maintain_parts()) THEN
        RAISE EXCEPTION 'p_part must be one of %, got %', array_to_string(_maintain_parts(), ', '),
            quote_literal(p_part) USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

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

-- _maintain_interval: the time a part waits after its last run. The
-- snapshots (stats.sql) count every queue's rows, so stats waits at least
-- ten times its last run's duration too: it never takes more than about a
-- tenth of the time, however many messages there are.
CREATE OR REPLACE FUNCTION _maintain_interval(p_part text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_part
           WHEN 'recovery' THEN setting_interval('recovery_interval')
           -- every pass: a slot is sent by the first pass after it (one
           -- index probe when nothing is due: maintain_schedules.sql)
           WHEN 'schedules' THEN interval '0'
           -- at most an hour: one slow run (a lock wait, an I/O stall) must
           -- not silence the snapshots, and the findings read from them,
           -- for ten times as long
           WHEN 'stats' THEN greatest(setting_interval('stats_interval'),
                                      least(coalesce((SELECT (r.finished_at - r.started_at) * 10 FROM maintain_run r
                                                       WHERE r.part = 'stats' AND r.finished_at IS NOT NULL
                                                       ORDER BY r.id DESC LIMIT 1), interval '0'), interval '1 hour'))
           ELSE setting_interval('retention_check_interval') END
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
    PERFORM _maintain_part_check(p_part);
    IF v_now >= p_deadline THEN
        o_status := 'no budget';
    ELSIF NOT _maintain_due(p_part, v_now) THEN
        o_status := 'not due';
    ELSIF NOT pg_try_advisory_lock(v_key) THEN
        o_status := 'busy';
    ELSE
        o_token := _lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), p_now);
        IF o_token IS NULL THEN
            PERFORM pg_advisory_unlock(v_key);
            o_status := 'busy';
        ELSE
            -- Re-check under the lease: another session may have finished a
            -- run between our first look and our acquire.
            PERFORM 1 FROM maintain_state WHERE part = p_part FOR UPDATE;
            v_now := coalesce(p_now, clock_timestamp());
            IF NOT _maintain_due(p_part, v_now) THEN
                PERFORM _lease_release('maintain:' || p_part, p_owner, p_now);
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
    IF _lease_acquire('maintain:' || v_run.part, v_run.owner, setting_interval('maintain_lease_ttl'), p_now) IS NULL THEN
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
AS $$ SELECT _lease_acquire('maintain:' || p_part, p_owner, setting_interval('maintain_lease_ttl'), NULL) IS NOT NULL $$;

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
-- and the pass row; then it gives the lease and the advisory lock back. A
-- run still 'running' that recorded an error (a retention policy's) ends 'failed'.
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
           status = CASE WHEN status <> 'running' THEN status WHEN error IS NOT NULL THEN 'failed' ELSE 'done' END
     WHERE id = p_run
    RETURNING * INTO v_run;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE maintain_state
       SET last_finished_at = v_now, last_status = v_run.status, backlog = v_run.more
     WHERE part = v_run.part;
    PERFORM _maintain_note(v_run.pass_id, v_run.part, v_run.status, v_run.error);
    PERFORM _lease_release('maintain:' || v_run.part, v_run.owner, p_now);
    PERFORM pg_advisory_unlock(_maintain_lock_key(v_run.part));
    RETURN v_run.status;
END
$$;
