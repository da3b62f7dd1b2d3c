package pgsweep_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// roundTrips counts what a pool sends: batches (one round trip each) and
// single statements.
type roundTrips struct {
	mu               sync.Mutex
	batches, queries int
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.queries++
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	r.batches++
	r.mu.Unlock()
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) take() (batches, queries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, q := r.batches, r.queries
	r.batches, r.queries = 0, 0
	return b, q
}

// The Worker's flush with claim completes the ids of several claims and
// claims the next batch in one round trip when none of them is a lane's
// message; with lane messages (lane lock order) each token's complete is a
// transaction of its own, before the claim. Both commit every completion.
func TestCompleteGroupsRoundTrips(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	cfg := db.Pool.Config().Copy()
	rt := &roundTrips{}
	cfg.ConnConfig.Tracer = rt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]pgsweep.Message, 10)
	for i := range msgs {
		msgs[i] = pgsweep.Message{Payload: json.RawMessage(`{}`)}
	}
	if _, err := c.SendBatch(ctx, "q", msgs); err != nil {
		t.Fatal(err)
	}
	for _, lanes := range []bool{false, true} {
		a, err := c.Claim(ctx, "q", "w", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Claim(ctx, "q", "w", 2, time.Minute)
		if err != nil || len(a) != 2 || len(b) != 2 {
			t.Fatalf("claims: %d and %d messages (%v), want 2 and 2", len(a), len(b), err)
		}
		rt.take()
		byGroup, ds, err := pgsweep.CompleteGroupsAndClaim(c, "q", "w", []pgsweep.Token{tok(a), tok(b)}, [][]int64{ids(a), ids(b)}, 1, lanes)
		if err != nil || len(ds) != 1 {
			t.Fatalf("lanes %v: claimed %d (%v), want 1", lanes, len(ds), err)
		}
		if len(byGroup) != 2 || !slices.Equal(byGroup[0], ids(a)) || !slices.Equal(byGroup[1], ids(b)) {
			t.Fatalf("lanes %v: completed %v, want %v and %v", lanes, byGroup, ids(a), ids(b))
		}
		batches, queries := rt.take()
		want := [2]int{1, 0} // one pipelined round trip
		if lanes {
			want = [2]int{0, 3} // two completes, then the claim
		}
		if [2]int{batches, queries} != want {
			t.Fatalf("lanes %v: %d batches and %d statements, want %v", lanes, batches, queries, want)
		}
		if _, err := c.Complete(ctx, "q", tok(ds), ids(ds)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, "message", "true"); n != 0 {
		t.Fatalf("%d messages left, want 0", n)
	}
}
