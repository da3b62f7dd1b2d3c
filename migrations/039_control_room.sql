-- pgsweep 0.39: control room.
--
-- The control room's SQL layer (issue 24): queue snapshots taken by the
-- maintenance part 'stats' every stats_interval and kept stats_retention
-- (stats.sql); health() findings (health.sql); browsing a queue's messages
-- page by page (browse.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- the third maintenance part
ALTER TABLE maintain_state DROP CONSTRAINT maintain_state_part_check;
ALTER TABLE maintain_state ADD CONSTRAINT maintain_state_part_check CHECK (part IN ('recovery', 'stats', 'retention'));
INSERT INTO maintain_state (part) VALUES ('stats') ON CONFLICT (part) DO NOTHING;

-- one row per queue per snapshot; the counters cover [since, taken_at)
-- (NULL in a queue's first snapshot); failures_live and retries_live are
-- the sums the next snapshot's counters grow from (stats.sql)
CREATE TABLE queue_snapshot (
    queue          text NOT NULL,
    taken_at       timestamptz NOT NULL,
    since          timestamptz,
    pending        bigint NOT NULL,
    due            bigint NOT NULL,
    in_flight      bigint NOT NULL,
    failed         bigint NOT NULL,
    dead           bigint NOT NULL,
    processed      bigint NOT NULL,
    oldest_due_age interval,
    lanes          bigint NOT NULL,
    blocked_lanes  bigint NOT NULL,
    sent           bigint,
    completed      bigint,
    failures       bigint,
    dead_lettered  bigint,
    retried        bigint,
    failures_live  bigint NOT NULL,
    retries_live   bigint NOT NULL,
    PRIMARY KEY (queue, taken_at)
);
CREATE INDEX queue_snapshot_taken ON queue_snapshot (taken_at);

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('stats_interval', '10 seconds', 'interval', '10 seconds', '1 second', '1 hour', false,
     'time between two queue snapshots (the maintenance part stats: one row per queue, read by stats_latest and stats_history)'),
    ('stats_retention', '7 days', 'interval', '7 days', '1 hour', '1 year', false,
     'how long queue snapshots are kept; older ones are deleted by the stats part (at most 10000 per run)')
ON CONFLICT (name) DO NOTHING;

-- pgsweep:changed functions/stats.sql
CREATE OR REPLACE FUNCTION _stats_snapshot_queue(p_queue text, p_kind text, p_now timestamptz, p_prev queue_snapshot)
RETURNS queue_snapshot
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v queue_snapshot;
    v_since timestamptz := p_prev.taken_at;
    v_oldest timestamptz;
    v_live_old bigint;
    v_sent bigint;
    v_moved_fail bigint := 0;
    v_moved_retry bigint := 0;
    v_dead_old bigint;
    v_n bigint;
    v_f bigint;
    v_r bigint;
BEGIN
    v.queue := p_queue;
    v.taken_at := p_now;
    v.since := v_since;
    SELECT count(*) FILTER (WHERE m.status = 'pending'),
           count(*) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= p_now
                              AND m.parked_until IS DISTINCT FROM 'infinity'),
           count(*) FILTER (WHERE m.status = 'processing'),
           count(*) FILTER (WHERE m.status = 'failed'),
           min(m.created_at) FILTER (WHERE m.status <> 'processing' AND m.visible_at <= p_now
                                       AND m.parked_until IS DISTINCT FROM 'infinity'),
           coalesce(sum(greatest(m.attempt - CASE WHEN m.status = 'processing' THEN 1 ELSE 0 END, 0))
                    , 0),
           coalesce(sum(greatest(m.attempt - 1, 0)), 0),
           count(*) FILTER (WHERE m.created_at >= v_since),
           count(*) FILTER (WHERE m.created_at < v_since)
      INTO v.pending, v.due, v.in_flight, v.failed, v_oldest, v.failures_live, v.retries_live, v_sent, v_live_old
      FROM message m
     WHERE m.queue = p_queue;
    v.oldest_due_age := p_now - v_oldest;

    SELECT count(*) INTO v.processed FROM message_processed p WHERE p.queue = p_queue;
    SELECT count(*) INTO v.dead FROM message_dead d WHERE d.queue = p_queue;
    SELECT count(*), count(*) FILTER (WHERE l.blocked_id IS NOT NULL) INTO v.lanes, v.blocked_lanes
      FROM lane l WHERE l.queue = p_queue;

    IF v_since IS NULL THEN
        RETURN v; -- the first snapshot: no interval, no counters
    END IF;

    -- rows that moved in the interval (message_processed_retention and
    -- message_dead_retention are (queue, processed_at) and (queue, dead_at))
    SELECT count(*), count(*) FILTER (WHERE p.created_at >= v_since),
           coalesce(sum(greatest(p.attempts - 1, 0)), 0)
      INTO v_n, v_f, v_r
      FROM message_processed p
     WHERE p.queue = p_queue AND p.processed_at >= v_since AND p.processed_at < p_now;
    v.completed := v_n;
    v_sent := v_sent + v_f;
    v_moved_fail := v_moved_fail + v_r;
    v_moved_retry := v_moved_retry + v_r;
    SELECT count(*), count(*) FILTER (WHERE d.created_at >= v_since), count(*) FILTER (WHERE d.created_at < v_since),
           coalesce(sum(greatest(d.attempts, 0)), 0), coalesce(sum(greatest(d.attempts - 1, 0)), 0)
      INTO v.dead_lettered, v_f, v_dead_old, v_n, v_r
      FROM message_dead d
     WHERE d.queue = p_queue AND d.dead_at >= v_since AND d.dead_at < p_now;
    v_sent := v_sent + v_f;
    v_moved_fail := v_moved_fail + v_n;
    v_moved_retry := v_moved_retry + v_r;
    v.sent := v_sent;
    IF p_kind = 'outbox' THEN
        v.completed := greatest(p_prev.pending + p_prev.in_flight + p_prev.failed - v_live_old - v_dead_old, 0);
    END IF;
    v.failures := greatest(v.failures_live + v_moved_fail - p_prev.failures_live, 0);
    v.retried := greatest(v.retries_live + v_moved_retry - p_prev.retries_live, 0);
    RETURN v;
END
$$;

CREATE OR REPLACE FUNCTION _stats_snapshot(p_now timestamptz DEFAULT NULL, p_trim int DEFAULT 10000)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_queues bigint := 0;
    v_trimmed bigint;
    q record;
    v_prev queue_snapshot;
BEGIN
    PERFORM _check_now('p_now', p_now);
    FOR q IN SELECT qu.name, qu.kind FROM queue qu ORDER BY qu.name LOOP
        SELECT * INTO v_prev FROM queue_snapshot s WHERE s.queue = q.name ORDER BY s.taken_at DESC LIMIT 1;
        IF NOT FOUND THEN
            v_prev := NULL;
        ELSIF v_prev.taken_at >= v_now THEN
            CONTINUE; -- taken already (a pinned clock, or a second session)
        END IF;
        INSERT INTO queue_snapshot SELECT (_stats_snapshot_queue(q.name, q.kind, v_now, v_prev)).*;
        v_queues := v_queues + 1;
    END LOOP;
    DELETE FROM queue_snapshot
     WHERE (queue, taken_at) IN (SELECT s.queue, s.taken_at FROM queue_snapshot s
                                  WHERE s.taken_at < v_now - setting_interval('stats_retention')
                                  ORDER BY s.taken_at LIMIT p_trim);
    GET DIAGNOSTICS v_trimmed = ROW_COUNT;
    -- a dropped queue's snapshots are expired rows like any other: they go
    -- with the retention, and no page shows them (stats_latest joins queue)
    RETURN jsonb_build_object('queues', v_queues, 'trimmed', v_trimmed);
END
$$;

CREATE OR REPLACE FUNCTION maintain_step_stats(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.part <> 'stats' OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run, _stats_snapshot(NULL), NULL, v_run.deadline, NULL);
END
$$;

CREATE OR REPLACE FUNCTION stats_latest()
RETURNS TABLE (queue text, kind text, paused boolean, taken_at timestamptz, since timestamptz,
               pending bigint, due bigint, in_flight bigint, failed bigint, dead bigint, processed bigint,
               oldest_due_age interval, lanes bigint, blocked_lanes bigint,
               sent bigint, completed bigint, failures bigint, dead_lettered bigint, retried bigint)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT q.name, q.kind, q.paused, s.taken_at, s.since,
           s.pending, s.due, s.in_flight, s.failed, s.dead, s.processed,
           s.oldest_due_age, s.lanes, s.blocked_lanes,
           s.sent, s.completed, s.failures, s.dead_lettered, s.retried
      FROM queue q
      LEFT JOIN LATERAL (SELECT * FROM queue_snapshot x WHERE x.queue = q.name
                          ORDER BY x.taken_at DESC LIMIT 1) s ON true
     ORDER BY q.name
$$;

CREATE OR REPLACE FUNCTION stats_history(p_queue text, p_from timestamptz, p_to timestamptz)
RETURNS TABLE (taken_at timestamptz, since timestamptz,
               pending bigint, due bigint, in_flight bigint, failed bigint, dead bigint, processed bigint,
               oldest_due_age interval, lanes bigint, blocked_lanes bigint,
               sent bigint, completed bigint, failures bigint, dead_lettered bigint, retried bigint)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_queue', p_queue);
    IF p_from IS NULL OR p_to IS NULL THEN
        RAISE EXCEPTION '% must be a time, got NULL', CASE WHEN p_from IS NULL THEN 'p_from' ELSE 'p_to' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_now('p_from', p_from);
    PERFORM _check_now('p_to', p_to);
    IF p_from > p_to THEN
        RAISE EXCEPTION 'p_from must not be after p_to, got % and %', p_from, p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    SELECT s.taken_at, s.since, s.pending, s.due, s.in_flight, s.failed, s.dead, s.processed,
           s.oldest_due_age, s.lanes, s.blocked_lanes,
           s.sent, s.completed, s.failures, s.dead_lettered, s.retried
      FROM queue_snapshot s
     WHERE s.queue = p_queue AND s.taken_at >= p_from AND s.taken_at < p_to
     ORDER BY s.taken_at;
END
$$;
-- pgsweep:end functions/stats.sql

-- pgsweep:changed functions/maintain.sql
CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner pg_catalog.text;
    v_run bigint;
    v_more boolean;
    v_failed boolean;
    v_msg pg_catalog.text;
    v_state pg_catalog.text;
BEGIN
    SELECT b.o_pass, b.o_owner INTO v_pass, v_owner FROM {{ .schema | default "pgsweep" }}.maintain_step_begin(p_owner, p_budget) b;
    COMMIT;

    -- recovery: bounded steps, each caught, committed and followed by a
    -- lease renewal, until the step says it is done or half the budget is
    -- spent: a recovery backlog must not starve retention (the backlog makes
    -- recovery due again at once on the next pass).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'recovery');
    COMMIT;
    IF v_run IS NOT NULL THEN
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step_recovery(v_run);
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                v_failed := true;
            END;
            IF v_failed THEN
                PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
                v_more := false;
            END IF;
            COMMIT;
            EXIT WHEN NOT v_more;
        END LOOP;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- stats: one step, the queue snapshots (stats.sql), every stats_interval.
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'stats');
    COMMIT;
    IF v_run IS NOT NULL THEN
        v_failed := false;
        BEGIN
            v_more := {{ .schema | default "pgsweep" }}.maintain_step_stats(v_run);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            v_failed := true;
        END;
        IF v_failed THEN
            PERFORM {{ .schema | default "pgsweep" }}.maintain_step_failed(v_run, v_msg, v_state);
        END IF;
        COMMIT;
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    -- retention: one call that commits per batch itself (see maintain_retention.sql).
    v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, 'retention');
    COMMIT;
    IF v_run IS NOT NULL THEN
        CALL {{ .schema | default "pgsweep" }}.maintain_step_retention(v_run);
        PERFORM {{ .schema | default "pgsweep" }}.maintain_step_part_end(v_run);
        COMMIT;
    END IF;

    PERFORM {{ .schema | default "pgsweep" }}.maintain_step_end(v_pass);
    COMMIT;
END
$$;
-- pgsweep:end functions/maintain.sql

-- pgsweep:changed functions/maintain_part.sql
CREATE OR REPLACE FUNCTION _maintain_parts()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT ARRAY['recovery', 'stats', 'retention'] $$;

CREATE OR REPLACE FUNCTION _maintain_interval(p_part text)
RETURNS interval
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT setting_interval(CASE p_part WHEN 'recovery' THEN 'recovery_interval' WHEN 'stats' THEN 'stats_interval'
                                        ELSE 'retention_check_interval' END)
$$;
-- pgsweep:end functions/maintain_part.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _routine_grants(OUT role_kind text, OUT routine text)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT 'worker', r FROM pg_catalog.unnest(ARRAY[
        'send', 'send_batch', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
        'queue_info', -- the Worker reads the queue's lease_default and max_attempts (no payloads; consume, queue_rights.sql)
        'claim_ids', 'dead_letter', -- the relay: direct dispatch, permanent broker failures
        'lease_acquire', 'lease_renew', 'lease_release', 'notify_channel', 'version']) r
    UNION ALL
    SELECT 'admin', r FROM pg_catalog.unnest(ARRAY[
        'queue_create', 'queue_configure', 'dead_requeue', 'queue_recover', 'lease_release_owner',
        'queue_pause', 'queue_resume', 'message_cancel', 'queue_purge', 'queue_drop', 'lane_skip', -- queue_ops.sql, lane.sql
        'queue_grant', 'queue_revoke', 'queue_rights', -- per-queue rights (queue_rights.sql)
        'setting_get', 'setting_set', 'setting_reset', 'setting_int', 'setting_interval',
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_builtin_sync', 'retention_due',
        'retention_run', 'maintain', 'cron_schedule', 'cron_unschedule', 'cron_job', 'cron_job_name',
        'notify_channel', 'version',
        'citus_distribute', -- Citus: distribute this install over the cluster (citus.sql)
        'retention_detach_claim', 'retention_detach_done', -- the runner's DETACH ... CONCURRENTLY (retention_detach.sql)
        -- what the invoker wrappers call: the owner proof's definer halves
        -- (retention_register.sql) and the pg_cron command (cron.sql)
        'retention_register_proved', 'retention_unregister_proved', 'retention_set_filter_proved',
        'retention_set_lease_ttl_proved', 'retention_set_strategy_proved', 'retention_set_time_zone_proved',
        'retention_owner_proof',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step_recovery', 'maintain_step_stats', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'maintain_fail_owner', -- the runner: a pass whose session is gone
        'retention_step_begin', 'retention_step', 'retention_step_claim', 'retention_step_record',
        'retention_step_end', 'retention_step_unlock', 'retention_step_pass', 'retention_step_session_state', 'retention_step_session_restore']) r
    UNION ALL
    SELECT 'monitor', r FROM pg_catalog.unnest(ARRAY['queue_counts', 'lane_stats', 'version',
        'lease_rows', 'setting_rows', 'queue_rows', -- the views' rows (lease.sql, settings.sql, queue_stats.sql)
        'stats_latest', 'stats_history']) r -- the queue snapshots (stats.sql): counts, never payloads
$$;
-- pgsweep:end functions/privileges.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
