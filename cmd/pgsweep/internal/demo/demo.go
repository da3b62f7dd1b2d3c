// Package demo is `pgsweep demo`: pgsweep at work on one database. Two
// producers, three workers with a flaky handler, a worker that dies holding
// its batch and three maintenance runners share a queue and a CAP-shaped
// table with a retention backlog; the demo prints progress once a second
// and, once everything converged, verifies the outcome from the database.
//
// The demo installs pgsweep into a scratch schema it creates and marks
// itself (package scratch); it refuses a schema that exists without its
// marker, and it connects only to the database --database-url names.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
	"github.com/pgsweep/pgsweep/internal/scratch"
	"github.com/pgsweep/pgsweep/runner"
)

// command names the demo in its scratch schema's marker.
const command = "demo"

// DefaultSchema is the demo's scratch schema unless --schema says otherwise.
const DefaultSchema = "pgsweep_demo"

// ErrUsage is wrapped by the errors of bad flag values (scratch.ErrUsage).
var ErrUsage = scratch.ErrUsage

// Options are the flags of `pgsweep demo`.
type Options struct {
	// DB is where to run: DB.URL is required (the demo never falls back to
	// PGSWEEP_DATABASE_URL or the PG* variables), DB.Schema is the scratch
	// schema the demo installs pgsweep into.
	DB       scratch.DB
	Messages int           // sent by the producers in all, at least 100
	CapRows  int           // rows of the CAP-shaped table, 80% of them expired; at least 1000
	Timeout  time.Duration // give up (and fail) after this long
}

// RegisterFlags registers the flags of `pgsweep demo` on fs, with their defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, "PostgreSQL URL or DSN (required; $PGSWEEP_DATABASE_URL, the runner's database, is never read)",
		DefaultSchema, "scratch schema the demo installs into; it is dropped and re-created on every run (only one the demo created)")
	fs.IntVar(&o.Messages, "messages", 10000, "messages the producers send")
	fs.IntVar(&o.CapRows, "cap-rows", 200000, "rows in the CAP-shaped table (80% expired)")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "fail when the demo has not converged by then")
}

// Run runs the demo and writes its progress and verification to out. It
// fails when the demo does not converge within o.Timeout or a check fails.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if err := o.DB.Validate(); err != nil {
		return err
	}
	if o.Messages < 100 || o.CapRows < 1000 {
		return fmt.Errorf("%w: --messages must be at least 100 and --cap-rows at least 1000", ErrUsage)
	}
	if o.DB.URL == "" {
		return fmt.Errorf("%w: no database: pass --database-url (or run `make demo`, which starts a throwaway one); "+
			"the demo does not read $PGSWEEP_DATABASE_URL", ErrUsage)
	}
	cfg := demoConfig{messages: o.Messages, capRows: o.CapRows, timeout: o.Timeout, poisonMod: 97}
	return demo(ctx, &o.DB, cfg, out)
}

// demoConfig sizes the demo; the defaults finish in well under a minute.
type demoConfig struct {
	messages  int           // sent by the producers in all
	capRows   int           // rows of the CAP-shaped table, 80% of them expired
	poisonMod int           // messages whose n is a multiple of this always fail
	timeout   time.Duration // give up (and fail) after this long
}

// demoState is what the demo's actors report, for progress and verification.
type demoState struct {
	sent, completed, failed, deadLettered, lost atomic.Int64
	killed                                      atomic.Bool // the doomed worker died holding its batch

	mu      sync.Mutex
	ids     []int64       // every id the producers sent
	doomed  []int64       // the ids the killed worker died holding
	handled map[int64]int // successful handler runs per id
}

func demo(ctx context.Context, db *scratch.DB, cfg demoConfig, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	start := time.Now()
	// step is called from the watcher and from the workers' goroutines.
	var outMu sync.Mutex
	step := func(format string, args ...any) {
		line := fmt.Sprintf("%6.1fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
		outMu.Lock()
		defer outMu.Unlock()
		io.WriteString(out, line)
	}

	pool, err := db.Pool(ctx, 40)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := demoSetup(ctx, pool, db.Schema, cfg, step); err != nil {
		return err
	}
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		return err
	}

	st := &demoState{handled: map[int64]int{}}
	var wg sync.WaitGroup
	actors, stopActors := context.WithCancel(ctx)
	defer stopActors()
	errc := make(chan error, 16)
	spawn := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(actors); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}

	// Three maintenance runners, as three replicas would run them.
	connCfg, err := db.ConnConfig()
	if err != nil {
		return err
	}
	for i := range 3 {
		r, err := runner.New(runner.ConnectConfig(connCfg, "pgsweep demo runner"), runner.Options{
			Schema: db.Schema, Owner: fmt.Sprintf("runner-%d", i+1),
			Interval: 500 * time.Millisecond, Jitter: 200 * time.Millisecond, Budget: 5 * time.Second,
		})
		if err != nil {
			return err
		}
		spawn(r.Owner(), r.Run)
	}
	// Two producers, each sending half the messages in small transactions.
	for p := range 2 {
		spawn(fmt.Sprintf("producer-%d", p+1), func(ctx context.Context) error {
			return demoProduce(ctx, client, st, p, cfg)
		})
	}
	// A worker that works for a while, then dies holding a batch: recovery
	// hands its rows back after the lease expires.
	spawn("doomed worker", func(ctx context.Context) error {
		return demoDoomed(ctx, client, st, cfg, step)
	})
	// Three workers with a handler that fails now and then, and always for poison messages.
	for w := range 3 {
		wk, err := pgsweep.NewWorker(pool, demoHandler(st, cfg), pgsweep.WorkerOptions{
			Schema: db.Schema, Queue: "orders", Owner: fmt.Sprintf("worker-%d", w+1),
			Batch: 50, Concurrency: 8, Lease: 5 * time.Second, PollInterval: 200 * time.Millisecond,
			Hooks:  demoHooks(st),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			return err
		}
		spawn(wk.Owner(), wk.Run)
	}

	err = demoWatch(ctx, pool, db.Schema, st, cfg, step, errc)
	stopActors()
	wg.Wait()
	if err != nil {
		return err
	}
	return demoVerify(context.WithoutCancel(ctx), pool, db.Schema, st, cfg, out)
}

func demoHandler(st *demoState, cfg demoConfig) pgsweep.Handler {
	return func(ctx context.Context, d *pgsweep.Delivery) error {
		var body struct{ N int }
		if err := json.Unmarshal(d.Payload, &body); err != nil {
			return err
		}
		if body.N%cfg.poisonMod == 0 {
			return fmt.Errorf("poison message %d", body.N)
		}
		if d.Attempt == 1 && body.N%10 == 3 {
			return pgsweep.RetryAfter(errors.New("transient failure"), 100*time.Millisecond)
		}
		st.mu.Lock()
		st.handled[d.ID]++
		st.mu.Unlock()
		return nil
	}
}

func demoHooks(st *demoState) pgsweep.Hooks {
	return pgsweep.Hooks{
		Completed:    func(_ string, n int) { st.completed.Add(int64(n)) },
		Failed:       func(_ string, n int) { st.failed.Add(int64(n)) },
		DeadLettered: func(_ string, n int) { st.deadLettered.Add(int64(n)) },
		LeasesLost:   func(_ string, n int) { st.lost.Add(int64(n)) },
	}
}

func demoProduce(ctx context.Context, c *pgsweep.Client, st *demoState, p int, cfg demoConfig) error {
	const batch = 25
	for first := p * cfg.messages / 2; first < (p+1)*cfg.messages/2; first += batch {
		last := min(first+batch, (p+1)*cfg.messages/2)
		ms := make([]pgsweep.Message, 0, last-first)
		for n := first; n < last; n++ {
			ms = append(ms, pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n": %d}`, n))})
		}
		ids, err := c.SendBatch(ctx, "orders", ms)
		if err != nil {
			return err
		}
		st.mu.Lock()
		st.ids = append(st.ids, ids...)
		st.mu.Unlock()
		st.sent.Add(int64(len(ids)))
		if err := ctxsleep.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// demoDoomed claims and completes like a worker until half the messages are
// sent, then claims one more batch and "dies": it never completes, renews or
// releases it. (Half-way, so that the producers are sure to send it a batch.)
func demoDoomed(ctx context.Context, c *pgsweep.Client, st *demoState, cfg demoConfig, step func(string, ...any)) error {
	const owner = "doomed-worker"
	handle := demoHandler(st, cfg)
	done := 0
	for st.sent.Load() < int64(cfg.messages/2) {
		ds, err := c.Claim(ctx, "orders", owner, 20, 2*time.Second)
		if err != nil {
			return err
		}
		ids := make([]int64, 0, len(ds))
		for _, d := range ds {
			if handle(ctx, &d) == nil {
				ids = append(ids, d.ID)
			} else if _, err := c.Fail(ctx, "orders", d.Token, []int64{d.ID}, "doomed worker failed it", 0); err != nil {
				return err
			}
		}
		if len(ids) > 0 {
			acted, err := c.Complete(ctx, "orders", ds[0].Token, ids) // one token per claim call
			if err != nil {
				return err
			}
			st.completed.Add(int64(len(acted)))
		}
		done += len(ds)
		if err := ctxsleep.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	var ds []pgsweep.Delivery
	for len(ds) == 0 { // the live workers keep the queue short: wait for a batch
		var err error
		if ds, err = c.Claim(ctx, "orders", owner, 100, 2*time.Second); err != nil {
			return err
		}
		if err := ctxsleep.Sleep(ctx, 2*time.Millisecond); err != nil {
			return err
		}
	}
	st.mu.Lock()
	for _, d := range ds {
		st.doomed = append(st.doomed, d.ID)
	}
	st.mu.Unlock()
	st.killed.Store(true)
	step("doomed-worker processed %d messages, then claimed %d more and was killed; its lease expires in 2s", done, len(ds))
	return nil
}

// demoSetup re-creates the demo schema, pgsweep in it, the queue, and a
// CAP-shaped table with a retention backlog.
func demoSetup(ctx context.Context, pool *pgxpool.Pool, schema string, cfg demoConfig, step func(string, ...any)) error {
	res, err := scratch.Reinstall(ctx, pool, schema, command)
	if err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	step("installed pgsweep into schema %s (version %d)", schema, res.To)
	_, err = pool.Exec(ctx, fmt.Sprintf(`
		SELECT %[1]s.setting_set('recovery_interval', '1 second');
		SELECT %[1]s.setting_set('retention_check_interval', '1 second');
		SELECT %[1]s.setting_set('maintain_lease_ttl', '10 seconds');
		SELECT %[1]s.queue_create('orders', 'outbox', 3);
		SELECT %[1]s.queue_configure('orders', '{"backoff_base": "50 milliseconds", "backoff_max": "1 second"}');
		CREATE TABLE %[1]s.cap_published (
			"Id" bigint PRIMARY KEY, "Version" varchar(20), "Name" varchar(200) NOT NULL, "Content" text,
			"Retries" int, "Added" timestamp NOT NULL, "ExpiresAt" timestamp, "StatusName" varchar(50) NOT NULL);
		INSERT INTO %[1]s.cap_published
		SELECT g, 'v1', 'orders.created', repeat('x', 200), 0, localtimestamp - interval '3 days',
		       CASE WHEN g %% 5 = 0 THEN NULL ELSE localtimestamp - interval '2 days' END,
		       CASE WHEN g %% 5 = 0 THEN 'Scheduled' WHEN g %% 2 = 0 THEN 'Succeeded' ELSE 'Failed' END
		  FROM generate_series(1, %[2]d) g;
		CREATE INDEX ON %[1]s.cap_published ("ExpiresAt", "StatusName");
		ANALYZE %[1]s.cap_published;
		SELECT %[1]s.retention_register('cap.published', '%[1]s.cap_published', 'ExpiresAt', '1 day',
		       'StatusName', ARRAY['Succeeded', 'Failed'], 5000, 'exclusive', '1 second');`, q, cfg.capRows))
	if err != nil {
		return fmt.Errorf("demo setup: %w", err)
	}
	step("queue orders (outbox, 3 attempts); CAP-shaped table with %d rows, %d of them expired, registered for retention",
		cfg.capRows, cfg.capRows-cfg.capRows/5)
	return nil
}
