package pgsweep

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/pgsweep/pgsweep/internal/consumer"
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
	var keys []consumer.Key[Token]
	var acks []ackGroup
	for k, ids := range l.results.All() {
		lanes := slices.ContainsFunc(ids, func(id int64) bool { j := l.held[id]; return j == nil || j.d.Lane != "" })
		keys = append(keys, k)
		acks = append(acks, ackGroup{token: k.Token, ids: ids, lanes: lanes})
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
		l.sent(keys[i], acks[i].ids, consumer.Sent{Done: len(done)})
		settled++
	}
	l.w.signals.Flushed.Signal(l.results.Len())
	if settled < len(acks) {
		l.flushErr = true // the rest: retried on the next flush, after a backoff
	} else {
		l.flushBackoff.Reset()
	}
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// flush sends the results that wait: one call per claim token and outcome
// (consumer.Results), all within one flushTimeout. A failed call is retried
// on a later flush (after a backoff); a call the database refuses as
// invalid is not (retrying cannot help): those messages are left to lease
// expiry and redelivery.
func (l *loop) flush(ctx context.Context) {
	l.flushErr = false
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	var failed error
	for k, ids := range l.results.All() {
		r := l.store.Send(ctx, k, ids)
		if r.Err != nil && !errors.Is(r.Err, ErrInvalidArgument) {
			failed = r.Err
		}
		switch {
		case errors.Is(r.Err, ErrInvalidArgument):
			l.w.log.Error(k.Kind.String()+" refused; leaving the messages to lease expiry", "err", r.Err, "n", len(ids))
			l.settle(ids, "refused")
			l.results.Done(k)
		case r.Err != nil:
			l.w.log.Error(k.Kind.String()+" failed; will retry", "err", r.Err, "n", len(ids))
			l.flushErr = true
		default:
			l.sent(k, ids, r)
		}
	}
	if !l.flushErr {
		l.flushBackoff.Reset()
	}
	l.o.Hooks.database(l.o.Queue, failed)
	l.w.signals.Flushed.Signal(l.results.Len())
}

// sent counts what the call k did for ids and forgets them.
func (l *loop) sent(k consumer.Key[Token], ids []int64, r consumer.Sent) {
	o := l.o
	switch k.Kind {
	case consumer.Complete:
		o.Hooks.call(o.Hooks.Completed, o.Queue, r.Done)
	case consumer.Fail:
		o.Hooks.call(o.Hooks.Failed, o.Queue, r.Done-r.Dead)
		o.Hooks.call(o.Hooks.DeadLettered, o.Queue, r.Dead)
	case consumer.DeadLetter:
		o.Hooks.call(o.Hooks.DeadLettered, o.Queue, r.Done)
	case consumer.Release:
		o.Hooks.call(o.Hooks.Released, o.Queue, r.Done)
	}
	o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(ids)-r.Done)
	l.settle(ids, k.Kind.String())
	l.results.Done(k)
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
		start := time.Now()
		kept := consumer.Renew(ctx, byToken, func(ctx context.Context, tok Token, ids []int64) ([]int64, error) {
			return l.w.client.Renew(ctx, o.Queue, tok, ids, o.Lease)
		}, func(err error, ids []int64) { l.w.log.Error("renew failed", "err", err, "n", len(ids)) })
		cancel()
		for id, ok := range kept {
			switch j := l.held[id]; {
			case j == nil: // lost meanwhile: nothing to do
			case ok:
				j.setExpires(leaseDeadline(start, o.Lease))
			case l.lose(j):
				lost++
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
// One call per claim token.
func (l *loop) releaseQueued() {
	byToken := map[Token][]int64{}
	for _, j := range l.queue {
		l.drop(j, "release")
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
