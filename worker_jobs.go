package pgsweep

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep/internal/consumer"
)

// job is one message the Worker holds.
type job struct {
	d      Delivery        // the loop's copy
	hd     Delivery        // the handler's copy: what it does to it is no concern of the loop
	ctx    context.Context // the handler's: its cancellation and its span
	cancel context.CancelFunc
	span   trace.Span // "process <queue>" (worker_tracing.go)
	state  jobState
	lost   bool // the lease is gone (or given back): the result is discarded
	// expires is when the handler must have stopped if the lease is not
	// renewed, in Unix nanoseconds: the start of the claim or renewal that
	// set it plus four fifths of the lease (leaseDeadline). The database's
	// expiry is later (it counts from when the statement runs, and the last
	// fifth is a margin), so a lease past this time is presumed lost, and
	// its handler is cancelled while the lease still holds: a handler that
	// honours its context has stopped before another worker can take the
	// message over -- or, in a lane, the message after it. Atomic: the
	// watchdog reads it.
	expires atomic.Int64
}

func (j *job) setExpires(t time.Time) { j.expires.Store(t.UnixNano()) }

// leaseDeadline is when a handler whose lease was set at start must have
// stopped if the lease is not renewed: a fifth of the lease before it
// expires. Renewals come every third of the lease, so a lease renewed on
// time never gets there; the watchdog checks every tenth of it, so it
// cancels the handler at least a tenth of the lease before the expiry.
func leaseDeadline(start time.Time, lease time.Duration) time.Time {
	return start.Add(lease - lease/5)
}
func (j *job) expiredAt(now time.Time) bool { return now.UnixNano() > j.expires.Load() }

type jobState int

const (
	jobQueued  jobState = iota // claimed, waiting for a free handler
	jobRunning                 // its handler runs
	jobDone                    // its handler returned; the result waits for a flush
)

type result struct {
	j   *job
	err error
	// last: the last result of its handler call (every result of a
	// Handler's; the last of a BatchHandler's batch). The loop counts the
	// calls running by it.
	last bool
}

// claim claims up to n messages and queues them; it returns how many came.
func (l *loop) claim(n int) (int, error) {
	ctx, cancel := context.WithTimeout(l.base, l.claimWait)
	defer cancel()
	start := time.Now()
	ds, err := l.w.client.Claim(ctx, l.o.Queue, l.o.Owner, n, l.o.Lease)
	l.claimCut(ctx, err)
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// claimCut sets how long the next claim may take. A claim cut at its
// deadline closes its connection (pgx cancels the statement and drops the
// connection), so the next one starts cold: a new backend, and on Citus a
// new connection from the coordinator to the worker and the function
// compiled again there. On a loaded machine a cold claim can take longer
// than a warm one's deadline, and be cut again, for ever (seen in the Citus
// tier: 1,132 claims cut in three minutes and nothing claimed). So each cut
// doubles the next claim's time, up to maxClaimWait, and a claim that
// returns resets it to the lease.
func (l *loop) claimCut(ctx context.Context, err error) {
	switch {
	case err == nil:
		l.claimWait = leaseWait(l.o.Lease)
	case ctx.Err() == context.DeadlineExceeded && l.base.Err() == nil:
		l.claimWait = min(2*l.claimWait, max(maxClaimWait, leaseWait(l.o.Lease)))
		l.w.log.Warn("claim cut at its deadline; the next claim may take longer", "next_wait", l.claimWait)
	}
}

// maxClaimWait bounds how long a claim may take after claims were cut.
const maxClaimWait = 30 * time.Second

// take queues claimed deliveries; start is when the claim was sent.
func (l *loop) take(ds []Delivery, start time.Time) {
	l.o.Hooks.call(l.o.Hooks.Claimed, l.o.Queue, len(ds))
	lost := 0
	off := false // the tracer is a no-op (noopSpanOf): no spans for the rest of the claim
	opts := claimOpts(start)
	for i := range ds {
		if old := l.held[ds[i].ID]; old != nil && l.lose(old) {
			// Our own lease on it expired and this claim took it again. The
			// old attempt's token is stale: whatever it sends acts on
			// nothing. Losing it here cancels its handler now rather than at
			// the next renewal, and keeps one job per message.
			lost++
		}
		jctx, jcancel := context.WithCancel(l.handlers)
		var span trace.Span
		if off {
			jctx, span = ExtractTrace(jctx, ds[i].Headers), noSpan
		} else {
			jctx, span = l.w.startProcess(jctx, &ds[i], opts)
			off = noopSpanOf(span, ds[i].Headers)
		}
		j := &job{d: ds[i], ctx: jctx, cancel: jcancel, span: span}
		j.setExpires(leaseDeadline(start, l.o.Lease))
		l.held[j.d.ID] = j
		l.queue = append(l.queue, j)
		l.watch(j)
	}
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, lost)
	l.w.signals.Claimed.Signal(len(ds))
	if l.w.observe != nil {
		l.w.observe(len(l.held) + l.zombies)
	}
}

// start runs queued messages while handlers are free: each one on its own
// (Handler), or all that wait as one batch (BatchHandler).
func (l *loop) start() {
	var handed []*job
	for l.running < l.o.Concurrency && len(l.queue) > 0 {
		j := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if j.expiredAt(time.Now()) {
			// Its lease ran (nearly) out while it waited, say while the loop
			// was stuck in a slow call: another worker may take the message
			// at any moment, so it is not started.
			if l.lose(j) {
				l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, 1)
			}
			continue
		}
		j.state = jobRunning
		j.hd = j.d
		handed = append(handed, j)
		if l.w.bh == nil {
			l.running++
		}
	}
	if len(handed) > 0 {
		l.pool.mu.Lock()
		if l.w.bh != nil {
			l.running++
			l.pool.batches = append(l.pool.batches, handed)
		} else {
			l.pool.ready = append(l.pool.ready, handed...)
		}
		l.more()
		l.pool.mu.Unlock()
	}
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go
	}
}

// handlerPool runs the handlers: goroutines that take the jobs the loop
// hands out (ready) one after the other and leave their results for the
// loop in one slice; a goroutine tells the loop (notify) when it finds no
// job left to take, or FlushInterval after a result it left untold. A goroutine that takes a job while more wait wakes
// (or starts) one more, one at a time, so slow handlers run up to
// Concurrency at once while fast ones are run by a few goroutines without
// a goroutine start, wake-up and channel send per message. At most
// Concurrency goroutines; those without a job wait until Run returns.
type handlerPool struct {
	mu       sync.Mutex
	ready    []*job   // handed out by the loop, not taken yet
	batches  [][]*job // the same for a BatchHandler: one batch each
	results  []result // finished, not taken by the loop yet
	idle     int      // goroutines waiting for a job that no wake is meant for
	starting bool     // a goroutine woken or started has not taken its job yet
	total    int
	later    bool          // results wait that the loop will be told of by a timer
	wake     chan struct{} // one token per goroutine woken; capacity Concurrency
	notify   chan struct{} // capacity 1: results wait for the loop
}

// more wakes or starts one goroutine for the jobs that wait, unless one is
// already on its way. l.pool.mu is held.
func (l *loop) more() {
	p := &l.pool
	if p.starting || (len(p.ready) == 0 && len(p.batches) == 0) {
		return
	}
	switch {
	case p.idle > 0:
		p.idle--
		p.wake <- struct{}{}
	case p.total < l.o.Concurrency:
		p.total++
		go l.handle()
	default:
		return // all busy: they take the jobs as they finish
	}
	p.starting = true
}

// handle is one handler goroutine (see handlerPool).
func (l *loop) handle() {
	p := &l.pool
	p.mu.Lock()
	p.starting = false // this goroutine was the one on its way
	for {
		for len(p.ready) == 0 && len(p.batches) == 0 {
			p.idle++
			p.mu.Unlock()
			select {
			case <-p.wake:
			case <-l.done:
				return
			}
			p.mu.Lock()
			p.starting = false
		}
		select {
		case <-l.done: // Run returned (a crash, the deadline): start nothing more
			p.mu.Unlock()
			return
		default:
		}
		if len(p.batches) > 0 {
			js := p.batches[0]
			p.batches[0] = nil
			p.batches = p.batches[1:]
			l.more()
			p.mu.Unlock()
			bctx, bspan := l.w.startBatch(l.handlers, js)
			errs := l.w.callBatch(bctx, js)
			endBatch(bspan, errs)
			p.mu.Lock()
			for i, j := range js {
				p.results = append(p.results, result{j: j, err: errs[i], last: i == len(js)-1})
			}
		} else {
			j := p.ready[0]
			p.ready[0] = nil
			p.ready = p.ready[1:]
			l.more()
			p.mu.Unlock()
			err := l.w.call(j.ctx, &j.hd)
			p.mu.Lock()
			p.results = append(p.results, result{j: j, err: err, last: true})
			if len(p.ready) > 0 {
				// It takes the next job at once: the loop is told when a
				// goroutine runs out of jobs, or FlushInterval after the
				// first result nobody was told of, not once per message.
				if !p.later {
					p.later = true
					time.AfterFunc(l.o.FlushInterval, p.poke)
				}
				continue
			}
		}
		p.poke()
	}
}

// poke tells the loop that results wait.
func (p *handlerPool) poke() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// takeResults returns the results that wait.
func (l *loop) takeResults() []result {
	l.pool.mu.Lock()
	defer l.pool.mu.Unlock()
	rs := l.pool.results
	l.pool.results = nil
	l.pool.later = false
	return rs
}

// accept records a handler's result.
func (l *loop) accept(r result) {
	if r.last {
		l.running--
	}
	j := r.j
	// The watchdog cancelled a handler whose lease expired: its result is
	// most likely that cancellation, and the lease is presumed lost.
	if !j.lost && j.ctx.Err() != nil && j.expiredAt(time.Now()) && l.lose(j) {
		l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, 1)
	}
	j.cancel()
	l.unwatch(j)
	if j.lost {
		l.zombies--
		return
	}
	handlerEnded(j.span, r.err)
	j.state = jobDone
	l.pending++
	l.results.Add(resultKey(j.d.Token, r.err), j.d.ID)
}

// lanesMoving reports whether a result waiting for its flush (a held job
// that is done) is a lane's message: completing it moves its lane on, and
// so may failing it (its last attempt dead-letters it, and with lane_dead
// move_on, the default, the lane goes on; a failure that is retried moves
// nothing, and then a claim more is all it costs).
func (l *loop) lanesMoving() bool {
	for _, j := range l.held {
		if j.state == jobDone && j.d.Lane != "" {
			return true
		}
	}
	return false
}

// acceptReady accepts every result that is ready without waiting.
func (l *loop) acceptReady() {
	for _, r := range l.takeResults() {
		l.accept(r)
	}
}

// lose marks j's lease lost: its handler is cancelled and its result, now or
// later, discarded. It reports whether j was not lost before; the caller
// counts those for the LeasesLost hook.
func (l *loop) lose(j *job) bool {
	if j.lost {
		return false
	}
	l.drop(j, "lease_lost")
	switch j.state {
	case jobQueued:
		l.queue = slices.DeleteFunc(l.queue, func(x *job) bool { return x == j })
	case jobRunning:
		l.zombies++
	case jobDone:
		// Its result waits for a flush: it is not sent (and not counted
		// twice as lost).
		l.pending--
		l.results.Forget(j.d.Token, j.d.ID)
	}
	return true
}

// drop marks j lost and lets it go: its context is cancelled and it is no
// longer held or watched; its span ends with event. lose also takes it out
// of wherever it waits.
func (l *loop) drop(j *job, event string) {
	endProcess(j.span, event)
	j.lost = true
	j.cancel()
	l.unwatch(j)
	if l.held[j.d.ID] == j {
		delete(l.held, j.d.ID)
	}
}

// settle forgets ids whose results were sent (or refused); their spans end
// with event.
func (l *loop) settle(ids []int64, event string) {
	for _, id := range ids {
		if j := l.held[id]; j != nil {
			endProcess(j.span, event)
		}
		delete(l.held, id)
	}
	l.pending -= len(ids)
}

// resultKey is the call that records a handler's result err for a message
// held under tok: complete (nil), fail (with RetryAfter's delay), dead
// letter (Permanent) or release (GiveBack).
func resultKey(tok Token, err error) consumer.Key[Token] {
	k := consumer.Key[Token]{Token: tok}
	if err == nil {
		return k
	}
	k.Kind, k.Text = consumer.Fail, err.Error()
	var ra *retryAfterError
	var oe *outcomeError
	switch {
	case errors.As(err, &ra):
		k.After, k.Fixed = ra.after, true
	case errors.As(err, &oe):
		k.Kind = oe.kind
		if k.Kind == consumer.Release {
			k.Text = ""
		}
	}
	return k
}
