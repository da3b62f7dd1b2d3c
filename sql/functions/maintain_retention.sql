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

-- _maintain_ret_pace sleeps after a batch in proportion to its duration
-- (retention_duty_cycle percent of the time deleting), never past the
-- deadline, and says whether the part's lease is due for renewal (every
-- third of maintain_lease_ttl since p_renewed).
CREATE OR REPLACE FUNCTION _maintain_ret_pace(p_batch_start timestamptz, p_deadline timestamptz, p_renewed timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_duty int := setting_int('retention_duty_cycle');
BEGIN
    IF v_duty < 100 THEN
        PERFORM pg_catalog.pg_sleep(least(
            extract(epoch FROM clock_timestamp() - p_batch_start) * (100 - v_duty) / v_duty,
            greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
    END IF;
    RETURN clock_timestamp() - p_renewed > setting_interval('maintain_lease_ttl') / 3;
END
$$;

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
        CONTINUE WHEN v_pass IS NULL; -- busy elsewhere, or keeps rows forever

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
            -- Background work yields to live traffic (retention_duty_cycle);
            -- keep the part's lease alive through a long policy.
            v_renew := {{ $s }}._maintain_ret_pace(v_batch_start, p_deadline, v_renewed);
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
