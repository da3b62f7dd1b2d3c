package pgsweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Adaptive pacing reads the live traffic as the maintenance role
// (maintain_step_traffic, SECURITY INVOKER, maintain_retention.sql). A role
// without pg_read_all_stats cannot see another role's session state; such a
// session must count as busy, so that pacing yields to traffic it cannot
// see rather than run retention at 100% over it (0.27 and earlier read the
// activity as the owner role, saw nothing and did exactly that).
func TestPacingCountsSessionsItCannotSeeAsBusy(t *testing.T) {
	sd := newSecDB(t)
	sd.login("runner", "admin") // a maintenance role: no pg_read_all_stats
	ctx := context.Background()

	// Another session of the database, as the superuser, idle for longer
	// than the 100 ms that makes a visible session count as busy.
	other, err := sd.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	var otherPid int32
	if err := other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&otherPid); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		var idle bool
		err := sd.db.Pool.QueryRow(ctx, "SELECT clock_timestamp() - state_change > interval '300 ms' FROM pg_stat_activity WHERE pid = $1", otherPid).Scan(&idle)
		if err != nil {
			t.Fatal(err)
		}
		if !idle {
			return errors.New("the other session is not yet idle for 300 ms")
		}
		return nil
	})

	runner := sd.connAs("runner")
	var state *string
	if err := runner.QueryRow(ctx, "SELECT state FROM pg_stat_activity WHERE pid = $1", otherPid).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != nil {
		t.Fatalf("the runner role sees the superuser's session state %q: the test needs a session it cannot see", *state)
	}
	var busy int
	if err := runner.QueryRow(ctx, sd.sql("SELECT busy FROM @S.maintain_step_traffic()")).Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if busy < 1 {
		t.Fatalf("the runner role counted %d busy sessions with the superuser's session invisible to it: want at least 1", busy)
	}
}
