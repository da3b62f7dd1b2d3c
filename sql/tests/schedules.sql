-- pgTAP: periodic schedules (sql/functions/schedule_cron.sql, schedule.sql,
-- maintain_schedules.sql; docs/schedules.md). The cron rules through
-- schedule_next_times (robfig/cron's reading: internal/schedtest compares
-- 300+ expressions), every bad argument (22023 naming it, nothing changed),
-- the catch-up modes, exactly once per slot in one session (the Go test
-- schedule_test.go races 8), rights (admin manages, worker may not, monitor
-- reads the view without payloads, a schedule sends only while its owner
-- holds send), pauses, the queue's drop.
BEGIN;
SET LOCAL client_min_messages = warning;
SELECT plan(88);

\ir include/as_role.sql
CREATE FUNCTION pg_temp.next(p_cron text, p_zone text, p_after text, p_n int) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(to_char(t AT TIME ZONE p_zone, 'YYYY-MM-DD HH24:MI'), ', ' ORDER BY t)
      FROM pgsweep.schedule_next_times(p_cron, p_zone, p_after::timestamptz, p_n) t $$;
CREATE FUNCTION pg_temp.err(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE FUNCTION pg_temp.fp() RETURNS text LANGUAGE sql AS $$
    SELECT md5(coalesce((SELECT string_agg(s::text, ',' ORDER BY s.name) FROM pgsweep.schedule s), '')) $$;

-- cron rules
SELECT is(pg_temp.next('*/20 * * * *', 'UTC', '2024-01-01 00:05+00', 3), '2024-01-01 00:20, 2024-01-01 00:40, 2024-01-01 01:00', 'steps');
SELECT is(pg_temp.next('1-10/4 3 * * *', 'UTC', '2024-01-01 00:00+00', 4), '2024-01-01 03:01, 2024-01-01 03:05, 2024-01-01 03:09, 2024-01-02 03:01', 'range with a step');
SELECT is(pg_temp.next('50/5 0 * * *', 'UTC', '2024-01-01 00:00+00', 3), '2024-01-01 00:50, 2024-01-01 00:55, 2024-01-02 00:50', 'N/STEP is N-max/STEP');
SELECT is(pg_temp.next('0 12 1,15 * *', 'UTC', '2024-01-02 00:00+00', 2), '2024-01-15 12:00, 2024-02-01 12:00', 'lists');
SELECT is(pg_temp.next('0 0 * feb,Mar-apr Sun', 'UTC', '2024-01-01 00:00+00', 2), '2024-02-04 00:00, 2024-02-11 00:00', 'names of months and days in any case');
SELECT is(pg_temp.next('0 0 * * 7', 'UTC', '2024-01-01 00:00+00', 1), pg_temp.next('0 0 * * 0', 'UTC', '2024-01-01 00:00+00', 1), '7 is Sunday, like 0');
SELECT is(pg_temp.next('0 0 13 * FRI', 'UTC', '2024-09-10 00:00+00', 3), '2024-09-13 00:00, 2024-09-20 00:00, 2024-09-27 00:00', 'day-of-month and day-of-week both restricted: either matches');
SELECT is(pg_temp.next('0 0 */2 * MON', 'UTC', '2024-01-01 00:00+00', 3), '2024-01-03 00:00, 2024-01-05 00:00, 2024-01-07 00:00', '*/2 counts as restricted: either matches (robfig)');
SELECT is(pg_temp.next('0 0 * * MON', 'UTC', '2024-01-02 00:00+00', 2), '2024-01-08 00:00, 2024-01-15 00:00', 'day-of-month * and a weekday: both must match');
SELECT is(pg_temp.next('0 0 31 * *', 'UTC', '2024-01-31 00:00+00', 3), '2024-03-31 00:00, 2024-05-31 00:00, 2024-07-31 00:00', '31 only in 31-day months');
SELECT is(pg_temp.next('0 0 29 2 *', 'UTC', '2024-03-01 00:00+00', 2), '2028-02-29 00:00, 2032-02-29 00:00', '29 February only in leap years');
SELECT is(pg_temp.next('0 0 29 2 *', 'UTC', '2096-03-01 00:00+00', 1), '2104-02-29 00:00', 'the search goes 8 years past 2100');
SELECT is(pg_temp.next('30 2 * * *', 'Europe/Berlin', '2024-03-30 00:00+00', 2), '2024-03-30 02:30, 2024-04-01 02:30', 'a slot in the spring-forward gap is skipped');
SELECT is((SELECT string_agg(to_char(t, 'HH24:MI TZ'), ', ' ORDER BY t) FROM pgsweep.schedule_next_times('30 2 * * *', 'Europe/Berlin', '2024-10-26 12:00+00', 3) t),
    (SELECT string_agg(to_char(t, 'HH24:MI TZ'), ', ' ORDER BY t) FROM (VALUES (timestamptz '2024-10-27 00:30+00'), ('2024-10-27 01:30+00'), ('2024-10-28 01:30+00')) v(t)),
    'a slot in the repeated fall-back hour fires twice');
SELECT is(pg_temp.next('0 9 * * *', 'America/New_York', '2024-03-09 00:00+00', 2), '2024-03-09 09:00, 2024-03-10 09:00', 'wall-clock time in the zone');
SELECT is(pg_temp.next('@every 90 seconds', 'UTC', '1970-01-01 00:00+00', 2), '1970-01-01 00:01, 1970-01-01 00:03', '@every: multiples since the epoch');
SELECT is((SELECT count(*) FROM pgsweep.schedule_next_times('@every 1 hour', 'Asia/Kolkata', '2024-01-01 00:10+00', 3) t WHERE extract(minute FROM t AT TIME ZONE 'UTC') = 0), 3::bigint, '@every ignores the zone: top of every UTC hour');
SELECT is(pg_temp.next('@weekly', 'UTC', '2024-01-01 00:00+00', 1), '2024-01-07 00:00', '@weekly is Sunday midnight');
SELECT is(pg_temp.next('@Hourly', 'UTC', '2024-01-01 00:30+00', 1), '2024-01-01 01:00', 'descriptors in any case');

-- bad expressions and arguments: 22023 naming the argument
SELECT is(pg_temp.err($$SELECT pgsweep.schedule_next_times('61 * * * *')$$), '22023: p_cron must be a five-field cron expression or @every <interval>, got ''61 * * * *'': minute 61 out of range 0-59', 'minute out of range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* 24 * * *')$$), '^22023: p_cron .*hour 24 out of range 0-23$', 'hour out of range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * 0 * *')$$), '^22023: p_cron .*day-of-month 0 out of range 1-31$', 'day-of-month out of range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * 13 *')$$), '^22023: p_cron .*month 13 out of range 1-12$', 'month out of range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * * 8')$$), '^22023: p_cron .*day-of-week 8 out of range 0-7$', 'day-of-week out of range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * *')$$), '^22023: p_cron .*4 fields, expected 5', 'four fields');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * * * *')$$), '^22023: p_cron .*6 fields, expected 5', 'six fields (no seconds)');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * JANUARY *')$$), '^22023: p_cron .*month ''JANUARY'' is not a number or a name \(JAN-DEC\)', 'unknown name');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('MON * * * *')$$), '^22023: p_cron .*minute ''MON'' is not a number$', 'a name where none is allowed');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('*/0 * * * *')$$), '^22023: p_cron .*step ''0'' must be a positive whole number', 'step 0');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('10-5 * * * *')$$), '^22023: p_cron .*range ''10-5'' begins after it ends', 'reversed range');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('1,,2 * * * *')$$), '^22023: p_cron .*empty list element', 'empty list element');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('1-2-3 * * * *')$$), '^22023: p_cron .*more than one -', 'two hyphens');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('*/2/3 * * * *')$$), '^22023: p_cron .*more than one /', 'two slashes');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('0 0 30 2 *')$$), '^22023: p_cron .*never fires', 'never fires');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('@every 0.5 seconds')$$), '^22023: p_cron .*whole number of seconds from 1 second to 366 days', '@every below a second');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('@every 1 month')$$), '^22023: p_cron .*no months or years', '@every a month');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('@every soon')$$), '^22023: p_cron .*''soon'' is not an interval', '@every not an interval');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('@reboot')$$), '^22023: p_cron .*unknown descriptor', '@reboot');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times(NULL)$$), '^22023: p_cron must be a non-empty string', 'NULL expression');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * * *', 'Mars/Olympus')$$), '^22023: p_time_zone must be a time zone name of pg_timezone_names', 'unknown zone');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * * *', 'UTC', NULL, 0)$$), '^22023: p_count must be', 'p_count 0');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_next_times('* * * * *', 'UTC', 'infinity', 1)$$), '^22023: p_after must be NULL', 'p_after infinity');

SELECT pgsweep.queue_create('sch_q');
SELECT pgsweep.queue_create('sch_in', 'inbox');
SELECT lives_ok($$SELECT pgsweep.schedule_create('s_all', 'sch_q', '*/10 * * * *', '{"job": "report"}', '{"x": "y"}', NULL, 'UTC', 'all')$$, 'create');
SELECT pg_temp.fp() AS before \gset
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create(NULL, 'sch_q', '* * * * *')$$), '^22023: p_name must be', 'p_name NULL');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create(' x', 'sch_q', '* * * * *')$$), '^22023: p_name must not begin or end with whitespace', 'p_name padded');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'nope', '* * * * *')$$), '^22023: p_queue', 'unknown queue');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * * *')$$), '^22023: p_cron', 'bad cron');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', NULL)$$), '^22023: p_payload must be a JSON value', 'p_payload NULL');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', '{}', '[1]')$$), '^22023: p_headers must be a JSON object', 'p_headers an array');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', '{}', NULL)$$), '^22023: p_headers must be a JSON object, got NULL', 'p_headers NULL');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', '{}', '{}', '')$$), '^22023: p_lane', 'p_lane empty');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', '{}', '{}', NULL, 'UTC+99')$$), '^22023: p_time_zone', 'p_time_zone not a zone name');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', '{}', '{}', NULL, 'UTC', 'some')$$), '^22023: p_catch_up must be one of none, latest, all', 'p_catch_up');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_create('x', 'sch_q', '* * * * *', to_jsonb(repeat('x', 2000000)))$$), '^22023: p_payload', 'payload over max_payload_bytes');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_pause('nope')$$), '^22023: p_name must name an existing schedule', 'pause: unknown');
SELECT matches(pg_temp.err($$SELECT pgsweep.schedule_resume(NULL)$$), '^22023: p_name must be', 'resume: NULL');
SELECT is(pgsweep.schedule_drop('nope'), false, 'drop: unknown is false');
SELECT is(pg_temp.fp(), :'before', 'the bad calls changed nothing');

-- the part: catch-up modes, exactly once
UPDATE pgsweep.schedule SET last_slot = '2024-01-01 00:00+00', next_at = '2024-01-01 00:10+00' WHERE name = 's_all';
SELECT pgsweep.schedule_create('s_latest', 'sch_q', '*/10 * * * *', '{"job": "latest"}', p_catch_up => 'latest');
SELECT pgsweep.schedule_create('s_none', 'sch_q', '*/10 * * * *', '{"job": "none"}', p_catch_up => 'none');
UPDATE pgsweep.schedule SET last_slot = '2024-01-01 00:00+00', next_at = '2024-01-01 00:10+00' WHERE name IN ('s_latest', 's_none');
SELECT is(pgsweep._schedule_run('2024-01-01 01:08+00')::text, '{"more": false, "sent": 7, "fired": 2, "refused": 0, "skipped": 2}', 'one step: all 6, latest 1, none 0');
SELECT is((SELECT string_agg(headers ->> 'pgsweep-slot', ',' ORDER BY id) FROM pgsweep.message WHERE payload ->> 'job' = 'report'),
    '2024-01-01T00:10:00Z,2024-01-01T00:20:00Z,2024-01-01T00:30:00Z,2024-01-01T00:40:00Z,2024-01-01T00:50:00Z,2024-01-01T01:00:00Z', 'all: every missed slot, oldest first');
SELECT is((SELECT headers FROM pgsweep.message WHERE payload ->> 'job' = 'latest'), '{"pgsweep-slot": "2024-01-01T01:00:00Z", "pgsweep-schedule": "s_latest"}'::jsonb, 'latest: one, the latest slot; headers name it');
SELECT is((SELECT key FROM pgsweep.message WHERE payload ->> 'job' = 'latest'), 'pgsweep-schedule:s_latest@2024-01-01T01:00:00Z', 'the key names schedule and slot');
SELECT is((SELECT headers ->> 'x' FROM pgsweep.message WHERE payload ->> 'job' = 'report' LIMIT 1), 'y', 'the schedule''s headers are kept');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE payload ->> 'job' = 'none'), 0::bigint, 'none: a slot older than schedule_missed_after is not sent');
SELECT is((SELECT string_agg(name || '=' || to_char(next_at AT TIME ZONE 'UTC', 'HH24:MI'), ',' ORDER BY name) FROM pgsweep.schedules),
    's_all=01:10,s_latest=01:10,s_none=01:10', 'each moved on to its next slot');
SELECT is(pgsweep._schedule_run('2024-01-01 01:08+00')::text, '{"more": false, "sent": 0, "fired": 0, "refused": 0, "skipped": 0}', 'again at the same time: nothing twice');
SELECT is(pgsweep._schedule_run('2024-01-01 01:11+00') ->> 'sent', '3', 'the next slot: one each (none: a fresh slot is sent)');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE key LIKE 'pgsweep-schedule:%'), (SELECT count(DISTINCT key) FROM pgsweep.message WHERE key LIKE 'pgsweep-schedule:%'), 'one message per slot');
SELECT is((SELECT last_id FROM pgsweep.schedules WHERE name = 's_none'), (SELECT max(id) FROM pgsweep.message WHERE payload ->> 'job' = 'none'), 'last_id');

-- pause, resume, re-create, a paused queue, drop
SELECT is(pgsweep.schedule_pause('s_all'), true, 'pause');
SELECT is(pgsweep._schedule_run('2024-01-01 02:00+00') ->> 'fired', '2', 'a paused schedule sends nothing');
SELECT pgsweep.schedule_create('s_all', 'sch_q', '*/10 * * * *', '{"job": "report2"}', p_catch_up => 'all');
SELECT is((SELECT paused FROM pgsweep.schedules WHERE name = 's_all'), true, 're-create keeps a schedule paused');
SELECT is(pgsweep.schedule_resume('s_all'), true, 'resume');
SELECT cmp_ok((SELECT next_at FROM pgsweep.schedules WHERE name = 's_all'), '>', clock_timestamp(), 'resume: the slots of the pause are not sent');
SELECT pgsweep.queue_pause('sch_q');
UPDATE pgsweep.schedule SET last_slot = '2024-01-01 02:05+00', next_at = '2024-01-01 02:10+00' WHERE name = 's_all';
SELECT pgsweep._schedule_run('2024-01-01 02:10+00');
SELECT is((SELECT count(*) FROM pgsweep.message WHERE key = 'pgsweep-schedule:s_all@2024-01-01T02:10:00Z'), 1::bigint, 'a paused queue still gets its slots (pausing stops claims, not sends)');

-- rights
CREATE ROLE sch_admin NOLOGIN IN ROLE pgsweep_admin;
CREATE ROLE sch_worker NOLOGIN IN ROLE pgsweep_worker;
CREATE ROLE sch_monitor NOLOGIN IN ROLE pgsweep_monitor;
SELECT is(pg_temp.as_role('sch_worker', $$SELECT pgsweep.schedule_create('w', 'sch_q', '* * * * *')$$), '42501', 'a worker may not create');
SELECT is(pg_temp.as_role('sch_monitor', $$SELECT pgsweep.schedule_drop('s_all')$$), '42501', 'a monitor may not drop');
SELECT is(pg_temp.as_role_val('sch_monitor', $$SELECT count(*) FROM pgsweep.schedules$$), '3', 'a monitor reads the view');
SELECT is(pg_temp.as_role('sch_monitor', $$SELECT payload FROM pgsweep.schedules$$), '42703', 'the view has no payload');
SELECT is(pg_temp.as_role('sch_monitor', $$SELECT 1 FROM pgsweep.schedule$$), '42501', 'nor the table to a monitor');
SELECT is(pg_temp.as_role('sch_admin', $$SELECT pgsweep._schedule_run(now())$$), '42501', 'the p_now step is the owner''s');
SELECT is(pg_temp.as_role_err('sch_admin', $$SELECT pgsweep.schedule_create('a1', 'sch_q', '* * * * *')$$), '42501: permission denied: role "sch_admin" lacks send on queue "sch_q"', 'an admin without send on the queue may not create');
SELECT pgsweep.queue_grant('sch_q', 'sch_admin', ARRAY['send']);
SELECT is(pg_temp.as_role('sch_admin', $$SELECT pgsweep.schedule_create('a1', 'sch_q', '@every 1 second')$$), 'ok', 'with send it may');
SELECT is((SELECT owner FROM pgsweep.schedules WHERE name = 'a1'), 'sch_admin', 'the creator owns it');
SELECT pgsweep.queue_revoke('sch_q', 'sch_admin', ARRAY['send']);
UPDATE pgsweep.schedule SET next_at = clock_timestamp() - interval '1 second', last_slot = clock_timestamp() - interval '2 seconds' WHERE name = 'a1';
SELECT is(pgsweep._schedule_run(clock_timestamp()) ->> 'refused', '1', 'its owner lost send: refused');
SELECT matches((SELECT last_error FROM pgsweep.schedules WHERE name = 'a1'), 'role "sch_admin" lacks send on queue "sch_q"', 'and says why');
SELECT is(pg_temp.as_role('sch_admin', $$SELECT pgsweep.schedule_pause('a1')$$), 'ok', 'its owner still manages it');

SELECT pgsweep.queue_drop('sch_q', true);
SELECT is((SELECT count(*) FROM pgsweep.schedule WHERE queue = 'sch_q'), 0::bigint, 'dropping the queue drops its schedules');

SELECT * FROM finish();
ROLLBACK;
