-- A policy whose last pass left work behind is due at once, whatever its
-- interval (issue: a backlog waited a whole p_interval before resuming).
BEGIN;
SELECT plan(8);

CREATE SCHEMA rb;
CREATE TABLE rb.events (id int PRIMARY KEY, at timestamptz NOT NULL);
SELECT pgsweep.retention_register('rb', 'rb.events', 'at', '1 day', p_interval => '1 hour');

CREATE FUNCTION pg_temp.pass(p_outcome text, p_pid int DEFAULT pg_backend_pid()) RETURNS void LANGUAGE sql AS $$
    INSERT INTO pgsweep.retention_pass (policy, owner, mode, pid, backend_start, started_at, deadline, outcome)
    SELECT 'rb', 'tap', 'exclusive', p_pid, (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()),
           now(), now() + interval '1 minute', p_outcome
$$;

SELECT ok('rb' IN (SELECT pgsweep.retention_due()), 'a policy that never ran is due');
SELECT pg_temp.pass('drained');
SELECT ok('rb' NOT IN (SELECT pgsweep.retention_due()), 'drained just now: not due before its interval');
SELECT ok('rb' IN (SELECT pgsweep.retention_due(now() + interval '1 hour')), 'due again after its interval');
SELECT pg_temp.pass('budget');
SELECT ok('rb' IN (SELECT pgsweep.retention_due()), 'stopped on its budget with rows left: due at once');
SELECT pg_temp.pass('deferred');
SELECT ok('rb' IN (SELECT pgsweep.retention_due()), 'units deferred behind a locked row: due at once');
SELECT pg_temp.pass('lease_lost');
SELECT ok('rb' IN (SELECT pgsweep.retention_due()), 'lost its lease: due at once');
SELECT pg_temp.pass('running', 2147483647);
SELECT ok('rb' IN (SELECT pgsweep.retention_due()), 'its session died mid-pass (abandoned): due at once');
SELECT pg_temp.pass('error');
SELECT ok('rb' NOT IN (SELECT pgsweep.retention_due()), 'an error waits for the interval (a persistent error must not repeat every pass)');

SELECT * FROM finish();
ROLLBACK;
