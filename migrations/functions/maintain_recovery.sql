-- The recovery part of maintain(): one STEP of recovery of expired claims.
--
-- FILLED IN WHEN THE MESSAGE STORE / RETENTION MERGE: until then it recovers
-- nothing and returns zero counts.
--
-- Contract with maintain():
--   * one call = one bounded step (at most setting_int('recovery_batch_size')
--     rows); it must not COMMIT — maintain commits after each step, renews
--     the lease maintain:recovery and calls again while the step returned
--     {"more": true} and p_deadline has not passed;
--   * returns counts to add to the run's totals:
--     {"recovered": n, "lost_leases": n, "dead_lettered": n, "more": bool};
--   * an error it raises is caught by maintain(), recorded in the history
--     (run status 'failed', the pass's error) and the pass goes on with the
--     next part; the step's changes are rolled back.
-- p_owner is the lease holder running the pass; p_deadline when recovery's
-- share of the budget (half of it) ends. State that must survive between
-- steps and passes (the keyset traversal position and its boundary, per
-- queue) belongs in maintain_state.cursor (WHERE part = 'recovery'): only
-- the lease holder runs this function, so it may read and write that row.
CREATE OR REPLACE FUNCTION _maintain_recovery(p_owner text, p_deadline timestamptz)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN jsonb_build_object('recovered', 0, 'lost_leases', 0, 'dead_lettered', 0);
END
$$;
