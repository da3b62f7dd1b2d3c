-- The maintenance part 'schedules' (maintain.sql, maintain_part.sql): it
-- sends the due slots of the periodic schedules (schedule.sql), each
-- exactly once, whatever runs it -- pg_cron, any number of `pgsweep run`
-- replicas, overlapping passes, a session killed mid-pass.
--
-- Exactly once: a step locks the due schedule rows (FOR UPDATE SKIP
-- LOCKED), sends their slots and moves each row's last slot and next slot
-- on, all in one transaction. A concurrent step skips rows locked by
-- another, and re-reads a row that changed since its snapshot (READ
-- COMMITTED re-checks `next_at <= now` on the new version), so it never
-- sends a slot another committed; a step that dies rolls back its messages
-- together with the move. The part's lease (maintain_part.sql) already keeps
-- two runs apart; the row locks make it exact without relying on it (the
-- tests run the step from 8 sessions at once).
--
-- The queue row is locked FOR KEY SHARE SKIP LOCKED before a schedule
-- sends: queue_drop (which locks it FOR UPDATE) then either waits for the
-- step and deletes its messages with the queue, or has it already, and the
-- step leaves that schedule (its row goes with the queue, ON DELETE
-- CASCADE). A paused queue still gets its messages: pausing stops claims,
-- not sends (queue_ops.sql).
--
-- Each message carries the headers pgsweep-schedule (the name) and
-- pgsweep-slot (the slot, UTC, ISO 8601), and the key
-- 'pgsweep-schedule:<name>@<slot>': on an inbox queue the key's
-- de-duplication is a second guard, and the relay publishes it as the
-- message's identity (a broker's duplicate window drops a replay).
--
-- Catch-up (schedule's catch_up), for the slots in (last slot, now]:
--   all     every slot, oldest first, at most 1000 per schedule per step (a
--           step says "more" and the next step, or the next pass, goes on);
--   latest  the latest slot only;
--   none    the latest slot when it is at most schedule_missed_after old,
--           else nothing.
-- The next slot is then the first after the last one handled.

-- _schedule_slot_text: a slot as the headers and the key show it.
CREATE OR REPLACE FUNCTION _schedule_slot_text(p_slot timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT to_char(p_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') $$;

-- _schedule_run takes one step of the part at p_now (NULL: the clock): it
-- sends the due slots of at most p_limit schedules and returns its counts
-- ({"sent": messages, "fired": schedules that sent, "skipped": schedules
-- whose overdue slots were dropped by their mode, "refused": schedules
-- whose owner lacks send, "more": another step has work}).
CREATE OR REPLACE FUNCTION _schedule_run(p_now timestamptz DEFAULT NULL, p_limit int DEFAULT 100)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_missed interval := setting_interval('schedule_missed_after');
    s schedule;
    v_q queue;
    v_slots timestamptz[];
    v_slot timestamptz;
    v_latest timestamptz;
    v_r record;
    v_key text;
    v_last_id bigint;
    v_rows int := 0; -- schedules moved on
    v_sent int := 0;
    v_fired int := 0;
    v_skipped int := 0;
    v_refused int := 0;
    v_more boolean := false;
BEGIN
    PERFORM _check_now('p_now', p_now);
    PERFORM _check_int('p_limit', p_limit, 1, 10000);
    FOR s IN SELECT * FROM schedule x
              WHERE NOT x.paused AND x.next_at <= v_now
              ORDER BY x.last_error IS NOT NULL, x.next_at -- a refused schedule (it stays due) does not hold up the others
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED LOOP
        SELECT * INTO v_q FROM queue q WHERE q.name = s.queue FOR KEY SHARE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND; -- being dropped (or locked by hand): the next step sees
        IF NOT _queue_role_holds(s.owner_name, s.queue, 'send') THEN
            v_refused := v_refused + 1;
            UPDATE schedule x
               SET last_error = format('role "%s" lacks send on queue "%s": nothing sent (queue_grant, or re-create the schedule as a role that holds it)',
                                       s.owner_name, s.queue)
             WHERE x.name = s.name;
            CONTINUE;
        END IF;
        IF s.catch_up = 'all' THEN
            v_slots := ARRAY(SELECT t FROM _cron_next(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or,
                                                       s.every_secs, s.time_zone, s.last_slot, 1000, v_now) t);
            v_latest := v_slots[cardinality(v_slots)];
            IF cardinality(v_slots) = 1000 AND _schedule_next(s, v_latest) <= v_now THEN
                v_more := true;
            END IF;
        ELSE
            v_latest := _cron_latest(s.minutes, s.hours, s.doms, s.months, s.dows, s.day_or, s.every_secs,
                                     s.time_zone, s.last_slot, v_now);
            v_slots := CASE WHEN v_latest IS NULL THEN '{}'
                            WHEN s.catch_up = 'none' AND v_latest < v_now - v_missed THEN '{}'
                            ELSE ARRAY[v_latest] END;
            IF v_latest IS NOT NULL AND (cardinality(v_slots) = 0 OR v_latest > s.next_at) THEN
                v_skipped := v_skipped + 1;
            END IF;
        END IF;
        v_last_id := s.last_id;
        FOREACH v_slot IN ARRAY v_slots LOOP
            -- the slot is the message's key (its identity for a relay, the
            -- de-duplication of an inbox) and, on an outbox, its unique key:
            -- a slot sent twice would be a duplicate while the first is live
            v_key := 'pgsweep-schedule:' || s.name || '@' || _schedule_slot_text(v_slot);
            v_r := _send(v_q, s.payload,
                         s.headers || jsonb_build_object('pgsweep-schedule', s.name, 'pgsweep-slot', _schedule_slot_text(v_slot)),
                         v_key, NULL, v_now, s.lane, CASE WHEN v_q.kind = 'outbox' THEN v_key END, NULL, 0::smallint, NULL::text);
            IF NOT v_r.duplicate THEN
                v_sent := v_sent + 1;
                v_last_id := v_r.id;
            END IF;
        END LOOP;
        IF cardinality(v_slots) > 0 THEN
            v_fired := v_fired + 1;
            PERFORM pg_notify(notify_channel(), s.queue);
        END IF;
        v_rows := v_rows + 1;
        v_latest := coalesce(v_latest, s.next_at); -- (no slot found: the next is past the bound; move on)
        UPDATE schedule x
           SET last_slot = v_latest,
               next_at = _schedule_next(s, v_latest),
               last_at = CASE WHEN cardinality(v_slots) > 0 THEN v_now ELSE x.last_at END,
               last_id = v_last_id,
               last_error = NULL
         WHERE x.name = s.name;
    END LOOP;
    RETURN jsonb_build_object('sent', v_sent, 'fired', v_fired, 'skipped', v_skipped, 'refused', v_refused,
                              'more', v_more OR v_rows = p_limit);
END
$$;

