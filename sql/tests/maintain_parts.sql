-- pgTAP: the parts of a maintain pass — due checks, leases, steps, history.
-- maintain() itself COMMITs and cannot run inside this test's transaction; it
-- is only a loop over the functions tested here (the Go tests run it for real).
-- Time is pinned through p_now, so nothing sleeps.
BEGIN;
SELECT plan(71);

DELETE FROM pgsweep.maintain_pass;
DELETE FROM pgsweep.lease WHERE name LIKE 'maintain:%';
UPDATE pgsweep.maintain_state SET last_started_at = NULL, last_finished_at = NULL, last_owner = NULL, last_status = NULL, backlog = false;
SELECT pgsweep.setting_reset(name) FROM pgsweep.setting;

SELECT has_function('pgsweep', 'maintain', ARRAY['text', 'interval'], 'maintain(text, interval) exists');
SELECT is((SELECT prokind::text FROM pg_proc WHERE oid = 'pgsweep.maintain(text, interval)'::regprocedure), 'p', 'maintain is a procedure');
SELECT set_eq(
    $$SELECT proname::text FROM pg_proc WHERE pronamespace = 'pgsweep'::regnamespace AND prokind = 'p'$$,
    ARRAY['maintain', 'maintain_step_retention', 'retention_run', 'retention_step_pass', '_retention_run'], 'the only procedures (no pinned search_path) are maintain, its retention part and retention_run (and its pass, and the owner''s clocked one)');
SELECT ok((SELECT prosrc !~ '(^|[^.])\m_maintain_' FROM pg_proc WHERE oid = 'pgsweep.maintain(text, interval)'::regprocedure),
    'maintain schema-qualifies every call');
SELECT has_view('pgsweep', 'maintenance_passes', 'maintenance_passes view exists');
SELECT has_view('pgsweep', 'maintenance_runs', 'maintenance_runs view exists');

-- a pass
CREATE TEMP TABLE p AS SELECT * FROM pgsweep._maintain_pass_begin('a', '30 seconds', '2026-01-01 00:00:00+00');
SELECT is((SELECT o_owner FROM p), 'a', 'pass_begin keeps the given owner');
SELECT is((SELECT o_deadline FROM p), '2026-01-01 00:00:30+00'::timestamptz, 'deadline = start + budget');
SELECT results_eq($$SELECT owner, started_at, finished_at FROM pgsweep.maintain_pass WHERE id = (SELECT o_pass FROM p)$$,
    $$VALUES ('a'::text, '2026-01-01 00:00:00+00'::timestamptz, NULL::timestamptz)$$, 'the pass is recorded when it starts');
SELECT matches((SELECT o_owner FROM pgsweep._maintain_pass_begin(NULL, '1 second', '2026-01-01 00:00:00+00')),
    '^maintain:pid[0-9]+:[0-9a-f]{8}$', 'a NULL owner becomes one derived from the backend pid and a random suffix');
CREATE TEMP TABLE pb AS SELECT * FROM pgsweep._maintain_pass_begin('b', '30 seconds', '2026-01-01 00:00:00+00');

-- recovery runs under its lease
CREATE TEMP TABLE r1 AS SELECT * FROM pgsweep._maintain_part_begin((SELECT o_pass FROM p), 'recovery', 'a', '2026-01-01 01:00:00+00', '2026-01-01 00:00:00+00');
SELECT is((SELECT o_status FROM r1), 'running', 'a due part starts');
SELECT is((SELECT o_token FROM r1), 1::bigint, 'under the lease token 1');
SELECT results_eq($$SELECT owner, expires_at FROM pgsweep.lease WHERE name = 'maintain:recovery'$$,
    $$VALUES ('a'::text, '2026-01-01 00:01:00+00'::timestamptz)$$, 'lease maintain:recovery is held for maintain_lease_ttl');
SELECT ok(pgsweep._maintain_lock_held('recovery'), 'and the part''s advisory lock is held');
SELECT is((SELECT parts FROM pgsweep.maintain_pass WHERE id = (SELECT o_pass FROM p)), '{"recovery": "running"}'::jsonb, 'the pass notes the part');
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'recovery', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:00:01+00')),
    'busy', 'another owner finds the part busy and does not wait');
SELECT is((SELECT parts FROM pgsweep.maintain_pass WHERE id = (SELECT o_pass FROM pb)), '{"recovery": "busy"}'::jsonb, 'its pass records busy');
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'retention', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:00:01+00')),
    'running', 'the other part runs at the same time under its own lease');
SELECT is(pgsweep._maintain_part_end((SELECT id FROM pgsweep.maintain_run WHERE part = 'retention' AND status = 'running'), '2026-01-01 00:00:01.5+00'),
    'done', 'retention run ends');

-- steps add up; "more" asks for another step
SELECT ok(pgsweep._maintain_part_step((SELECT o_run FROM r1), '{"recovered": 5, "lost_leases": 0, "more": true}', NULL, '2026-01-01 01:00:00+00', '2026-01-01 00:00:02+00'),
    'a step with more=true before the deadline continues');
SELECT is((SELECT expires_at FROM pgsweep.lease WHERE name = 'maintain:recovery'), '2026-01-01 00:01:02+00'::timestamptz, 'each step renews the lease');
SELECT ok(NOT pgsweep._maintain_part_step((SELECT o_run FROM r1), '{"recovered": 2, "lost_leases": 1}', NULL, '2026-01-01 01:00:00+00', '2026-01-01 00:00:03+00'),
    'a step without more ends the loop');
SELECT results_eq($$SELECT counts, steps, status FROM pgsweep.maintain_run WHERE id = (SELECT o_run FROM r1)$$,
    $$VALUES ('{"recovered": 7, "lost_leases": 1}'::jsonb, 2, 'running'::text)$$, 'counts are summed over steps');
SELECT is(pgsweep._maintain_part_end((SELECT o_run FROM r1), '2026-01-01 00:00:03+00'), 'done', 'part_end: done');
SELECT results_eq($$SELECT last_finished_at, last_status, backlog FROM pgsweep.maintain_state WHERE part = 'recovery'$$,
    $$VALUES ('2026-01-01 00:00:03+00'::timestamptz, 'done'::text, false)$$, 'the part''s state records the run');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'maintain:recovery'), NULL, 'the lease is released at the end');
SELECT ok(NOT pgsweep._maintain_lock_held('recovery'), 'and the advisory lock too');
SELECT results_eq($$SELECT recovery, counts -> 'recovery' FROM pgsweep.maintenance_passes WHERE id = (SELECT o_pass FROM p)$$,
    $$VALUES ('done'::text, '{"recovered": 7, "lost_leases": 1}'::jsonb)$$, 'maintenance_passes shows status and counts');

-- due: recovery_interval (5 seconds) after the last run's end
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'recovery', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:00:07.9+00')),
    'not due', 'not due before recovery_interval has passed');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'maintain:recovery'), NULL, 'a part that is not due takes no lease');
SELECT is(pgsweep.setting_set('recovery_interval', '1 second'), '1 second', 'recovery_interval changed by SQL');
CREATE TEMP TABLE r2 AS SELECT * FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'recovery', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:00:04+00');
SELECT is((SELECT o_status FROM r2), 'running', 'the changed interval applies to the next pass');
SELECT is((SELECT o_token FROM r2), 2::bigint, 'a new tenure gets token 2');

-- a failed step is recorded and ends the part
SELECT ok(NOT pgsweep._maintain_part_step((SELECT o_run FROM r2), NULL, 'boom (SQLSTATE P0001)', '2026-01-01 01:00:00+00', '2026-01-01 00:00:05+00'),
    'a failed step stops the part');
SELECT is(pgsweep._maintain_part_end((SELECT o_run FROM r2), '2026-01-01 00:00:05+00'), 'failed', 'part_end: failed');
SELECT results_eq($$SELECT recovery, error FROM pgsweep.maintenance_passes WHERE id = (SELECT o_pass FROM pb)$$,
    $$VALUES ('failed'::text, 'recovery: boom (SQLSTATE P0001)'::text)$$, 'the pass records the failed part and its error');
SELECT is((SELECT backlog FROM pgsweep.maintain_state WHERE part = 'recovery'), false, 'a failed run leaves no backlog: no hot retry loop');

-- a lease taken over during a run: the run stops as lost
CREATE TEMP TABLE r3 AS SELECT * FROM pgsweep._maintain_part_begin((SELECT o_pass FROM p), 'recovery', 'a', '2026-01-01 01:00:00+00', '2026-01-01 00:00:10+00');
SELECT is((SELECT o_status FROM r3), 'running', 'a runs recovery again');
UPDATE pgsweep.lease SET owner = 'x', token = token + 1, expires_at = '2026-01-01 02:00:00+00' WHERE name = 'maintain:recovery';
SELECT ok(NOT pgsweep._maintain_part_step((SELECT o_run FROM r3), '{"recovered": 1, "more": true}', NULL, '2026-01-01 01:00:00+00', '2026-01-01 00:00:11+00'),
    'a step whose lease was taken over stops');
SELECT is(pgsweep._maintain_part_end((SELECT o_run FROM r3), '2026-01-01 00:00:11+00'), 'lost', 'part_end: lost');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'maintain:recovery'), 'x', 'the new holder keeps its lease');
SELECT ok(pgsweep._lease_release('maintain:recovery', 'x', '2026-01-01 00:00:12+00'), 'x releases');

-- a run whose session died stays running until the next holder marks it abandoned
CREATE TEMP TABLE r4 AS SELECT * FROM pgsweep._maintain_part_begin((SELECT o_pass FROM p), 'recovery', 'a', '2026-01-01 01:00:00+00', '2026-01-01 00:00:20+00');
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'recovery', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:01:19+00')),
    'busy', 'the crashed holder''s lease blocks the part until it expires');
CREATE TEMP TABLE r5 AS SELECT * FROM pgsweep._maintain_part_begin((SELECT o_pass FROM pb), 'recovery', 'b', '2026-01-01 01:00:00+00', '2026-01-01 00:01:20+00');
SELECT is((SELECT o_status FROM r5), 'running', 'after the TTL another owner takes over');
SELECT results_eq($$SELECT status, finished_at FROM pgsweep.maintain_run WHERE id = (SELECT o_run FROM r4)$$,
    $$VALUES ('abandoned'::text, '2026-01-01 00:01:20+00'::timestamptz)$$, 'the dead run is marked abandoned, ended at the takeover');
SELECT matches((SELECT error FROM pgsweep.maintain_run WHERE id = (SELECT o_run FROM r4)), '^the pass ended before this part finished', 'with an explanation');
SELECT is((SELECT count(*) FROM pgsweep.maintain_run a JOIN pgsweep.maintain_run b
             ON a.part = b.part AND a.id < b.id
            AND tstzrange(a.started_at, a.finished_at, '[)') && tstzrange(b.started_at, b.finished_at, '[)')),
    0::bigint, 'the documented no-overlap query: the abandoned run ends where its successor starts');

-- backlog: a run stopped by the deadline with work left is due again at once
SELECT ok(NOT pgsweep._maintain_part_step((SELECT o_run FROM r5), '{"recovered": 1000, "more": true}', NULL, '2026-01-01 00:01:21+00', '2026-01-01 00:01:21+00'),
    'the deadline stops a part that has more to do');
SELECT is(pgsweep._maintain_part_end((SELECT o_run FROM r5), '2026-01-01 00:01:21+00'), 'done', 'part_end: done');
SELECT is((SELECT backlog FROM pgsweep.maintain_state WHERE part = 'recovery'), true, 'the state records the backlog');
SELECT is(pgsweep.setting_set('recovery_interval', '1 hour'), '1 hour', 'a long recovery_interval');
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM p), 'recovery', 'a', '2026-01-01 01:00:00+00', '2026-01-01 00:01:22+00')),
    'running', 'a part with a backlog is due at once despite its interval');
SELECT is((SELECT o_status FROM pgsweep._maintain_part_begin((SELECT o_pass FROM p), 'retention', 'a', '2026-01-01 00:01:22+00', '2026-01-01 00:01:22+00')),
    'no budget', 'no part starts after the deadline');

-- _maintain_renew: what a long-running part body calls between units of work
SELECT ok(pgsweep._maintain_renew('retention', 'renewer'), 'renew takes or extends the caller''s lease');
SELECT ok((SELECT expires_at > clock_timestamp() + interval '50 seconds' FROM pgsweep.lease WHERE name = 'maintain:retention' AND owner = 'renewer'),
    'for maintain_lease_ttl');
SELECT ok(NOT pgsweep._maintain_renew('retention', 'intruder'), 'another owner''s renew fails while the lease is live');
SELECT ok(pgsweep._lease_release('maintain:retention', 'renewer', NULL), 'renewer releases');

-- counts merge one level deep (retention's per-policy rows)
SELECT is(pgsweep._maintain_add_counts('{"deleted": {"p": 1}, "n": 1}', '{"deleted": {"p": 2, "q": 3}, "n": 2, "s": "x"}'),
    '{"deleted": {"p": 3, "q": 3}, "n": 3, "s": "x"}'::jsonb, 'per-policy counts add up');

-- maintain_fail_owner: an error maintain() could not record itself (these passes began before the server did: their session is gone)
SELECT is(pgsweep.maintain_fail_owner('a', 'retention raised: oops'), 1::bigint, 'fail_owner closes the owner''s unfinished pass');
SELECT is((SELECT count(*) FROM pgsweep.maintain_run WHERE owner = 'a' AND status = 'running'), 0::bigint, 'and its running runs');
SELECT is((SELECT owner FROM pgsweep.lease WHERE name = 'maintain:recovery'), NULL, 'and releases its leases');

-- the history bounds itself
SELECT is(pgsweep.setting_set('history_max_rows', '10'), '10', 'history_max_rows = 10');
INSERT INTO pgsweep.maintain_pass (owner, started_at, finished_at, budget)
SELECT 'h', '2026-01-02 00:00:00+00'::timestamptz + i * interval '1 second', '2026-01-02 00:00:00+00'::timestamptz + i * interval '1 second', '1 second'
  FROM generate_series(1, 30) i;
INSERT INTO pgsweep.maintain_pass (owner, started_at, budget) VALUES ('young', '2026-01-02 00:00:00+00', '1 hour');
SELECT is(pgsweep._maintain_history_trim('2026-01-02 00:01:00+00'), 24::bigint, 'trim deletes finished (or long-dead) passes beyond history_max_rows');
SELECT is((SELECT count(*) FROM pgsweep.maintain_pass WHERE owner = 'h'), 9::bigint, 'the newest finished passes stay');
SELECT is((SELECT count(*) FROM pgsweep.maintain_pass WHERE owner = 'young'), 1::bigint, 'an unfinished pass that may still run stays');
SELECT is(pgsweep._maintain_history_trim('2026-01-09 00:01:00+00'), 10::bigint, 'after history_retention the rest goes, and a long-dead unfinished pass too');

-- bad input: 22023, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.maintain_pass;
SELECT throws_ok($$CALL pgsweep.maintain('x', '2 hours')$$, '22023', 'p_budget must be between 1 second and 1 hour, got 2 hours', 'budget above 1 hour');
SELECT throws_ok($$CALL pgsweep.maintain('x', '0.5 seconds')$$, '22023', 'p_budget must be between 1 second and 1 hour, got 0.5 seconds', 'budget below 1 second');
SELECT throws_ok($$CALL pgsweep.maintain('', '10 seconds')$$, '22023', 'p_owner must be a non-empty string of at most 200 characters, got an empty string', 'empty owner');
SELECT throws_ok($$SELECT pgsweep._maintain_part_begin(1, 'vacuum', 'a', now())$$, '22023', 'p_part must be one of recovery, schedules, stats, retention, got ''vacuum''', 'unknown part');
SELECT set_eq('SELECT * FROM pgsweep.maintain_pass', 'SELECT * FROM before', 'failed calls changed nothing');

SELECT * FROM finish();
ROLLBACK;
