-- The pass histories a page at a time, newest first (monitor): the rows of
-- the views maintenance_passes (history.sql) and retention_passes
-- (retention_views.sql), keyset-paginated by id: p_before NULL for the
-- first page, then the last id of the previous page. Ids only grow, so a
-- pass that exists throughout is never repeated nor skipped; passes begun
-- meanwhile are newer than the first page and show on it when it is read
-- again.

-- browse_maintenance_passes: at most p_limit (1..1000) maintenance passes
-- with an id below p_before. Reads the page's entries of maintain_pass's
-- primary key, backwards, and each pass's runs (maintain_run_pass).
CREATE OR REPLACE FUNCTION browse_maintenance_passes(p_before bigint DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS TABLE (id bigint, owner text, started_at timestamptz, finished_at timestamptz, duration interval,
               recovery text, retention text, counts jsonb, error text, stats text, schedules text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_before IS NOT NULL THEN
        PERFORM _check_int('p_before', p_before, 1, 9223372036854775807);
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT v.id, v.owner, v.started_at, v.finished_at, v.duration, v.recovery, v.retention, v.counts, v.error, v.stats,
           v.schedules
      FROM maintenance_passes v
     WHERE v.id < coalesce(p_before, 9223372036854775807)
     ORDER BY v.id DESC
     LIMIT p_limit;
END
$$;

-- browse_retention_passes: at most p_limit (1..1000) retention passes with
-- an id below p_before, of the policy p_policy (NULL: of every policy; an
-- unknown policy is 22023). Reads the page's entries of retention_pass's
-- primary key backwards, or of its index (policy, id) for one policy.
CREATE OR REPLACE FUNCTION browse_retention_passes(p_policy text DEFAULT NULL, p_before bigint DEFAULT NULL,
                                                   p_limit int DEFAULT 50)
RETURNS TABLE (id bigint, policy text, owner text, mode text, strategy text, outcome text, started_at timestamptz,
               finished_at timestamptz, last_batch_at timestamptz, elapsed interval, rows_deleted bigint, batches int,
               units int, lease_token bigint, planned_sweep bigint, error text, deferred int, partitions_dropped int)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_policy IS NOT NULL THEN
        PERFORM _check_text('p_policy', p_policy);
        IF NOT EXISTS (SELECT 1 FROM retention_policy r WHERE r.name = p_policy) THEN
            RAISE EXCEPTION 'p_policy must name a registered retention policy, got unknown policy "%"', p_policy
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF p_before IS NOT NULL THEN
        PERFORM _check_int('p_before', p_before, 1, 9223372036854775807);
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    IF p_policy IS NULL THEN
        RETURN QUERY
        SELECT v.id, v.policy, v.owner, v.mode, v.strategy, v.outcome, v.started_at, v.finished_at, v.last_batch_at,
               v.elapsed, v.rows_deleted, v.batches, v.units, v.lease_token, v.planned_sweep, v.error, v.deferred,
               v.partitions_dropped
          FROM retention_passes v
         WHERE v.id < coalesce(p_before, 9223372036854775807)
         ORDER BY v.id DESC
         LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT v.id, v.policy, v.owner, v.mode, v.strategy, v.outcome, v.started_at, v.finished_at, v.last_batch_at,
               v.elapsed, v.rows_deleted, v.batches, v.units, v.lease_token, v.planned_sweep, v.error, v.deferred,
               v.partitions_dropped
          FROM retention_passes v
         WHERE v.policy = p_policy AND v.id < coalesce(p_before, 9223372036854775807)
         ORDER BY v.policy DESC, v.id DESC
         LIMIT p_limit;
    END IF;
END
$$;
