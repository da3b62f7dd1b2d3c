-- pgTAP helpers shared by the security suites (included with \ir; pg_prove
-- runs sql/tests/*.sql only, not this folder). Each runs p_sql as p_role
-- inside the test's transaction and becomes no role again afterwards.
--   as_role_err: 'ok' when p_sql succeeds (its effects stay), else
--                'SQLSTATE: message';
--   as_role:     'ok' or the SQLSTATE alone;
--   as_role_val: the first column of p_sql's first row (errors propagate).
CREATE FUNCTION pg_temp.as_role_err(p_role text, p_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text := 'ok';
BEGIN
    PERFORM set_config('role', p_role, true);
    BEGIN
        EXECUTE p_sql;
    EXCEPTION WHEN OTHERS THEN
        v := SQLSTATE || ': ' || SQLERRM;
    END;
    PERFORM set_config('role', 'none', true);
    RETURN v;
END $$;
CREATE FUNCTION pg_temp.as_role(p_role text, p_sql text) RETURNS text LANGUAGE sql AS $$
    SELECT split_part(pg_temp.as_role_err(p_role, p_sql), ':', 1) $$;
CREATE FUNCTION pg_temp.as_role_val(p_role text, p_sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    PERFORM set_config('role', p_role, true);
    EXECUTE p_sql INTO v;
    PERFORM set_config('role', 'none', true);
    RETURN v;
END $$;
