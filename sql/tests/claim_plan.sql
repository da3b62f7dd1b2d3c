-- pgTAP: what a claim reads. It scans the claim index message_claim and
-- never touches message_processed or message_dead, so its cost does not grow
-- with the processed inbox rows and dead letters kept for retention; and it
-- does not walk the rows that are not due yet (parked: scheduled messages,
-- retries in backoff), so its cost does not grow with them either. Counted
-- with the statistics of this transaction (pg_stat_get_xact_*), which include
-- the statements run inside claim().
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue;
SELECT plan(12);

SELECT pgsweep.queue_create('in', 'inbox');
-- 5,000 processed rows and 5,000 dead letters kept for retention, 200 live rows
INSERT INTO pgsweep.message_processed (queue, id, key, payload, headers, attempts, created_at, processed_at)
SELECT 'in', -g, 'p' || g, '{}', '{}', 1, now(), now() FROM generate_series(1, 5000) g;
INSERT INTO pgsweep.message_dead (queue, id, key, payload, headers, attempts, last_error, created_at, dead_at)
SELECT 'in', -5000 - g, 'd' || g, '{}', '{}', 10, 'x', now(), now() FROM generate_series(1, 5000) g;
SELECT count(*) FROM pgsweep.send_batch('in', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)));
-- Statistics of this state, not of whatever an earlier file or autovacuum
-- left: on a just-created schema the planner saw an empty, never-analyzed
-- message table and sometimes chose another plan for the first claim.
ANALYZE pgsweep.message;

-- scans of a relation: of a table, its sequential scans plus the scans of
-- each of its indexes; of an index, its scans
CREATE FUNCTION pg_temp.numscans(p_rel text) RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_numscans(('pgsweep.' || p_rel)::regclass)
         + coalesce((SELECT sum(pg_stat_get_xact_numscans(i.indexrelid)) FROM pg_index i
                      WHERE i.indrelid = ('pgsweep.' || p_rel)::regclass), 0)::bigint
$$;
CREATE TEMP TABLE before AS
SELECT r AS relname, pg_temp.numscans(r) AS scans FROM unnest(ARRAY['message_processed', 'message_dead', 'message_claim']) r;
CREATE FUNCTION pg_temp.scans(p_rel text) RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_temp.numscans(p_rel) - (SELECT scans FROM before WHERE relname = p_rel)
$$;

SELECT is((SELECT count(*) FROM pgsweep.claim('in', 'w1', 50, '30 seconds')), 50::bigint, 'claim 1 takes 50');
SELECT is((SELECT count(*) FROM pgsweep.claim('in', 'w2', 50, '30 seconds')), 50::bigint, 'claim 2 takes 50');
SELECT is((SELECT count(*) FROM pgsweep.claim('in', 'w3', 50, '30 seconds', now() + interval '2 seconds')), 50::bigint, 'claim 3 (a rescan from the head) takes 50');

SELECT ok(pg_temp.scans('message_claim') >= 3, 'the claims scanned the claim index message_claim');
SELECT is(pg_temp.scans('message_processed'), 0::bigint, 'the claims never scanned message_processed (processed inbox rows kept for retention)');
SELECT is(pg_temp.scans('message_dead'), 0::bigint, 'the claims never scanned message_dead (dead letters kept for retention)');
-- the counting works: an inbox send checks both tables for its key
SELECT pgsweep.send('in', '{}', '{}', 'new-key');
SELECT ok(pg_temp.scans('message_processed') > 0 AND pg_temp.scans('message_dead') > 0, 'a send of an inbox key does scan them: the counts above can see a scan');

-- 20,000 messages scheduled for tomorrow, 100 due now, on a queue of their own
SELECT pgsweep.queue_create('sched');
SELECT count(*) FROM pgsweep.send_batch('sched', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000)), NULL, NULL,
                                        ARRAY(SELECT now() + interval '1 day' FROM generate_series(1, 10000)));
SELECT count(*) FROM pgsweep.send_batch('sched', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000)), NULL, NULL,
                                        ARRAY(SELECT now() + interval '1 day' FROM generate_series(1, 10000)));
SELECT count(*) FROM pgsweep.send_batch('sched', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 100)));
SELECT is((SELECT count(*) FROM pgsweep.message WHERE queue = 'sched' AND parked_until IS NOT NULL), 20000::bigint, 'scheduled messages are parked');
CREATE FUNCTION pg_temp.returned(p_index text) RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_stat_get_xact_tuples_returned(('pgsweep.' || p_index)::regclass)
$$;
CREATE TEMP TABLE returned_before AS SELECT pg_temp.returned('message_claim') AS claim_idx, pg_temp.returned('message_parked') AS parked_idx;
-- claims that rescan from the head and come up short: the costly kind
SELECT is((SELECT count(*) FROM pgsweep.claim('sched', 'w', 60, '30 seconds', now() + interval '2 seconds')), 60::bigint, 'a rescan takes 60 due messages');
SELECT is((SELECT count(*) FROM pgsweep.claim('sched', 'w', 60, '30 seconds', now() + interval '4 seconds')), 40::bigint, 'a short claim takes the other 40');
SELECT ok(pg_temp.returned('message_claim') - (SELECT claim_idx FROM returned_before) < 1000,
    'the claims walked fewer than 1,000 claim-index entries past 20,000 scheduled messages');
SELECT ok(pg_temp.returned('message_parked') - (SELECT parked_idx FROM returned_before) < 10,
    'their promotion probes found no parked row due');

SELECT * FROM finish();
ROLLBACK;
