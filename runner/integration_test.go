package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Integration tests: real PostgreSQL, each test in its own schema. The part
// bodies (_maintain_recovery, maintain_step_retention) are replaced in the test
// schema by stand-ins that take time and log what they did, so that the
// coordination machinery (leases, advisory locks, history) is exercised as it
// will be by the real bodies.

func newRunner(t *testing.T, db *pgtest.DB, owner string, opts Options) *Runner {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.Schema = db.Schema
	opts.Owner = owner
	r, err := New(ConnectConfig(cfg, "pgsweep run "+owner), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// overlaps counts pairs of runs of the same part whose [start, end) overlap
// (docs/operations.md's proof query; an abandoned run ends when it is taken over).
// Five runners and a pg_cron-style caller hammer one database: from the
// history and from the parts' own log, no part ever ran twice at once.
func TestFiveRunnersAndCronNeverOverlap(t *testing.T) {
	db := pgtest.New(t, 10)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "none", 0)
	s := db.Q()
	db.MustExec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '10 seconds')")

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	runners := make([]*Runner, 5)
	for i := range runners {
		runners[i] = newRunner(t, db, fmt.Sprintf("runner-%d", i), Options{Interval: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Budget: 5 * time.Second})
		wg.Add(1)
		go func() { defer wg.Done(); _ = runners[i].Run(ctx) }()
	}
	cronErr := make(chan error, 1)
	wg.Add(1)
	go func() { // what pg_cron does: CALL maintain('pg_cron', budget) on its own connection
		defer wg.Done()
		conn := pgtest.Conn(t, db.URL)
		for ctx.Err() == nil {
			// pg_cron never cancels a run: each call finishes its pass
			if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('pg_cron', '5 seconds')"); err != nil {
				cronErr <- err
				return
			}
		}
	}()
	// Run until both parts ran often enough, by enough owners, with enough
	// contention to prove something (at most 30 s).
	want := pgtest.Contention{Runs: 20, Owners: 4, Busy: 20}
	pgtest.Eventually(t, 30*time.Second, pgtest.Contended(t, db.Pool, s, want))
	cancel()
	wg.Wait()
	select {
	case err := <-cronErr:
		t.Fatalf("pg_cron-style caller: %v", err)
	default:
	}

	if n := pgtest.Overlaps(t, db.Pool, s, "maintain_run"); n != 0 {
		t.Fatalf("history: %d pairs of runs of one part overlapped", n)
	}
	if n := pgtest.Overlaps(t, db.Pool, s, "activity"); n != 0 {
		t.Fatalf("activity log: %d pairs of part bodies overlapped", n)
	}
	// The test proves something only if the parts were contended.
	pgtest.CheckContended(t, db.Pool, s, want)
	// Every run finished; only runs cut short by the runners' stop may have
	// failed, and they say so.
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE status <> 'done' AND (status <> 'failed' OR error <> 'the runner stopped during this pass')"); n != 0 {
		var detail string
		_ = db.Pool.QueryRow(context.Background(), "SELECT string_agg(format('%s run %s by %s: %s %s', part, id, owner, status, error), '; ') FROM "+s+
			".maintain_run WHERE status <> 'done' AND (status <> 'failed' OR error <> 'the runner stopped during this pass')").Scan(&detail)
		t.Fatalf("%d runs did not finish cleanly: %s", n, detail)
	}
	if n := db.Int(t, `SELECT count(*) FROM (SELECT token, lag(token) OVER (PARTITION BY part ORDER BY started_at) AS prev
		FROM `+s+`.maintain_run) x WHERE token <= prev`); n != 0 {
		t.Fatalf("%d runs did not get a higher fencing token than the run before them", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".activity a WHERE NOT EXISTS (SELECT 1 FROM "+s+
		".maintain_run r WHERE r.part = a.part AND r.owner = a.owner AND a.started_at >= r.started_at AND a.finished_at <= coalesce(r.finished_at, 'infinity'))"); n != 0 {
		t.Fatalf("%d part bodies ran outside a recorded run of their owner", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".leases WHERE live"); n != 0 {
		t.Fatalf("%d leases still live after every runner stopped", n)
	}
}

// nonZero is the condition that sql (a count) is non-zero, for
// pgtest.Eventually; what says what the test waits for.
func nonZero(t *testing.T, db *pgtest.DB, what string, sql string, args ...any) func() error {
	return pgtest.Until(what, func() bool { return db.Int(t, sql, args...) != 0 })
}

// A caller whose backend is terminated mid-pass and who cannot record it (a
// crashed process; a runner records it, see
// TestTerminatedPassIsRecordedOnAFreshConnection): the part stays blocked by
// its lease until the TTL, then another runner takes over with a higher
// token and the dead run is marked abandoned.
func TestTerminatedRunnerIsTakenOverAfterTTL(t *testing.T) {
	db := pgtest.New(t, 4)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "victim", 30)
	s := db.Q()
	db.MustExec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '2 seconds')")

	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "pgsweep run victim"
	victimConn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer victimConn.Close(context.Background())
	victimDone := make(chan error, 1)
	go func() {
		_, err := victimConn.Exec(context.Background(), "CALL "+s+".maintain('victim', '30 seconds')")
		victimDone <- err
	}()
	pgtest.Eventually(t, 10*time.Second, nonZero(t, db, "the victim to run recovery", "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'victim' AND part = 'recovery' AND status = 'running'"))
	victimToken, expires := pgtest.RecoveryLease(t, db.Pool, s, "victim")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heir := newRunner(t, db, "heir", Options{Interval: 50 * time.Millisecond, Jitter: -1})
	heir.signals.PassDone.Init()
	heirDone := make(chan error, 1)
	go func() { heirDone <- heir.Run(ctx) }()

	// Find the one backend first, then terminate exactly that pid: a WHERE
	// clause may evaluate pg_terminate_backend before the other conditions.
	var pid int32
	if err := db.Pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'pgsweep run victim'`).Scan(&pid); err != nil {
		t.Fatalf("find the victim's backend: %v", err)
	}
	killed := pgtest.Terminate(t, db.Pool, pid)
	if err := <-victimDone; err == nil {
		t.Fatal("the victim's pass succeeded although its backend was terminated")
	}
	// each of the heir's passes is a moment to look
	heir.signals.PassDone.WaitUntil(t, "the heir to take over", func(error) bool {
		return db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'heir' AND part = 'recovery' AND status = 'done'") != 0
	})
	cancel()
	<-heirDone

	pgtest.CheckTakeover(t, db.Pool, s, victimToken, killed, expires)
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'heir' AND status <> 'done' AND error IS DISTINCT FROM 'the runner stopped during this pass'"); n != 0 {
		t.Fatalf("%d heir runs did not finish", n)
	}
}

// A runner stopped mid-pass releases its leases at once: another owner runs
// the part right away instead of after the (here 10 minute) TTL.
func TestStoppedRunnerReleasesLeasesAtOnce(t *testing.T) {
	db := pgtest.New(t, 4)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "stopper", 30)
	s := db.Q()
	db.MustExec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '10 minutes')")
	r := newRunner(t, db, "stopper", Options{})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	pgtest.Eventually(t, 10*time.Second, nonZero(t, db, "the runner to hold recovery", "SELECT count(*) FROM "+s+".leases WHERE owner = 'stopper' AND live"))
	r.Stop()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after Stop, want nil", err)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".leases WHERE owner = 'stopper'"); n != 0 {
		t.Fatalf("%d leases still held by the stopped runner", n)
	}
	// The cancelled backend may need a moment to end and drop its advisory
	// lock; the lease no longer stands in the way.
	conn := pgtest.Conn(t, db.URL)
	pgtest.Eventually(t, 5*time.Second, func() error {
		if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('next', '5 seconds')"); err != nil {
			t.Fatal(err)
		}
		var status string
		if err := conn.QueryRow(context.Background(), "SELECT recovery FROM "+s+".maintenance_passes WHERE owner = 'next' ORDER BY id DESC LIMIT 1").Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status != "done" {
			return fmt.Errorf("another owner still finds recovery %q after the stop", status)
		}
		return nil
	})
}

// An idle runner holds no connection: between passes nothing of it shows in
// pg_stat_activity; during a pass exactly one connection does.
func TestIdleRunnerHoldsNoConnection(t *testing.T) {
	db := pgtest.New(t, 2)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "idle", 1)
	s := db.Q()
	r := newRunner(t, db, "idle", Options{Interval: time.Hour})
	asleep := make(chan struct{})
	r.sleep = func(ctx context.Context, d time.Duration) error {
		close(asleep)
		<-ctx.Done()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	pgtest.Eventually(t, 10*time.Second, nonZero(t, db, "the pass to run", "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'idle' AND status = 'running'"))
	if n := db.Int(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgsweep run idle'"); n != 1 {
		t.Fatalf("%d connections during a pass, want 1", n)
	}
	<-asleep
	// The backend of a closed connection can take a moment to leave pg_stat_activity.
	pgtest.Eventually(t, 5*time.Second, pgtest.Until("the sleeping runner to hold no connection", func() bool {
		return db.Int(t, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgsweep run idle'") == 0
	}))
	cancel()
	<-done
}

// A part that raises is recorded and the pass goes on; an error that escapes
// the committing retention part ends the CALL and is recorded by the runner.
func TestFailedPartsAreRecorded(t *testing.T) {
	db := pgtest.New(t, 2)
	s := db.Q()
	db.MustExec(t, fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql SET search_path FROM CURRENT AS $$ BEGIN RAISE EXCEPTION 'recovery exploded'; END $$`, s))
	r := newRunner(t, db, "r1", Options{})
	p, _, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("a failed recovery step failed the whole pass: %v", err)
	}
	if p.Parts["recovery"] != "failed" || p.Parts["retention"] != "done" || p.Error != "recovery: recovery exploded (SQLSTATE P0001)" {
		t.Fatalf("pass %+v: want recovery failed with its error, retention done", p)
	}

	db.MustExec(t, fmt.Sprintf(`CREATE OR REPLACE PROCEDURE %[1]s.maintain_step_retention(p_run bigint)
		LANGUAGE plpgsql AS $$ BEGIN COMMIT; RAISE EXCEPTION 'retention exploded'; END $$`, s))
	db.MustExec(t, "SELECT "+s+".setting_set('retention_check_interval', '0')")
	if _, _, err := r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "retention exploded") {
		t.Fatalf("got %v, want the escaped retention error", err)
	}
	var status, perr string
	if err := db.Pool.QueryRow(context.Background(), "SELECT r.status, p.error FROM "+s+".maintain_run r JOIN "+s+
		".maintain_pass p ON p.id = r.pass_id WHERE r.owner = 'r1' AND r.part = 'retention' ORDER BY r.id DESC LIMIT 1").Scan(&status, &perr); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || !strings.Contains(perr, "retention exploded") {
		t.Fatalf("run %s, pass error %q: want the runner to record the escaped error", status, perr)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".leases WHERE owner = 'r1'"); n != 0 {
		t.Fatal("the failed pass left its lease held")
	}

	// pg_cron has no runner to record it: the next pass marks the run abandoned.
	conn := pgtest.Conn(t, db.URL)
	if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('pg_cron', '5 seconds')"); err == nil {
		t.Fatal("want the escaped error")
	}
	db.MustExec(t, "SELECT "+s+"._lease_release('maintain:retention', 'pg_cron', NULL)") // as if its TTL had passed
	if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('pg_cron', '5 seconds')"); err == nil {
		t.Fatal("want the escaped error again")
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'pg_cron' AND part = 'retention' AND status = 'abandoned'"); n != 1 {
		t.Fatalf("%d abandoned runs, want the first pg_cron run marked abandoned by the second", n)
	}
}

// Steps commit one by one until the part is done or its share of the budget
// (recovery: half) is spent; a part stopped by the budget leaves a backlog and
// is due again at once, and retention still gets its turn.
func TestStepsStopAtTheBudget(t *testing.T) {
	db := pgtest.New(t, 2)
	s := db.Q()
	db.MustExec(t, fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
		BEGIN PERFORM pg_sleep(0.05); RETURN '{"recovered": 1, "more": true}'; END $$`, s))
	db.MustExec(t, "SELECT "+s+".setting_set('recovery_interval', '1 hour')")
	conn := pgtest.Conn(t, db.URL)
	// A second session watches the run's committed step count grow during the pass.
	if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('budget', '1 second')"); err != nil {
		t.Fatal(err)
	}
	var steps, recovered int64
	var status, retention string
	if err := db.Pool.QueryRow(context.Background(), "SELECT r.steps, (r.counts ->> 'recovered')::bigint, r.status, p.retention FROM "+s+
		".maintain_run r JOIN "+s+".maintenance_passes p ON p.id = r.pass_id WHERE r.part = 'recovery'").Scan(&steps, &recovered, &status, &retention); err != nil {
		t.Fatal(err)
	}
	if steps < 3 || steps > 12 || recovered != steps || status != "done" {
		t.Fatalf("steps %d, recovered %d, status %s: want several summed steps of 50 ms ended by half the 1 s budget", steps, recovered, status)
	}
	if retention != "done" {
		t.Fatalf("retention %q: a recovery backlog must leave retention half the budget", retention)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_state WHERE part = 'recovery' AND backlog"); n != 1 {
		t.Fatal("the backlog was not recorded")
	}
	if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('budget', '1 second')"); err != nil {
		t.Fatal(err)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE part = 'recovery'"); n != 2 {
		t.Fatalf("%d recovery runs: a backlog must make the part due again despite its 1 hour interval", n)
	}
}

// The runner reads its interval from the database after every pass, and the
// history stays bounded by history_max_rows.
func TestSettingsApplyOnTheNextPassAndHistoryIsBounded(t *testing.T) {
	db := pgtest.New(t, 2)
	s := db.Q()
	r := newRunner(t, db, "settings", Options{})
	db.MustExec(t, "SELECT "+s+".setting_set('runner_interval', '42 seconds')")
	db.MustExec(t, "SELECT "+s+".setting_set('history_max_rows', '10')")
	for range 25 {
		_, st, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Interval != 42*time.Second {
			t.Fatalf("interval %v, want the 42s set by SQL", st.Interval)
		}
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_pass"); n > 11 {
		t.Fatalf("%d passes kept, want at most history_max_rows (+ the pass being recorded)", n)
	}
}

// The advisory lock is the second guard: while a step outlives the part's
// lease TTL, another session on this server still finds the part busy.
func TestExpiredLeaseDuringLongStepStillExcludes(t *testing.T) {
	db := pgtest.New(t, 4)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "slow", 3)
	s := db.Q()
	db.MustExec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '1 second')")
	slow := newRunner(t, db, "slow", Options{Budget: 4 * time.Second}) // recovery gets 2 s: one 3 s step
	done := make(chan error, 1)
	go func() { _, _, err := slow.RunOnce(context.Background()); done <- err }()
	pgtest.Eventually(t, 10*time.Second, nonZero(t, db, "the slow step to outlive its lease", "SELECT count(*) FROM "+s+".maintain_run r JOIN "+s+".leases l ON l.name = 'maintain:recovery' WHERE r.owner = 'slow' AND r.status = 'running' AND NOT l.live"))
	conn := pgtest.Conn(t, db.URL)
	if _, err := conn.Exec(context.Background(), "CALL "+s+".maintain('other', '5 seconds')"); err != nil {
		t.Fatal(err)
	}
	var recovery string
	if err := conn.QueryRow(context.Background(), "SELECT recovery FROM "+s+".maintenance_passes WHERE owner = 'other'").Scan(&recovery); err != nil {
		t.Fatal(err)
	}
	if recovery != "busy" {
		t.Fatalf("another session found recovery %q while the slow step still ran, want busy", recovery)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := pgtest.Overlaps(t, db.Pool, s, "maintain_run"); n != 0 {
		t.Fatalf("%d overlapping runs", n)
	}
	// The slow runner's renewal after the step found the lease free and took a new tenure.
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'slow' AND part = 'recovery' AND status = 'done'"); n != 1 {
		t.Fatal("the slow run did not finish as done")
	}
}

// The owner and budget are maintain()'s p_owner and p_budget: the SQL refuses
// them (22023 naming the argument), and Run stops with that error instead of
// retrying a configuration no retry can fix.
func TestRunStopsWhenMaintainRefusesItsArguments(t *testing.T) {
	db := pgtest.New(t, 2)
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Budget: 2 * time.Hour}, "p_budget must be between 1 second and 1 hour"},
		{Options{Budget: time.Millisecond}, "p_budget must be between 1 second and 1 hour"},
		{Options{Owner: strings.Repeat("o", 201)}, "p_owner must be a non-empty string of at most 200 characters"},
	} {
		owner := c.opts.Owner
		if owner == "" {
			owner = "bad-args"
		}
		r := newRunner(t, db, owner, c.opts)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run with %+v returned %v, want the SQL's %q", c.opts, err, c.want)
		}
	}
}
