package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// The contenders heads and blocked (--blocked N) show that a claim's cost
// does not grow with the messages waiting behind lane heads (issue #12: 100,000
// messages behind 10,000 heads in flight may cost a claim at most twice what
// it costs with none; pgTAP sql/tests/lanes.sql counts the index entries
// read). Both drain b.n unordered messages as pgsweep does (claim +
// complete) from a queue whose oldest messages are b.heads lane heads in
// flight, claimed for an hour by another owner, so that every rescan from
// the head of the queue walks them; blocked also has N messages waiting
// behind those heads (N / heads a lane), heads has none. Each claim call
// that took messages is timed (not the empty ones that end a drain): the
// mean claim of blocked over that of heads is the ratio the issue bounds.

// callTimer sums the durations of calls made by several goroutines. A nil
// *callTimer times nothing.
type callTimer struct{ calls, nanos atomic.Int64 }

func (t *callTimer) add(d time.Duration) {
	if t == nil {
		return
	}
	t.calls.Add(1)
	t.nanos.Add(d.Nanoseconds())
}

// mean is the mean call in milliseconds (0 without calls).
func (t *callTimer) mean() float64 {
	if n := t.calls.Load(); n > 0 {
		return float64(t.nanos.Load()) / float64(n) / 1e6
	}
	return 0
}

func (b *claimBench) headsInFlight(ctx context.Context) (time.Duration, error) {
	return b.drainBehindHeads(ctx, "heads", 0)
}

func (b *claimBench) blockedBehindHeads(ctx context.Context) (time.Duration, error) {
	return b.drainBehindHeads(ctx, "blocked", b.blocked)
}

// drainBehindHeads fills the queue -- b.heads lane heads, waiting messages
// behind them, the heads claimed for an hour, then b.n unordered messages
// -- and drains the unordered ones, timing each claim; the mean claim goes
// to b.claimMs[name].
func (b *claimBench) drainBehindHeads(ctx context.Context, name string, waiting int) (time.Duration, error) {
	fmt.Fprintf(b.out, "%s: %d lane heads in flight, %d messages waiting behind them, %d to drain…\n", name, b.heads, waiting, b.n)
	c, err := b.resetQueue(ctx)
	if err != nil {
		return 0, err
	}
	lane := func(i int) string { return fmt.Sprintf("h-%d", i%b.heads) }
	if err := b.send(ctx, c, b.heads, lane, nil); err != nil {
		return 0, err
	}
	if err := b.send(ctx, c, waiting, lane, nil); err != nil {
		return 0, err
	}
	// The heads are the oldest claimable messages, and only they: the rest
	// of their lanes waits, and the unordered messages come after.
	for got := 0; got < b.heads; {
		ds, err := c.Claim(ctx, b.queue, "bench-holder", min(10000, b.heads-got), time.Hour)
		if err != nil {
			return 0, err
		}
		if len(ds) == 0 {
			return 0, fmt.Errorf("claimed %d of the %d lane heads", got, b.heads)
		}
		got += len(ds)
	}
	if err := b.send(ctx, c, b.n, nil, nil); err != nil {
		return 0, err
	}
	if err := b.vacuum(ctx); err != nil {
		return 0, err
	}
	var t callTimer
	d, err := b.drain(ctx, name, b.claimComplete(b.b, &t))
	if err != nil {
		return 0, err
	}
	b.claimMs[name] = append(b.claimMs[name], t.mean())
	fmt.Fprintf(b.out, "%s: mean claim %.3f ms over %d claims\n", name, t.mean(), t.calls.Load())
	return d, nil
}
