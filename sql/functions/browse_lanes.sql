-- browse_lanes (monitor): the lanes of a queue a page at a time, blocked
-- lanes first, then the others, each part in name order; the figures of
-- _lane_figures (lane.sql), with waiting counted up to 100 (waiting_more:
-- there are more; lane_stats counts them all).
--
-- Keyset pagination on (blocked, name): the first page passes p_after NULL;
-- the next passes the last row's lane as p_after and its blocked as
-- p_after_blocked (NULL with p_after NULL: the first page; false with
-- p_after NULL: the first lane that is not blocked). A page is stable under
-- concurrent sends and claims: a lane that exists, and is blocked or not,
-- throughout is never repeated nor skipped; a lane that becomes blocked (or
-- is skipped) between two calls is in the other part's pages, and one that
-- empties is gone.
--
-- may_skip is true on a blocked lane when the caller may call lane_skip on
-- it (the queue's manage right, by default S_admin's, and EXECUTE on
-- lane_skip): the dashboard shows its button only then; lane_skip checks
-- again.
--
-- Cost: O(page). The blocked part reads the partial index lane_blocked
-- (queue, name) WHERE blocked_id IS NOT NULL from p_after on; the others
-- read lane's primary key (queue, name) from p_after on and pass over the
-- blocked lanes among them. Each lane returned costs the probes of
-- _lane_figures and at most 101 entries of its waiting messages.
-- _check_cursor: a keyset cursor (the previous page's last key) is only
-- compared, never stored or shown, so it is held to a length alone: a name
-- stored under an older, looser rule (before 0.34: spaces at either end,
-- control characters) must not stop the pages at the row it names.
CREATE OR REPLACE FUNCTION _check_cursor(p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pg_catalog.length(p_value) > 200 THEN
        RAISE EXCEPTION '% must be at most 200 characters, got % characters', p_arg, pg_catalog.length(p_value)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION browse_lanes(p_queue text, p_after text DEFAULT NULL, p_limit int DEFAULT 50,
                                        p_after_blocked boolean DEFAULT NULL)
RETURNS TABLE (lane text, blocked boolean, waiting bigint, waiting_more boolean, head_id bigint, head_attempt int,
               head_state text, oldest_age interval, may_skip boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_names text[];
    v_more text[];
    v_may boolean;
BEGIN
    PERFORM _queue_get(p_queue);
    IF p_after IS NOT NULL THEN
        PERFORM _check_cursor('p_after', p_after);
        IF p_after_blocked IS NULL THEN
            RAISE EXCEPTION 'p_after_blocked must be true or false with p_after (the previous page''s last row''s blocked), got NULL'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    IF coalesce(p_after_blocked, true) THEN
        SELECT array_agg(b.name ORDER BY b.name) INTO v_names
          FROM (SELECT l.name FROM lane l
                 WHERE l.queue = p_queue AND l.blocked_id IS NOT NULL AND l.name > coalesce(p_after, '')
                 ORDER BY l.name
                 LIMIT p_limit) b;
    END IF;
    IF coalesce(cardinality(v_names), 0) < p_limit THEN
        SELECT array_agg(b.name ORDER BY b.name) INTO v_more
          FROM (SELECT l.name FROM lane l
                 WHERE l.queue = p_queue AND l.blocked_id IS NULL
                   AND l.name > coalesce(CASE WHEN p_after_blocked = false THEN p_after END, '')
                 ORDER BY l.name
                 LIMIT p_limit - coalesce(cardinality(v_names), 0)) b;
        v_names := coalesce(v_names, '{}') || coalesce(v_more, '{}');
    END IF;
    -- the caller as _queue_require names it (queue_rights.sql)
    v_may := _queue_allowed(p_queue, 'manage')
             AND pg_catalog.has_function_privilege(
                     CASE WHEN pg_catalog.current_setting('role') = 'none' THEN pg_catalog.session_user()
                          ELSE pg_catalog.current_setting('role')::name END,
                     'lane_skip(text, text)'::regprocedure, 'EXECUTE');
    RETURN QUERY
    SELECT f.lane, f.blocked, f.waiting, f.waiting_more, f.head_id, f.head_attempt, f.head_state, f.oldest_age,
           f.blocked AND v_may
      FROM _lane_figures(p_queue, v_names, 100, v_now) f;
END
$$;
