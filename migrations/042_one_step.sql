-- pgsweep 0.42: one step routine for the stepped maintenance parts (issue
-- 28). maintain() ran recovery, schedules and stats through three loops
-- that differed only in the step routine they called; maintain_step(p_run)
-- takes one step of whatever part its run runs, so one loop serves the
-- three (the procedure's body still uses no operator: it cannot pin its
-- search_path). maintain_step_recovery, maintain_step_stats and
-- maintain_step_schedules go, and _maintain_step with them: maintain_step
-- reads the run once and takes the step itself. IF EXISTS: a test installs
-- the migrations rewritten with whole function files, where they never were.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DROP FUNCTION IF EXISTS maintain_step_recovery(bigint);
DROP FUNCTION IF EXISTS maintain_step_stats(bigint);
DROP FUNCTION IF EXISTS maintain_step_schedules(bigint);
DROP FUNCTION IF EXISTS _maintain_step(bigint, text);

-- pgsweep:changed functions/maintain.sql
CREATE OR REPLACE FUNCTION maintain_step(p_run bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run maintain_run := _maintain_run_check(p_run);
BEGIN
    IF v_run.status <> 'running' OR v_run.part NOT IN ('recovery', 'stats', 'schedules') THEN
        RETURN false;
    END IF;
    RETURN _maintain_part_step(p_run,
                               CASE v_run.part
                                   WHEN 'recovery' THEN _maintain_recovery(v_run.owner, v_run.deadline)
                                   WHEN 'stats' THEN _stats_snapshot(NULL)
                                   WHEN 'schedules' THEN _schedule_run(NULL, 100)
                               END,
                               NULL, v_run.deadline, NULL);
END
$$;

CREATE OR REPLACE PROCEDURE maintain(p_owner text DEFAULT NULL, p_budget interval DEFAULT '30 seconds')
LANGUAGE plpgsql
AS $$
DECLARE
    v_pass bigint;
    v_owner pg_catalog.text;
    v_run bigint;
    v_part pg_catalog.text;
    v_more boolean;
    v_failed boolean;
    v_msg pg_catalog.text;
    v_state pg_catalog.text;
BEGIN
    SELECT b.o_pass, b.o_owner INTO v_pass, v_owner FROM {{ .schema | default "pgsweep" }}.maintain_step_begin(p_owner, p_budget) b;
    COMMIT;

    -- The stepped parts, in this order, each step caught (a failed step is
    -- recorded and ends its part's run) and committed:
    --   recovery: bounded steps, each followed by a lease renewal, until the
    --     step says it is done or half the budget is spent: a recovery
    --     backlog must not starve retention (the backlog makes recovery due
    --     again at once on the next pass);
    --   schedules: steps of at most 100 due schedules each, until none is
    --     due or the budget is spent (maintain_schedules.sql);
    --   stats: one step, the queue snapshots (stats.sql), every
    --     stats_interval.
    -- maintain_step knows the part of its run: the body needs no operator.
    FOREACH v_part IN ARRAY ARRAY['recovery', 'schedules', 'stats'] LOOP
        v_run := {{ .schema | default "pgsweep" }}.maintain_step_part(v_pass, v_part);
        COMMIT;
        CONTINUE WHEN v_run IS NULL;
        LOOP
            v_failed := false;
            BEGIN
                v_more := {{ .schema | default "pgsweep" }}.maintain_step(v_run);
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
    END LOOP;

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
        'retention_owner_proof_drop',
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
        'send', 'send_batch', 'send_unique', 'send_batch_unique', 'claim', 'renew', 'complete', 'fail', 'fail_details', 'release',
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
        'retention_owner_proof', 'retention_owner_proof_drop',
        'cron_command', 'cron_available', 'retention_resolve_table', 'retention_table_name_check',
        -- the step routines the procedures call (docs/security.md): each
        -- checks that the caller's session opened the pass it names
        'maintain_step_begin', 'maintain_step_part', 'maintain_step', 'maintain_step_failed',
        'maintain_step_part_end', 'maintain_step_end', 'maintain_step_retention', 'maintain_step_go',
        'maintain_step_renew', 'maintain_step_traffic', 'maintain_step_pace', 'maintain_step_tally',
        'schedule_create', 'schedule_pause', 'schedule_resume', 'schedule_drop', -- periodic schedules (schedule.sql)
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
        'browse_maintenance_passes', 'browse_retention_passes', -- keyset pages of the pass histories (browse_passes.sql)
        'schedule_next_times', -- a cron expression's next slots (schedule_cron.sql): reads no table
        'schedule_rows']) r -- the schedules view's rows (schedule.sql): no payload, no header
$$;
-- pgsweep:end functions/privileges.sql

-- pgsweep:changed functions/claim.sql
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int, p_lease interval, p_now timestamptz)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET search_path FROM CURRENT
AS $$
DECLARE
    v_rescan_every interval;
    v_max int;
    v_lease interval;
    v_now timestamptz;
    v_until timestamptz;
    v_cursor_at timestamptz;
    v_cursor_id bigint;
    v_rescanned timestamptz;
    v_rescan boolean;
    v_from_at timestamptz;
    v_from_id bigint;
    v_to_at timestamptz;
    v_to_id bigint;
    v_tids tid[];
    v_ids bigint[];
    v_all tid[] := '{}';
    v_all_ids bigint[] := '{}';
    v_n int := 0;
    v_at timestamptz;
    v_id bigint;
    v_last_at timestamptz;
    v_last_id bigint;
    v_token uuid;
    v_paused boolean;
    v_held boolean;
    v_read_at timestamptz;
    v_read_id bigint;
    v_lv smallint[];
    v_la timestamptz[];
    v_li bigint[];
    v_prescanned timestamptz;
    v_prescan boolean;
    v_due smallint[];
    v_kinds int[] := '{}';
    v_los int[] := '{}';
    v_his int[] := '{}';
    v_pos int[] := '{}';
    v_seg int;
    v_kind int;
    v_lo int;
    v_hi int;
    v_prev int;
    v_l int;
    v_fa timestamptz;
    v_fi bigint;
    v_lvls smallint[];
    v_ats timestamptz[];
    v_tp smallint[] := '{}';
    v_ta timestamptz[] := '{}';
    v_ti bigint[] := '{}';
BEGIN
    IF p_now IS NOT NULL THEN -- the verbs pass NULL: no call on the hot path
        PERFORM _check_now('p_now', p_now);
    END IF;
    -- Hot path: one plain expression checks every argument; only a bad
    -- argument pays for the _check_* calls that name it in the error. The
    -- expression is a conservative pre-filter, the rules stay in validate.sql:
    -- an owner of ASCII letters, digits and _.:/@- (no control, invisible or
    -- white space characters) of at most 200 characters passes the name rule
    -- (_check_text); a lease of time only (no days, months or years: no
    -- mixed signs) within the bounds passes _check_interval. Anything else
    -- goes to the _check_* calls, in the order the arguments come.
    IF p_owner IS NULL OR length(p_owner) > 200 OR p_owner !~ '^[A-Za-z0-9_.:/@-]+$'
       OR p_batch IS NULL OR p_batch < 1 OR p_batch > 10000
       OR p_lease < interval '1 second' OR p_lease > interval '1 hour'
       OR extract(day FROM p_lease) <> 0 OR extract(month FROM p_lease) <> 0 OR extract(year FROM p_lease) <> 0 THEN
        PERFORM _check_text('p_owner', p_owner); -- the name rule (validate.sql): control characters, spaces
        IF p_lease IS NOT NULL THEN
            PERFORM _check_interval('p_lease', p_lease, interval '1 second', interval '1 hour');
        END IF;
        PERFORM _check_int('p_batch', p_batch, 1, 10000);
    END IF;
    -- Two statements, not a join: on Citus queue is a reference table and
    -- claim_cursor a distributed one, and a delegated claim may only touch
    -- its own shard (each statement filters by the queue).
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused
      INTO v_max, v_lease, v_rescan_every, v_paused
      FROM queue q
     WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM _queue_get(p_queue); -- raises the 22023 for a NULL, empty or unknown queue
    END IF;
    -- The rights ride along with the cursor (queue_rights.sql): a plain
    -- grant is the common case, read by this statement (both tables are
    -- placed by queue on Citus: one shard group); anything else, or no
    -- cursor row, asks _queue_require, the rule.
    SELECT c.created_at, c.id, c.rescanned_at,
           c.priority_levels, c.priority_ats, c.priority_ids, c.priority_rescanned_at,
           EXISTS (SELECT 1 FROM _queue_right_held h WHERE h.queue = p_queue AND h.privilege = 'consume')
      INTO v_cursor_at, v_cursor_id, v_rescanned, v_lv, v_la, v_li, v_prescanned, v_held
      FROM claim_cursor c WHERE c.queue = p_queue;
    IF v_held IS NOT TRUE THEN
        PERFORM _queue_require(p_queue, 'consume');
    END IF;
    v_read_at := v_cursor_at;
    v_read_id := v_cursor_id;
    IF v_paused THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    v_until := v_now + v_lease;

    -- The cursor is trusted only within claim_rescan after the last rescan, on
    -- the clock the caller uses (tests pin p_now in both directions).
    -- Pass 1 scans from the cursor on; pass 2 scans the rows before it, when
    -- the cursor is not trusted or pass 1 could not fill the batch.
    v_rescan := v_rescanned IS NULL OR v_now < v_rescanned OR v_now >= v_rescanned + v_rescan_every;
    IF v_rescan THEN
        v_cursor_at := '-infinity';
        v_cursor_id := -9223372036854775808;
    END IF;
    v_from_at := v_cursor_at;
    v_from_id := v_cursor_id;
    v_to_at := 'infinity';
    v_to_id := 9223372036854775807;
    -- Parked rows that came due join the claim index, where the scans below
    -- (or the next claims) find them. When none is due this is one probe of
    -- message_parked; rows other claims are promoting are skipped.
    SELECT array_agg(p.ctid), array_agg(p.id) INTO v_tids, v_ids
      FROM (SELECT d.ctid, d.id FROM message d
             WHERE d.queue = p_queue AND d.parked_until <= v_now
             ORDER BY d.parked_until
             LIMIT 4 * p_batch
               FOR UPDATE SKIP LOCKED) p;
    IF v_tids IS NOT NULL THEN
        -- By ctid and id both: whichever the planner takes, it touches only
        -- these rows. With ctid alone and the queue's statistics stale (a
        -- queue that grew since the last ANALYZE looks tiny), it took the
        -- primary key on queue and walked the whole queue.
        UPDATE message m SET parked_until = NULL
         WHERE m.queue = p_queue AND m.ctid = ANY (v_tids) AND m.id = ANY (v_ids);
    END IF;
    -- The segments of the claim indexes, in the order claims take them (see
    -- the header): kind 1 the levels lo..hi of message_claim_priority from
    -- their head, 2 one level from its position (v_pos: its place in the
    -- arrays), 0 the default priority (message_claim: the passes below).
    -- Positions are trusted within claim_rescan after the last rescan of the
    -- priority index, and then only the levels with a due row at or after
    -- their position are scanned (v_due: one probe, an index descent per
    -- level); the levels without a position, in the gaps, from their head.
    v_prescan := v_lv IS NULL OR v_prescanned IS NULL OR v_now < v_prescanned OR v_now >= v_prescanned + v_rescan_every;
    IF v_prescan THEN
        v_kinds := '{1,0,1}';
        v_los := '{1,0,-32768}';
        v_his := '{32767,0,-1}';
        v_pos := '{0,0,0}';
    ELSE
        SELECT array_agg(l.lvl) INTO v_due
          FROM unnest(v_lv, v_la, v_li) l(lvl, at, id)
         WHERE EXISTS (SELECT 1 FROM message s
                        WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0 AND s.priority = l.lvl
                          AND (s.created_at, s.id) >= (l.at, l.id) AND s.visible_at <= v_now AND s.attempt < v_max);
        v_prev := 32767;
        -- v_lv is sorted highest first; one step past its end (below every
        -- level) closes the last gap
        FOR j IN 1 .. cardinality(v_lv) + 1 LOOP
            v_l := CASE WHEN j <= cardinality(v_lv) THEN v_lv[j] ELSE -32769 END;
            IF v_l < 0 AND v_prev >= 0 THEN -- the default priority lies between the positive and the negative levels
                IF v_prev >= 1 THEN
                    v_kinds := v_kinds || 1; v_los := v_los || 1; v_his := v_his || v_prev; v_pos := v_pos || 0;
                END IF;
                v_kinds := v_kinds || 0; v_los := v_los || 0; v_his := v_his || 0; v_pos := v_pos || 0;
                v_prev := -1;
            END IF;
            IF v_l + 1 <= v_prev THEN
                v_kinds := v_kinds || 1; v_los := v_los || (v_l + 1); v_his := v_his || v_prev; v_pos := v_pos || 0;
            END IF;
            IF v_l = ANY (v_due) THEN
                v_kinds := v_kinds || 2; v_los := v_los || v_l; v_his := v_his || v_l; v_pos := v_pos || j;
            END IF;
            v_prev := v_l - 1;
        END LOOP;
    END IF;
    v_seg := 0;
    LOOP
        EXIT WHEN v_n = p_batch;
        v_seg := v_seg + 1;
        IF v_seg > cardinality(v_kinds) THEN
            -- A claim short of its batch takes the rows behind the positions
            -- last (kind 3: every level from its head, but the rows taken),
            -- and counts as a rescan, as the default passes do.
            EXIT WHEN v_prescan;
            v_kinds := v_kinds || 3; v_los := v_los || -32768; v_his := v_his || 32767; v_pos := v_pos || 0;
            v_prescan := true;
        END IF;
        v_kind := v_kinds[v_seg];
        v_lo := v_los[v_seg];
        v_hi := v_his[v_seg];
        CONTINUE WHEN v_lo > v_hi;
        IF v_kind = 0 THEN
            -- The default priority: pass 1 from the cursor on, pass 2 before it.
            FOR pass IN 1 .. 2 LOOP
                EXIT WHEN v_n = p_batch;
                SELECT array_agg(c.ctid), array_agg(c.id),
                       (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
                       (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
                  INTO v_tids, v_ids, v_at, v_id
                  FROM (SELECT s.ctid, s.created_at, s.id
                          FROM message s
                         WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority = 0
                           AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                           AND (s.created_at, s.id) < (v_to_at, v_to_id)
                           AND s.visible_at <= v_now AND s.attempt < v_max
                         ORDER BY s.created_at, s.id
                         LIMIT p_batch - v_n
                           FOR UPDATE SKIP LOCKED) c;
                IF v_tids IS NOT NULL THEN
                    v_all := v_all || v_tids;
                    v_all_ids := v_all_ids || v_ids;
                    v_n := cardinality(v_all);
                    IF v_last_at IS NULL THEN -- pass 1's rows are the newest
                        v_last_at := v_at;
                        v_last_id := v_id;
                    END IF;
                END IF;
                EXIT WHEN v_n = p_batch OR v_rescan;
                v_rescan := true;
                v_from_at := '-infinity';
                v_from_id := -9223372036854775808;
                v_to_at := v_cursor_at;
                v_to_id := v_cursor_id;
            END LOOP;
            CONTINUE;
        END IF;
        IF v_kind = 2 THEN
            v_fa := v_la[v_pos[v_seg]];
            v_fi := v_li[v_pos[v_seg]];
        ELSE
            v_fa := '-infinity';
            v_fi := -9223372036854775808;
        END IF;
        SELECT array_agg(c.ctid), array_agg(c.id), array_agg(c.priority), array_agg(c.created_at)
          INTO v_tids, v_ids, v_lvls, v_ats
          FROM (SELECT s.ctid, s.id, s.priority, s.created_at
                  FROM message s
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.priority <> 0
                   AND s.priority >= v_lo AND s.priority <= v_hi
                   AND (s.created_at, s.id) >= (v_fa, v_fi)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                   AND (v_kind <> 3 OR NOT s.id = ANY (v_all_ids))
                 ORDER BY s.priority DESC, s.created_at, s.id
                 LIMIT p_batch - v_n
                   FOR UPDATE SKIP LOCKED) c;
        IF v_tids IS NOT NULL THEN
            v_all := v_all || v_tids;
            v_all_ids := v_all_ids || v_ids;
            v_n := cardinality(v_all);
            v_tp := v_tp || v_lvls;
            v_ta := v_ta || v_ats;
            v_ti := v_ti || v_ids;
        END IF;
    END LOOP;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    IF v_last_at IS NULL THEN
        NULL; -- no row of the default priority: the cursor stays
    ELSIF v_rescanned IS NULL THEN
        -- No cursor row: queue_create makes one, so only a deleted row gets here.
        INSERT INTO claim_cursor (queue, created_at, id, rescanned_at)
        VALUES (p_queue, v_last_at, v_last_id, v_now)
        ON CONFLICT (queue) DO NOTHING;
    ELSE
        -- A rescan may move the cursor back (to the stragglers it found);
        -- other claims only move it forward, and not when it went back
        -- since this claim read it (below what it read): a rescan, or the
        -- new heads of lanes (lane.sql, _lane_next), which a claim moving it
        -- past them would leave to the pass before the cursor.
        UPDATE claim_cursor c
           SET created_at = v_last_at, id = v_last_id,
               rescanned_at = CASE WHEN v_rescan THEN v_now ELSE c.rescanned_at END
         WHERE c.queue = p_queue
           AND (v_rescan OR ((c.created_at, c.id) < (v_last_at, v_last_id)
                             AND (c.created_at, c.id) >= (v_read_at, v_read_id)))
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    -- The positions move forward to the last row taken at each level, as the
    -- default cursor does (and not when one went back since this claim read
    -- it: _lane_next); a level first taken from its head gains one; a rescan
    -- sets each level it took rows of wherever its rows lead and records
    -- itself. A queue whose claims never took a row of another priority has
    -- none, and pays no update here.
    IF (cardinality(v_tp) > 0 OR (v_prescan AND v_lv IS NOT NULL)) AND v_rescan_every > interval '0' THEN
        UPDATE claim_cursor c
           SET (priority_levels, priority_ats, priority_ids) =
               (SELECT array_agg(x.lvl ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_at ELSE x.s_at END ORDER BY x.lvl DESC),
                       array_agg(CASE WHEN x.take THEN x.m_id ELSE x.s_id END ORDER BY x.lvl DESC)
                  FROM (SELECT coalesce(st.lvl, m.lvl) AS lvl, st.at AS s_at, st.id AS s_id, m.at AS m_at, m.id AS m_id,
                               m.lvl IS NOT NULL AND (st.lvl IS NULL OR v_prescan
                                   OR ((st.at, st.id) < (m.at, m.id)
                                       AND NOT EXISTS (SELECT 1 FROM unnest(v_lv, v_la, v_li) r(lvl, at, id)
                                                        WHERE r.lvl = st.lvl AND (st.at, st.id) < (r.at, r.id)))) AS take
                          FROM unnest(c.priority_levels, c.priority_ats, c.priority_ids) st(lvl, at, id)
                          FULL JOIN (SELECT DISTINCT ON (t.lvl) t.lvl, t.at, t.id
                                       FROM unnest(v_tp, v_ta, v_ti) t(lvl, at, id)
                                      ORDER BY t.lvl, t.at DESC, t.id DESC) m ON m.lvl = st.lvl) x),
               priority_rescanned_at = CASE WHEN v_prescan THEN v_now ELSE c.priority_rescanned_at END
         WHERE c.queue = p_queue
           AND c.ctid = (SELECT k.ctid FROM claim_cursor k WHERE k.queue = p_queue FOR UPDATE SKIP LOCKED);
    END IF;

    v_token := gen_random_uuid();
    RETURN QUERY
    WITH claimed AS (
        UPDATE message m
           SET status = 'processing', owner = p_owner, token = v_token, attempt = m.attempt + 1, visible_at = v_until
         WHERE m.queue = p_queue AND m.ctid = ANY (v_all) AND m.id = ANY (v_all_ids) -- see the promotion
        RETURNING m.id, m.key, m.payload, m.headers, m.attempt, m.created_at, m.visible_at, m.token, m.lane, m.priority
    )
    SELECT c.id, c.key, c.payload, c.headers, c.attempt, c.created_at, c.visible_at, c.token, c.lane
      FROM claimed c ORDER BY c.priority DESC, c.created_at, c.id;
END
$$;
-- pgsweep:end functions/claim.sql

-- pgsweep:changed functions/retention_register.sql
CREATE OR REPLACE FUNCTION retention_owner_proof_drop(p_proof text, p_done boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_proof IS NULL OR p_proof !~ '^pg_temp\.pgsweep_owner_proof_[0-9a-f]{32}$' OR NOT EXISTS (
         SELECT FROM pg_catalog.pg_class c
          WHERE c.oid = pg_catalog.to_regclass(p_proof) AND c.relnamespace = pg_catalog.pg_my_temp_schema()) THEN
        RAISE EXCEPTION 'p_proof must name one of this session''s proofs (retention_owner_proof), got %',
            coalesce(pg_catalog.quote_literal(pg_catalog.left(p_proof, 100)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE 'DROP TABLE ' || p_proof;
END
$$;

CREATE OR REPLACE FUNCTION retention_register(p_name text, p_table regclass, p_time_column text, p_older_than interval,
    p_status_column text DEFAULT NULL, p_statuses text[] DEFAULT NULL,
    p_batch_size int DEFAULT 1000, p_mode text DEFAULT 'exclusive', p_interval interval DEFAULT '1 minute')
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_register_proved(p::regclass, p_name, p_table, p_time_column, p_older_than,
                  p_status_column, p_statuses, p_batch_size, p_mode, p_interval) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_unregister(p_name text)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_unregister_proved(p::regclass, p_name) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_time_zone(p_name text, p_time_zone text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_time_zone_proved(p::regclass, p_name, p_time_zone) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_filter(p_name text, p_column text, p_values text[])
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_filter_proved(p::regclass, p_name, p_column, p_values) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_strategy(p_name text, p_strategy text)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_strategy_proved(p::regclass, p_name, p_strategy) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;

CREATE OR REPLACE FUNCTION retention_set_lease_ttl(p_name text, p_ttl interval)
RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r FROM retention_owner_proof() p,
           retention_set_lease_ttl_proved(p::regclass, p_name, p_ttl) r,
           retention_owner_proof_drop(p, r IS NULL)
$$;
-- pgsweep:end functions/retention_register.sql

-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).
SELECT _grant_all();
