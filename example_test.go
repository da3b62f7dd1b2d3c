package pgsweep_test

import (
	"context"
	"encoding/json"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// Sending inside the application's transaction, and a Worker that works the
// queue. (The README shows this example; it is compiled with the tests.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// pgsweep is installed (pgsweep migrate, or pgsweep.Migrate at start-up).
	client, err := pgsweep.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.QueueCreate(ctx, "orders", pgsweep.Outbox, 10); err != nil { // idempotent
		log.Fatal(err)
	}

	// The message exists only if the application's transaction commits.
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (42, 'new')"); err != nil {
		log.Fatal(err)
	}
	if _, _, err := pgsweep.Send(ctx, tx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"order":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	w, err := pgsweep.NewWorker(pool, func(ctx context.Context, d *pgsweep.Delivery) error {
		log.Printf("order message %d: %s", d.ID, d.Payload)
		return nil // nil completes; an error retries with backoff, then dead-letters
	}, pgsweep.WorkerOptions{Queue: "orders", Batch: 100, Concurrency: 10})
	if err != nil {
		log.Fatal(err)
	}
	// Run claims, renews leases, completes in batches and wakes on NOTIFY
	// until ctx is cancelled; then it stops gracefully.
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
