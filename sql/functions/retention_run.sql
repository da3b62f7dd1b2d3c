-- Retention: retention_run, the procedure that deletes a policy's expired rows
-- in batches, committing each, until the sweep is drained or the budget spent.
--
--   CALL retention_run('cap.published');
--   CALL retention_run('cap.published', 'replica-1', '10 seconds');
--   CALL retention_run('cap.published', NULL, '10 seconds', NULL, NULL);  -- returns p_pass_id
-- It commits, so it runs outside a transaction block, and cannot pin
-- search_path: it calls only schema-qualified step routines
-- (retention_step.sql) and uses no operator. A step that fails is recorded on
-- the pass ('error'), its lease and lock released, and the error raised again.

-- retention_step_pass runs this session's pass p_pass (if any) to its end.
CREATE OR REPLACE PROCEDURE retention_step_pass(p_name text, p_pass bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_more boolean;
    v_state pg_catalog.text;
    v_msg pg_catalog.text;
    v_detail pg_catalog.text;
    v_hint pg_catalog.text;
BEGIN
    IF p_pass IS NULL THEN RETURN; END IF;
    LOOP
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}.retention_step(p_pass);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
        END;
        EXIT WHEN v_state IS NOT NULL; -- failed: recorded and raised again below
        COMMIT;
        EXIT WHEN NOT v_more;
    END LOOP;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_end(p_pass,
        CASE WHEN v_state IS NOT NULL THEN pg_catalog.format('%s: %s', v_state, v_msg) END);
    COMMIT;
    PERFORM {{ .schema | default "pgsweep" }}.retention_step_unlock(p_name);
    IF v_state IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = v_state, MESSAGE = v_msg, DETAIL = coalesce(v_detail, ''), HINT = coalesce(v_hint, '');
    END IF;
END
$$;

-- _retention_run: a pass with a pinned clock, for tests; returns its id.
CREATE OR REPLACE PROCEDURE _retention_run(p_name text, p_owner text, p_budget interval, p_clock timestamptz,
    INOUT p_pass_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    COMMIT;
    p_pass_id := {{ .schema | default "pgsweep" }}._retention_begin(p_name, p_owner, p_budget, p_clock);
    COMMIT;
    CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, p_pass_id);
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

-- The same without a clock, for every admin.
CREATE OR REPLACE PROCEDURE retention_run(p_name text, p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
BEGIN
    COMMIT; -- fails inside a transaction block, before anything is taken
    v_pass := {{ .schema | default "pgsweep" }}.retention_step_begin(p_name, p_owner, p_budget);
    COMMIT;
    CALL {{ .schema | default "pgsweep" }}.retention_step_pass(p_name, v_pass);
END
$$;
