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

-- _maintain_session_alive: whether the session that opened a pass (or a
-- retention pass) may still be running it: a backend with its pid exists
-- (and, where the caller can see it, started when the pass's did).
CREATE OR REPLACE FUNCTION _maintain_session_alive(p_pid int, p_backend_start timestamptz, p_started_at timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_started_at >= pg_catalog.pg_postmaster_start_time()
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                    WHERE a.pid = p_pid
                      AND (a.backend_start IS NULL OR p_backend_start IS NULL OR a.backend_start = p_backend_start))
$$;

-- _maintain_owner_live: whether another session still runs a pass
-- (maintenance or retention) of the owner p_owner (the caller's own session
-- may close its own passes: a pass that raised through a COMMIT).
CREATE OR REPLACE FUNCTION _maintain_owner_live(p_owner text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM maintain_pass mp
                    WHERE mp.owner = p_owner AND mp.finished_at IS NULL AND mp.pid <> pg_catalog.pg_backend_pid()
                      AND _maintain_session_alive(mp.pid, mp.backend_start, mp.started_at))
        OR EXISTS (SELECT 1 FROM retention_pass rp
                    WHERE rp.owner = p_owner AND rp.finished_at IS NULL AND rp.pid <> pg_catalog.pg_backend_pid()
                      AND _maintain_session_alive(rp.pid, rp.backend_start, rp.started_at))
$$;

-- maintain_fail_owner records an error that maintain() could not record
-- itself (a part that raised through a COMMIT, see maintain.sql) against the
-- owner's unfinished passes and runs, and releases the owner's leases. The Go
-- runner calls it after a pass that failed with an SQL error, once the
-- pass's backend is gone. It touches only passes whose session is over: a
-- live pass of that owner (another session still running it) is left
-- alone, and so are the leases then, so no admin can end a pass that runs.
CREATE OR REPLACE FUNCTION maintain_fail_owner(p_owner text, p_error text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_error text := left(p_error, 2000);
    v_n bigint;
BEGIN
    PERFORM _check_text('p_owner', p_owner);
    IF _maintain_owner_live(p_owner) THEN
        RETURN 0; -- its session still runs a pass: nothing to fail
    END IF;
    -- Its runs stopped with their work unfinished: their parts are due
    -- again at once (backlog), whoever runs next.
    WITH failed AS (
        UPDATE maintain_run SET status = 'failed', finished_at = v_now, error = coalesce(error, v_error)
         WHERE owner = p_owner AND status = 'running'
        RETURNING part)
    UPDATE maintain_state s SET backlog = true FROM failed WHERE s.part = failed.part;
    UPDATE maintain_run SET finished_at = v_now
     WHERE owner = p_owner AND status = 'abandoned' AND finished_at IS NULL;
    UPDATE maintain_pass SET finished_at = v_now, error = coalesce(error || '; ', '') || v_error
     WHERE owner = p_owner AND finished_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    PERFORM _lease_release_owner_all(p_owner);
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
       p.error,
       p.parts ->> 'stats' AS stats, -- a view's new column goes at its end
       p.parts ->> 'schedules' AS schedules
  FROM maintain_pass p;

CREATE OR REPLACE VIEW maintenance_runs AS
SELECT id, pass_id, part, owner, token, status, started_at, finished_at,
       finished_at - started_at AS duration, steps, counts, error
  FROM maintain_run;
