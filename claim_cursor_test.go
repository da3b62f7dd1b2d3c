package pgsweep_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Claims never wait for the claim cursor's row: while another transaction
// holds its lock, claims from the cursor and rescans still return rows (a
// lock wait would hit lock_timeout and fail), and they only skip moving it.
func TestClaimNeverWaitsForTheCursor(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 4)
	seedQueue(t, db, 5, 10)
	if got, err := c.Claim(ctx, "q", "first", 2, time.Minute); err != nil || len(got) != 2 {
		t.Fatalf("first claim: %v %v", got, err)
	}
	cursor := func() int64 { return db.Int(t, "SELECT id FROM "+db.Rel("claim_cursor")+" WHERE queue = 'q'") }
	before := cursor()

	holder, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, "SELECT 1 FROM "+db.Rel("claim_cursor")+" WHERE queue = 'q' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET lock_timeout = '500ms'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET lock_timeout")
	cc, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cc.Claim(ctx, "q", "second", 2, time.Minute); err != nil || len(got) != 2 {
		t.Fatalf("claim from the cursor while its row is locked: %v %v", got, err)
	}
	// A rescan (the clock a minute on) takes the same path and must not wait either.
	rows, err := conn.Query(ctx, "SELECT id FROM "+db.Rel("claim")+"('q', 'third', 2, '1 minute', now() + interval '1 minute')")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(got) != 2 {
		t.Fatalf("rescan while the cursor row is locked: %v %v", got, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if after := cursor(); after != before {
		t.Fatalf("cursor moved from %d to %d while another transaction held it", before, after)
	}
	if got, err := c.Claim(ctx, "q", "fourth", 2, time.Minute); err != nil || len(got) != 2 {
		t.Fatalf("claim after the holder let go: %v %v", got, err)
	}
	if after := cursor(); after <= before {
		t.Fatalf("cursor did not move once free: %d, was %d", after, before)
	}
}

// The first claims of a new queue do not wait for each other either: the
// queue is created with its cursor, so a claim whose transaction is still
// open (holding the row it moved) does not block a second one.
func TestFirstClaimsOfANewQueueDoNotWait(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 4)
	seedQueue(t, db, 5, 10)
	first, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if got, err := c.WithDB(first).Claim(ctx, "q", "first", 2, time.Minute); err != nil || len(got) != 2 {
		t.Fatalf("first claim: %v %v", got, err)
	}
	second, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback(ctx)
	if _, err := second.Exec(ctx, "SET LOCAL lock_timeout = '500ms'"); err != nil {
		t.Fatal(err)
	}
	got, err := c.WithDB(second).Claim(ctx, "q", "second", 2, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("second claim while the first is open (a wait would hit lock_timeout): %v %v", got, err)
	}
}
