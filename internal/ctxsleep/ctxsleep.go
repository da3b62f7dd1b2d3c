// Package ctxsleep is the one sleep that a cancelled context cuts short,
// shared by the runner, the relay, its NATS transport, the bench and the
// demo (each had written its own).
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done: then it returns ctx.Err(). The timer
// is stopped either way, so a long d left behind by a cancelled context
// holds nothing.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
