// Package notifier is the LISTEN loop of pgsweep's consumers (the Worker,
// the relay): one connection of the consumer's own, outside its pool, on
// the channel the SQL names (notify_channel), waking the consumer for every
// notification about its queue. The consumer polls as well: a notification
// only makes it claim sooner.
package notifier

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgsweep/pgsweep/internal/consumer"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
)

// Options configure Run. Connect, Channel and Wake are required.
type Options struct {
	// Connect opens the LISTEN connection.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Channel returns the channel to LISTEN on, asked on the connection.
	Channel func(ctx context.Context, conn *pgx.Conn) (string, error)
	// Payload is the payload that wakes the consumer (its queue's name).
	Payload string
	// Wake is called for every notification with Payload, and once after
	// every (re)connect: what was sent while no connection listened got
	// no notification. It must not block.
	Wake func()
	// Pause, when set, is asked before connecting and after every
	// notification: while it reports true the connection is closed (and
	// not opened again), checked every PauseCheck, and the consumer polls.
	Pause      func() bool
	PauseCheck time.Duration
	// Logger receives the loop's warnings (default slog.Default()).
	Logger *slog.Logger
}

// errPaused ends a connection while Pause reports true.
var errPaused = errors.New("notifier: paused; LISTEN closed")

// Run listens until ctx is done. After an error it reconnects with a
// backoff from 100ms to 30s (reset once a connection listened); polling
// covers the gap.
func Run(ctx context.Context, o Options) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	backoff := consumer.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	paused := false
	for ctx.Err() == nil {
		if o.Pause != nil && o.Pause() {
			if !paused {
				paused = true
				log.Debug("LISTEN closed while paused; polling", "check_every", o.PauseCheck)
			}
			if ctxsleep.Sleep(ctx, o.PauseCheck) != nil {
				return
			}
			continue
		}
		if paused {
			paused = false
			log.Debug("no longer paused: listening again")
		}
		listening := false
		err := func() error {
			conn, err := o.Connect(ctx)
			if err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = conn.Close(cctx)
			}()
			channel, err := o.Channel(ctx, conn)
			if err != nil {
				return err
			}
			if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
				return err
			}
			listening = true
			o.Wake()
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if n.Payload == o.Payload {
					o.Wake()
				}
				if o.Pause != nil && o.Pause() {
					return errPaused
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPaused) {
			backoff.Reset()
			continue
		}
		if listening {
			backoff.Reset()
		}
		retry := backoff.Next()
		log.Warn("listen failed; polling until it reconnects", "err", err, "retry_in", retry)
		if ctxsleep.Sleep(ctx, retry) != nil {
			return
		}
	}
}
