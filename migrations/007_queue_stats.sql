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
--
-- Error messages (every argument error now has a pgTAP test: queue_errors.sql):
--  * queue_configure: a value that does not convert to its setting's type
--    names the setting and its range (it gave only the cast's error), and a
--    JSON array or object is refused for every setting (the interval parser
--    read {"lease_default": [30]} as 30 seconds);
--  * send_batch with p_payloads NULL says NULL, not 0;
--  * intervals in months or years are named in those units (validate.sql):
--    '100 years' read '36525 days', which is not the bound that is checked
--    (interval comparison counts a year as 360 days).
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

{{ template "functions/validate.sql" . }}
{{ template "functions/queue.sql" . }}
{{ template "functions/queue_stats.sql" . }}
{{ template "functions/send.sql" . }}
