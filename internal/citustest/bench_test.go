//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestCitusBenchClaim is the claim benchmark of docs/benchmarks.md, "Citus":
// the loop of `pgsweep bench claim`'s pgsweep contender (claim B, complete
// them, W workers each on a connection of its own) on two queues, once on
// the Citus coordinator (the queues on different workers; every claim and
// complete pushed down to its queue's worker) and once on the single-node
// database, in the same run; it prints both rates and the claim latency
// (median and p99 per call). It measures; it asserts nothing about speed.
// It runs only with PGSWEEP_CITUS_BENCH=1 (a benchmark, not a test):
//
//	PGSWEEP_CITUS_BENCH=1 make test-citus (or go test -tags citus -run TestCitusBenchClaim -v ./internal/citustest/)
//
// PGSWEEP_CITUS_BENCH_MESSAGES (per queue, default 20000), _WORKERS (per
// queue, default 4), _BATCH (default 100) and _ROUNDS (default 3) tune it.
func TestCitusBenchClaim(t *testing.T) {
	if os.Getenv("PGSWEEP_CITUS_BENCH") != "1" {
		t.Skip("the Citus claim benchmark runs only with PGSWEEP_CITUS_BENCH=1")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv("PGSWEEP_CITUS_BENCH_" + name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	n, w, batch, rounds := env("MESSAGES", 20000), env("WORKERS", 4), env("BATCH", 100), env("ROUNDS", 3)
	citus := New(t, 4)
	queues := citus.QueuePerWorker(t, "bench")
	single := pgtest.New(t, 4)
	type result struct {
		rate           float64
		p50, p99, mean time.Duration
	}
	run := func(url, schema string, c *pgsweep.Client) result {
		ctx := context.Background()
		for _, q := range queues {
			if err := c.QueueCreate(ctx, q, pgsweep.Outbox, 10); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i += 10000 {
				ms := make([]pgsweep.Message, min(10000, n-i))
				for j := range ms {
					ms[j] = pgsweep.Message{Payload: json.RawMessage(`{"event":"order.created","id":12345,"customer":"c-42"}`)}
				}
				if _, err := c.SendBatch(ctx, q, ms); err != nil {
					t.Fatal(err)
				}
			}
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = int32(w * len(queues))
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		var (
			mu   sync.Mutex
			lat  []time.Duration
			done atomic.Int64
			wg   sync.WaitGroup
		)
		start := time.Now()
		for _, q := range queues {
			for k := range w {
				wg.Add(1)
				go func() {
					defer wg.Done()
					conn, err := pool.Acquire(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Release()
					wc, _ := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: schema})
					var mine []time.Duration
					for {
						t0 := time.Now()
						ds, err := wc.Claim(ctx, q, fmt.Sprintf("bench-%d", k), batch, time.Minute)
						mine = append(mine, time.Since(t0))
						if err != nil {
							t.Error(err)
							return
						}
						if len(ds) == 0 {
							break
						}
						ids := make([]int64, len(ds))
						for i, d := range ds {
							ids[i] = d.ID
						}
						if _, err := wc.Complete(ctx, q, ds[0].Token, ids); err != nil {
							t.Error(err)
							return
						}
						done.Add(int64(len(ids)))
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(start)
		if got := done.Load(); got != int64(n*len(queues)) {
			t.Fatalf("drained %d of %d", got, n*len(queues))
		}
		slices.Sort(lat)
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		return result{rate: float64(n*len(queues)) / elapsed.Seconds(), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100],
			mean: sum / time.Duration(len(lat))}
	}
	var cs, ss []result
	for r := 1; r <= rounds; r++ {
		cs = append(cs, run(citus.URL, citus.Schema, citus.Client))
		ss = append(ss, run(single.URL, single.Schema, single.Client))
		t.Logf("round %d: citus %.0f msg/s (claim p50 %v p99 %v); single node %.0f msg/s (claim p50 %v p99 %v)", r,
			cs[r-1].rate, cs[r-1].p50.Round(10*time.Microsecond), cs[r-1].p99.Round(10*time.Microsecond),
			ss[r-1].rate, ss[r-1].p50.Round(10*time.Microsecond), ss[r-1].p99.Round(10*time.Microsecond))
	}
	med := func(rs []result) result {
		slices.SortFunc(rs, func(a, b result) int {
			if a.rate < b.rate {
				return -1
			}
			if a.rate > b.rate {
				return 1
			}
			return 0
		})
		return rs[len(rs)/2]
	}
	mc, ms := med(cs), med(ss)
	t.Logf("bench claim (claim %d + complete, %d workers per queue, 2 queues x %d messages; medians of %d rounds):", batch, w, n, rounds)
	t.Logf("  Citus: coordinator + 2 workers (queues %s on %s, %s on %s): %8.0f msg/s, claim p50 %v, p99 %v, mean %v",
		queues[0], citus.Workers[0].Name, queues[1], citus.Workers[1].Name, mc.rate, mc.p50.Round(10*time.Microsecond),
		mc.p99.Round(10*time.Microsecond), mc.mean.Round(10*time.Microsecond))
	t.Logf("  single node:                                                %8.0f msg/s, claim p50 %v, p99 %v, mean %v",
		ms.rate, ms.p50.Round(10*time.Microsecond), ms.p99.Round(10*time.Microsecond), ms.mean.Round(10*time.Microsecond))
	t.Logf("  Citus / single node: %.2fx", mc.rate/ms.rate)
}
