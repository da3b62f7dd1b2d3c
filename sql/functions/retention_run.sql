-- Retention: retention_run, the procedure that deletes a policy's expired rows
-- in batches, committing each, until the sweep is drained or the budget spent.
--
--   CALL retention_run('cap.published');
--   CALL retention_run('cap.published', 'replica-1', '10 seconds');
--   CALL retention_run('cap.published', NULL, '10 seconds', NULL, NULL);  -- returns p_pass_id
--
-- Must be called outside a transaction block (it commits). Procedures cannot
-- pin search_path (a SET clause forbids COMMIT inside), so these bodies call
-- only schema-qualified functions that pin theirs and use no operator at
-- all (every comparison, concatenation and arithmetic happens inside those
-- functions): an operator or function that the caller's search_path puts
-- before pg_catalog changes nothing. The schema comes from the migration's
-- template data like everywhere else.
--
-- Errors: a step that fails is recorded on the pass (outcome 'error'), its
-- lease and advisory lock are released, and the error is raised again. A
-- cleaner that is killed records nothing more: its last batch is committed or
-- rolled back whole, its unit stays open for the next cleaner, its lease
-- expires after the policy's TTL and the view shows the pass as abandoned.

-- _retention_finish_error records a failed step (for the procedures).
CREATE OR REPLACE FUNCTION _retention_finish_error(p_pass bigint, p_state text, p_message text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _retention_finish(p_pass, 'error', p_state || ': ' || p_message) $$;

-- _retention_run is the pass, for both retention_run procedures below: the
-- verb (no clock of its own, executable by admins) and the p_now overload
-- (tests, S_owner only). p_clock is checked by _retention_begin (within 10
-- years of the clock) like the p_now of the steps an admin's maintain calls.
CREATE OR REPLACE PROCEDURE _retention_run(p_name text, p_owner text, p_budget interval, p_clock timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_failed boolean := false;
    v_state text;
    v_msg text;
    v_detail text;
    v_hint text;
BEGIN
    -- Inside a transaction block this fails here, before anything is taken.
    COMMIT;
    BEGIN
        p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_clock);
    EXCEPTION WHEN OTHERS THEN
        -- The begin step may have taken the advisory lock before it failed.
        PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
        RAISE;
    END;
    COMMIT;
    IF p_pass_id IS NULL THEN
        RETURN; -- busy, or the policy keeps rows forever
    END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}._retention_step(p_pass_id);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}._retention_finish_error(p_pass_id, v_state, v_msg);
            COMMIT;
            PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
            RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''),
                HINT = coalesce(v_hint, '');
        END IF;
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}._retention_finish(p_pass_id, NULL, NULL);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}._retention_unlock(p_name);
END
$$;

-- The p_now overload, for tests (it also returns the pass's id).
CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text, p_budget interval, p_now timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    CALL {{ .schema | default "pgsweep" }}._retention_run(p_name, p_owner, p_budget, p_now, p_pass_id);
END
$$;

CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    CALL {{ .schema | default "pgsweep" }}._retention_run(p_name, p_owner, p_budget, NULL, v_pass);
END
$$;
