//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/runner"
)

func (in *Install) runner(t *testing.T, owner string, opts runner.Options) *runner.Runner {
	t.Helper()
	cfg, err := pgx.ParseConfig(in.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.Schema, opts.Owner = in.Schema, owner
	r, err := runner.New(runner.ConnectConfig(cfg, "pgsweep run "+owner), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// overlaps counts pairs of runs of one part whose [start, end) overlap
// (docs/operations.md's proof query).
// Leadership on Citus: two runners, each on its own connections to the
// coordinator, hammer maintain(); the leases (a reference table) decide.
// Never two holders: no two runs of one part overlap, in the history or in
// the parts' own log, and every run's fencing token is higher than the one
// before. Then a runner's session is killed in the middle of a part: the
// part stays held until the lease expires, then the other runner takes it
// over with the next token, and the dead run is marked abandoned.
func TestCitusLeadership(t *testing.T) {
	in := New(t, 4)
	ctx := context.Background()
	s := in.Q()
	pgtest.InstallStandIns(t, in.Pool, in.Schema, "victim", 30)
	in.Exec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '2 seconds')")

	t.Run("never two holders", func(t *testing.T) {
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		// The runners stop when the subtest ends, also when it fails early:
		// left running, they would take the tokens the next subtest counts.
		t.Cleanup(func() { cancel(); wg.Wait() })
		for _, owner := range []string{"runner-a", "runner-b"} {
			r := in.runner(t, owner, runner.Options{Interval: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Budget: 5 * time.Second})
			wg.Add(1)
			go func() { defer wg.Done(); _ = r.Run(rctx) }()
		}
		want := pgtest.Contention{Runs: 20, Owners: 2, Busy: 5}
		pgtest.Eventually(t, 30*time.Second, pgtest.Contended(t, in.Pool, s, want))
		cancel()
		wg.Wait()
		if n := pgtest.Overlaps(t, in.Pool, s, "maintain_run"); n != 0 {
			t.Fatalf("history: %d pairs of runs of one part overlapped", n)
		}
		if n := pgtest.Overlaps(t, in.Pool, s, "activity"); n != 0 {
			t.Fatalf("activity log: %d pairs of part bodies overlapped", n)
		}
		if n := in.Int(t, `SELECT count(*) FROM (SELECT token, lag(token) OVER (PARTITION BY part ORDER BY started_at) AS prev
			FROM `+s+`.maintain_run) x WHERE token <= prev`); n != 0 {
			t.Fatalf("%d runs did not get a higher fencing token than the run before them", n)
		}
		pgtest.CheckContended(t, in.Pool, s, want)
		if n := in.Int(t, "SELECT count(*) FROM "+s+".leases WHERE live"); n != 0 {
			t.Fatalf("%d leases still live after both runners stopped", n)
		}
	})

	t.Run("takeover after kill", func(t *testing.T) {
		cfg, err := pgx.ParseConfig(in.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["application_name"] = "pgsweep run victim"
		victim, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer victim.Close(ctx)
		var pid int32
		if err := victim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		victimDone := make(chan error, 1)
		go func() {
			_, err := victim.Exec(ctx, "CALL "+s+".maintain('victim', '30 seconds')")
			victimDone <- err
		}()
		pgtest.Eventually(t, 10*time.Second, nonZero(t, in, "the victim to run recovery", "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'victim' AND part = 'recovery' AND status = 'running'"))
		victimToken, expires := pgtest.RecoveryLease(t, in.Pool, s, "victim")
		hctx, cancel := context.WithCancel(ctx)
		defer cancel()
		heir := in.runner(t, "heir", runner.Options{Interval: 50 * time.Millisecond, Jitter: -1})
		heirDone := make(chan error, 1)
		go func() { heirDone <- heir.Run(hctx) }()

		killed := pgtest.Terminate(t, in.Pool, pid)
		if err := <-victimDone; err == nil {
			t.Fatal("the victim's pass succeeded although its backend was terminated")
		}
		pgtest.Eventually(t, 15*time.Second, nonZero(t, in, "the heir to take over", "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'heir' AND part = 'recovery' AND status = 'done'"))
		cancel()
		<-heirDone

		pgtest.CheckTakeover(t, in.Pool, s, victimToken, killed, expires)
	})
}

// nonZero is the condition that sql (a count) is non-zero, for
// pgtest.Eventually; what says what the test waits for.
func nonZero(t *testing.T, in *Install, what string, sql string, args ...any) func() error {
	return pgtest.Until(what, func() bool { return in.Int(t, sql, args...) != 0 })
}

// maintain() itself on a distributed install, as pg_cron or a runner calls
// it on the coordinator: recovery releases the expired leases of queues on
// both workers (queue_recover, pushed down per queue), and retention runs
// the built-in policy of an inbox queue (processed rows past
// processed_retention, a distributed table swept with the queue's filter),
// and the schedules part sends a schedule's slot to the queue's shard.
func TestCitusMaintain(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	s := in.Q()
	t.Cleanup(func() { // the settings it changes below, for the install's next test
		in.Exec(t, "SELECT "+s+".setting_reset('recovery_interval')")
		in.Exec(t, "SELECT "+s+".setting_reset('retention_check_interval')")
	})
	queues := in.QueuePerWorker(t, "maint")
	for _, q := range queues {
		if err := in.Client.QueueCreate(ctx, q, pgsweep.Inbox, 5); err != nil {
			t.Fatal(err)
		}
		if err := in.Client.QueueConfigure(ctx, q, map[string]any{"processed_retention": "1 second"}); err != nil {
			t.Fatal(err)
		}
		ms := make([]pgsweep.Message, 20)
		for i := range ms {
			ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i))}
		}
		if _, err := in.Client.SendBatch(ctx, q, ms); err != nil {
			t.Fatal(err)
		}
		ds, err := in.Client.Claim(ctx, q, "gone", 20, time.Second)
		if err != nil || len(ds) != 20 {
			t.Fatalf("claim %s: %d %v", q, len(ds), err)
		}
		ids := make([]int64, 10)
		for i := range ids {
			ids[i] = ds[i].ID
		}
		if _, err := in.Client.Complete(ctx, q, ds[0].Token, ids); err != nil { // 10 processed, 10 left to expire
			t.Fatal(err)
		}
		// a schedule (a reference table) that sends to the queue's shard
		if err := in.Client.ScheduleCreate(ctx, "every-second-"+q, q, "@every 1 second", nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = in.Client.ScheduleDrop(ctx, "every-second-"+q) })
	}
	in.Exec(t, "SELECT "+s+".setting_set('recovery_interval', '0')")
	in.Exec(t, "SELECT "+s+".setting_set('retention_check_interval', '0')")
	time.Sleep(2500 * time.Millisecond) // time under test: the leases and processed_retention expire
	if _, err := in.Pool.Exec(ctx, "CALL "+s+".maintain('citus-test', '20 seconds')"); err != nil {
		t.Fatalf("maintain on a distributed install: %v", err)
	}
	var parts string
	if err := in.Pool.QueryRow(ctx, "SELECT parts::text FROM "+s+".maintain_pass ORDER BY id DESC LIMIT 1").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1 AND owner IS NOT NULL", q); n != 0 {
			t.Errorf("%s: %d expired leases not recovered (pass %s)", q, n, parts)
		}
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message_processed")+" WHERE queue = $1", q); n != 0 {
			t.Errorf("%s: %d processed rows past processed_retention left (pass %s)", q, n, parts)
		}
		// catch-up latest: one message for the slots of the 2.5 s above
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1 AND key LIKE 'pgsweep-schedule:%'", q); n != 1 {
			t.Errorf("%s: %d scheduled messages after one pass, want 1 (pass %s)", q, n, parts)
		}
	}
	if n := in.Int(t, "SELECT count(*) FROM "+s+".maintain_run WHERE status <> 'done'"); n != 0 {
		var detail string
		_ = in.Pool.QueryRow(ctx, "SELECT string_agg(format('%s: %s %s', part, status, error), '; ') FROM "+s+".maintain_run WHERE status <> 'done'").Scan(&detail)
		t.Errorf("maintain runs not done: %s", detail)
	}
}
