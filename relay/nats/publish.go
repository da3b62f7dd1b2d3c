package nats

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgsweep/pgsweep/internal/ctxsleep"
	"github.com/pgsweep/pgsweep/relay"
)

// The publisher: JetStream publishes over core NATS, with the acks matched
// by the Transport itself, instead of jetstream.PublishMsgAsync. The library
// makes a PubAckFuture per message (a map entry, a timer, two channels, a
// goroutine wakeup) and decodes every ack with encoding/json; the relay
// publishes batches and waits for the whole batch, so one round of a Publish
// call costs one map entry, one channel and one timer, and a positive ack is
// recognised by its first bytes. Measured: the NATS client's share of the
// relay's CPU in a burn-down (docs/benchmarks.md, "relay").
//
// Every message of a round is published with the reply subject
// <inbox>.<round>.<index>, under one wildcard subscription <inbox>.*.* per
// Transport. An answer for a round that is no longer waiting (it timed out,
// the connection dropped) is ignored. The semantics are jetstream's
// PublishMsgAsync with the options New used to give it:
//
//   - a publish ack, Duplicate or not: the message is stored (accepted);
//   - an error ack ({"error": {...}}): the *jetstream.APIError, classified;
//     an ack that is neither: jetstream.ErrInvalidJSAck (retried);
//   - "no responders" (no stream holds the subject, or it is not up yet):
//     published again after 250 ms, twice, then jetstream.ErrNoStreamResponse
//     (unavailable);
//   - no ack within a minute: jetstream.ErrAsyncPublishTimeout (unavailable);
//   - the connection drops (RECONNECTING or CLOSED) while acks are awaited:
//     natsgo.ErrDisconnected (unavailable): an ack cannot come any more;
//   - more than maxPending messages awaiting acks: a round waits up to
//     stallWait for room, then jetstream.ErrTooManyStalledMsgs (retried).
//
// The caller's context ends the wait too: what is not acked by then fails
// with relay.ErrUnavailable ("no publish ack").
const (
	ackTimeout      = time.Minute            // jetstream.WithPublishAsyncTimeout as New set it
	maxPending      = 1 << 15                // jetstream.WithPublishAsyncMaxPending as New set it
	stallWait       = 200 * time.Millisecond // jetstream's default stall wait
	noRespRetryWait = jetstream.DefaultPubRetryWait
	noRespRetries   = jetstream.DefaultPubRetryAttempts
)

// acker matches publish acks to the messages of the rounds waiting for them.
type acker struct {
	nc *natsgo.Conn

	mu      sync.Mutex
	sub     *natsgo.Subscription
	status  chan natsgo.Status
	prefix  string // <inbox>.
	next    uint64 // the last round's number
	rounds  map[uint64]*round
	pending int           // messages awaiting an ack, all rounds
	room    chan struct{} // closed when pending falls below maxPending; nil when no one waits
	down    chan struct{} // closed when the connection drops (then replaced)
	closed  bool
}

// round is one publish of some messages of a Publish call, awaiting their acks.
type round struct {
	res     []relay.Result // the Publish call's results, by message index
	waiting []bool         // by message index: published in this round, no answer yet
	left    int            // how many are waiting
	noResp  []int          // answered "no responders": published again
	done    chan struct{}  // closed when left reaches 0
}

// answer records message i's outcome (a.mu held).
func (a *acker) answer(r *round, i int, res relay.Result, noResp bool) {
	if i < 0 || i >= len(r.waiting) || !r.waiting[i] {
		return
	}
	r.waiting[i] = false
	if noResp {
		r.noResp = append(r.noResp, i)
	} else {
		r.res[i] = res
	}
	r.left--
	a.pending--
	if a.room != nil && a.pending < maxPending {
		close(a.room)
		a.room = nil
	}
	if r.left == 0 {
		close(r.done)
	}
}

// start subscribes to the inbox and watches the connection, once.
func (a *acker) start() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sub != nil {
		return nil
	}
	if a.closed {
		return natsgo.ErrConnectionClosed
	}
	prefix := a.nc.NewInbox() + "."
	sub, err := a.nc.Subscribe(prefix+"*.*", func(m *natsgo.Msg) { a.handle(m, prefix) })
	if err != nil {
		return err
	}
	a.prefix, a.sub = prefix, sub
	a.rounds = map[uint64]*round{}
	a.down = make(chan struct{})
	a.status = a.nc.StatusChanged(natsgo.RECONNECTING, natsgo.CLOSED)
	go a.watch(a.status)
	return nil
}

// watch fails the rounds waiting for acks whenever the connection drops:
// their acks, if any, are lost with it.
func (a *acker) watch(ch chan natsgo.Status) {
	drop := func() {
		a.mu.Lock()
		close(a.down)
		a.down = make(chan struct{})
		a.mu.Unlock()
	}
	for s := range ch {
		drop()
		if s == natsgo.CLOSED {
			return
		}
	}
	drop() // the listener was removed (Close)
}

// stop unsubscribes and stops watching (Transport.Close).
func (a *acker) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.sub == nil {
		return
	}
	_ = a.sub.Unsubscribe()
	a.nc.RemoveStatusListener(a.status) // ends watch, which fails the rounds waiting
}

// handle is the inbox subscription's handler: one answer of the stream.
func (a *acker) handle(m *natsgo.Msg, prefix string) {
	rn, i, ok := parseReply(m.Subject, prefix)
	if !ok {
		return
	}
	var res relay.Result
	noResp := len(m.Data) == 0 && m.Header.Get("Status") == "503"
	if !noResp {
		if err := parseAck(m.Data); err != nil {
			res = classify(err)
		}
	}
	a.mu.Lock()
	if r := a.rounds[rn]; r != nil {
		a.answer(r, i, res, noResp)
	}
	a.mu.Unlock()
}

// parseReply splits a reply subject <prefix><round>.<index>.
func parseReply(subject, prefix string) (rn uint64, i int, ok bool) {
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return 0, 0, false
	}
	s := subject[len(prefix):]
	k := 0
	for k < len(s) && s[k] != '.' {
		k++
	}
	if k == 0 || k >= len(s)-1 {
		return 0, 0, false
	}
	rn, err := strconv.ParseUint(s[:k], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	n, err := strconv.Atoi(s[k+1:])
	if err != nil {
		return 0, 0, false
	}
	return rn, n, true
}

// ackPrefix starts every positive publish ack: the server encodes its
// JSPubAckResponse with the error (omitted when nil) first and then the
// PubAck's fields, stream first.
var ackPrefix = []byte(`{"stream":"`)

// parseAck returns nil for a publish ack (Duplicate or not), the API error
// of an error ack, and jetstream.ErrInvalidJSAck for anything else: what
// jetstream's async publish makes of it. A positive ack is recognised by its
// first bytes; anything else is decoded.
func parseAck(data []byte) error {
	if bytes.HasPrefix(data, ackPrefix) && len(data) > len(ackPrefix) && data[len(ackPrefix)] != '"' {
		return nil
	}
	var pa struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
	}
	if err := json.Unmarshal(data, &pa); err != nil {
		return jetstream.ErrInvalidJSAck
	}
	if pa.Error != nil {
		return pa.Error
	}
	if pa.Stream == "" {
		return jetstream.ErrInvalidJSAck
	}
	return nil
}

// publish publishes msgs[i] for every i in idx (their subjects in subj) and
// waits for their acks; res gets each one's outcome.
func (t *Transport) publish(ctx context.Context, msgs []relay.Message, subj []string, idx []int, res []relay.Result) {
	a := &t.ack
	if err := a.start(); err != nil {
		for _, i := range idx {
			res[i] = classify(fmt.Errorf("nats: error creating async reply handler: %w", err))
		}
		return
	}
	deadline := time.NewTimer(ackTimeout)
	defer deadline.Stop()
	h := make(natsgo.Header, 16)
	vals := make([]string, 0, 16)
	var reply []byte
	for attempt := 0; len(idx) > 0; attempt++ {
		r := &round{res: res, waiting: make([]bool, len(msgs)), done: make(chan struct{})}
		// room for the round (flow control, as jetstream's max pending)
		var stall *time.Timer
		a.mu.Lock()
		for a.pending >= maxPending {
			if a.room == nil {
				a.room = make(chan struct{})
			}
			room := a.room
			a.mu.Unlock()
			if stall == nil {
				stall = time.NewTimer(stallWait)
			}
			select {
			case <-room:
			case <-stall.C:
				for _, i := range idx {
					res[i] = classify(jetstream.ErrTooManyStalledMsgs)
				}
				return
			}
			a.mu.Lock()
		}
		if stall != nil {
			stall.Stop()
		}
		a.next++
		rn := a.next
		for _, i := range idx {
			r.waiting[i] = true
		}
		r.left = len(idx)
		a.pending += len(idx)
		a.rounds[rn] = r
		down := a.down
		a.mu.Unlock()

		reply = append(reply[:0], a.prefix...)
		reply = strconv.AppendUint(reply, rn, 10)
		reply = append(reply, '.')
		base := len(reply)
		var nm natsgo.Msg
		for _, i := range idx {
			reply = strconv.AppendInt(reply[:base], int64(i), 10)
			vals = publishHeader(h, vals[:0], &msgs[i])
			nm = natsgo.Msg{Subject: subj[i], Reply: string(reply), Data: msgs[i].Payload, Header: h}
			if err := t.nc.PublishMsg(&nm); err != nil {
				a.mu.Lock()
				a.answer(r, i, classify(err), false)
				a.mu.Unlock()
			}
		}

		var end *relay.Result // why the wait ended early
		select {
		case <-r.done:
		case <-ctx.Done():
			end = &relay.Result{Err: relay.UnavailableError(fmt.Errorf("nats: no publish ack: %w", ctx.Err()))}
		case <-down:
			e := classify(natsgo.ErrDisconnected)
			end = &e
		case <-deadline.C:
			e := classify(jetstream.ErrAsyncPublishTimeout)
			end = &e
		}
		a.mu.Lock()
		delete(a.rounds, rn)
		if end != nil {
			for _, i := range idx {
				if r.waiting[i] {
					a.answer(r, i, *end, false)
				}
			}
		}
		noResp := r.noResp
		a.mu.Unlock()

		idx = noResp
		switch {
		case len(idx) == 0:
			return
		case end != nil:
			// answered "no responders", to be published again: the wait ended first
			for _, i := range idx {
				res[i] = *end
			}
			return
		case attempt >= noRespRetries:
			for _, i := range idx {
				res[i] = classify(jetstream.ErrNoStreamResponse)
			}
			return
		case ctxsleep.Sleep(ctx, noRespRetryWait) != nil:
			for _, i := range idx {
				res[i] = relay.Result{Err: relay.UnavailableError(fmt.Errorf("nats: no publish ack: %w", ctx.Err()))}
			}
			return
		}
	}
}
