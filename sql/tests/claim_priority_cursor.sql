-- pgTAP: the priority positions (claim.sql). Claims scan each level of
-- message_claim_priority they took rows of from its position, the last row
-- any claim took there, and the levels without one from their head. A due
-- row behind its level's position waits for a claim that cannot fill its
-- batch, or for the first claim claim_rescan after the last rescan. Time is
-- pinned through p_now (T = 2030-01-01).
BEGIN;
DELETE FROM pgsweep.message; DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.lane; DELETE FROM pgsweep.queue;
SELECT plan(23);

SELECT pgsweep.queue_create('p', 'outbox', 5);
CREATE TEMP TABLE ids AS SELECT row_number() OVER () AS n, s AS id
  FROM pgsweep.send_batch('p', ARRAY['1', '2', '3', '4', '5', '6']::jsonb[], p_priorities => '{5,5,5,5,5,5}'::smallint[]) s;
CREATE FUNCTION pg_temp.id(n int) RETURNS bigint LANGUAGE sql AS $$ SELECT id FROM ids WHERE ids.n = $1 $$;
CREATE FUNCTION pg_temp.claim(p_queue text, p_batch int, p_at text) RETURNS SETOF jsonb LANGUAGE sql
AS $$ SELECT payload FROM pgsweep.claim(p_queue, 'w', p_batch, '10 seconds', ('2030-01-01 00:00:00+00'::timestamptz + p_at::interval)) $$;
CREATE FUNCTION pg_temp.cursor(p_queue text) RETURNS TABLE (levels smallint[], at jsonb[], rescanned interval) LANGUAGE sql
AS $$ SELECT c.priority_levels,
             (SELECT array_agg(m.payload ORDER BY x.n) FROM unnest(c.priority_ids) WITH ORDINALITY x(id, n)
                JOIN pgsweep.message m ON m.queue = c.queue AND m.id = x.id),
             c.priority_rescanned_at - '2030-01-01 00:00:00+00'::timestamptz
        FROM pgsweep.claim_cursor c WHERE c.queue = p_queue $$;
-- a lease that lapsed: the row is due again
CREATE FUNCTION pg_temp.lapse(p_queue text, p_payload jsonb) RETURNS void LANGUAGE sql
AS $$ UPDATE pgsweep.message SET visible_at = '2030-01-01 00:00:00+00' WHERE queue = p_queue AND payload = p_payload $$;

SELECT results_eq($$SELECT priority_levels, priority_ats, priority_ids, priority_rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'p'$$,
    $$VALUES (NULL::smallint[], NULL::timestamptz[], NULL::bigint[], NULL::timestamptz)$$, 'a new queue has no priority positions');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 2, '0')$$, $$VALUES ('1'::jsonb), ('2')$$, 'the first claim scans from the head');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{5}'::smallint[], '{2}'::jsonb[], '0'::interval)$$,
    'the level''s position is the last row claimed there; that claim was a rescan');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 2, '100 ms')$$, $$VALUES ('3'::jsonb), ('4')$$, 'the next claim scans from the position');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{5}'::smallint[], '{4}'::jsonb[], '0'::interval)$$,
    'a claim from the position moves it forward and is no rescan');

-- A row behind its level's position waits while batches fill from the positions on ...
SELECT pg_temp.lapse('p', '1');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 1, '200 ms')$$, $$VALUES ('5'::jsonb)$$,
    'a due row behind its level''s position waits while claims fill their batch from the position');
-- ... but a level without a position is scanned from its head: a message
-- sent at a new, higher priority is taken at once.
SELECT pgsweep.send('p', '"urgent"', p_priority => 9::smallint);
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 1, '300 ms')$$, $$VALUES ('"urgent"'::jsonb)$$,
    'a higher priority is taken first, within the rescan interval');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{9,5}'::smallint[], '{"\"urgent\"",5}'::jsonb[], '0'::interval)$$,
    'a level first taken from its head gains a position');
-- ... and so is a level below.
SELECT pgsweep.send_batch('p', ARRAY['"low1"', '"low2"']::jsonb[], p_priorities => '{2,2}'::smallint[]);
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 3, '400 ms')$$, $$VALUES ('6'::jsonb), ('"low1"'), ('"low2"')$$,
    'a level from its position on, then the levels below from their head');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{9,5,2}'::smallint[], '{"\"urgent\"",6,"\"low2\""}'::jsonb[], '0'::interval)$$,
    'each level keeps its own position');
-- A claim that cannot fill its batch takes the rows behind the positions
-- last, and counts as a rescan: those levels' positions go back to them.
SELECT pg_temp.lapse('p', '"low1"');
SELECT pg_temp.lapse('p', '3');
SELECT pgsweep.send('p', '"default"');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 5, '500 ms')$$, $$VALUES ('1'::jsonb), ('3'), ('"low1"'), ('"default"')$$,
    'a claim short of its batch takes every due row, highest priority first, the rows behind the positions included');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{9,5,2}'::smallint[], '{"\"urgent\"",3,"\"low1\""}'::jsonb[], '0.5 s'::interval)$$,
    'that claim was a rescan');

-- The first claim claim_rescan after the last rescan scans every level from its head.
SELECT pgsweep.send_batch('p', ARRAY['"a"', '"b"']::jsonb[], p_priorities => '{2,2}'::smallint[]);
SELECT pg_temp.lapse('p', '2');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 1, '600 ms')$$, $$VALUES ('"a"'::jsonb)$$,
    'within claim_rescan the positions are trusted: a row behind one waits while the batch fills');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 1, '1.6 s')$$, $$VALUES ('2'::jsonb)$$,
    'claim_rescan after the last rescan a claim scans from the head again');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('p')$$, $$VALUES ('{9,5,2}'::smallint[], '{"\"urgent\"",2,"\"a\""}'::jsonb[], '1.6 s'::interval)$$,
    'a rescan moves the positions of the levels it took rows of to those rows (back, here) and records itself');
SELECT results_eq($$SELECT * FROM pg_temp.claim('p', 1, '1.7 s')$$, $$VALUES ('"b"'::jsonb)$$, 'after the rescan the positions carry on');

-- Negative levels come after the default, with positions of their own.
SELECT pgsweep.queue_create('n', 'outbox', 5);
SELECT pgsweep.send_batch('n', ARRAY['"n1"', '"n2"', '"n3"']::jsonb[], p_priorities => '{-3,-3,-3}'::smallint[]);
SELECT results_eq($$SELECT * FROM pg_temp.claim('n', 1, '0')$$, $$VALUES ('"n1"'::jsonb)$$, 'a negative level');
SELECT pgsweep.send_batch('n', ARRAY['"zero"', '"one"', '"minus"']::jsonb[], p_priorities => '{0,1,-1}'::smallint[]);
SELECT results_eq($$SELECT * FROM pg_temp.claim('n', 5, '100 ms')$$, $$VALUES ('"one"'::jsonb), ('"zero"'), ('"minus"'), ('"n2"'), ('"n3"')$$,
    'with a position at a negative level: the levels above, the default, the levels between, then that level from its position');

-- A queue whose claims never took a row of another priority has no positions.
SELECT pgsweep.queue_create('d', 'outbox', 5);
SELECT pgsweep.send_batch('d', ARRAY['1', '2']::jsonb[]);
SELECT results_eq($$SELECT * FROM pg_temp.claim('d', 1, '0')$$, $$VALUES ('1'::jsonb)$$, 'a claim of the default priority');
SELECT results_eq($$SELECT priority_levels, priority_rescanned_at FROM pgsweep.claim_cursor WHERE queue = 'd'$$,
    $$VALUES (NULL::smallint[], NULL::timestamptz)$$, 'claims of the default priority never write the priority positions');

-- A lane's next head behind its level's position moves it back (lane.sql,
-- _lane_next), so the claims within claim_rescan find it.
SELECT pgsweep.queue_create('l', 'outbox', 5);
SELECT pgsweep.send('l', '"l1"', p_lane => 'L', p_priority => 4::smallint);
SELECT pgsweep.send('l', '"l2"', p_lane => 'L', p_priority => 4::smallint);
SELECT pgsweep.send_batch('l', ARRAY['"x1"', '"x2"']::jsonb[], p_priorities => '{4,4}'::smallint[]);
CREATE TEMP TABLE lc AS SELECT id, token, payload FROM pgsweep.claim('l', 'w', 5, '10 seconds', '2030-01-01 00:00:00+00');
SELECT results_eq($$SELECT payload FROM lc ORDER BY id$$, $$VALUES ('"l1"'::jsonb), ('"x1"'), ('"x2"')$$, 'the lane''s head and the others');
SELECT pgsweep.complete('l', (SELECT token FROM lc LIMIT 1), ARRAY(SELECT id FROM lc WHERE payload = '"l1"'), '2030-01-01 00:00:00.1+00');
SELECT results_eq($$SELECT * FROM pg_temp.cursor('l')$$, $$VALUES ('{4}'::smallint[], '{"\"l2\""}'::jsonb[], '0'::interval)$$,
    'the lane''s next head, behind its level''s position, moves it back');
SELECT pgsweep.send('l', '"x3"', p_priority => 4::smallint);
SELECT results_eq($$SELECT * FROM pg_temp.claim('l', 1, '200 ms')$$, $$VALUES ('"l2"'::jsonb)$$,
    'so a claim from the position takes the head before the newer rows of its level');

SELECT * FROM finish();
ROLLBACK;
