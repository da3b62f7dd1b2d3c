-- health() (monitor): what is wrong, each finding a row of severity
-- ('critical', 'warning', 'info'), kind, object, detail and advice
-- (docs/dashboard.md lists every kind and what to do about it). The
-- thresholds are settings (health_*).
--
-- Two halves, because PostgreSQL shows another role's session (its state,
-- when its transaction began, what it waits for) only to a superuser or a
-- member of pg_read_all_stats (pg_monitor), and the owner role is neither:
--   * health() is SECURITY INVOKER (privileges.sql, _invoker_routines): it
--     reads the server's side -- sessions holding the xmin horizon back,
--     prepared transactions, replication slots, lock waits, autovacuum off --
--     with the caller's eyes, and adds an 'info' finding when those eyes
--     cannot see other roles' sessions (grant pg_monitor to the role that
--     calls it). It reads the thresholds through the settings view and
--     calls no underscore routine.
--   * health_install() is SECURITY DEFINER: the install's own state --
--     queues (from the latest snapshots, stats.sql: O(queues)), maintenance,
--     retention, and the dead rows, vacuums and autovacuum options of the
--     install's tables and of every table a retention policy covers.
-- Neither reads a payload, a header or a query text.

-- health_install (monitor): the install's half of health().
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

    -- tables: the install's and every table a policy covers (its leaves, for a partitioned one)
    FOR r IN
        WITH t AS (
            SELECT c.oid FROM pg_catalog.pg_class c
             WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace AND c.relkind = 'r'
            UNION
            -- found through the catalogs, which need no privilege: a name
            -- lookup (to_regclass) needs USAGE on the table's schema, which
            -- the owner need not have (retention deletes as the policy's
            -- owner), and would fail health() for everyone
            SELECT coalesce(pt.relid, rc.oid)
              FROM retention_policy rp
              JOIN pg_catalog.pg_namespace rn ON rn.nspname = rp.table_schema
              JOIN pg_catalog.pg_class rc ON rc.relnamespace = rn.oid AND rc.relname = rp.table_name
              LEFT JOIN LATERAL pg_catalog.pg_partition_tree(rc.oid) pt ON pt.isleaf) -- a plain table has no tree
        SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS tab, s.n_dead_tup, s.n_live_tup, s.last_vacuum, s.last_autovacuum,
               EXISTS (SELECT 1 FROM pg_catalog.unnest(c.reloptions) o
                        WHERE pg_catalog.split_part(o, '=', 1) = 'autovacuum_enabled'
                          AND pg_catalog.lower(pg_catalog.split_part(o, '=', 2)) IN ('false', 'off', 'no', '0', 'f', 'n', 'of', 'fa', 'fal', 'fals')) AS av_off
          FROM t
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
END
$$;

-- health (monitor): every finding: the server's (sessions, prepared
-- transactions, slots, lock waits, autovacuum), then the install's
-- (health_install). ORDER BY what you need; the Go client sorts the most
-- severe first.
CREATE OR REPLACE FUNCTION health()
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

    IF NOT v_sees_all THEN
        severity := 'info'; kind := 'health_limited'; object := pg_catalog.format('role %s', current_user);
        detail := 'this role sees only its own sessions: long transactions, idle-in-transaction sessions and lock waits of other roles are not reported';
        advice := pg_catalog.format('GRANT pg_monitor TO %I (or pg_read_all_stats), as a superuser.', current_user);
        RETURN NEXT;
    END IF;

    RETURN QUERY SELECT h.severity, h.kind, h.object, h.detail, h.advice FROM health_install() h;
END
$$;
