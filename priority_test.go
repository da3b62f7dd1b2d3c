package pgsweep_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Priorities under concurrency, with the per-level positions of claim.sql
// moving under 12 claimers while 8 senders send at 13 levels (-3..9), a
// quarter of them in 16 lanes, and one message in seven fails its first
// attempt (back to the queue after the backoff: a due row behind its
// level's position, found by a rescan or a claim short of its batch): every message is completed exactly
// once, nothing is left, and every batch comes back highest priority first.
func TestPriorityClaimConcurrent(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "q", pgsweep.Outbox, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const senders, batches, perBatch, claimers = 8, 20, 25, 12
	const total = senders * batches * perBatch
	type body struct {
		I int   `json:"i"`
		P int16 `json:"p"`
	}
	var mu sync.Mutex
	done := map[int]int{} // payload i -> completions
	send := func(c *pgsweep.Client, s int) (int, error) {
		r := rand.New(rand.NewPCG(uint64(s), 11))
		for b := range batches {
			ms := make([]pgsweep.Message, perBatch)
			for k := range ms {
				i := (s*batches+b)*perBatch + k
				p := int16(r.IntN(13) - 3)
				ms[k] = pgsweep.Message{Payload: mustJSON(t, body{I: i, P: p}), Priority: p}
				if r.IntN(4) == 0 && i%7 != 0 { // a failed head would hold its lane for the backoff
					ms[k].Lane = fmt.Sprintf("L%d", r.IntN(16))
				}
			}
			if _, err := c.SendBatch(ctx, "q", ms); err != nil {
				return b * perBatch, err
			}
		}
		return batches * perBatch, nil
	}
	settle := func(c *pgsweep.Client, w int, ds []pgsweep.Delivery) (int, error) {
		var complete, fail []int64
		bodies := map[int64]body{}
		prev := int16(127)
		for _, d := range ds {
			var b body
			if err := json.Unmarshal(d.Payload, &b); err != nil {
				return 0, err
			}
			if b.P > prev {
				return 0, fmt.Errorf("a batch out of priority order: %d after %d", b.P, prev)
			}
			prev = b.P
			bodies[d.ID] = b
			if d.Attempt == 1 && b.I%7 == 0 {
				fail = append(fail, d.ID)
			} else {
				complete = append(complete, d.ID)
			}
		}
		tok := ds[0].Token
		if len(fail) > 0 {
			if _, err := c.Fail(ctx, "q", tok, fail, "once", 0); err != nil {
				return 0, fmt.Errorf("fail: %w", err)
			}
		}
		if len(complete) == 0 {
			return 0, nil
		}
		ids, err := c.Complete(ctx, "q", tok, complete)
		if err != nil {
			return 0, fmt.Errorf("complete: %w", err)
		}
		mu.Lock()
		for _, id := range ids {
			done[bodies[id].I]++
		}
		mu.Unlock()
		return len(ids), nil
	}
	_, _, errs := sendClaimRace(ctx, t, db, senders, claimers, 10, send, settle)
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if len(done) != total {
		t.Fatalf("%d of %d messages completed", len(done), total)
	}
	for i, n := range done {
		if n != 1 {
			t.Fatalf("message %d completed %d times", i, n)
		}
	}
	if n := count(t, db, "message", "queue = 'q'"); n != 0 {
		t.Fatalf("%d messages left", n)
	}
	// the positions of the levels the claims took rows of
	var levels int
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(cardinality(priority_levels), 0) FROM %q.claim_cursor WHERE queue = 'q'`, db.Schema)).Scan(&levels); err != nil {
		t.Fatal(err)
	}
	if levels != 12 { // -3..9 but the default
		t.Fatalf("positions for %d levels, want 12", levels)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
