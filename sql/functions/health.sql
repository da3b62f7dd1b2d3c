-- health() (monitor): what is wrong, each finding a row of severity
-- ('critical', 'warning', 'info'), kind, object, detail and advice
-- (docs/dashboard.md lists every kind and what to do about it). The
-- thresholds are settings (health_*).
--
-- Two halves, which health() puts together (capping each kind), because PostgreSQL shows another role's session (its state,
-- when its transaction began, what it waits for) only to a superuser or a
-- member of pg_read_all_stats (pg_monitor), and the owner role is neither:
--   * health_server() is SECURITY INVOKER (privileges.sql, _invoker_routines): it
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

-- _health_tables: the tables health_install looks at: the install's and
-- every table a retention policy covers (its leaves, for a partitioned
-- one). Found through the catalogs, which need no privilege: a name lookup
-- (to_regclass) needs USAGE on the table's schema, which the owner need not
-- have (retention deletes as the policy's owner), and would fail health()
-- for everyone.
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

-- health_server (monitor): the server's half of health(): sessions,
-- prepared transactions, slots, lock waits, autovacuum, and the pg_cron
-- job's last run, with the caller's eyes.
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

-- health (monitor): every finding: the server's (health_server), then the
-- install's (health_install), at most health_max_per_kind of each kind (a
-- thousand idle sessions or partitions would bury the rest): the rows left
-- out of a kind become one row of that kind, object 'N more', with the
-- most severe severity among them. ORDER BY what you need; the Go client
-- sorts the most severe first. It runs as its caller (it calls
-- health_server, which must).
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
