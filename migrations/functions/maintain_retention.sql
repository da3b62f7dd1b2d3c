-- The retention part of maintain(): run every due retention policy.
--
-- FILLED IN WHEN THE MESSAGE STORE / RETENTION MERGE: until then it deletes
-- nothing and returns an empty result.
--
-- Contract with maintain():
--   * a PROCEDURE without a SET clause, because it may COMMIT (it will CALL
--     retention_run per due policy, which commits each batch); PostgreSQL
--     forbids transaction control in a procedure that has a SET clause, so
--     every name in the body must be schema-qualified with the template's
--     schema, as below;
--   * renews its lease between policies with
--     <schema>._maintain_renew('retention', p_owner) and stops when that
--     returns false (the lease was taken over); maintain() renews only after
--     the whole call, and the lease TTL (maintain_lease_ttl, default 1 minute)
--     may be shorter than the budget;
--   * stops by p_deadline; returns in p_result
--     {"deleted": {"<policy>": rows, ...}, "errors": {"<policy>": "message"}, "more": bool}
--     (maintain adds "deleted" per policy into the run's counts; "more": a
--     policy still has rows to delete, so the part is due again at once);
--   * it must catch its own errors per policy: maintain() cannot catch an
--     error raised through a COMMIT (PL/pgSQL allows no COMMIT inside a block
--     with an exception handler). An error that escapes ends the whole CALL;
--     the run stays 'running' until the next pass marks it 'abandoned' (the
--     Go runner also records the error with _maintain_fail_owner).
CREATE OR REPLACE PROCEDURE _maintain_retention(p_owner text, p_deadline timestamptz, INOUT p_result jsonb)
LANGUAGE plpgsql
AS $$
BEGIN
    p_result := jsonb_build_object('deleted', '{}'::jsonb);
END
$$;
