package pgsweep

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Handler processes one delivery. Returning nil completes the message; an
// error fails it (wrap with RetryAfter to choose the delay). ctx is cancelled
// when the Worker loses the message's lease or abandons it at shutdown.
type Handler func(ctx context.Context, d *Delivery) error

// BatchHandler processes the messages of one claim together (NewBatchWorker):
// for a handler that is cheaper per batch than per message, such as a
// publish to a broker that confirms many messages at once. It returns one
// error per delivery, in order: nil completes the message, an error fails
// it, as for a Handler (RetryAfter, Permanent and GiveBack apply too). A
// result slice of another length fails every message of the batch. ctx is
// cancelled when the Worker abandons the batch at its shutdown deadline;
// a message whose lease is lost meanwhile has its result discarded.
type BatchHandler func(ctx context.Context, ds []*Delivery) []error

// WorkerOptions configure a Worker. Queue is required; the rest has defaults.
type WorkerOptions struct {
	// Schema is the schema pgsweep is installed in (DefaultSchema when empty).
	Schema string
	// Queue is the queue to work. Required.
	Queue string
	// Owner labels this worker's claims (who holds a message, for people
	// and metrics). Each claim's token fences it, so a label shared by
	// several workers is no danger to correctness; but the claims of one
	// owner share one place in the rotation between a queue's groups
	// (Message.Group), so workers that share a label serve groups less
	// evenly. Default: host name, process id and random bytes.
	Owner string
	// Batch is the most messages claimed at once and held in memory
	// (default 100). claim accepts 1..10000: otherwise Run returns its
	// ErrInvalidArgument.
	Batch int
	// Concurrency is the number of handlers running at once (default 10);
	// with a BatchHandler, the number of batches.
	Concurrency int
	// Lease is the lease taken per claim and per renewal. Zero means the
	// queue's lease_default, read when Run starts. Leases of held messages
	// are renewed every Lease/3; a handler whose lease could not be renewed
	// is cancelled a fifth of the lease before it would expire, so that it
	// has stopped before another worker can take its message over (or, in
	// an ordered lane, the message after it), and a message whose lease ran
	// that low before its handler started is not started. claim accepts
	// 1s..1h: otherwise Run returns its ErrInvalidArgument.
	Lease time.Duration
	// PollInterval is how long an idle worker waits for a notification before
	// it claims anyway (default 1s): the fallback when NOTIFY is lost or off.
	PollInterval time.Duration
	// FlushInterval is the longest a finished message waits for its
	// completion to be sent with others (default 20ms).
	FlushInterval time.Duration
	// ShutdownTimeout is how long Run waits for running handlers once its
	// context is cancelled (default 30s). Messages claimed but not started
	// are released at once; when the deadline passes, running handlers'
	// contexts are cancelled, their leases abandoned to expiry and their
	// results discarded.
	ShutdownTimeout time.Duration
	// DisableNotify turns off LISTEN: the worker only polls. With NOTIFY on,
	// the Worker holds one extra connection of its own (not from the pool).
	DisableNotify bool
	// ClaimLimit, when set, is called before each claim and caps it: the
	// most messages to claim now. A handler whose downstream is down
	// returns 0: the Worker claims nothing and asks again after
	// PollInterval or on a notification (see Notify), while the messages
	// it holds finish as usual. Called from Run's goroutine; it must
	// return quickly.
	ClaimLimit func() int
	// Hooks receive counts for metrics.
	Hooks Hooks
	// Logger receives the Worker's logs (default slog.Default()).
	Logger *slog.Logger
	// TracerProvider receives the Worker's spans, one "process" span per
	// message whose parent is the message's creation context
	// (docs/tracing.md); nil: the global provider (otel.GetTracerProvider),
	// a no-op until the application sets one.
	TracerProvider trace.TracerProvider
}

// Worker claims messages from one queue and runs a Handler for each with
// bounded concurrency, renewing leases while handlers run and completing or
// failing messages in batches. It holds at most Batch messages in memory.
//
// Ordered lanes (Message.Lane) need nothing of it: claim hands out one
// message of a lane at a time and the next only once it was completed or
// dead-lettered, so each lane runs strictly in order and different lanes
// run concurrently, on any number of Workers.
type Worker struct {
	client  *Client
	connect func(context.Context) (*pgx.Conn, error) // the LISTEN connection; nil: poll only
	h       Handler                                  // one of h and bh is set
	bh      BatchHandler                             //
	wake    chan struct{}                            // capacity 1: a notification (LISTEN, Notify) waits for Run
	o       WorkerOptions
	log     *slog.Logger
	tracer  trace.Tracer
	// processName is the name of its process spans: "process <queue>";
	// processAttrs the attributes they all have.
	processName  string
	processAttrs []attribute.KeyValue
	running      atomic.Bool

	// Test hooks (see export_test.go): observe is called with the number of
	// messages held after every claim; crash, when closed, makes Run return
	// at once as if the process died.
	observe func(held int)
	crash   chan struct{}
	signals workerSignals // off (and free) unless a test turns them on
}

// NewWorker returns a Worker on pool; call Run to start it. Unless
// DisableNotify is set, Run also opens one connection of its own, outside
// the pool, for LISTEN.
func NewWorker(pool *pgxpool.Pool, h Handler, opts WorkerOptions) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("pgsweep: new worker: pool is required")
	}
	if h == nil {
		return nil, errors.New("pgsweep: new worker: handler is required")
	}
	return newWorker(pool, listenConnect(pool), h, nil, opts)
}

// NewBatchWorker returns a Worker on pool that runs h once per claimed
// batch instead of once per message; the rest is as for NewWorker.
// Concurrency counts batches (default 10), and a batch is what one claim
// brought (at most Batch messages, at most one per ordered lane).
func NewBatchWorker(pool *pgxpool.Pool, h BatchHandler, opts WorkerOptions) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("pgsweep: new worker: pool is required")
	}
	if h == nil {
		return nil, errors.New("pgsweep: new worker: handler is required")
	}
	return newWorker(pool, listenConnect(pool), nil, h, opts)
}

// listenConnect opens the LISTEN connection of a Worker on pool.
func listenConnect(pool *pgxpool.Pool) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) {
		cfg := pool.Config().ConnConfig.Copy()
		// The LISTEN connection lives as long as the Worker: a killed
		// process's backend must not linger (the pool's connections are the
		// application's: see SetConnectionCheckInterval).
		SetConnectionCheckInterval(cfg, DefaultConnectionCheckInterval)
		PinSearchPath(cfg)
		return pgx.ConnectConfig(ctx, cfg)
	}
}

// newWorker is NewWorker on any DBTX with a Handler h or a BatchHandler bh;
// connect opens the LISTEN connection (nil: the worker only polls).
func newWorker(db DBTX, connect func(context.Context) (*pgx.Conn, error), h Handler, bh BatchHandler, opts WorkerOptions) (*Worker, error) {
	if db == nil || (h == nil) == (bh == nil) {
		return nil, errors.New("pgsweep: new worker: pool and handler are required")
	}
	if opts.Queue == "" {
		return nil, errors.New("pgsweep: new worker: Queue is required")
	}
	c, err := NewClient(db, &ClientOptions{Schema: opts.Schema})
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
	if opts.Batch == 0 {
		opts.Batch = 100
	}
	if opts.Concurrency < 0 {
		return nil, fmt.Errorf("pgsweep: new worker: Concurrency must be at least 1 (0: 10), got %d", opts.Concurrency)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 10
	}
	def(&opts.PollInterval, time.Second)
	def(&opts.FlushInterval, 20*time.Millisecond)
	def(&opts.ShutdownTimeout, 30*time.Second)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("queue", opts.Queue, "owner", opts.Owner)
	if opts.DisableNotify {
		connect = nil
	}
	return &Worker{client: c, connect: connect, h: h, bh: bh, o: opts, log: log, tracer: newTracer(opts.TracerProvider), processName: "process " + opts.Queue,
		processAttrs: processAttributes(opts.Queue, opts.Owner),
		wake:         make(chan struct{}, 1), crash: make(chan struct{})}, nil
}

// Notify makes a running Worker that waits for work claim at once, as a
// NOTIFY on its queue does: for an application that knows messages just
// became due (or a Worker run with DisableNotify that is told some other
// way). It never blocks; notifications that come together count once.
func (w *Worker) Notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// NewOwnerID returns an owner label unique to this call: host, pid and
// random bytes.
func NewOwnerID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Owner returns the worker's owner label.
func (w *Worker) Owner() string { return w.o.Owner }
