-- The recovery part of maintain(): one STEP of recovery of expired claims,
-- over every queue, through queue_recover (functions/recover.sql): rows whose
-- lease expired become claimable again and their old owner is fenced out
-- (each counts as a lost lease); rows that used their last attempt move to
-- the dead letters. queue_recover keeps each queue's keyset traversal (id
-- order up to a boundary captured when the traversal starts, wrapping after
-- an empty pass), so continuous new traffic cannot starve older rows.
--
-- Contract with maintain(): one call = one bounded step, at most
-- setting_int('recovery_batch_size') rows per queue; no COMMIT (maintain
-- commits after each step and renews the lease); returns
-- {"recovered", "lost_leases", "dead_lettered", "more"} where "more" says a
-- queue filled its batch, so another step is worth it while time remains.
CREATE OR REPLACE FUNCTION _maintain_recovery(p_owner text, p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_batch int := setting_int('recovery_batch_size');
    v_queue text;
    v_r record;
    v_recovered int := 0;
    v_dead int := 0;
    v_more boolean := false;
BEGIN
    FOR v_queue IN SELECT q.name FROM queue q ORDER BY q.name LOOP
        IF clock_timestamp() >= p_deadline THEN
            v_more := true; -- queues left unvisited this step
            EXIT;
        END IF;
        SELECT * INTO v_r FROM _queue_recover(v_queue, v_batch);
        v_recovered := v_recovered + v_r.recovered;
        v_dead := v_dead + v_r.dead_lettered;
        IF v_r.recovered + v_r.dead_lettered >= v_batch THEN
            v_more := true;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('recovered', v_recovered, 'lost_leases', v_recovered,
                              'dead_lettered', v_dead, 'more', v_more);
END
$$;
