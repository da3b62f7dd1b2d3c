-- pgsweep 0.5: the claim cursor (see functions/claim.sql for how claims use it).
--
-- Without it every claim scans message_claim from the head of the queue and
-- walks the dead entries of completed rows until VACUUM removes them: the cost
-- of a claim grew with the rows processed since the last vacuum.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- One row per queue, created by the queue's first claim. Every claim that
-- gets the row's lock moves it, so fillfactor 10 leaves room for HOT updates
-- that page pruning can clean up without VACUUM.
CREATE TABLE claim_cursor (
    queue        text PRIMARY KEY REFERENCES queue (name) ON DELETE CASCADE,
    -- the newest (created_at, id) a claim has taken; claims scan from here
    created_at   timestamptz NOT NULL,
    id           bigint NOT NULL,
    -- the last claim that scanned from the head of the queue
    rescanned_at timestamptz NOT NULL
) WITH (fillfactor = 10);
COMMENT ON TABLE claim_cursor IS 'where claims start scanning each queue; a hint, rebuilt by a rescan at least every second';

{{ template "functions/claim.sql" . }}
