package pgsweep

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgsweep/pgsweep/internal/consumer"
)

// loop is the state of one Run. Only Run's goroutine touches it; handler
// goroutines talk to it through results, and the watchdog only reads job
// expiries and cancels handler contexts.
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
	queue   []*job         // claimed, not yet started, oldest first
	running int            // handler goroutines, including those of lost jobs
	zombies int            // running handlers of lost jobs: they still hold memory
	pool    handlerPool    // runs the handlers; their results wait there
	done    chan struct{}  // closed when Run returns: waiting handler goroutines end

	results  consumer.Results[Token] // waiting for a flush: one call per claim token and outcome
	store    consumer.Store[Token]   // sends them
	pipeline bool                    // the client can complete and claim in one round trip
	pending  int                     // results waiting for a flush
	flushErr bool                    // the last flush failed: retry on the timer, not at once
	// flushBackoff is the wait before retrying a failed flush: 50ms
	// doubling to 5s, whatever PollInterval is (results wait in memory).
	flushBackoff consumer.Backoff
	// claimWait is how long the next claim may take: the lease, longer
	// after claims were cut at their deadline (claimCut).
	claimWait time.Duration

	// watched is what the watchdog checks: the held jobs without a result.
	watchMu sync.Mutex
	watched map[*job]struct{}
}

// Run works the queue until ctx is cancelled, then stops claiming, gives back
// the messages it claimed but did not start (see Client.Release), waits up
// to ShutdownTimeout for running handlers, sends their results, and returns
// nil. The deadline counts from the cancellation and also cuts a database
// call in flight; the final flush and closing the LISTEN connection may add
// up to 10 seconds. Database errors are logged and retried; they do not stop
// Run. An invalid-argument error (such as an unknown queue) does: Run returns
// it at once. A handler that ignores its cancelled context may outlive Run;
// its result is discarded. Run may not be called again while it runs.
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
	// on contexts of their own that are cancelled only at the deadline.
	base, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	handlers, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	// The deadline starts when ctx is cancelled, even while the loop waits
	// on the database, and cancels that call too.
	var deadlineMu sync.Mutex
	var deadline *time.Timer
	stopDeadline := context.AfterFunc(ctx, func() {
		deadlineMu.Lock()
		defer deadlineMu.Unlock()
		deadline = time.AfterFunc(o.ShutdownTimeout, abandon)
	})
	defer func() {
		stopDeadline()
		deadlineMu.Lock()
		defer deadlineMu.Unlock()
		if deadline != nil {
			deadline.Stop()
		}
	}()
	l := &loop{
		w: w, o: o, base: base, abandon: abandon, handlers: handlers, cancelHandlers: cancelHandlers,
		held:         map[int64]*job{},
		pool:         handlerPool{wake: make(chan struct{}, o.Concurrency), notify: make(chan struct{}, 1)},
		done:         make(chan struct{}),
		store:        w.client.ConsumerStore(o.Queue),
		pipeline:     w.client.canPipeline(),
		flushBackoff: consumer.Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second},
		claimWait:    leaseWait(o.Lease),
		watched:      map[*job]struct{}{},
	}
	defer close(l.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, stopWatch := context.WithCancel(base)
	defer stopWatch()
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.watchdog(wctx)
	}()
	if w.connect != nil {
		lctx, stopListen := context.WithCancel(base)
		defer stopListen()
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.listen(lctx)
		}()
	}
	err := l.run(ctx, w.wake)
	for _, j := range l.held { // left to lease expiry: their results are discarded
		endProcess(j.span, "abandoned")
	}
	return err
}

// queueLease reads the queue's lease_default, retrying database errors
// until ctx ends (then it returns 0 and nil). An unknown queue or a role
// without consume on it (queue_info, queue_rights.sql) is returned at once.
func (w *Worker) queueLease(ctx context.Context) (time.Duration, error) {
	backoff := consumer.Backoff{Min: 100 * time.Millisecond, Max: w.o.PollInterval}
	for {
		var lease time.Duration
		err := w.client.db.QueryRow(ctx, "SELECT lease_default FROM "+w.client.fn("queue_info")+"($1)", w.o.Queue).Scan(&lease)
		if err == nil {
			return lease, nil
		}
		err = wrapErr("lease_default", err)
		if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrPermissionDenied) {
			return 0, err
		}
		w.log.Error("reading the queue's lease_default failed; will retry", "err", err)
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(backoff.Next()):
		}
	}
}

func (l *loop) run(ctx context.Context, wake <-chan struct{}) error {
	o := l.o
	// Lease and Batch are checked by the SQL: the first claim returns its
	// ErrInvalidArgument, and Run returns it. Until then (a database that
	// is down at the start), a lease out of range must not break the timers.
	renewTick := time.NewTicker(max(o.Lease/3, 100*time.Millisecond))
	defer renewTick.Stop()
	flushTimer := time.NewTimer(time.Hour)
	flushTimer.Stop()
	flushArmed := false
	idleTimer := time.NewTimer(time.Hour)
	idleTimer.Stop()
	idle := false
	claimBackoff := consumer.Backoff{Min: 100 * time.Millisecond, Max: o.PollInterval}
	stop := ctx.Done()
	var deadline <-chan struct{} // base.Done(), once stopping
	stopping := false
	beginStop := func() {
		stop = nil // fires once; a closed channel would spin the loop
		stopping = true
		deadline = l.base.Done()
		l.w.log.Info("worker stopping", "held", len(l.held))
		l.releaseQueued()
	}
	// limit caps a claim of n by ClaimLimit; 0 starts an idle spell (the
	// handler's downstream is down: ask again after PollInterval).
	// A Batch out of range is not capped: the claim takes it to the SQL,
	// which refuses it.
	limit := func(n int) (int, bool) {
		if o.ClaimLimit != nil {
			if lim := o.ClaimLimit(); lim < n {
				if n = lim; n <= 0 {
					idle = true
					idleTimer.Reset(o.PollInterval)
					return 0, false
				}
			}
		}
		return n, true
	}
	// after handles the outcome of a claim of n that brought got.
	after := func(n, got int, err error) error {
		o.Hooks.database(o.Queue, err)
		switch {
		case errors.Is(err, ErrInvalidArgument):
			// An unknown queue or a bad option: retrying cannot help.
			l.abandon()
			return err
		case err != nil:
			l.w.log.Error("claim failed", "err", err)
			idle = true
			idleTimer.Reset(claimBackoff.Next())
		default:
			claimBackoff.Reset()
			// A claim made while idle (after lane messages, see flush
			// below) that came back full ends the idle spell.
			idle = got < n
			if idle {
				idleTimer.Reset(o.PollInterval)
			}
		}
		return nil
	}

	// flush sends the results that wait; one that completed or failed lane
	// messages ends an idle spell (see "Completing a lane's message" below).
	flush := func() {
		moved := !stopping && ctx.Err() == nil && l.lanesMoving()
		l.flush(l.base)
		if moved && !l.flushErr {
			idle = false
		}
	}

	for {
		if !stopping && ctx.Err() != nil {
			beginStop() // before claiming a batch only to give it back
		}
		// Claim when at most half a batch is held, so claims overlap with
		// running handlers and memory stays within one batch (and when
		// nothing is held: a Batch the SQL refuses is refused at once).
		if held := len(l.held) + l.zombies; !stopping && !idle && (held == 0 || held <= o.Batch/2) {
			if n, ok := limit(o.Batch - len(l.held) - l.zombies); ok {
				got, err := l.claim(n)
				if err := after(n, got, err); err != nil {
					return err
				}
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
		//
		// Completing a lane's message moves the lane on: its next message
		// becomes claimable when the completion commits, and nobody is told
		// (no NOTIFY: it would wake every worker for one message); so does
		// a failure that dead-letters a lane's head. So a worker that
		// completes or fails lane messages claims right after, even
		// while idle (its last claim came back short): in the same round
		// trip when it can, and the claim sees the heads its completion
		// promoted. One worker then carries a lane at the pace of a serial
		// consumer -- one round trip a message -- instead of one message
		// per PollInterval (bench claim --lanes 1, docs/benchmarks.md).
		if !l.flushErr && l.pending > 0 && l.pending == len(l.held) {
			n, claim := 0, false
			if !stopping && ctx.Err() == nil && l.results.Only(consumer.Complete) && l.pipeline && (!idle || l.lanesMoving()) {
				n, claim = limit(o.Batch - l.zombies)
			}
			if claim {
				got, err := l.completeAndClaim(n)
				if err := after(n, got, err); err != nil {
					return err
				}
			} else {
				flush()
			}
			continue
		}
		if l.pending > 0 && !flushArmed {
			if l.flushErr {
				flushTimer.Reset(l.flushBackoff.Next())
			} else {
				flushTimer.Reset(o.FlushInterval)
			}
			flushArmed = true
		}

		select {
		case <-l.pool.notify:
			l.acceptReady() // one flush for all that finished together
		case <-flushTimer.C:
			flushArmed = false
			flush()
		case <-wake:
			idle = false
		case <-idleTimer.C:
			idle = false
		case <-renewTick.C:
			l.renew()
		case <-stop:
			beginStop()
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

// Database calls are cut when they hang. Claims, renewals and releases are
// cut after one lease: by then the leases they serve are gone anyway, and a
// claim cut short only leaves rows leased to nobody until expiry. Complete
// and fail get longer: a call cut while the server runs it leaves its
// outcome unknown -- a completion may have committed -- and the counts
// reported to Hooks would be wrong. Meanwhile the watchdog cancels the
// handlers whose leases expire.
const flushTimeout = time.Minute

// leaseCall returns a context for a renewal or release (claims: claimWait).
func (l *loop) leaseCall() (context.Context, context.CancelFunc) {
	return context.WithTimeout(l.base, leaseWait(l.o.Lease))
}

// leaseWait is how long a call serving leases of lease may take: one lease
// (by then the leases it serves are gone anyway), at least a second (a
// Lease the SQL refuses must reach the SQL).
func leaseWait(lease time.Duration) time.Duration { return max(lease, time.Second) }

// watchdog cancels the context of every handler whose lease expired (by the
// local estimate, see job.expires), also while the loop waits on the
// database. The loop counts the loss when it next looks.
func (l *loop) watchdog(ctx context.Context) {
	t := time.NewTicker(max(l.o.Lease/10, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		l.watchMu.Lock()
		for j := range l.watched {
			if j.expiredAt(now) {
				j.cancel()
			}
		}
		l.watchMu.Unlock()
	}
}

func (l *loop) watch(j *job) {
	l.watchMu.Lock()
	l.watched[j] = struct{}{}
	l.watchMu.Unlock()
}

func (l *loop) unwatch(j *job) {
	l.watchMu.Lock()
	delete(l.watched, j)
	l.watchMu.Unlock()
}
