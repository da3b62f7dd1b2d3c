package pgtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

// InstallStandIns replaces maintain()'s two part bodies in the install of
// schema with the stand-ins of StandInsSQL (slowOwner's recovery steps
// sleep slowSleep seconds) and makes both parts due at every pass
// (recovery_interval and retention_check_interval 0).
func InstallStandIns(t testing.TB, db pgsweep.DBTX, schema, slowOwner string, slowSleep float64) {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	for _, sql := range []string{
		StandInsSQL(s, pgx.Identifier{schema + "_owner"}.Sanitize(), slowOwner, slowSleep),
		"SELECT " + s + ".setting_set('recovery_interval', '0')",
		"SELECT " + s + ".setting_set('retention_check_interval', '0')",
	} {
		if _, err := db.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// StandInsSQL returns the SQL that replaces maintain()'s two part bodies in
// the schema s (quoted) with stand-ins that take time and log what they did
// in s.activity, for the tests of leadership and overlapping passes (the
// runner's and the Citus tier's): recovery sleeps slowSleep seconds per step
// for the owner slowOwner, a few milliseconds otherwise, and asks for more
// steps at random; retention commits in the middle, as retention_run does.
// ownerRole (quoted) is the schema's owner role, as which the recovery
// stand-in runs inside maintain_step.
func StandInsSQL(s, ownerRole, slowOwner string, slowSleep float64) string {
	return fmt.Sprintf(`
		CREATE TABLE %[1]s.activity (id bigserial PRIMARY KEY, part text, owner text, started_at timestamptz, finished_at timestamptz);
		CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql AS $$
		DECLARE v_start timestamptz := clock_timestamp();
		BEGIN
			PERFORM pg_sleep(CASE WHEN p_owner = '%[2]s' THEN %[3]s ELSE 0.002 + random() * 0.004 END);
			INSERT INTO %[1]s.activity (part, owner, started_at, finished_at) VALUES ('recovery', p_owner, v_start, clock_timestamp());
			RETURN jsonb_build_object('recovered', 1, 'lost_leases', 0, 'dead_lettered', 0, 'more', random() < 0.3);
		END $$;
		GRANT INSERT ON %[1]s.activity TO %[4]s;
		GRANT USAGE ON SEQUENCE %[1]s.activity_id_seq TO %[4]s;
		CREATE OR REPLACE PROCEDURE %[1]s.maintain_step_retention(p_run bigint)
		LANGUAGE plpgsql AS $$
		DECLARE v_start timestamptz := clock_timestamp();
		BEGIN
			PERFORM pg_sleep(0.002);
			COMMIT;
			PERFORM pg_sleep(0.002);
			INSERT INTO %[1]s.activity (part, owner, started_at, finished_at)
			SELECT 'retention', r.owner, v_start, clock_timestamp() FROM %[1]s.maintain_run r WHERE r.id = p_run;
		END $$;`, s, slowOwner, fmt.Sprint(slowSleep), ownerRole)
}
