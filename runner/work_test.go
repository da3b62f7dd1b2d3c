package runner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The real parts under load: five runners and a pg_cron-style caller share
// one database while workers crash holding claims, then live workers drain
// the queue, and retention drains a registered table and the built-in
// policies. From the data: every expired claim was recovered exactly once,
// every message completed exactly once, nothing else lost, eligible rows
// gone, kept rows kept, and no part ever ran twice at once.
func TestRunnersRecoverAndRetainUnderLoad(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 24)
	s := db.Q()
	const (
		messages = 3000
		crashed  = 1000
	)
	db.MustExec(t, fmt.Sprintf(`
		SELECT %[1]s.setting_set('recovery_interval', '0');
		SELECT %[1]s.setting_set('retention_check_interval', '0');
		SELECT %[1]s.setting_set('maintain_lease_ttl', '5 seconds');
		SELECT %[1]s.setting_set('recovery_batch_size', '200');
		SELECT %[1]s.queue_create('jobs', 'outbox', 3);
		SELECT %[1]s.queue_create('in', 'inbox', 3);
		-- a CAP-shaped table: 10000 expired Succeeded rows, 10000 that must stay
		CREATE TABLE %[1]s.published ("Id" bigint PRIMARY KEY, "ExpiresAt" timestamp, "StatusName" text NOT NULL);
		CREATE INDEX ON %[1]s.published ("ExpiresAt", "StatusName");
		INSERT INTO %[1]s.published
		SELECT g, CASE WHEN g %% 2 = 0 THEN localtimestamp - interval '2 days' ELSE NULL END,
		       CASE WHEN g %% 2 = 0 THEN 'Succeeded' ELSE 'Scheduled' END
		  FROM generate_series(1, 20000) g;
		SELECT %[1]s.retention_register('cap', '%[1]s.published', 'ExpiresAt', '1 hour', 'StatusName',
		                                ARRAY['Succeeded', 'Failed'], 1000, 'parallel', '1 second');
		-- processed inbox records: 2000 past the default 7 days, 500 recent
		INSERT INTO %[1]s.message_processed (queue, id, key, payload, headers, attempts, created_at, processed_at)
		SELECT 'in', -g, 'k' || g, '{}', '{}', 1, now() - interval '30 days',
		       CASE WHEN g <= 2000 THEN now() - interval '10 days' ELSE now() - interval '1 hour' END
		  FROM generate_series(1, 2500) g;`, s))

	ms := make([]pgsweep.Message, messages)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: []byte(fmt.Sprintf(`{"n": %d}`, i))}
	}
	sent, err := c.SendBatch(ctx, "jobs", ms)
	if err != nil || len(sent) != messages {
		t.Fatalf("send: %d %v", len(sent), err)
	}
	// Workers that die holding claims: a one-second lease, never completed.
	dead, err := c.Claim(ctx, "jobs", "crashed-worker", crashed, time.Second)
	if err != nil || len(dead) != crashed {
		t.Fatalf("claim: %d %v", len(dead), err)
	}

	runCtx, stopRunners := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 5 {
		r := newRunner(t, db, fmt.Sprintf("runner-%d", i), Options{Interval: 20 * time.Millisecond, Jitter: 10 * time.Millisecond, Budget: 5 * time.Second})
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(runCtx) }()
	}
	cronErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn := pgtest.Conn(t, db.URL)
		for runCtx.Err() == nil {
			if _, err := conn.Exec(ctx, "CALL "+s+".maintain('pg_cron', '5 seconds')"); err != nil {
				cronErr <- err
				return
			}
			time.Sleep(50 * time.Millisecond) // time under test: pg_cron calls on an interval
		}
	}()

	// Recovery must hand back every crashed claim before any live worker runs.
	pgtest.Eventually(t, 60*time.Second, nonZero(t, db, "recovery of the crashed claims", "SELECT (count(*) = 0)::int FROM "+s+".message WHERE queue = 'jobs' AND owner IS NOT NULL"))

	// Live workers drain the queue; each records what its complete acted on.
	var mu sync.Mutex
	completed := map[int64]int{}
	workErr := make(chan error, 8)
	var workers sync.WaitGroup
	for i := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			owner := fmt.Sprintf("live-%d", i)
			for {
				ds, err := c.Claim(ctx, "jobs", owner, 50, 30*time.Second)
				if err != nil {
					workErr <- err
					return
				}
				if len(ds) == 0 {
					return
				}
				ids := make([]int64, len(ds))
				for j, d := range ds {
					ids[j] = d.ID
				}
				done, err := c.Complete(ctx, "jobs", ds[0].Token, ids)
				if err != nil {
					workErr <- err
					return
				}
				mu.Lock()
				for _, id := range done {
					completed[id]++
				}
				mu.Unlock()
			}
		}()
	}
	workers.Wait()
	close(workErr)
	for err := range workErr {
		t.Fatal(err)
	}

	pgtest.Eventually(t, 60*time.Second, nonZero(t, db, "retention of the CAP table and the processed inbox rows", "SELECT ((SELECT count(*) FROM "+s+".published WHERE \"StatusName\" = 'Succeeded') = 0 AND "+
		"(SELECT count(*) FROM "+s+".message_processed WHERE processed_at < now() - interval '7 days') = 0)::int"))
	// A runner stopped mid-pass closes its connection; the pg_cron-style
	// caller, still running, may close that pass first ("taken over") before
	// the stopping runner records "the runner stopped": both say the same
	// stop. Only passes closed after this moment may carry either.
	var stoppedAt time.Time
	if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&stoppedAt); err != nil {
		t.Fatal(err)
	}
	stopRunners()
	wg.Wait()
	select {
	case err := <-cronErr:
		t.Fatalf("pg_cron-style caller: %v", err)
	default:
	}

	// Every message completed exactly once; none dead, none left.
	if len(completed) != messages {
		t.Fatalf("%d distinct messages completed, want %d", len(completed), messages)
	}
	for _, id := range sent {
		if completed[id] != 1 {
			t.Fatalf("message %d completed %d times", id, completed[id])
		}
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".message"); n != 0 {
		t.Fatalf("%d messages left in the queue", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".message_dead"); n != 0 {
		t.Fatalf("%d messages dead-lettered; none used its last attempt", n)
	}
	// Recovery recorded each crashed claim exactly once as a lost lease.
	if n := db.Int(t, "SELECT coalesce(sum((counts ->> 'lost_leases')::int), 0) FROM "+s+".maintain_run WHERE part = 'recovery'"); n != crashed {
		t.Fatalf("recovery recorded %d lost leases, want exactly %d", n, crashed)
	}
	// Retention kept what must be kept.
	if n := db.Int(t, "SELECT count(*) FROM "+s+".published"); n != 10000 {
		t.Fatalf("%d CAP rows left, want the 10000 Scheduled ones", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".message_processed"); n != 500 {
		t.Fatalf("%d processed inbox rows left, want the 500 recent ones", n)
	}
	if n := pgtest.Overlaps(t, db.Pool, s, "maintain_run"); n != 0 {
		t.Fatalf("history: %d pairs of runs of one part overlapped", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintain_pass WHERE error IS NOT NULL AND error NOT LIKE '%the runner stopped during this pass%'"+
		" AND NOT (error LIKE '%its session ended before the pass did (taken over)%' AND finished_at >= '"+stoppedAt.UTC().Format(time.RFC3339Nano)+"')"); n != 0 {
		var e string
		_ = db.Pool.QueryRow(ctx, "SELECT error FROM "+s+".maintain_pass WHERE error IS NOT NULL LIMIT 1").Scan(&e)
		t.Fatalf("%d passes recorded errors, e.g. %s", n, e)
	}
}
