-- version(): the installed pgsweep version, for DBAs and deploy checks.
--
-- The schema version is the number of the last migration applied (tern's
-- schema_version); the release version is 0.<schema version>.0 until 1.0
-- (CHANGELOG.md). `pgsweep version` compares it with the binary's.
CREATE OR REPLACE FUNCTION version()
RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT '0.' || v.version || '.0' FROM schema_version v $$;
