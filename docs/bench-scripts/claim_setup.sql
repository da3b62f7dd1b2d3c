SELECT pgsweep.queue_create('pb');
DELETE FROM pgsweep.message WHERE queue = 'pb';
INSERT INTO pgsweep.message (queue, payload, headers, visible_at, created_at)
SELECT 'pb', '{"bench": true, "pad": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}', '{}', now() - interval '1 minute', now() - interval '1 minute' + g * interval '1 microsecond' FROM generate_series(1, 300000) g;
VACUUM ANALYZE pgsweep.message;
