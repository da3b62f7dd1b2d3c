-- pgTAP: shared settings — defaults, validation with 22023, normalisation.
BEGIN;
SELECT plan(47);

SELECT has_table('pgsweep', 'setting', 'setting table exists');
SELECT has_view('pgsweep', 'settings', 'settings view exists');
SELECT has_function('pgsweep', 'setting_set', ARRAY['text', 'text'], 'setting_set(text, text)');
SELECT has_function('pgsweep', 'setting_get', ARRAY['text'], 'setting_get(text)');
SELECT set_eq(
    $$SELECT name FROM pgsweep.settings$$,
    ARRAY['runner_interval', 'runner_jitter', 'maintain_lease_ttl', 'recovery_interval', 'recovery_batch_size',
          'retention_check_interval', 'retention_duty_cycle', 'inbox_processed_retention', 'dead_letter_retention',
          'history_retention', 'history_max_rows', 'retention_lock_timeout', 'queue_default_grants',
          'max_payload_bytes', 'max_headers_bytes', 'max_error_bytes', 'max_key_bytes', 'max_batch',
          'stats_interval', 'stats_retention', -- the queue snapshots (stats.sql)
          'schedule_missed_after', -- periodic schedules, catch-up none (maintain_schedules.sql)
          'health_transaction_age', 'health_idle_in_transaction_age', 'health_prepared_age', 'health_slot_xmin_xids',
          'health_lock_wait', 'health_due_age', 'health_window', 'health_dead_letters', 'health_dead_tuples',
          'health_dead_tuples_percent', 'health_maintain_intervals',
          'health_index_bloat_percent', 'health_index_bloat_mb', 'health_max_per_kind'], -- health()'s thresholds (health.sql)
    'the documented settings exist');
SELECT results_eq(
    $$SELECT name, default_value FROM pgsweep.settings ORDER BY name$$,
    $$VALUES ('dead_letter_retention', '30 days'),
             ('health_dead_letters', '1'), ('health_dead_tuples', '100000'), ('health_dead_tuples_percent', '20'),
             ('health_due_age', '5 minutes'), ('health_idle_in_transaction_age', '1 minute'),
             ('health_index_bloat_mb', '100'), ('health_index_bloat_percent', '50'), ('health_lock_wait', '10 seconds'),
             ('health_maintain_intervals', '30'), ('health_max_per_kind', '20'), ('health_prepared_age', '5 minutes'), ('health_slot_xmin_xids', '10000000'),
             ('health_transaction_age', '5 minutes'), ('health_window', '15 minutes'),
             ('history_max_rows', '10000'), ('history_retention', '7 days'),
             ('inbox_processed_retention', '7 days'), ('maintain_lease_ttl', '1 minute'),
             ('max_batch', '10000'), ('max_error_bytes', '65536'), ('max_headers_bytes', '65536'), ('max_key_bytes', '2000'),
             ('max_payload_bytes', '1048576'), ('queue_default_grants', '1'), ('recovery_batch_size', '1000'),
             ('recovery_interval', '5 seconds'), ('retention_check_interval', '1 minute'), ('retention_duty_cycle', '0'), ('retention_lock_timeout', '1 second'), ('runner_interval', '10 seconds'),
             ('runner_jitter', '2 seconds'), ('schedule_missed_after', '5 minutes'), ('stats_interval', '10 seconds'), ('stats_retention', '7 days')$$,
    'the documented defaults');

-- start from defaults whatever an earlier session changed (ROLLBACK restores)
SELECT pgsweep.setting_reset(name) FROM pgsweep.setting;

SELECT is(pgsweep.setting_get('runner_interval'), '10 seconds', 'runner_interval defaults to 10 seconds');
SELECT is(pgsweep.setting_set('runner_interval', '00:00:30'), '30 seconds', 'setting_set normalises and returns the value');
SELECT is(pgsweep.setting_get('runner_interval'), '30 seconds', 'setting_get reads it back');
SELECT is(pgsweep.setting_interval('runner_interval'), interval '30 seconds', 'setting_interval types it');
SELECT ok((SELECT updated_at IS NOT NULL FROM pgsweep.settings WHERE name = 'runner_interval'), 'the view shows when it changed');
SELECT is(pgsweep.setting_set('runner_jitter', '0'), '0 seconds', 'jitter may be zero');
SELECT is(pgsweep.setting_set('recovery_batch_size', ' 250 '), '250', 'integers are trimmed and normalised');
SELECT is(pgsweep.setting_int('recovery_batch_size'), 250::bigint, 'setting_int types it');
SELECT is(pgsweep.setting_set('dead_letter_retention', 'INFINITE'), 'infinite', 'retention periods may be infinite');
SELECT is(pgsweep.setting_interval('dead_letter_retention'), NULL, 'infinite reads as NULL (keep forever)');
SELECT is(pgsweep.setting_set('inbox_processed_retention', '2 weeks'), '14 days', 'weeks become days');
SELECT is(pgsweep.setting_reset('runner_interval'), '10 seconds', 'setting_reset restores the default');
SELECT is((SELECT range FROM pgsweep.settings WHERE name = 'dead_letter_retention'), '1 minute .. 100 years, or infinite', 'the view shows the range (0.34: a calendar bound, was 36500 days)');

-- bad input: 22023 naming the setting and its range, nothing changed
CREATE TEMP TABLE before AS SELECT * FROM pgsweep.setting;
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', '2 hours')$$, '22023',
    'runner_interval must be between 1 second and 1 hour, got 2 hours', 'interval above its range');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', '0.5 seconds')$$, '22023',
    'runner_interval must be between 1 second and 1 hour, got 0.5 seconds', 'interval below its range');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', 'soon')$$, '22023',
    'runner_interval must be an interval between 1 second and 1 hour, got ''soon''', 'unparseable interval');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', NULL)$$, '22023',
    'runner_interval must be between 1 second and 1 hour, got NULL', 'NULL value');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', 'infinite')$$, '22023',
    'runner_interval must be an interval between 1 second and 1 hour, got ''infinite''', 'infinite only where allowed');
SELECT throws_ok($$SELECT pgsweep.setting_set('dead_letter_retention', '10 seconds')$$, '22023',
    'dead_letter_retention must be between 1 minute and 100 years, or infinite, got 10 seconds', 'retention below its range');
SELECT throws_ok($$SELECT pgsweep.setting_set('recovery_batch_size', '0')$$, '22023',
    'recovery_batch_size must be between 1 and 10000, got 0', 'integer below its range');
SELECT throws_ok($$SELECT pgsweep.setting_set('recovery_batch_size', '10001')$$, '22023',
    'recovery_batch_size must be between 1 and 10000, got 10001', 'integer above its range');
SELECT throws_ok($$SELECT pgsweep.setting_set('history_max_rows', 'many')$$, '22023',
    'history_max_rows must be an integer between 10 and 10000000, got ''many''', 'unparseable integer');
SELECT throws_ok($$SELECT pgsweep.setting_set('nope', '1')$$, '22023',
    'p_name must be one of dead_letter_retention, health_dead_letters, health_dead_tuples, health_dead_tuples_percent, health_due_age, health_idle_in_transaction_age, health_index_bloat_mb, health_index_bloat_percent, health_lock_wait, health_maintain_intervals, health_max_per_kind, health_prepared_age, health_slot_xmin_xids, health_transaction_age, health_window, history_max_rows, history_retention, inbox_processed_retention, maintain_lease_ttl, max_batch, max_error_bytes, max_headers_bytes, max_key_bytes, max_payload_bytes, queue_default_grants, recovery_batch_size, recovery_interval, retention_check_interval, retention_duty_cycle, retention_lock_timeout, runner_interval, runner_jitter, schedule_missed_after, stats_interval, stats_retention, got ''nope''',
    'unknown setting');
SELECT throws_ok($$SELECT pgsweep.setting_get(NULL)$$, '22023', NULL, 'setting_get(NULL)');
SELECT throws_ok($$SELECT pgsweep.setting_reset('nope')$$, '22023', NULL, 'setting_reset of an unknown setting');
SELECT throws_ok($$SELECT pgsweep.setting_int('runner_interval')$$, '22023',
    'p_name must name an integer setting, runner_interval is an interval', 'setting_int of an interval');
SELECT throws_ok($$SELECT pgsweep.setting_interval('history_max_rows')$$, '22023',
    'p_name must name an interval setting, history_max_rows is an integer', 'setting_interval of an integer');
-- 0.34: interval rules (validate.sql) and names/values without control characters
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', '1 mon -30 days 1 sec')$$, '22023',
    'runner_interval must be between 1 second and 1 hour, got 1 month -30 days 1 second', 'mixed signs (one second by 30-day months)');
SELECT throws_ok($$SELECT pgsweep.setting_set('maintain_lease_ttl', '1 day -23 hours -59 minutes')$$, '22023',
    'maintain_lease_ttl must be between 1 second and 1 hour, got 1 day -1439 minutes', 'days and time of opposite signs');
SELECT throws_ok($$SELECT pgsweep.setting_set('retention_check_interval', '1 mon')$$, '22023',
    'retention_check_interval must be between 0 seconds and 1 day, got 1 month', 'a month where a fixed length is meant');
SELECT throws_ok($$SELECT pgsweep.setting_set('history_retention', '1 year')$$, '22023',
    'history_retention must be between 1 minute and 365 days, got 1 year', 'a year is no fixed length (history_retention is in days)');
SELECT throws_ok($$SELECT pgsweep.setting_set('dead_letter_retention', '2 mons -1 day')$$, '22023',
    'dead_letter_retention must be between 1 minute and 100 years, got 2 months -1 day', 'a calendar period with mixed signs');
SELECT throws_ok($$SELECT pgsweep.setting_set('dead_letter_retention', '1000 years')$$, '22023',
    'dead_letter_retention must be between 1 minute and 100 years, or infinite, got 1000 years', '1000 years');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', '1 microsecond')$$, '22023',
    'runner_interval must be between 1 second and 1 hour, got 0.000001 seconds', '1 microsecond');
SELECT throws_ok($$SELECT pgsweep.setting_set(E'runner_interval\n', '1 minute')$$, '22023',
    'p_name must hold printable characters only (no control, format or invisible characters), got U+000A at character 16', 'a setting name with a newline');
SELECT throws_ok($$SELECT pgsweep.setting_set('runner_interval', E'1 minute\nFATAL: forged')$$, '22023',
    'p_value must hold printable characters only (no control, format or invisible characters), got U+000A at character 9', 'a value with a newline (log injection)');
SELECT throws_ok($$SELECT pgsweep.setting_set('max_batch', '99')$$, '22023',
    'max_batch must be between 100 and 10000, got 99', 'a cap below its range');
SELECT set_eq('SELECT * FROM pgsweep.setting', 'SELECT * FROM before', 'failed calls changed nothing');
SELECT is(pgsweep.setting_set('dead_letter_retention', '3 months'), '3 months', 'a retention period may be calendar months');
SELECT is(pgsweep.setting_set('dead_letter_retention', '36500 days'), '36500 days', 'the old upper bound is still accepted');
-- _check_size reads no setting for sizes up to 100: every cap's minimum must be at least that
SELECT is((SELECT count(*) FROM pgsweep.setting WHERE name LIKE 'max\_%' AND (kind <> 'integer' OR min_value::bigint < 100)), 0::bigint,
    'every cap setting is an integer with a minimum of at least 100 (the fast path of _check_size)');

SELECT * FROM finish();
ROLLBACK;
