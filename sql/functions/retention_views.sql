-- Retention: what a DBA looks at, and what maintain() asks.

-- retention_passes: the pass history; a running pass whose session is gone shows as abandoned.
CREATE OR REPLACE VIEW retention_passes AS
SELECT p.id, p.policy, p.owner, p.mode, p.strategy,
       CASE WHEN p.outcome = 'running' AND NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_stat_activity a
                 WHERE a.pid = p.pid AND (a.backend_start IS NULL OR a.backend_start = p.backend_start))
            THEN 'abandoned' ELSE p.outcome END AS outcome,
       p.started_at, p.finished_at, p.last_batch_at,
       coalesce(p.finished_at, p.last_batch_at, p.started_at) - p.started_at AS elapsed,
       p.rows_deleted, p.batches, p.units, p.lease_token, p.planned_sweep, p.error, p.deferred, p.partitions_dropped
  FROM retention_pass p;

-- retention_policies: every policy with its last pass.
CREATE OR REPLACE VIEW retention_policies AS
SELECT r.name, format('%I.%I', r.table_schema, r.table_name) AS table_name,
       r.time_column, r.time_type, r.older_than, r.status_column, r.statuses, r.filter_column, r.filter_values,
       r.batch_size, r.mode, r.run_interval, coalesce(r.time_zone, current_setting('TimeZone')) AS time_zone,
       r.lease_ttl, r.strategy, (SELECT count(*) FROM retention_unit u WHERE u.policy = r.name) AS open_units,
       lp.started_at AS last_started_at, lp.finished_at AS last_finished_at, lp.outcome AS last_outcome,
       lp.owner AS last_owner, lp.strategy AS last_strategy, lp.rows_deleted AS last_rows_deleted,
       lp.batches AS last_batches, lp.elapsed AS last_elapsed, lp.error AS last_error,
       r.owner -- every run deletes as this role: maintenance needs GRANT <owner> TO <its role>
  FROM retention_policy r
  LEFT JOIN LATERAL (
      SELECT * FROM retention_passes p WHERE p.policy = r.name ORDER BY p.id DESC LIMIT 1) lp ON true;

-- retention_due lists the due policies, oldest first: the interval passed
-- since the last pass began, or at once when that pass left work behind
-- (budget, lease_lost, deferred, abandoned, detached tables); an error waits
-- for the interval. The p_now overload is for tests.
CREATE OR REPLACE FUNCTION retention_due(p_now timestamptz)
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT _check_now('p_now', p_now);
    SELECT r.name
      FROM retention_policy r
      LEFT JOIN LATERAL (SELECT p.started_at AS at, p.outcome
                           FROM retention_passes p
                          -- a runner's concurrent detach (retention_detach.sql) is not the policy's pass
                          WHERE p.policy = r.name AND p.strategy IS DISTINCT FROM 'detach_concurrently'
                          ORDER BY p.id DESC LIMIT 1) lp ON true
     WHERE r.older_than IS NOT NULL
       AND (lp.at IS NULL OR lp.at + r.run_interval <= (SELECT coalesce(p_now, clock_timestamp()))
            OR lp.outcome IN ('budget', 'lease_lost', 'deferred', 'abandoned')
            -- partitions a pass detached: the next pass drops them (retention_partition.sql)
            OR EXISTS (SELECT 1 FROM retention_unit u WHERE u.policy = r.name AND u.kind = 'detached'))
     ORDER BY lp.at NULLS FIRST, r.name;
$$;

CREATE OR REPLACE FUNCTION retention_due()
RETURNS SETOF text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT retention_due(NULL::timestamptz) $$;
