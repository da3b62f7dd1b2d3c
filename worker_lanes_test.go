package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Ordered lanes under 32 Workers (each on a connection of its own), sent
// while they run, by senders that own a few lanes each (Send and SendBatch,
// mixed with unordered messages), with random handler failures (retried
// after a backoff), Workers that crash (CrashWorker: nothing flushed,
// completed, failed or released; a new incarnation takes the slot) and
// forced lease expiries (a handler holds its Worker's only connection, so
// no renewal gets through until the watchdog cancels it). Every handler call
// records its start and end in a table. Proven from that record:
//   - per lane, the final successful attempts of its messages started in
//     send order (the final attempt is the one message_processed counts);
//   - no two handler calls of one lane ever overlapped in time -- neither
//     two messages nor two attempts of one message;
//   - different lanes did run at the same time;
//   - every message was processed once (inbox: message_processed), nothing
//     is left in message or lane.
func TestWorkerLanesKeepOrderUnderCrashesAndExpiries(t *testing.T) {
	pgtest.SkipIfShort(t, "lane stress test: 32 workers")
	const (
		lanes     = 64
		perLane   = 20
		unordered = 200
		senders   = 8
		slots     = 32
		lease     = time.Second
		failRate  = 0.05
		crashRate = 1.0 / 250
		stallRate = 1.0 / 250
	)
	ctx, db, c := pgtest.Start(t, 12)
	s := db.Q()
	if err := c.QueueCreate(ctx, "lanes", pgsweep.Inbox, 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueConfigure(ctx, "lanes", map[string]any{"backoff_base": "10 milliseconds", "backoff_max": "50 milliseconds"}); err != nil {
		t.Fatal(err)
	}
	db.MustExec(t, "CREATE UNLOGGED TABLE "+s+`.handler_log (lane text, seq int, id bigint, attempt int, owner text,
		started timestamptz NOT NULL, ended timestamptz NOT NULL, ok boolean NOT NULL)`)

	var (
		crashes, stalls, failures atomic.Int64
		cnt                       pgtest.Counts
		logErr                    atomic.Value
	)
	hooks := cnt.Hooks()
	errc := make(chan error, senders)
	fleet := pgtest.StartFleet(ctx, slots, 7, func(in *pgtest.Incarnation) error {
		pool, err := pgtest.Pool(ctx, db.URL, 1) // claim, renew, complete and fail share one connection
		if err != nil {
			return err
		}
		defer pool.Close()
		var crashed atomic.Bool
		var w *pgsweep.Worker
		w, err = pgsweep.NewWorker(pool, func(hctx context.Context, d *pgsweep.Delivery) error {
			started := time.Now()
			var p struct {
				Lane string
				Seq  int
			}
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				return err
			}
			crash, stall, fail := in.Float64() < crashRate, in.Float64() < stallRate, in.Float64() < failRate
			work := time.Duration(in.IntN(3000)) * time.Microsecond
			var herr error
			switch {
			case crash || crashed.Load():
				// The process dies: nothing of this Worker is sent any more.
				if !crashed.Swap(true) {
					crashes.Add(1)
					pgsweep.CrashWorker(w)
				}
				<-hctx.Done()
				herr = errors.New("crashed")
			case stall:
				// The Worker's only connection is held: its renewals
				// cannot get through, its leases run out, and the
				// watchdog must cancel its handlers before they do.
				stalls.Add(1)
				if conn, err := pool.Acquire(hctx); err == nil {
					<-hctx.Done()
					conn.Release()
				}
				herr = hctx.Err()
				if herr == nil {
					herr = errors.New("stalled")
				}
			default:
				select {
				case <-time.After(work):
				case <-hctx.Done():
					herr = hctx.Err()
				}
				if herr == nil && fail {
					failures.Add(1)
					herr = errors.New("random failure")
				}
			}
			ended := time.Now()
			var lane any // unordered: NULL
			if p.Lane != "" {
				lane = p.Lane
			}
			if _, err := db.Pool.Exec(context.Background(), "INSERT INTO "+s+".handler_log VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
				lane, p.Seq, d.ID, d.Attempt, in.Owner, started, ended, herr == nil); err != nil {
				logErr.Store(err)
			}
			return herr
		}, pgsweep.WorkerOptions{
			Schema: db.Schema, Queue: "lanes", Owner: in.Owner, Batch: 8, Concurrency: 4,
			Lease: lease, PollInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
			DisableNotify: in.Slot%2 == 0, Hooks: hooks, Logger: quietLog,
		})
		if err != nil {
			return err
		}
		return w.Run(in.Ctx)
	})
	defer fleet.Stop()

	// Senders, while the Workers run: each owns lanes (sent in seq order,
	// so that a lane's order is its seq) and sends some unordered messages.
	var swg sync.WaitGroup
	for sender := range senders {
		swg.Add(1)
		go func() {
			defer swg.Done()
			rng := rand.New(rand.NewPCG(uint64(sender), 11))
			var mine []string
			for l := sender; l < lanes; l += senders {
				mine = append(mine, fmt.Sprintf("lane-%02d", l))
			}
			next := make([]int, len(mine))
			u := 0
			for {
				var ms []pgsweep.Message
				for range 1 + rng.IntN(6) {
					if u < unordered/senders && rng.IntN(5) == 0 {
						ms = append(ms, pgsweep.Message{Key: fmt.Sprintf("u-%d-%d", sender, u), Payload: json.RawMessage(`{"seq": -1}`)})
						u++
						continue
					}
					open := []int{}
					for i := range mine {
						if next[i] < perLane {
							open = append(open, i)
						}
					}
					if len(open) == 0 {
						break
					}
					i := open[rng.IntN(len(open))]
					ms = append(ms, pgsweep.Message{Key: fmt.Sprintf("%s-%d", mine[i], next[i]), Lane: mine[i],
						Payload: json.RawMessage(fmt.Sprintf(`{"lane": %q, "seq": %d}`, mine[i], next[i]))})
					next[i]++
				}
				if len(ms) == 0 {
					return
				}
				var err error
				if len(ms) == 1 {
					_, _, err = c.Send(ctx, "lanes", ms[0])
				} else {
					_, err = c.SendBatch(ctx, "lanes", ms)
				}
				if err != nil {
					errc <- err
					return
				}
				// Jitter, not a wait: the behaviour under test is timing,
				// sends spread across the workers' claims and expiries.
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			}
		}()
	}
	swg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	total := lanes*perLane + senders*(unordered/senders)
	pgtest.Eventually(t, 4*time.Minute, func() error { // liveness only
		if err := fleet.Err(); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "message_processed", "queue = 'lanes'"); n < total {
			return fmt.Errorf("not drained: %d of %d processed", n, total)
		}
		return nil
	})
	if err := fleet.Stop(); err != nil {
		t.Fatal(err)
	}
	if err, _ := logErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "message", "queue = 'lanes'") + count(t, db, "lane", "queue = 'lanes'"); n != 0 {
		t.Fatalf("%d messages or lanes left", n)
	}

	type call struct {
		seq, attempt     int
		id               int64
		owner            string
		started, ended   time.Time
		ok               bool
		processedAttempt int
	}
	rows, err := db.Pool.Query(ctx, `SELECT h.lane, h.seq, h.id, h.attempt, h.owner, h.started, h.ended, h.ok, p.attempts
		FROM `+s+`.handler_log h JOIN `+s+`.message_processed p ON p.queue = 'lanes' AND p.id = h.id
		WHERE h.lane IS NOT NULL ORDER BY h.started, h.ended`)
	if err != nil {
		t.Fatal(err)
	}
	byLane := map[string][]call{}
	calls, takeovers := 0, 0
	var all []call
	for rows.Next() {
		var lane string
		var cl call
		if err := rows.Scan(&lane, &cl.seq, &cl.id, &cl.attempt, &cl.owner, &cl.started, &cl.ended, &cl.ok, &cl.processedAttempt); err != nil {
			t.Fatal(err)
		}
		byLane[lane] = append(byLane[lane], cl)
		all = append(all, cl)
		calls++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(byLane) != lanes {
		t.Fatalf("handler calls logged for %d lanes, want %d", len(byLane), lanes)
	}
	for lane, cs := range byLane {
		// The final successful attempt of each message: the attempt that
		// message_processed counts, and it succeeded.
		var order []int
		seen := map[int64]bool{}
		for _, cl := range cs {
			if cl.attempt != cl.processedAttempt {
				continue
			}
			if !cl.ok || seen[cl.id] {
				t.Fatalf("lane %s seq %d: the attempt message_processed counts (%d) did not succeed, or ran twice", lane, cl.seq, cl.attempt)
			}
			seen[cl.id] = true
			order = append(order, cl.seq)
		}
		want := make([]int, perLane)
		for i := range want {
			want[i] = i
		}
		if !slices.Equal(order, want) {
			t.Fatalf("lane %s: the final attempts started in the order %v, sent %v", lane, order, want)
		}
		for i, cl := range cs {
			for _, prev := range slices.Backward(cs[:i]) {
				if prev.id == cl.id {
					if prev.owner != cl.owner && !prev.ok {
						takeovers++ // another Worker took it over after a crash or an expiry
					}
					break
				}
			}
		}
		// No overlap: sorted by start, each call starts after every earlier one ended.
		var end time.Time
		var endBy call
		for i, cl := range cs {
			if i > 0 && cl.started.Before(end) {
				t.Fatalf("lane %s: seq %d attempt %d (%s) started at %s while seq %d attempt %d (%s) ran until %s",
					lane, cl.seq, cl.attempt, cl.owner, cl.started.Format(time.StampMicro),
					endBy.seq, endBy.attempt, endBy.owner, end.Format(time.StampMicro))
			}
			if cl.ended.After(end) {
				end, endBy = cl.ended, cl
			}
		}
	}
	// Lanes ran in parallel: the most handler calls of different lanes at once.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, cl := range all {
		edges = append(edges, edge{cl.started, 1}, edge{cl.ended, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	most, now := 0, 0
	for _, e := range edges {
		now += e.delta
		most = max(most, now)
	}
	if most < 2 {
		t.Fatalf("at most %d lane handlers ran at once: lanes were not worked in parallel", most)
	}
	if crashes.Load() == 0 || stalls.Load() == 0 || failures.Load() == 0 || cnt.Lost.Load() == 0 || takeovers == 0 {
		t.Fatalf("crashes %d, stalls %d, failures %d, leases lost %d, takeovers %d: the test exercised too little",
			crashes.Load(), stalls.Load(), failures.Load(), cnt.Lost.Load(), takeovers)
	}
	retried := count(t, db, "message_processed", "queue = 'lanes' AND attempts > 1")
	t.Logf("%d messages in %d lanes + %d unordered; %d lane handler calls, up to %d lane handlers at once; %d crashes, %d stalls (forced expiries), %d failures, %d leases lost, %d lane messages re-run by another Worker (after a failure, crash or expiry), %d messages processed after a retry",
		lanes*perLane, lanes, total-lanes*perLane, calls, most, crashes.Load(), stalls.Load(), failures.Load(), cnt.Lost.Load(), takeovers, retried)
}

// A Worker that completes a lane's message claims again at once, even when
// its last claim came back short (idle): the completion made the lane's next
// message claimable, and no NOTIFY says so. With polling an hour away and
// LISTEN off, only that claim can bring the rest of the lane, so the lane
// drains only if it happens: after the failure that dead-letters the lane's
// first message (lane_dead move_on: the lane goes on), after flushes of
// successes only (pipelined with the claim when the client can), and --
// while a slow handler holds its unordered message until the lane is done
// -- after the flushes that FlushInterval times.
func TestWorkerCarriesItsLanesWithoutPolling(t *testing.T) {
	for _, slow := range []bool{false, true} {
		t.Run(fmt.Sprintf("slow=%v", slow), func(t *testing.T) {
			db := pgtest.New(t, 6)
			ctx := context.Background()
			if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 1); err != nil {
				t.Fatal(err)
			}
			const n = 30
			var ms []pgsweep.Message
			if slow {
				ms = append(ms, pgsweep.Message{Payload: json.RawMessage(`"slow"`)})
			}
			// the lane's head; one attempt: dead at once
			ms = append(ms, pgsweep.Message{Payload: json.RawMessage(`"bad"`), Lane: "L"})
			for i := range n {
				ms = append(ms, pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i)), Lane: "L"})
			}
			if _, err := db.Client.SendBatch(ctx, "q", ms); err != nil {
				t.Fatal(err)
			}
			var cnt pgtest.Counts
			var mu sync.Mutex
			var order []string
			laneDone := make(chan struct{})
			startWorker(t, db, func(ctx context.Context, d *pgsweep.Delivery) error {
				switch p := string(d.Payload); p {
				case `"bad"`:
					return errors.New("bad")
				case `"slow"`:
					select { // held until the lane's last message ran
					case <-laneDone:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				default:
					mu.Lock()
					defer mu.Unlock()
					if order = append(order, p); len(order) == n {
						close(laneDone)
					}
					return nil
				}
			}, pgsweep.WorkerOptions{Queue: "q", Batch: 10, PollInterval: time.Hour, DisableNotify: true, Hooks: cnt.Hooks()})
			want := int64(n)
			if slow {
				want++
			}
			pgtest.Eventually(t, 20*time.Second, pgtest.Until("the lane to drain", func() bool { return cnt.Completed.Load() == want && cnt.Dead.Load() == 1 }))
			mu.Lock()
			defer mu.Unlock()
			if len(order) != n {
				t.Fatalf("%d handler calls of the lane, want %d", len(order), n)
			}
			for i, p := range order {
				if p != fmt.Sprint(i) {
					t.Fatalf("handler order %v, want 0..%d", order, n-1)
				}
			}
			if left := count(t, db, "message", "true"); left != 0 {
				t.Fatalf("%d rows left", left)
			}
		})
	}
}
