// Package relay publishes a pgsweep outbox queue to a message broker: it
// claims the queue's messages, publishes them through a Transport (NATS
// JetStream: relay/nats, RabbitMQ: relay/amqp), completes the ones the
// broker confirmed and fails the others (retried after the queue's backoff,
// dead-lettered after its last attempt, or at once when the broker refuses a
// message for good).
//
// Two ways in, side by side:
//
//   - claims: the relay claims due messages in batches (pgsweep claim),
//     woken by the queue's NOTIFY and polling as a fallback; the loop is
//     pgsweep's Worker (NewBatchWorker), with the relay as its batch
//     handler, so it claims, renews, records outcomes and shuts down as
//     every Worker does. This alone
//     publishes everything, also what was sent while no relay ran and what a
//     dead relay left (its leases expire and are claimed again);
//   - direct dispatch: after the application's transaction commits, it calls
//     Dispatch with the ids it sent, and the relay claims exactly those
//     (pgsweep claim_ids) and publishes them at once. Whatever Dispatch does
//     not finish -- a full buffer, a broker that is down, a process that dies
//     -- stays in the table for the claims.
//
// Both claim with FOR UPDATE SKIP LOCKED under a lease fenced by the claim's
// token, so any number of relays (processes, replicas) run at once and no
// message is published by two of them at the same time. Delivery to the
// broker is at least once: a relay that dies after the broker accepted a
// message and before the database recorded it leaves the message to be
// published again once its lease expires. Every publish carries the
// message's stable identity (Message.Identity) as the broker's message id,
// so JetStream's duplicate window drops the replay and a consumer's inbox
// (a pgsweep inbox queue keyed by that id) processes it once.
//
// Ordered lanes: messages of one lane are published strictly in order, one
// in flight at a time. pgsweep's claim hands out one message per lane at a
// time; the relay also never publishes a lane's next message before the
// broker confirmed the one before it.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/consumer"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
	"github.com/pgsweep/pgsweep/internal/notifier"
)

// Options configure a Relay. The zero value is valid.
type Options struct {
	// Schema pgsweep is installed in; pgsweep when empty.
	Schema string
	// Owner labels the relay's claims (for people and metrics; the claim
	// tokens fence). Default: host, pid and random bytes.
	Owner string
	// Batch is the most messages one claim takes (default 100). The
	// database's claim accepts 1..10000: otherwise Run returns its
	// ErrInvalidArgument.
	// The relay holds at most (1 + 2 x DispatchWorkers) batches at once
	// (a dispatch worker publishes one while it completes the one before): its
	// memory bound, with DispatchBuffer ids.
	Batch int
	// Lease is the lease of a claim (default 30 s), renewed every Lease/3
	// while a publish takes long. The database's claim accepts 1 second..1
	// hour: otherwise Run returns its ErrInvalidArgument.
	Lease time.Duration
	// PublishTimeout bounds one Publish call (default Lease/2); messages
	// not confirmed by then are given back, as for a broker that is down.
	PublishTimeout time.Duration
	// PollInterval is the longest pause between claims when nothing woke
	// the relay (default 1 s).
	PollInterval time.Duration
	// DisableNotify: do not LISTEN for the queue's sends; poll only.
	DisableNotify bool
	// DispatchBuffer is the most ids Dispatch holds before they are claimed
	// (default 10000). Ids that do not fit are left to the claims.
	DispatchBuffer int
	// DispatchWorkers is the number of direct dispatches in flight at once
	// (default 2).
	DispatchWorkers int
	// DispatchGrace delays the claims that a NOTIFY wakes while Dispatch is
	// in use (it was called in the last 10 seconds), so they take what
	// direct dispatch left rather than race it for new messages (default
	// 1 s; negative: no delay). While Dispatch is in use and PollInterval
	// <= DispatchGrace, the relay closes its LISTEN connection instead and
	// polls: a NOTIFY would start a claim no sooner than the poll does.
	DispatchGrace time.Duration
	// ShutdownTimeout is how long, once Run's context is cancelled, the
	// publishes in flight may still take (default 10 s). Messages claimed
	// but not published are released at once.
	ShutdownTimeout time.Duration
	// Logger receives the relay's log (default slog.Default()).
	Logger *slog.Logger
	// Metrics receive the relay's counts (NewMetrics); nil: none.
	Metrics *Metrics
	// Hooks observe the relay's steps (tests use them).
	Hooks Hooks
	// TracerProvider receives the relay's spans (docs/tracing.md): a
	// producer span "publish <destination>" per published batch, linked to
	// each message's creation context, and the "process <queue>" spans of
	// the Worker that runs the relay's claims (one per message, its parent
	// the message's creation context). nil: the global provider
	// (otel.GetTracerProvider), a no-op until the application sets one.
	TracerProvider trace.TracerProvider
}

// Hooks are called at the relay's steps. Each is optional and must return
// quickly.
type Hooks struct {
	// Published is called with the ids the broker confirmed, before the
	// database records them as published: a process that dies here leaves
	// messages the broker holds to be published again (their identity
	// makes the replay a duplicate the broker or the consumer drops).
	Published func(ids []int64)
}

// ErrDispatchFull is returned by Dispatch when the buffer had no room for
// some of the ids: the relay's claims publish those (nothing is lost).
var ErrDispatchFull = errors.New("relay: dispatch buffer full; the rest is left to the relay's claims")

// ErrNotRunning is returned by Dispatch while Run is not running: the ids
// are left to the claims of this or another relay.
var ErrNotRunning = errors.New("relay: not running; the ids are left to the relay's claims")

// Relay publishes one queue to one Transport. Create it with New and call
// Run; call Dispatch from the application after its commits.
type Relay struct {
	d      *db
	store  consumer.Store[pgsweep.Token] // records outcomes (settle)
	pool   *pgxpool.Pool
	t      Transport
	o      Options
	log    *slog.Logger
	m      *Metrics
	queue  string
	tracer trace.Tracer

	dispatchCh   chan dispatchItem
	running      atomic.Bool
	lastDispatch atomic.Int64 // unix nanoseconds of the last Dispatch call

	mu     sync.Mutex
	health healthState
	// probe paces the one-message claims that probe a broker found down
	// (claimLimit): the next may go at nextProbe. Guarded by mu.
	probe     consumer.Backoff
	nextProbe time.Time
	baseLog   *slog.Logger // Options.Logger or slog.Default(): the Worker's

	signals signals // off (and free) unless a test turns them on
}

type dispatchItem struct {
	id int64
	at time.Time
}

// New returns a relay of queue to t. pool is used for every claim and
// acknowledgement, plus one connection of its own for LISTEN.
func New(pool *pgxpool.Pool, queue string, t Transport, opts Options) (*Relay, error) {
	if pool == nil || t == nil {
		return nil, errors.New("relay: pool and transport are required")
	}
	if queue == "" {
		return nil, errors.New("relay: queue is required")
	}
	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: opts.Schema})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if opts.Owner == "" {
		opts.Owner = pgsweep.NewOwnerID()
	}
	// Batch and Lease are the SQL's to check (claim, claim_ids): the first
	// claim returns its ErrInvalidArgument, and Run returns it.
	if opts.Batch == 0 {
		opts.Batch = 100
	}
	if opts.Lease == 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = opts.Lease / 2
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.DispatchBuffer <= 0 {
		opts.DispatchBuffer = 10000
	}
	if opts.DispatchWorkers <= 0 {
		opts.DispatchWorkers = 2
	}
	if opts.DispatchGrace == 0 {
		opts.DispatchGrace = time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Relay{
		d:          &db{client: c, queue: queue, owner: opts.Owner, lease: opts.Lease},
		store:      c.ConsumerStore(queue),
		pool:       pool,
		t:          t,
		o:          opts,
		log:        log.With("queue", queue, "owner", opts.Owner),
		m:          opts.Metrics,
		queue:      queue,
		tracer:     newTracer(opts.TracerProvider),
		dispatchCh: make(chan dispatchItem, opts.DispatchBuffer),
		probe:      consumer.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		baseLog:    log,
	}
	r.health.broker = true
	r.health.database = true
	return r, nil
}

// Owner returns the relay's owner label.
func (r *Relay) Owner() string { return r.o.Owner }

// Dispatch publishes the messages ids at once: call it after the
// transaction that sent them committed. It only hands the ids over (it
// never waits for the database or the broker); the relay's dispatch workers
// claim exactly those of them that are claimable (claim_ids) and publish
// them. An error says that some ids were not taken (the buffer is full, the
// relay is not running, ctx is done): the relay's claims publish them, so
// callers may ignore it.
func (r *Relay) Dispatch(ctx context.Context, ids []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !r.running.Load() {
		r.m.dispatchDropped(r.queue, "not_running", len(ids))
		return ErrNotRunning
	}
	now := time.Now()
	r.lastDispatch.Store(now.UnixNano())
	for i, id := range ids {
		select {
		case r.dispatchCh <- dispatchItem{id: id, at: now}:
		default:
			r.m.dispatchDropped(r.queue, "full", len(ids)-i)
			return fmt.Errorf("%w (%d of %d ids)", ErrDispatchFull, len(ids)-i, len(ids))
		}
	}
	return nil
}

// Run publishes until ctx is cancelled, then drains: it claims nothing
// more, lets the publishes in flight finish for ShutdownTimeout, records
// their outcome, releases what it claimed and did not publish, and returns
// nil. It returns an error at once when the database refuses the relay's
// arguments (an unknown queue). One Run at a time per Relay.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run is already running")
	}
	defer r.running.Store(false)
	r.log.Info("relay started", "batch", r.o.Batch, "lease", r.o.Lease)

	// hard ends the publishes in flight ShutdownTimeout after ctx.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	var hardTimer atomic.Pointer[time.Timer]
	stopAfter := context.AfterFunc(ctx, func() { hardTimer.Store(time.AfterFunc(r.o.ShutdownTimeout, hardCancel)) })
	defer func() {
		stopAfter()
		if t := hardTimer.Load(); t != nil {
			t.Stop()
		}
	}()

	// The claims run on pgsweep's Worker, the Relay being its batch
	// handler: the Worker's loop claims, renews the leases while a batch
	// publishes, records the outcomes (a completion pipelined with the
	// next claim) and gives back at shutdown what was not started.
	// Publishes end ShutdownTimeout after ctx (hard), so the Worker's own
	// deadline, later, only backs up a transport that ignores its context.
	w, err := pgsweep.NewBatchWorker(r.pool, func(hctx context.Context, ds []*pgsweep.Delivery) []error {
		return r.publishBatch(hctx, ctx, hard, ds)
	}, pgsweep.WorkerOptions{
		Schema: r.o.Schema, Queue: r.queue, Owner: r.o.Owner, Batch: r.o.Batch, Concurrency: 1, Lease: r.o.Lease,
		PollInterval: r.o.PollInterval, ShutdownTimeout: r.o.ShutdownTimeout + workerShutdownMargin,
		DisableNotify: true, ClaimLimit: r.claimLimit, Hooks: r.workerHooks(), Logger: r.baseLog,
		TracerProvider: r.o.TracerProvider,
	})
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	// inner ends the helpers also when the Worker returns an error.
	inner, innerCancel := context.WithCancel(ctx)
	defer innerCancel()
	var wg sync.WaitGroup
	if !r.o.DisableNotify {
		wg.Go(func() { r.listen(inner, w) })
	}
	for range r.o.DispatchWorkers {
		wg.Go(func() { r.dispatchLoop(inner, hard) })
	}
	if err = w.Run(ctx); err != nil {
		err = fmt.Errorf("relay: %w", err)
	}
	innerCancel()
	wg.Wait()
	// Ids still in the buffer were never claimed: the claims take them.
	n := 0
	for {
		select {
		case <-r.dispatchCh:
			n++
			continue
		default:
		}
		break
	}
	r.m.dispatchDropped(r.queue, "shutdown", n)
	r.log.Info("relay stopped", "dispatch_ids_left_to_claims", n)
	return err
}

// workerShutdownMargin is how much longer than ShutdownTimeout the Worker
// waits for the batch in flight: publishes end at ShutdownTimeout, and
// recording their outcome follows.
const workerShutdownMargin = 5 * time.Second

// claimLimit is the Worker's ClaimLimit: the relay claims nothing while the
// transport knows it has no connection to a broker found down, and one
// message at a time, paced from 100 ms to 5 s, to probe one that may be
// back.
func (r *Relay) claimLimit() int {
	if !r.brokerDown() {
		return r.o.Batch
	}
	if !r.transportUp() {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Before(r.nextProbe) {
		return 0
	}
	r.nextProbe = now.Add(r.probe.Next())
	return 1
}

// workerHooks turn the Worker's counts into the relay's metrics, health
// and test signals.
func (r *Relay) workerHooks() pgsweep.Hooks {
	settled := func(n int) { r.signals.Settled.Signal(n) }
	return pgsweep.Hooks{
		Claimed:   func(q string, n int) { r.m.claimed(q, "claim", n) },
		Completed: func(_ string, n int) { settled(n) },
		Failed: func(q string, n int) {
			r.m.failed(q, "retry", n)
			settled(n)
		},
		DeadLettered: func(q string, n int) {
			r.m.failed(q, "dead", n)
			settled(n)
		},
		Released: func(q string, n int) {
			r.m.released(q, n)
			settled(n)
		},
		LeasesLost: func(_ string, n int) {
			r.lost(n)
			settled(n)
		},
		Database: func(_ string, err error) { r.setDatabase(err) },
	}
}

// publishBatch is the Worker's batch handler: it publishes the messages of
// one claim (publish) and returns their outcomes as the Worker records
// them: complete, fail (retried after the queue's backoff), Permanent
// (dead-lettered at once) or GiveBack (released, attempt not spent: the
// broker was not reached, or the relay is shutting down). hctx is the
// handler's context: its span (the Worker's batch span) is the parent of
// the publish span.
func (r *Relay) publishBatch(hctx, stop, hard context.Context, ds []*pgsweep.Delivery) []error {
	hs := make([]held, len(ds))
	for i, d := range ds {
		hs[i] = heldOf(d)
	}
	out, res := r.publish(stop, hard, hs, r.startPublish(hctx, hs, pathClaim))
	errs := make([]error, len(hs))
	unreached := 0
	for i := range hs {
		switch out[i] {
		case accepted:
		case failed:
			errs[i] = errors.New(cleanText(res[i].Err.Error()))
			r.log.Warn("publish failed; retried after the queue's backoff", "err", errs[i], "id", hs[i].msg.ID)
		case permanent:
			errs[i] = pgsweep.Permanent(errors.New(cleanText(res[i].Err.Error())))
			r.m.failed(r.queue, "permanent", 1)
			r.log.Warn("broker refused a message for good; moved to the dead letters", "err", errs[i], "id", hs[i].msg.ID)
		case unavailable:
			unreached++
			errs[i] = pgsweep.GiveBack(res[i].Err)
		case pending:
			errs[i] = pgsweep.GiveBack(errNotPublished)
		}
	}
	r.m.failed(r.queue, "unavailable", unreached)
	return errs
}

// errNotPublished is the outcome of a message the relay did not publish: its
// lane stopped at an earlier message, or the relay is shutting down.
var errNotPublished = errors.New("not published")

// dispatchLoop claims and publishes the ids Dispatch handed over. The
// settle of a dispatch (the complete) runs while the loop claims and
// publishes the next: at most one settle in flight per loop, so a loop
// holds at most two batches; it waits for its settle before it returns.
func (r *Relay) dispatchLoop(ctx, hard context.Context) {
	// max: a Batch out of range is the SQL's to refuse, not make's
	items := make([]dispatchItem, 0, max(r.o.Batch, 1))
	var settling chan struct{} // closed when the last settle is done
	defer func() {
		if settling != nil {
			<-settling
		}
	}()
	for {
		items = items[:0]
		select {
		case <-ctx.Done():
			return
		case it := <-r.dispatchCh:
			items = append(items, it)
		}
	more:
		for len(items) < r.o.Batch {
			select {
			case it := <-r.dispatchCh:
				items = append(items, it)
			default:
				break more
			}
		}
		if r.brokerDown() {
			// The claims publish them once the broker is back.
			r.m.dispatchDropped(r.queue, "broker_down", len(items))
			continue
		}
		ids := make([]int64, len(items))
		at := make(map[int64]time.Time, len(items))
		for i, it := range items {
			ids[i] = it.id
			if _, ok := at[it.id]; !ok {
				at[it.id] = it.at
			}
		}
		hs, err := r.d.claimIDs(ctx, ids)
		if err != nil {
			if ctx.Err() == nil {
				r.setDatabase(err)
				r.log.Warn("direct dispatch: claim_ids failed; the claims publish these", "err", err, "ids", len(ids))
			}
			r.m.dispatchDropped(r.queue, "error", len(items))
			continue
		}
		r.setDatabase(nil)
		r.m.dispatchDropped(r.queue, "not_claimable", len(at)-len(hs))
		if len(hs) == 0 {
			continue
		}
		r.m.claimed(r.queue, "direct", len(hs))
		for i := range hs {
			hs[i].dispatched = at[hs[i].msg.ID]
		}
		stopRenew := r.renewLater(hard, hs) // while publishes take long
		// a direct dispatch's publish span is a root (Run's ctx may carry
		// a span of the application's: not the parent of every publish)
		out, res := r.publish(ctx, hard, hs, r.startPublish(context.Background(), hs, pathDirect))
		stopRenew()
		if settling != nil {
			<-settling
		}
		done := make(chan struct{})
		settling = done
		go func() {
			defer close(done)
			r.settle(ctx, hs, out, res)
		}()
	}
}

// outcome of one held message.
type outcome int

const (
	pending     outcome = iota // not published (a lane stopped, or shutdown): release
	accepted                   // the broker confirmed it: complete
	failed                     // retry after the backoff: fail
	permanent                  // no retry can deliver it: dead letter
	unavailable                // the broker was not reached: release
)

// publish publishes hs (the messages of one claim), lane by lane in order,
// one message per lane in flight, and returns what became of each (out,
// with the transport's result). It publishes no further lane round once
// ctx is done (shutdown: the rest is pending), and each publish ends by
// PublishTimeout or when hard is done. Before it returns, the broker's
// answer is known to the relay: its health, metrics and the Published hook
// (the ids the broker confirmed, before the database records them). span
// is the publish's span (startPublish): publish ends it, and the
// Transport's context carries it.
func (r *Relay) publish(ctx, hard context.Context, hs []held, span trace.Span) ([]outcome, []Result) {
	res := make([]Result, len(hs))
	out := make([]outcome, len(hs))
	ackAt := make([]time.Time, len(hs))

	rounds := lanesInOrder(hs)
	stopped := map[string]bool{} // lanes whose message did not go through
	for _, round := range rounds {
		if ctx.Err() != nil {
			break // shutting down: what is left is released
		}
		var idx []int
		for _, i := range round {
			if lane := hs[i].msg.Lane; lane != "" && stopped[lane] {
				continue
			}
			idx = append(idx, i)
		}
		if len(idx) == 0 {
			continue
		}
		msgs := make([]Message, len(idx))
		for k, i := range idx {
			msgs[k] = hs[i].msg
		}
		pctx, cancel := context.WithTimeout(hard, r.o.PublishTimeout)
		if span.SpanContext().IsValid() {
			pctx = trace.ContextWithSpan(pctx, span)
		}
		rs := r.t.Publish(pctx, msgs)
		cancel()
		now := time.Now()
		if len(rs) != len(msgs) {
			rs = Unavailable(len(msgs), fmt.Errorf("transport returned %d results for %d messages", len(rs), len(msgs)))
		}
		for k, i := range idx {
			res[i] = rs[k]
			ackAt[i] = now
			switch {
			case rs[k].Err == nil:
				out[i] = accepted
			case errors.Is(rs[k].Err, ErrUnavailable):
				out[i] = unavailable
			case rs[k].Permanent:
				out[i] = permanent
			default:
				out[i] = failed
			}
			if out[i] != accepted && hs[i].msg.Lane != "" {
				stopped[hs[i].msg.Lane] = true
			}
		}
	}
	endPublish(span, out, res)
	// the broker's answer, before anything is recorded in the database
	var ok []int
	var down error
	for i := range hs {
		switch out[i] {
		case accepted:
			ok = append(ok, i)
		case unavailable:
			if down == nil {
				down = res[i].Err
			}
		}
	}
	if len(ok) > 0 {
		r.published(hs, ok, ackAt)
		if f := r.o.Hooks.Published; f != nil {
			ids := make([]int64, len(ok))
			for k, i := range ok {
				ids[k] = hs[i].msg.ID
			}
			f(ids)
		}
	}
	if down != nil {
		r.setBroker(down)
	}
	return out, res
}

// lanesInOrder splits hs (oldest first) into rounds: round k holds the k-th
// message of every lane, and round 0 also every message without a lane.
// Publishing round after round keeps one message per lane in flight.
//
// pgsweep's claim and claim_ids hand out one message per lane at a time
// (only a lane's head is claimable), so a claim fills round 0 only; the
// rounds keep the order should a batch ever hold more.
func lanesInOrder(hs []held) [][]int {
	var rounds [][]int
	seen := map[string]int{}
	for i, h := range hs {
		k := 0
		if h.msg.Lane != "" {
			k = seen[h.msg.Lane]
			seen[h.msg.Lane] = k + 1
		}
		for len(rounds) <= k {
			rounds = append(rounds, nil)
		}
		rounds[k] = append(rounds[k], i)
	}
	return rounds
}

// renewLater renews the leases of hs every Lease/3 from Lease/3 on, until
// the returned stop is called; stop returns once no renewal runs. A publish
// that ends before Lease/3 -- nearly all of them -- costs one timer, no
// goroutine.
func (r *Relay) renewLater(ctx context.Context, hs []held) (stop func()) {
	stopCh := make(chan struct{})
	done := make(chan struct{})
	t := time.AfterFunc(r.renewEvery(), func() {
		defer close(done)
		r.renewWhile(ctx, hs, stopCh)
	})
	return func() {
		close(stopCh)
		if !t.Stop() {
			<-done // it had started: wait for its last renewal
		}
	}
}

// renewEvery is the renewal period, Lease/3 (a Lease the SQL refuses
// takes no lease to renew, but must not break the timers).
func (r *Relay) renewEvery() time.Duration { return max(r.o.Lease/3, 100*time.Millisecond) }

// renewWhile renews the leases of hs at once and then every Lease/3, until
// stop is closed.
func (r *Relay) renewWhile(ctx context.Context, hs []held, stop <-chan struct{}) {
	t := time.NewTicker(r.renewEvery())
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		byToken := map[pgsweep.Token][]int64{}
		for _, h := range hs {
			byToken[h.token] = append(byToken[h.token], h.msg.ID)
		}
		kept := consumer.Renew(ctx, byToken, func(ctx context.Context, tok pgsweep.Token, ids []int64) ([]int64, error) {
			cctx, cancel := context.WithTimeout(ctx, r.o.Lease/3)
			defer cancel()
			return r.d.client.Renew(cctx, r.queue, tok, ids, r.o.Lease)
		}, func(err error, ids []int64) { r.log.Warn("renew failed", "err", err, "ids", len(ids)) })
		lost := 0
		for _, ok := range kept {
			if !ok {
				lost++
			}
		}
		if lost > 0 {
			r.m.leasesLost(r.queue, lost)
			r.log.Warn("leases lost while publishing (claimed again elsewhere); their outcome will not be recorded", "lost", lost)
		}
	}
}

// settle records what became of each message, one call per token and
// outcome (consumer.Results, completions first): complete what the broker
// confirmed, fail (backoff) or dead-letter what it refused, release what was
// not published. It runs also when ctx is done (shutdown), within the
// leases, retrying calls that fail.
func (r *Relay) settle(ctx context.Context, hs []held, out []outcome, res []Result) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.Lease)
	defer cancel()
	var rs consumer.Results[pgsweep.Token]
	unreached := 0
	for i, h := range hs {
		k := consumer.Key[pgsweep.Token]{Token: h.token, Kind: consumer.Release}
		switch out[i] {
		case accepted:
			k.Kind = consumer.Complete
		case failed:
			k.Kind, k.Text = consumer.Fail, cleanText(res[i].Err.Error())
		case permanent:
			k.Kind, k.Text = consumer.DeadLetter, cleanText(res[i].Err.Error())
		case unavailable:
			unreached++
		}
		rs.Add(k, h.msg.ID)
	}
	r.m.failed(r.queue, "unavailable", unreached)
	for k, ids := range rs.All() {
		sent := retryDB(sctx, func() consumer.Sent { return r.store.Send(sctx, k, ids) })
		if sent.Err != nil {
			r.setDatabase(sent.Err)
			r.log.Error(k.Kind.String()+" failed: "+afterFailedSettle[k.Kind], "err", sent.Err, "ids", len(ids))
			continue
		}
		switch k.Kind {
		case consumer.Fail:
			r.m.failed(r.queue, "retry", sent.Done-sent.Dead)
			r.m.failed(r.queue, "dead", sent.Dead)
			r.log.Warn("publish failed; retried after the queue's backoff", "err", k.Text, "ids", len(ids), "dead_lettered", sent.Dead)
		case consumer.DeadLetter:
			r.m.failed(r.queue, "permanent", sent.Done)
			r.log.Warn("broker refused messages for good; moved to the dead letters", "err", k.Text, "ids", len(ids))
		case consumer.Release:
			r.m.released(r.queue, sent.Done)
			continue // a lease lost before the release: nothing was published
		}
		r.lost(len(ids) - sent.Done)
	}
	r.signals.Settled.Signal(len(hs))
}

// afterFailedSettle says what becomes of messages whose outcome could not
// be recorded.
var afterFailedSettle = [...]string{
	consumer.Complete:   "the broker holds these; they are published again after their lease",
	consumer.Fail:       "retried after their lease",
	consumer.DeadLetter: "retried after their lease",
	consumer.Release:    "published again after their lease",
}

// published counts the confirmed messages and their latency: from Dispatch
// (about the commit) for direct dispatch, from the send (created_at, the
// database clock) for the others.
func (r *Relay) published(hs []held, idx []int, ackAt []time.Time) {
	r.signals.Published.Signal(len(idx))
	r.setBroker(nil)
	r.mu.Lock()
	r.health.published += int64(len(idx))
	r.health.lastPublished = ackAt[idx[0]]
	r.mu.Unlock()
	if r.m == nil {
		return
	}
	r.m.Published.WithLabelValues(r.queue).Add(float64(len(idx)))
	for _, i := range idx {
		if !hs[i].dispatched.IsZero() {
			r.m.Latency.WithLabelValues(r.queue, "direct").Observe(ackAt[i].Sub(hs[i].dispatched).Seconds())
		} else {
			r.m.Latency.WithLabelValues(r.queue, "claim").Observe(max(0, ackAt[i].Sub(hs[i].msg.CreatedAt).Seconds()))
		}
	}
}

func (r *Relay) lost(n int) {
	if n > 0 {
		r.m.leasesLost(r.queue, n)
		r.log.Warn("leases lost before the outcome was recorded (claimed again elsewhere)", "lost", n)
	}
}

// retryDB retries a database call that failed (not one the database
// refused as invalid) with a backoff until ctx is done.
func retryDB(ctx context.Context, f func() consumer.Sent) consumer.Sent {
	backoff := consumer.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	for {
		s := f()
		if s.Err == nil || errors.Is(s.Err, pgsweep.ErrInvalidArgument) || ctx.Err() != nil {
			return s
		}
		if ctxsleep.Sleep(ctx, backoff.Next()) != nil {
			return s
		}
	}
}

// listen holds a connection on LISTEN and wakes the poll loop for every
// send to the queue, and once after every (re)connect; it reconnects with a
// backoff from 100 ms to 30 s. Polling covers the gaps.
//
// While Dispatch is in use and polling is at least as frequent as a NOTIFY
// would start a claim (PollInterval <= DispatchGrace: the defaults), it
// closes the connection (quietListen): a NOTIFY would only start a claim
// after DispatchGrace, which the poll does as soon, and every send's
// NOTIFY would cost the database and the relay a wakeup for nothing. It
// listens again, and wakes the poll loop, once Dispatch has not been called
// for 10 seconds.
func (r *Relay) listen(ctx context.Context, w *pgsweep.Worker) {
	notifier.Run(ctx, notifier.Options{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg := r.pool.Config().ConnConfig.Copy()
			pgsweep.SetConnectionCheckInterval(cfg, pgsweep.DefaultConnectionCheckInterval)
			pgsweep.PinSearchPath(cfg)
			return pgx.ConnectConfig(ctx, cfg)
		},
		Channel: func(ctx context.Context, conn *pgx.Conn) (string, error) {
			return r.d.client.WithDB(conn).NotifyChannel(ctx)
		},
		Payload:    r.queue,
		Wake:       r.wakeAfterGrace(w),
		Pause:      r.quietListen,
		PauseCheck: r.o.PollInterval,
		Logger:     r.log,
	})
}

// dispatchInUse reports whether Dispatch was called in the last 10 seconds.
func (r *Relay) dispatchInUse() bool {
	return time.Since(time.Unix(0, r.lastDispatch.Load())) < dispatchInUseFor
}

// dispatchInUseFor is how long after its last call Dispatch counts as in use.
const dispatchInUseFor = 10 * time.Second

// quietListen reports whether listen does without its connection now:
// Dispatch is in use, NOTIFY-woken claims wait DispatchGrace, and the poll
// claims at least that often.
func (r *Relay) quietListen() bool {
	return r.o.DispatchGrace > 0 && r.o.PollInterval <= r.o.DispatchGrace && r.dispatchInUse()
}

// wakeAfterGrace returns the notifier's wake: it makes w claim at once, or
// DispatchGrace later while Dispatch is in use (so that the claim takes
// what direct dispatch left rather than race it for new messages; wakes
// during the grace count once).
func (r *Relay) wakeAfterGrace(w *pgsweep.Worker) func() {
	var waiting atomic.Bool
	return func() {
		if r.o.DispatchGrace <= 0 || !r.dispatchInUse() {
			w.Notify()
			return
		}
		if waiting.CompareAndSwap(false, true) {
			time.AfterFunc(r.o.DispatchGrace, func() {
				waiting.Store(false)
				w.Notify()
			})
		}
	}
}
