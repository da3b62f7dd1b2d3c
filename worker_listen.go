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

// listen holds one connection of its own on LISTEN and pokes wake for every
// notification about this worker's queue, and once after every (re)connect:
// messages sent while it was away got no notification. On an error it
// reconnects with a backoff from 100ms to 30s; polling covers the gap.
func (w *Worker) listen(ctx context.Context, wake chan<- struct{}) {
	notifier.Run(ctx, notifier.Options{
		Connect: w.connect,
		// The channel is the SQL's to name (notify_channel).
		Channel: func(ctx context.Context, conn *pgx.Conn) (string, error) {
			return w.client.WithDB(conn).NotifyChannel(ctx)
		},
		Payload: w.o.Queue,
		Wake: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		},
		Logger: w.log,
	})
}
