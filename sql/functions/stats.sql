-- Queue snapshots (issue 24, DESIGN.md "Observability"): the maintenance
-- part 'stats' (maintain_part.sql) takes one row per queue every
-- stats_interval into maintain_snapshot, and trims the rows older than
-- stats_retention. Pages and charts read the snapshots (stats_latest: one
-- index probe per queue; stats_history: one index range), so their cost does
-- not grow with the messages; queue_stats stays the exact live count.
-- The table is named maintain_* so that citus_distribute leaves it a local
-- table of the coordinator, where maintain() and the pages run (citus.sql);
-- every statement on a message table below still filters by one queue.
--
-- What a snapshot costs. The gauges (pending, due, in flight, failed, dead,
-- processed, oldest due age, lanes, blocked lanes) are counted the way
-- queue_counts counts them: one statement per table per queue, O(rows of
-- the queue), once per stats_interval by one session (the part's lease),
-- instead of once per page refresh by every viewer.
--
-- How the counters are counted: from what the tables already record, never
-- by the verbs. claim, complete, fail and send stay exactly as they are (no
-- counter row to update, no trigger: a per-queue counter row would be one
-- more row version and one more hot lock per verb). Each counter covers the
-- interval [previous snapshot's taken_at, this one's):
--   sent           rows of the queue created in the interval that are still
--                  recorded somewhere: live (message), processed
--                  (message_processed) or dead (message_dead);
--   completed      inbox: processed rows whose processed_at is in the
--                  interval (exact). outbox (complete deletes the row):
--                  rows that were live at the previous snapshot and are
--                  gone now, not to the dead letters (cancelled and purged
--                  rows count too);
--   dead_lettered  dead rows whose dead_at is in the interval (exact);
--   failures       failed attempts: the growth of the failures the rows
--                  carry (a failed row's attempt, an in-flight row's
--                  attempt - 1, a processed row's attempts - 1, a dead row's
--                  attempts) between the two snapshots;
--   retried        claims of a message tried before: the growth of
--                  attempt - 1 over the same rows.
-- The blind spot, stated: an outbox message sent and completed between two
-- snapshots is in neither sent nor completed (its row is gone when the
-- snapshot looks), and the failures and retries of an outbox message that
-- is completed before the next snapshot are lost with it. On an outbox queue
-- these counters are lower bounds; the gauges are exact at taken_at.
-- The counters of a queue's first snapshot are NULL (no interval).
--
-- Disk: one row per queue per stats_interval for stats_retention (default
-- 10 s and 7 days: 60,480 rows per queue, about 10 MB); each run deletes at
-- most 10,000 expired rows, oldest first.

-- _stats_snapshot_queue takes queue p_queue's snapshot at p_now (one row)
-- from the counts and its latest snapshot, and returns true; false when
-- that one is not older than p_now (taken already: a pinned clock, or a
-- second session). No row type of maintain_snapshot in its signature:
-- Citus refuses to distribute any function whose arguments have the type of
-- a table it does not manage (citus_distribute leaves maintain_* local).
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

-- _stats_snapshot takes the snapshot of every queue at p_now (NULL: the
-- clock), unless the latest one is younger than stats_interval (a second
-- session that got here first), and deletes at most p_trim expired rows.
-- It returns {"queues": n, "trimmed": n} for the run's counts.
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

-- stats_latest (monitor): every queue with its latest snapshot, one index
-- probe per queue (O(queues)). A queue without a snapshot yet has NULLs.
-- Counts only, no payloads: no per-queue right is needed (like queue_stats).
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

-- stats_history (monitor): queue p_queue's snapshots taken in [p_from,
-- p_to), oldest first: one range of the primary key. p_from must not be
-- after p_to; both within 10 years of the database clock (_check_now).
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
