package pgsweep

import (
	"context"
	"errors"
	"slices"
	"time"
)

// completeAndClaim completes every held message (all finished without
// error) and claims up to n more: the completes and the claim pipelined in
// one round trip and one transaction; several tokens with lane messages
// among them are completed one transaction each first (lane lock order:
// Client's completeAndClaim). The tokens whose complete was committed are settled;
// the others (a failure part way, or the pipelined call failing as a whole)
// wait for the next flush.
func (l *loop) completeAndClaim(n int) (int, error) {
	ctx, cancel := context.WithTimeout(l.base, flushTimeout)
	defer cancel()
	acks := make([]ackGroup, 0, len(l.acks))
	for tok, ids := range l.acks {
		lanes := slices.ContainsFunc(ids, func(id int64) bool { j := l.held[id]; return j == nil || j.d.Lane != "" })
		acks = append(acks, ackGroup{token: tok, ids: ids, lanes: lanes})
	}
	start := time.Now()
	byGroup, ds, err := l.w.client.completeAndClaim(ctx, l.o.Queue, l.o.Owner, acks, n, l.o.Lease)
	settled := 0
	for i, done := range byGroup {
		if done == nil {
			continue
		}
		// done is every id of the group completed; the others' leases were
		// lost meanwhile.
		a := acks[i]
		l.o.Hooks.call(l.o.Hooks.Completed, l.o.Queue, len(done))
		l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, len(a.ids)-len(done))
		l.settle(a.ids)
		delete(l.acks, a.token)
		settled++
	}
	l.w.signals.Flushed.Signal(len(l.acks) + len(l.fails))
	if settled < len(acks) {
		l.flushErr = true // the rest: retried on the next flush, after a backoff
	} else {
		l.flushBackoff = 0
	}
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// flush sends the results that wait: one complete per claim token for the
// successes, one fail per token and error text, all within one
// flushTimeout. A failed call is retried on a later flush (after a backoff);
// a call the database refuses as invalid is not (retrying cannot help):
// those messages are left to lease expiry and redelivery.
func (l *loop) flush(ctx context.Context) {
	o := l.o
	l.flushErr = false
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	for tok, ids := range l.acks {
		done, err := l.w.client.Complete(ctx, o.Queue, tok, ids)
		switch {
		case errors.Is(err, ErrInvalidArgument):
			l.w.log.Error("complete refused; leaving the messages to lease expiry", "err", err, "n", len(ids))
		case err != nil:
			l.w.log.Error("complete failed; will retry", "err", err, "n", len(ids))
			l.flushErr = true
			continue
		default:
			o.Hooks.call(o.Hooks.Completed, o.Queue, len(done))
			o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(ids)-len(done))
		}
		l.settle(ids)
		delete(l.acks, tok)
	}
	for k, ids := range l.fails {
		var after *time.Duration
		if k.fixed {
			after = &k.after
		}
		res, err := l.w.client.fail(ctx, o.Queue, k.token, ids, k.msg, after)
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
	l.w.signals.Flushed.Signal(len(l.acks) + len(l.fails))
}

// renew extends the leases of held messages that have no result yet, one
// call per claim token. A lease the database no longer has is lost; so is
// one whose expiry passed while renewals failed (another worker may hold it
// by now).
func (l *loop) renew() {
	o := l.o
	byToken := map[Token][]int64{}
	for id, j := range l.held {
		if j.state != jobDone {
			byToken[j.d.Token] = append(byToken[j.d.Token], id)
		}
	}
	lost := 0
	if len(byToken) > 0 {
		ctx, cancel := l.leaseCall()
		for tok, ids := range byToken {
			start := time.Now()
			got, err := l.w.client.Renew(ctx, o.Queue, tok, ids, o.Lease)
			if err != nil {
				l.w.log.Error("renew failed", "err", err, "n", len(ids))
				continue
			}
			kept := make(map[int64]bool, len(got))
			for _, id := range got {
				kept[id] = true
			}
			for _, id := range ids {
				j := l.held[id]
				switch {
				case j == nil || j.d.Token != tok: // lost meanwhile: nothing to do
				case kept[id]:
					j.setExpires(leaseDeadline(start, o.Lease))
				case l.lose(j):
					lost++
				}
			}
		}
		cancel()
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
// One call per claim token.
func (l *loop) releaseQueued() {
	byToken := map[Token][]int64{}
	for _, j := range l.queue {
		l.drop(j)
		byToken[j.d.Token] = append(byToken[j.d.Token], j.d.ID)
	}
	l.queue = nil // all of it, at once (lose would take them out one by one)
	if len(byToken) == 0 {
		return
	}
	ctx, cancel := l.leaseCall()
	defer cancel()
	released, lost := 0, 0
	for tok, ids := range byToken {
		got, err := l.w.client.Release(ctx, l.o.Queue, tok, ids)
		if err != nil {
			l.w.log.Warn("release failed; the messages wait for their leases to expire", "err", err, "n", len(ids))
			continue
		}
		released += len(got)
		lost += len(ids) - len(got) // taken over while they waited
	}
	l.o.Hooks.call(l.o.Hooks.Released, l.o.Queue, released)
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, lost)
	if released > 0 {
		l.w.log.Info("released messages that were not started", "n", released)
	}
}
