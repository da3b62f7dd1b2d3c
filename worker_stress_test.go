package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// 100,000 inbox messages, 32 workers each on connections of its own, random
// handler failures (retried after a 20-100ms backoff, so parked and promoted
// again by claims), poison messages that always fail, workers that crash
// (stop renewing, never complete or release anything: CrashWorker) and
// workers that restart gracefully (a deploy: they release what they claimed
// but did not start); a new incarnation with a new owner takes the slot. A
// maintenance loop calls queue_recover. Proven from the data:
//   - every message ends in exactly one terminal state: processed (completed
//     once) or dead, nothing left live;
//   - no message was ever held by two live leases: a trigger logs every lease
//     grant, renewal and release; each grant starts at or after the previous
//     holder's last lease expiry unless that holder gave it up (fail,
//     recovery, or release, which also takes the attempt back);
//   - attempts are counted right: the final attempts equal the grants logged,
//     grants number 1, 2, 3… and each handler call matches exactly one grant.
func TestWorkerStress(t *testing.T) {
	pgtest.SkipIfShort(t, "stress test: 100k messages")
	const (
		messages    = 100_000
		slots       = 32
		maxAttempts = 4
		lease       = time.Second
		failRate    = 0.05
		poisonEvery = 500 // every 500th message always fails: it must end dead
		crashRate   = 1.0 / 4000
		restartRate = 1.0 / 4000
	)
	ctx, db, c := pgtest.Start(t, 4)
	s := db.Q()
	if err := c.QueueCreate(ctx, "stress", pgsweep.Inbox, maxAttempts); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueConfigure(ctx, "stress", map[string]any{"backoff_base": "20 milliseconds", "backoff_max": "100 milliseconds"}); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		CREATE UNLOGGED TABLE %[1]s.grant_log (seq bigserial PRIMARY KEY, id bigint, owner text, attempt int,
		                                      visible_at timestamptz, status text, parked boolean);
		CREATE FUNCTION %[1]s.grant_log_row() RETURNS trigger LANGUAGE plpgsql
		SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ -- the verbs may run as a role without rights on the log
		BEGIN
			INSERT INTO %[1]s.grant_log (id, owner, attempt, visible_at, status, parked)
			VALUES (NEW.id, NEW.owner, NEW.attempt, NEW.visible_at, NEW.status, NEW.parked_until IS NOT NULL);
			RETURN NEW;
		END $$;
		CREATE TRIGGER grant_log AFTER UPDATE ON %[1]s.message
			FOR EACH ROW EXECUTE FUNCTION %[1]s.grant_log_row();`, s))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < messages; i += 10000 {
		ms := make([]pgsweep.Message, 10000)
		for j := range ms {
			n := i + j
			ms[j] = pgsweep.Message{Key: fmt.Sprintf("m%d", n),
				Payload: json.RawMessage(fmt.Sprintf(`{"n":%d,"poison":%v}`, n, n%poisonEvery == 0))}
		}
		if _, err := c.SendBatch(ctx, "stress", ms); err != nil {
			t.Fatal(err)
		}
	}

	type call struct {
		id      int64
		owner   string
		attempt int
	}
	var (
		mu                sync.Mutex
		calls             []call
		crashedOwners     = map[string]bool{}
		cnt               pgtest.Counts
		crashes, restarts atomic.Int64
	)
	fleet := pgtest.StartFleet(ctx, slots, 99, func(in *pgtest.Incarnation) error {
		pool, err := pgtest.Pool(ctx, db.URL, 1) // claim, renew, complete and fail share one connection
		if err != nil {
			return err
		}
		defer pool.Close()
		wctx, restart := context.WithCancel(in.Ctx)
		defer restart()
		var crashed, restarting atomic.Bool
		owner := in.Owner
		var w *pgsweep.Worker
		w, err = pgsweep.NewWorker(pool, func(hctx context.Context, d *pgsweep.Delivery) error {
			mu.Lock()
			calls = append(calls, call{d.ID, owner, d.Attempt})
			mu.Unlock()
			crashNow, failNow, restartNow := in.Float64() < crashRate, in.Float64() < failRate, in.Float64() < restartRate
			if restartNow && !restarting.Swap(true) {
				restarts.Add(1)
				restart() // graceful: this handler and the running ones finish
			}
			if crashNow || crashed.Load() {
				// Crash: this worker stops; the handler never returns
				// before the worker is gone, so nothing is completed.
				if !crashed.Swap(true) {
					crashes.Add(1)
					mu.Lock()
					crashedOwners[owner] = true
					mu.Unlock()
					pgsweep.CrashWorker(w)
				}
				<-hctx.Done()
				return errors.New("crashed")
			}
			var p struct{ Poison bool }
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				return err
			}
			if p.Poison {
				return errors.New("poison")
			}
			if failNow {
				return errors.New("random failure")
			}
			return nil
		}, pgsweep.WorkerOptions{
			Schema: db.Schema, Queue: "stress", Owner: owner, Batch: 50, Concurrency: 4,
			Lease: lease, PollInterval: 100 * time.Millisecond, ShutdownTimeout: 30 * time.Second,
			DisableNotify: in.Slot%2 == 0, Hooks: cnt.Hooks(), Logger: quietLog,
		})
		if err != nil {
			return err
		}
		return w.Run(wctx)
	})
	defer fleet.Stop()
	// Maintenance: recovery dead-letters rows whose lease expired on their
	// last attempt (claim never hands those out again).
	recovered := 0
	pgtest.Eventually(t, 3*time.Minute, func() error { // liveness only: a drain takes ~40 s here
		r, err := c.QueueRecover(ctx, "stress", 1000)
		if err != nil {
			t.Fatal(err)
		}
		recovered += r.Recovered + r.DeadLettered
		if n := count(t, db, "message", "true"); n != 0 {
			return fmt.Errorf("not drained: %d live rows left", n)
		}
		return nil
	})
	if err := fleet.Stop(); err != nil {
		t.Fatal(err)
	}

	// Exactly one terminal state each.
	processed := count(t, db, "message_processed", "queue = 'stress'")
	deadRows := count(t, db, "message_dead", "queue = 'stress'")
	both := count(t, db, "message_processed p", "EXISTS (SELECT 1 FROM "+s+".message_dead d WHERE d.queue = p.queue AND d.id = p.id)")
	if processed+deadRows != messages || both != 0 {
		t.Fatalf("%d processed + %d dead (%d in both) != %d messages", processed, deadRows, both, messages)
	}
	if int(cnt.Completed.Load()) != processed {
		t.Fatalf("workers completed %d, %d processed rows: a completion was counted twice or lost", cnt.Completed.Load(), processed)
	}
	if poison := messages / poisonEvery; count(t, db, "message_dead", "(payload->>'poison')::boolean") != poison ||
		count(t, db, "message_dead", "attempts <> "+fmt.Sprint(maxAttempts)) != 0 {
		t.Fatalf("every poison message (%d) must be dead after exactly %d attempts", poison, maxAttempts)
	}

	// Leases from the database's record.
	type tenure struct {
		owner    string
		attempt  int
		expires  time.Time
		released bool
	}
	last := map[int64]*tenure{}
	grants := map[[2]int64]string{} // (id, attempt) -> owner
	rows, err := db.Pool.Query(ctx, "SELECT id, coalesce(owner, ''), attempt, visible_at, status FROM "+s+".grant_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	nlog, takeovers, releases := 0, 0, 0
	for rows.Next() {
		var id int64
		var owner, status string
		var attempt int
		var vis time.Time
		if err := rows.Scan(&id, &owner, &attempt, &vis, &status); err != nil {
			t.Fatal(err)
		}
		nlog++
		prev := last[id]
		prevAttempt := 0
		if prev != nil {
			prevAttempt = prev.attempt
		}
		switch {
		case status == "processing" && attempt != prevAttempt: // a grant
			if attempt != prevAttempt+1 {
				t.Fatalf("message %d: grant of attempt %d after attempt %d", id, attempt, prevAttempt)
			}
			start := vis.Add(-lease)
			if prev != nil && !prev.released {
				if start.Before(prev.expires) {
					t.Fatalf("message %d granted to %s at %v while %s held it until %v", id, owner, start, prev.owner, prev.expires)
				}
				takeovers++
			}
			last[id] = &tenure{owner: owner, attempt: attempt, expires: vis}
			grants[[2]int64{id, int64(attempt)}] = owner
		case status == "processing": // a renewal by the holder
			if prev == nil || prev.owner != owner || prev.released {
				t.Fatalf("message %d renewed by %s, holder %+v", id, owner, prev)
			}
			prev.expires = vis
		case owner == "" && prev != nil && attempt == prevAttempt-1: // release: the grant is undone
			if prev.released {
				t.Fatalf("message %d released twice", id)
			}
			delete(grants, [2]int64{id, int64(prevAttempt)})
			prev.released = true
			prev.attempt = attempt
			releases++
		case owner == "": // given up by fail or recovery
			if prev == nil {
				t.Fatalf("message %d released before any grant", id)
			}
			prev.released = true
		default:
			t.Fatalf("message %d: unexpected log row %s %s %d", id, owner, status, attempt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Attempts: final count = grants logged.
	arows, err := db.Pool.Query(ctx, "SELECT id, attempts FROM "+s+".message_processed UNION ALL SELECT id, attempts FROM "+s+".message_dead")
	if err != nil {
		t.Fatal(err)
	}
	for arows.Next() {
		var id int64
		var attempts int
		if err := arows.Scan(&id, &attempts); err != nil {
			t.Fatal(err)
		}
		if tn := last[id]; tn == nil || tn.attempt != attempts {
			t.Fatalf("message %d ended with %d attempts, log says %+v", id, attempts, tn)
		}
	}
	if err := arows.Err(); err != nil {
		t.Fatal(err)
	}
	// Each handler call matches one grant, owner and attempt.
	seen := map[[2]int64]bool{}
	for _, cl := range calls {
		k := [2]int64{cl.id, int64(cl.attempt)}
		if seen[k] {
			t.Fatalf("message %d attempt %d handed to a handler twice", cl.id, cl.attempt)
		}
		seen[k] = true
		if grants[k] != cl.owner {
			t.Fatalf("message %d attempt %d ran under %s, the database granted it to %q", cl.id, cl.attempt, cl.owner, grants[k])
		}
	}
	// A grant no handler saw was claimed by a worker that then crashed with
	// the message still queued for its handlers, or whose lease was lost
	// while the message waited for a handler (the Worker does not start what
	// it no longer holds): then a later grant took it over, or recovery
	// dead-lettered it because that was its last attempt.
	expiredDead := map[int64]bool{}
	drows, err := db.Pool.Query(ctx, "SELECT id FROM "+s+".message_dead WHERE last_error LIKE 'lease of % expired on the last attempt'")
	if err != nil {
		t.Fatal(err)
	}
	for drows.Next() {
		var id int64
		if err := drows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		expiredDead[id] = true
	}
	if err := drows.Err(); err != nil {
		t.Fatal(err)
	}
	skipped := 0
	for k, owner := range grants {
		if seen[k] || crashedOwners[owner] {
			continue
		}
		if int(k[1]) >= last[k[0]].attempt && !expiredDead[k[0]] {
			t.Fatalf("message %d attempt %d granted to %s, which never ran it, did not crash, and nobody took it over", k[0], k[1], owner)
		}
		skipped++
	}
	// Retries wait out a backoff of 20-100ms, so they are parked and come
	// back through the claims' promotion: that path ran under all 32 workers.
	if n := count(t, db, "grant_log", "parked"); n == 0 {
		t.Fatal("no retry was parked: the promotion path was not exercised")
	}
	if n := count(t, db, "message", "true"); n != 0 {
		t.Fatalf("%d rows left (parked or not)", n)
	}
	if int64(releases) != cnt.Released.Load() {
		t.Fatalf("the log shows %d releases, the workers reported %d", releases, cnt.Released.Load())
	}
	if crashes.Load() == 0 || takeovers == 0 || cnt.Failed.Load() == 0 || restarts.Load() == 0 || releases == 0 {
		t.Fatalf("crashes %d, takeovers %d, retries %d, restarts %d, releases %d: the test exercised too little",
			crashes.Load(), takeovers, cnt.Failed.Load(), restarts.Load(), releases)
	}
	t.Logf("%d processed, %d dead; %d grants, %d log rows, %d crashes, %d restarts, %d released, %d takeovers after expiry, %d retries, %d leases lost (%d before their handler started), %d rows recovered",
		processed, deadRows, len(grants), nlog, crashes.Load(), restarts.Load(), releases, takeovers, cnt.Failed.Load(), cnt.Lost.Load(), skipped, recovered)
}
