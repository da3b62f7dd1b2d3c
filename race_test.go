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

// sendClaimRace runs senders and claimers at once, each on a connection of
// its own to db's queue "q". send(c, s) is sender s's work; it returns how
// many messages it sent. Each claimer claims up to batch messages at a time
// and hands them to settle(c, w, ds), which returns how many it completed.
// Claimers stop once every sender has returned and the completions reach
// what was sent, or when ctx ends. It returns how many were sent and
// completed, and every goroutine's error, named by its role and number.
func sendClaimRace(ctx context.Context, t *testing.T, db *pgtest.DB, senders, claimers, batch int,
	send func(c *pgsweep.Client, s int) (int, error),
	settle func(c *pgsweep.Client, w int, ds []pgsweep.Delivery) (int, error),
) (sent, completed int64, errs []error) {
	t.Helper()
	var sentN, completedN, sendersLeft atomic.Int64
	sendersLeft.Store(int64(senders))
	errc := make(chan error, senders+claimers)
	client := func() *pgsweep.Client {
		c, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var wg sync.WaitGroup
	for s := range senders {
		c := client()
		wg.Go(func() {
			defer sendersLeft.Add(-1)
			n, err := send(c, s)
			sentN.Add(int64(n))
			if err != nil {
				errc <- fmt.Errorf("sender %d: %w", s, err)
			}
		})
	}
	for w := range claimers {
		c := client()
		wg.Go(func() {
			for ctx.Err() == nil {
				ds, err := c.Claim(ctx, "q", fmt.Sprintf("w%d", w), batch, time.Minute)
				if err != nil {
					errc <- fmt.Errorf("claimer %d claim: %w", w, err)
					return
				}
				if len(ds) == 0 {
					// sent is final once no sender is left
					if sendersLeft.Load() == 0 && completedN.Load() == sentN.Load() {
						return
					}
					continue
				}
				n, err := settle(c, w, ds)
				completedN.Add(int64(n))
				if err != nil {
					errc <- fmt.Errorf("claimer %d: %w", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		errs = append(errs, err)
	}
	return sentN.Load(), completedN.Load(), errs
}
