-- pgTAP: queue snapshots (stats.sql): the gauges, the counters between two
-- snapshots, the history's retention, the part's registration and the
-- monitor's two functions. Rows are written directly with fixed times and
-- snapshots are taken at pinned times (p_now), so nothing depends on the clock.
BEGIN;
SELECT plan(31);

SELECT pgsweep.setting_reset(name) FROM pgsweep.setting;
DELETE FROM pgsweep.maintain_snapshot;
SELECT pgsweep.queue_create('st_in', 'inbox');
SELECT pgsweep.queue_create('st_out', 'outbox');

-- the part and its settings
SELECT ok('stats' = ANY (pgsweep._maintain_parts()), 'stats is a maintenance part');
SELECT is((SELECT count(*)::int FROM pgsweep.maintain_state WHERE part = 'stats'), 1, 'it has its state row');
SELECT is(pgsweep.setting_get('stats_interval'), '10 seconds', 'stats_interval defaults to 10 seconds');
SELECT is(pgsweep.setting_get('stats_retention'), '7 days', 'stats_retention defaults to 7 days');
SELECT is(pgsweep._maintain_interval('stats'), interval '10 seconds', 'the part runs every stats_interval');
DELETE FROM pgsweep.maintain_pass;
INSERT INTO pgsweep.maintain_pass (owner, started_at, finished_at, budget) VALUES ('a', '2026-01-01 00:00:00+00', '2026-01-01 00:00:10+00', '30 seconds');
INSERT INTO pgsweep.maintain_run (pass_id, part, owner, token, status, started_at, finished_at) VALUES
    ((SELECT max(id) FROM pgsweep.maintain_pass), 'stats', 'a', 1, 'done', '2026-01-01 00:00:00+00', '2026-01-01 00:00:03+00'),
    ((SELECT max(id) FROM pgsweep.maintain_pass), 'recovery', 'a', 1, 'done', '2026-01-01 00:00:00+00', '2026-01-01 00:00:09+00');
SELECT is(pgsweep._maintain_interval('stats'), interval '30 seconds',
    'after a snapshot that took 3 seconds, the part waits 10 times that (it takes at most a tenth of the time)');
DELETE FROM pgsweep.maintain_pass;
SELECT throws_ok($$SELECT pgsweep.setting_set('stats_interval', '0 seconds')$$, '22023',
    'stats_interval must be between 1 second and 1 hour, got 0 seconds', 'stats_interval: at least 1 second');
SELECT throws_ok($$SELECT pgsweep.setting_set('stats_retention', '10 minutes')$$, '22023', NULL, 'stats_retention: at least 1 hour');

-- state at T1 = 2026-01-01 00:00:10: inbox st_in has
--   1 pending due (created 00:00:01), 1 pending scheduled for later,
--   1 in flight on its 2nd attempt, 1 failed after 2 attempts (due again at 00:00:05),
--   1 waiting in a lane behind its head (parked at infinity),
--   2 processed, 1 dead; a blocked lane and a lane with messages
INSERT INTO pgsweep.message (queue, id, payload, status, attempt, visible_at, created_at, parked_until, lane) VALUES
    ('st_in', 1001, '{}', 'pending', 0, '2026-01-01 00:00:01+00', '2026-01-01 00:00:01+00', NULL, NULL),
    ('st_in', 1002, '{}', 'pending', 0, '2026-01-01 01:00:00+00', '2026-01-01 00:00:02+00', NULL, NULL),
    ('st_in', 1003, '{}', 'processing', 2, '2026-01-01 00:01:00+00', '2026-01-01 00:00:03+00', NULL, NULL),
    ('st_in', 1004, '{}', 'failed', 2, '2026-01-01 00:00:05+00', '2026-01-01 00:00:04+00', NULL, 'l1'),
    ('st_in', 1005, '{}', 'pending', 0, '2026-01-01 00:00:05+00', '2026-01-01 00:00:05+00', 'infinity', 'l1');
INSERT INTO pgsweep.message_processed (queue, id, payload, headers, attempts, created_at, processed_at) VALUES
    ('st_in', 990, '{}', '{}', 1, '2026-01-01 00:00:00+00', '2026-01-01 00:00:01+00'),
    ('st_in', 991, '{}', '{}', 3, '2026-01-01 00:00:00+00', '2026-01-01 00:00:02+00');
INSERT INTO pgsweep.message_dead (queue, id, payload, headers, attempts, last_error, created_at, dead_at) VALUES
    ('st_in', 980, '{}', '{}', 10, 'boom', '2026-01-01 00:00:00+00', '2026-01-01 00:00:03+00');
INSERT INTO pgsweep.lane (queue, name, blocked_id, last_at) VALUES
    ('st_in', 'l1', NULL, '2026-01-01 00:00:05+00'),
    ('st_in', 'l2', 980, '2026-01-01 00:00:00+00');
-- outbox st_out: 3 pending
INSERT INTO pgsweep.message (queue, id, payload, status, attempt, visible_at, created_at) VALUES
    ('st_out', 2001, '{}', 'pending', 0, '2026-01-01 00:00:01+00', '2026-01-01 00:00:01+00'),
    ('st_out', 2002, '{}', 'pending', 0, '2026-01-01 00:00:01+00', '2026-01-01 00:00:01+00'),
    ('st_out', 2003, '{}', 'processing', 1, '2026-01-01 00:01:00+00', '2026-01-01 00:00:01+00');

SELECT is(pgsweep._stats_snapshot('2026-01-01 00:00:10+00'), '{"queues": 2, "trimmed": 0}'::jsonb,
    'a snapshot of every queue');
SELECT results_eq(
    $$SELECT since, pending, due, in_flight, failed, dead, processed, oldest_due_age, lanes, blocked_lanes,
             sent, completed, failures, dead_lettered, retried
        FROM pgsweep.maintain_snapshot WHERE queue = 'st_in'$$,
    $$VALUES (NULL::timestamptz, 3::bigint, 2::bigint, 1::bigint, 1::bigint, 1::bigint, 2::bigint, interval '9 seconds',
              2::bigint, 1::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint)$$,
    'the gauges equal queue_counts'' (due: pending or failed, visible, not behind a lane head); a first snapshot has no counters');
SELECT results_eq(
    $$SELECT pending, processing, failed, processed, dead, lanes, blocked_lanes FROM pgsweep.queue_counts('st_in', '2026-01-01 00:00:10+00')$$,
    $$SELECT pending, in_flight, failed, processed, dead, lanes, blocked_lanes FROM pgsweep.maintain_snapshot WHERE queue = 'st_in'$$,
    'the same numbers as the exact live count');
SELECT is(pgsweep._stats_snapshot('2026-01-01 00:00:10+00'), '{"queues": 0, "trimmed": 0}'::jsonb,
    'a second snapshot at the same time takes nothing');

-- between T1 and T2 = 00:00:20:
--   st_in: 1001 processed (attempt 1), 1003 failed (attempt 2 -> failed row),
--          1004 claimed again (3rd attempt, in flight), 1006 sent, 1007 sent and processed,
--          1008 sent and dead after 1 attempt
UPDATE pgsweep.message SET status = 'failed', visible_at = '2026-01-01 00:00:30+00' WHERE id = 1003;
UPDATE pgsweep.message SET status = 'processing', attempt = 3, visible_at = '2026-01-01 00:01:15+00' WHERE id = 1004;
DELETE FROM pgsweep.message WHERE id = 1001;
INSERT INTO pgsweep.message_processed (queue, id, payload, headers, attempts, created_at, processed_at) VALUES
    ('st_in', 1001, '{}', '{}', 1, '2026-01-01 00:00:01+00', '2026-01-01 00:00:12+00'),
    ('st_in', 1007, '{}', '{}', 1, '2026-01-01 00:00:13+00', '2026-01-01 00:00:14+00');
INSERT INTO pgsweep.message (queue, id, payload, status, attempt, visible_at, created_at) VALUES
    ('st_in', 1006, '{}', 'pending', 0, '2026-01-01 00:00:15+00', '2026-01-01 00:00:15+00');
INSERT INTO pgsweep.message_dead (queue, id, payload, headers, attempts, last_error, created_at, dead_at) VALUES
    ('st_in', 1008, '{}', '{}', 1, 'bad', '2026-01-01 00:00:16+00', '2026-01-01 00:00:17+00');
--   st_out: 2001 completed (deleted), 2003 dead after its 1st attempt, 2004 sent, and a
--           message sent and completed in between (invisible: the documented blind spot)
DELETE FROM pgsweep.message WHERE id IN (2001, 2003);
INSERT INTO pgsweep.message_dead (queue, id, payload, headers, attempts, last_error, created_at, dead_at) VALUES
    ('st_out', 2003, '{}', '{}', 1, 'bad', '2026-01-01 00:00:01+00', '2026-01-01 00:00:18+00');
INSERT INTO pgsweep.message (queue, id, payload, status, attempt, visible_at, created_at) VALUES
    ('st_out', 2004, '{}', 'pending', 0, '2026-01-01 00:00:19+00', '2026-01-01 00:00:19+00');

SELECT is(pgsweep._stats_snapshot('2026-01-01 00:00:20+00'), '{"queues": 2, "trimmed": 0}'::jsonb, 'the next snapshot');
SELECT results_eq(
    $$SELECT since, sent, completed, failures, dead_lettered, retried FROM pgsweep.maintain_snapshot
       WHERE queue = 'st_in' AND taken_at = '2026-01-01 00:00:20+00'$$,
    $$VALUES ('2026-01-01 00:00:10+00'::timestamptz, 3::bigint, 2::bigint, 2::bigint, 1::bigint, 1::bigint)$$,
    'inbox counters: sent 3 (1006, 1007, 1008), completed 2 (1001, 1007), failures 2 (1003, 1008), dead-lettered 1, retried 1 (1004)');
SELECT results_eq(
    $$SELECT sent, completed, failures, dead_lettered, retried, pending, in_flight, dead FROM pgsweep.maintain_snapshot
       WHERE queue = 'st_out' AND taken_at = '2026-01-01 00:00:20+00'$$,
    $$VALUES (1::bigint, 1::bigint, 1::bigint, 1::bigint, 0::bigint, 2::bigint, 0::bigint, 1::bigint)$$,
    'outbox counters: sent 1 (2004), completed 1 (2001: live before, gone now, not dead), failures 1, dead-lettered 1');

-- the monitor's functions
SELECT results_eq(
    $$SELECT queue, taken_at, pending, sent FROM pgsweep.stats_latest()$$,
    $$VALUES ('st_in'::text, '2026-01-01 00:00:20+00'::timestamptz, 3::bigint, 3::bigint),
             ('st_out', '2026-01-01 00:00:20+00', 2, 1)$$,
    'stats_latest: each queue''s latest snapshot');
SELECT pgsweep.queue_create('st_new');
SELECT results_eq($$SELECT taken_at, pending FROM pgsweep.stats_latest() WHERE queue = 'st_new'$$,
    $$VALUES (NULL::timestamptz, NULL::bigint)$$, 'a queue without a snapshot is listed with NULLs');
SELECT results_eq(
    $$SELECT taken_at, pending FROM pgsweep.stats_history('st_in', '2026-01-01 00:00:00+00', '2026-01-01 00:00:20+00')$$,
    $$VALUES ('2026-01-01 00:00:10+00'::timestamptz, 3::bigint)$$, 'stats_history: [from, to), oldest first');
SELECT is((SELECT count(*)::int FROM pgsweep.stats_history('st_in', '2026-01-01 00:00:00+00', '2026-01-01 00:01:00+00')), 2,
    'both snapshots in a wider range');
SELECT is((SELECT count(*)::int FROM pgsweep.stats_history('nope', '2026-01-01 00:00:00+00', '2026-01-01 00:01:00+00')), 0,
    'an unknown queue has no history');
SELECT throws_ok($$SELECT * FROM pgsweep.stats_history('st_in', '2026-01-01 00:01:00+00', '2026-01-01 00:00:00+00')$$,
    '22023', NULL, 'p_from after p_to is refused');
SELECT throws_ok($$SELECT * FROM pgsweep.stats_history('st_in', NULL, '2026-01-01 00:00:00+00')$$,
    '22023', 'p_from must be a time, got NULL', 'a NULL bound is refused');
SELECT throws_ok($$SELECT * FROM pgsweep.stats_history('', '2026-01-01 00:00:00+00', '2026-01-01 00:01:00+00')$$,
    '22023', NULL, 'an empty queue name is refused');
SELECT throws_ok($$SELECT * FROM pgsweep.stats_history('st_in', '-infinity', '2026-01-01 00:00:00+00')$$,
    '22023', NULL, 'a time beyond 10 years of the clock is refused');

-- retention: rows older than stats_retention go, oldest first, at most p_trim per run
INSERT INTO pgsweep.maintain_snapshot (queue, taken_at, pending, due, in_flight, failed, dead, processed, lanes, blocked_lanes, failures_live, retries_live)
SELECT 'st_out', '2025-12-20 00:00:00+00'::timestamptz + i * interval '1 minute', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  FROM generate_series(1, 5) i;
SELECT is(pgsweep._stats_snapshot('2026-01-01 00:00:30+00', 3), '{"queues": 3, "trimmed": 3}'::jsonb,
    'a run trims at most p_trim expired rows');
SELECT is(pgsweep._stats_snapshot('2026-01-01 00:00:40+00'), '{"queues": 3, "trimmed": 2}'::jsonb, 'the next run the rest');
SELECT is((SELECT min(taken_at) FROM pgsweep.maintain_snapshot), '2026-01-01 00:00:10+00'::timestamptz, 'only expired rows went');

-- the maintenance step belongs to a pass of this session
SELECT throws_ok($$SELECT pgsweep.maintain_step(-1)$$, '42501', NULL, 'maintain_step: no such run');
SELECT is((SELECT prosecdef FROM pg_proc WHERE oid = 'pgsweep.stats_latest()'::regprocedure), true, 'stats_latest runs as the owner');
SELECT ok((SELECT proconfig::text ~ 'search_path' FROM pg_proc WHERE oid = 'pgsweep.stats_history(text, timestamptz, timestamptz)'::regprocedure),
    'stats_history pins search_path');
SELECT ok(has_function_privilege('pgsweep_monitor', 'pgsweep.stats_latest()', 'EXECUTE'), 'the monitor may call stats_latest');

SELECT * FROM finish();
ROLLBACK;
