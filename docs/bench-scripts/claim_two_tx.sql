SELECT coalesce((array_agg(token))[1]::text, '00000000-0000-0000-0000-000000000000') AS tok, coalesce(string_agg(id::text, ','), '0') AS ids FROM pgsweep.claim('pb', 'o' || :client_id, 100, '30 seconds') \gset
SELECT count(*) FROM pgsweep.complete('pb', ':tok'::uuid, ('{' || ':ids' || '}')::bigint[]);
