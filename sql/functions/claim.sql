-- claim: lease up to p_batch due messages of one queue to p_owner.
--
-- The token. Every claim call draws a fresh, unguessable token
-- (gen_random_uuid()), stores it in message.token of every row it takes and
-- returns it with each of them: renew, complete, fail and release act only on
-- rows whose current claim carries their p_token (ack.sql). p_owner is only a
-- label -- who holds the row, for people and metrics -- so an owner that takes
-- its own expired lease back gets a new token and its old token acts on
-- nothing. token is in no index: claims stay HOT updates.
--
-- Candidates: rows with visible_at <= now and attempt < max_attempts. visible_at
-- is the delivery/retry time of pending and failed rows and the lease expiry
-- of processing rows, so expired leases are taken by the same scan. A row that
-- used its last attempt (attempt >= max_attempts) is never handed out again:
-- fail dead-letters it, and queue_recover dead-letters one whose lease expired.
--
-- The scan walks message_claim (queue, created_at, id) in order, locks up to
-- n rows FOR UPDATE SKIP LOCKED and stops: rows another claimer has locked
-- are skipped, not waited for, and a row that a concurrent claim updated and
-- committed meanwhile is re-checked against the predicate before it is
-- locked, so two claimers never get the same row. The UPDATE then finds the
-- locked rows by ctid (stable: we hold their locks) instead of descending the
-- primary key once per row, and changes only columns no index holds (status,
-- owner, token, attempt, visible_at), so it is a HOT update.
--
-- Parked rows. A row that is not due for a while -- a scheduled message, a
-- retry waiting for its backoff, a requeued dead letter with a delivery time
-- -- is parked: parked_until holds its due time. It is not in message_claim,
-- whose predicate is parked_until IS NULL, but in message_parked (queue,
-- parked_until). Without this, every scan from the head would walk all of
-- them, so a quiet queue with many messages scheduled for later would claim
-- slowly. Each claim first promotes the parked rows that
-- came due (one probe of message_parked when none did). Leases are not
-- parked, and parked_until is a column of its own rather than visible_at:
-- claims set visible_at every time, and an indexed column they change --
-- even one only a partial index holds -- would end their HOT updates. Rows
-- in flight number at most the workers' batches.
--
-- The claim cursor (table claim_cursor, one row per queue) is why a claim
-- does not slow down as a queue drains. Completed rows leave dead entries at
-- the head of message_claim until VACUUM removes them, and rows in flight sit
-- there too; a scan from the start walks all of them, on every claim, so the
-- cost grows with the rows processed since the last vacuum. The cursor is
-- the newest (created_at, id) any claim has taken, and the scan starts there.
-- Rows behind it are in flight, waiting for a retry or a schedule, or gone --
-- except those that became due since: expired leases, retries and scheduled
-- rows whose time came, rows of a claim that rolled back, and rows committed
-- late by a long transaction (created_at is the send time, not the commit
-- time). A rescan from the start finds them: the first claim more than the
-- queue's claim_rescan (default 1 second) after the last rescan does one, and
-- so does every claim that cannot fill its batch from the cursor on (it takes
-- the rest from the rows before the cursor). So a due row waits behind the
-- cursor only while claims fill whole batches with newer rows -- the queue has
-- a backlog -- and then at most about claim_rescan: oldest first is exact when
-- a queue keeps up, and within claim_rescan when it does not. A queue that
-- needs the exact order always sets claim_rescan to 0: every claim then scans
-- from the head and pays for the dead index entries there (docs/benchmarks.md,
-- "claim").
-- The cursor row is updated only by a claim that gets its lock (SKIP LOCKED):
-- claims never wait for each other; a skipped update only means the next
-- claim starts a little further back.
--
-- Ordered lanes (lane.sql) need nothing here: only a lane's head is ever in
-- the claim index; the messages waiting behind it are parked until
-- 'infinity', which the promotion below never reaches. So a claim never
-- returns two messages of one lane, and its cost does not grow with the
-- messages waiting behind heads (sql/tests/lanes.sql counts the scans). A
-- lane's next head usually lies behind the cursor (its lane was sent long
-- ago); the promotion moves the cursor back to it (_lane_next), so claims
-- find it from the cursor on instead of in the pass before it.
--
-- Priorities (send's p_priority, -100..100, default 0). Due messages are
-- taken highest priority first, then oldest first by (created_at, id). The
-- default priority keeps today's path: message_claim holds only the rows of
-- priority 0 (its predicate: parked_until IS NULL AND priority = 0), and the
-- cursor and the two passes above walk it as before. Every other row is in
-- message_claim_priority (queue, priority DESC, created_at, id) WHERE
-- parked_until IS NULL AND priority <> 0: the due rows of priority > 0 are
-- taken before the default passes (on a queue without them: one probe of an
-- index with no entry of the queue), those of priority < 0 after them, when
-- the batch is not full yet. That index has cursors of its own, for the
-- same reason as message_claim: the level being drained keeps its rows in
-- flight and its dead entries at its head. Each level a claim took rows of
-- has a position (claim_cursor.priority_levels, priority_ats, priority_ids:
-- the last row any claim took there); a claim probes those levels for a due
-- row at or after their position (one index descent each), scans the ones
-- that have one from their position, and the levels without a position
-- from their head (a message sent at a new, higher priority is found at
-- once). So only the rows behind a level's position wait for a rescan, as
-- the default ones wait behind the cursor: a claim that cannot fill its
-- batch otherwise takes them last, and the first claim claim_rescan after
-- the last rescan of the priority index (priority_rescanned_at) scans every
-- level from its head.
-- A lane's head competes with its own priority (the messages behind it wait
-- parked, in no claim index, whatever theirs); the lane's order stays
-- (created_at, id).
-- No aging: a due message waits while messages of higher priority are due
-- (an order that changes with the clock cannot be an index's order); use
-- another queue for work that must not wait behind a higher priority.
--
-- Groups (send's p_group; flow.sql, "Groups"). Grouped rows are in neither
-- claim index above but in message_group, and claims take turns between
-- the groups (_claim_groups), each claimer (p_owner) going round from its
-- own place (group_cursor): the groups' part of the batch first, then the
-- passes above for the messages without a group, then the groups again
-- while the batch has room. A queue without grouped rows pays one probe of
-- message_group.
--
-- Each row carries its lane (NULL: none) last, so that a consumer knows which
-- of its messages must keep their order among themselves.
--
-- A paused queue (queue_pause, queue_ops.sql) claims nothing: the flag is read
-- with the settings the claim reads anyway.
--
-- The clock is read once into v_now and the token drawn once into v_token
-- (scale-out rule: plain values in UPDATE). p_lease NULL means the queue's
-- lease_default. Rows come back in the order they were taken: highest
-- priority first, then oldest first.
--
-- Generic plans (plan_cache_mode): every statement here is an index scan
-- that its conditions choose, whatever the values. Left to itself, the plan
-- cache priced the generic plan of a scan with LIMIT p_batch - v_n far above
-- a custom one (it assumes a tenth of the rows) and planned the scan again
-- at every call: about a fifth of a claim's time (docs/benchmarks.md,
-- "Priorities"). On Citus, citus_distribute puts the default back (citus.sql).
--
-- This overload takes the time from its caller (p_now, NULL = the clock): for
-- tests only. claim(p_queue, p_owner, p_batch, p_lease) below is the verb.
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
    v_limit int;
    v_rate double precision;
    v_burst int;
    v_batch int;
    v_kept bigint[];
    v_q queue;
    v_gafter text;
    v_gcount int;
    v_gshare int;
    v_grouped boolean;
    v_gplace boolean := false;
    v_x numeric;
    v_gr record;
    v_glast text;
    v_g_ids bigint[] := '{}';
    v_g_grps text[] := '{}';
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
    -- The settings every claim uses; the whole row (v_q) only when the
    -- queue has groups or limits (below): a row of every column costs a
    -- claim more than these few.
    SELECT q.max_attempts, coalesce(p_lease, q.lease_default), q.claim_rescan, q.paused, q.max_in_flight,
           q.rate / extract(epoch FROM q.rate_per), coalesce(q.rate_burst, q.rate)
      INTO v_max, v_lease, v_rescan_every, v_paused, v_limit, v_rate, v_burst
      FROM queue q WHERE q.name = p_queue;
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
    -- Flow control (flow.sql): look for as many rows as there are free
    -- room and tokens, at most.
    v_batch := p_batch;
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL THEN
        v_batch := _flow_room(p_queue, v_limit, v_rate, v_burst, p_batch, v_now);
        IF v_batch = 0 THEN
            RETURN;
        END IF;
    END IF;

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
                        WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority <> 0 AND s.priority = l.lvl
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
    -- Groups (flow.sql): the groups' part of the batch first, all but the
    -- share of the messages without a group (one part in the groups this
    -- claimer's last claim served + 1, at least 1), from this claimer's
    -- place in the rotation. A queue whose messages have no group pays one
    -- probe of message_group here.
    v_grouped := EXISTS (SELECT 1 FROM message s WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NOT NULL);
    IF v_grouped THEN
        SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
        SELECT g.group_after, g.group_count, true INTO v_gafter, v_gcount, v_gplace
          FROM group_cursor g WHERE g.queue = p_queue AND g.owner = p_owner;
        -- g/(g+1) of the batch, rounded at random so that a claim of one
        -- row serves the groups as often as their share says
        v_x := v_batch * greatest(v_gcount, 1) / (greatest(v_gcount, 1) + 1.0);
        v_gshare := floor(v_x)::int + CASE WHEN random() < v_x - floor(v_x) THEN 1 ELSE 0 END;
        IF v_gshare > 0 THEN
            SELECT g.tids, g.ids, g.grps, g.last_grp INTO v_gr FROM _claim_groups(v_q, v_gafter, v_gshare, NULL, NULL, v_now) g;
            v_all := v_gr.tids;
            v_all_ids := v_gr.ids;
            v_g_ids := v_gr.ids;
            v_g_grps := v_gr.grps;
            v_glast := v_gr.last_grp;
            v_n := cardinality(v_all);
        END IF;
    END IF;
    v_seg := 0;
    LOOP
        EXIT WHEN v_n = v_batch;
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
                EXIT WHEN v_n = v_batch;
                SELECT array_agg(c.ctid), array_agg(c.id),
                       (array_agg(c.created_at ORDER BY c.created_at DESC, c.id DESC))[1],
                       (array_agg(c.id ORDER BY c.created_at DESC, c.id DESC))[1]
                  INTO v_tids, v_ids, v_at, v_id
                  FROM (SELECT s.ctid, s.created_at, s.id
                          FROM message s
                         WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority = 0
                           AND (s.created_at, s.id) >= (v_from_at, v_from_id)
                           AND (s.created_at, s.id) < (v_to_at, v_to_id)
                           AND s.visible_at <= v_now AND s.attempt < v_max
                         ORDER BY s.created_at, s.id
                         LIMIT v_batch - v_n
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
                EXIT WHEN v_n = v_batch OR v_rescan;
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
                 WHERE s.queue = p_queue AND s.parked_until IS NULL AND s.grp IS NULL AND s.priority <> 0
                   AND s.priority >= v_lo AND s.priority <= v_hi
                   AND (s.created_at, s.id) >= (v_fa, v_fi)
                   AND s.visible_at <= v_now AND s.attempt < v_max
                   AND (v_kind <> 3 OR NOT s.id = ANY (v_all_ids))
                 ORDER BY s.priority DESC, s.created_at, s.id
                 LIMIT v_batch - v_n
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
    -- The groups again when the batch has room: the rest of their turns,
    -- or every group's when the last claim served none.
    IF v_n < v_batch AND v_grouped THEN
        SELECT g.tids, g.ids, g.grps, g.last_grp INTO v_gr
          FROM _claim_groups(v_q, coalesce(v_glast, v_gafter), v_batch - v_n, v_g_ids, v_g_grps, v_now) g;
        IF cardinality(v_gr.ids) > 0 THEN
            v_all := v_all || v_gr.tids;
            v_all_ids := v_all_ids || v_gr.ids;
            v_g_ids := v_g_ids || v_gr.ids;
            v_g_grps := v_g_grps || v_gr.grps;
            v_n := cardinality(v_all);
        END IF;
        v_glast := coalesce(v_gr.last_grp, v_glast);
    END IF;
    IF v_n = 0 THEN
        IF v_grouped AND v_glast IS NOT NULL THEN
            -- the groups walked had nothing to give (in flight, at their
            -- limits): the next claim goes on after them
            PERFORM _group_place(p_queue, p_owner, v_glast, 0, v_now, v_gplace);
        END IF;
        RETURN;
    END IF;
    -- Flow control (flow.sql): keep the rows the claim has room and tokens
    -- for, under the gates of the queue and of its groups. In a race that
    -- cut it no cursor or position moves: the rows let go stay where the
    -- next claim looks.
    v_token := gen_random_uuid();
    IF v_limit IS NOT NULL OR v_rate IS NOT NULL
       OR (cardinality(v_g_ids) > 0 AND _flow_group_limited(v_q.group_max_in_flight, v_q.group_rate, v_q.group_overrides)) THEN
        IF v_q.name IS NULL THEN -- not read above (no groups)
            SELECT * INTO v_q FROM queue q WHERE q.name = p_queue;
        END IF;
        v_kept := _flow_keep(v_q, v_all_ids, v_g_ids, v_g_grps, v_token, v_until, v_now);
        IF cardinality(v_kept) = 0 THEN
            RETURN;
        ELSIF cardinality(v_kept) < v_n THEN
            SELECT array_agg(u.t ORDER BY u.o), array_agg(u.i ORDER BY u.o) INTO v_all, v_all_ids
              FROM unnest(v_all, v_all_ids) WITH ORDINALITY u(t, i, o)
             WHERE u.i = ANY (v_kept);
            v_n := cardinality(v_all);
            v_last_at := NULL;
            v_tp := '{}';
            v_prescan := false;
        END IF;
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

    IF v_grouped THEN
        -- where this claimer's next claim starts, and how many groups this
        -- one served (none: the messages without a group get whole
        -- batches); its row is taken SKIP LOCKED: a claim of the same owner
        -- in progress keeps it. (Plain values: Citus takes no subquery in
        -- an INSERT.)
        v_gcount := cardinality(ARRAY(SELECT DISTINCT u.g FROM unnest(v_g_ids, v_g_grps) u(id, g) WHERE u.id = ANY (v_all_ids)));
        v_gafter := coalesce(v_glast, v_gafter);
        PERFORM _group_place(p_queue, p_owner, v_gafter, v_gcount, v_now, v_gplace);
    END IF;
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

-- The verb: the database clock; p_lease left out or NULL is the queue's
-- lease_default.
CREATE OR REPLACE FUNCTION claim(p_queue text, p_owner text, p_batch int DEFAULT 100, p_lease interval DEFAULT NULL)
RETURNS TABLE (id bigint, key text, payload jsonb, headers jsonb, attempt int,
               created_at timestamptz, lease_expires_at timestamptz, token uuid, lane text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY SELECT * FROM claim(p_queue, p_owner, p_batch, p_lease, NULL::timestamptz);
END
$$;
