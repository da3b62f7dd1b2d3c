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
-- _maintain_* functions compute), so the caller's search_path cannot
-- redirect it.

-- _maintain_recovery_deadline: recovery gets at most half the budget.
CREATE OR REPLACE FUNCTION _maintain_recovery_deadline(p_deadline timestamptz, p_budget interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_deadline - p_budget / 2 $$;

-- _maintain_running: whether a part's begin said it runs.
CREATE OR REPLACE FUNCTION _maintain_running(p_status text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT coalesce(p_status = 'running', false) $$;

-- _maintain_ret_errors: the retention part's per-policy errors as one
-- text (NULL: none); _maintain_ret_counts: its result without them.
CREATE OR REPLACE FUNCTION _maintain_ret_errors(p_result jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT string_agg(format('policy %s: %s', e.key, e.value #>> '{}'), '; ' ORDER BY e.key)
      FROM jsonb_each(CASE WHEN jsonb_typeof(p_result -> 'errors') = 'object' THEN p_result -> 'errors' END) e
$$;

CREATE OR REPLACE FUNCTION _maintain_ret_counts(p_result jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT p_result - 'errors' $$;

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
    v_running boolean;
BEGIN
    SELECT b.o_pass, b.o_owner, b.o_deadline INTO v_pass, v_owner, v_deadline
      FROM {{ .schema | default "pgsweep" }}._maintain_pass_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_recovery_deadline := {{ .schema | default "pgsweep" }}._maintain_recovery_deadline(v_deadline, p_budget);
    SELECT * INTO v_part FROM {{ .schema | default "pgsweep" }}._maintain_part_begin(v_pass, 'recovery', v_owner, v_recovery_deadline);
    COMMIT;
    v_running := {{ .schema | default "pgsweep" }}._maintain_running(v_part.o_status);
    IF v_running THEN
        LOOP
            v_result := NULL;
            v_error := NULL;
            BEGIN
                v_result := {{ .schema | default "pgsweep" }}._maintain_recovery(v_owner, v_recovery_deadline);
            EXCEPTION WHEN OTHERS THEN
                v_error := {{ .schema | default "pgsweep" }}._maintain_ret_error(SQLERRM, SQLSTATE);
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
    v_running := {{ .schema | default "pgsweep" }}._maintain_running(v_part.o_status);
    IF v_running THEN
        v_result := '{}';
        CALL {{ .schema | default "pgsweep" }}._maintain_retention(v_owner, v_deadline, v_result);
        v_error := {{ .schema | default "pgsweep" }}._maintain_ret_errors(v_result);
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_step(v_part.o_run,
            {{ .schema | default "pgsweep" }}._maintain_ret_counts(v_result), v_error, v_deadline);
        PERFORM {{ .schema | default "pgsweep" }}._maintain_part_end(v_part.o_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}._maintain_pass_end(v_pass);
    COMMIT;
END
$$;
