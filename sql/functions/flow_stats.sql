-- What flow control is doing (flow.sql, flow_groups.sql): a monitor's
-- reads, not hot paths.

-- _flow_rate_used: the tokens of bucket p_grp of queue p_queue spent at
-- p_now and not yet refilled (0..p_burst; 0 without a bucket: a group's is
-- made full), for a rate of p_n per p_per. p_burst means the claims wait
-- for the rate.
CREATE OR REPLACE FUNCTION _flow_rate_used(p_queue text, p_grp text, p_n int, p_per interval, p_burst int,
                                           p_now timestamptz)
RETURNS int
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_n IS NOT NULL
                THEN p_burst - coalesce(_flow_tokens(p_queue, p_grp, p_n / extract(epoch FROM p_per), p_burst, p_now), p_burst) END
$$;

-- flow_stats: the flow control of queue p_queue: its settings
-- (queue_configure; rate and group_rate as 'N/s' or 'N/min', rate_burst
-- the one in force: N when unset; group_overrides the number of groups
-- with an override) and what claims use of them now: in_flight, the
-- messages held under max_in_flight (the live grants: leases claimed
-- before the limit was set count from the moment it was); rate_used, the
-- tokens spent and not yet refilled (rate_burst: claims wait for the
-- rate). NULL for a setting the queue does not have. One row.
CREATE OR REPLACE FUNCTION flow_stats(p_queue text)
RETURNS TABLE (max_in_flight int, in_flight int, rate text, rate_burst int, rate_used int,
               group_max_in_flight int, group_rate text, group_overrides int)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz := clock_timestamp();
BEGIN
    v_q := _queue_get(p_queue);
    RETURN QUERY
    SELECT v_q.max_in_flight,
           CASE WHEN v_q.max_in_flight IS NOT NULL THEN _flow_used(p_queue, '', NULL, v_now) END,
           _flow_rate_text(v_q.rate, v_q.rate_per),
           coalesce(v_q.rate_burst, v_q.rate),
           _flow_rate_used(p_queue, '', v_q.rate, v_q.rate_per, coalesce(v_q.rate_burst, v_q.rate), v_now),
           v_q.group_max_in_flight,
           _flow_rate_text(v_q.group_rate, v_q.group_rate_per),
           (SELECT count(*)::int FROM jsonb_object_keys(coalesce(v_q.group_overrides, '{}')));
END
$$;

-- group_stats: the groups of queue p_queue with messages, those waiting
-- longest first, at most p_limit (1..10000): in_flight (leases not yet
-- expired), waiting (every other message of the group: due, scheduled,
-- retrying, behind a lane's head), the age of the oldest waiting one, the
-- group's max_in_flight and rate (its override, else the queue's
-- group_max_in_flight and group_rate; NULL: none) and rate_used (its
-- bucket's tokens spent and not yet refilled: the rate's N means its
-- claims wait for the rate). A read of the queue's grouped messages (the
-- indexes message_group and message_group_parked: a queue without groups
-- costs two index probes), not of its others.
CREATE OR REPLACE FUNCTION group_stats(p_queue text, p_limit int DEFAULT 1000)
RETURNS TABLE (group_name text, in_flight bigint, waiting bigint, oldest_age interval, max_in_flight int,
               rate text, rate_used int)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    v_q := _queue_get(p_queue);
    RETURN QUERY
    SELECT g.grp, g.in_flight, g.waiting, g.oldest_age,
           _flow_group_limit_of(v_q.group_overrides, v_q.group_max_in_flight, g.grp),
           _flow_rate_text(r.n, r.per), _flow_rate_used(p_queue, g.grp, r.n, r.per, r.n, v_now)
      FROM (SELECT m.grp,
                   count(*) FILTER (WHERE m.status = 'processing' AND m.visible_at > v_now) AS in_flight,
                   count(*) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS waiting,
                   v_now - min(m.created_at) FILTER (WHERE NOT (m.status = 'processing' AND m.visible_at > v_now)) AS oldest_age
              FROM (SELECT m.grp, m.status, m.visible_at, m.created_at FROM message m -- message_group
                     WHERE m.queue = p_queue AND m.parked_until IS NULL AND m.grp IS NOT NULL
                    UNION ALL
                    SELECT m.grp, m.status, m.visible_at, m.created_at FROM message m -- message_group_parked
                     WHERE m.queue = p_queue AND m.parked_until IS NOT NULL AND m.grp IS NOT NULL) m
             GROUP BY m.grp) g
     CROSS JOIN LATERAL _flow_group_rate_of(v_q.group_overrides, v_q.group_rate, v_q.group_rate_per, g.grp) r
     ORDER BY g.oldest_age DESC NULLS LAST, g.grp
     LIMIT p_limit;
END
$$;
