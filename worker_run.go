package pgsweep

import (
	"context"
	"errors"
	"slices"
	"time"
)

// job is one message the Worker holds.
type job struct {
	d      Delivery
	ctx    context.Context
	cancel context.CancelFunc
	state  jobState
	lost   bool // the lease is gone (or given back): the result is discarded
	// expires is when the lease surely ends if it is not renewed: the start
	// of the claim or renewal that set it plus the lease. The database's
	// expiry is later (it starts counting when the statement runs), so a
	// lease past this time is presumed lost while renewals fail.
	expires time.Time
}

type jobState int

const (
	jobQueued  jobState = iota // claimed, waiting for a free handler
	jobRunning                 // its handler runs
	jobDone                    // its handler returned; the result waits for a flush
)

type result struct {
	j   *job
	err error
}

// failKey groups failures that are sent in one fail call.
type failKey struct {
	msg   string
	after time.Duration
	fixed bool // after is the handler's RetryAfter, not the queue's backoff
}

// loop is the state of one Run. Only Run's goroutine touches it; handler
// goroutines talk to it through results.
type loop struct {
	w    *Worker
	o    WorkerOptions
	base context.Context // database calls; cancelled at the shutdown deadline
	// abandon cancels base.
	abandon context.CancelFunc
	// handlers is the parent of the handlers' contexts. It is cancelled
	// after the deadline only once the results that came before it are
	// taken, so that a handler that returns because it was cancelled is not
	// mistaken for a failure.
	handlers       context.Context
	cancelHandlers context.CancelFunc

	held    map[int64]*job // every message held: queued, running or done
	queue   []*job         // claimed, not yet started, oldest first (may hold lost jobs: skipped)
	running int            // handler goroutines, including those of lost jobs
	zombies int            // running handlers of lost jobs: they still hold memory
	results chan result    // one per handler; capacity Concurrency, so a send never blocks for long

	acks     []int64
	fails    map[failKey][]int64
	pending  int  // results waiting for a flush
	flushErr bool // the last flush failed: retry on the timer, not at once
	// flushBackoff is the wait before retrying a failed flush: 50ms
	// doubling to 5s, whatever PollInterval is (results wait in memory).
	flushBackoff time.Duration
}

// Run works the queue until ctx is cancelled, then stops claiming, gives back
// the messages it claimed but did not start (see Client.Release), waits up
// to ShutdownTimeout for running handlers, sends their results, and returns
// nil. Database errors are logged and retried; they do not stop Run. An
// invalid-argument error (such as an unknown queue) does: Run returns it at
// once. A handler that ignores its cancelled context may outlive Run; its
// result is discarded. Run may not be called again while it runs.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("pgsweep: worker: Run is already running; start another Worker instead")
	}
	defer w.running.Store(false)
	o := w.o
	if o.Lease == 0 {
		lease, err := w.queueLease(ctx)
		if err != nil || lease == 0 {
			return err
		}
		o.Lease = lease
	}
	// Handlers, database calls and the final flush outlive ctx: they run
	// on a context of their own that is cancelled only at the deadline.
	base, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	handlers, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	l := &loop{
		w: w, o: o, base: base, abandon: abandon, handlers: handlers, cancelHandlers: cancelHandlers,
		held:    make(map[int64]*job, o.Batch),
		results: make(chan result, o.Concurrency),
		fails:   map[failKey][]int64{},
	}
	wake := make(chan struct{}, 1)
	if w.connect != nil {
		lctx, stopListen := context.WithCancel(base)
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.listen(lctx, wake)
		}()
		defer func() {
			stopListen()
			<-done
		}()
	}
	return l.run(ctx, wake)
}

// queueLease reads the queue's lease_default, retrying database errors
// until ctx ends (then it returns 0 and nil).
func (w *Worker) queueLease(ctx context.Context) (time.Duration, error) {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, w.o.PollInterval) {
		var lease time.Duration
		err := w.client.db.QueryRow(ctx, "SELECT lease_default FROM "+w.client.fn("_queue_get")+"($1)", w.o.Queue).Scan(&lease)
		if err == nil {
			return lease, nil
		}
		err = wrapErr("lease_default", err)
		if errors.Is(err, ErrInvalidArgument) {
			return 0, err
		}
		w.log.Error("reading the queue's lease_default failed; will retry", "err", err)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(backoff):
		}
	}
}

func (l *loop) run(ctx context.Context, wake <-chan struct{}) error {
	o := l.o
	renewTick := time.NewTicker(o.Lease / 3)
	defer renewTick.Stop()
	flushTimer := time.NewTimer(time.Hour)
	flushTimer.Stop()
	flushArmed := false
	idleTimer := time.NewTimer(time.Hour)
	idleTimer.Stop()
	idle := false
	claimBackoff := time.Duration(0)
	stop := ctx.Done()
	var deadline <-chan struct{} // base.Done(), once stopping
	stopping := false

	for {
		// after handles the outcome of a claim of n that brought got.
		after := func(n, got int, err error) error {
			switch {
			case errors.Is(err, ErrInvalidArgument):
				// An unknown queue or a bad option: retrying cannot help.
				l.abandon()
				return err
			case err != nil:
				l.w.log.Error("claim failed", "err", err)
				claimBackoff = min(max(2*claimBackoff, 100*time.Millisecond), o.PollInterval)
				idle = true
				idleTimer.Reset(claimBackoff)
			default:
				claimBackoff = 0
				if got < n {
					idle = true
					idleTimer.Reset(o.PollInterval)
				}
			}
			return nil
		}
		// Claim when at most half a batch is held, so claims overlap with
		// running handlers and memory stays within one batch.
		if !stopping && !idle && len(l.held)+l.zombies <= o.Batch/2 {
			n := o.Batch - len(l.held) - l.zombies
			got, err := l.claim(n)
			if err := after(n, got, err); err != nil {
				return err
			}
		}
		if !stopping {
			l.start()
		}
		if stopping && len(l.held) == 0 {
			return nil
		}
		// Flush at once when every held message has its result (nothing else
		// to wait for); otherwise within FlushInterval, so that slow handlers
		// do not hold back the completions of fast ones. When all of them
		// succeeded and the worker would claim next anyway, the completion
		// and the next claim go in one round trip.
		if !l.flushErr && l.pending > 0 && l.pending == len(l.held) {
			if !stopping && !idle && len(l.fails) == 0 {
				n := o.Batch - l.zombies
				got, err := l.completeAndClaim(n)
				if err := after(n, got, err); err != nil {
					return err
				}
			} else {
				l.flush(l.base)
			}
			continue
		}
		if l.pending > 0 && !flushArmed {
			if l.flushErr {
				l.flushBackoff = min(max(2*l.flushBackoff, 50*time.Millisecond), 5*time.Second)
				flushTimer.Reset(l.flushBackoff)
			} else {
				flushTimer.Reset(o.FlushInterval)
			}
			flushArmed = true
		}

		select {
		case r := <-l.results:
			l.accept(r)
			l.acceptReady() // one flush for all that finished together
		case <-flushTimer.C:
			flushArmed = false
			l.flush(l.base)
		case <-wake:
			idle = false
		case <-idleTimer.C:
			idle = false
		case <-renewTick.C:
			l.renew()
		case <-stop:
			stop = nil // fires once; a closed channel would spin the loop
			stopping = true
			deadline = l.base.Done()
			// The deadline cancels base even while the loop waits on the
			// database, so no call outlives it.
			t := time.AfterFunc(o.ShutdownTimeout, l.abandon)
			defer t.Stop()
			l.w.log.Info("worker stopping", "held", len(l.held))
			l.releaseQueued()
		case <-deadline:
			// Abandon: send what finished, cancel the rest and leave them
			// to lease expiry.
			l.acceptReady()
			l.cancelHandlers()
			for _, j := range l.held {
				if j.state != jobDone {
					l.lose(j)
				}
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			l.flush(fctx)
			cancel()
			l.w.log.Warn("shutdown deadline passed; leases abandoned to expiry", "held", len(l.held))
			return nil
		case <-l.w.crash:
			l.abandon()
			l.cancelHandlers()
			return nil
		}
	}
}

// callTimeout cuts a database call that hangs (a dead connection). It is
// generous on purpose: a call cut while the server runs it leaves its outcome
// unknown -- a completion may have committed -- so cutting early would make
// the counts reported to Hooks wrong without saving anything.
const callTimeout = time.Minute

// call returns a context for one database call: it ends at the shutdown
// deadline (base) or after callTimeout.
func (l *loop) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.base, callTimeout)
}

// claim claims up to n messages and queues them; it returns how many came.
func (l *loop) claim(n int) (int, error) {
	ctx, cancel := l.call()
	defer cancel()
	start := time.Now()
	ds, err := l.w.client.Claim(ctx, l.o.Queue, l.o.Owner, n, l.o.Lease)
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// take queues claimed deliveries; start is when the claim was sent.
func (l *loop) take(ds []Delivery, start time.Time) {
	l.o.Hooks.call(l.o.Hooks.Claimed, l.o.Queue, len(ds))
	lost := 0
	for i := range ds {
		if old := l.held[ds[i].ID]; old != nil {
			// Our own lease on it expired and this claim took it again: the
			// owner is the same, so only we can fence the old attempt off.
			l.lose(old)
			lost++
		}
		jctx, jcancel := context.WithCancel(l.handlers)
		j := &job{d: ds[i], ctx: jctx, cancel: jcancel, expires: start.Add(l.o.Lease)}
		l.held[j.d.ID] = j
		l.queue = append(l.queue, j)
	}
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, lost)
	if l.w.observe != nil {
		l.w.observe(len(l.held) + l.zombies)
	}
}

// completeAndClaim completes every held message (all finished without
// error) and claims up to n more in one round trip. When it fails without
// completing anything, the completions wait for the next flush.
func (l *loop) completeAndClaim(n int) (int, error) {
	ctx, cancel := l.call()
	defer cancel()
	start := time.Now()
	done, ds, err := l.w.client.CompleteAndClaim(ctx, l.o.Queue, l.o.Owner, l.acks, n, l.o.Lease)
	if err != nil && done == nil {
		l.flushErr = true
		return 0, err
	}
	l.o.Hooks.call(l.o.Hooks.Completed, l.o.Queue, len(done))
	l.o.Hooks.call(l.o.Hooks.LeasesLost, l.o.Queue, len(l.acks)-len(done))
	l.settle(l.acks)
	l.acks = l.acks[:0]
	l.flushBackoff = 0
	if err != nil {
		return 0, err
	}
	l.take(ds, start)
	return len(ds), nil
}

// start runs queued messages while handlers are free.
func (l *loop) start() {
	for l.running < l.o.Concurrency && len(l.queue) > 0 {
		j := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if j.lost {
			continue
		}
		j.state = jobRunning
		l.running++
		go func() { l.results <- result{j, l.w.call(j)} }()
	}
	if len(l.queue) == 0 {
		l.queue = nil // let the backing array go
	}
}

// accept records a handler's result.
func (l *loop) accept(r result) {
	l.running--
	j := r.j
	j.cancel()
	if j.lost {
		l.zombies--
		return
	}
	j.state = jobDone
	l.pending++
	if r.err == nil {
		l.acks = append(l.acks, j.d.ID)
		return
	}
	k := failKey{msg: r.err.Error()}
	var ra *retryAfterError
	if errors.As(r.err, &ra) {
		k.after, k.fixed = ra.after, true
	}
	l.fails[k] = append(l.fails[k], j.d.ID)
}

// acceptReady accepts every result that is ready without waiting.
func (l *loop) acceptReady() {
	for {
		select {
		case r := <-l.results:
			l.accept(r)
		default:
			return
		}
	}
}

// lose marks j's lease lost: its handler is cancelled and its result, now or
// later, discarded. The caller counts it for the LeasesLost hook.
func (l *loop) lose(j *job) {
	if j.lost {
		return
	}
	j.lost = true
	j.cancel()
	if l.held[j.d.ID] == j {
		delete(l.held, j.d.ID)
	}
	switch j.state {
	case jobRunning:
		l.zombies++
	case jobDone:
		l.pending--
		id := j.d.ID
		l.acks = slices.DeleteFunc(l.acks, func(x int64) bool { return x == id })
		for k, ids := range l.fails {
			if ids = slices.DeleteFunc(ids, func(x int64) bool { return x == id }); len(ids) == 0 {
				delete(l.fails, k)
			} else {
				l.fails[k] = ids
			}
		}
	}
}

// settle forgets ids whose results were sent (or dropped).
func (l *loop) settle(ids []int64) {
	for _, id := range ids {
		delete(l.held, id)
	}
	l.pending -= len(ids)
}

// flush sends the results that wait: one complete for all successes, one
// fail per error text. A failed call is retried on the next flush (after a
// backoff); a call
// the database refuses as invalid is not (retrying cannot help): those
// messages are left to lease expiry and redelivery.
func (l *loop) flush(ctx context.Context) {
	o := l.o
	l.flushErr = false
	if len(l.acks) > 0 {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		done, err := l.w.client.Complete(cctx, o.Queue, o.Owner, l.acks)
		cancel()
		switch {
		case errors.Is(err, ErrInvalidArgument):
			l.w.log.Error("complete refused; leaving the messages to lease expiry", "err", err, "n", len(l.acks))
			l.settle(l.acks)
			l.acks = l.acks[:0]
		case err != nil:
			l.w.log.Error("complete failed; will retry", "err", err, "n", len(l.acks))
			l.flushErr = true
		default:
			o.Hooks.call(o.Hooks.Completed, o.Queue, len(done))
			o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(l.acks)-len(done))
			l.settle(l.acks)
			l.acks = l.acks[:0]
		}
	}
	for k, ids := range l.fails {
		var after *time.Duration
		if k.fixed {
			after = &k.after
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		res, err := l.w.client.fail(cctx, o.Queue, o.Owner, ids, k.msg, after)
		cancel()
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
		ctx, cancel := l.call()
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
				if kept[id] {
					j.expires = start.Add(o.Lease)
				} else {
					l.lose(j)
					lost++
				}
			}
		}
	}
	now := time.Now()
	for _, j := range l.held {
		if j.state != jobDone && now.After(j.expires) {
			l.w.log.Warn("lease expired while renewals failed; cancelling the handler", "id", j.d.ID)
			l.lose(j)
			lost++
		}
	}
	o.Hooks.call(o.Hooks.LeasesLost, o.Queue, lost)
}

// releaseQueued gives back the messages claimed but not started, at the
// start of shutdown: they are due again at once, with their attempt back.
func (l *loop) releaseQueued() {
	var ids []int64
	for _, j := range l.queue {
		if !j.lost {
			j.lost = true
			j.cancel()
			delete(l.held, j.d.ID)
			ids = append(ids, j.d.ID)
		}
	}
	l.queue = nil
	if len(ids) == 0 {
		return
	}
	ctx, cancel := l.call()
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
