-- pgTAP: adaptive pacing (maintain_retention.sql). _maintain_ret_pace turns
-- the traffic it is given into the next batch's duty cycle;
-- _maintain_ret_traffic reads it as the maintenance role, and a session that
-- role may not see counts as busy.
BEGIN;
SELECT plan(7);

SELECT pgsweep.setting_set('retention_duty_cycle', '0');
-- no pass row: no per-row speed, so only the traffic decides
SELECT is((pgsweep._maintain_ret_pace('{}', -1, clock_timestamp(), clock_timestamp() + interval '1 minute', 1, 0) ->> 'duty')::numeric,
          40::numeric, 'under traffic the duty starts at 35% and rises by 5 points');
SELECT is((pgsweep._maintain_ret_pace('{"duty": 64}', -1, clock_timestamp(), clock_timestamp() + interval '1 minute', 3, 0) ->> 'duty')::numeric,
          65::numeric, 'under traffic it stops at 65%');
SELECT is((pgsweep._maintain_ret_pace('{"duty": 95}', -1, clock_timestamp(), clock_timestamp() + interval '1 minute', 0, 0) ->> 'duty')::numeric,
          100::numeric, 'an idle database drains at 100%');
SELECT is((pgsweep._maintain_ret_pace('{"duty": 40}', -1, clock_timestamp(), clock_timestamp() + interval '1 minute', 2, 1) ->> 'duty')::numeric,
          20::numeric, 'a session waiting on a lock halves it');
SELECT pgsweep.setting_set('retention_duty_cycle', '50');
SELECT is((pgsweep._maintain_ret_pace('{"duty": 95}', -1, clock_timestamp(), clock_timestamp() + interval '1 minute', 0, 0) ->> 'duty')::numeric,
          50::numeric, 'a fixed duty cycle wins');

-- the traffic is read as the caller (pacing_test.go proves that a session
-- the maintenance role cannot see counts as busy)
SELECT ok(NOT (SELECT p.prosecdef FROM pg_proc p WHERE p.oid = 'pgsweep.maintain_step_traffic()'::regprocedure),
          'maintain_step_traffic runs as its caller');
SELECT ok((SELECT t.busy FROM pgsweep.maintain_step_traffic() t) IS NOT NULL, 'a superuser gets a count too');

SELECT * FROM finish();
ROLLBACK;
