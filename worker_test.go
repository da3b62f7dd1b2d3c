package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/testsignal"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func startWorker(t *testing.T, db *pgtest.DB, h pgsweep.Handler, o pgsweep.WorkerOptions, configure ...func(*pgsweep.Worker)) (stop func() error) {
	t.Helper()
	o.Schema = db.Schema
	if o.Logger == nil {
		o.Logger = quietLog
	}
	w, err := pgsweep.NewWorker(db.Pool, h, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range configure {
		f(w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("worker did not stop")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// seedQueue creates the outbox queue "q" with maxAttempts and sends n
// messages, whose payloads are 0 to n-1.
func seedQueue(t *testing.T, db *pgtest.DB, maxAttempts, n int) {
	t.Helper()
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, maxAttempts); err != nil {
		t.Fatal(err)
	}
	ms := make([]pgsweep.Message, n)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i))}
	}
	if _, err := db.Client.SendBatch(ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
}

// With polling set to an hour, only NOTIFY can wake an idle worker.
func TestWorkerWakesOnNotify(t *testing.T) {
	db := pgtest.New(t, 6)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	var cnt pgtest.Counts
	var sig *testsignal.Signal[int]
	got := make(chan string, 10)
	startWorker(t, db, func(_ context.Context, d *pgsweep.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", PollInterval: time.Hour, Hooks: cnt.Hooks()},
		func(w *pgsweep.Worker) { sig = &pgsweep.WorkerSignals(w).Claimed })
	// Let the worker's first claim (empty), its LISTEN and the claim it
	// makes once it listens (empty too) happen first: after them, with
	// polling an hour away, only a notification can bring the next claim.
	channel, err := db.Client.NotifyChannel(ctx) // the SQL names the channel
	if err != nil || channel != db.Schema+"_messages" {
		t.Fatalf("notify_channel() = %q, %v", channel, err)
	}
	sig.WaitOrTimeout(t) // the first claim
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("LISTEN", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = $1",
			"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n)
		return n > 0
	}))
	sig.WaitOrTimeout(t) // the claim after LISTEN
	if _, _, err := db.Client.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`"hello"`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != `"hello"` {
			t.Fatalf("got %s", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker was not woken by NOTIFY")
	}
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("completion", func() bool { return cnt.Completed.Load() == 1 }))
	if n := count(t, db, "message", "true"); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// A handler that runs longer than the lease keeps it: the worker renews in
// the background, a rival claimer gets nothing, the message is delivered once.
func TestWorkerRenewsLongHandlers(t *testing.T) {
	db := pgtest.New(t, 6)
	ctx := context.Background()
	seedQueue(t, db, 3, 1)
	var cnt pgtest.Counts
	var calls atomic.Int64
	startWorker(t, db, func(ctx context.Context, _ *pgsweep.Delivery) error {
		calls.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, pgsweep.WorkerOptions{Queue: "q", Lease: time.Second, Hooks: cnt.Hooks()})
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("the handler to start", func() bool { return calls.Load() == 1 }))
	rivalGot := 0
	for end := time.Now().Add(15 * time.Second); cnt.Completed.Load() == 0 && time.Now().Before(end); {
		ds, err := db.Client.Claim(ctx, "q", "rival", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rivalGot += len(ds)
		// The behaviour under test is time: the handler outlives its lease
		// and the rival tries, every 50 ms, to claim across it.
		time.Sleep(50 * time.Millisecond)
	}
	if rivalGot != 0 || calls.Load() != 1 || cnt.Lost.Load() != 0 || cnt.Completed.Load() != 1 {
		t.Fatalf("rival claimed %d, handler ran %d times, %d leases lost", rivalGot, calls.Load(), cnt.Lost.Load())
	}
}

// Failures: retried with the queue's backoff, dead after the last attempt;
// a panic is a failure too.
func TestWorkerFailsAndDeadLetters(t *testing.T) {
	db := pgtest.New(t, 6)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.QueueConfigure(ctx, "q", map[string]any{"backoff_base": "0 seconds", "backoff_max": "0 seconds"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Client.SendBatch(ctx, "q", []pgsweep.Message{{Payload: json.RawMessage(`"ok"`)}, {Payload: json.RawMessage(`"bad"`)}, {Payload: json.RawMessage(`"panic"`)}}); err != nil {
		t.Fatal(err)
	}
	var cnt pgtest.Counts
	startWorker(t, db, func(_ context.Context, d *pgsweep.Delivery) error {
		switch string(d.Payload) {
		case `"bad"`:
			return errors.New("bad payload")
		case `"panic"`:
			panic("boom")
		}
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", PollInterval: 20 * time.Millisecond, Hooks: cnt.Hooks()})
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("two dead letters", func() bool { return cnt.Dead.Load() == 2 }))
	if cnt.Completed.Load() != 1 || cnt.Failed.Load() != 4 || cnt.Claimed.Load() != 7 {
		t.Fatalf("completed %d, failed %d, claimed %d; want 1, 4 (2 messages x 2 retries), 7", cnt.Completed.Load(), cnt.Failed.Load(), cnt.Claimed.Load())
	}
	if n := count(t, db, "message_dead", "attempts = 3 AND last_error IN ('bad payload', 'handler panic: boom')"); n != 2 {
		t.Fatalf("dead letters: %d", n)
	}
}

// Shutdown lets a running handler finish within the deadline and completes
// its message; past the deadline the lease is abandoned to expiry.
func TestWorkerShutdown(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handler  time.Duration
		deadline time.Duration
		done     bool
	}{{"finishes", 300 * time.Millisecond, 10 * time.Second, true}, {"abandons", time.Hour, 200 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			db := pgtest.New(t, 6)
			seedQueue(t, db, 3, 1)
			var cnt pgtest.Counts
			started, cancelled := make(chan struct{}), make(chan struct{})
			stop := startWorker(t, db, func(ctx context.Context, _ *pgsweep.Delivery) error {
				close(started)
				select {
				case <-time.After(tc.handler):
					return nil
				case <-ctx.Done():
					close(cancelled)
					return ctx.Err()
				}
			}, pgsweep.WorkerOptions{Queue: "q", ShutdownTimeout: tc.deadline, Lease: time.Minute, Hooks: cnt.Hooks()})
			<-started
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if tc.done {
				if cnt.Completed.Load() != 1 || count(t, db, "message", "true") != 0 {
					t.Fatalf("the in-flight message was not completed at shutdown")
				}
				return
			}
			select {
			case <-cancelled:
			case <-time.After(20 * time.Second):
				t.Fatal("the abandoned handler's context was not cancelled")
			}
			if cnt.Completed.Load() != 0 || cnt.Failed.Load() != 0 || count(t, db, "message", "status = 'processing'") != 1 {
				t.Fatalf("an abandoned message must stay leased until expiry (its cancelled handler's error is no failure)")
			}
		})
	}
}

func TestWorkerUnknownQueueStops(t *testing.T) {
	db := pgtest.New(t, 4)
	w, err := pgsweep.NewWorker(db.Pool, func(context.Context, *pgsweep.Delivery) error { return nil },
		pgsweep.WorkerOptions{Schema: db.Schema, Queue: "nope", DisableNotify: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("Run on an unknown queue: got %v, want ErrInvalidArgument", err)
	}
}

// Batch and Lease are checked by the SQL, not by a copy of its ranges in
// Go: NewWorker accepts them, and Run returns the claim's
// ErrInvalidArgument at once, naming the SQL argument, with nothing claimed.
func TestWorkerOptionsOutOfRangeAreTheSQLs(t *testing.T) {
	db := pgtest.New(t, 4)
	seedQueue(t, db, 3, 1)
	for _, tc := range []struct {
		name  string
		batch int
		lease time.Duration
		arg   string
	}{
		{"batch -1", -1, time.Minute, "p_batch"},
		{"batch 10001", 10001, time.Minute, "p_batch"},
		{"lease 500ms", 10, 500 * time.Millisecond, "p_lease"},
		{"lease -1s", 10, -time.Second, "p_lease"},
		{"lease 2h", 10, 2 * time.Hour, "p_lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := pgsweep.NewWorker(db.Pool, func(context.Context, *pgsweep.Delivery) error { return nil },
				pgsweep.WorkerOptions{Schema: db.Schema, Queue: "q", Batch: tc.batch, Lease: tc.lease, DisableNotify: true, Logger: quietLog})
			if err != nil {
				t.Fatalf("NewWorker: %v (the SQL checks the ranges)", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err = w.Run(ctx)
			if !errors.Is(err, pgsweep.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.arg) {
				t.Fatalf("Run: got %v, want ErrInvalidArgument naming %s", err, tc.arg)
			}
			if n := count(t, db, "message", "status = 'pending' AND attempt = 0"); n != 1 {
				t.Fatal("the refused claim changed the message")
			}
		})
	}
}

// A lease taken over while the handler runs: the renewal finds it lost, the
// handler's context is cancelled, its result is discarded, and the new
// owner's row is untouched.
func TestWorkerLeaseLost(t *testing.T) {
	db := pgtest.New(t, 6)
	seedQueue(t, db, 3, 1)
	var cnt pgtest.Counts
	var lost *testsignal.Signal[int]
	started, cancelled := make(chan struct{}), make(chan struct{})
	stop := startWorker(t, db, func(hctx context.Context, _ *pgsweep.Delivery) error {
		close(started)
		<-hctx.Done()
		close(cancelled)
		return nil // would complete, were the result not discarded
	}, pgsweep.WorkerOptions{Queue: "q", Lease: 3 * time.Second, Hooks: cnt.Hooks()},
		func(w *pgsweep.Worker) { lost = &pgsweep.WorkerSignals(w).LeaseLost })
	<-started
	// Another owner takes the row over (as a claim after expiry would).
	db.MustExec(t, "UPDATE "+db.Q()+".message SET owner = 'thief', token = gen_random_uuid(), attempt = attempt + 1")
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler of a lost lease was not cancelled")
	}
	if n := lost.WaitOrTimeout(t); n != 1 || cnt.Lost.Load() != 1 {
		t.Fatalf("%d leases lost (hook count %d), want 1", n, cnt.Lost.Load())
	}
	if err := stop(); err != nil { // a wrongly sent completion has landed once Run returned
		t.Fatal(err)
	}
	if cnt.Completed.Load() != 0 || count(t, db, "message", "owner = 'thief' AND attempt = 2") != 1 {
		t.Fatalf("completed %d; the thief's row must be untouched", cnt.Completed.Load())
	}
}
