-- pgsweep 0.40: control room.
--
-- The control room's SQL layer (issue 24): queue snapshots taken by the
-- maintenance part 'stats' every stats_interval and kept stats_retention
-- (stats.sql); health() findings (health.sql); browsing a queue's messages
-- page by page (browse.sql), its lanes (browse_lanes.sql), the leases
-- (lease.sql) and the pass histories (browse_passes.sql).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- the third maintenance part
ALTER TABLE maintain_state DROP CONSTRAINT maintain_state_part_check;
ALTER TABLE maintain_state ADD CONSTRAINT maintain_state_part_check CHECK (part IN ('recovery', 'stats', 'retention'));
INSERT INTO maintain_state (part) VALUES ('stats') ON CONFLICT (part) DO NOTHING;

-- one row per queue per snapshot, written and read by maintenance and the
-- monitor's functions on the coordinator: named maintain_* so that
-- citus_distribute leaves it a plain local table (citus.sql, _citus_tables),
-- like the maintenance history. The counters cover [since, taken_at)
-- (NULL in a queue's first snapshot); failures_live and retries_live are
-- the sums the next snapshot's counters grow from (stats.sql)
CREATE TABLE maintain_snapshot (
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
CREATE INDEX maintain_snapshot_taken ON maintain_snapshot (taken_at);

-- the blocked lanes of a queue in name order: browse_lanes' first part
-- (browse_lanes.sql). Partial: a lane that is not blocked has no entry, so
-- sends and promotions, which insert and delete lane rows, pay nothing for it.
-- In a DO block, as 023's index: on a distributed install Citus propagates
-- the index to the shards and refuses to do so from a multi-statement string.
DO $$
BEGIN
    EXECUTE 'CREATE INDEX lane_blocked ON lane (queue, name) WHERE blocked_id IS NOT NULL';
END
$$;

INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('stats_interval', '10 seconds', 'interval', '10 seconds', '1 second', '1 hour', false,
     'time between two queue snapshots (the maintenance part stats: one row per queue, read by stats_latest and stats_history)'),
    ('stats_retention', '7 days', 'interval', '7 days', '1 hour', '1 year', false,
     'how long queue snapshots are kept; older ones are deleted by the stats part (at most 10000 per run)')
ON CONFLICT (name) DO NOTHING;

-- health()'s thresholds (health.sql, docs/dashboard.md)
INSERT INTO setting (name, value, kind, default_value, min_value, max_value, infinite_ok, description) VALUES
    ('health_transaction_age', '5 minutes', 'interval', '5 minutes', '0 seconds', '1 day', false,
     'health: a transaction of this database open longer than this is a long_transaction finding'),
    ('health_idle_in_transaction_age', '1 minute', 'interval', '1 minute', '0 seconds', '1 day', false,
     'health: a session idle in its transaction longer than this is an idle_in_transaction finding'),
    ('health_prepared_age', '5 minutes', 'interval', '5 minutes', '0 seconds', '1 day', false,
     'health: a prepared transaction older than this is a prepared_transaction finding'),
    ('health_slot_xmin_xids', '10000000', 'integer', '10000000', '0', '2000000000', false,
     'health: an active replication slot whose xmin is older than this many transactions is a replication_slot finding (an inactive slot always is)'),
    ('health_lock_wait', '10 seconds', 'interval', '10 seconds', '0 seconds', '1 hour', false,
     'health: a session of the install''s roles waiting longer than this for a lock is a lock_wait finding'),
    ('health_due_age', '5 minutes', 'interval', '5 minutes', '0 seconds', '7 days', false,
     'health: a queue whose oldest due message (latest snapshot) waited longer than this is a queue_behind finding'),
    ('health_window', '15 minutes', 'interval', '15 minutes', '1 minute', '1 day', false,
     'health: the window dead_letters_growing counts dead letters in'),
    ('health_dead_letters', '1', 'integer', '1', '1', '1000000000', false,
     'health: this many dead letters in health_window make a dead_letters_growing finding'),
    ('health_dead_tuples', '100000', 'integer', '100000', '0', '1000000000000', false,
     'health: a table with at least this many dead rows (and health_dead_tuples_percent of its live rows) is a dead_tuples finding'),
    ('health_dead_tuples_percent', '20', 'integer', '20', '0', '100000', false,
     'health: dead rows as a percentage of live rows that, with health_dead_tuples, make a dead_tuples finding'),
    ('health_maintain_intervals', '30', 'integer', '30', '1', '100000', false,
     'health: no maintenance pass finished for this many runner_interval is a maintenance_not_running finding'),
    ('health_index_bloat_percent', '50', 'integer', '50', '1', '100', false,
     'health: a btree index of the install or of a registered table whose estimated free space is at least this percentage (and which is at least health_index_bloat_mb) is an index_bloat finding'),
    ('health_index_bloat_mb', '100', 'integer', '100', '0', '10000000', false,
     'health: indexes smaller than this many megabytes are never an index_bloat finding'),
    ('health_max_per_kind', '20', 'integer', '20', '1', '100000', false,
     'health: at most this many findings of one kind; the rest become one row of that kind, object ''N more''')
ON CONFLICT (name) DO NOTHING;

-- pgsweep:changed functions/stats.sql
CREATE OR REPLACE FUNCTION _stats_snapshot_queue(p_queue text, p_kind text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    p_prev maintain_snapshot; -- the latest snapshot (all NULL: none)
    v maintain_snapshot;
    v_since timestamptz;
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
    SELECT * INTO p_prev FROM maintain_snapshot s WHERE s.queue = p_queue ORDER BY s.taken_at DESC LIMIT 1;
    IF p_prev.taken_at >= p_now THEN
        RETURN false;
    END IF;
    v_since := p_prev.taken_at;
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
        INSERT INTO maintain_snapshot SELECT (v).*;
        RETURN true; -- the first snapshot: no interval, no counters
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
    INSERT INTO maintain_snapshot SELECT (v).*;
    RETURN true;
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
BEGIN
    PERFORM _check_now('p_now', p_now);
    FOR q IN SELECT qu.name, qu.kind FROM queue qu ORDER BY qu.name LOOP
        IF _stats_snapshot_queue(q.name, q.kind, v_now) THEN
            v_queues := v_queues + 1;
        END IF;
    END LOOP;
    DELETE FROM maintain_snapshot
     WHERE (queue, taken_at) IN (SELECT s.queue, s.taken_at FROM maintain_snapshot s
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
BEGIN
    RETURN _maintain_step(p_run, 'stats');
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
      LEFT JOIN LATERAL (SELECT * FROM maintain_snapshot x WHERE x.queue = q.name
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
      FROM maintain_snapshot s
     WHERE s.queue = p_queue AND s.taken_at >= p_from AND s.taken_at < p_to
     ORDER BY s.taken_at;
END
$$;
-- pgsweep:end functions/stats.sql

-- pgsweep:changed functions/maintain.sql
CREATE OR REPLACE FUNCTION _maintain_step(p_run bigint, p_part text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.part <> p_part OR v_run.status <> 'running' THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run,
                               CASE p_part
                                   WHEN 'recovery' THEN _maintain_recovery(v_run.owner, v_run.deadline)
                                   WHEN 'stats' THEN _stats_snapshot(NULL)
                               END,
                               NULL, v_run.deadline, NULL);
END
$$;

CREATE OR REPLACE FUNCTION maintain_step_recovery(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN _maintain_step(p_run, 'recovery');
END
$$;

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
    SELECT CASE p_part
           WHEN 'recovery' THEN setting_interval('recovery_interval')
           -- at most an hour: one slow run (a lock wait, an I/O stall) must
           -- not silence the snapshots, and the findings read from them,
           -- for ten times as long
           WHEN 'stats' THEN greatest(setting_interval('stats_interval'),
                                      least(coalesce((SELECT (r.finished_at - r.started_at) * 10 FROM maintain_run r
                                                       WHERE r.part = 'stats' AND r.finished_at IS NOT NULL
                                                       ORDER BY r.id DESC LIMIT 1), interval '0'), interval '1 hour'))
           ELSE setting_interval('retention_check_interval') END
$$;
-- pgsweep:end functions/maintain_part.sql

-- pgsweep:changed functions/privileges.sql
CREATE OR REPLACE FUNCTION _invoker_routines()
RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ARRAY[
        -- the owner proofs: the caller's role becomes (or must own) the policy (retention_register.sql)
        'retention_register', 'retention_unregister', 'retention_set_filter', 'retention_set_lease_ttl',
        'retention_set_strategy', 'retention_set_time_zone', 'retention_resolve_table', 'retention_owner_proof',
        -- the step that runs a statement as the policy's owner (retention_sql.sql)
        'retention_step', '_grant_all',
        -- pg_cron schedules a job as current_user: the caller's (a role the DBA granted cron to)
        'cron_schedule', 'cron_unschedule', 'cron_job',
        -- the pacing's view of live traffic, with the maintenance role's eyes (maintain_retention.sql)
        'maintain_step_traffic',
        -- the server's health with the caller's eyes (pg_monitor shows other roles' sessions: health.sql)
        'health', 'health_server']::text[]
$$;

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
        'queue_create', 'queue_configure', 'dead_requeue', 'dead_delete', 'queue_recover', 'lease_release_owner',
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
        'stats_latest', 'stats_history', -- the queue snapshots (stats.sql): counts, never payloads
        'health', 'health_server', 'health_install', -- the findings (health.sql): no payload, header or query text
        'cron_job_name', -- the name health_server looks for in pg_cron's jobs (cron.sql)
        'browse_messages', 'browse_message', -- a queue's messages by state, one by id (browse.sql): payloads only with the browse right
        'browse_lanes', 'browse_leases', -- keyset pages of a queue's lanes (browse_lanes.sql) and of the leases (lease.sql)
        'browse_maintenance_passes', 'browse_retention_passes']) r -- keyset pages of the pass histories (browse_passes.sql)
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/health.sql
CREATE OR REPLACE FUNCTION _health_tables()
RETURNS SETOF oid
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.oid FROM pg_catalog.pg_class c
     WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace AND c.relkind = 'r'
    UNION
    SELECT coalesce(pt.relid, rc.oid)
      FROM retention_policy rp
      JOIN pg_catalog.pg_namespace rn ON rn.nspname = rp.table_schema
      JOIN pg_catalog.pg_class rc ON rc.relnamespace = rn.oid AND rc.relname = rp.table_name
      LEFT JOIN LATERAL pg_catalog.pg_partition_tree(rc.oid) pt ON pt.isleaf -- a plain table has no tree
$$;

CREATE OR REPLACE FUNCTION health_install()
RETURNS TABLE (severity text, kind text, object text, detail text, advice text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_due_age interval := setting_interval('health_due_age');
    v_window interval := setting_interval('health_window');
    v_dead_letters bigint := setting_int('health_dead_letters');
    v_dead_min bigint := setting_int('health_dead_tuples');
    v_dead_pct bigint := setting_int('health_dead_tuples_percent');
    v_late interval := setting_interval('runner_interval') * setting_int('health_maintain_intervals');
    v_bloat_pct bigint := setting_int('health_index_bloat_percent');
    v_bloat_bytes bigint := setting_int('health_index_bloat_mb') * 1048576;
    v_last timestamptz;
    v_n bigint;
    r record;
BEGIN
    -- queues, as of their latest snapshot
    FOR r IN SELECT s.* FROM stats_latest() s WHERE s.taken_at IS NOT NULL LOOP
        IF r.oldest_due_age >= v_due_age THEN
            severity := 'warning'; kind := 'queue_behind'; object := format('queue %s', r.queue);
            detail := format('its oldest due message has waited %s (%s due, %s in flight%s; snapshot of %s)',
                             justify_hours(date_trunc('second', r.oldest_due_age)), r.due, r.in_flight,
                             CASE WHEN r.paused THEN ', the queue is paused' ELSE '' END, r.taken_at);
            advice := CASE WHEN r.paused THEN 'The queue is paused: queue_resume resumes its claims.'
                           ELSE 'Its consumers do not keep up or are stopped: check the workers (leases, pgsweep status), add workers or claim bigger batches.' END;
            RETURN NEXT;
        END IF;
        IF r.blocked_lanes > 0 THEN
            severity := 'warning'; kind := 'blocked_lanes'; object := format('queue %s', r.queue);
            detail := format('%s lane(s) stopped by a dead letter (lane_dead block; snapshot of %s)', r.blocked_lanes, r.taken_at);
            advice := 'lane_stats lists them, blocked first: dead_requeue the dead letter once its cause is fixed, or lane_skip moves the lane on without it.';
            RETURN NEXT;
        END IF;
        SELECT coalesce(sum(s.dead_lettered), 0) INTO v_n
          FROM maintain_snapshot s WHERE s.queue = r.queue AND s.taken_at > v_now - v_window;
        IF v_n >= v_dead_letters THEN
            severity := 'warning'; kind := 'dead_letters_growing'; object := format('queue %s', r.queue);
            detail := format('%s message(s) dead-lettered in the last %s (%s dead letters)', v_n, _interval_text(v_window), r.dead);
            advice := 'Read their errors (browse the dead letters), fix the cause, then dead_requeue them; retention removes old ones (dead_retention).';
            RETURN NEXT;
        END IF;
    END LOOP;

    -- maintenance: not running, or a part failing
    SELECT p.finished_at INTO v_last FROM maintain_pass p WHERE p.finished_at IS NOT NULL ORDER BY p.id DESC LIMIT 1;
    IF v_last IS NULL OR v_last < v_now - v_late THEN
        severity := 'critical'; kind := 'maintenance_not_running'; object := 'maintain';
        detail := CASE WHEN v_last IS NULL THEN 'no maintenance pass has finished (in the kept history)'
                       ELSE format('the last pass finished %s ago (more than %s runner intervals)',
                                   justify_hours(date_trunc('second', v_now - v_last)), setting_int('health_maintain_intervals')) END;
        advice := 'Without maintain() expired leases are not recovered, retention does not run and the snapshots stop: run `pgsweep run`, or schedule maintain() with pg_cron (cron_schedule).';
        RETURN NEXT;
    END IF;
    FOR r IN SELECT st.part, (SELECT mr.error FROM maintain_run mr WHERE mr.part = st.part ORDER BY mr.id DESC LIMIT 1) AS error
               FROM maintain_state st WHERE st.last_status = 'failed' ORDER BY st.part LOOP
        severity := 'warning'; kind := 'maintenance_failing'; object := format('part %s', r.part);
        detail := format('its last run failed: %s', coalesce(r.error, 'no error recorded'));
        advice := 'The error says why; the part runs again on the next pass. maintenance_runs keeps the history.';
        RETURN NEXT;
    END LOOP;

    -- retention: the latest pass of each policy
    FOR r IN SELECT rp.name, lp.outcome, lp.error, lp.started_at
               FROM retention_policy rp
               JOIN LATERAL (SELECT p.outcome, p.error, p.started_at FROM retention_pass p
                              WHERE p.policy = rp.name ORDER BY p.id DESC LIMIT 1) lp ON true
              WHERE lp.outcome IN ('error', 'budget')
              ORDER BY rp.name LOOP
        IF r.outcome = 'error' THEN
            severity := 'warning'; kind := 'retention_failing'; object := format('policy %s', r.name);
            detail := format('its last pass (%s) failed: %s', r.started_at, coalesce(r.error, 'no error recorded'));
            advice := 'Fix what the error names (a missing grant to the policy''s owner, a dropped column); retention_passes keeps the history.';
        ELSE
            severity := 'info'; kind := 'retention_behind'; object := format('policy %s', r.name);
            detail := format('its last pass (%s) stopped on its budget with rows left', r.started_at);
            advice := 'The next passes go on where it stopped; if this stays, give maintain() a bigger budget or run retention_run for the policy.';
        END IF;
        RETURN NEXT;
    END LOOP;

    -- tables: the install's and every table a policy covers (_health_tables)
    FOR r IN
        SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS tab, s.n_dead_tup, s.n_live_tup, s.last_vacuum, s.last_autovacuum,
               EXISTS (SELECT 1 FROM pg_catalog.unnest(c.reloptions) o
                        WHERE pg_catalog.split_part(o, '=', 1) = 'autovacuum_enabled'
                          AND pg_catalog.lower(pg_catalog.split_part(o, '=', 2)) IN ('false', 'off', 'no', '0', 'f', 'n', 'of', 'fa', 'fal', 'fals')) AS av_off
          FROM _health_tables() t(oid)
          JOIN pg_catalog.pg_class c ON c.oid = t.oid
          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
          LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = t.oid
         ORDER BY 1
    LOOP
        IF r.av_off THEN
            severity := 'warning'; kind := 'autovacuum_disabled'; object := format('table %s', r.tab);
            detail := 'autovacuum_enabled is off for this table: nothing removes its dead rows but a manual VACUUM';
            advice := format('ALTER TABLE %s RESET (autovacuum_enabled)', r.tab);
            RETURN NEXT;
        END IF;
        IF r.n_dead_tup > 0 AND r.n_dead_tup >= v_dead_min AND r.n_dead_tup * 100 >= v_dead_pct * r.n_live_tup THEN
            severity := 'warning'; kind := 'dead_tuples'; object := format('table %s', r.tab);
            detail := format('%s dead rows, %s live; last vacuum %s, last autovacuum %s', r.n_dead_tup, r.n_live_tup,
                             coalesce(r.last_vacuum::text, 'never'), coalesce(r.last_autovacuum::text, 'never'));
            advice := 'Dead rows that vacuum cannot remove are kept by the xmin horizon: look for a long transaction, an idle-in-transaction session, a replication slot or a prepared transaction (findings above). Otherwise autovacuum does not keep up: lower the table''s autovacuum_vacuum_scale_factor.';
            RETURN NEXT;
        END IF;
    END LOOP;

    -- btree indexes of the same tables: their size against what their
    -- entries need (an estimate from the statistics: reltuples, and each key
    -- column's average width where the owner may read it, else its type's
    -- length, else 32 bytes). A queue's indexes bloat when vacuum falls
    -- behind: pages emptied by deletes are reused only for the same key range.
    FOR r IN
        WITH i AS (
            SELECT ic.oid, pg_catalog.format('%I.%I', n.nspname, ic.relname) AS idx, ic.relpages, ic.reltuples,
                   (SELECT pg_catalog.sum(coalesce(st.avg_width, nullif(ty.typlen, -1), 32))
                      FROM pg_catalog.unnest(x.indkey) k(attnum)
                      LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
                      LEFT JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
                      LEFT JOIN pg_catalog.pg_stats st ON st.schemaname = n.nspname AND st.attname = a.attname
                            AND st.tablename = (SELECT tc.relname FROM pg_catalog.pg_class tc WHERE tc.oid = x.indrelid)) AS width
              FROM _health_tables() t(oid)
              JOIN pg_catalog.pg_index x ON x.indrelid = t.oid
              JOIN pg_catalog.pg_class ic ON ic.oid = x.indexrelid
              JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
              JOIN pg_catalog.pg_namespace n ON n.oid = ic.relnamespace
             WHERE ic.reltuples >= 0)
        SELECT i.idx, i.relpages::bigint * pg_catalog.current_setting('block_size')::bigint AS bytes,
               -- entries: 8-byte header and 4-byte line pointer, the key padded to 8; pages 90% full; the meta page
               1 + pg_catalog.ceil(i.reltuples * (12 + (i.width + 7) / 8 * 8)
                                   / (0.9 * (pg_catalog.current_setting('block_size')::int - 40)))::bigint AS need_pages,
               i.relpages
          FROM i
         WHERE i.relpages::bigint * pg_catalog.current_setting('block_size')::bigint >= v_bloat_bytes
         ORDER BY 1
    LOOP
        IF r.relpages > r.need_pages AND (r.relpages - r.need_pages) * 100 >= v_bloat_pct * r.relpages THEN
            severity := 'warning'; kind := 'index_bloat'; object := format('index %s', r.idx);
            detail := format('%s, of which about %s%% is free space (an estimate from the statistics: %s pages hold what about %s would)',
                             pg_catalog.pg_size_pretty(r.bytes), (r.relpages - r.need_pages) * 100 / r.relpages, r.relpages, r.need_pages);
            advice := format('REINDEX INDEX CONCURRENTLY %s gives the space back without blocking the queue. If it returns, vacuum falls behind: see the dead_tuples and xmin findings.', r.idx);
            RETURN NEXT;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION health_server()
RETURNS TABLE (severity text, kind text, object text, detail text, advice text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_db oid := (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
    v_sees_all boolean := pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE');
    v_xact interval;
    v_idle interval;
    v_prepared interval;
    v_slot_xids bigint;
    v_lock interval;
    v_roles text[] := ARRAY[pg_catalog.current_schema() || '_owner', pg_catalog.current_schema() || '_admin',
                            pg_catalog.current_schema() || '_worker', pg_catalog.current_schema() || '_monitor'];
    r record;
BEGIN
    SELECT pg_catalog.max(s.value) FILTER (WHERE s.name = 'health_transaction_age')::interval,
           pg_catalog.max(s.value) FILTER (WHERE s.name = 'health_idle_in_transaction_age')::interval,
           pg_catalog.max(s.value) FILTER (WHERE s.name = 'health_prepared_age')::interval,
           pg_catalog.max(s.value) FILTER (WHERE s.name = 'health_slot_xmin_xids')::bigint,
           pg_catalog.max(s.value) FILTER (WHERE s.name = 'health_lock_wait')::interval
      INTO v_xact, v_idle, v_prepared, v_slot_xids, v_lock
      FROM settings s;

    -- the xmin horizon: sessions of this database with an old transaction
    FOR r IN SELECT a.pid, a.usename, a.application_name, a.state, a.xact_start, a.state_change,
                    pg_catalog.age(a.backend_xmin) AS xmin_age, pg_catalog.age(a.backend_xid) AS xid_age
               FROM pg_catalog.pg_stat_activity a
              WHERE a.datid = v_db AND a.pid <> pg_catalog.pg_backend_pid() AND a.xact_start IS NOT NULL
                AND (a.state LIKE 'idle in transaction%' AND v_now - a.state_change >= v_idle
                     OR v_now - a.xact_start >= v_xact)
              ORDER BY a.xact_start, a.pid LOOP
        object := pg_catalog.format('pid %s', r.pid);
        IF r.state LIKE 'idle in transaction%' AND v_now - r.state_change >= v_idle THEN
            severity := 'warning'; kind := 'idle_in_transaction';
            detail := pg_catalog.format('user %s (application %s): %s for %s, its transaction open for %s%s',
                r.usename, pg_catalog.quote_literal(r.application_name), r.state,
                pg_catalog.date_trunc('second', v_now - r.state_change), pg_catalog.date_trunc('second', v_now - r.xact_start),
                CASE WHEN r.xmin_age IS NOT NULL OR r.xid_age IS NOT NULL
                     THEN pg_catalog.format(', holding the xmin horizon back by %s transactions', greatest(r.xmin_age, r.xid_age)) ELSE '' END);
            advice := pg_catalog.format('The application opened a transaction and stopped talking: have it commit or roll back; SELECT pg_terminate_backend(%s) ends it now; idle_in_transaction_session_timeout ends such sessions by itself.', r.pid);
        ELSE
            severity := 'warning'; kind := 'long_transaction';
            detail := pg_catalog.format('user %s (application %s): transaction open for %s (%s)%s',
                r.usename, pg_catalog.quote_literal(r.application_name), pg_catalog.date_trunc('second', v_now - r.xact_start), r.state,
                CASE WHEN r.xmin_age IS NOT NULL OR r.xid_age IS NOT NULL
                     THEN pg_catalog.format(', holding the xmin horizon back by %s transactions', greatest(r.xmin_age, r.xid_age)) ELSE '' END);
            advice := pg_catalog.format('While it is open vacuum keeps every row deleted since it began (the queues'' tables bloat and claims slow down): let it finish, or SELECT pg_cancel_backend(%s) / pg_terminate_backend(%s); statement_timeout and transaction_timeout bound such transactions.', r.pid, r.pid);
        END IF;
        RETURN NEXT;
    END LOOP;

    -- prepared transactions of this database
    FOR r IN SELECT p.gid, p.owner, p.prepared, pg_catalog.age(p.transaction) AS xid_age
               FROM pg_catalog.pg_prepared_xacts p
              WHERE p.database = pg_catalog.current_database() AND v_now - p.prepared >= v_prepared
              ORDER BY p.prepared LOOP
        severity := 'warning'; kind := 'prepared_transaction'; object := pg_catalog.format('gid %s', r.gid);
        detail := pg_catalog.format('prepared by %s %s ago, holding the xmin horizon back by %s transactions',
                                    r.owner, pg_catalog.date_trunc('second', v_now - r.prepared), r.xid_age);
        advice := pg_catalog.format('A two-phase transaction its manager never finished: COMMIT PREPARED %s or ROLLBACK PREPARED %s (as its owner), once the transaction manager is known to be done with it.',
                                    pg_catalog.quote_literal(r.gid), pg_catalog.quote_literal(r.gid));
        RETURN NEXT;
    END LOOP;

    -- replication slots: inactive ones (they keep WAL, and their xmin), or an xmin older than the threshold
    FOR r IN SELECT sl.slot_name, sl.slot_type, sl.active, sl.active_pid,
                    greatest(pg_catalog.age(sl.xmin), pg_catalog.age(sl.catalog_xmin)) AS xmin_age,
                    CASE WHEN sl.restart_lsn IS NOT NULL AND NOT pg_catalog.pg_is_in_recovery()
                         THEN pg_catalog.pg_size_pretty(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), sl.restart_lsn)) END AS wal
               FROM pg_catalog.pg_replication_slots sl
              WHERE (sl.database IS NULL OR sl.database = pg_catalog.current_database())
                AND (NOT sl.active OR greatest(pg_catalog.age(sl.xmin), pg_catalog.age(sl.catalog_xmin)) >= v_slot_xids)
              ORDER BY sl.slot_name LOOP
        severity := 'warning'; kind := 'replication_slot'; object := pg_catalog.format('slot %s', r.slot_name);
        detail := pg_catalog.format('%s slot, %s%s%s', r.slot_type,
            CASE WHEN r.active THEN pg_catalog.format('active (pid %s)', r.active_pid) ELSE 'inactive' END,
            CASE WHEN r.xmin_age IS NOT NULL THEN pg_catalog.format(', holding the xmin horizon back by %s transactions', r.xmin_age) ELSE '' END,
            CASE WHEN r.wal IS NOT NULL THEN pg_catalog.format(', keeping %s of WAL', r.wal) ELSE '' END);
        advice := pg_catalog.format('A slot nobody reads keeps WAL (the disk fills) and, with an xmin, every dead row: reconnect its consumer, or drop it with SELECT pg_drop_replication_slot(%s).',
                                    pg_catalog.quote_literal(r.slot_name));
        RETURN NEXT;
    END LOOP;

    -- sessions of the install's roles waiting for a lock
    FOR r IN WITH RECURSIVE m(oid) AS (
                 SELECT ro.oid FROM pg_catalog.pg_roles ro WHERE ro.rolname = ANY (v_roles)
                 UNION
                 SELECT am.member FROM pg_catalog.pg_auth_members am JOIN m ON am.roleid = m.oid)
             SELECT l.pid, a.usename, l.locktype, l.mode, (SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = l.relation) AS rel, l.waitstart,
                    pg_catalog.pg_blocking_pids(l.pid) AS blockers
               FROM pg_catalog.pg_locks l
               JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
              WHERE NOT l.granted AND a.datid = v_db AND a.usesysid IN (SELECT m.oid FROM m)
                AND l.waitstart IS NOT NULL AND v_now - l.waitstart >= v_lock
              ORDER BY l.waitstart, l.pid LOOP
        severity := 'warning'; kind := 'lock_wait'; object := pg_catalog.format('pid %s', r.pid);
        detail := pg_catalog.format('user %s has waited %s for a %s lock on %s, blocked by pid(s) %s',
            r.usename, pg_catalog.date_trunc('second', v_now - r.waitstart), r.mode,
            coalesce(r.rel, r.locktype), pg_catalog.array_to_string(r.blockers, ', '));
        advice := 'Look at what the blocking sessions run (pg_stat_activity): a long transaction or DDL holding a lock on a pgsweep table stops the queues. End it; run DDL with a short lock_timeout.';
        RETURN NEXT;
    END LOOP;

    -- autovacuum off for the whole server
    IF pg_catalog.current_setting('autovacuum') = 'off' OR pg_catalog.current_setting('track_counts') = 'off' THEN
        severity := 'critical'; kind := 'autovacuum_disabled'; object := 'server';
        detail := pg_catalog.format('autovacuum = %s, track_counts = %s: nothing vacuums the queues'' tables',
                                    pg_catalog.current_setting('autovacuum'), pg_catalog.current_setting('track_counts'));
        advice := 'Turn autovacuum and track_counts on (postgresql.conf, then SELECT pg_reload_conf()).';
        RETURN NEXT;
    END IF;

    -- the pg_cron job that runs maintain(): its last run failed, or it is
    -- inactive. pg_cron shows a job and its runs only to the role that
    -- scheduled it (and superusers), and its schema only to roles granted
    -- USAGE on it: other callers see nothing here.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_cron')
       AND pg_catalog.has_schema_privilege('cron', 'USAGE')
       AND pg_catalog.has_table_privilege('cron.job', 'SELECT') AND pg_catalog.has_table_privilege('cron.job_run_details', 'SELECT') THEN
        FOR r IN EXECUTE 'SELECT j.jobid, j.active, j.username, d.status, d.return_message, d.start_time
                            FROM cron.job j
                            LEFT JOIN LATERAL (SELECT x.status, x.return_message, x.start_time FROM cron.job_run_details x
                                                WHERE x.jobid OPERATOR(pg_catalog.=) j.jobid AND x.status OPERATOR(pg_catalog.=) ANY (ARRAY[''succeeded'', ''failed''])
                                                ORDER BY x.runid DESC LIMIT 1) d ON true
                           WHERE j.jobname OPERATOR(pg_catalog.=) $1 ORDER BY j.jobid' USING cron_job_name() LOOP
            IF NOT r.active OR r.status = 'failed' THEN
                severity := 'critical'; kind := 'cron_failing'; object := pg_catalog.format('cron job %s', r.jobid);
                detail := CASE WHEN NOT r.active THEN pg_catalog.format('the job that runs maintain() (user %s) is inactive', r.username)
                               ELSE pg_catalog.format('its last run (%s, as %s) failed: %s', r.start_time, r.username, coalesce(r.return_message, 'no message')) END;
                advice := CASE WHEN NOT r.active THEN 'SELECT cron.alter_job(job_id := ' || r.jobid || ', active := true), or schedule it again with cron_schedule.'
                               ELSE 'The message says why (a role without the admin grant, a dropped schema, a statement timeout); cron.job_run_details keeps every run. Fix it and watch the next run.' END;
                RETURN NEXT;
            END IF;
        END LOOP;
    END IF;

    IF NOT v_sees_all THEN
        severity := 'info'; kind := 'health_limited'; object := pg_catalog.format('role %s', current_user);
        detail := 'this role sees only its own sessions: long transactions, idle-in-transaction sessions and lock waits of other roles are not reported';
        advice := pg_catalog.format('GRANT pg_monitor TO %I (or pg_read_all_stats), as a superuser.', current_user);
        RETURN NEXT;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION health()
RETURNS TABLE (severity text, kind text, object text, detail text, advice text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH f AS (
        SELECT a.severity, a.kind, a.object, a.detail, a.advice, a.part, a.n,
               pg_catalog.row_number() OVER (PARTITION BY a.kind ORDER BY a.part, a.n) AS rn
          FROM (SELECT h.*, 1 AS part FROM health_server() WITH ORDINALITY AS h(severity, kind, object, detail, advice, n)
                UNION ALL
                SELECT h.*, 2 FROM health_install() WITH ORDINALITY AS h(severity, kind, object, detail, advice, n)) a
    ), cap AS (
        SELECT s.value::bigint AS n FROM settings s WHERE s.name = 'health_max_per_kind'
    )
    SELECT x.severity, x.kind, x.object, x.detail, x.advice
      FROM (SELECT f.severity, f.kind, f.object, f.detail, f.advice, f.part, f.n FROM f, cap WHERE f.rn <= cap.n
            UNION ALL
            SELECT CASE pg_catalog.min(CASE f.severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END)
                        WHEN 0 THEN 'critical' WHEN 1 THEN 'warning' ELSE 'info' END,
                   f.kind, pg_catalog.format('%s more', pg_catalog.count(*)),
                   pg_catalog.format('%s more finding(s) of this kind are not shown (health_max_per_kind = %s)', pg_catalog.count(*), pg_catalog.min(cap.n)),
                   'Deal with the ones shown first, or raise health_max_per_kind to see them all.',
                   pg_catalog.max(f.part), pg_catalog.max(f.n)
              FROM f, cap WHERE f.rn > cap.n GROUP BY f.kind) x
     ORDER BY x.part, x.n
$$;
-- pgsweep:end functions/health.sql

-- pgsweep:changed functions/browse.sql
CREATE OR REPLACE FUNCTION _browse_state(p_status text, p_parked_until timestamptz, p_now timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN p_status = 'processing' THEN 'in_flight'
                WHEN p_status = 'failed' THEN 'failed'
                WHEN p_parked_until > p_now AND p_parked_until <> 'infinity' THEN 'scheduled'
                ELSE 'pending' END
$$;

CREATE OR REPLACE FUNCTION _browse_at(p_state text, p_created_at timestamptz, p_visible_at timestamptz, p_parked_until timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE p_state WHEN 'scheduled' THEN p_parked_until
                        WHEN 'pending' THEN CASE WHEN p_parked_until = 'infinity' THEN NULL
                                                 ELSE greatest(p_created_at, p_visible_at, p_parked_until) END
                        ELSE p_visible_at END
$$;

CREATE OR REPLACE FUNCTION _browse_live(p_queue text, p_from bigint, p_to bigint, p_state text, p_error text,
                                        p_browse boolean, p_now timestamptz, p_limit int)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    -- PL/pgSQL, not SQL: its statement is planned with the queue's value,
    -- so that Citus routes it to the queue's shard (a SQL function's
    -- generic plan could not be, nor could a LATERAL over the shard)
    RETURN QUERY
    SELECT m.id, m.id, m.state, m.lane, m.attempt, m.created_at, _browse_at(m.state, m.created_at, m.visible_at, m.parked_until),
           CASE WHEN m.state = 'in_flight' THEN m.owner END, m.parked_until IS NOT DISTINCT FROM 'infinity', m.last_error,
           pg_column_size(m.payload), pg_column_size(m.headers),
           CASE WHEN p_browse THEN m.key END, CASE WHEN p_browse THEN m.payload END, CASE WHEN p_browse THEN m.headers END
      FROM (SELECT x.*, _browse_state(x.status, x.parked_until, p_now) AS state
              FROM message x
             WHERE x.queue = p_queue AND x.id > p_from AND x.id <= p_to) m
     WHERE (p_state IS NULL OR m.state = p_state)
       AND (p_error IS NULL OR strpos(m.last_error, p_error) > 0)
     ORDER BY m.id
     LIMIT p_limit;
END
$$;

CREATE OR REPLACE FUNCTION browse_messages(p_queue text, p_state text, p_after bigint DEFAULT 0, p_limit int DEFAULT 50,
                                           p_error text DEFAULT NULL)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_scan int := 10000;
    v_browse boolean;
    v_rows int := 0;
    v_read int := 0;
    v_got int;
    v_n int;
    v_chunk int := 1000;
    v_last bigint;
    v_end bigint;
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _check_text('p_state', p_state, 20);
    IF NOT p_state = ANY (ARRAY['pending', 'scheduled', 'in_flight', 'failed', 'dead', 'processed']) THEN
        RAISE EXCEPTION 'p_state must be one of pending, scheduled, in_flight, failed, dead, processed, got %',
            quote_literal(p_state) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_int('p_after', p_after, 0, 9223372036854775807);
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    IF p_error IS NOT NULL THEN
        PERFORM _check_text('p_error', p_error, 1000);
    END IF;
    v_browse := _queue_allowed(p_queue, 'browse');

    IF p_state = 'dead' THEN
        RETURN QUERY
        SELECT d.id, d.id, 'dead'::text, d.lane, d.attempts, d.created_at, d.dead_at, NULL::text, false, d.last_error,
               pg_column_size(d.payload), pg_column_size(d.headers),
               CASE WHEN v_browse THEN d.key END, CASE WHEN v_browse THEN d.payload END, CASE WHEN v_browse THEN d.headers END
          FROM (SELECT * FROM message_dead x
                 WHERE x.queue = p_queue AND x.id > p_after
                 ORDER BY x.id
                 LIMIT CASE WHEN p_error IS NULL THEN p_limit ELSE v_scan END) d
         WHERE p_error IS NULL OR strpos(d.last_error, p_error) > 0
         ORDER BY d.id
         LIMIT p_limit;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF p_error IS NOT NULL AND v_rows < p_limit THEN
            SELECT count(*), max(s.id) INTO v_read, v_last
              FROM (SELECT x.id FROM message_dead x WHERE x.queue = p_queue AND x.id > p_after ORDER BY x.id LIMIT v_scan) s;
            IF v_read >= v_scan THEN
                -- the scan stopped before the page filled: say where to go on
                RETURN QUERY SELECT NULL::bigint, v_last, p_state, NULL::text, NULL::int, NULL::timestamptz, NULL::timestamptz,
                                    NULL::text, NULL::boolean, NULL::text, NULL::int, NULL::int, NULL::text, NULL::jsonb, NULL::jsonb;
            END IF;
        END IF;
        RETURN;
    END IF;
    IF p_state = 'processed' THEN
        RETURN QUERY
        SELECT p.id, p.id, 'processed'::text, NULL::text, p.attempts, p.created_at, p.processed_at, NULL::text, false, NULL::text,
               pg_column_size(p.payload), pg_column_size(p.headers),
               CASE WHEN v_browse THEN p.key END, CASE WHEN v_browse THEN p.payload END, CASE WHEN v_browse THEN p.headers END
          FROM message_processed p
         WHERE p.queue = p_queue AND p.id > p_after AND p_error IS NULL -- processed messages have no error
         ORDER BY p.id
         LIMIT p_limit;
        RETURN;
    END IF;

    -- in chunks of v_chunk ids: how far a chunk reaches is an index-only
    -- range of the primary key that stops early (one query LIMIT v_scan
    -- would be planned to read the whole queue); its rows in the state are
    -- then one statement
    v_last := p_after;
    <<chunks>>
    LOOP
        SELECT count(*), max(c.id) INTO v_got, v_end
          FROM (SELECT m.id FROM message m WHERE m.queue = p_queue AND m.id > v_last ORDER BY m.id LIMIT v_chunk) c;
        EXIT chunks WHEN v_got = 0;
        RETURN QUERY SELECT * FROM _browse_live(p_queue, v_last, v_end, p_state, p_error, v_browse, v_now, p_limit - v_rows);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_rows := v_rows + v_n;
        v_read := v_read + v_got;
        v_last := v_end;
        EXIT chunks WHEN v_rows >= p_limit OR v_got < v_chunk; -- a full page, or the end of the queue
        IF v_read >= v_scan THEN
            -- the scan stopped before the page filled: say where to go on
            RETURN QUERY SELECT NULL::bigint, v_last, p_state, NULL::text, NULL::int, NULL::timestamptz, NULL::timestamptz,
                                NULL::text, NULL::boolean, NULL::text, NULL::int, NULL::int, NULL::text, NULL::jsonb, NULL::jsonb;
            EXIT chunks;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION browse_message(p_queue text, p_id bigint)
RETURNS TABLE (id bigint, cursor bigint, state text, lane text, attempts int, created_at timestamptz, at timestamptz,
               holder text, waiting_in_lane boolean, last_error text, payload_bytes int, headers_bytes int,
               key text, payload jsonb, headers jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_browse boolean;
BEGIN
    PERFORM _queue_get(p_queue);
    PERFORM _check_int('p_id', p_id, 1, 9223372036854775807);
    v_browse := _queue_allowed(p_queue, 'browse');
    RETURN QUERY SELECT * FROM _browse_live(p_queue, p_id - 1, p_id, NULL, NULL, v_browse, v_now, 1);
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM browse_messages(p_queue, 'dead', p_id - 1, 1) b WHERE b.id = p_id;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT * FROM browse_messages(p_queue, 'processed', p_id - 1, 1) b WHERE b.id = p_id;
    END IF;
END
$$;
-- pgsweep:end functions/browse.sql

-- pgsweep:changed functions/citus.sql
CREATE OR REPLACE FUNCTION _citus_delegated(OUT routine regprocedure, OUT arg_index int, OUT force boolean)
RETURNS SETOF record
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p.oid::pg_catalog.regprocedure, a.n::int - 1,
           p.prosrc !~ '\mpg_notify\M'
      FROM pg_catalog.pg_proc p
     CROSS JOIN LATERAL pg_catalog.unnest(p.proargnames) WITH ORDINALITY a(name, n)
     WHERE p.pronamespace = pg_catalog.current_schema()::pg_catalog.regnamespace
       AND p.prokind = 'f'
       AND a.name = 'p_queue'
       AND a.n <= p.pronargs
       AND (p.proargmodes IS NULL OR p.proargmodes[a.n] IN ('i', 'b'))
       AND p.proargtypes[a.n - 1] = 'pg_catalog.text'::pg_catalog.regtype
       AND p.proname <> '_queue_get'
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'reference'
                          AND p.prosrc ~* ('\m(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+' || t.table_name || '\M'))
       -- a routine that reads a coordinator-only table (stats_history reads
       -- maintain_snapshot) runs where that table is, not on a worker
       AND NOT EXISTS (SELECT 1 FROM _citus_tables() t
                        WHERE t.placement = 'local' AND p.prosrc ~ ('\m' || t.table_name || '\M'))
     ORDER BY 1
$$;
-- pgsweep:end functions/citus.sql

-- pgsweep:changed functions/dead.sql
CREATE OR REPLACE FUNCTION dead_delete(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
    v_lane text;
    v_moved bigint := 0;
BEGIN
    PERFORM _check_ids(p_ids);
    PERFORM _queue_manage(p_queue);
    WITH d AS (
        DELETE FROM message_dead x WHERE x.queue = p_queue AND x.id = ANY (p_ids) RETURNING x.id
    )
    SELECT array_agg(d.id ORDER BY d.id) INTO v_ids FROM d;
    -- the lanes they stopped, locked in name order (lane.sql)
    FOR v_lane IN SELECT l.name FROM lane l WHERE l.queue = p_queue AND l.blocked_id = ANY (v_ids) ORDER BY l.name FOR UPDATE LOOP
        UPDATE lane l SET blocked_id = NULL WHERE l.queue = p_queue AND l.name = v_lane;
        v_moved := v_moved + _lane_next(p_queue, ARRAY[v_lane], clock_timestamp(), true);
    END LOOP;
    IF v_moved > 0 THEN
        PERFORM pg_notify(notify_channel(), p_queue);
    END IF;
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;
-- pgsweep:end functions/dead.sql

-- pgsweep:changed functions/claim_ids.sql
CREATE OR REPLACE FUNCTION dead_letter(p_queue text, p_token uuid, p_ids bigint[], p_error text)
RETURNS SETOF bigint
LANGUAGE sql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$ SELECT dead_letter(p_queue, p_token, p_ids, p_error, NULL::timestamptz) $$;
-- pgsweep:end functions/claim_ids.sql

-- pgsweep:changed functions/lease.sql
CREATE OR REPLACE FUNCTION _lease_unreserved(p_verb text, p_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_why text := _lease_reserved(p_name);
BEGIN
    IF v_why IS NOT NULL THEN
        RAISE EXCEPTION '%: lease % is reserved for pgsweep itself (%); no role may take, renew or release it',
            p_verb, pg_catalog.quote_literal(p_name), v_why
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Name your leases outside maintain:, retention: and pgsweep:.';
    END IF;
    RETURN p_name;
END
$$;

CREATE OR REPLACE FUNCTION _lease_check(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM _check_text('p_name', p_name);
    PERFORM _check_text('p_owner', p_owner);
    PERFORM _check_interval('p_ttl', p_ttl, interval '1 second', interval '1 hour');
    PERFORM _check_now('p_now', p_now);
END
$$;

CREATE OR REPLACE FUNCTION _lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lease lease;
    v_now timestamptz;
BEGIN
    PERFORM _lease_check(p_name, p_owner, p_ttl, p_now);

    LOOP
        -- Read the clock only once the row is locked: a contender that
        -- waited for the lock must not act on a time from before the wait,
        -- or its tenure could appear to start before the previous one ended.
        SELECT * INTO v_lease FROM lease WHERE name = p_name FOR UPDATE;
        v_now := coalesce(p_now, clock_timestamp());
        IF NOT FOUND THEN
            INSERT INTO lease (name, owner, token, acquired_at, expires_at)
            VALUES (p_name, p_owner, 1, v_now, v_now + p_ttl)
            ON CONFLICT (name) DO NOTHING;
            IF FOUND THEN
                RETURN 1;
            END IF;
            CONTINUE; -- a concurrent first acquire won the insert: lock its row
        END IF;

        IF v_lease.owner = p_owner AND v_lease.expires_at > v_now THEN
            UPDATE lease SET expires_at = v_now + p_ttl WHERE name = p_name;
            RETURN v_lease.token;
        END IF;
        IF v_lease.owner IS NULL OR v_lease.expires_at <= v_now THEN
            UPDATE lease
               SET owner = p_owner, token = v_lease.token + 1, acquired_at = v_now, expires_at = v_now + p_ttl
             WHERE name = p_name;
            RETURN v_lease.token + 1;
        END IF;
        RETURN NULL;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION _lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
BEGIN
    PERFORM _lease_check(p_name, p_owner, p_ttl, p_now);

    PERFORM 1 FROM lease l WHERE l.name = p_name AND l.owner = p_owner FOR UPDATE;
    v_now := coalesce(p_now, clock_timestamp()); -- after the lock, as _lease_acquire
    UPDATE lease l SET expires_at = v_now + p_ttl
     WHERE l.name = p_name AND l.owner = p_owner AND l.expires_at > v_now;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION lease_acquire(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_acquire(_lease_unreserved('lease_acquire', p_name), p_owner, p_ttl, p_now) $$;

CREATE OR REPLACE FUNCTION lease_renew(p_name text, p_owner text, p_ttl interval, p_now timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_renew(_lease_unreserved('lease_renew', p_name), p_owner, p_ttl, p_now) $$;

CREATE OR REPLACE FUNCTION lease_release(p_name text, p_owner text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT _lease_release(_lease_unreserved('lease_release', p_name), p_owner, p_now) $$;

CREATE OR REPLACE FUNCTION browse_leases(p_after text DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS TABLE (name text, owner text, token bigint, acquired_at timestamptz, expires_at timestamptz, live boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_after IS NOT NULL THEN
        PERFORM _check_cursor('p_after', p_after); -- browse_lanes.sql
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT l.name, l.owner, l.token, l.acquired_at, l.expires_at, (l.owner IS NOT NULL AND l.expires_at > v_now)
      FROM lease l
     WHERE l.name > coalesce(p_after, '')
     ORDER BY l.name
     LIMIT p_limit;
END
$$;
-- pgsweep:end functions/lease.sql

-- pgsweep:changed functions/queue_ops.sql
CREATE OR REPLACE FUNCTION _queue_manage(p_name text)
RETURNS queue
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue := _queue_get(p_name);
BEGIN
    PERFORM _queue_require(p_name, 'manage');
    RETURN v_q;
END
$$;

CREATE OR REPLACE FUNCTION queue_pause(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_manage(p_queue);
    UPDATE queue q SET paused = true, updated_at = v_now WHERE q.name = p_queue AND NOT q.paused;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION queue_resume(p_queue text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _queue_manage(p_queue);
    UPDATE queue q SET paused = false, updated_at = v_now WHERE q.name = p_queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_notify(notify_channel(), p_queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION message_cancel(p_queue text, p_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_q queue;
    v_ids bigint[];
    v_lanes text[];
BEGIN
    PERFORM _check_ids(p_ids);
    v_q := _queue_manage(p_queue);
    PERFORM _lanes_lock(p_queue, ARRAY(SELECT DISTINCT m.lane FROM message m
                                         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.lane IS NOT NULL));
    WITH d AS (
        DELETE FROM message m
         WHERE m.queue = p_queue AND m.id = ANY (p_ids) AND m.status = 'pending'
        RETURNING m.id, m.lane, m.parked_until
    )
    SELECT array_agg(d.id),
           array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_ids, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN QUERY SELECT u FROM unnest(v_ids) u;
END
$$;

CREATE OR REPLACE FUNCTION queue_purge(p_queue text)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n bigint;
    v_lanes text[];
BEGIN
    PERFORM _queue_manage(p_queue);
    PERFORM 1 FROM lane l WHERE l.queue = p_queue ORDER BY l.name FOR UPDATE;
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue AND m.status = 'pending'
        RETURNING m.lane, m.parked_until
    )
    SELECT count(*), array_agg(DISTINCT d.lane) FILTER (WHERE d.lane IS NOT NULL AND d.parked_until IS DISTINCT FROM 'infinity') -- heads
      INTO v_n, v_lanes FROM d;
    PERFORM _lane_after(p_queue, v_lanes, NULL, false, clock_timestamp());
    RETURN v_n;
END
$$;

CREATE OR REPLACE FUNCTION queue_drop(p_queue text, p_force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_n bigint;
    v_live bigint;
BEGIN
    IF p_force IS NULL THEN
        RAISE EXCEPTION 'p_force must be true or false, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_manage(p_queue);
    PERFORM 1 FROM queue q WHERE q.name = p_queue FOR UPDATE;
    v_now := clock_timestamp();
    DELETE FROM lane l WHERE l.queue = p_queue;
    -- Delete first, then look: the DELETE waits for claims in progress and
    -- sees what they committed, so no lease slips in between check and act.
    WITH d AS (
        DELETE FROM message m WHERE m.queue = p_queue
        RETURNING m.status, m.visible_at
    )
    SELECT count(*), count(*) FILTER (WHERE d.status = 'processing' AND d.visible_at > v_now) INTO v_n, v_live FROM d;
    IF v_live > 0 AND NOT p_force THEN
        RAISE EXCEPTION 'queue "%" has % message(s) in flight; stop its workers first, or drop it anyway with p_force', p_queue, v_live
            USING ERRCODE = 'object_in_use',
                  HINT = format('SELECT queue_drop(%L, p_force => true) drops it with them; their workers'' calls then fail (unknown queue)', p_queue);
    END IF;
    DELETE FROM message_processed p WHERE p.queue = p_queue;
    DELETE FROM message_dead d WHERE d.queue = p_queue;
    DELETE FROM claim_cursor c WHERE c.queue = p_queue;
    DELETE FROM queue_recovery r WHERE r.queue = p_queue;
    DELETE FROM queue_right r WHERE r.queue = p_queue; -- its rights go with it (queue_rights.sql)
    DELETE FROM queue q WHERE q.name = p_queue;
    PERFORM retention_unregister(p.name) FROM retention_policy p
      WHERE p.name IN ('pgsweep.processed:' || p_queue, 'pgsweep.dead:' || p_queue);
    RETURN v_n;
END
$$;
-- pgsweep:end functions/queue_ops.sql

-- pgsweep:changed functions/history.sql
CREATE OR REPLACE VIEW maintenance_passes AS
SELECT p.id,
       p.owner,
       p.started_at,
       p.finished_at,
       p.finished_at - p.started_at AS duration,
       p.parts ->> 'recovery' AS recovery,
       p.parts ->> 'retention' AS retention,
       coalesce((SELECT jsonb_object_agg(r.part, r.counts) FROM maintain_run r WHERE r.pass_id = p.id), '{}') AS counts,
       p.error,
       p.parts ->> 'stats' AS stats -- last: a view's new column goes at its end
  FROM maintain_pass p;
-- pgsweep:end functions/history.sql

-- pgsweep:changed functions/browse_lanes.sql
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
-- pgsweep:end functions/browse_lanes.sql

-- pgsweep:changed functions/browse_passes.sql
CREATE OR REPLACE FUNCTION browse_maintenance_passes(p_before bigint DEFAULT NULL, p_limit int DEFAULT 50)
RETURNS TABLE (id bigint, owner text, started_at timestamptz, finished_at timestamptz, duration interval,
               recovery text, retention text, counts jsonb, error text, stats text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_before IS NOT NULL THEN
        PERFORM _check_int('p_before', p_before, 1, 9223372036854775807);
    END IF;
    PERFORM _check_int('p_limit', p_limit, 1, 1000);
    RETURN QUERY
    SELECT v.id, v.owner, v.started_at, v.finished_at, v.duration, v.recovery, v.retention, v.counts, v.error, v.stats
      FROM maintenance_passes v
     WHERE v.id < coalesce(p_before, 9223372036854775807)
     ORDER BY v.id DESC
     LIMIT p_limit;
END
$$;

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
-- pgsweep:end functions/browse_passes.sql

-- pgsweep:changed functions/lane.sql
CREATE OR REPLACE FUNCTION _lane_figures(p_queue text, p_lanes text[], p_cap int, p_now timestamptz)
RETURNS TABLE (lane text, blocked boolean, waiting bigint, waiting_more boolean, head_id bigint, head_attempt int,
               head_state text, oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
    SELECT l.name, l.blocked_id IS NOT NULL, least(w.n, p_cap::bigint), coalesce(w.n > p_cap, false),
           coalesce(l.blocked_id, h.id), coalesce(d.attempts, h.attempt),
           CASE WHEN l.blocked_id IS NOT NULL THEN 'dead'
                WHEN h.status = 'pending' AND h.parked_until > p_now THEN 'scheduled'
                ELSE h.status END,
           p_now - least(d.created_at, o.created_at)
      FROM unnest(p_lanes) WITH ORDINALITY u(name, ord)
      JOIN lane l ON l.queue = p_queue AND l.name = u.name
      LEFT JOIN LATERAL (SELECT m.id, m.attempt, m.status, m.parked_until FROM message m
                          WHERE m.queue = p_queue AND m.lane = l.name AND m.parked_until IS DISTINCT FROM 'infinity'
                          ORDER BY m.created_at, m.id LIMIT 1) h ON true
      LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
     CROSS JOIN LATERAL (SELECT count(*) AS n
                           FROM (SELECT 1 FROM message c
                                  WHERE c.queue = p_queue AND c.lane = l.name AND c.parked_until = 'infinity'
                                  LIMIT p_cap::bigint + 1) c) w
      LEFT JOIN LATERAL (SELECT c.created_at FROM message c WHERE c.queue = p_queue AND c.lane = l.name
                          ORDER BY c.created_at, c.id LIMIT 1) o ON true
     ORDER BY u.ord;
END
$$;

CREATE OR REPLACE FUNCTION lane_stats(p_queue text, p_limit int DEFAULT 100)
RETURNS TABLE (queue text, lane text, waiting bigint, head_id bigint, head_attempt int, head_state text,
               oldest_age interval)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    PERFORM _queue_get(p_queue);
    RETURN QUERY
    SELECT p_queue, f.lane, f.waiting, f.head_id, f.head_attempt, f.head_state, f.oldest_age
      FROM _lane_figures(p_queue,
               ARRAY(SELECT l.name
                       FROM lane l
                       LEFT JOIN LATERAL (SELECT m.created_at FROM message m
                                           WHERE m.queue = p_queue AND m.lane = l.name
                                             AND m.parked_until IS DISTINCT FROM 'infinity'
                                           ORDER BY m.created_at, m.id LIMIT 1) h ON true
                       LEFT JOIN message_dead d ON d.queue = p_queue AND d.id = l.blocked_id
                      WHERE l.queue = p_queue
                      ORDER BY l.blocked_id IS NULL, coalesce(d.created_at, h.created_at) NULLS LAST, l.name
                      LIMIT p_limit),
               NULL, v_now) f;
END
$$;
-- pgsweep:end functions/lane.sql

-- the public lease functions pass the name through _lease_unreserved now (lease.sql)
DROP FUNCTION _lease_reserved_refuse(text, text);

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
