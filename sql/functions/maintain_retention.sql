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
-- name below is qualified with the install schema.
--
-- Returns in p_result {"deleted": {"<policy>": rows}, "errors": {"<policy>":
-- "message"}, "more": bool}; "more" means a policy stopped on the budget with
-- rows left, or due policies were not reached, so the part is due again at once.
CREATE OR REPLACE PROCEDURE _maintain_retention(p_owner text, p_deadline timestamptz, INOUT p_result jsonb)
LANGUAGE plpgsql
AS $$
DECLARE
    v_due text[];
    v_name text;
    v_pass bigint;
    v_step_more boolean;
    v_error text;
    v_deleted jsonb := '{}';
    v_errors jsonb := '{}';
    v_more boolean := false;
    v_outcome text;
    v_rows bigint;
    v_renewed timestamptz := clock_timestamp();
    v_duty int := {{ $s }}.setting_int('retention_duty_cycle');
    v_batch_start timestamptz;
BEGIN
    BEGIN
        PERFORM {{ $s }}.retention_builtin_sync();
    EXCEPTION WHEN OTHERS THEN
        v_errors := v_errors || jsonb_build_object('builtin_sync', format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE));
    END;
    COMMIT;

    v_due := ARRAY(SELECT {{ $s }}.retention_due());
    FOREACH v_name IN ARRAY v_due LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true;
            EXIT;
        END IF;
        IF NOT {{ $s }}._maintain_renew('retention', p_owner) THEN
            v_more := true; -- lost the part's lease: another owner goes on
            EXIT;
        END IF;
        COMMIT;

        v_error := NULL;
        v_pass := NULL;
        BEGIN
            v_pass := {{ $s }}._retention_begin(v_name, p_owner, greatest(p_deadline - clock_timestamp(), interval '0'), NULL);
        EXCEPTION WHEN OTHERS THEN
            v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        END;
        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_unlock(v_name);
            COMMIT;
            v_errors := v_errors || jsonb_build_object(v_name, v_error);
            CONTINUE;
        END IF;
        COMMIT;
        CONTINUE WHEN v_pass IS NULL; -- busy elsewhere, or keeps rows forever

        LOOP
            v_batch_start := clock_timestamp();
            BEGIN
                v_step_more := {{ $s }}._retention_step(v_pass);
            EXCEPTION WHEN OTHERS THEN
                v_error := format('%s (SQLSTATE %s)', SQLERRM, SQLSTATE);
            END;
            EXIT WHEN v_error IS NOT NULL;
            COMMIT;
            EXIT WHEN NOT v_step_more;
            -- Background work yields to live traffic: pause in proportion to
            -- the batch just done (retention_duty_cycle), never past the deadline.
            IF v_duty < 100 THEN
                PERFORM pg_catalog.pg_sleep(least(
                    extract(epoch FROM clock_timestamp() - v_batch_start) * (100 - v_duty) / v_duty,
                    greatest(extract(epoch FROM p_deadline - clock_timestamp()), 0)));
            END IF;
            -- keep the part's lease alive through a long policy, at a
            -- third of its TTL so a renewal is never late
            IF clock_timestamp() - v_renewed > {{ $s }}.setting_interval('maintain_lease_ttl') / 3 THEN
                IF NOT {{ $s }}._maintain_renew('retention', p_owner) THEN
                    v_error := 'lost the maintain:retention lease during the pass';
                    EXIT;
                END IF;
                v_renewed := clock_timestamp();
                COMMIT;
            END IF;
        END LOOP;

        IF v_error IS NOT NULL THEN
            PERFORM {{ $s }}._retention_finish(v_pass, 'error', v_error);
            v_errors := v_errors || jsonb_build_object(v_name, v_error);
        ELSE
            PERFORM {{ $s }}._retention_finish(v_pass, NULL, NULL);
        END IF;
        COMMIT;
        PERFORM {{ $s }}._retention_unlock(v_name);

        SELECT p.outcome, p.rows_deleted INTO v_outcome, v_rows FROM {{ $s }}.retention_passes p WHERE p.id = v_pass;
        v_deleted := v_deleted || jsonb_build_object(v_name, coalesce(v_rows, 0));
        IF v_outcome = 'budget' THEN
            v_more := true;
        END IF;
    END LOOP;

    p_result := jsonb_build_object('deleted', v_deleted, 'more', v_more);
    IF v_errors <> '{}' THEN
        p_result := p_result || jsonb_build_object('errors', v_errors);
    END IF;
END
$$;
