-- pgsweep 0.23: dead letters keep their inbox key unique.
--
-- message_dead gains dedup (copied from the live row by fail, recovery and
-- claim_ids from 0.24 on) and a unique index on (queue, key) WHERE dedup, so
-- that send's REPEATABLE READ / SERIALIZABLE probe (send.sql, 3c; migration
-- 024) raises 40001 on a dead letter its snapshot cannot see, as it does on a
-- processed row. Existing dead letters: on inbox queues the newest dead letter
-- of a key takes the key's dedup, unless a live row holds the key (that row
-- keeps it, and its own dead-lettering must not conflict).
--
-- Why a migration of its own, with no function and no _grant_all: on a
-- distributed (Citus) install DDL on a distributed table cannot share a
-- transaction with function DDL ("parallel operation on a distributed
-- table"), and Citus forwards a DDL statement's original query string, which
-- in a migration is many statements: the DDL goes through EXECUTE. A column
-- and an index need no grant. The index is built while message_dead is
-- locked against writes (dead-lettering waits); it holds only dead letters.
SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;

DO $$
BEGIN
    EXECUTE 'ALTER TABLE message_dead ADD COLUMN dedup boolean NOT NULL DEFAULT false';
END
$$;

UPDATE message_dead d SET dedup = true
  FROM (SELECT DISTINCT ON (x.queue, x.key) x.queue, x.id
          FROM message_dead x
          JOIN queue q ON q.name = x.queue AND q.kind = 'inbox'
         WHERE x.key IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM message m WHERE m.queue = x.queue AND m.key = x.key AND m.dedup)
         ORDER BY x.queue, x.key, x.dead_at DESC, x.id DESC) n
 WHERE d.queue = n.queue AND d.id = n.id;

DO $$
BEGIN
    EXECUTE 'CREATE UNIQUE INDEX message_dead_inbox_key ON message_dead (queue, key) WHERE dedup';
END
$$;
