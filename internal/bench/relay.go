package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/scratch"
	"github.com/pgsweep/pgsweep/relay"
	_ "github.com/pgsweep/pgsweep/relay/amqp" // relay.OpenURL: amqp://, amqps://
	_ "github.com/pgsweep/pgsweep/relay/nats" // relay.OpenURL: nats://, tls://
)

// bench relay: the relay end to end, in one run on one database and broker:
//
//	claim:     pgsweep claim + complete with no broker (bench claim's
//	           "pgsweep" contender): the rate the relay is compared with;
//	burn-down: N messages already in the outbox, R relays publish them all
//	           (claim, publish, wait for the broker's acks, complete);
//	direct:    messages sent at a steady rate, one per transaction, and
//	           Dispatch called after each commit: latency from the commit to
//	           the broker's ack (p50, p99, max);
//	notify:    the same traffic without Dispatch: the relays find the
//	           messages by LISTEN/NOTIFY (and polling).
//
// pgsweep is installed into a scratch schema (--schema, default
// pgsweep_bench_relay_<pid>) that the workload creates, marks and drops. A
// nats:// --to without subject= gets a JetStream stream of its own
// (PGSWEEP_BENCH_<pid>, subject pgsweep.bench.<pid>), deleted at the end.

const relayCommand = "bench relay"

// RelayOptions are the flags of `pgsweep bench relay`.
type RelayOptions struct {
	DB       scratch.DB
	To       string        // the broker URL (pgsweep relay --to)
	Messages int           // burn-down and claim: messages per contender
	Relays   int           // relays (each its own claims and dispatch)
	Workers  int           // claim + complete workers
	Batch    int           // messages per claim
	Rate     int           // direct/notify: messages per second
	Duration time.Duration // direct/notify: how long each sends
	// Tracing is the tracing modes burn-down, direct and notify run in,
	// comma-separated, side by side: off, memory (tracing.go); "": off.
	Tracing string
}

// RegisterFlags registers the flags of `pgsweep bench relay`.
func (o *RelayOptions) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, scratch.URLUsage, "", "scratch schema pgsweep is installed into for the run, created and dropped by it "+
		"(default pgsweep_bench_relay_<pid>); any other schema that exists, a real install included, is refused")
	fs.StringVar(&o.To, "to", "", "the broker, as pgsweep relay --to takes it (nats://HOST:PORT: a scratch stream is made; or amqp://…?routing_key=…&declare_queue=…) (required)")
	fs.IntVar(&o.Messages, "messages", 20000, "burn-down and claim: messages to drain")
	fs.IntVar(&o.Relays, "relays", 4, "relays publishing at once")
	fs.IntVar(&o.Workers, "workers", 4, "claim + complete workers (the comparison)")
	fs.IntVar(&o.Batch, "batch", 100, "messages per claim (1..10000)")
	fs.IntVar(&o.Rate, "rate", 1000, "direct and notify: messages sent per second, one per transaction")
	fs.DurationVar(&o.Duration, "duration", 10*time.Second, "direct and notify: how long each sends")
	tracingFlag(fs, &o.Tracing, "run burn-down, direct and notify")
}

// Relay runs `pgsweep bench relay`.
func Relay(ctx context.Context, o RelayOptions, out io.Writer) error {
	if o.DB.Schema == "" {
		o.DB.Schema = fmt.Sprintf("pgsweep_bench_relay_%d", os.Getpid())
	}
	if err := o.DB.Validate(); err != nil {
		return err
	}
	if o.To == "" {
		return fmt.Errorf("%w: --to is required (nats://HOST:PORT or amqp://…)", ErrUsage)
	}
	if o.Messages < 1 || o.Relays < 1 || o.Workers < 1 || o.Batch < 1 || o.Batch > 10000 || o.Rate < 1 || o.Duration <= 0 {
		return fmt.Errorf("%w: --messages, --relays, --workers, --rate must be >= 1, --batch 1..10000, --duration > 0", ErrUsage)
	}
	modes, err := parseTracing(o.Tracing)
	if err != nil {
		return err
	}
	pool, err := o.DB.Pool(ctx, int32(o.Relays*4+o.Workers+8))
	if err != nil {
		return err
	}
	defer pool.Close()
	// the scratch schema first: one of that name that is not ours stops
	// the bench before it changes anything, the broker included
	if _, err := scratch.Reinstall(ctx, pool, o.DB.Schema, relayCommand); err != nil {
		return err
	}
	defer func() { _ = scratch.Drop(context.WithoutCancel(ctx), pool, o.DB.Schema, relayCommand) }()
	to, cleanupBroker, err := benchBroker(ctx, o.To)
	if err != nil {
		return err
	}
	defer cleanupBroker()
	u, _ := url.Parse(to)
	fmt.Fprintf(out, "bench relay: %d messages, %d relays, batch %d; latency at %d msg/s for %v; broker %s://%s (schema %s)\n",
		o.Messages, o.Relays, o.Batch, o.Rate, o.Duration, u.Scheme, u.Host, o.DB.Schema)

	b := &relayBench{o: o, to: to, pool: pool, out: out, tr: newTracer(tracingOff)}
	// 1. claim + complete, no broker: bench claim's pgsweep contender
	cb := &claimBench{scratch: fmt.Sprintf("pgsweep_bench_relay_%d_scratch", os.Getpid()), queue: "bench_claim", pool: pool, schema: o.DB.Schema,
		n: o.Messages, w: o.Workers, b: o.Batch, rescan: time.Second, out: io.Discard}
	d, err := cb.pgsweepSQL(ctx)
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	claimRate := float64(o.Messages) / d.Seconds()
	fmt.Fprintf(out, "claim      %8d msgs in %6.2fs = %8.0f msg/s (claim + complete, %d workers, no broker)\n", o.Messages, d.Seconds(), claimRate, o.Workers)
	// 2. to 4., once per tracing mode
	burn := map[string]float64{}
	lats := map[string][2]latency{}
	for _, mode := range modes {
		b.tr = newTracer(mode)
		b.suffix = modeSuffix(mode)
		err := b.phases(ctx, burn, lats)
		spans := b.tr.Spans()
		b.tr.Close()
		if err != nil {
			return err
		}
		if mode != tracingOff {
			fmt.Fprintf(out, "tracing %s: %d spans\n", mode, spans)
		}
	}
	fmt.Fprintln(out, "\nresults:")
	fmt.Fprintf(out, "  %-52s %8.0f msg/s\n", "pgsweep claim + complete (no broker)", claimRate)
	for _, mode := range modes {
		sfx, tag := modeSuffix(mode), ""
		if mode != tracingOff {
			tag = ", tracing " + mode
		}
		fmt.Fprintf(out, "  %-52s %8.0f msg/s\n", "relay burn-down (claim, publish, ack, complete)"+tag, burn[sfx])
		fmt.Fprintf(out, "  %-52s %8.2fx\n", "burn-down / claim + complete (target >= 0.5)"+tag, burn[sfx]/claimRate)
		lat := lats[sfx]
		fmt.Fprintf(out, "  %-52s p50 %s  p99 %s\n", fmt.Sprintf("direct dispatch at %d msg/s (target p99 <= 10 ms)%s", o.Rate, tag), ms(lat[0].p50), ms(lat[0].p99))
		fmt.Fprintf(out, "  %-52s p50 %s  p99 %s\n", fmt.Sprintf("LISTEN/NOTIFY only at %d msg/s%s", o.Rate, tag), ms(lat[1].p50), ms(lat[1].p99))
	}
	if off, mem := burn[""], burn[modeSuffix(tracingMemory)]; off > 0 && mem > 0 {
		fmt.Fprintf(out, "  %-52s %8.2fx\n", "burn-down: tracing memory / off (target >= 0.8)", mem/off)
	}
	return nil
}

// phases runs burn-down, direct and notify in b's tracing mode, and keeps
// their figures under b.suffix.
func (b *relayBench) phases(ctx context.Context, burn map[string]float64, lats map[string][2]latency) error {
	d, err := b.burnDown(ctx)
	if err != nil {
		return fmt.Errorf("burn-down%s: %w", b.suffix, err)
	}
	burnRate := float64(b.o.Messages) / d.Seconds()
	burn[b.suffix] = burnRate
	fmt.Fprintf(b.out, "%-10s %8d msgs in %6.2fs = %8.0f msg/s (sent → confirmed by the broker → completed)\n", "burn-down"+b.suffix, b.o.Messages, d.Seconds(), burnRate)
	var lat [2]latency
	for i, direct := range []bool{true, false} {
		if lat[i], err = b.steady(ctx, direct); err != nil {
			return fmt.Errorf("steady%s: %w", b.suffix, err)
		}
		name := map[bool]string{true: "direct", false: "notify"}[direct] + b.suffix
		fmt.Fprintf(b.out, "%-10s %8d msgs at %6.0f msg/s: commit → broker ack p50 %s, p99 %s, max %s\n", name, lat[i].n, lat[i].rate,
			ms(lat[i].p50), ms(lat[i].p99), ms(lat[i].max))
	}
	lats[b.suffix] = lat
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// benchBroker returns the --to URL to use: a nats:// URL without subject=
// gets a scratch stream of its own (deleted by the returned cleanup).
func benchBroker(ctx context.Context, to string) (string, func(), error) {
	u, err := url.Parse(to)
	if err != nil {
		return "", nil, fmt.Errorf("%w: --to: not a URL", ErrUsage)
	}
	if !slices.Contains(relay.Schemes(), strings.ToLower(u.Scheme)) {
		return "", nil, fmt.Errorf("%w: --to: scheme must be one of %s, got %q", ErrUsage, strings.Join(relay.Schemes(), ", "), u.Scheme)
	}
	nothing := func() {}
	if s := strings.ToLower(u.Scheme); (s != "nats" && s != "tls") || u.Query().Get("subject") != "" {
		return to, nothing, nil // the broker's own destination
	}
	name := fmt.Sprintf("PGSWEEP_BENCH_%d", os.Getpid())
	subject := fmt.Sprintf("pgsweep.bench.%d", os.Getpid())
	nc, err := natsgo.Connect(to)
	if err != nil {
		return "", nil, fmt.Errorf("nats: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return "", nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute}); err != nil {
		nc.Close()
		return "", nil, fmt.Errorf("nats: create stream %s: %w", name, err)
	}
	q := u.Query()
	q.Set("subject", subject)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(cctx, name)
		nc.Close()
	}, nil
}

type relayBench struct {
	o    RelayOptions
	to   string
	pool *pgxpool.Pool
	out  io.Writer
	// tr traces the phases' sends and relays (a --tracing mode), suffix
	// names their queues and figures ("": off)
	tr     *tracer
	suffix string
}

func (b *relayBench) transport() (relay.Transport, error) {
	return relay.OpenURL(b.to, "pgsweep bench relay", slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// queue makes a fresh queue for one contender.
func (b *relayBench) queue(ctx context.Context, name string) (*pgsweep.Client, error) {
	c, err := pgsweep.NewClient(b.pool, &pgsweep.ClientOptions{Schema: b.o.DB.Schema, TracerProvider: b.tr.Provider})
	if err != nil {
		return nil, err
	}
	if err := c.QueueCreate(ctx, name, pgsweep.Outbox, 10); err != nil {
		return nil, err
	}
	return c, nil
}

// relays starts o.Relays relays on queue; the hook sees every confirmed id.
func (b *relayBench) relays(ctx context.Context, queue string, hook func([]int64)) ([]*relay.Relay, func(), error) {
	tr, err := b.transport()
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var rs []*relay.Relay
	for i := range b.o.Relays {
		r, err := relay.New(b.pool, queue, tr, relay.Options{Schema: b.o.DB.Schema, Owner: fmt.Sprintf("bench-%d-%d", os.Getpid(), i),
			Batch: b.o.Batch, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Hooks: relay.Hooks{Published: hook},
			TracerProvider: b.tr.Provider})
		if err != nil {
			cancel()
			return nil, nil, err
		}
		rs = append(rs, r)
		wg.Go(func() { _ = r.Run(rctx) })
	}
	for _, r := range rs {
		for !r.Health().Running {
			time.Sleep(time.Millisecond)
		}
	}
	return rs, func() { cancel(); wg.Wait(); _ = tr.Close() }, nil
}

func (b *relayBench) burnDown(ctx context.Context) (time.Duration, error) {
	q := "bench_relay_burn" + strings.ReplaceAll(b.suffix, "/", "_")
	c, err := b.queue(ctx, q)
	if err != nil {
		return 0, err
	}
	ms := make([]pgsweep.Message, 0, 10000)
	for i := 0; i < b.o.Messages; i += 10000 {
		ms = ms[:0]
		for range min(10000, b.o.Messages-i) {
			ms = append(ms, pgsweep.Message{Payload: json.RawMessage(benchPayload)})
		}
		if _, err := c.SendBatch(ctx, q, ms); err != nil {
			return 0, err
		}
	}
	if _, err := b.pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{b.o.DB.Schema, "message"}.Sanitize()); err != nil {
		return 0, err
	}
	var done atomic.Int64
	all := make(chan struct{})
	start := time.Now()
	_, stop, err := b.relays(ctx, q, func(ids []int64) {
		if done.Add(int64(len(ids))) >= int64(b.o.Messages) {
			select {
			case <-all:
			default:
				close(all)
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer stop()
	// done when the broker confirmed them all and the queue is empty
	select {
	case <-all:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	for {
		var n int
		if err := b.pool.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+pgx.Identifier{b.o.DB.Schema, "message"}.Sanitize()+" WHERE queue OPERATOR(pg_catalog.=) $1::pg_catalog.text", q).Scan(&n); err != nil {
			return 0, err
		}
		if n == 0 {
			return time.Since(start), nil
		}
		time.Sleep(time.Millisecond)
	}
}

type latency struct {
	n             int
	rate          float64
	p50, p99, max time.Duration
}

// steady sends o.Rate messages per second for o.Duration, one per
// transaction, and measures each from its commit to the broker's ack.
func (b *relayBench) steady(ctx context.Context, direct bool) (latency, error) {
	q := map[bool]string{true: "bench_relay_direct", false: "bench_relay_notify"}[direct] + strings.ReplaceAll(b.suffix, "/", "_")
	c, err := b.queue(ctx, q)
	if err != nil {
		return latency{}, err
	}
	// commit and ack times by id: an ack can come before the producer has
	// recorded the commit (NOTIFY is that fast), so they meet at the end
	var mu sync.Mutex
	committed := map[int64]time.Time{}
	acked := map[int64]time.Time{}
	rs, stop, err := b.relays(ctx, q, func(ids []int64) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if _, ok := acked[id]; !ok {
				acked[id] = now
			}
		}
	})
	if err != nil {
		return latency{}, err
	}
	defer stop()
	const producers = 4
	interval := time.Duration(float64(time.Second) * producers / float64(b.o.Rate))
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, producers)
	start := time.Now()
	for p := range producers {
		wg.Go(func() {
			next := time.Now().Add(time.Duration(p) * interval / producers)
			for k := 0; time.Since(start) < b.o.Duration; k++ {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				next = next.Add(interval)
				tx, err := b.pool.Begin(ctx)
				if err != nil {
					errs[p] = err
					return
				}
				id, _, err := c.WithDB(tx).Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(benchPayload)})
				if err != nil {
					_ = tx.Rollback(ctx)
					errs[p] = err
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errs[p] = err
					return
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
				sent.Add(1)
				if direct {
					_ = rs[(p+k)%len(rs)].Dispatch(ctx, []int64{id})
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return latency{}, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := 0
		for id := range committed {
			if _, ok := acked[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n >= len(committed) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	lats := make([]time.Duration, 0, len(committed))
	for id, c := range committed {
		if a, ok := acked[id]; ok {
			lats = append(lats, max(0, a.Sub(c)))
		}
	}
	if len(lats) < len(committed) {
		return latency{}, fmt.Errorf("%d of %d messages confirmed within 30 s", len(lats), len(committed))
	}
	slices.Sort(lats)
	at := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
	return latency{n: len(lats), rate: float64(sent.Load()) / elapsed.Seconds(), p50: at(0.50), p99: at(0.99), max: lats[len(lats)-1]}, nil
}
