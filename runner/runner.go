package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
)

// Options configure a Runner. The zero value is valid: interval and jitter
// then come from the database's settings (runner_interval, runner_jitter)
// after every pass.
type Options struct {
	// Schema pgsweep is installed in; pgsweep.DefaultSchema when empty.
	Schema string
	// Owner is the lease owner identity; DefaultOwner() when empty. It must
	// be unique among the callers of maintain().
	Owner string
	// Budget bounds one pass (maintain's p_budget, 1 second to 1 hour);
	// 30 seconds when zero.
	Budget time.Duration
	// Interval overrides the runner_interval setting when positive.
	Interval time.Duration
	// Jitter overrides the runner_jitter setting when positive; a negative
	// value means no jitter. The jitter is capped at the interval.
	Jitter time.Duration
	// BackoffMin and BackoffMax bound the exponential backoff after failed
	// passes (1 second and 1 minute when zero).
	BackoffMin, BackoffMax time.Duration
	// HealthyWithin is how recent the last successful pass (or the last
	// step seen committed by the pass in flight) must be for Healthy to
	// report true; when zero, 2 intervals + the budget + 30s.
	HealthyWithin time.Duration
	// Logger receives the runner's log lines; nothing is logged when nil.
	Logger *slog.Logger
	// Metrics receives the runner's metrics; NewMetrics() when nil.
	Metrics *Metrics
	// PlainDetach, when true, leaves expired partitions to maintain()'s plain
	// DETACH (a short ACCESS EXCLUSIVE lock on the parent). By default each
	// pass first removes them with DETACH ... CONCURRENTLY
	// (Client.RetentionDetachConcurrently), which no insert waits for.
	PlainDetach bool
	// GaugeInterval is how often the queue and health gauges are read,
	// after a pass (stats_latest and health(): health() reads the server's
	// sessions and catalogs, tens of milliseconds). 0: every 15 s;
	// negative: after every pass.
	GaugeInterval time.Duration
	// TracerProvider receives the runner's spans: one per pass, with a child
	// per part that ran (docs/operations.md, "Tracing"). When nil, the global
	// provider (otel.GetTracerProvider) is used, a no-op until the
	// application sets one with otel.SetTracerProvider. With a provider that
	// does not record, a pass reads nothing more from the database.
	TracerProvider trace.TracerProvider
}

// Runner calls maintain() in a loop. Create it with New, run it with Run (or
// one pass with RunOnce), stop it with Stop or by cancelling Run's context.
type Runner struct {
	opts    Options
	connect Connector
	owner   string
	client  *pgsweep.Client // its statements; WithDB(conn) runs them on a pass's connection
	log     *slog.Logger
	metrics *Metrics
	tracer  trace.Tracer

	// injectable for tests: the clock, the sleep between passes, the jitter source
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	rand  func() float64

	mu           sync.Mutex
	running      bool
	cancel       context.CancelFunc
	done         chan struct{}
	failures     int
	lastAttempt  time.Time
	lastSuccess  time.Time
	lastErr      error
	interval     time.Duration   // the last interval used, for health
	warnedGauges map[string]bool // gauge sources found missing and warned about once
	gaugesAt     time.Time       // when the gauges were last read
	passBackend  backend         // the backend of the latest pass's connection (zero: unknown)
	pending      *pendingRecord  // history rows of an ended pass that still have to be closed
	inPass       bool            // a pass is in flight
	lastProgress time.Time       // when the pass in flight was last seen to commit a step

	// progressEvery is how often a pass in flight is checked for progress
	// (committed steps), on a second connection opened only for passes that
	// last longer than that.
	progressEvery time.Duration

	signals signals // off (and free) unless a test turns them on
}

// pendingRecord is a pass whose history rows maintain() could not close and
// this runner must (with maintain_fail_owner), once the pass's backend is
// gone: a pass cancelled by a stop, or one whose connection died.
type pendingRecord struct {
	msg      string    // recorded as the error of the pass and of its running parts
	backends []backend // the backends of the passes concerned
}

// backend identifies a server process: its pid, and its start time, since a
// pid is reused (at once after a restart of the server).
type backend struct {
	pid   uint32    // 0: unknown
	start time.Time // zero: unknown
}

// addPending notes that the pass on backend b ended with its history rows
// open; an earlier pending record (and its message) is kept and extended.
// The caller holds r.mu.
func (r *Runner) addPending(msg string, b backend) {
	if r.pending == nil {
		r.pending = &pendingRecord{msg: msg}
	} else {
		r.pending = &pendingRecord{msg: r.pending.msg, backends: append([]backend(nil), r.pending.backends...)}
	}
	r.pending.backends = append(r.pending.backends, b)
}

const (
	defaultBudget     = 30 * time.Second
	defaultBackoffMin = time.Second
	defaultBackoffMax = time.Minute
	defaultInterval   = 10 * time.Second
	releaseTimeout    = 10 * time.Second
	// defaultProgressEvery is how often the runner looks for committed steps
	// of a pass in flight (see Health).
	defaultProgressEvery = 5 * time.Second
	stoppedMsg           = "the runner stopped during this pass"
)

// New returns a Runner that opens a connection with connect for every pass.
func New(connect Connector, opts Options) (*Runner, error) {
	if connect == nil {
		return nil, errors.New("runner: connect is nil")
	}
	if opts.Schema == "" {
		opts.Schema = pgsweep.DefaultSchema
	}
	if err := pgsweep.ValidateSchema(opts.Schema); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if opts.Owner == "" {
		opts.Owner = DefaultOwner()
	}
	// Owner and Budget are maintain()'s p_owner and p_budget: the SQL checks
	// them (22023 naming the argument and the range) and Run stops on that
	// error, so a rule lives in one place.
	if opts.Budget == 0 {
		opts.Budget = defaultBudget
	}
	if opts.Interval < 0 {
		return nil, fmt.Errorf("runner: interval must not be negative, got %v", opts.Interval)
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = defaultBackoffMin
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = defaultBackoffMax
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = opts.BackoffMin
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics()
	}
	client, err := pgsweep.NewClient(noConn{}, &pgsweep.ClientOptions{Schema: opts.Schema})
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return &Runner{
		opts:    opts,
		connect: connect,
		owner:   opts.Owner,
		client:  client,
		log:     log.With("owner", opts.Owner),
		metrics: m,
		tracer:  newTracer(opts.TracerProvider),
		now:     time.Now,
		sleep:   ctxsleep.Sleep,
		rand:    rand.Float64,

		progressEvery: defaultProgressEvery,
	}, nil
}

// Owner returns the runner's lease owner identity.
func (r *Runner) Owner() string { return r.owner }

// Metrics returns the runner's metrics.
func (r *Runner) Metrics() *Metrics { return r.metrics }

// Run calls maintain() until ctx is cancelled or Stop is called. Stopping
// cancels the pass in flight (the database rolls back its current step),
// waits for it to return, and releases every lease this runner holds, so
// another replica can take over at once. Run returns nil after a stop; it
// returns an error only when the Runner is already running.
func (r *Runner) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	if r.running {
		r.mu.Unlock()
		return errors.New("runner: already running")
	}
	r.running = true
	r.cancel = cancel
	done := make(chan struct{})
	r.done = done
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running = false
		r.mu.Unlock()
		close(done)
	}()

	r.log.Info("runner started", "schema", r.opts.Schema, "budget", r.opts.Budget)
	var fatal error
	for ctx.Err() == nil {
		var wait time.Duration
		wait, fatal = r.iterate(ctx)
		if ctx.Err() != nil || fatal != nil {
			break
		}
		if err := r.sleep(ctx, wait); err != nil {
			break
		}
	}
	r.releaseLeases()
	if fatal != nil {
		r.log.Error("runner stopped: maintain() refuses its arguments", "error", redactErr(fatal))
		return fmt.Errorf("runner: %w", fatal)
	}
	r.log.Info("runner stopped")
	return nil
}

// invalidArgument reports whether err is maintain() refusing its arguments
// (SQLSTATE 22023): the runner's own configuration, which no retry fixes.
func invalidArgument(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22023"
}

// Stop asks Run to return and waits until it has: the pass in flight is
// cancelled and awaited, and the runner's leases are released.
func (r *Runner) Stop() {
	r.mu.Lock()
	cancel, done, running := r.cancel, r.done, r.running
	r.mu.Unlock()
	if !running {
		return
	}
	cancel()
	<-done
}

// iterate runs one pass and returns how long to wait before the next.
func (r *Runner) iterate(ctx context.Context) (time.Duration, error) {
	r.mu.Lock()
	before := r.failures
	r.mu.Unlock()
	_, s, err := r.RunOnce(ctx)
	r.signals.PassDone.Signal(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil // stopping: the error is the cancellation itself
		}
		if invalidArgument(err) {
			return 0, err
		}
		wait := r.backoff(r.failures)
		r.log.Warn("maintenance pass failed; backing off", "error", redactErr(err),
			"consecutive_failures", r.failures, "retry_in", wait)
		return wait, nil
	}
	if before > 0 {
		r.log.Info("maintenance pass succeeded again", "after_failures", before)
	}
	return r.nextWait(s), nil
}

// backoff returns BackoffMin * 2^(n-1), capped at BackoffMax.
func (r *Runner) backoff(n int) time.Duration {
	d := r.opts.BackoffMin
	for i := 1; i < n && d < r.opts.BackoffMax; i++ {
		d *= 2
	}
	return min(d, r.opts.BackoffMax)
}

// nextWait is the interval, from the options or the database, plus a random
// jitter in [-jitter, +jitter] (jitter capped at the interval).
func (r *Runner) nextWait(s Settings) time.Duration {
	interval, jitter := s.Interval, s.Jitter
	if r.opts.Interval > 0 {
		interval = r.opts.Interval
	}
	if interval <= 0 {
		interval = defaultInterval
	}
	switch {
	case r.opts.Jitter > 0:
		jitter = r.opts.Jitter
	case r.opts.Jitter < 0:
		jitter = 0
	}
	jitter = min(max(jitter, 0), interval)
	r.interval = interval
	return interval + time.Duration((r.rand()*2-1)*float64(jitter))
}

// RunOnce runs one pass on a new connection and closes it: CALL maintain,
// then it reads what the pass did, the runner settings and queue_stats. It
// updates the metrics and the health state, and returns the pass and the
// settings read after it. Most callers use Run. The pass's span
// (SpanPass) is a child of ctx's span, if any.
func (r *Runner) RunOnce(ctx context.Context) (p *Pass, s Settings, err error) {
	ctx, span := r.startPass(ctx)
	defer func() { endPass(span, p, err) }()
	start := r.now()
	r.mu.Lock()
	r.inPass = true
	r.lastProgress = time.Time{}
	r.passBackend = backend{}
	pendingBefore := r.pending
	r.mu.Unlock()
	p, s, err = r.pass(ctx)
	elapsed := r.now().Sub(start)
	r.metrics.passes.Inc()
	r.metrics.passDuration.Observe(elapsed.Seconds())
	r.mu.Lock()
	r.inPass = false
	r.lastAttempt = r.now()
	r.lastErr = err
	if err == nil {
		r.lastSuccess = r.lastAttempt
		r.failures = 0
	} else if ctx.Err() == nil { // a cancelled pass is a stop, not a failure
		r.failures++
	} else {
		r.addPending(stoppedMsg, r.passBackend)
	}
	failures := r.failures
	lost := r.pending != nil && r.pending != pendingBefore && ctx.Err() == nil
	r.mu.Unlock()
	r.metrics.consecutiveFail.Set(float64(failures))
	if lost {
		// The pass's connection died (the server terminated it, or the
		// network): close its history rows on a fresh connection now, or at
		// the start of the next pass, or at the stop, whichever works first.
		r.recordPendingFresh(ctx)
	}
	if err != nil {
		r.metrics.passErrors.Inc()
		return nil, s, err
	}
	r.metrics.lastSuccess.Set(float64(r.lastAttempt.UnixNano()) / 1e9)
	r.metrics.observePass(p)
	r.logPass(p, elapsed)
	return p, s, nil
}

func (r *Runner) pass(ctx context.Context) (*Pass, Settings, error) {
	var s Settings
	conn, err := r.connect(ctx)
	if err != nil {
		return nil, s, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// An earlier pass whose history could not be closed yet is closed first.
	if err := r.recordPending(ctx, conn); err != nil && ctx.Err() == nil {
		r.log.Warn("could not record an earlier failed pass", "error", redactErr(err))
	}
	if pc, ok := conn.(interface{ PgConn() *pgconn.PgConn }); ok {
		b := backend{pid: pc.PgConn().PID()}
		if start, err := r.sql(conn).BackendStart(ctx); err == nil {
			b.start = start
		}
		r.mu.Lock()
		r.passBackend = b
		r.mu.Unlock()
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchProgress(wctx) }()
	defer func() { stopWatch(); <-watched }()

	if !r.opts.PlainDetach {
		r.detachConcurrently(ctx, conn)
	}
	callStart := time.Now()
	if err := r.callMaintain(ctx, conn); err != nil {
		return nil, s, err
	}
	callEnd := time.Now()
	p, err := r.readPass(ctx, conn)
	if err != nil {
		return nil, s, err
	}
	r.traceParts(ctx, conn, p, callStart, callEnd)
	if s, err = r.readSettings(ctx, conn); err != nil {
		return nil, s, err
	}
	r.readGauges(ctx, conn)
	return p, s, nil
}

func (r *Runner) logPass(p *Pass, elapsed time.Duration) {
	attrs := []any{"pass", p.ID, "recovery", p.Parts["recovery"], "schedules", p.Parts["schedules"], "stats", p.Parts["stats"],
		"retention", p.Parts["retention"], "elapsed", elapsed}
	var deleted int64
	for _, n := range p.Deleted {
		deleted += n
	}
	busy := p.Recovery != (RecoveryCounts{}) || p.Schedules != (ScheduleCounts{}) || deleted > 0
	if busy {
		attrs = append(attrs, "recovered", p.Recovery.Recovered, "lost_leases", p.Recovery.LostLeases,
			"dead_lettered", p.Recovery.DeadLettered, "scheduled_sent", p.Schedules.Sent, "schedules_refused", p.Schedules.Refused,
			"deleted", deleted)
	}
	switch {
	case p.Error != "":
		r.log.Error("maintenance pass recorded an error", append(attrs, "error", pgsweep.RedactSecrets(p.Error))...)
	case busy:
		r.log.Info("maintenance pass", attrs...)
	default:
		r.log.Debug("maintenance pass", attrs...)
	}
}

// releaseLeases gives up every lease this owner holds, on a new connection
// (the pass's connection may have been cancelled). When a pass was cancelled
// by the stop (or its connection died and its history is not closed yet),
// maintain_fail_owner closes its unfinished history rows ("the runner
// stopped during this pass") and releases the leases in one statement:
// releasing first would let another holder take a part's lease and mark the
// still-open run 'abandoned' before it was closed.
func (r *Runner) releaseLeases() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	conn, err := r.connect(ctx)
	if err != nil {
		r.log.Warn("could not release leases; they expire after their TTL", "error", redactErr(err))
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	r.mu.Lock()
	pending := r.pending != nil
	r.mu.Unlock()
	// With a failed pass to record, maintain_fail_owner releases the leases
	// (recordPending): only list them here.
	release := r.sql(conn).LeaseReleaseOwner
	if pending {
		release = r.sql(conn).OwnerLeases
	}
	names, err := release(ctx, r.owner)
	if err != nil {
		r.log.Warn("could not release leases; they expire after their TTL", "error", redactErr(err))
		return
	}
	if pending {
		if err := r.recordPending(ctx, conn); err != nil {
			r.log.Warn("could not record the interrupted pass or release leases; they expire after their TTL", "error", redactErr(err))
			return
		}
	}
	r.log.Info("released leases", "leases", names)
}

// recordPending closes the history rows of the pending pass, if any, on conn
// (a working connection other than the pass's own): it waits until the
// pass's backend is gone, then records the error with maintain_fail_owner,
// which also releases this owner's leases.
func (r *Runner) recordPending(ctx context.Context, conn Conn) error {
	r.mu.Lock()
	p := r.pending
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	for _, b := range p.backends {
		r.awaitBackend(ctx, conn, b)
	}
	if err := r.sql(conn).MaintainFailOwner(ctx, r.owner, p.msg); err != nil {
		return err
	}
	r.mu.Lock()
	if r.pending == p {
		r.pending = nil
	}
	r.mu.Unlock()
	r.log.Info("recorded the failed pass", "error", p.msg)
	return nil
}

// recordPendingFresh runs recordPending on a connection of its own. When the
// database cannot be reached, the record stays pending for the next pass (or
// the stop).
func (r *Runner) recordPendingFresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	conn, err := r.connect(ctx)
	if err != nil {
		r.log.Warn("could not record the failed pass yet; retrying with the next pass", "error", redactErr(err))
		return
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := r.recordPending(ctx, conn); err != nil {
		r.log.Warn("could not record the failed pass yet; retrying with the next pass", "error", redactErr(err))
	}
}

// awaitBackend waits until the backend of an ended pass is gone. The pass's
// client saw the cancellation (or the broken connection) at once, but its
// backend may still be running maintain() -- and commit the start of a
// part's run -- after maintain_fail_owner closed this owner's rows; that run
// would stay 'running'. The backend exits once it sees the cancel request or
// the closed socket (client_connection_check_interval); after a few seconds
// it is terminated. The backend is recognised by its pid and start time: a
// server that restarted may have given the pid to another session (this one
// included).
func (r *Runner) awaitBackend(ctx context.Context, conn Conn, b backend) {
	if b.pid == 0 {
		return
	}
	var start *time.Time
	if !b.start.IsZero() {
		start = &b.start
	}
	alive := func() bool {
		ok, err := r.sql(conn).BackendAlive(ctx, b.pid, start)
		return err == nil && ok
	}
	terminate := time.Now().Add(3 * time.Second)
	for alive() && ctx.Err() == nil {
		if time.Now().After(terminate) {
			r.log.Warn("the ended pass's backend is still running; terminating it", "pid", b.pid)
			_ = r.sql(conn).TerminateBackend(ctx, b.pid, start)
			terminate = time.Now().Add(time.Hour)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Health is the runner's health as /healthz reports it.
type Health struct {
	// Healthy is true when the last pass succeeded and ended within
	// Options.HealthyWithin of now, or when a pass is in flight and was seen
	// to commit a step within Options.HealthyWithin of now (a long pass that
	// makes progress is alive, even after failed passes); false before the
	// first success or sign of progress.
	Healthy bool `json:"healthy"`
	// Owner is the runner's lease owner identity (Runner.Owner).
	Owner string `json:"owner"`
	// LastAttempt is when the last pass ended, failed or not (local clock);
	// zero before the first pass.
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	// LastSuccess is when the last successful pass ended (local clock); zero
	// before the first success.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// PassInFlight is true while a pass runs.
	PassInFlight bool `json:"pass_in_flight"`
	// LastProgress is when the pass in flight was last seen to commit a step
	// (local clock; the database is looked at every few seconds while a pass
	// runs); zero when no pass runs or none was seen yet.
	LastProgress time.Time `json:"last_progress,omitzero"`
	// LastError is the last pass's error, passwords removed; empty when that
	// pass succeeded. A pass cancelled by a stop (Stop, or Run's context)
	// sets it too.
	LastError string `json:"last_error,omitempty"`
	// Failures is the number of consecutive passes that failed since the
	// last success; cancelled passes do not count.
	Failures int `json:"consecutive_failures"`
}

// Health reports whether the last pass succeeded, recently enough, or the
// pass in flight recently committed a step.
func (r *Runner) Health() Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := Health{Owner: r.owner, LastAttempt: r.lastAttempt, LastSuccess: r.lastSuccess, Failures: r.failures,
		PassInFlight: r.inPass}
	if r.inPass {
		h.LastProgress = r.lastProgress
	}
	if r.lastErr != nil {
		h.LastError = pgsweep.RedactSecrets(r.lastErr.Error())
	}
	within := r.opts.HealthyWithin
	if within <= 0 {
		iv := r.interval
		if iv <= 0 {
			iv = defaultInterval
		}
		within = 2*iv + r.opts.Budget + 30*time.Second
	}
	now := r.now()
	succeeded := r.lastErr == nil && !r.lastSuccess.IsZero() && now.Sub(r.lastSuccess) <= within
	progressing := !h.LastProgress.IsZero() && now.Sub(h.LastProgress) <= within
	h.Healthy = succeeded || progressing
	return h
}

// redactErr renders an error for a log line without any password a
// connection string in it may carry.
func redactErr(err error) string { return pgsweep.RedactSecrets(err.Error()) }
