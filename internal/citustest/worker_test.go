//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// The Worker's stress behaviour against the coordinator, smaller than the
// single-server TestWorkerStress: 4,000 inbox messages on a queue of one
// worker node, 8 Worker slots with connections of their own to the
// coordinator, workers that crash (their connections are terminated and
// cannot come back: no renew, no complete, no release; their leases expire)
// and workers that restart gracefully (they release what they claimed but
// did not start); each slot then runs a new incarnation with a new owner. A
// maintenance loop calls queue_recover. Proven from the data: every message
// processed exactly once (message_processed, nothing live left), its
// attempts never below its handler calls and never above max_attempts;
// crashes happened and recovery released their leases. Handler failures (the
// Worker's fail) are left out: fail crashes Citus 13.2.2 until fail.sql
// changes (TestCitusSQLHasNoCrashingUpdates).
func TestCitusWorkerCrashesAndRecovery(t *testing.T) {
	const (
		messages    = 4000
		slots       = 8
		maxAttempts = 10
		// The lease also bounds each claim call (the Worker cuts a claim
		// after one lease), and a cut call closes its session: on Citus
		// the next claim then starts cold (a new coordinator backend, a new
		// connection to the worker, claim() compiled afresh there), which
		// on a loaded machine outlasted a 1 s lease and was cut again, and
		// so on: the Worker never claimed from a warm session again (CI's
		// "not drained" runs: about six claims cut a second on the
		// coordinator, no lock waits). 5 s leaves that cold path room; the
		// single-server TestWorkerStress keeps 1 s.
		lease       = 5 * time.Second
		crashRate   = 1.0 / 300
		restartRate = 1.0 / 300
	)
	in := Shared(t)
	ctx := context.Background()
	c := in.Client
	q := in.QueuePerWorker(t, "stress")[1]
	if err := c.QueueCreate(ctx, q, pgsweep.Inbox, maxAttempts); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < messages; i += 1000 {
		ms := make([]pgsweep.Message, 1000)
		for j := range ms {
			ms[j] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+j))}
		}
		if _, err := c.SendBatch(ctx, q, ms); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu                          sync.Mutex
		calls                       = map[int64]int{}
		crashes, restarts, released atomic.Int64
		completed, lost             atomic.Int64
	)
	hooks := pgsweep.Hooks{
		Completed:  func(_ string, n int) { completed.Add(int64(n)) },
		LeasesLost: func(_ string, n int) { lost.Add(int64(n)) },
		Released:   func(_ string, n int) { released.Add(int64(n)) },
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	errc := make(chan error, slots)
	for slot := range slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(slot), 7))
			var rmu sync.Mutex
			for incarnation := 0; runCtx.Err() == nil; incarnation++ {
				owner := fmt.Sprintf("s%02d.%d", slot, incarnation)
				var crashed, restarting atomic.Bool
				cfg, err := pgxpool.ParseConfig(in.URL)
				if err != nil {
					errc <- err
					return
				}
				cfg.MaxConns = 2
				cfg.ConnConfig.RuntimeParams["application_name"] = owner
				cfg.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
					if crashed.Load() {
						return errors.New("crashed: no more connections")
					}
					return nil
				}
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					errc <- err
					return
				}
				wctx, stop := context.WithCancel(runCtx)
				w, err := pgsweep.NewWorker(pool, func(hctx context.Context, d *pgsweep.Delivery) error {
					mu.Lock()
					calls[d.ID]++
					mu.Unlock()
					rmu.Lock()
					crashNow, restartNow := rng.Float64() < crashRate, rng.Float64() < restartRate
					rmu.Unlock()
					if restartNow && !restarting.Swap(true) {
						restarts.Add(1)
						stop() // graceful: the running handlers finish
					}
					if crashNow || crashed.Load() {
						if !crashed.Swap(true) {
							crashes.Add(1)
							// The process dies: its sessions end, and it never
							// connects again.
							if _, err := in.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
								WHERE application_name = $1 AND pid <> pg_backend_pid()`, owner); err != nil {
								errc <- err
							}
							stop()
						}
						<-hctx.Done()
						return errors.New("crashed")
					}
					return nil
				}, pgsweep.WorkerOptions{
					Schema: in.Schema, Queue: q, Owner: owner, Batch: 20, Concurrency: 4,
					Lease: lease, PollInterval: 100 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
					DisableNotify: slot%2 == 0, Hooks: hooks, Logger: quiet,
				})
				if err != nil {
					errc <- err
					pool.Close()
					return
				}
				err = w.Run(wctx)
				stop()
				pool.Close()
				if err != nil && !crashed.Load() && runCtx.Err() == nil {
					errc <- fmt.Errorf("worker %s: %w", owner, err)
					return
				}
			}
		}()
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go watchStall(watchCtx, t, in, q, 15*time.Second)
	recovered := 0
	pgtest.Eventually(t, 3*time.Minute, func() error {
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
		r, err := c.QueueRecover(ctx, q, 1000)
		if err != nil {
			t.Fatal(err)
		}
		recovered += r.Recovered + r.DeadLettered
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1", q); n != 0 {
			return fmt.Errorf("not drained: %d messages left", n)
		}
		return nil
	})
	stopAll()
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}

	if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message_processed")+" WHERE queue = $1", q); n != messages {
		t.Errorf("%d of %d messages processed", n, messages)
	}
	if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message_dead")+" WHERE queue = $1", q); n != 0 {
		t.Errorf("%d messages dead-lettered", n)
	}
	rows, err := in.Pool.Query(ctx, "SELECT id, attempts FROM "+in.Rel("message_processed")+" WHERE queue = $1", q)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		ID       int64
		Attempts int32
	}
	recs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rec])
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range recs {
		n := calls[r.ID]
		if n == 0 {
			t.Errorf("message %d processed without a handler call", r.ID)
		}
		if int(r.Attempts) < n || r.Attempts > maxAttempts {
			t.Errorf("message %d: %d attempts recorded, %d handler calls, max %d", r.ID, r.Attempts, n, maxAttempts)
		}
	}
	if crashes.Load() == 0 || recovered == 0 {
		t.Errorf("%d crashes, %d leases recovered: the test proved nothing about crashes and recovery", crashes.Load(), recovered)
	}
	t.Logf("%d messages: %d completed, %d crashes, %d graceful restarts (%d released), %d recovered, %d leases lost",
		messages, completed.Load(), crashes.Load(), restarts.Load(), released.Load(), recovered, lost.Load())
}
