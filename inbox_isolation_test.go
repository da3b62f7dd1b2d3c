package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Inbox de-duplication when the sender's transaction is REPEATABLE READ or
// SERIALIZABLE (send.sql, steps 1b, 2 and 3b): every statement reads the
// snapshot the transaction took first, so a processed row that a complete
// committed after it is invisible, and the live row it replaced is gone. A
// send of that key must return NULL (a duplicate) or fail with 40001
// (serialization_failure, which the caller retries and which then sees the
// key), never create a second message.
//
// The interleavings, as a pg_isolation_regress spec (each session its own
// connection; b runs in autocommit like a worker):
//
//	setup     { SELECT queue_create('in', 'inbox', 3); }
//	session a
//	step a_begin   { BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1; }  -- takes the snapshot
//	step a_send    { SELECT send('in', '{}', '{}', 'k'); }
//	step a_commit  { COMMIT; }
//	session b
//	step b_send     { SELECT send('in', '{}', '{}', 'k'); }
//	step b_claim    { SELECT token FROM claim('in', 'w', 1); }
//	step b_complete { SELECT complete('in', :token, :ids); }
//	step b_fail     { SELECT fail('in', :token, :ids, 'boom'); }   -- with max_attempts 1: a dead letter
//	step b_begin    { BEGIN; }
//	step b_commit   { COMMIT; }
//
//	# live row visible to a's snapshot, completed since: a sees it (1b) → NULL
//	permutation b_send a_begin b_claim b_complete a_send a_commit
//	# sent and completed after a's snapshot: a sees neither row; the probe
//	# in message_processed meets the invisible processed row (3b) → 40001
//	permutation a_begin b_send b_claim b_complete a_send a_commit
//	# the complete is in flight when a sends: a's insert waits for b's
//	# transaction (unique check), then the probe → 40001
//	permutation a_begin b_send b_claim b_begin b_complete a_send(*) b_commit a_commit
//	# sent after a's snapshot, not yet completed: the insert meets the
//	# invisible live row (PostgreSQL's own check, step 2) → 40001
//	permutation a_begin b_send a_send a_commit
//	# live row visible to a's snapshot, dead-lettered since (1b) → NULL
//	permutation b_send a_begin b_claim b_fail a_send a_commit
//
// Each runs under REPEATABLE READ and under SERIALIZABLE, and each ends with
// exactly one record of the key (live, processed or dead).
func TestInboxSendIsolation(t *testing.T) {
	ctx, db, worker := pgtest.Start(t, 4)
	a := pgtest.Conn(t, db.URL) // the sender
	b := pgtest.Conn(t, db.URL) // b_begin … b_commit of the in-flight complete
	var aPID uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&aPID); err != nil {
		t.Fatal(err)
	}

	const (
		null = "NULL"
		ser  = "40001"
	)
	type step func(t *testing.T, q string)
	send := func(t *testing.T, q string) {
		t.Helper()
		if _, ok, err := worker.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "k"}); err != nil || !ok {
			t.Fatalf("b_send: ok %v, %v", ok, err)
		}
	}
	claim := func(t *testing.T, q string) []pgsweep.Delivery {
		t.Helper()
		ds, err := worker.Claim(ctx, q, "w", 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("b_claim: %d rows, %v", len(ds), err)
		}
		return ds
	}
	claimComplete := func(t *testing.T, q string) {
		t.Helper()
		ds := claim(t, q)
		if done, err := worker.Complete(ctx, q, tok(ds), ids(ds)); err != nil || len(done) != 1 {
			t.Fatalf("b_complete: %v, %v", done, err)
		}
	}
	claimFail := func(t *testing.T, q string) {
		t.Helper()
		ds := claim(t, q)
		if res, err := worker.Fail(ctx, q, tok(ds), ids(ds), "boom", 0); err != nil || len(res) != 1 || !res[0].Dead {
			t.Fatalf("b_fail: %v, %v", res, err)
		}
	}

	for l, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for i, tc := range []struct {
			name        string
			maxAttempts int
			before      step // between setup and a_begin
			after       step // between a_begin and a_send
			inFlight    bool // b completes in an open transaction while a sends, then commits
			want        string
			live        int // the key's live rows at the end (the rest: processed or dead)
		}{
			{name: "visible_live_row_completed_since", maxAttempts: 3, before: send, after: claimComplete, want: null},
			{name: "sent_and_completed_after_snapshot", maxAttempts: 3, after: func(t *testing.T, q string) { send(t, q); claimComplete(t, q) }, want: ser},
			{name: "complete_in_flight", maxAttempts: 3, after: send, inFlight: true, want: ser},
			{name: "sent_after_snapshot_still_live", maxAttempts: 3, after: send, want: ser, live: 1},
			{name: "visible_live_row_dead_lettered_since", maxAttempts: 1, before: send, after: claimFail, want: null},
			// 0.23: dead letters keep their inbox key unique, so the probe sees one its snapshot cannot
			{name: "sent_and_dead_lettered_after_snapshot", maxAttempts: 1, after: func(t *testing.T, q string) { send(t, q); claimFail(t, q) }, want: ser},
		} {
			t.Run(fmt.Sprintf("%s/%s", iso, tc.name), func(t *testing.T) {
				q := fmt.Sprintf("in_%d_%d", l, i)
				if err := worker.QueueCreate(ctx, q, pgsweep.Inbox, tc.maxAttempts); err != nil {
					t.Fatal(err)
				}
				if tc.before != nil {
					tc.before(t, q)
				}
				tx, err := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // a_begin: the snapshot
					t.Fatal(err)
				}
				var commitB func()
				if tc.inFlight {
					tc.after(t, q)
					ds := claim(t, q)
					btx, err := b.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer btx.Rollback(ctx)
					if done, err := worker.WithDB(btx).Complete(ctx, q, tok(ds), ids(ds)); err != nil || len(done) != 1 {
						t.Fatalf("b_complete: %v, %v", done, err)
					}
					commitB = func() {
						if err := btx.Commit(ctx); err != nil {
							t.Error(err)
						}
					}
				} else {
					tc.after(t, q)
				}

				type result struct {
					ok  bool
					err error
				}
				res := make(chan result, 1)
				go func() {
					_, ok, err := worker.WithDB(tx).Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{"again":true}`), Key: "k"})
					res <- result{ok, err}
				}()
				if commitB != nil {
					waitForLock(t, db, aPID)
					select {
					case r := <-res:
						t.Fatalf("a_send returned before b committed: %+v", r)
					default:
					}
					commitB()
				}
				var r result
				select {
				case r = <-res:
				case <-time.After(30 * time.Second):
					t.Fatal("a_send did not return")
				}
				got := null
				switch {
				case r.err != nil:
					got = sqlState(r.err)
					if got != ser {
						t.Fatalf("a_send: %v", r.err)
					}
				case r.ok:
					got = "a new message"
				}
				if got != tc.want {
					t.Fatalf("a_send: got %s, want %s", got, tc.want)
				}
				if r.err == nil {
					if err := tx.Commit(ctx); err != nil {
						t.Fatalf("a_commit: %v", err)
					}
				}
				where := fmt.Sprintf("queue = '%s' AND key = 'k'", q)
				live, processed, dead := count(t, db, "message", where), count(t, db, "message_processed", where), count(t, db, "message_dead", where)
				if live != tc.live || live+processed+dead != 1 {
					t.Fatalf("key k: %d live, %d processed, %d dead rows; want %d live and one record in all", live, processed, dead, tc.live)
				}
			})
		}
	}
}

// Senders in REPEATABLE READ and SERIALIZABLE transactions race the workers
// that complete the key's message: each sender takes its snapshot, waits a
// moment (the window in which a complete commits) and sends a key; a 40001
// is retried in a new transaction, as an application does. Every key is
// accepted exactly once and ends as exactly one processed row.
func TestInboxSendIsolationRace(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "race", pgsweep.Inbox, 3)
	ctx := context.Background()
	const keys, senders, completers = 60, 6, 2
	accepted := make([]atomic.Int32, keys)
	var nulls, retries atomic.Int32
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	for i := range completers {
		c, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				ds, err := c.Claim(ctx, "race", fmt.Sprintf("c%d", i), 5, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) > 0 {
					if _, err := c.Complete(ctx, "race", tok(ds), ids(ds)); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for s := range senders {
		conn := pgtest.Conn(t, db.URL)
		c := db.Client.WithDB(conn)
		iso := pgx.RepeatableRead
		if s%2 == 1 {
			iso = pgx.Serializable
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 11))
			for _, k := range rng.Perm(keys) {
				for {
					ok, err := sendInTx(ctx, conn, c, iso, fmt.Sprintf("key-%d", k), time.Duration(rng.IntN(3))*time.Millisecond)
					if sqlState(err) == "40001" {
						retries.Add(1)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						accepted[k].Add(1)
					} else {
						nulls.Add(1)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	pgtest.Eventually(t, time.Minute, pgtest.Until("the completers to drain the queue", func() bool {
		return count(t, db, "message", "true") == 0
	}))
	close(stop)
	cwg.Wait()
	for k := range accepted {
		if n := accepted[k].Load(); n != 1 {
			t.Errorf("key-%d accepted %d times", k, n)
		}
		if n := count(t, db, "message_processed", fmt.Sprintf("key = 'key-%d'", k)); n != 1 {
			t.Errorf("key-%d: %d processed rows", k, n)
		}
	}
	if n := count(t, db, "message_dead", "true"); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	t.Logf("%d keys, %d senders: %d duplicates refused with NULL, %d serialization failures retried", keys, senders, nulls.Load(), retries.Load())
}

// sendInTx sends key in its own transaction at iso: the snapshot is taken
// first, then the sender waits pause, sends, and commits.
func sendInTx(ctx context.Context, conn *pgx.Conn, c *pgsweep.Client, iso pgx.TxIsoLevel, key string, pause time.Duration) (bool, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		return false, err
	}
	// The behaviour under test is timing: the snapshot is held open for
	// pause, so that the senders' transactions overlap.
	time.Sleep(pause)
	_, ok, err := c.WithDB(tx).Send(ctx, "race", pgsweep.Message{Payload: json.RawMessage(`{}`), Key: key})
	if err != nil {
		return false, err
	}
	return ok, tx.Commit(ctx)
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// waitForLock waits until backend pid waits for a lock (a row or
// transaction lock of another session).
func waitForLock(t *testing.T, db *pgtest.DB, pid uint32) {
	t.Helper()
	pgtest.Eventually(t, 30*time.Second, func() error {
		var waiting bool
		err := db.Pool.QueryRow(context.Background(),
			"SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if !waiting {
			return fmt.Errorf("backend %d never waited for a lock", pid)
		}
		return nil
	})
}
