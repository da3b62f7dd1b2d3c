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

func sendN(t *testing.T, c *pgsweep.Client, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 10000 {
		ms := make([]pgsweep.Message, min(10000, n-i))
		for j := range ms {
			ms[j].Payload = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i+j))
		}
		if _, err := c.SendBatch(ctx, queue, ms); err != nil {
			t.Fatal(err)
		}
	}
}

// The seed's example and more: claimers started together, each on its own
// connection, get disjoint rows, and together exactly the rows there were.
func TestClaimDisjoint(t *testing.T) {
	for _, tc := range []struct{ claimers, batch, rows int }{{2, 10, 20}, {2, 10, 15}, {32, 10, 250}} {
		t.Run(fmt.Sprintf("%dx%d_of_%d", tc.claimers, tc.batch, tc.rows), func(t *testing.T) {
			db := pgtest.NewQueue(t, 2, "q", pgsweep.Outbox, 3)
			ctx := context.Background()
			sendN(t, db.Client, "q", tc.rows)
			clients := make([]*pgsweep.Client, tc.claimers)
			for i := range clients {
				c, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = c
			}
			start := make(chan struct{})
			got := make([][]pgsweep.Delivery, tc.claimers)
			errs := make([]error, tc.claimers)
			var wg sync.WaitGroup
			for i, c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					got[i], errs[i] = c.Claim(ctx, "q", fmt.Sprintf("w%d", i), tc.batch, time.Minute)
				}()
			}
			close(start)
			wg.Wait()
			seen := map[int64]int{}
			total := 0
			for i := range got {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if len(got[i]) > tc.batch {
					t.Fatalf("claimer %d got %d rows, batch %d", i, len(got[i]), tc.batch)
				}
				for _, d := range got[i] {
					if j, dup := seen[d.ID]; dup {
						t.Fatalf("message %d claimed by w%d and w%d", d.ID, j, i)
					}
					seen[d.ID] = i
				}
				total += len(got[i])
			}
			if want := min(tc.rows, tc.claimers*tc.batch); total != want {
				t.Fatalf("claimed %d rows in total, want %d", total, want)
			}
			if n := count(t, db, "message", "status = 'processing'"); n != total {
				t.Fatalf("%d rows processing, %d claimed", n, total)
			}
		})
	}
}

// Inbox de-duplication holds across live, processed and dead rows while many
// senders race with the same keys, completers move rows to message_processed
// and failers (one attempt per message) move rows to message_dead under them:
// every key is accepted exactly once.
func TestInboxDedupConcurrent(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "in", pgsweep.Inbox, 1)
	ctx := context.Background()
	const keys, senders, completers = 300, 12, 4 // odd completers fail instead
	accepted := make([]int, keys)
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var cwg sync.WaitGroup
	completed := make([]int, completers)
	for i := range completers {
		c, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			owner := fmt.Sprintf("c%d", i)
			for {
				ds, err := c.Claim(ctx, "in", owner, 5, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) > 0 && i%2 == 1 {
					res, err := c.Fail(ctx, "in", tok(ds), ids(ds), "refused", 0)
					if err != nil {
						t.Error(err)
						return
					}
					completed[i] += len(res)
					continue
				}
				if len(ds) > 0 {
					done, err := c.Complete(ctx, "in", tok(ds), ids(ds))
					if err != nil {
						t.Error(err)
						return
					}
					completed[i] += len(done)
					continue
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	for s := range senders {
		c, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			order := rng.Perm(keys)
			for _, k := range order {
				_, ok, err := c.Send(ctx, "in", pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"from":%d}`, s)), Key: fmt.Sprintf("key-%d", k)})
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					accepted[k]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	cwg.Wait()
	for k, n := range accepted {
		if n != 1 {
			t.Fatalf("key-%d accepted %d times", k, n)
		}
	}
	live := count(t, db, "message", "true")
	processed := count(t, db, "message_processed", "true")
	dead := count(t, db, "message_dead", "true")
	if live+processed+dead != keys || count(t, db, "message_processed", "key IS NOT NULL") != processed ||
		count(t, db, "message_dead", "key IS NOT NULL") != dead {
		t.Fatalf("%d live + %d processed + %d dead rows, want %d keys", live, processed, dead, keys)
	}
	var completes, fails int
	for i, n := range completed {
		if i%2 == 1 {
			fails += n
		} else {
			completes += n
		}
	}
	if completes != processed || processed == 0 {
		t.Fatalf("completers completed %d, %d processed rows (the race with complete was never exercised if 0)", completes, processed)
	}
	if fails != dead || dead == 0 {
		t.Fatalf("failers failed %d, %d dead rows (the race with fail was never exercised if 0)", fails, dead)
	}
	t.Logf("%d keys, %d sends, %d completed and %d dead-lettered while senders raced", keys, keys*senders, completes, fails)
}

// Parked rows coming due under many claimers at once (the promotion step's
// SKIP LOCKED path): 3,000 messages scheduled a moment ahead, 24 claimers on
// their own connections claiming and completing in a loop. Every message is
// claimed exactly once, none is left parked or behind, and no claimer waits
// for another (lock_timeout would fail it).
func TestParkedRowsComeDueUnderConcurrentClaims(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	const messages, claimers, batch = 3000, 24, 20
	if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(500 * time.Millisecond)
	ms := make([]pgsweep.Message, messages)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i)), DeliverAt: due.Add(time.Duration(i%10) * 10 * time.Millisecond)}
	}
	if _, err := db.Client.SendBatch(ctx, "q", ms); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "message", "parked_until IS NOT NULL"); n != messages {
		t.Fatalf("%d of %d scheduled messages parked", n, messages)
	}
	var mu sync.Mutex
	seen := map[int64]string{}
	errs := make(chan error, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		conn := pgtest.Conn(t, db.URL)
		if _, err := conn.Exec(ctx, "SET lock_timeout = '2s'"); err != nil {
			t.Fatal(err)
		}
		c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		owner := fmt.Sprintf("w%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(60 * time.Second) // liveness only
			for time.Now().Before(deadline) {
				mu.Lock()
				done := len(seen) == messages
				mu.Unlock()
				if done {
					return
				}
				ds, err := c.Claim(ctx, "q", owner, batch, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, d := range ds {
					if prev, dup := seen[d.ID]; dup {
						mu.Unlock()
						errs <- fmt.Errorf("message %d claimed by %s and %s", d.ID, prev, owner)
						return
					}
					seen[d.ID] = owner
				}
				mu.Unlock()
				if len(ds) > 0 {
					if _, err := c.Complete(ctx, "q", tok(ds), ids(ds)); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != messages || count(t, db, "message", "true") != 0 {
		t.Fatalf("%d of %d messages claimed, %d rows left", len(seen), messages, count(t, db, "message", "true"))
	}
}
