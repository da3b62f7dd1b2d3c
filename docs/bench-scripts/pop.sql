DELETE FROM pgsweep.message WHERE queue = 'pb' AND id IN (SELECT id FROM pgsweep.message WHERE queue = 'pb' ORDER BY created_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) RETURNING id, payload
