-- pgsweep 0.8: release (functions/ack.sql) gives claimed messages back
-- unprocessed. The Go Worker calls it at shutdown for the messages it claimed
-- but never started, so that they are due again at once and keep their
-- attempt, instead of waiting out their leases.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

{{ template "functions/ack.sql" . }}
