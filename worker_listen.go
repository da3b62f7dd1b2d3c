package pgsweep

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgsweep/pgsweep/internal/notifier"
)

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return w.h(ctx, d)
}

// callBatch runs the batch handler on the deliveries of js, turning a panic
// or a result slice of the wrong length into an error for each.
func (w *Worker) callBatch(ctx context.Context, js []*job) (errs []error) {
	ds := make([]*Delivery, len(js))
	for i, j := range js {
		ds[i] = &j.hd
	}
	defer func() {
		if p := recover(); p != nil {
			errs = sameError(len(js), fmt.Errorf("batch handler panic: %v", p))
		}
	}()
	errs = w.bh(ctx, ds)
	if len(errs) != len(js) {
		errs = sameError(len(js), fmt.Errorf("batch handler returned %d results for %d deliveries", len(errs), len(js)))
	}
	return errs
}

func sameError(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// listen holds one connection of its own on LISTEN and pokes w.wake for every
// notification about this worker's queue, and once after every (re)connect:
// messages sent while it was away got no notification. On an error it
// reconnects with a backoff from 100ms to 30s; polling covers the gap.
func (w *Worker) listen(ctx context.Context) {
	notifier.Run(ctx, notifier.Options{
		Connect: w.connect,
		// The channel is the SQL's to name (notify_channel).
		Channel: func(ctx context.Context, conn *pgx.Conn) (string, error) {
			return w.client.WithDB(conn).NotifyChannel(ctx)
		},
		Payload: w.o.Queue,
		Wake:    w.Notify,
		Logger:  w.log,
	})
}
