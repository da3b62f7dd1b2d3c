package pgsweep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Handler processes one delivery. Returning nil completes the message; an
// error fails it (wrap with RetryAfter to choose the delay). ctx is cancelled
// when the Worker loses the message's lease or abandons it at shutdown.
type Handler func(ctx context.Context, d *Delivery) error

// WorkerOptions configure a Worker. Queue is required; the rest has defaults.
type WorkerOptions struct {
	Schema string // DefaultSchema when empty
	Queue  string
	// Owner identifies this worker's leases; it must be unique per running
	// worker. Default: host name, process id and random bytes.
	Owner string
	// Batch is the most messages claimed at once and held in memory (1..10000, default 100).
	Batch int
	// Concurrency is the number of handlers running at once (default 10).
	Concurrency int
	// Lease is the lease taken per claim and per renewal (1s..1h, default 30s).
	// Leases of running handlers are renewed every Lease/3.
	Lease time.Duration
	// PollInterval is how long an idle worker waits for a notification before
	// it claims anyway (default 1s): the fallback when NOTIFY is lost or off.
	PollInterval time.Duration
	// FlushInterval is the longest a finished message waits for its
	// completion to be sent with others (default 20ms).
	FlushInterval time.Duration
	// ShutdownTimeout is how long Run waits for running handlers once its
	// context is cancelled (default 30s); their leases are then abandoned to
	// expiry and their results discarded.
	ShutdownTimeout time.Duration
	// DisableNotify turns off LISTEN: the worker only polls.
	DisableNotify bool
	Hooks         Hooks
	Logger        *slog.Logger // default slog.Default()
}

// Worker claims messages from one queue and runs a Handler for each with
// bounded concurrency, renewing leases while handlers run and completing or
// failing messages in batches. It holds at most Batch messages in memory.
type Worker struct {
	pool   *pgxpool.Pool
	client *Client
	h      Handler
	o      WorkerOptions
	log    *slog.Logger
}

// NewWorker returns a Worker on pool; call Run to start it.
func NewWorker(pool *pgxpool.Pool, h Handler, opts WorkerOptions) (*Worker, error) {
	if pool == nil || h == nil {
		return nil, errors.New("pgsweep: new worker: pool and handler are required")
	}
	if opts.Queue == "" {
		return nil, errors.New("pgsweep: new worker: Queue is required")
	}
	c, err := NewClient(pool, &ClientOptions{Schema: opts.Schema})
	if err != nil {
		return nil, err
	}
	if opts.Owner == "" {
		opts.Owner = NewOwnerID()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if opts.Batch <= 0 {
		opts.Batch = 100
	}
	if opts.Batch > 10000 {
		return nil, fmt.Errorf("pgsweep: new worker: Batch must be 1..10000, got %d", opts.Batch)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 10
	}
	def(&opts.Lease, 30*time.Second)
	if opts.Lease < time.Second || opts.Lease > time.Hour {
		return nil, fmt.Errorf("pgsweep: new worker: Lease must be 1s..1h, got %v", opts.Lease)
	}
	def(&opts.PollInterval, time.Second)
	def(&opts.FlushInterval, 20*time.Millisecond)
	def(&opts.ShutdownTimeout, 30*time.Second)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("queue", opts.Queue, "owner", opts.Owner)
	return &Worker{pool: pool, client: c, h: h, o: opts, log: log}, nil
}

// NewOwnerID returns a lease owner id unique to this call: host, pid and
// random bytes.
func NewOwnerID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Owner returns the worker's lease owner id.
func (w *Worker) Owner() string { return w.o.Owner }

type job struct {
	d      Delivery
	ctx    context.Context
	cancel context.CancelFunc
	done   bool // handler returned; result waits for the next flush
	lost   bool
}

type result struct {
	j   *job
	err error
}

type failKey struct {
	msg   string
	after time.Duration
}

// Run works the queue until ctx is cancelled, then stops claiming, waits up
// to ShutdownTimeout for running handlers, sends their results, and returns
// nil. Database errors are logged and retried; they do not stop Run. An
// invalid-argument error from claim (such as an unknown queue) does: Run
// returns it at once.
func (w *Worker) Run(ctx context.Context) error {
	o := w.o
	// Handlers and the final flush outlive ctx: they get a context of their
	// own that is cancelled only when the shutdown deadline passes.
	base, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()

	jobs := make(chan *job, o.Batch)
	results := make(chan result, o.Batch)
	quit := make(chan struct{})
	for range o.Concurrency {
		go func() {
			for j := range jobs {
				err := w.call(j)
				select {
				case results <- result{j, err}:
				case <-quit:
					return
				}
			}
		}()
	}
	defer close(quit)
	defer close(jobs)

	wake := make(chan struct{}, 1)
	if !o.DisableNotify {
		lctx, stopListen := context.WithCancel(ctx)
		defer stopListen()
		go w.listen(lctx, wake)
	}

	held := make(map[int64]*job, o.Batch)
	var acks []int64
	fails := map[failKey][]int64{}
	pendingResults := 0 // results received but not yet flushed

	flushErr := false // the last flush failed: retry on the timer, not at once
	flush := func(fctx context.Context) {
		flushErr = false
		if len(acks) > 0 {
			done, err := w.client.Complete(fctx, o.Queue, o.Owner, acks)
			if err != nil {
				w.log.Error("complete failed; will retry", "err", err, "n", len(acks))
				flushErr = true
			} else {
				o.Hooks.call(o.Hooks.Completed, o.Queue, len(done))
				o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(acks)-len(done))
				for _, id := range acks {
					delete(held, id)
				}
				pendingResults -= len(acks)
				acks = acks[:0]
			}
		}
		for k, ids := range fails {
			res, err := w.client.Fail(fctx, o.Queue, o.Owner, ids, k.msg, k.after)
			if err != nil {
				w.log.Error("fail failed; will retry", "err", err, "n", len(ids))
				flushErr = true
				continue
			}
			dead := 0
			for _, r := range res {
				if r.Dead {
					dead++
				}
			}
			o.Hooks.call(o.Hooks.Failed, o.Queue, len(res)-dead)
			o.Hooks.call(o.Hooks.DeadLettered, o.Queue, dead)
			o.Hooks.call(o.Hooks.LeasesLost, o.Queue, len(ids)-len(res))
			for _, id := range ids {
				delete(held, id)
			}
			pendingResults -= len(ids)
			delete(fails, k)
		}
	}

	renew := func() {
		var ids []int64
		for id, j := range held {
			if !j.done && !j.lost {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return
		}
		got, err := w.client.Renew(base, o.Queue, o.Owner, ids, o.Lease)
		if err != nil {
			w.log.Error("renew failed", "err", err, "n", len(ids))
			return
		}
		if len(got) == len(ids) {
			return
		}
		kept := make(map[int64]bool, len(got))
		for _, id := range got {
			kept[id] = true
		}
		lost := 0
		for _, id := range ids {
			if j := held[id]; !kept[id] && j != nil && !j.done {
				j.lost = true
				j.cancel()
				lost++
			}
		}
		o.Hooks.call(o.Hooks.LeasesLost, o.Queue, lost)
	}

	accept := func(r result) {
		r.j.cancel()
		r.j.done = true
		if r.j.lost {
			delete(held, r.j.d.ID) // its lease is gone: the result is discarded
			return
		}
		pendingResults++
		if r.err == nil {
			acks = append(acks, r.j.d.ID)
			return
		}
		k := failKey{msg: r.err.Error()}
		var ra *retryAfterError
		if errors.As(r.err, &ra) {
			k.after = ra.after
		}
		fails[k] = append(fails[k], r.j.d.ID)
	}

	renewTick := time.NewTicker(o.Lease / 3)
	defer renewTick.Stop()
	flushTimer := time.NewTimer(time.Hour)
	flushTimer.Stop()
	flushArmed := false
	idleTimer := time.NewTimer(0)
	idle := false
	var shutdown <-chan time.Time
	stopping := false
	claimBackoff := time.Duration(0)

	for {
		// Claim when at most half a batch is held, so claims overlap with
		// running handlers and memory stays within one batch.
		if !stopping && !idle && len(held) <= o.Batch/2 {
			n := o.Batch - len(held)
			ds, err := w.client.Claim(base, o.Queue, o.Owner, n, o.Lease)
			if errors.Is(err, ErrInvalidArgument) {
				// An unknown queue or a bad option: retrying cannot help.
				abandon()
				return err
			}
			if err != nil {
				w.log.Error("claim failed", "err", err)
				claimBackoff = min(max(2*claimBackoff, 100*time.Millisecond), o.PollInterval)
				idle = true
				idleTimer.Reset(claimBackoff)
			} else {
				claimBackoff = 0
				o.Hooks.call(o.Hooks.Claimed, o.Queue, len(ds))
				for i := range ds {
					jctx, cancel := context.WithCancel(base)
					j := &job{d: ds[i], ctx: jctx, cancel: cancel}
					held[j.d.ID] = j
					jobs <- j // never blocks: at most Batch are held
				}
				if len(ds) < n {
					idle = true
					idleTimer.Reset(o.PollInterval)
				}
			}
		}
		if stopping && len(held) == 0 {
			return nil
		}
		// Flush at once when every held message has its result (nothing else
		// to wait for); otherwise within FlushInterval, so that slow handlers
		// do not hold back the completions of fast ones.
		if !flushErr && pendingResults > 0 && pendingResults == len(held) {
			flush(base)
			continue
		}
		if pendingResults > 0 && !flushArmed {
			if flushErr {
				flushTimer.Reset(o.PollInterval)
			} else {
				flushTimer.Reset(o.FlushInterval)
			}
			flushArmed = true
		}

		select {
		case r := <-results:
			// Take every result that is ready, so that one flush covers
			// them all instead of one flush per handler that finished.
			for more := true; more; {
				accept(r)
				select {
				case r = <-results:
				default:
					more = false
				}
			}
		case <-flushTimer.C:
			flushArmed = false
			flush(base)
		case <-wake:
			idle = false
		case <-idleTimer.C:
			idle = false
		case <-renewTick.C:
			renew()
		case <-ctx.Done():
			if !stopping {
				stopping = true
				shutdown = time.After(o.ShutdownTimeout)
				w.log.Info("worker stopping", "held", len(held))
			}
		case <-shutdown:
			// Abandon: cancel running handlers, send what finished, leave
			// the rest to lease expiry.
			abandon()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			flush(fctx)
			cancel()
			w.log.Warn("shutdown deadline passed; leases abandoned to expiry", "held", len(held))
			return nil
		}
	}
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(j *job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return w.h(j.ctx, &j.d)
}

// listen holds one connection of its own on LISTEN and pokes wake for every
// notification about this worker's queue. On any error it reconnects after
// PollInterval; polling covers the gap.
func (w *Worker) listen(ctx context.Context, wake chan<- struct{}) {
	channel := pgx.Identifier{NotifyChannel(w.client.schema)}.Sanitize()
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pgx.ConnectConfig(ctx, w.pool.Config().ConnConfig.Copy())
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
				return err
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if n.Payload == w.o.Queue {
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}
		}()
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("listen failed; polling until it reconnects", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.o.PollInterval):
		}
	}
}
