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
-- plain lower-case identifier) and the body uses no operator (the pinned
-- step routines compute), so the caller's search_path cannot redirect it.
--
-- Step routines. A procedure runs as its caller (pg_cron's superuser, an
-- admin), so whatever it calls its caller may call too, in any order, with
-- any argument. It calls only the maintain_step_* routines below (and the
-- retention_step_* ones, retention_step.sql), never an internal (underscore)
-- one, and each of them is safe by itself:
--   * it takes no clock: time is the database's;
--   * a pass belongs to the session that opened it (maintain_pass.pid, and
--     a pass begun before the server started is nobody's): a step naming a
--     pass or a run of another session raises 42501 and changes nothing;
--   * what a step records it computes itself: the deadline comes from the
--     pass's budget, a run's counts from its own work, whether a part is due
--     again (backlog) from the state at its end. A caller can cut its own
--     pass short, never make a part look done that did not run.

-- _pass_running_here: whether a pass (of maintenance or of retention) with
-- these fields is running in this session: its pid, not finished, and not
-- begun before the server started (a pid is reused).
CREATE OR REPLACE FUNCTION _pass_running_here(p_pid int, p_started timestamptz, p_finished timestamptz)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_pid IS NOT DISTINCT FROM pg_catalog.pg_backend_pid() AND p_finished IS NULL
       AND p_started OPERATOR(pg_catalog.>=) pg_catalog.pg_postmaster_start_time()
$$;

-- _maintain_session_check raises 42501 unless this session opened p_pass.
CREATE OR REPLACE FUNCTION _maintain_session_check(p_pass bigint)
RETURNS maintain_pass
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_pass;
BEGIN
    SELECT * INTO v FROM maintain_pass WHERE id = p_pass;
    IF NOT FOUND OR NOT _pass_running_here(v.pid, v.started_at, v.finished_at) THEN
        RAISE EXCEPTION 'maintenance pass %: not a running pass of this session', coalesce(p_pass::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'A pass''s steps run in the session that began it (CALL maintain()).';
    END IF;
    RETURN v;
END
$$;

-- _maintain_run_check: the run p_run of a pass of this session (42501 otherwise).
CREATE OR REPLACE FUNCTION _maintain_run_check(p_run bigint)
RETURNS maintain_run
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v maintain_run;
BEGIN
    SELECT * INTO v FROM maintain_run WHERE id = p_run;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'maintenance run %: no such run', coalesce(p_run::text, 'NULL')
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM _maintain_session_check(v.pass_id);
    RETURN v;
END
$$;

-- maintain_step_begin validates maintain's arguments (22023), derives an
-- owner when none is given and records the pass for this session.
CREATE OR REPLACE FUNCTION maintain_step_begin(p_owner text, p_budget interval, OUT o_pass bigint, OUT o_owner text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v record;
BEGIN
    v := _maintain_pass_begin(p_owner, p_budget, NULL);
    o_pass := v.o_pass;
    o_owner := v.o_owner;
END
$$;

-- maintain_step_part decides whether this session runs p_part of its pass
-- now: o_run is the part's run, NULL when it does not run (busy, not due, no
-- budget). Recovery gets at most half the pass's budget.
CREATE OR REPLACE FUNCTION maintain_step_part(p_pass bigint, p_part text, OUT o_run bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_pass maintain_pass;
    v_deadline timestamptz;
    v record;
BEGIN
    PERFORM _maintain_part_check(p_part); -- 22023 before anything, the pass's owner or not
    v_pass := _maintain_session_check(p_pass);
    v_deadline := v_pass.started_at + v_pass.budget;
    IF p_part = 'recovery' THEN
        v_deadline := v_deadline - v_pass.budget / 2;
    END IF;
    v := _maintain_part_begin(p_pass, p_part, v_pass.owner, v_deadline, NULL);
    IF v.o_status = 'running' THEN
        o_run := v.o_run;
        UPDATE maintain_run SET deadline = v_deadline WHERE id = o_run;
        IF p_part = 'retention' THEN
            -- the built-in policies follow the queues: a queue created or
            -- reconfigured by SQL is covered from this part on
            BEGIN
                PERFORM retention_builtin_sync();
            EXCEPTION WHEN OTHERS THEN
                UPDATE maintain_run SET error = format('builtin_sync: %s (SQLSTATE %s)', SQLERRM, SQLSTATE) WHERE id = o_run;
            END;
        END IF;
    END IF;
END
$$;

-- maintain_step takes one step of the run p_run -- a run of this session's
-- pass (_maintain_run_check: 42501 otherwise) -- of the part it runs,
-- records it and renews the part's lease; it returns whether another step
-- is worth it. The steps: 'recovery', one bounded step of recovery
-- (maintain_recovery.sql); 'stats', the snapshots (stats.sql), one step per
-- run; 'schedules', the due slots of at most 100 schedules
-- (maintain_schedules.sql). A run that is not running, or a retention run
-- (retention steps through maintain_step_retention), takes no step (false).
CREATE OR REPLACE FUNCTION maintain_step(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.status <> 'running' OR v_run.part NOT IN ('recovery', 'stats', 'schedules') THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run,
                               CASE v_run.part
                                   WHEN 'recovery' THEN _maintain_recovery(v_run.owner, v_run.deadline)
                                   WHEN 'stats' THEN _stats_snapshot(NULL)
                                   WHEN 'schedules' THEN _schedule_run(NULL, 100)
                               END,
                               NULL, v_run.deadline, NULL);
END
$$;

-- maintain_step_failed records that a step of the run p_run raised (the
-- procedure caught it): the run fails, and its part is due again at once.
-- p_state is the error's SQLSTATE (five digits or upper-case letters);
-- p_message is free text (newlines allowed), stored cut to 2000 characters:
-- it is the caught error's own message, which must be recorded whatever
-- its length.
CREATE OR REPLACE FUNCTION maintain_step_failed(p_run bigint, p_message text, p_state text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run;
BEGIN
    IF p_state IS NULL OR p_state !~ '^[0-9A-Z]{5}$' THEN
        RAISE EXCEPTION 'p_state must be a SQLSTATE (five digits or upper-case letters), got %',
            CASE WHEN p_state IS NULL THEN 'NULL' ELSE length(p_state) || ' characters that are not one' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_run := _maintain_run_check(p_run);
    PERFORM _maintain_part_step(p_run, '{"more": true}', format('%s (SQLSTATE %s)', left(p_message, 2000), left(p_state, 5)),
                                v_run.deadline, NULL);
END
$$;

-- maintain_step_part_end closes the run p_run. Its part is due again at
-- once (backlog) when a step left work (more), when recovery took no step
-- at all, or, for retention, when a policy is still due: a caller that
-- ends a run it did not work cannot make its part look done.
CREATE OR REPLACE FUNCTION maintain_step_part_end(p_run bigint)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF (v_run.part = 'retention' AND EXISTS (SELECT 1 FROM retention_due()))
       OR (v_run.part <> 'retention' AND v_run.steps = 0) THEN
        UPDATE maintain_run SET more = true WHERE id = p_run;
    END IF;
    RETURN _maintain_part_end(p_run, NULL);
END
$$;

-- maintain_step_end completes this session's pass and trims the history.
CREATE OR REPLACE FUNCTION maintain_step_end(p_pass bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _maintain_session_check(p_pass);
    PERFORM _maintain_pass_end(p_pass, NULL);
END
$$;

CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner pg_catalog.text;
    v_run bigint;
    v_part pg_catalog.text;
    v_more boolean;
    v_failed boolean;
    v_msg pg_catalog.text;
    v_state pg_catalog.text;
BEGIN
    SELECT b.o_pass, b.o_owner INTO v_pass, v_owner FROM {{ .schema | default "pgsweep" }}.maintain_step_begin(p_owner, p_budget) b;
    COMMIT;

    -- The stepped parts, in this order, each step caught (a failed step is
    -- recorded and ends its part's run) and committed:
    --   recovery: bounded steps, each followed by a lease renewal, until the
    --     step says it is done or half the budget is spent: a recovery
    --     backlog must not starve retention (the backlog makes recovery due
    --     again at once on the next pass);
    --   schedules: steps of at most 100 due schedules each, until none is
    --     due or the budget is spent (maintain_schedules.sql);
    --   stats: one step, the queue snapshots (stats.sql), every
    --     stats_interval.
    -- maintain_step knows the part of its run: the body needs no operator.
    FOREACH v_part IN ARRAY ARRAY['recovery', 'schedules', 'stats'] LOOP
        v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, v_part);
        COMMIT;
        CONTINUE WHEN v_run IS NULL;
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step(v_run);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                v_failed := true;
            END;
            IF v_failed THEN
                PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
                v_more := false;
            END IF;
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END LOOP;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'retention');
    COMMIT;
    IF v_run IS NOT NULL THEN
        CALL {{ .schema | default "pgsweep" }}.maintain_step_retention(v_run);
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}.maintain_step_end(v_pass);
    COMMIT;
END
$$;
