-- pgsweep 0.13: claim finds the rows it promotes and leases by ctid and id
-- both (functions/claim.sql): with a queue's statistics stale, the planner
-- took the primary key on queue for a ctid-only UPDATE and walked the queue.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

{{ template "functions/claim.sql" . }}
