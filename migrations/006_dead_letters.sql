-- pgsweep 0.6: dead letters keep de-duplicating their inbox key, and can be
-- sent back to their queue (functions/dead.sql).
--
-- Before this version an inbox message that died left no trace in the
-- de-duplication check: a redelivery of the same message id was accepted and
-- processed again, though the first copy was still on record. Now a key is
-- refused while a live, processed or dead row holds it, and an operator who
-- wants the message processed again requeues the dead letter itself.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

-- Not unique: outbox keys are free-form and may repeat among dead letters.
CREATE INDEX message_dead_key ON message_dead (queue, key) WHERE key IS NOT NULL;

{{ template "functions/send.sql" . }}
{{ template "functions/dead.sql" . }}
