-- PLACEHOLDER on branch sec-detach only: migration 036 belongs to the input
-- helper (issue 23). Delete this file at merge and keep theirs; then run
-- make migration-sync.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

SELECT _grant_all();
