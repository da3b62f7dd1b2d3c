package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/testsignal"
)

// runBatchWorker runs a Worker with the batch handler h until the test ends.
func runBatchWorker(t *testing.T, db *pgtest.DB, h pgsweep.BatchHandler, o pgsweep.WorkerOptions) {
	t.Helper()
	o.Schema, o.Logger = db.Schema, quietLog
	w, err := pgsweep.NewBatchWorker(db.Pool, h, o)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.RunUntilCleanup(t, w.Run)
}

// counts adds up a Worker's hooks.
type counts struct{ claimed, completed, failed, dead, released, lost atomic.Int64 }

func (c *counts) hooks() pgsweep.Hooks {
	add := func(n *atomic.Int64) func(string, int) { return func(_ string, k int) { n.Add(int64(k)) } }
	return pgsweep.Hooks{Claimed: add(&c.claimed), Completed: add(&c.completed), Failed: add(&c.failed),
		DeadLettered: add(&c.dead), Released: add(&c.released), LeasesLost: add(&c.lost)}
}

func (c *counts) String() string {
	return fmt.Sprintf("claimed %d, completed %d, failed %d, dead %d, released %d, lost %d", c.claimed.Load(),
		c.completed.Load(), c.failed.Load(), c.dead.Load(), c.released.Load(), c.lost.Load())
}

func payloadOf(t *testing.T, d *pgsweep.Delivery) int {
	t.Helper()
	n, err := strconv.Atoi(string(d.Payload))
	if err != nil {
		t.Errorf("payload %s: %v", d.Payload, err)
	}
	return n
}

// A batch handler gets the messages of a claim together and answers for
// each: nil completes, an error fails (retried), Permanent dead-letters at
// once, GiveBack releases with the attempt not spent.
func TestBatchWorkerOutcomes(t *testing.T) {
	db := pgtest.New(t, 8)
	ctx := context.Background()
	seedQueue(t, db, 5, 10)
	var mu sync.Mutex
	seen := map[int][]int{} // payload -> attempts seen
	var batches []int
	var c counts
	h := func(_ context.Context, ds []*pgsweep.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, len(ds))
		errs := make([]error, len(ds))
		for i, d := range ds {
			p := payloadOf(t, d)
			first := len(seen[p]) == 0
			seen[p] = append(seen[p], d.Attempt)
			switch {
			case p == 4 || p == 5:
				errs[i] = pgsweep.Permanent(fmt.Errorf("refused %d", p))
			case (p == 6 || p == 7) && first:
				errs[i] = pgsweep.GiveBack(errors.New("downstream away"))
			case p == 8 && first:
				errs[i] = pgsweep.RetryAfter(errors.New("try again"), 0)
			}
		}
		return errs
	}
	runBatchWorker(t, db, h, pgsweep.WorkerOptions{Queue: "q", Lease: 30 * time.Second, Hooks: c.hooks(), PollInterval: 20 * time.Millisecond})
	pgtest.Eventually(t, 30*time.Second, func() error {
		if c.completed.Load() != 8 || c.dead.Load() != 2 {
			return fmt.Errorf("%v", &c)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if batches[0] != 10 {
		t.Errorf("the first batch held %d messages, want the whole claim of 10 (batches %v)", batches[0], batches)
	}
	want := map[int][]int{4: {1}, 5: {1}, 6: {1, 1}, 7: {1, 1}, 8: {1, 2}}
	for p := range 10 {
		w, ok := want[p]
		if !ok {
			w = []int{1}
		}
		if fmt.Sprint(seen[p]) != fmt.Sprint(w) {
			t.Errorf("payload %d was handled at attempts %v, want %v", p, seen[p], w)
		}
	}
	if c.released.Load() != 2 || c.failed.Load() != 1 || c.lost.Load() != 0 {
		t.Errorf("hooks: %v; want 2 released, 1 failed, none lost", &c)
	}
	var dead int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Rel("message_dead")+
		" WHERE queue = 'q' AND attempts = 1 AND last_error LIKE 'refused %'").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	if dead != 2 {
		t.Errorf("%d dead letters after one attempt with the handler's text, want 2", dead)
	}
}

// A batch handler that panics, or answers for the wrong number of
// messages, fails every message of the batch (each attempt spent).
func TestBatchWorkerBadAnswers(t *testing.T) {
	db := pgtest.New(t, 8)
	seedQueue(t, db, 5, 4)
	var calls atomic.Int64
	var c counts
	attempts := make(chan int, 16)
	h := func(_ context.Context, ds []*pgsweep.Delivery) []error {
		switch calls.Add(1) {
		case 1:
			return nil // no answer for 4 messages
		case 2:
			panic("boom")
		}
		for _, d := range ds {
			attempts <- d.Attempt
		}
		return make([]error, len(ds))
	}
	runBatchWorker(t, db, h, pgsweep.WorkerOptions{Queue: "q", Lease: 30 * time.Second, Hooks: c.hooks(), PollInterval: 20 * time.Millisecond})
	pgtest.Eventually(t, 60*time.Second, func() error {
		if c.completed.Load() != 4 {
			return fmt.Errorf("%v", &c)
		}
		return nil
	})
	if c.failed.Load() != 8 {
		t.Errorf("hooks: %v; want 8 failures (two batches of 4)", &c)
	}
	for range 4 {
		if a := <-attempts; a != 3 {
			t.Errorf("completed at attempt %d, want 3", a)
		}
	}
}

// ClaimLimit caps each claim: 0 claims nothing, 2 claims at most 2 at once.
func TestWorkerClaimLimit(t *testing.T) {
	db := pgtest.New(t, 8)
	ctx := context.Background()
	seedQueue(t, db, 3, 20)
	var lim, asked atomic.Int64
	var handled atomic.Int64
	var most atomic.Int64
	stop := startWorker(t, db, func(context.Context, *pgsweep.Delivery) error {
		handled.Add(1)
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", Lease: 30 * time.Second, PollInterval: 10 * time.Millisecond,
		ClaimLimit: func() int { asked.Add(1); return int(lim.Load()) },
		Hooks: pgsweep.Hooks{Claimed: func(_ string, n int) {
			for m := most.Load(); int64(n) > m && !most.CompareAndSwap(m, int64(n)); m = most.Load() {
			}
		}}})
	// asked five times with a limit of 0: nothing was claimed
	pgtest.Eventually(t, 30*time.Second, func() error {
		if asked.Load() < 5 {
			return fmt.Errorf("ClaimLimit asked %d times", asked.Load())
		}
		return nil
	})
	st, err := db.Client.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 0 || len(st) != 1 || st[0].Processing != 0 || st[0].Pending != 20 {
		t.Fatalf("with ClaimLimit 0: %d handled, stats %+v; want nothing claimed", handled.Load(), st)
	}
	lim.Store(2)
	pgtest.Eventually(t, 30*time.Second, func() error {
		if handled.Load() != 20 {
			return fmt.Errorf("%d of 20 handled", handled.Load())
		}
		return nil
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if m := most.Load(); m < 1 || m > 2 {
		t.Errorf("claimed up to %d messages at once with ClaimLimit 2", m)
	}
}

// Notify wakes a Worker that only polls (every hour here).
func TestWorkerNotify(t *testing.T) {
	db := pgtest.New(t, 8)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	var w *pgsweep.Worker
	var sig *testsignal.Signal[int]
	handled := make(chan int, 1)
	startWorker(t, db, func(_ context.Context, d *pgsweep.Delivery) error {
		handled <- payloadOf(t, d)
		return nil
	}, pgsweep.WorkerOptions{Queue: "q", Lease: 30 * time.Second, PollInterval: time.Hour, DisableNotify: true},
		func(x *pgsweep.Worker) { w, sig = x, &pgsweep.WorkerSignals(x).Claimed })
	if n := sig.WaitOrTimeout(t); n != 0 {
		t.Fatalf("the first claim of an empty queue got %d", n)
	}
	if _, _, err := db.Client.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`7`)}); err != nil {
		t.Fatal(err)
	}
	w.Notify()
	select {
	case p := <-handled:
		if p != 7 {
			t.Errorf("handled %d, want 7", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Notify did not wake the worker")
	}
}
