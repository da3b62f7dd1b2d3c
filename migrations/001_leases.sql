-- pgsweep 0.1: argument checks and leases.
--
-- Every migration starts by pointing search_path at the target schema: objects
-- are created there, and functions pin it with SET search_path FROM CURRENT.
-- The schema comes from the template data (`schema`): `pgsweep migrate --schema`
-- sets it; tern CLI users set it in the [data] section of tern.conf (default pgsweep).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

CREATE TABLE lease (
    name        text PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE lease IS 'pgsweep leases: one row per lease name; the row is the truth, see lease_acquire';

{{ template "functions/validate.sql" . }}
{{ template "functions/lease.sql" . }}
