-- pgsweep 0.7: queue_stats counts one queue per statement, and queue settings
-- are written with plain values (the "built to scale out" rules of the design).
--
-- Before this version the queue_stats view was one statement over every
-- queue, with clock_timestamp() applied in the filter of the oldest due row.
-- Now a function of one queue (_queue_stats) runs one statement per message
-- table with the clock read once into a variable, and the view calls it for
-- each queue row. The view's columns and their types are unchanged.
-- queue_create and queue_configure compute updated_at before their UPDATE
-- instead of calling now() in its SET.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

{{ template "functions/queue.sql" . }}
{{ template "functions/queue_stats.sql" . }}
