package pgsweep_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// ClaimIDs on a pool or an idle connection runs with plan_cache_mode
// force_generic_plan for its own transaction only: the setting is gone
// after the call, the connection is back outside a transaction, and inside
// a caller's transaction the call neither changes the setting nor commits.
func TestClaimIDsGenericPlanEndsWithTheCall(t *testing.T) {
	db := pgtest.New(t, 1) // one connection: the pool's calls share it
	ctx := context.Background()
	c := db.Client
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	ms := make([]pgsweep.Message, 6)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(`{}`)}
	}
	ids, err := c.SendBatch(ctx, "q", ms)
	if err != nil {
		t.Fatal(err)
	}
	show := func() string {
		t.Helper()
		var v string
		if err := db.Pool.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := show()

	// a pool: pipelined with the setting, which ends with the call
	for i := range 3 { // more than once: the generic plan is cached and reused
		got, err := c.ClaimIDs(ctx, "q", "o", ids[i:i+1], time.Minute)
		if err != nil || len(got) != 1 || got[0].ID != ids[i] {
			t.Fatalf("claim_ids on the pool: %v %v", got, err)
		}
		if v := show(); v != before {
			t.Fatalf("plan_cache_mode after ClaimIDs on the pool: %q, want %q", v, before)
		}
	}

	// more ids than the generic plans are for: the plain call
	big := make([]pgsweep.Message, 100)
	for i := range big {
		big[i] = pgsweep.Message{Payload: json.RawMessage(`{}`)}
	}
	more, err := c.SendBatch(ctx, "q", big)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.ClaimIDs(ctx, "q", "o", more, time.Minute); err != nil || len(got) != len(more) {
		t.Fatalf("claim_ids of %d ids: %d claimed, %v", len(more), len(got), err)
	}
	if v := show(); v != before {
		t.Fatalf("plan_cache_mode after a large ClaimIDs: %q, want %q", v, before)
	}

	// an idle connection: the same
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.WithDB(conn.Conn())
	if got, err := cc.ClaimIDs(ctx, "q", "o", ids[3:4], time.Minute); err != nil || len(got) != 1 {
		t.Fatalf("claim_ids on a connection: %v %v", got, err)
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&v); err != nil || v != before {
		t.Fatalf("plan_cache_mode after ClaimIDs on a connection: %q %v, want %q", v, err, before)
	}
	if s := conn.Conn().PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection left in transaction status %q", s)
	}

	// a connection in the caller's transaction: the plain call, rolled back with it
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.WithDB(conn.Conn()).ClaimIDs(ctx, "q", "o", ids[4:5], time.Minute); err != nil || len(got) != 1 {
		t.Fatalf("claim_ids in a transaction: %v %v", got, err)
	}
	if err := tx.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&v); err != nil || v != before {
		t.Fatalf("plan_cache_mode inside the caller's transaction: %q %v, want %q", v, err, before)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Release()
	// the rollback undid that claim: the message is claimable again
	if got, err := c.ClaimIDs(ctx, "q", "o", ids[4:5], time.Minute); err != nil || len(got) != 1 {
		t.Fatalf("claim_ids after the caller's rollback: %v %v", got, err)
	}
}
