//go:build crontest

package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestCronRealRun (make test-cron, opt-in: it waits for pg_cron's next
// minute) schedules maintain() with pg_cron in the test database, which must
// be the one named by cron.database_name, and waits at most 75 seconds for a
// run that succeeded and left a finished pass by owner pg_cron.
func TestCronRealRun(t *testing.T) {
	ctx, db, _ := pgtest.Start(t, 2)
	s := db.Q()
	if _, err := db.Pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_cron"); err != nil {
		t.Fatalf("pg_cron must be installable in this database (cron.database_name): %v", err)
	}
	var running bool
	if err := db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'pg_cron launcher')").Scan(&running); err != nil {
		t.Fatal(err)
	}
	if !running {
		t.Fatal("the pg_cron scheduler (backend_type 'pg_cron launcher') is not running in this cluster: restart it with pg_cron in shared_preload_libraries")
	}
	var id int64
	if err := db.Pool.QueryRow(ctx, "SELECT "+s+".cron_schedule('* * * * *', '20 seconds')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := db.Pool.Exec(context.Background(), "SELECT "+s+".cron_unschedule()"); err != nil {
			t.Errorf("unschedule: %v", err)
		}
	})
	start := time.Now()
	pgtest.Eventually(t, 75*time.Second, func() error {
		var status, message string
		err := db.Pool.QueryRow(ctx, "SELECT status, coalesce(return_message, '') FROM cron.job_run_details WHERE jobid = $1 AND status IN ('succeeded', 'failed') ORDER BY runid DESC LIMIT 1", id).
			Scan(&status, &message)
		if err == pgx.ErrNoRows {
			return errors.New("pg_cron did not run the job")
		}
		if err != nil {
			t.Fatal(err)
		}
		if status != "succeeded" {
			t.Fatalf("pg_cron ran the job and it failed: %s", message)
		}
		return nil
	})
	var passes int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".maintenance_passes WHERE owner = 'pg_cron' AND finished_at IS NOT NULL AND error IS NULL").Scan(&passes); err != nil {
		t.Fatal(err)
	}
	if passes == 0 {
		t.Fatal("the job succeeded but recorded no finished pass by pg_cron")
	}
	t.Logf("pg_cron ran CALL %s.maintain('pg_cron', '20 seconds') after %v", db.Schema, time.Since(start).Round(time.Second))
}
