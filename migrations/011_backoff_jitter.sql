-- pgsweep 0.11: backoff_jitter, a per-queue setting (0..1, default 0: the
-- exact backoff of earlier versions) that shortens each fail call's retry
-- delays by a random share, so that messages failed together by many workers
-- (an outage of what they call) do not all come back at the same moment.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

ALTER TABLE queue ADD COLUMN backoff_jitter double precision NOT NULL DEFAULT 0
    CHECK (backoff_jitter BETWEEN 0 AND 1);

{{ template "functions/queue.sql" . }}
{{ template "functions/fail.sql" . }}
