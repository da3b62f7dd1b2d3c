-- pgsweep 0.9: claim_rescan, a per-queue setting for how long claims may
-- trust the claim cursor before they rescan the queue from its head (see
-- functions/claim.sql). The default, 1 second, is what 0.5 to 0.8 hard-coded;
-- 0 gives the exact oldest-first order at the cost of scanning from the head
-- on every claim.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

ALTER TABLE queue ADD COLUMN claim_rescan interval NOT NULL DEFAULT '1 second'
    CHECK (claim_rescan BETWEEN interval '0 seconds' AND interval '1 minute');

{{ template "functions/queue.sql" . }}
{{ template "functions/claim.sql" . }}
