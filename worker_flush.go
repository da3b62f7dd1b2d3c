package pgsweep

import (
	"context"
	"errors"
	"time"
)

// completeAndClaim completes every held message (all finished without
// error) and claims up to n more in one round trip. When it fails without
// completing anything, the completions wait for the next flush.
func (l *loop) completeAndClaim(n int) (int, error) {
	ctx, cancel := context.WithTimeout(l.base, flushTimeout)
	defer cancel()
	start := time.Now()
	done, ds, err := l.w.client.CompleteAndClaim(ctx, l.o.Queue, l.o.Owner, l.acks, n, l.o.Lease)
	if err != nil && done == nil {
		l.flushErr = true
		return 0, err
	}
	l.completed(done)
	l.flushBackoff = 0
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// completed settles the acks a complete call was sent for: done are the ids
// it acted on, the rest were leases lost meanwhile.
func (l *loop) completed(done []int64) {
	l.o.Hooks.call(l.o.Hooks.Completed, l.o.Queue, len(done))
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, len(l.acks)-len(done))
	l.settle(l.acks)
	l.acks = l.acks[:0]
}

// flush sends the results that wait: one complete for all successes, one
// fail per error text, all within one flushTimeout. A failed call is retried
// on a later flush (after a backoff); a call the database refuses as invalid
// is not (retrying cannot help): those messages are left to lease expiry and
// redelivery.
func (l *loop) flush(ctx context.Context) {
	o := l.o
	l.flushErr = false
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	if len(l.acks) > 0 {
		done, err := l.w.client.Complete(ctx, o.Queue, o.Owner, l.acks)
		switch {
		case errors.Is(err, ErrInvalidArgument):
			l.w.log.Error("complete refused; leaving the messages to lease expiry", "err", err, "n", len(l.acks))
			l.settle(l.acks)
			l.acks = l.acks[:0]
		case err != nil:
			l.w.log.Error("complete failed; will retry", "err", err, "n", len(l.acks))
			l.flushErr = true
		default:
			l.completed(done)
		}
	}
	for k, ids := range l.fails {
		var after *time.Duration
		if k.fixed {
			after = &k.after
		}
		res, err := l.w.client.fail(ctx, o.Queue, o.Owner, ids, k.msg, after)
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			l.w.log.Error("fail failed; will retry", "err", err, "n", len(ids))
			l.flushErr = true
			continue
		}
		if err != nil {
			l.w.log.Error("fail refused; leaving the messages to lease expiry", "err", err, "n", len(ids))
		}
		dead := 0
		for _, r := range res {
			if r.Dead {
				dead++
			}
		}
		o.Hooks.call(o.Hooks.Failed, o.Queue, len(res)-dead)
		o.Hooks.call(o.Hooks.DeadLettered, o.Queue, dead)
		if err == nil {
			o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(ids)-len(res))
		}
		l.settle(ids)
		delete(l.fails, k)
	}
	if !l.flushErr {
		l.flushBackoff = 0
	}
}

// renew extends the leases of held messages that have no result yet. A lease
// the database no longer has is lost; so is one whose expiry passed while
// renewals failed (another worker may hold it by now).
func (l *loop) renew() {
	o := l.o
	var ids []int64
	for id, j := range l.held {
		if j.state != jobDone {
			ids = append(ids, id)
		}
	}
	lost := 0
	if len(ids) > 0 {
		ctx, cancel := l.leaseCall()
		start := time.Now()
		got, err := l.w.client.Renew(ctx, o.Queue, o.Owner, ids, o.Lease)
		cancel()
		if err != nil {
			l.w.log.Error("renew failed", "err", err, "n", len(ids))
		} else {
			kept := make(map[int64]bool, len(got))
			for _, id := range got {
				kept[id] = true
			}
			for _, id := range ids {
				j := l.held[id]
				switch {
				case j == nil: // lost meanwhile: nothing to do
				case kept[id]:
					j.setExpires(start.Add(o.Lease))
				case l.lose(j):
					lost++
				}
			}
		}
	}
	now := time.Now()
	for _, j := range l.held {
		if j.state != jobDone && j.expiredAt(now) && l.lose(j) {
			l.w.log.Warn("lease expired while renewals failed; cancelling the handler", "id", j.d.ID)
			lost++
		}
	}
	o.Hooks.call(o.Hooks.LeasesLost, o.Queue, lost)
}

// releaseQueued gives back the messages claimed but not started, at the
// start of shutdown: they are due again at once, with their attempt back.
func (l *loop) releaseQueued() {
	ids := make([]int64, 0, len(l.queue))
	for _, j := range l.queue {
		l.drop(j)
		ids = append(ids, j.d.ID)
	}
	l.queue = nil // all of it, at once (lose would take them out one by one)
	if len(ids) == 0 {
		return
	}
	ctx, cancel := l.leaseCall()
	got, err := l.w.client.Release(ctx, l.o.Queue, l.o.Owner, ids)
	cancel()
	if err != nil {
		l.w.log.Warn("release failed; the messages wait for their leases to expire", "err", err, "n", len(ids))
		return
	}
	l.o.Hooks.call(l.o.Hooks.Released, l.o.Queue, len(got))
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, len(ids)-len(got)) // taken over while they waited
	l.w.log.Info("released messages that were not started", "n", len(got))
}
