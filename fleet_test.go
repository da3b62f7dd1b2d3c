package pgsweep_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// fleet is a test's Workers, each on a pool of its own, and its samplers.
type fleet struct {
	stop    context.CancelFunc
	wg      sync.WaitGroup
	errc    chan error
	samples []func() (most, samples int64, err error)
	ctx     context.Context
	t       *testing.T
	url     string
}

// startFleet starts n Workers running h, each on a pool of conns
// connections to url, with the options opts(w) gives Worker w.
func startFleet(ctx context.Context, t *testing.T, url string, n int, conns int32, h pgsweep.Handler, opts func(w int) pgsweep.WorkerOptions) *fleet {
	t.Helper()
	wctx, stop := context.WithCancel(ctx)
	f := &fleet{stop: stop, errc: make(chan error, n), ctx: wctx, t: t, url: url}
	for w := range n {
		pool, err := pgtest.Pool(ctx, url, conns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		wk, err := pgsweep.NewWorker(pool, h, opts(w))
		if err != nil {
			t.Fatal(err)
		}
		f.wg.Go(func() {
			if err := wk.Run(wctx); err != nil {
				f.errc <- fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	return f
}

// sample runs query (one bigint) on a connection of its own, as often as
// it can until the fleet stops; wait reports the largest value it read.
func (f *fleet) sample(query string) {
	conn := pgtest.Conn(f.t, f.url)
	var n, most atomic.Int64
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for f.ctx.Err() == nil {
			var v int64
			if err := conn.QueryRow(f.ctx, query).Scan(&v); err != nil {
				if f.ctx.Err() == nil {
					errc <- err
				}
				return
			}
			n.Add(1)
			if v > most.Load() {
				most.Store(v)
			}
		}
	}()
	f.samples = append(f.samples, func() (int64, int64, error) { err := <-errc; return most.Load(), n.Load(), err })
}

// wait stops the Workers and the samplers, fails the test on their
// errors, and returns each sampler's largest value and sample count.
func (f *fleet) wait() (most, samples []int64) {
	f.t.Helper()
	f.stop()
	f.wg.Wait()
	close(f.errc)
	for err := range f.errc {
		f.t.Error(err)
	}
	for _, s := range f.samples {
		m, n, err := s()
		if err != nil {
			f.t.Fatalf("sampler: %v", err)
		}
		most, samples = append(most, m), append(samples, n)
	}
	return most, samples
}

// claimFor runs n claimers, each on a connection of its own, that claim
// batches of 100 from queue and complete them for d; took sees every
// claim's deliveries (from several goroutines at once). It returns how long
// they ran on the database clock: a rate is claims per second of it.
func claimFor(ctx context.Context, t *testing.T, db *pgtest.DB, queue string, n int, d time.Duration,
	took func(ds []pgsweep.Delivery) error) (seconds float64) {
	t.Helper()
	clock := func() time.Time {
		var at time.Time
		if err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	start := clock()
	rctx, cancel := context.WithTimeout(ctx, d) // time under test: a rate is claims per second
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for w := range n {
		cl, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for rctx.Err() == nil {
				ds, err := cl.Claim(ctx, queue, fmt.Sprintf("w%d", w), 100, time.Minute)
				if err == nil {
					err = took(ds)
				}
				if err == nil && len(ds) > 0 {
					_, err = cl.Complete(ctx, queue, ds[0].Token, ids(ds))
				}
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	seconds = clock().Sub(start).Seconds()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	return seconds
}
