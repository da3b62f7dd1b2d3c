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
