//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// workerCalls counts, on node w, the top-level calls of the install's
// function fn that pg_stat_statements recorded: the calls the coordinator
// delegated to w.
func workerCalls(t *testing.T, w Node, schema, fn string) int64 {
	t.Helper()
	conn := pgtest.Conn(t, w.URL)
	var n int64
	err := conn.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements
		WHERE toplevel AND (query LIKE $1 OR query LIKE $2)`,
		"%"+schema+"."+fn+"(%", `%"`+schema+`".`+fn+"(%").Scan(&n)
	if err != nil {
		t.Fatalf("pg_stat_statements on %s (scripts/citus.sh preloads and creates it on every node): %v", w.Name, err)
	}
	return n
}

func resetStatements(t *testing.T, nodes ...Node) {
	t.Helper()
	for _, w := range nodes {
		conn := pgtest.Conn(t, w.URL)
		if _, err := conn.Exec(context.Background(), "SELECT pg_stat_statements_reset()"); err != nil {
			t.Fatalf("pg_stat_statements on %s: %v", w.Name, err)
		}
	}
}

// Two queues, one on each worker, 16 claimers on each at once, each on its
// own connection to the coordinator, claiming 10 at a time and completing
// what they claimed until their queue is empty. Exact outcome: every message
// is claimed once and completed once, by a claimer of its own queue, and
// both queues end empty. Every claim ran on its queue's worker: the
// workers' pg_stat_statements count exactly the claim calls made for the
// queue each holds (and none for the other), and a traced claim shows the
// call itself going to that worker.
func TestCitusClaimsOnTwoWorkers(t *testing.T) {
	const perQueue, claimers, batch = 3000, 16, 10
	in := Shared(t)
	ctx := context.Background()
	queues := in.QueuePerWorker(t, "claims")
	sent := map[string]map[int64]bool{}
	for _, q := range queues {
		if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
			t.Fatal(err)
		}
		sent[q] = map[int64]bool{}
		for i := 0; i < perQueue; i += 1000 {
			ms := make([]pgsweep.Message, 1000)
			for j := range ms {
				ms[j] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"q":%q,"n":%d}`, q, i+j))}
			}
			ids, err := in.Client.SendBatch(ctx, q, ms)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				sent[q][id] = true
			}
		}
	}
	// One traced claim per queue: the call goes, whole, to the queue's worker.
	tr := in.NewTraced(t)
	tc, _ := pgsweep.NewClient(tr.Conn, &pgsweep.ClientOptions{Schema: in.Schema})
	for i, q := range queues {
		tr.Take()
		ds, err := tc.Claim(ctx, q, "tracer", 1, time.Minute)
		if err != nil || len(ds) != 1 {
			t.Fatalf("traced claim on %s: %v %v", q, ds, err)
		}
		if cmds := tr.Take(); !pushed(cmds, in.Schema, "claim", in.Workers[i].Port) {
			t.Fatalf("the claim of %s was not pushed down to %s; remote commands:%s", q, in.Workers[i].Name, describeCmds(cmds))
		}
		if _, err := tc.Release(ctx, q, ds[0].Token, []int64{ds[0].ID}); err != nil {
			t.Fatal(err)
		}
	}

	resetStatements(t, in.Workers...)
	type claimed struct {
		queue, claimer string
		id             int64
	}
	var (
		mu        sync.Mutex
		got       []claimed
		completed = map[string]*atomic.Int64{}
		calls     = map[string]*atomic.Int64{}
		wg        sync.WaitGroup
		errs      = make(chan error, len(queues)*claimers)
		start     = make(chan struct{})
	)
	for _, q := range queues {
		completed[q], calls[q] = &atomic.Int64{}, &atomic.Int64{}
		for k := range claimers {
			conn := pgtest.Conn(t, in.URL)
			c, _ := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: in.Schema})
			name := fmt.Sprintf("%s-%02d", q, k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					calls[q].Add(1)
					ds, err := c.Claim(ctx, q, name, batch, time.Minute)
					if err != nil {
						errs <- fmt.Errorf("%s: claim: %w", name, err)
						return
					}
					if len(ds) == 0 {
						return
					}
					ids := make([]int64, len(ds))
					for i, d := range ds {
						ids[i] = d.ID
					}
					mu.Lock()
					for _, id := range ids {
						got = append(got, claimed{q, name, id})
					}
					mu.Unlock()
					done, err := c.Complete(ctx, q, ds[0].Token, ids)
					if err != nil {
						errs <- fmt.Errorf("%s: complete: %w", name, err)
						return
					}
					if len(done) != len(ids) {
						errs <- fmt.Errorf("%s: completed %d of the %d it claimed", name, len(done), len(ids))
						return
					}
					completed[q].Add(int64(len(done)))
				}
			}()
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(began)
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	seen := map[int64]claimed{}
	byClaimer := map[string]int{}
	for _, c := range got {
		if prev, dup := seen[c.id]; dup {
			t.Errorf("message %d claimed twice: by %s and by %s", c.id, prev.claimer, c.claimer)
		}
		seen[c.id] = c
		byClaimer[c.claimer]++
		if !sent[c.queue][c.id] {
			t.Errorf("claimer %s of %s got message %d, which was not sent to its queue", c.claimer, c.queue, c.id)
		}
	}
	for _, q := range queues {
		if n := completed[q].Load(); n != perQueue {
			t.Errorf("%s: %d of %d messages completed", q, n, perQueue)
		}
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1", q); n != 0 {
			t.Errorf("%s: %d messages left", q, n)
		}
	}
	working := 0
	for _, n := range byClaimer {
		if n > 0 {
			working++
		}
	}
	if working < claimers {
		t.Errorf("only %d of %d claimers got messages: the claims hardly overlapped", working, 2*claimers)
	}

	// Push-down, counted on the workers.
	for i, q := range queues {
		w := in.Workers[i]
		on := workerCalls(t, w, in.Schema, "claim")
		if on != calls[q].Load() {
			t.Errorf("%s holds %s: it ran %d claim calls, and %d were made for %s", w.Name, q, on, calls[q].Load(), q)
		}
	}
	per := make([]string, 0, len(queues))
	for i, q := range queues {
		per = append(per, fmt.Sprintf("%s on %s: %d claim calls", q, in.Workers[i].Name, calls[q].Load()))
	}
	sort.Strings(per)
	t.Logf("%d messages in %v by %d claimers (%d working): %s", 2*perQueue, elapsed.Round(time.Millisecond), 2*claimers, working, strings.Join(per, "; "))
}

// Every delegated verb, by name, ran on the queue's worker: a compact proof
// over the calls a Worker makes, from the workers' own statistics.
func TestCitusWorkerVerbsRunOnTheQueuesWorker(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	queues := in.QueuePerWorker(t, "wv")
	for _, q := range queues {
		if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
			t.Fatal(err)
		}
	}
	resetStatements(t, in.Workers...)
	for _, q := range queues {
		for i := range 5 {
			if _, _, err := in.Client.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		ds, err := in.Client.Claim(ctx, q, "wv", 5, time.Minute)
		if err != nil || len(ds) != 5 {
			t.Fatalf("claim %s: %d %v", q, len(ds), err)
		}
		tok := ds[0].Token
		if _, err := in.Client.Renew(ctx, q, tok, []int64{ds[0].ID}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Client.Release(ctx, q, tok, []int64{ds[1].ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Client.Complete(ctx, q, tok, []int64{ds[0].ID, ds[2].ID, ds[3].ID, ds[4].ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Client.QueueRecover(ctx, q, 100); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range in.Workers {
		for _, fn := range []string{"send", "claim", "renew", "release", "complete", "queue_recover"} {
			want := int64(1)
			if fn == "send" {
				want = 5
			}
			if n := workerCalls(t, w, in.Schema, fn); n != want {
				t.Errorf("%s (holds %s): %d %s calls, want %d", w.Name, queues[i], n, fn, want)
			}
		}
	}
}
