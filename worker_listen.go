package pgsweep

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listening := false
		err := func() error {
			conn, err := w.connect(ctx)
			if err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = conn.Close(cctx)
			}()
			// The channel is the SQL's to name (notify_channel).
			channel, err := w.client.WithDB(conn).NotifyChannel(ctx)
			if err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				return err
			}
			listening = true
			poke()
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if n.Payload == w.o.Queue {
					poke()
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		if listening {
			backoff = 100 * time.Millisecond
		}
		w.log.Warn("listen failed; polling until it reconnects", "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}
