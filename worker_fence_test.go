package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// A Worker whose own lease expired and whose next claim took the message
// again (same owner, new token) drops the old attempt at once: its handler
// is cancelled, its result discarded (its token is stale anyway), and only
// the new attempt completes the message.
func TestWorkerFencesItsOwnReclaim(t *testing.T) {
	db := pgtest.New(t, 6)
	seedQueue(t, db, 5, 1)
	var cnt pgtest.Counts
	first, firstCancelled, second, finishSecond := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var attempts []int
	var mu sync.Mutex
	var sig *pgsweep.WorkerSignalsT
	stop := startWorker(t, db, func(hctx context.Context, d *pgsweep.Delivery) error {
		mu.Lock()
		attempts = append(attempts, d.Attempt)
		mu.Unlock()
		if d.Attempt == 1 {
			close(first)
			<-hctx.Done()
			close(firstCancelled)
			return nil // would complete attempt 2, were it not fenced
		}
		close(second)
		<-finishSecond
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", Batch: 10, Lease: time.Hour, PollInterval: 20 * time.Millisecond,
		DisableNotify: true, Hooks: cnt.Hooks()},
		func(w *pgsweep.Worker) { sig = pgsweep.WorkerSignals(w) })
	<-first
	// The lease expires (an hour-long lease is renewed every 20 minutes, so
	// no renewal interferes); the worker's next poll claims the row again.
	db.MustExec(t, "UPDATE "+db.Q()+".message SET visible_at = now() - interval '1 second'")
	for _, ch := range []chan struct{}{second, firstCancelled} {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatal("the re-claim did not start attempt 2 and cancel attempt 1")
		}
	}
	if n := sig.LeaseLost.WaitOrTimeout(t); n != 1 || cnt.Lost.Load() != 1 {
		t.Fatalf("%d leases lost (hook count %d), want 1", n, cnt.Lost.Load())
	}
	// Attempt 1 returned nil; had its result been sent, the row would be gone.
	if n := count(t, db, "message", "attempt = 2 AND status = 'processing'"); n != 1 {
		t.Fatalf("attempt 1's stale result acted on attempt 2's lease (%d rows in attempt 2)", n)
	}
	close(finishSecond)
	// each flush of results is a moment to look
	sig.Flushed.WaitUntil(t, "attempt 2 to complete", func(int) bool { return cnt.Completed.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2}) || count(t, db, "message", "true") != 0 || cnt.Completed.Load() != 1 {
		t.Fatalf("attempts %v, completed %d, rows left %d", attempts, cnt.Completed.Load(), count(t, db, "message", "true"))
	}
}

// Handlers run with exactly the concurrency asked for, the Worker never holds
// more than one batch, and completions go out in batches, not one by one.
func TestWorkerBoundsConcurrencyMemoryAndBatchesCompletions(t *testing.T) {
	db := pgtest.New(t, 6)
	ctx := context.Background()
	const messages, batch, concurrency = 2000, 50, 8
	seedQueue(t, db, 3, messages)
	var running, maxRunning, maxHeld, completeCalls, completed atomic.Int64
	full := make(chan struct{}) // closed once concurrency handlers ran at once
	var fullOnce sync.Once
	hooks := pgsweep.Hooks{Completed: func(_ string, n int) { completeCalls.Add(1); completed.Add(int64(n)) }}
	w, err := pgsweep.NewWorker(db.Pool, func(hctx context.Context, _ *pgsweep.Delivery) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		if n == concurrency {
			fullOnce.Do(func() { close(full) })
		}
		// The first handlers wait until all slots are busy: that proves the
		// Worker fills every slot, not only that it never exceeds them.
		select {
		case <-full:
		case <-hctx.Done():
			return hctx.Err()
		}
		return nil
	}, pgsweep.WorkerOptions{Schema: db.Schema, Queue: "q", Batch: batch, Concurrency: concurrency, Logger: quietLog, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	pgsweep.ObserveHeld(w, func(n int) {
		for m := maxHeld.Load(); int64(n) > m && !maxHeld.CompareAndSwap(m, int64(n)); m = maxHeld.Load() {
		}
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("the queue to drain", func() bool { return completed.Load() == messages }))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if maxRunning.Load() != concurrency {
		t.Fatalf("at most %d handlers ran at once, want exactly %d", maxRunning.Load(), concurrency)
	}
	if maxHeld.Load() > batch || maxHeld.Load() == 0 {
		t.Fatalf("the worker held up to %d messages, want 1..%d (one batch)", maxHeld.Load(), batch)
	}
	if calls := completeCalls.Load(); calls*2 > messages {
		t.Fatalf("%d complete calls for %d messages: completions are not batched", calls, messages)
	}
	if count(t, db, "message", "true") != 0 {
		t.Fatal("rows left")
	}
	t.Logf("%d messages: %d complete calls, at most %d held, %d handlers at once", messages, completeCalls.Load(), maxHeld.Load(), maxRunning.Load())
}

// At shutdown the Worker starts nothing new: the messages it claimed but had
// not started are released at once (due now, attempt given back), running
// handlers finish and are completed.
func TestWorkerShutdownReleasesWhatItDidNotStart(t *testing.T) {
	db := pgtest.New(t, 6)
	seedQueue(t, db, 3, 20)
	var cnt pgtest.Counts
	var released atomic.Int64
	hooks := cnt.Hooks()
	releasedCh := make(chan struct{})
	hooks.Released = func(_ string, n int) { released.Add(int64(n)); close(releasedCh) }
	var calls atomic.Int64
	started := make(chan struct{}, 2)
	stop := startWorker(t, db, func(hctx context.Context, _ *pgsweep.Delivery) error {
		calls.Add(1)
		started <- struct{}{}
		select { // finish only once shutdown released the others
		case <-releasedCh:
			return nil
		case <-hctx.Done():
			return hctx.Err()
		}
	}, pgsweep.WorkerOptions{Queue: "q", Batch: 20, Concurrency: 2, Lease: time.Minute, ShutdownTimeout: time.Minute, Hooks: hooks})
	<-started
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || released.Load() != 18 || cnt.Completed.Load() != 2 {
		t.Fatalf("%d handlers ran, %d released, %d completed; want 2, 18, 2", calls.Load(), released.Load(), cnt.Completed.Load())
	}
	if n := count(t, db, "message", "status = 'pending' AND attempt = 0 AND owner IS NULL AND visible_at <= now()"); n != 18 {
		t.Fatalf("%d released rows are pending, due and unspent; want 18", n)
	}
	if count(t, db, "message", "true") != 18 {
		t.Fatal("the two finished messages were not completed")
	}
}

// A handler's error text that PostgreSQL cannot store (a NUL byte, invalid
// UTF-8) and a RetryAfter beyond what fail accepts do not wedge the Worker:
// the text is cleaned; the delay is passed as it is, fail refuses it (22023,
// logged) and the message is left to its lease, neither capped nor failed.
// RetryAfter(err, 0) retries at once, not after the queue's backoff.
func TestWorkerFailureEdges(t *testing.T) {
	db := pgtest.New(t, 6)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.QueueConfigure(ctx, "q", map[string]any{"backoff_base": "1 hour", "backoff_max": "2 hours"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{`"bad text"`, `"far"`, `"now"`} {
		if _, _, err := db.Client.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(p)}); err != nil {
			t.Fatal(err)
		}
	}
	var cnt pgtest.Counts
	var nowCalls atomic.Int64
	var logs pgtest.SyncBuffer
	stop := startWorker(t, db, func(_ context.Context, d *pgsweep.Delivery) error {
		switch string(d.Payload) {
		case `"bad text"`:
			return errors.New("nul\x00 and \xff invalid")
		case `"far"`:
			return pgsweep.RetryAfter(errors.New("much later"), 365*24*time.Hour)
		default:
			if nowCalls.Add(1) == 1 {
				return pgsweep.RetryAfter(errors.New("again"), 0)
			}
			return nil
		}
	}, pgsweep.WorkerOptions{Queue: "q", PollInterval: 20 * time.Millisecond, DisableNotify: true, Hooks: cnt.Hooks(),
		Lease: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("two failures, the immediate retry's completion and the refused fail", func() bool {
		return cnt.Failed.Load() == 2 && cnt.Completed.Load() == 1 && strings.Contains(logs.String(), "fail refused")
	}))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := db.Q()
	var text string
	if err := db.Pool.QueryRow(ctx, "SELECT last_error FROM "+s+".message WHERE payload = '\"bad text\"'").Scan(&text); err != nil {
		t.Fatal(err)
	}
	if text != "nul and \uFFFD invalid" || strings.ContainsRune(text, 0) {
		t.Fatalf("last_error %q", text)
	}
	if n := count(t, db, "message", "payload = '\"far\"' AND status = 'processing' AND attempt = 1 AND last_error IS NULL"); n != 1 {
		t.Fatal("RetryAfter of a year was not refused: the message must stay leased (not failed, not capped)")
	}
	if l := logs.String(); !strings.Contains(l, "p_retry_after must be between") || !strings.Contains(l, "365 days") {
		t.Fatalf("the log does not say why fail was refused:\n%s", l)
	}
	if nowCalls.Load() != 2 {
		t.Fatalf("the RetryAfter(err, 0) message ran %d times, want 2 (retried at once despite the 1-hour backoff)", nowCalls.Load())
	}
}

// Two Workers started together with batch 10 get disjoint rows: their first
// batches (all twenty handlers running at once) share no message, and over
// the whole queue every message is handled exactly once.
func TestTwoWorkersStartedTogetherGetDisjointBatches(t *testing.T) {
	db := pgtest.New(t, 8)
	seedQueue(t, db, 3, 100)
	var mu sync.Mutex
	handled := map[int64][]string{}
	var running atomic.Int64
	full := make(chan struct{})
	var fullOnce sync.Once
	var completed pgtest.Counts
	for _, name := range []string{"a", "b"} {
		startWorker(t, db, func(hctx context.Context, d *pgsweep.Delivery) error {
			mu.Lock()
			handled[d.ID] = append(handled[d.ID], name)
			mu.Unlock()
			if running.Add(1) == 20 {
				fullOnce.Do(func() { close(full) })
			}
			select { // the first batches wait until both workers run theirs
			case <-full:
			case <-hctx.Done():
				return hctx.Err()
			}
			return nil
		}, pgsweep.WorkerOptions{Queue: "q", Batch: 10, Concurrency: 10, Hooks: completed.Hooks()})
	}
	select {
	case <-full:
	case <-time.After(20 * time.Second):
		t.Fatalf("the two workers never ran 20 handlers at once (%d)", running.Load())
	}
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("the queue to drain", func() bool { return completed.Completed.Load() == 100 }))
	mu.Lock()
	defer mu.Unlock()
	by := map[string]int{}
	for id, ws := range handled {
		if len(ws) != 1 {
			t.Fatalf("message %d handled by %v", id, ws)
		}
		by[ws[0]]++
	}
	if len(handled) != 100 || by["a"] == 0 || by["b"] == 0 {
		t.Fatalf("%d messages handled, by worker %v", len(handled), by)
	}
}

// A handler that overwrites its *Delivery changes nothing for the Worker: it
// gets a copy, and the Worker completes the message it claimed.
func TestWorkerHandlerGetsACopy(t *testing.T) {
	db := pgtest.New(t, 4)
	seedQueue(t, db, 3, 5)
	var cnt pgtest.Counts
	stop := startWorker(t, db, func(_ context.Context, d *pgsweep.Delivery) error {
		*d = pgsweep.Delivery{ID: -1}
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", Hooks: cnt.Hooks()})
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("five completions", func() bool { return cnt.Completed.Load() == 5 }))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "message", "true"); n != 0 || cnt.Lost.Load() != 0 {
		t.Fatalf("%d rows left, %d leases lost", n, cnt.Lost.Load())
	}
}
