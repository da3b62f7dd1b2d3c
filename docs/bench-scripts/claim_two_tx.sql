SELECT coalesce(string_agg(id::text, ','), '0') AS ids FROM pgsweep.claim('pb', 'o' || :client_id, 100, '30 seconds') \gset
SELECT count(*) FROM pgsweep.complete('pb', 'o' || :client_id, ('{' || ':ids' || '}')::bigint[])
