-- Built-in retention of the rows pgsweep keeps: per queue, processed inbox
-- records (message_processed.processed_at) after queue.processed_retention
-- and dead letters (message_dead.dead_at) after queue.dead_retention (NULL:
-- forever). Each is an ordinary policy filtered to the queue, named
-- 'pgsweep.processed:<queue>' or 'pgsweep.dead:<queue>', synced by maintain()
-- before every retention part. A queue whose name would not fit a policy
-- name (190 characters) gets none, with a WARNING.
CREATE OR REPLACE FUNCTION retention_builtin_sync()
RETURNS int
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- retention_register's "no index leads with the time column" NOTICE does not
-- apply: the filter (queue) and time column lead the tables' retention indexes.
SET client_min_messages = warning
AS $$
DECLARE
    v_changed int := 0;
    v_want record;
    v_removed int;
BEGIN
    FOR v_want IN
        SELECT 'pgsweep.processed:' || q.name AS name, 'message_processed'::regclass AS tbl,
               'processed_at' AS col, q.processed_retention AS period, q.name AS queue
          FROM queue q WHERE q.kind = 'inbox'
        UNION ALL
        SELECT 'pgsweep.dead:' || q.name, 'message_dead'::regclass, 'dead_at', q.dead_retention, q.name
          FROM queue q
         ORDER BY 1
    LOOP
        IF length(v_want.name) > 190 THEN
            RAISE WARNING 'queue "%" has no built-in retention of %: its name has % characters, at most 172 fit in a retention policy name (190); move its messages to a queue with a shorter name',
                v_want.queue, v_want.tbl, length(v_want.queue);
            CONTINUE;
        END IF;
        CONTINUE WHEN EXISTS (SELECT 1 FROM retention_policy p
                               WHERE p.name = v_want.name AND p.older_than IS NOT DISTINCT FROM v_want.period
                                 AND p.filter_column = 'queue' AND p.filter_values = ARRAY[v_want.queue]);
        -- register and filter in one transaction: no pass sees the policy without its filter
        PERFORM _retention_policy_put(v_want.name, v_want.tbl, v_want.col, v_want.period, NULL, NULL,
                                    1000, 'exclusive', interval '1 minute', _owner_role(), true);
        PERFORM _retention_set_filter(v_want.name, 'queue', ARRAY[v_want.queue]);
        v_changed := v_changed + 1;
    END LOOP;
    PERFORM _retention_unregister(p.name) FROM retention_policy p
      WHERE (p.name LIKE 'pgsweep.processed:%' AND NOT EXISTS (
                 SELECT 1 FROM queue q WHERE q.kind = 'inbox' AND 'pgsweep.processed:' || q.name = p.name))
         OR (p.name LIKE 'pgsweep.dead:%' AND NOT EXISTS (SELECT 1 FROM queue q WHERE 'pgsweep.dead:' || q.name = p.name));
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_changed + v_removed;
END
$$;
