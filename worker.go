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
)

// Handler processes one delivery. Returning nil completes the message; an
// error fails it (wrap with RetryAfter to choose the delay). ctx is cancelled
// when the Worker loses the message's lease or abandons it at shutdown.
type Handler func(ctx context.Context, d *Delivery) error

// WorkerOptions configure a Worker. Queue is required; the rest has defaults.
type WorkerOptions struct {
	// Schema is the schema pgsweep is installed in (DefaultSchema when empty).
	Schema string
	// Queue is the queue to work. Required.
	Queue string
	// Owner labels this worker's claims (who holds a message, for people
	// and metrics). Each claim's token fences it, so a label shared by
	// several workers is no danger, only confusing. Default: host name,
	// process id and random bytes.
	Owner string
	// Batch is the most messages claimed at once and held in memory
	// (default 100). claim accepts 1..10000: otherwise Run returns its
	// ErrInvalidArgument.
	Batch int
	// Concurrency is the number of handlers running at once (default 10).
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
	// Hooks receive counts for metrics.
	Hooks Hooks
	// Logger receives the Worker's logs (default slog.Default()).
	Logger *slog.Logger
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
	h       Handler
	o       WorkerOptions
	log     *slog.Logger
	running atomic.Bool

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
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		cfg := pool.Config().ConnConfig.Copy()
		// The LISTEN connection lives as long as the Worker: a killed
		// process's backend must not linger (the pool's connections are the
		// application's: see SetConnectionCheckInterval).
		SetConnectionCheckInterval(cfg, DefaultConnectionCheckInterval)
		PinSearchPath(cfg)
		return pgx.ConnectConfig(ctx, cfg)
	}
	return newWorker(pool, connect, h, opts)
}

// newWorker is NewWorker on any DBTX; connect opens the LISTEN connection
// (nil: the worker only polls).
func newWorker(db DBTX, connect func(context.Context) (*pgx.Conn, error), h Handler, opts WorkerOptions) (*Worker, error) {
	if db == nil || h == nil {
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
	return &Worker{client: c, connect: connect, h: h, o: opts, log: log, crash: make(chan struct{})}, nil
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
