package pgsweep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// 32 Workers, each on a pool of 4 connections and running up to 4
// handlers, drain 2,000 messages of a queue with max_in_flight 5. Exact,
// from two sides: never more than 5 handlers run at once (a handler runs
// only under its message's lease, and the lease's slot is held until its
// completion commits), and a sampler on a connection of its own never sees
// more than 5 live leases in one snapshot; both reach 5, so the limit is
// what held them back. Every message is completed exactly once. Half the
// Workers listen (a freed slot's NOTIFY wakes them), half poll.
func TestMaxInFlightWorkers(t *testing.T) {
	const workers, perWorker, messages, limit = 32, 4, 2000, 5
	ctx, db, c := pgtest.Start(t, 2)
	s := db.Q()
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueConfigure(ctx, "q", map[string]any{"max_in_flight": limit}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < messages; i += 500 {
		ms := make([]pgsweep.Message, 500)
		for k := range ms {
			ms[k] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i+k))}
		}
		if _, err := c.SendBatch(ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
	}

	var running, peak, completed atomic.Int64
	var mu sync.Mutex
	done := map[int]int{}
	handler := func(hctx context.Context, d *pgsweep.Delivery) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		var b struct{ I int }
		if err := json.Unmarshal(d.Payload, &b); err != nil {
			return err
		}
		// work, not a wait: it keeps the slot long enough for the others to queue up
		select {
		case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
		case <-hctx.Done():
			return hctx.Err()
		}
		mu.Lock()
		done[b.I]++
		mu.Unlock()
		return nil
	}
	f := startFleet(ctx, t, db.URL, workers, perWorker, handler, func(w int) pgsweep.WorkerOptions {
		return pgsweep.WorkerOptions{
			Schema: db.Schema, Queue: "q", Owner: fmt.Sprintf("w%d", w), Batch: 4, Concurrency: perWorker,
			PollInterval: 20 * time.Millisecond, DisableNotify: w%2 == 0, Logger: quietLog,
			Hooks: pgsweep.Hooks{Completed: func(_ string, n int) { completed.Add(int64(n)) }},
		}
	})
	// the sampler: live leases in one snapshot, as often as it can
	f.sample("SELECT count(*) FROM " + s + ".message WHERE queue = 'q' AND status = 'processing' AND visible_at > clock_timestamp()")
	pgtest.Eventually(t, 3*time.Minute, pgtest.Until("every message completed", func() bool { return completed.Load() >= messages }))
	most, sampled := f.wait()
	if p := peak.Load(); p != limit {
		t.Errorf("at most %d handlers ran at once, want exactly %d (the limit, reached)", p, limit)
	}
	if m := most[0]; m > limit || m < 1 {
		t.Errorf("the sampler saw %d live leases at most in %d snapshots, want 1..%d", m, sampled[0], limit)
	}
	if n := completed.Load(); n != messages {
		t.Errorf("%d completions, want %d", n, messages)
	}
	for i := range messages {
		if done[i] != 1 {
			t.Fatalf("message %d handled %d times, want once", i, done[i])
		}
	}
	t.Logf("%d snapshots of the leases, at most %d live", sampled[0], most[0])
}

// Eight claimers on connections of their own claim (and complete) as fast
// as they can for 3 seconds from a queue with rate 1000/s and burst 50.
// Over the span of the database clock from before the first claim to after
// the last, they took at most 1000 a second plus the burst (the bucket
// starts full), exactly; and at least half of the rate (the claimers kept
// up: no claim waits for another, so the tokens did not sit unused).
func TestRateConcurrent(t *testing.T) {
	const claimers, rate, burst = 8, 1000, 50
	ctx, db, c := pgtest.Start(t, 2)
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	ms := make([]pgsweep.Message, 2000)
	for i := range ms {
		ms[i].Payload = json.RawMessage(`{}`)
	}
	for range 5 {
		if _, err := c.SendBatch(ctx, "q", ms); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.QueueConfigure(ctx, "q", map[string]any{"rate": fmt.Sprintf("%d/s", rate), "rate_burst": burst}); err != nil {
		t.Fatal(err)
	}
	var claimed atomic.Int64
	span := claimFor(ctx, t, db, "q", claimers, 3*time.Second, func(ds []pgsweep.Delivery) error {
		claimed.Add(int64(len(ds)))
		return nil
	})
	n := float64(claimed.Load())
	if most := rate*span + burst; n > most {
		t.Fatalf("claimed %v in %.3f s of the database clock, more than %v (rate %d/s plus burst %d)", n, span, most, rate, burst)
	}
	if least := rate * span / 2; n < least {
		t.Fatalf("claimed %v in %.3f s, fewer than %v (half the rate): claims held each other back", n, span, least)
	}
	t.Logf("claimed %v in %.3f s: %.0f a second", n, span, n/span)
}
