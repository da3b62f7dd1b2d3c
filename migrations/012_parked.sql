-- pgsweep 0.12: rows that are not due for a while are parked (see
-- functions/claim.sql): scheduled messages, retries waiting for their
-- backoff and requeued dead letters with a delivery time. The claim index
-- leaves them out, and a second index finds them by due time, so claims no
-- longer walk every scheduled row.
--
-- Upgrading rebuilds message_claim and locks the message table while it
-- does (a few seconds per million rows); run it when the queues are quiet.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- NULL: due or in flight. Else the due time of a row that waits (claims
-- never change this column, so their updates stay HOT).
ALTER TABLE message ADD COLUMN parked_until timestamptz;
UPDATE message SET parked_until = visible_at WHERE owner IS NULL AND visible_at > now();

-- Equality on queue, then the FIFO order, for the rows that are due or in flight.
DROP INDEX message_claim;
CREATE INDEX message_claim ON message (queue, created_at, id) WHERE parked_until IS NULL;
-- Parked rows by due time: the claim's promotion probe reads this.
CREATE INDEX message_parked ON message (queue, parked_until) WHERE parked_until IS NOT NULL;

{{ template "functions/send.sql" . }}
{{ template "functions/claim.sql" . }}
{{ template "functions/fail.sql" . }}
{{ template "functions/dead.sql" . }}
