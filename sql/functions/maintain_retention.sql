{{ $s := .schema | default "pgsweep" -}}
-- The retention part of maintain(): run every due retention policy (own and
-- registered; retention_due lists them, oldest first) until the run's
-- deadline. The built-in policies were synced when the part began
-- (maintain_step_part).
--
-- It drives each policy's pass through the retention step routines
-- (retention_step_begin / retention_step / retention_step_end, exactly as
-- retention_run does) rather than CALL retention_run, because a failing
-- policy must not end the whole maintain pass: PL/pgSQL cannot catch an
-- error raised across a COMMIT, so every step is caught here, outside the
-- COMMITs, recorded on that policy's pass, and the part goes on with the
-- next policy.
--
-- A PROCEDURE without a SET clause (it COMMITs after every batch), so every
-- name below is qualified with the install schema and the body uses no
-- operator: comparisons, arithmetic and JSON building live in the pinned
-- step routines below, so nothing on the caller's search_path (pg_cron's
-- superuser's included) can stand in for them. Like maintain, it calls only
-- step routines (maintain.sql): each checks that the run p_run belongs to
-- a pass of this session.
--
-- The run's counts: {"deleted": {"<policy>": rows}}; a policy's error goes
-- to the run's error ("policy <name>: message") and the run ends 'failed';
-- the part is due again at once while a policy is still due
-- (maintain_step_part_end).

-- maintain_step_go: whether the run p_run may start another policy (the
-- deadline has not passed and the part's lease was renewed), with the
-- run's owner and what is left of its budget for the policy's pass.
CREATE OR REPLACE FUNCTION maintain_step_go(p_run bigint, OUT o_go boolean, OUT o_owner text, OUT o_budget interval)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    o_owner := v_run.owner;
    o_budget := least(greatest(v_run.deadline - clock_timestamp(), interval '0'), interval '1 day');
    o_go := v_run.part = 'retention' AND v_run.status = 'running' AND clock_timestamp() < v_run.deadline
            AND _maintain_renew('retention', v_run.owner);
END
$$;

-- Pacing: background retention yields to live traffic.
--
-- retention_duty_cycle d in 1..100 is a fixed duty cycle: after a batch that
-- took t, maintain() sleeps t*(100-d)/d. 0 (the default) adapts the duty
-- cycle after every batch to what the database shows:
--   * sessions waiting on a lock: halve it (at least 10%): the cleaner may
--     be in someone's way;
--   * a batch more than twice as slow per row as the fastest recent one:
--     cut it by 30% (at least 35%): the cleaner competes for CPU or I/O;
--   * other sessions of the database running, or active within the last
--     100 ms (live traffic, maintain_step_traffic): raise it by 5 points, to
--     at most 65%;
--   * nothing else running: raise it by 10 points, to 100% (an idle
--     database drains at full speed).
-- It starts at 35%. The bounds come from `pgsweep bench mixed` runs of 0.28
-- (docs/benchmarks.md, "mixed"), once the pacing saw the traffic again:
-- 20-30% drained at 0.09x of the unpaced rate, 30-60% at 0.13-0.23x and
-- 40-75% at 0.28-0.41x with the claims' p99 at 0.9x, 1.1x and 1.4-1.6x of
-- its quiet value; 35-65% sits between, on a machine too loaded to settle it.
-- CALL retention_run never pauses.

-- maintain_step_traffic: the live traffic the pacing yields to, as the
-- maintenance role sees it: busy, the other client sessions of this
-- database running now or within the last 100 ms (a claim loop is idle most
-- of the time between short statements); waiting, those waiting for a lock.
-- SECURITY INVOKER (privileges.sql, _invoker_routines), called by the
-- procedure, which runs as its caller: pg_stat_activity shows another
-- role's session state only to a superuser or a member of
-- pg_read_all_stats, and the owner role is neither (as a SECURITY DEFINER
-- function this saw no traffic at all, and the pacing ran at 100%). A
-- session the caller may not see counts as busy: without the privilege the
-- pacing yields to every other session rather than to none. Grant the
-- maintenance role pg_read_all_stats (or pg_monitor) for the exact picture
-- (docs/operations.md).
CREATE OR REPLACE FUNCTION maintain_step_traffic(OUT busy int, OUT waiting int)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT (count(*) FILTER (WHERE a.state IS NULL
                                OR (a.state = 'active' AND a.wait_event_type IS DISTINCT FROM 'Lock')
                                OR a.state_change > pg_catalog.clock_timestamp() - interval '100 milliseconds'))::int,
           (count(*) FILTER (WHERE a.wait_event_type = 'Lock'))::int
      FROM pg_catalog.pg_stat_activity a
     WHERE a.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
       AND a.pid <> pg_catalog.pg_backend_pid()
       -- a session the caller may not see shows no backend_type either
       AND (a.backend_type = 'client backend' OR a.backend_type IS NULL)
$$;

-- _maintain_ret_pace sleeps after a batch as the pacing says and returns
-- the pacing state for the next batch ({"duty", "best", "pass", "rows"}).
CREATE OR REPLACE FUNCTION _maintain_ret_pace(p_state jsonb, p_pass bigint, p_batch_start timestamptz,
    p_deadline timestamptz, p_busy int, p_waiting int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_fixed int := setting_int('retention_duty_cycle');
    v_elapsed double precision := greatest(extract(epoch FROM clock_timestamp() - p_batch_start), 0);
    v_duty double precision := coalesce((p_state ->> 'duty')::double precision, 35);
    v_best double precision := (p_state ->> 'best')::double precision;
    v_rows bigint;
    v_batch_rows bigint;
    v_per_row double precision;
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
        v_duty := CASE
            WHEN p_waiting > 0 THEN greatest(10, v_duty / 2)
            WHEN v_per_row > v_best * 2 THEN greatest(35, v_duty * 0.7)
            WHEN p_busy > 0 THEN least(65, v_duty + 5)
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

-- maintain_step_pace: the pacing's sleep after a batch of the pass p_pass
-- in the run p_run (_maintain_ret_pace), never past the run's deadline.
-- p_state is NULL or what the previous call returned: an object of numbers
-- duty (1 to 100), best (0 to 86400 seconds a row), pass and rows (not
-- negative); p_busy and p_waiting count sessions (0 to 262143, PostgreSQL's
-- most). p_batch_start needs no check: a time before the run's start counts
-- as its start, a later one as no time spent (no sleep).
CREATE OR REPLACE FUNCTION maintain_step_pace(p_run bigint, p_state jsonb, p_pass bigint, p_batch_start timestamptz,
    p_busy int, p_waiting int)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
BEGIN
    IF p_state IS NOT NULL AND (
           jsonb_typeof(p_state) <> 'object'
        OR EXISTS (SELECT 1 FROM jsonb_each(p_state) e
                    WHERE e.key NOT IN ('duty', 'best', 'pass', 'rows') OR jsonb_typeof(e.value) NOT IN ('number', 'null'))
        OR NOT coalesce((p_state ->> 'duty')::numeric BETWEEN 1 AND 100, true)
        OR NOT coalesce((p_state ->> 'best')::numeric BETWEEN 0 AND 86400, true)
        OR NOT coalesce((p_state ->> 'pass')::numeric BETWEEN 0 AND 9223372036854775807, true)
        OR NOT coalesce((p_state ->> 'rows')::numeric BETWEEN 0 AND 9223372036854775807, true)) THEN
        RAISE EXCEPTION 'p_state must be NULL or the pacing state maintain_step_pace returned (an object of the numbers duty 1 to 100, best 0 to 86400, pass and rows not negative), got a jsonb % of % bytes',
            jsonb_typeof(p_state), pg_column_size(p_state)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_busy IS NOT NULL THEN PERFORM _check_int('p_busy', p_busy, 0, 262143); END IF;
    IF p_waiting IS NOT NULL THEN PERFORM _check_int('p_waiting', p_waiting, 0, 262143); END IF;
    v_run := _maintain_run_check(p_run);
    RETURN _maintain_ret_pace(coalesce(p_state, '{}'), p_pass, greatest(p_batch_start, v_run.started_at),
                              v_run.deadline, coalesce(p_busy, 1), coalesce(p_waiting, 0));
END
$$;

-- maintain_step_renew keeps the run's lease alive through a long policy:
-- renewed once a third of maintain_lease_ttl has passed since it was last
-- set; false when it is lost (another owner goes on).
CREATE OR REPLACE FUNCTION maintain_step_renew(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
    v_ttl interval := setting_interval('maintain_lease_ttl');
BEGIN
    IF EXISTS (SELECT 1 FROM lease l WHERE l.name = 'maintain:' || v_run.part AND l.owner = v_run.owner
                  AND l.expires_at - clock_timestamp() > v_ttl * 2 / 3) THEN
        RETURN true;
    END IF;
    RETURN _maintain_renew(v_run.part, v_run.owner);
END
$$;

-- maintain_step_tally records a policy's pass in the run p_run: its rows
-- (read from the pass, which must be this session's pass of p_name), or
-- the error that stopped it.
-- p_name goes into the run's counts and error: the name rule (validate.sql)
-- unless it is a registered policy's (maintain passes retention_due's names,
-- and a name registered before 0.34's rule is still tallied). p_error is
-- free text, the caught error's message, stored cut to 2000 characters.
CREATE OR REPLACE FUNCTION maintain_step_tally(p_run bigint, p_name text, p_pass bigint, p_error text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
    v_rows bigint;
    v_outcome text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_name) THEN
        PERFORM _check_text('p_name', p_name);
    END IF;
    v_run := _maintain_run_check(p_run);
    IF v_run.part <> 'retention' OR v_run.status <> 'running' THEN
        RETURN;
    END IF;
    IF p_pass IS NOT NULL THEN
        SELECT p.rows_deleted, p.outcome INTO v_rows, v_outcome FROM retention_pass p
         WHERE p.id = p_pass AND p.policy = p_name AND p.pid = pg_catalog.pg_backend_pid();
    END IF;
    UPDATE maintain_run
       SET counts = CASE WHEN v_rows IS NULL THEN counts
                         ELSE _maintain_add_counts(counts, jsonb_build_object('deleted', jsonb_build_object(p_name, v_rows))) END,
           steps = steps + 1,
           more = more OR coalesce(v_outcome = 'budget', false),
           error = CASE WHEN p_error IS NULL THEN error
                        ELSE coalesce(error || '; ', '') || format('policy %s: %s', p_name, left(p_error, 2000)) END
     WHERE id = p_run;
END
$$;

CREATE OR REPLACE PROCEDURE maintain_step_retention(p_run bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due pg_catalog.text[];
    v_name pg_catalog.text;
    v_pass bigint;
    v_step_more boolean;
    v_error pg_catalog.text;
    v_batch_start pg_catalog.timestamptz;
    v_go record;
    v_renew boolean;
    v_pace pg_catalog.jsonb := '{}';
    v_busy int;
    v_waiting int;
BEGIN
    -- 42501 unless p_run is a run of this session's pass, whether or not a
    -- policy is due
    PERFORM {{ $s }}.maintain_step_go(p_run);
    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        v_go := {{ $s }}.maintain_step_go(p_run);
        COMMIT;
        EXIT WHEN NOT v_go.o_go; -- out of budget, or lost the part's lease: another owner goes on

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}.retention_step_begin(v_name, v_go.o_owner, v_go.o_budget);
        EXCEPTION WHEN OTHERS THEN
            v_error := pg_catalog.format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}.retention_step_unlock(v_name);
            PERFORM {{ $s }}.maintain_step_tally(p_run, v_name, NULL, v_error);
            COMMIT;
            CONTINUE;
        END IF;
        COMMIT;
        -- NULL: busy elsewhere (or keeps rows forever): a cleaner that died
        -- may still hold the policy's lease; the policy stays due, and so
        -- does the part (maintain_step_part_end)
        CONTINUE WHEN v_pass IS NULL;

        LOOP
            v_batch_start := pg_catalog.clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}.retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := pg_catalog.format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic (retention_duty_cycle,
            -- adaptive by default); keep the part's lease alive through a
            -- long policy.
            SELECT t.busy, t.waiting INTO v_busy, v_waiting FROM {{ $s }}.maintain_step_traffic() t;
            v_pace := {{ $s }}.maintain_step_pace(p_run, v_pace, v_pass, v_batch_start, v_busy, v_waiting);
            v_renew := {{ $s }}.maintain_step_renew(p_run);
            IF NOT v_renew THEN
                v_error := 'lost the maintain:retention lease during the pass';
                EXIT;
            END IF;
            COMMIT;
        END LOOP;

        PERFORM {{ $s }}.retention_step_end(v_pass, v_error);
        COMMIT;
        PERFORM {{ $s }}.retention_step_unlock(v_name);
        PERFORM {{ $s }}.maintain_step_tally(p_run, v_name, v_pass, v_error);
        COMMIT;
    END LOOP;
END
$$;
