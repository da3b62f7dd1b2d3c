-- pgTAP: every routine a non-owner role may execute, called by a member of
-- that role with hostile values, refuses them with SQLSTATE 22023 and a
-- message that begins with the argument it names -- and nothing changes (a
-- checksum of every pgsweep table and sequence, before and after each call).
--
-- The hostile values (issue 23, class 5):
--   intervals  mixed signs ('1 mon -30 days 1 sec' compares as one second,
--              '1 day -86340 sec' as one minute), a month where a fixed
--              length is meant, 1 microsecond and 1000 years where outside
--              the argument's range
--   sizes      a 20 MB payload, 5 MB of headers, a 10 MB error text, a
--              3000-byte key, 200,000-element arrays
--   names      control characters (newline, bell), zero-width and other
--              invisible characters, line separator, bidi override, only
--              spaces, leading or trailing (no-break) spaces
--
-- The table of cases is built from templates: one row per (routine,
-- argument) with a %L slot, crossed with the values of its class. A
-- coverage test lists the routines (from pg_proc and has_function_privilege
-- for <schema>_admin, _worker and _monitor) that take arguments and have no
-- case: a new routine without bad-input cases fails this file until rows
-- are added for it.
BEGIN;
-- one snapshot for the whole file: the checksums see this transaction's
-- work only, never another session's commits (a maintenance run elsewhere)
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;
SET LOCAL client_min_messages = warning;
SET LOCAL TimeZone = 'UTC';

-- login-less members of each role, as an application's roles are
CREATE FUNCTION pg_temp.r(p_kind text) RETURNS text LANGUAGE sql AS $$ SELECT 'bih_' || p_kind || '_' || current_database() $$;
DO $$
DECLARE k text;
BEGIN
    FOREACH k IN ARRAY ARRAY['admin', 'worker', 'monitor'] LOOP
        EXECUTE format('CREATE ROLE %I NOLOGIN IN ROLE %I', pg_temp.r(k), 'pgsweep_' || k);
    END LOOP;
END $$;

-- seed: two queues with waiting and claimed messages, a lease, a policy of the admin's
DELETE FROM pgsweep.message; DELETE FROM pgsweep.message_processed; DELETE FROM pgsweep.message_dead;
DELETE FROM pgsweep.queue_recovery; DELETE FROM pgsweep.queue; DELETE FROM pgsweep.lease;
DELETE FROM pgsweep.retention_policy;
SELECT pgsweep.queue_create('hq', 'outbox', 3);
SELECT pgsweep.queue_create('hi', 'inbox', 3);
SELECT pgsweep.send('hq', '{"n": 1}', '{}', NULL, NULL, 'lane-a');
SELECT pgsweep.send('hq', '{"n": 2}');
SELECT pgsweep.send('hi', '{"n": 3}', '{}', 'k-3');
SELECT count(*) FROM pgsweep.claim('hq', 'w1', 1, '1 minute');
SELECT pgsweep.lease_acquire('hl', 'holder', '1 minute');
CREATE SCHEMA bih;
CREATE TABLE bih.events (id bigint PRIMARY KEY, at timestamptz NOT NULL, status text);
CREATE INDEX ON bih.events (at);
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA bih TO %I', pg_temp.r('admin'));
    EXECUTE format('GRANT SELECT, DELETE ON bih.events TO %I', pg_temp.r('admin'));
    EXECUTE format('SET LOCAL ROLE %I', pg_temp.r('admin'));
    PERFORM pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day');
    RESET ROLE;
END $$;

-- A checksum of everything pgsweep keeps: each table's rows in a fixed
-- order, and each sequence's position (work done and rolled back still
-- moves a sequence).
CREATE FUNCTION pg_temp.state() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v text;
    v_all text := '';
BEGIN
    FOR r IN SELECT c.relname, c.relkind FROM pg_class c
              WHERE c.relnamespace = 'pgsweep'::regnamespace AND c.relkind IN ('r', 'S') ORDER BY c.relname LOOP
        IF r.relkind = 'S' THEN
            EXECUTE format('SELECT last_value::text || is_called::text FROM pgsweep.%I', r.relname) INTO v;
        ELSE
            EXECUTE format('SELECT count(*)::text || md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) FROM pgsweep.%I t',
                           r.relname) INTO v;
        END IF;
        v_all := v_all || r.relname || '=' || v || ';';
    END LOOP;
    RETURN md5(v_all);
END $$;

-- try: runs p_call as a member of <schema>_<p_kind>, returns what it raised.
CREATE FUNCTION pg_temp.try(p_kind text, p_call text, OUT state text, OUT msg text) LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', pg_temp.r(p_kind));
    BEGIN
        EXECUTE p_call;
        state := '00000';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    END;
    RESET ROLE;
END $$;

-- Hostile values by class. An interval template lists the values that are
-- legitimate for its argument (skip): 1 microsecond where 0 is allowed, a
-- month where the argument is a calendar period.
CREATE TEMP TABLE bad_interval (tag text PRIMARY KEY, v text) ;
INSERT INTO bad_interval VALUES
    ('mixed', '1 mon -30 days 1 sec'), ('mixed-days', '1 day -86340 sec'), ('month', '1 mon'),
    ('1us', '1 microsecond'), ('1000y', '1000 years');
CREATE TEMP TABLE bad_name (tag text PRIMARY KEY, v text);
INSERT INTO bad_name VALUES
    ('newline', E'q\nFATAL:  forged line'), ('bell', E'q\u0007'), ('tab', E'q\tx'), ('zero-width space', E'q\u200bx'),
    ('zero-width joiner', E'q\u200dx'), ('BOM', E'\ufeffq'), ('line separator', E'q\u2028x'),
    ('bidi override', E'\u202eq'), ('word joiner', E'q\u2060'), ('soft hyphen', E'q\u00adx'), ('DEL', E'q\u007f'),
    ('only spaces', '   '), ('leading space', ' q'), ('trailing space', 'q '), ('no-break space', E'q\u00a0'),
    ('empty', ''), ('tag character', E'q\U000E0001');

-- Templates: routine (name and argument types, as pg_proc knows it), the
-- role kind that may call it, the argument, the call with a %L slot, the
-- class of values, the tags skipped.
CREATE TEMP TABLE tmpl (routine text, kind text, arg text, call text, class text, skip text[] DEFAULT '{}');
INSERT INTO tmpl (routine, kind, arg, call, class, skip) VALUES
    -- worker verbs
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_queue', $$SELECT pgsweep.send(%L, '{}')$$, 'name', '{}'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_key', $$SELECT pgsweep.send('hi', '{}', '{}', %L)$$, 'name', '{}'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_lane', $$SELECT pgsweep.send('hq', '{}', '{}', NULL, NULL, %L)$$, 'name', '{}'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_queue', $$SELECT pgsweep.send_batch(%L, ARRAY['{}'::jsonb])$$, 'name', '{}'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_key', $$SELECT pgsweep.send_batch('hi', ARRAY['{}'::jsonb, '{}'], NULL, ARRAY['ok', %L])$$, 'name', '{}'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_lanes[2]', $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], NULL, NULL, NULL, ARRAY['ok', %L])$$, 'name', '{}'),
    ('claim(text,text,integer,interval)', 'worker', 'p_queue', $$SELECT pgsweep.claim(%L, 'w', 1, '1 minute')$$, 'name', '{}'),
    ('claim(text,text,integer,interval)', 'worker', 'p_owner', $$SELECT pgsweep.claim('hq', %L, 1, '1 minute')$$, 'name', '{}'),
    ('claim(text,text,integer,interval)', 'worker', 'p_lease', $$SELECT pgsweep.claim('hq', 'w', 1, %L)$$, 'interval', '{}'),
    ('claim_ids(text,text,bigint[],interval)', 'worker', 'p_queue', $$SELECT pgsweep.claim_ids(%L, 'w', '{1}')$$, 'name', '{}'),
    ('claim_ids(text,text,bigint[],interval)', 'worker', 'p_owner', $$SELECT pgsweep.claim_ids('hq', %L, '{1}')$$, 'name', '{}'),
    ('claim_ids(text,text,bigint[],interval)', 'worker', 'p_lease', $$SELECT pgsweep.claim_ids('hq', 'w', '{1}', %L)$$, 'interval', '{}'),
    ('renew(text,uuid,bigint[],interval)', 'worker', 'p_queue', $$SELECT pgsweep.renew(%L, gen_random_uuid(), '{1}', '1 minute')$$, 'name', '{}'),
    ('renew(text,uuid,bigint[],interval)', 'worker', 'p_lease', $$SELECT pgsweep.renew('hq', gen_random_uuid(), '{1}', %L)$$, 'interval', '{}'),
    ('complete(text,uuid,bigint[])', 'worker', 'p_queue', $$SELECT pgsweep.complete(%L, gen_random_uuid(), '{1}')$$, 'name', '{}'),
    ('release(text,uuid,bigint[])', 'worker', 'p_queue', $$SELECT pgsweep.release(%L, gen_random_uuid(), '{1}')$$, 'name', '{}'),
    ('fail(text,uuid,bigint[],text,interval)', 'worker', 'p_queue', $$SELECT pgsweep.fail(%L, gen_random_uuid(), '{1}', 'e')$$, 'name', '{}'),
    ('fail(text,uuid,bigint[],text,interval)', 'worker', 'p_retry_after', $$SELECT pgsweep.fail('hq', gen_random_uuid(), '{1}', 'e', %L)$$, 'interval', '{1us}'),
    ('fail_details(text,uuid,bigint[],text,interval)', 'worker', 'p_queue', $$SELECT pgsweep.fail_details(%L, gen_random_uuid(), '{1}', 'e')$$, 'name', '{}'),
    ('fail_details(text,uuid,bigint[],text,interval)', 'worker', 'p_retry_after', $$SELECT pgsweep.fail_details('hq', gen_random_uuid(), '{1}', 'e', %L)$$, 'interval', '{1us}'),
    ('dead_letter(text,uuid,bigint[],text)', 'worker', 'p_queue', $$SELECT pgsweep.dead_letter(%L, gen_random_uuid(), '{1}', 'e')$$, 'name', '{}'),
    ('lease_acquire(text,text,interval)', 'worker', 'p_name', $$SELECT pgsweep.lease_acquire(%L, 'o', '1 minute')$$, 'name', '{}'),
    ('lease_acquire(text,text,interval)', 'worker', 'p_owner', $$SELECT pgsweep.lease_acquire('l2', %L, '1 minute')$$, 'name', '{}'),
    ('lease_acquire(text,text,interval)', 'worker', 'p_ttl', $$SELECT pgsweep.lease_acquire('l2', 'o', %L)$$, 'interval', '{}'),
    ('lease_renew(text,text,interval)', 'worker', 'p_name', $$SELECT pgsweep.lease_renew(%L, 'holder', '1 minute')$$, 'name', '{}'),
    ('lease_renew(text,text,interval)', 'worker', 'p_owner', $$SELECT pgsweep.lease_renew('hl', %L, '1 minute')$$, 'name', '{}'),
    ('lease_renew(text,text,interval)', 'worker', 'p_ttl', $$SELECT pgsweep.lease_renew('hl', 'holder', %L)$$, 'interval', '{}'),
    ('lease_release(text,text)', 'worker', 'p_name', $$SELECT pgsweep.lease_release(%L, 'holder')$$, 'name', '{}'),
    ('lease_release(text,text)', 'worker', 'p_owner', $$SELECT pgsweep.lease_release('hl', %L)$$, 'name', '{}'),
    ('queue_info(text)', 'worker', 'p_queue', $$SELECT pgsweep.queue_info(%L)$$, 'name', '{}'),
    -- admin: queues
    ('queue_create(text,text,integer)', 'admin', 'p_queue', $$SELECT pgsweep.queue_create(%L)$$, 'name', '{}'),
    ('queue_configure(text,jsonb)', 'admin', 'p_queue', $$SELECT pgsweep.queue_configure(%L, '{}')$$, 'name', '{}'),
    ('queue_configure(text,jsonb)', 'admin', 'lease_default', $$SELECT pgsweep.queue_configure('hq', jsonb_build_object('lease_default', %L::text))$$, 'interval', '{}'),
    ('queue_configure(text,jsonb)', 'admin', 'backoff_base', $$SELECT pgsweep.queue_configure('hq', jsonb_build_object('backoff_base', %L::text))$$, 'interval', '{1us}'),
    ('queue_configure(text,jsonb)', 'admin', 'claim_rescan', $$SELECT pgsweep.queue_configure('hq', jsonb_build_object('claim_rescan', %L::text))$$, 'interval', '{1us}'),
    ('queue_configure(text,jsonb)', 'admin', 'processed_retention', $$SELECT pgsweep.queue_configure('hi', jsonb_build_object('processed_retention', %L::text))$$, 'interval', '{month}'),
    ('queue_configure(text,jsonb)', 'admin', 'dead_retention', $$SELECT pgsweep.queue_configure('hq', jsonb_build_object('dead_retention', %L::text))$$, 'interval', '{month}'),
    ('dead_requeue(text,bigint[],timestamp with time zone)', 'admin', 'p_queue', $$SELECT pgsweep.dead_requeue(%L, '{1}')$$, 'name', '{}'),
    ('queue_recover(text,integer)', 'admin', 'p_queue', $$SELECT pgsweep.queue_recover(%L, 10)$$, 'name', '{}'),
    ('queue_pause(text)', 'admin', 'p_queue', $$SELECT pgsweep.queue_pause(%L)$$, 'name', '{}'),
    ('queue_resume(text)', 'admin', 'p_queue', $$SELECT pgsweep.queue_resume(%L)$$, 'name', '{}'),
    ('queue_purge(text)', 'admin', 'p_queue', $$SELECT pgsweep.queue_purge(%L)$$, 'name', '{}'),
    ('queue_drop(text,boolean)', 'admin', 'p_queue', $$SELECT pgsweep.queue_drop(%L, true)$$, 'name', '{}'),
    ('message_cancel(text,bigint[])', 'admin', 'p_queue', $$SELECT pgsweep.message_cancel(%L, '{1}')$$, 'name', '{}'),
    ('lane_skip(text,text)', 'admin', 'p_queue', $$SELECT pgsweep.lane_skip(%L, 'lane-a')$$, 'name', '{}'),
    ('lane_skip(text,text)', 'admin', 'p_lane', $$SELECT pgsweep.lane_skip('hq', %L)$$, 'name', '{}'),
    ('lane_stats(text,integer)', 'monitor', 'p_queue', $$SELECT pgsweep.lane_stats(%L, 10)$$, 'name', '{}'),
    ('group_stats(text,integer)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.group_stats(%L, 10)$$, 'name', '{}'),
    ('flow_stats(text)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.flow_stats(%L)$$, 'name', '{}'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_group', $$SELECT pgsweep.send('hq', '{}', p_group => %L)$$, 'name', '{}'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_groups[2]', $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], p_groups => ARRAY['ok', %L])$$, 'name', '{}'),
    ('stats_history(text,timestamp with time zone,timestamp with time zone)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.stats_history(%L, now(), now())$$, 'name', '{}'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.browse_messages(%L, 'dead')$$, 'name', '{}'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_state', $$SELECT * FROM pgsweep.browse_messages('hq', %L)$$, 'name', '{}'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_error', $$SELECT * FROM pgsweep.browse_messages('hq', 'dead', 0, 10, %L)$$, 'name', '{}'),
    ('browse_message(text,bigint)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.browse_message(%L, 1)$$, 'name', '{}'),
    ('browse_lanes(text,text,integer,boolean)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.browse_lanes(%L)$$, 'name', '{}'),
    ('browse_retention_passes(text,bigint,integer)', 'monitor', 'p_policy', $$SELECT * FROM pgsweep.browse_retention_passes(%L)$$, 'name', '{}'),
    ('dead_delete(text,bigint[])', 'admin', 'p_queue', $$SELECT pgsweep.dead_delete(%L, '{1}')$$, 'name', '{}'),
    ('lease_release_owner(text)', 'admin', 'p_owner', $$SELECT pgsweep.lease_release_owner(%L)$$, 'name', '{}'),
    -- admin: settings
    ('setting_set(text,text)', 'admin', 'p_name', $$SELECT pgsweep.setting_set(%L, '1')$$, 'name', '{}'),
    ('setting_set(text,text)', 'admin', 'p_value', $$SELECT pgsweep.setting_set('runner_interval', %L)$$, 'name', '{only spaces,leading space,trailing space,empty}'),
    ('setting_set(text,text)', 'admin', 'runner_interval', $$SELECT pgsweep.setting_set('runner_interval', %L)$$, 'interval', '{}'),
    ('setting_set(text,text)', 'admin', 'dead_letter_retention', $$SELECT pgsweep.setting_set('dead_letter_retention', %L)$$, 'interval', '{month}'),
    ('setting_reset(text)', 'admin', 'p_name', $$SELECT pgsweep.setting_reset(%L)$$, 'name', '{}'),
    ('setting_get(text)', 'admin', 'p_name', $$SELECT pgsweep.setting_get(%L)$$, 'name', '{}'),
    ('setting_int(text)', 'admin', 'p_name', $$SELECT pgsweep.setting_int(%L)$$, 'name', '{}'),
    ('setting_interval(text)', 'admin', 'p_name', $$SELECT pgsweep.setting_interval(%L)$$, 'name', '{}'),
    -- admin: retention
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_name', $$SELECT pgsweep.retention_register(%L, 'bih.events'::regclass, 'at', '1 day')$$, 'name', '{}'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_time_column', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, %L, '1 day')$$, 'name', '{}'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_older_than', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', %L)$$, 'interval', '{month,1us}'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_interval', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', p_interval => %L)$$, 'interval', '{}'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_status_column', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', %L, '{done}')$$, 'name', '{}'),
    ('retention_register(text,text,text,interval,text,text[],integer,text,interval)', 'admin', 'p_name', $$SELECT pgsweep.retention_register(%L, 'bih.events'::text, 'at', '1 day')$$, 'name', '{}'),
    ('retention_register(text,text,text,interval,text,text[],integer,text,interval)', 'admin', 'p_older_than', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::text, 'at', %L)$$, 'interval', '{month,1us}'),
    ('retention_unregister(text)', 'admin', 'p_name', $$SELECT pgsweep.retention_unregister(%L)$$, 'name', '{}'),
    ('retention_set_time_zone(text,text)', 'admin', 'p_name', $$SELECT pgsweep.retention_set_time_zone(%L, 'UTC')$$, 'name', '{}'),
    ('retention_set_time_zone(text,text)', 'admin', 'p_time_zone', $$SELECT pgsweep.retention_set_time_zone('bih.events', %L)$$, 'name', '{}'),
    ('retention_set_filter(text,text,text[])', 'admin', 'p_name', $$SELECT pgsweep.retention_set_filter(%L, 'status', '{done}')$$, 'name', '{}'),
    ('retention_set_filter(text,text,text[])', 'admin', 'p_column', $$SELECT pgsweep.retention_set_filter('bih.events', %L, '{done}')$$, 'name', '{}'),
    ('retention_set_strategy(text,text)', 'admin', 'p_name', $$SELECT pgsweep.retention_set_strategy(%L, 'auto')$$, 'name', '{}'),
    ('retention_set_strategy(text,text)', 'admin', 'p_strategy', $$SELECT pgsweep.retention_set_strategy('bih.events', %L)$$, 'name', '{}'),
    ('retention_owner_proof_drop(text,boolean)', 'admin', 'p_proof', $$SELECT pgsweep.retention_owner_proof_drop(%L, true)$$, 'name', '{}'),
    ('retention_set_lease_ttl(text,interval)', 'admin', 'p_name', $$SELECT pgsweep.retention_set_lease_ttl(%L, '1 minute')$$, 'name', '{}'),
    ('retention_set_lease_ttl(text,interval)', 'admin', 'p_ttl', $$SELECT pgsweep.retention_set_lease_ttl('bih.events', %L)$$, 'interval', '{}'),
    ('retention_run(text,text,interval)', 'admin', 'p_name', $$CALL pgsweep.retention_run(%L, 'o', '1 second')$$, 'name', '{}'),
    ('retention_run(text,text,interval)', 'admin', 'p_owner', $$CALL pgsweep.retention_run('bih.events', %L, '1 second')$$, 'name', '{}'),
    ('retention_run(text,text,interval)', 'admin', 'p_budget', $$CALL pgsweep.retention_run('bih.events', 'o', %L)$$, 'interval', '{1us}'),
    ('retention_detach_claim(text)', 'admin', 'p_owner', $$SELECT * FROM pgsweep.retention_detach_claim(%L)$$, 'name', '{}'),
    ('retention_detach_done(text,oid)', 'admin', 'p_owner', $$SELECT pgsweep.retention_detach_done(%L, 1::oid)$$, 'name', '{}'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_mode', $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', NULL, NULL, 1000, %L)$$, 'name', '{}'),
    ('retention_resolve_table(text,text)', 'admin', 'p_table', $$SELECT pgsweep.retention_resolve_table(%L, 'bih, public')$$, 'name', '{}'),
    ('retention_table_name_check(text)', 'admin', 'p_table', $$SELECT pgsweep.retention_table_name_check(%L)$$, 'name', '{}'),
    -- admin: the step routines the procedures call (docs/security.md, "Step
    -- routines"). Their arguments are checked before the pass or run they
    -- name (0: none), so a hostile value is a 22023 whoever's pass it is.
    ('maintain_step_begin(text,interval)', 'admin', 'p_owner', $$SELECT pgsweep.maintain_step_begin(%L, '1 second')$$, 'name', '{}'),
    ('maintain_step_begin(text,interval)', 'admin', 'p_budget', $$SELECT pgsweep.maintain_step_begin('o', %L)$$, 'interval', '{}'),
    ('maintain_step_part(bigint,text)', 'admin', 'p_part', $$SELECT pgsweep.maintain_step_part(0, %L)$$, 'name', '{}'),
    ('maintain_step_failed(bigint,text,text)', 'admin', 'p_state', $$SELECT pgsweep.maintain_step_failed(0, 'e', %L)$$, 'name', '{}'),
    ('maintain_step_tally(bigint,text,bigint,text)', 'admin', 'p_name', $$SELECT pgsweep.maintain_step_tally(0, %L, NULL, 'e')$$, 'name', '{}'),
    ('maintain_fail_owner(text,text)', 'admin', 'p_owner', $$SELECT pgsweep.maintain_fail_owner(%L, 'e')$$, 'name', '{}'),
    ('retention_step_begin(text,text,interval)', 'admin', 'p_name', $$SELECT pgsweep.retention_step_begin(%L, 'o', '1 second')$$, 'name', '{}'),
    ('retention_step_begin(text,text,interval)', 'admin', 'p_owner', $$SELECT pgsweep.retention_step_begin('bih.events', %L, '1 second')$$, 'name', '{}'),
    ('retention_step_begin(text,text,interval)', 'admin', 'p_budget', $$SELECT pgsweep.retention_step_begin('bih.events', 'o', %L)$$, 'interval', '{1us}'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_phase',
     $$SELECT pgsweep.retention_step_record(0, %L, 0, NULL, NULL, NULL)$$, 'name', '{}'),
    ('retention_step_unlock(text)', 'admin', 'p_name', $$SELECT pgsweep.retention_step_unlock(%L)$$, 'name', '{}'),
    ('cron_command(text,interval)', 'admin', 'p_schedule', $$SELECT pgsweep.cron_command(%L, '10 seconds')$$, 'name', '{}'),
    ('cron_command(text,interval)', 'admin', 'p_budget', $$SELECT pgsweep.cron_command('* * * * *', %L)$$, 'interval', '{}'),
    ('queue_rights(text)', 'admin', 'p_queue', $$SELECT * FROM pgsweep.queue_rights(%L)$$, 'name', '{}'),
    ('queue_counts(text)', 'monitor', 'p_queue', $$SELECT * FROM pgsweep.queue_counts(%L)$$, 'name', '{}'),
    -- admin: maintenance
    ('maintain(text,interval)', 'admin', 'p_owner', $$CALL pgsweep.maintain(%L, '1 second')$$, 'name', '{}'),
    ('maintain(text,interval)', 'admin', 'p_budget', $$CALL pgsweep.maintain('o', %L)$$, 'interval', '{}'),
    ('cron_schedule(text,interval)', 'admin', 'p_schedule', $$SELECT pgsweep.cron_schedule(%L, '10 seconds')$$, 'name', '{}'),
    ('cron_schedule(text,interval)', 'admin', 'p_budget', $$SELECT pgsweep.cron_schedule('* * * * *', %L)$$, 'interval', '{}'),
    -- per-queue rights (the queues helper's migration 035): run once they exist
    ('queue_grant(text,regrole,text[])', 'admin', 'p_queue', $$SELECT pgsweep.queue_grant(%L, 'pgsweep_worker'::regrole, '{send}')$$, 'name', '{}'),
    ('queue_revoke(text,regrole,text[])', 'admin', 'p_queue', $$SELECT pgsweep.queue_revoke(%L, 'pgsweep_worker'::regrole, '{send}')$$, 'name', '{}'),
    -- unique sends (send.sql)
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_unique_key', $$SELECT pgsweep.send('hq', '{}', p_unique_key => %L)$$, 'name', '{}'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_unique_for', $$SELECT pgsweep.send('hq', '{}', p_unique_key => 'u', p_unique_for => %L)$$, 'interval', '{}'),
    ('send_unique(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_queue', $$SELECT pgsweep.send_unique(%L, '{}')$$, 'name', '{}'),
    ('send_unique(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_unique_key', $$SELECT pgsweep.send_unique('hq', '{}', p_unique_key => %L)$$, 'name', '{}'),
    ('send_unique(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_lane', $$SELECT pgsweep.send_unique('hq', '{}', p_lane => %L)$$, 'name', '{}'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_unique_keys[2]', $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], p_unique_keys => ARRAY['ok', %L])$$, 'name', '{}'),
    ('send_batch_unique(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_queue', $$SELECT pgsweep.send_batch_unique(%L, ARRAY['{}'::jsonb])$$, 'name', '{}'),
    ('send_batch_unique(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_unique_keys[2]', $$SELECT pgsweep.send_batch_unique('hq', ARRAY['{}'::jsonb, '{}'], p_unique_keys => ARRAY['ok', %L])$$, 'name', '{}'),
    ('send_batch_unique(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_unique_for[1]', $$SELECT pgsweep.send_batch_unique('hq', ARRAY['{}'::jsonb], p_unique_keys => ARRAY['u'], p_unique_for => ARRAY[%L::interval])$$, 'interval', '{}'),
    -- periodic schedules (schedule.sql, schedule_cron.sql)
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_name', $$SELECT pgsweep.schedule_create(%L, 'hq', '* * * * *')$$, 'name', '{}'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_queue', $$SELECT pgsweep.schedule_create('s', %L, '* * * * *')$$, 'name', '{}'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_cron', $$SELECT pgsweep.schedule_create('s', 'hq', %L)$$, 'name', '{}'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_lane', $$SELECT pgsweep.schedule_create('s', 'hq', '* * * * *', '{}', '{}', %L)$$, 'name', '{}'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_time_zone', $$SELECT pgsweep.schedule_create('s', 'hq', '* * * * *', '{}', '{}', NULL, %L)$$, 'name', '{}'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_catch_up', $$SELECT pgsweep.schedule_create('s', 'hq', '* * * * *', '{}', '{}', NULL, 'UTC', %L)$$, 'name', '{}'),
    ('schedule_pause(text)', 'admin', 'p_name', $$SELECT pgsweep.schedule_pause(%L)$$, 'name', '{}'),
    ('schedule_resume(text)', 'admin', 'p_name', $$SELECT pgsweep.schedule_resume(%L)$$, 'name', '{}'),
    ('schedule_drop(text)', 'admin', 'p_name', $$SELECT pgsweep.schedule_drop(%L)$$, 'name', '{}'),
    ('schedule_next_times(text,text,timestamp with time zone,integer)', 'monitor', 'p_cron', $$SELECT * FROM pgsweep.schedule_next_times(%L)$$, 'name', '{}'),
    ('schedule_next_times(text,text,timestamp with time zone,integer)', 'monitor', 'p_time_zone', $$SELECT * FROM pgsweep.schedule_next_times('* * * * *', %L)$$, 'name', '{}');

-- Sizes and times: one row each (no class to cross with).
CREATE TEMP TABLE one (routine text, kind text, arg text, call text, label text);
INSERT INTO one VALUES
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_priority',
     $$SELECT pgsweep.send('hq', '{}', p_priority => 101::smallint)$$, 'priority 101'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_priority',
     $$SELECT pgsweep.send('hq', '{}', p_priority => NULL::smallint)$$, 'priority NULL'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_unique_for',
     $$SELECT pgsweep.send('hq', '{}', p_unique_for => interval '1 hour')$$, 'a window without a key'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_unique_key',
     $$SELECT pgsweep.send('hi', '{}', '{}', 'k', p_unique_key => 'u')$$, 'a unique key on an inbox message with a key'),
    ('send_unique(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_priority',
     $$SELECT pgsweep.send_unique('hq', '{}', p_priority => -101::smallint)$$, 'priority -101'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_priorities[2]',
     $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], p_priorities => ARRAY[0, 32767]::smallint[])$$, 'priority 32767 in a batch'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_priorities',
     $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], p_priorities => ARRAY[0]::smallint[])$$, 'one priority for two payloads'),
    ('send_batch_unique(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_priorities[1]',
     $$SELECT pgsweep.send_batch_unique('hq', ARRAY['{}'::jsonb], p_priorities => ARRAY[NULL]::smallint[])$$, 'a NULL priority in a batch'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_payload',
     $$SELECT pgsweep.send('hq', jsonb_build_object('x', repeat('x', 20000000)))$$, '20 MB payload'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_headers',
     $$SELECT pgsweep.send('hq', '{}', jsonb_build_object('x', repeat('x', 5000000)))$$, '5 MB headers'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_key',
     $$SELECT pgsweep.send('hi', '{}', '{}', repeat('€', 1000))$$, 'a 1000-character key of 3000 bytes'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_key',
     $$SELECT pgsweep.send('hi', '{}', '{}', repeat('k', 1001))$$, 'a 1001-character key'),
    ('send(text,jsonb,jsonb,text,timestamp with time zone,text,text,interval,smallint,text)', 'worker', 'p_deliver_at',
     $$SELECT pgsweep.send('hq', '{}', '{}', NULL, now() + interval '1000 years')$$, 'delivery 1000 years ahead'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'cardinality(p_payloads)',
     $$SELECT pgsweep.send_batch('hq', array_fill('{}'::jsonb, ARRAY[200000]))$$, '200,000 payloads'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_payloads',
     $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, jsonb_build_object('x', repeat('x', 20000000))])$$, 'a 20 MB payload in a batch'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_keys',
     $$SELECT pgsweep.send_batch('hi', ARRAY['{}'::jsonb, '{}'], NULL, ARRAY['k', repeat('€', 1000)])$$, 'a 3000-byte key in a batch'),
    ('send_batch(text,jsonb[],jsonb[],text[],timestamp with time zone[],text[],text[],interval[],smallint[],text[])', 'worker', 'p_headers',
     $$SELECT pgsweep.send_batch('hq', ARRAY['{}'::jsonb, '{}'], ARRAY['{}'::jsonb, jsonb_build_object('x', repeat('x', 5000000))])$$, '5 MB headers in a batch'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_payload',
     $$SELECT pgsweep.schedule_create('s', 'hq', '* * * * *', jsonb_build_object('x', repeat('x', 20000000)))$$, '20 MB payload'),
    ('schedule_create(text,text,text,jsonb,jsonb,text,text,text)', 'admin', 'p_headers',
     $$SELECT pgsweep.schedule_create('s', 'hq', '* * * * *', '{}', jsonb_build_object('x', repeat('x', 5000000)))$$, '5 MB headers'),
    ('schedule_next_times(text,text,timestamp with time zone,integer)', 'monitor', 'p_count',
     $$SELECT * FROM pgsweep.schedule_next_times('* * * * *', 'UTC', NULL, 200000)$$, '200,000 slots'),
    ('claim(text,text,integer,interval)', 'worker', 'p_batch', $$SELECT pgsweep.claim('hq', 'w', 200000, '1 minute')$$, 'a batch of 200,000'),
    ('claim_ids(text,text,bigint[],interval)', 'worker', 'p_ids', $$SELECT pgsweep.claim_ids('hq', 'w', ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('renew(text,uuid,bigint[],interval)', 'worker', 'p_ids', $$SELECT pgsweep.renew('hq', gen_random_uuid(), ARRAY(SELECT generate_series(1, 200000)::bigint), '1 minute')$$, '200,000 ids'),
    ('complete(text,uuid,bigint[])', 'worker', 'p_ids', $$SELECT pgsweep.complete('hq', gen_random_uuid(), ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('release(text,uuid,bigint[])', 'worker', 'p_ids', $$SELECT pgsweep.release('hq', gen_random_uuid(), ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('fail(text,uuid,bigint[],text,interval)', 'worker', 'p_ids', $$SELECT pgsweep.fail('hq', gen_random_uuid(), ARRAY(SELECT generate_series(1, 200000)::bigint), 'e')$$, '200,000 ids'),
    ('fail(text,uuid,bigint[],text,interval)', 'worker', 'p_error', $$SELECT pgsweep.fail('hq', gen_random_uuid(), '{1}', repeat('e', 10000000))$$, '10 MB error text'),
    ('fail_details(text,uuid,bigint[],text,interval)', 'worker', 'p_error', $$SELECT pgsweep.fail_details('hq', gen_random_uuid(), '{1}', repeat('e', 10000000))$$, '10 MB error text'),
    ('dead_letter(text,uuid,bigint[],text)', 'worker', 'p_ids', $$SELECT pgsweep.dead_letter('hq', gen_random_uuid(), ARRAY(SELECT generate_series(1, 200000)::bigint), 'e')$$, '200,000 ids'),
    ('dead_letter(text,uuid,bigint[],text)', 'worker', 'p_error', $$SELECT pgsweep.dead_letter('hq', gen_random_uuid(), '{1}', repeat('e', 10000000))$$, '10 MB error text'),
    ('dead_requeue(text,bigint[],timestamp with time zone)', 'admin', 'p_ids', $$SELECT pgsweep.dead_requeue('hq', ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('message_cancel(text,bigint[])', 'admin', 'p_ids', $$SELECT pgsweep.message_cancel('hq', ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_statuses',
     $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', 'status', ARRAY(SELECT 's' || g FROM generate_series(1, 200000) g))$$, '200,000 statuses'),
    ('retention_set_filter(text,text,text[])', 'admin', 'p_values',
     $$SELECT pgsweep.retention_set_filter('bih.events', 'status', ARRAY(SELECT 's' || g FROM generate_series(1, 200000) g))$$, '200,000 filter values'),
    ('queue_recover(text,integer)', 'admin', 'p_batch', $$SELECT pgsweep.queue_recover('hq', 200000)$$, 'a batch of 200,000'),
    ('lane_stats(text,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.lane_stats('hq', 200000)$$, 'a limit of 200,000'),
    ('group_stats(text,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.group_stats('hq', 200000)$$, 'a limit of 200,000'),
    ('queue_configure(text,jsonb)', 'admin', 'group_overrides', $$SELECT pgsweep.queue_configure('hq', jsonb_build_object('group_overrides', (SELECT jsonb_object_agg('g' || g, '{"max_in_flight": 1}'::jsonb) FROM generate_series(1, 10001) g)))$$, '10,001 overrides'),
    ('queue_configure(text,jsonb)', 'admin', 'group_max_in_flight', $$SELECT pgsweep.queue_configure('hq', '{"group_max_in_flight": 100001}')$$, 'a group limit of 100,001'),
    ('queue_configure(text,jsonb)', 'admin', 'group_rate', $$SELECT pgsweep.queue_configure('hq', '{"group_rate": "1000001/s"}')$$, 'a group rate of 1,000,001 a second'),
    ('queue_configure(text,jsonb)', 'admin', 'group_overrides.g.rate', $$SELECT pgsweep.queue_configure('hq', '{"group_overrides": {"g": {"rate": "0/min"}}}')$$, 'an override''s rate of 0'),
    ('stats_history(text,timestamp with time zone,timestamp with time zone)', 'monitor', 'p_from', $$SELECT * FROM pgsweep.stats_history('hq', now() + interval '1 hour', now())$$, 'p_from after p_to'),
    ('stats_history(text,timestamp with time zone,timestamp with time zone)', 'monitor', 'p_from', $$SELECT * FROM pgsweep.stats_history('hq', '-infinity', now())$$, 'p_from -infinity'),
    ('stats_history(text,timestamp with time zone,timestamp with time zone)', 'monitor', 'p_to', $$SELECT * FROM pgsweep.stats_history('hq', now(), NULL)$$, 'p_to NULL'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_after', $$SELECT * FROM pgsweep.browse_messages('hq', 'dead', -1)$$, 'a negative cursor'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_messages('hq', 'dead', 0, 200000)$$, 'a limit of 200,000'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_messages('hq', 'dead', 0, 0)$$, 'a limit of 0'),
    ('browse_messages(text,text,bigint,integer,text)', 'monitor', 'p_error', $$SELECT * FROM pgsweep.browse_messages('hq', 'dead', 0, 10, repeat('e', 1001))$$, '1001 characters'),
    ('browse_message(text,bigint)', 'monitor', 'p_id', $$SELECT * FROM pgsweep.browse_message('hq', -1)$$, 'a negative id'),
    ('browse_lanes(text,text,integer,boolean)', 'monitor', 'p_after', $$SELECT * FROM pgsweep.browse_lanes('hq', repeat('l', 201), 10, true)$$, 'a 201-character lane'),
    ('browse_lanes(text,text,integer,boolean)', 'monitor', 'p_after_blocked', $$SELECT * FROM pgsweep.browse_lanes('hq', 'lane-a', 10)$$, 'a cursor without its part'),
    ('browse_lanes(text,text,integer,boolean)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_lanes('hq', NULL, 200000)$$, 'a limit of 200,000'),
    ('browse_lanes(text,text,integer,boolean)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_lanes('hq', NULL, 0)$$, 'a limit of 0'),
    ('browse_leases(text,integer)', 'monitor', 'p_after', $$SELECT * FROM pgsweep.browse_leases(repeat('l', 10000000))$$, 'a 10 MB name'),
    ('browse_leases(text,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_leases(NULL, 200000)$$, 'a limit of 200,000'),
    ('browse_leases(text,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_leases(NULL, -1)$$, 'a limit of -1'),
    ('browse_maintenance_passes(bigint,integer)', 'monitor', 'p_before', $$SELECT * FROM pgsweep.browse_maintenance_passes(-1)$$, 'a negative cursor'),
    ('browse_maintenance_passes(bigint,integer)', 'monitor', 'p_before', $$SELECT * FROM pgsweep.browse_maintenance_passes(0)$$, 'a cursor of 0'),
    ('browse_maintenance_passes(bigint,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_maintenance_passes(NULL, 200000)$$, 'a limit of 200,000'),
    ('browse_maintenance_passes(bigint,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_maintenance_passes(NULL, NULL)$$, 'a limit of NULL'),
    ('browse_retention_passes(text,bigint,integer)', 'monitor', 'p_policy', $$SELECT * FROM pgsweep.browse_retention_passes('no-such-policy')$$, 'an unknown policy'),
    ('browse_retention_passes(text,bigint,integer)', 'monitor', 'p_before', $$SELECT * FROM pgsweep.browse_retention_passes(NULL, -1)$$, 'a negative cursor'),
    ('browse_retention_passes(text,bigint,integer)', 'monitor', 'p_limit', $$SELECT * FROM pgsweep.browse_retention_passes('bih.events', NULL, 200000)$$, 'a limit of 200,000'),
    ('dead_delete(text,bigint[])', 'admin', 'p_ids', $$SELECT pgsweep.dead_delete('hq', ARRAY(SELECT generate_series(1, 200000)::bigint))$$, '200,000 ids'),
    ('retention_register(text,text,text,interval,text,text[],integer,text,interval)', 'admin', 'p_table',
     $$SELECT pgsweep.retention_register('bih.events', E'bih.events\n', 'at', '1 day')$$, 'a table name with a newline'),
    ('retention_register(text,text,text,interval,text,text[],integer,text,interval)', 'admin', 'p_table',
     $$SELECT pgsweep.retention_register('bih.events', 'bih.' || repeat('e', 297), 'at', '1 day')$$, 'a 301-character table name'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_batch_size',
     $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', NULL, NULL, 200000)$$, 'a batch of 200,000'),
    ('retention_register(text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', 'p_batch_size',
     $$SELECT pgsweep.retention_register('bih.events', 'bih.events'::regclass, 'at', '1 day', NULL, NULL, -1)$$, 'a batch of -1'),
    ('retention_resolve_table(text,text)', 'admin', 'p_table',
     $$SELECT pgsweep.retention_resolve_table(repeat('t', 10000000), 'public')$$, 'a 10 MB table name'),
    -- the step routines: values only a forged call passes
    ('maintain_step_failed(bigint,text,text)', 'admin', 'p_state', $$SELECT pgsweep.maintain_step_failed(0, 'e', 'abcde')$$, 'a lower-case SQLSTATE'),
    ('maintain_step_failed(bigint,text,text)', 'admin', 'p_state', $$SELECT pgsweep.maintain_step_failed(0, 'e', '42501 forged')$$, 'a SQLSTATE with text after it'),
    ('maintain_step_tally(bigint,text,bigint,text)', 'admin', 'p_name', $$SELECT pgsweep.maintain_step_tally(0, repeat('n', 201), NULL, 'e')$$, 'a 201-character name'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, '{"duty": 0}', NULL, now(), 0, 0)$$, 'a duty of 0 (a division by zero)'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, '{"duty": 1e-300}', NULL, now(), 0, 0)$$, 'a duty of 1e-300 (an endless sleep)'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, '{"duty": "x"}', NULL, now(), 0, 0)$$, 'a duty that is text'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, '{"best": 1e400}', NULL, now(), 0, 0)$$, 'a best of 1e400 (out of double precision)'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, '[35]', NULL, now(), 0, 0)$$, 'an array'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_state',
     $$SELECT pgsweep.maintain_step_pace(0, jsonb_build_object('x', repeat('x', 5000000)), NULL, now(), 0, 0)$$, '5 MB of state'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_busy',
     $$SELECT pgsweep.maintain_step_pace(0, NULL, NULL, now(), -1, 0)$$, '-1 sessions'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_busy',
     $$SELECT pgsweep.maintain_step_pace(0, NULL, NULL, now(), 1000000, 0)$$, '1,000,000 sessions'),
    ('maintain_step_pace(bigint,jsonb,bigint,timestamp with time zone,integer,integer)', 'admin', 'p_waiting',
     $$SELECT pgsweep.maintain_step_pace(0, NULL, NULL, now(), 0, -1)$$, '-1 sessions'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_deleted',
     $$SELECT pgsweep.retention_step_record(0, 'done', -1, NULL, NULL, NULL)$$, '-1 rows deleted'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_sampled',
     $$SELECT pgsweep.retention_step_record(0, 'done', 0, 0.5, -1, NULL)$$, '-1 rows sampled'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_fraction',
     $$SELECT pgsweep.retention_step_record(0, 'done', 0, 'NaN', 10, NULL)$$, 'a fraction that is NaN'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_fraction',
     $$SELECT pgsweep.retention_step_record(0, 'done', 0, 2, 10, NULL)$$, 'a fraction of 2'),
    ('retention_step_record(bigint,text,bigint,double precision,bigint,timestamp with time zone[])', 'admin', 'p_fraction',
     $$SELECT pgsweep.retention_step_record(0, 'done', 0, '-Infinity', 10, NULL)$$, 'a fraction of -Infinity');

CREATE TEMP TABLE cases AS
SELECT t.routine, t.kind, t.arg, format(t.call, b.v) AS call, format('%s %s: %s', t.routine, t.arg, b.tag) AS label
  FROM tmpl t JOIN bad_name b ON t.class = 'name' AND NOT b.tag = ANY (t.skip)
UNION ALL
SELECT t.routine, t.kind, t.arg, format(t.call, b.v), format('%s %s: %s', t.routine, t.arg, b.tag)
  FROM tmpl t JOIN bad_interval b ON t.class = 'interval' AND NOT b.tag = ANY (t.skip)
UNION ALL
SELECT o.routine, o.kind, o.arg, o.call, format('%s %s: %s', o.routine, o.arg, o.label) FROM one o;

-- retention_run commits before it validates (it must run outside a
-- transaction block, which a pgTAP file is not): its rows are run by the Go
-- test TestHostileRetentionRun (bad_input_test.go) instead, with the same
-- values; they stay in the table so that coverage counts them.
CREATE TEMP TABLE elsewhere AS SELECT * FROM cases WHERE routine LIKE 'retention\_run(%';
DELETE FROM cases WHERE routine LIKE 'retention\_run(%';

-- Routines with no bad-input case here, each with where it is tested (call
-- NULL, label the reason):
INSERT INTO elsewhere (routine, kind, arg, call, label) VALUES
    -- Their only arguments are a pass or a run of this session (and free
    -- text: a caught error's message, stored cut to 2000 characters, which
    -- must be recorded whatever its length). Another session's pass is not
    -- bad input but a missing right: 42501 and nothing changed, tested for
    -- each in sql/tests/security_internals.sql ("Passes belong to their
    -- session"). The procedures (maintain_step_retention, retention_step_pass)
    -- are CALLed there too: they raise before their first COMMIT.
    ('maintain_step_end(bigint)', 'admin', 'p_pass', NULL, 'a pass id: security_internals.sql'),
    ('maintain_step_go(bigint)', 'admin', 'p_run', NULL, 'a run id: security_internals.sql'),
    ('maintain_step_part_end(bigint)', 'admin', 'p_run', NULL, 'a run id: security_internals.sql'),
    ('maintain_step(bigint)', 'admin', 'p_run', NULL, 'a run id: security_internals.sql'),
    ('maintain_step_renew(bigint)', 'admin', 'p_run', NULL, 'a run id: security_internals.sql'),
    ('maintain_step_retention(bigint)', 'admin', 'p_run', NULL, 'a run id (a procedure): security_internals.sql'),
    ('retention_step(bigint)', 'admin', 'p_pass', NULL, 'a pass id: security_internals.sql'),
    ('retention_step_claim(bigint)', 'admin', 'p_pass', NULL, 'a pass id: security_internals.sql'),
    ('retention_step_end(bigint,text)', 'admin', 'p_pass', NULL, 'a pass id and a caught error''s text: security_internals.sql'),
    -- p_name only picks which of this session's advisory locks it gives back
    -- at the end, through retention_step_unlock (whose cases are here); it
    -- commits, so it cannot run in this file's transaction
    ('retention_step_pass(text,bigint)', 'admin', 'p_pass', NULL, 'a pass id (a procedure): security_internals.sql'),
    -- p_prepared is only compared with this session's prepared statements,
    -- and the routine only DEALLOCATEs this session's statements that it
    -- does not list, as a plain DEALLOCATE could: security_internals.sql
    -- shows it changes no role, session user or search_path
    ('retention_step_session_restore(text[])', 'admin', 'p_prepared', NULL, 'this session''s own statements: security_internals.sql'),
    -- The owner proofs' SECURITY DEFINER halves: called without the proof
    -- only a wrapper creates they raise 42501 (security_internals.sql); every
    -- other argument's hostile values go through the wrapper's cases here
    -- (a test below checks that each argument has them).
    ('retention_register_proved(regclass,text,regclass,text,interval,text,text[],integer,text,interval)', 'admin', NULL, NULL, 'through retention_register'),
    ('retention_unregister_proved(regclass,text)', 'admin', NULL, NULL, 'through retention_unregister'),
    ('retention_set_filter_proved(regclass,text,text,text[])', 'admin', NULL, NULL, 'through retention_set_filter'),
    ('retention_set_lease_ttl_proved(regclass,text,interval)', 'admin', NULL, NULL, 'through retention_set_lease_ttl'),
    ('retention_set_strategy_proved(regclass,text,text)', 'admin', NULL, NULL, 'through retention_set_strategy'),
    ('retention_set_time_zone_proved(regclass,text,text)', 'admin', NULL, NULL, 'through retention_set_time_zone');
-- Arguments with no case although their routine has some, and why:
--   retention_owner_proof_drop p_done: only orders the drop after the call it
--     waits for; its value is not read
--   retention_resolve_table p_search_path: the caller's own search_path,
--     set for the lookup only and restored; never stored nor shown
--   maintain_step_pace p_pass, p_batch_start: the pass only names whose row
--     count the pacing reads; a start before the run's counts as the run's
--     start, a later one as no time spent
--   maintain_step_failed p_message, maintain_step_tally p_error,
--     maintain_fail_owner p_error: a caught error's text, cut to 2000
--     characters where stored (see above)
--   retention_step_record p_times: the sample's times, as many as it found
--     (the plan cuts at most 100000 windows from them)

-- Rows for routines that do not exist (yet: another branch adds them) are
-- set aside and listed, not run.
CREATE TEMP TABLE pending AS
SELECT DISTINCT c.routine FROM cases c
 WHERE NOT EXISTS (SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'pgsweep'::regnamespace
                      AND p.proname || '(' || replace(pg_catalog.oidvectortypes(p.proargtypes), ', ', ',') || ')' = c.routine);
DELETE FROM cases c WHERE c.routine IN (SELECT routine FROM pending);
SELECT diag('cases set aside, their routine does not exist here: ' || string_agg(routine, '; ' ORDER BY routine)) FROM pending HAVING count(*) > 0;

-- The routines that need cases: every routine of schema pgsweep with
-- arguments that <schema>_admin, _worker or _monitor may execute.
CREATE TEMP TABLE exposed AS
SELECT p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')' AS routine
  FROM pg_proc p
 WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.pronargs > 0
   AND (has_function_privilege('pgsweep_admin', p.oid, 'EXECUTE')
        OR has_function_privilege('pgsweep_worker', p.oid, 'EXECUTE')
        OR has_function_privilege('pgsweep_monitor', p.oid, 'EXECUTE'));
UPDATE cases SET routine = replace(routine, ',', ', ');
UPDATE elsewhere SET routine = replace(routine, ',', ', ');

SELECT plan((SELECT count(*)::int FROM cases) + 6);

SELECT is(
    (SELECT string_agg(e.routine, '; ' ORDER BY e.routine) FROM exposed e
      WHERE e.routine NOT LIKE '\_%' AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.routine = e.routine)
        AND NOT EXISTS (SELECT 1 FROM elsewhere c WHERE c.routine = e.routine)),
    NULL,
    'every routine with arguments that admin, worker or monitor may execute has bad-input cases here (the names listed have none: add rows)');
SELECT is(
    (SELECT string_agg(DISTINCT c.routine, '; ') FROM cases c WHERE NOT EXISTS (SELECT 1 FROM exposed e WHERE e.routine = c.routine)),
    NULL,
    'every routine named by a case exists and is executable by the role of its case (a renamed routine: fix the rows)');
-- An owner proof's definer half is listed above as tested through its
-- wrapper: every argument but the proof (and a regclass, which names an
-- existing table or fails to parse) has cases for the wrapper.
SELECT is(
    (SELECT string_agg(x.wrapper || ' ' || x.arg, '; ' ORDER BY x.wrapper, x.arg)
       FROM (SELECT pg_catalog.replace(p.proname, '_proved', '') AS wrapper, a.n AS arg
               FROM pg_proc p CROSS JOIN LATERAL unnest(p.proargnames, p.proargtypes::oid[]) a(n, t)
              WHERE p.pronamespace = 'pgsweep'::regnamespace AND p.proname LIKE '%\_proved'
                AND a.n <> 'p_proof' AND a.t <> 'regclass'::regtype) x
      WHERE NOT EXISTS (SELECT 1 FROM cases c WHERE c.routine LIKE x.wrapper || '(%' AND c.arg = x.arg)),
    NULL,
    'every argument of an owner proof''s definer half has cases through its wrapper (the names listed have none)');
-- Internals (underscore routines) are the owner's alone (issue 23, class 3):
-- none needs cases here because none is exposed.
SELECT is(
    (SELECT string_agg(e.routine, '; ' ORDER BY e.routine) FROM exposed e WHERE e.routine LIKE '\_%'),
    NULL,
    'no underscore routine with arguments is executable by admin, worker or monitor');

-- Run every case: as its role, with the state checksummed before and after.
CREATE TEMP TABLE results (label text, state text, msg text, arg text, changed boolean);
DO $$
DECLARE
    c record;
    v_before text;
    v_try record;
BEGIN
    FOR c IN SELECT * FROM cases ORDER BY label LOOP
        v_before := pg_temp.state();
        v_try := pg_temp.try(c.kind, c.call);
        INSERT INTO results VALUES (c.label, v_try.state, v_try.msg, c.arg, pg_temp.state() <> v_before);
    END LOOP;
END $$;

SELECT ok(r.state = '22023' AND r.msg LIKE (replace(replace(r.arg, '[', '\['), '_', '\_') || ' %') AND NOT r.changed,
          r.label || CASE WHEN r.state = '22023' AND r.msg LIKE (replace(replace(r.arg, '[', '\['), '_', '\_') || ' %') AND NOT r.changed THEN ''
                          ELSE format(' -- got %s %s%s', r.state, coalesce(r.msg, ''), CASE WHEN r.changed THEN ' (and the state changed)' ELSE '' END) END)
  FROM results r ORDER BY r.label;

-- and the seed is as it was: every hostile call together changed nothing
SELECT results_eq($$SELECT queue, pending, processing FROM pgsweep.queue_stats ORDER BY queue$$,
    $$VALUES ('hi'::text, 1::bigint, 0::bigint), ('hq', 1, 1)$$, 'the queues hold what the seed put there');

-- an error text under max_error_bytes is stored whole (0.33 cut it at 10000 characters)
SELECT pgsweep.fail('hq', m.token, ARRAY[m.id], repeat('e', 20000), '1 minute')
  FROM pgsweep.message m WHERE m.queue = 'hq' AND m.status = 'processing';
SELECT is((SELECT length(last_error) FROM pgsweep.message WHERE queue = 'hq' AND status = 'failed'), 20000,
    'a 20000-character error text is kept whole, not truncated');

SELECT * FROM finish();
ROLLBACK;
