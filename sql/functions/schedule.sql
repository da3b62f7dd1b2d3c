-- Periodic schedules (docs/schedules.md): a schedule sends a fixed message
-- to a queue at every slot of a cron expression (schedule_cron.sql), in a
-- time zone. The maintenance part 'schedules' (maintain_schedules.sql)
-- sends each due slot exactly once.
--
-- Table schedule, one row per schedule: a small shared table (a reference
-- table on Citus, like queue), its foreign key to queue ON DELETE CASCADE:
-- queue_drop drops the queue's schedules with it.
--
-- Who may do what (docs/security.md):
--   * S_admin calls schedule_create, schedule_pause, schedule_resume,
--     schedule_drop; S_monitor reads the schedules view and
--     schedule_next_times (no payload, no header: payloads are not shown to
--     monitors anywhere).
--   * A schedule sends as its owner, the role that created (or last
--     re-created) it, which must hold `send` on the queue (queue_rights.sql;
--     42501 otherwise): managing schedules is no way around a queue's
--     rights. Every slot checks it again: a schedule whose owner lost the
--     right (revoked, role dropped or renamed) sends nothing, records why
--     (last_error) and keeps its slots until the right comes back (then its
--     catch-up mode decides what is sent).
--   * Pausing, resuming, dropping or re-creating an existing schedule needs
--     membership in its owner, or `manage` on its queue.
--
-- schedule_create is an upsert (like retention_register): creating a name
-- that exists replaces its queue, expression, message and mode; its history
-- (last slot, last message) and whether it is paused stay. When the
-- expression or the time zone changed, the next slot is computed afresh from
-- now; otherwise a slot that is due and not yet sent stays due.

-- _schedule_manage returns schedule p_name locked (FOR UPDATE) when the
-- caller may manage it (member of its owner, or manage on its queue: 42501
-- otherwise); NULL fields when there is none and p_must is false, 22023
-- when p_must.
CREATE OR REPLACE FUNCTION _schedule_manage(p_name text, p_must boolean)
RETURNS schedule
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule;
    v_caller name := _caller_role();
BEGIN
    PERFORM _check_text('p_name', p_name, 200);
    SELECT * INTO v FROM schedule s WHERE s.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        IF p_must THEN
            RAISE EXCEPTION 'p_name must name an existing schedule, got %', quote_literal(p_name)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN v;
    END IF;
    IF v_caller = current_user
       OR (pg_catalog.to_regrole(pg_catalog.quote_ident(v.owner_name)) IS NOT NULL
           AND pg_catalog.pg_has_role(v_caller, pg_catalog.to_regrole(pg_catalog.quote_ident(v.owner_name)), 'MEMBER')) THEN
        RETURN v;
    END IF;
    IF NOT _queue_allowed(v.queue, 'manage') THEN
        RAISE EXCEPTION 'permission denied: role "%" may not change schedule "%" (it belongs to "%"; manage on queue "%" would do)',
            v_caller, p_name, v.owner_name, v.queue
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN v;
END
$$;

-- _schedule_next: the first slot of schedule s after p_after (NULL: none
-- within the search bound).
CREATE OR REPLACE FUNCTION _schedule_next(s schedule, p_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT t FROM _cron_next(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or, s.every_secs,
                                     s.time_zone, p_after, 1) t);
END
$$;

-- schedule_create creates or replaces schedule p_name (at most 200
-- characters): a message with p_payload and p_headers (as send's; the
-- headers pgsweep-schedule and pgsweep-slot are added to each message, and
-- win over the caller's) sent to p_queue, in lane p_lane (NULL: none), at
-- every slot of p_cron (schedule_cron.sql) in p_time_zone (a
-- pg_timezone_names name). p_catch_up says what a pass sends for slots it
-- finds overdue: 'latest' (default) the latest of them only; 'all' every
-- one, oldest first, at most 1000 per schedule per step; 'none' nothing for
-- a slot older than the setting schedule_missed_after (then it waits for
-- the next slot). Slots before the call are never sent.
CREATE OR REPLACE FUNCTION schedule_create(p_name text, p_queue text, p_cron text, p_payload jsonb DEFAULT '{}',
    p_headers jsonb DEFAULT '{}', p_lane text DEFAULT NULL, p_time_zone text DEFAULT 'UTC',
    p_catch_up text DEFAULT 'latest')
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_parsed record;
    v_old schedule;
    v_new schedule;
BEGIN
    PERFORM _check_text('p_name', p_name, 200);
    PERFORM _queue_get(p_queue);
    v_parsed := _cron_parse(p_cron);
    PERFORM _check_message(p_payload, p_headers, NULL);
    IF p_headers IS NULL THEN
        RAISE EXCEPTION 'p_headers must be a JSON object, got NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _check_size('p_payload', pg_column_size(p_payload), 'max_payload_bytes');
    PERFORM _check_size('p_headers', pg_column_size(p_headers), 'max_headers_bytes');
    PERFORM _check_lane('p_lane', p_lane);
    PERFORM _check_schedule_time_zone('p_time_zone', p_time_zone);
    PERFORM _check_text('p_catch_up', p_catch_up, 20); -- (the message below echoes it)
    IF p_catch_up NOT IN ('none', 'latest', 'all') THEN
        RAISE EXCEPTION 'p_catch_up must be one of none, latest, all, got %', quote_literal(p_catch_up)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM _queue_require(p_queue, 'send'); -- the schedule sends as its creator
    v_old := _schedule_manage(p_name, false);

    v_new := v_old;
    v_new.name := p_name;
    v_new.queue := p_queue;
    v_new.cron := p_cron;
    v_new.time_zone := p_time_zone;
    v_new.catch_up := p_catch_up;
    v_new.payload := p_payload;
    v_new.headers := p_headers;
    v_new.lane := p_lane;
    v_new.minutes := v_parsed.minutes;
    v_new.hours := v_parsed.hours;
    v_new.doms := v_parsed.doms;
    v_new.months := v_parsed.months;
    v_new.dows := v_parsed.dows;
    v_new.day_or := v_parsed.day_or;
    v_new.every_secs := v_parsed.every_secs;
    v_new.owner_name := _caller_role();
    v_new.updated_at := v_now;
    IF v_old.name IS NULL THEN
        v_new.paused := false;
        v_new.created_at := v_now;
        v_new.last_slot := v_now;
        v_new.next_at := _schedule_next(v_new, v_now);
        INSERT INTO schedule SELECT (v_new).*;
    ELSE
        IF v_old.cron IS DISTINCT FROM p_cron OR v_old.time_zone IS DISTINCT FROM p_time_zone THEN
            v_new.last_slot := greatest(v_old.last_slot, v_now);
            v_new.next_at := _schedule_next(v_new, v_new.last_slot);
        END IF;
        v_new.last_error := NULL;
        UPDATE schedule s
           SET queue = v_new.queue, cron = v_new.cron, time_zone = v_new.time_zone, catch_up = v_new.catch_up,
               payload = v_new.payload, headers = v_new.headers, lane = v_new.lane, minutes = v_new.minutes,
               hours = v_new.hours, doms = v_new.doms, months = v_new.months, dows = v_new.dows,
               day_or = v_new.day_or, every_secs = v_new.every_secs, owner_name = v_new.owner_name,
               next_at = v_new.next_at, last_slot = v_new.last_slot, last_error = NULL, updated_at = v_now
         WHERE s.name = p_name;
    END IF;
END
$$;

-- schedule_pause: no slot is sent while a schedule is paused. Returns true
-- when it was running (false: paused already). 22023 for an unknown name.
CREATE OR REPLACE FUNCTION schedule_pause(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, true);
BEGIN
    UPDATE schedule s SET paused = true, updated_at = clock_timestamp() WHERE s.name = p_name AND NOT s.paused;
    RETURN FOUND;
END
$$;

-- schedule_resume: a paused schedule sends again from its first slot after
-- now; the slots that fell in the pause are not sent (whatever its catch-up
-- mode: a pause means "not these"). Returns true when it was paused.
CREATE OR REPLACE FUNCTION schedule_resume(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, true);
    v_now timestamptz := clock_timestamp();
BEGIN
    IF NOT v.paused THEN
        RETURN false;
    END IF;
    v.last_slot := greatest(v.last_slot, v_now);
    UPDATE schedule s
       SET paused = false, last_slot = v.last_slot, next_at = _schedule_next(v, v.last_slot), last_error = NULL,
           updated_at = v_now
     WHERE s.name = p_name;
    RETURN true;
END
$$;

-- schedule_drop removes schedule p_name; returns whether there was one.
-- A pass sending its slot holds its row: the drop waits for it, and then
-- the slot was sent (exactly once) or not at all.
CREATE OR REPLACE FUNCTION schedule_drop(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v schedule := _schedule_manage(p_name, false);
BEGIN
    IF v.name IS NULL THEN
        RETURN false;
    END IF;
    DELETE FROM schedule s WHERE s.name = p_name;
    RETURN true;
END
$$;

-- schedule_rows: the rows of the schedules view, read as S_owner (as
-- lease_rows, lease.sql: a monitor holds no privilege on the table). No
-- payload and no headers.
CREATE OR REPLACE FUNCTION schedule_rows()
RETURNS TABLE (name text, queue text, cron text, time_zone text, next_at timestamptz, last_at timestamptz,
               last_id bigint, paused boolean, catch_up text, lane text, owner text, last_slot timestamptz,
               last_error text, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.name, s.queue, s.cron, s.time_zone, s.next_at, s.last_at, s.last_id, s.paused, s.catch_up, s.lane,
           s.owner_name::text, s.last_slot, s.last_error, s.created_at, s.updated_at
      FROM schedule s
$$;

-- schedules (monitor): every schedule, its next slot and what it sent last.
CREATE OR REPLACE VIEW schedules AS
SELECT name, queue, cron, time_zone, next_at, last_at, last_id, paused, catch_up, lane, owner, last_slot,
       last_error, created_at, updated_at
  FROM schedule_rows();
