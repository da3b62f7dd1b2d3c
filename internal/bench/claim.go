package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
	"github.com/pgsweep/pgsweep/internal/scratch"
	"go.opentelemetry.io/otel/trace"
)

// bench claim: W workers drain N messages, claiming B at a time, and we print
// messages/s for pgsweep's claim+complete, for its Go Worker (no-op handler),
// and for two baselines on the same database in the same run:
//
//	seed-003: the lease store of seed 003 — a claim CTE (FOR UPDATE SKIP
//	          LOCKED + UPDATE … RETURNING) over a status/visible_after/
//	          lease_expires_at/created_at index, then DELETE by id.
//	pop:      the speed limit — DELETE … WHERE id IN (SELECT … LIMIT B FOR
//	          UPDATE SKIP LOCKED) RETURNING; no leases, no retries.
//
// With --lanes N, more: lanes (pgsweep's claim + complete with every
// message in one of N ordered lanes, sent round-robin, so each lane holds
// messages/N in order; the target is 0.5x the unordered rate with 1,000
// lanes of 100), laneworker (the Go Workers on the same lanes) and, with
// N = 1, serial (one worker claiming one unordered message at a time: what
// one lane can at best be). With --blocked N, heads and blocked: the same
// drain as pgsweep behind lane heads in flight, with N messages waiting
// behind them and with none, each claim timed (claim_blocked.go).
//
// Baseline tables live in a scratch schema (pgsweep_bench_<pid>), pgsweep in
// another (--schema, default pgsweep_bench_<pid>_pgsweep); both are created
// and marked by the workload and dropped at the end.

// claimCommand names the claim workload in its scratch schema's marker.
const claimCommand = "bench claim"

// claimContenders are the contenders of bench claim, in the order they run
// and are reported.
var claimContenders = []string{"pop", "seed003", "pgsweep", "stats", "limited", "pgsweep1rt", "worker", "lanes", "groups", "laneworker", "serial", "heads", "blocked"}

// claimNeeds is the flag a contender needs and lacks ("": none): lanes,
// laneworker and serial need --lanes N, heads and blocked --blocked N.
func claimNeeds(name string, lanes, blocked int) string {
	switch {
	case (name == "lanes" || name == "groups" || name == "laneworker" || name == "serial") && lanes == 0:
		return "--lanes N"
	case (name == "heads" || name == "blocked") && blocked == 0:
		return "--blocked N"
	}
	return ""
}

// ClaimOptions are the flags of `pgsweep bench claim`.
type ClaimOptions struct {
	// DB is where to run; DB.Schema is the scratch schema pgsweep is
	// installed into for the run ("": pgsweep_bench_<pid>_pgsweep): created
	// and marked by the workload, dropped at the end (with the roles the
	// install created). A schema of that name that the workload did not
	// create, such as a real install, is refused and left alone.
	DB          scratch.DB
	Messages    int           // messages to enqueue and drain per contender
	Workers     int           // concurrent workers, one connection each
	Batch       int           // messages claimed per call (1..10000)
	Only        string        // contenders to run, comma-separated ("": all)
	Rounds      int           // times every contender runs, in turn (1..100)
	ClaimRescan time.Duration // the bench queue's claim_rescan, 0s..1m
	// StatsInterval is the stats contender's stats_interval, 1s..1m (its
	// maintain() runs every second; the snapshot when this has passed).
	StatsInterval time.Duration
	// MaxInFlight is the limited contender's max_in_flight, 1..100000
	// (0: workers x batch, so that the limit never holds a claim back and
	// the contender measures what the slots cost).
	MaxInFlight int
	Lanes       int // also drain with every message in one of this many ordered lanes (0: not)
	Priorities  int // send pgsweep's messages with priorities 0..Priorities-1, uniform (0 or 1: all the default)
	// Blocked adds the contenders heads and blocked (claim_blocked.go):
	// drains of Messages unordered messages behind BlockedHeads lane heads
	// in flight, with Blocked messages waiting behind the heads and with
	// none (0: not).
	Blocked      int
	BlockedHeads int // lane heads in flight for --blocked (1..1,000,000; 0: 10,000)
	// Citus is the URL of a Citus coordinator ("": none). Given, the run
	// compares pgsweep's claim + complete on the coordinator, one queue on
	// each worker node, with the same on the single node of DB (claim_citus.go).
	Citus string
	// Tracing is the tracing modes the Worker contenders (worker,
	// laneworker) run in, comma-separated: off, memory (tracing.go); "":
	// off. A mode other than off adds a contender per Worker contender,
	// named after it ("worker/memory").
	Tracing string

	scratch string // the baselines' scratch schema ("": pgsweep_bench_<pid>)
}

// RegisterFlags registers the flags of `pgsweep bench claim` on fs, with their defaults.
func (o *ClaimOptions) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, scratch.URLUsage, "", "scratch schema pgsweep is installed into for the run, created and dropped by it "+
		"(default pgsweep_bench_<pid>_pgsweep); any other schema that exists, a real install included, is refused")
	fs.IntVar(&o.Messages, "messages", 200000, "messages to enqueue and drain per contender")
	fs.IntVar(&o.Workers, "workers", 8, "concurrent workers, one connection each")
	fs.IntVar(&o.Batch, "batch", 100, "messages claimed per call (1..10000)")
	fs.StringVar(&o.Only, "only", "", "run these contenders, comma-separated: pop, seed003, pgsweep, stats, limited, pgsweep1rt, worker, lanes, groups, laneworker, serial, heads, blocked (default all; lanes, groups and laneworker with --lanes N, serial with --lanes 1, heads and blocked with --blocked N)")
	fs.IntVar(&o.Rounds, "rounds", 1, "run every contender this many times, in turn, and report medians (1..100)")
	fs.IntVar(&o.MaxInFlight, "max-in-flight", 0, "the limited contender's max_in_flight, 1..100000 (0: workers x batch: the slots' cost without the limit holding claims back)")
	fs.DurationVar(&o.StatsInterval, "stats-interval", time.Second, "the stats contender's stats_interval, 1s..1m (maintain() runs every second; "+
		"1s is ten times the default, 10s the default)")
	fs.DurationVar(&o.ClaimRescan, "claim-rescan", time.Second, "the bench queue's claim_rescan setting, 0s..1m (0: exact oldest-first order, every claim scans from the head)")
	fs.StringVar(&o.Citus, "citus", "", "URL of a Citus coordinator: instead of the contenders, run pgsweep's claim + complete on it "+
		"(one queue on each worker node, --messages split between them, --workers spread over them) and on --database-url, "+
		"side by side, with the per-claim latency; the install is distributed in its scratch schema (--schema) on the coordinator")
	fs.IntVar(&o.Blocked, "blocked", 0, "also drain the unordered messages behind --blocked-heads lane heads in flight, with this many messages waiting behind the heads "+
		"(contender blocked) and with none (contender heads), timing each claim; 0: not")
	fs.IntVar(&o.BlockedHeads, "blocked-heads", 10000, "lane heads in flight for --blocked, 1..1000000")
	fs.IntVar(&o.Priorities, "priorities", 0, "send the pgsweep contenders' messages with this many priority levels, 0..N-1 uniformly (round-robin); 0 or 1: all the default priority; at most 101")
	tracingFlag(fs, &o.Tracing, "run the Worker contenders (worker, laneworker)")
	fs.IntVar(&o.Lanes, "lanes", 0, "also drain the queue with every message in one of this many ordered lanes, round-robin (contender lanes), and in one of this many groups (contender groups; 1: also serial, one worker claiming one at a time); 0: not")
}

// Claim runs `pgsweep bench claim`: W workers drain N messages, B at a
// time, for each contender in turn (the pop limit, seed 003's claim CTE,
// pgsweep's claim + complete, its pipelined CompleteAndClaim, its Go Worker),
// and it prints each rate and the ratios to out. The baselines' tables live
// in the scratch schema pgsweep_bench_<pid>, and pgsweep is installed into
// the scratch schema o.DB.Schema; both are dropped at the end. A schema of
// either name that the workload did not create is refused before anything
// changes: bench claim never touches a real install.
func Claim(ctx context.Context, o ClaimOptions, out io.Writer) error {
	if o.DB.Schema == "" {
		o.DB.Schema = fmt.Sprintf("pgsweep_bench_%d_pgsweep", os.Getpid())
	}
	if err := o.DB.Validate(); err != nil {
		return err
	}
	if o.BlockedHeads == 0 {
		o.BlockedHeads = 10000 // the flag's default, for callers that fill ClaimOptions themselves
	}
	n, workers, batch, rounds, only, rescan, lanes, blocked := o.Messages, o.Workers, o.Batch, o.Rounds, o.Only, o.ClaimRescan, o.Lanes, o.Blocked
	if o.StatsInterval == 0 {
		o.StatsInterval = time.Second
	}
	if o.StatsInterval < time.Second || o.StatsInterval > time.Minute {
		return fmt.Errorf("%w: --stats-interval must be 1s..1m, got %v", ErrUsage, o.StatsInterval)
	}
	if n < 1 || workers < 1 || batch < 1 || batch > 10000 || rounds < 1 || rounds > 100 || rescan < 0 || rescan > time.Minute ||
		lanes < 0 || lanes > n || blocked < 0 || o.BlockedHeads < 1 || o.BlockedHeads > 1000000 || o.Priorities < 0 || o.Priorities > 101 ||
		o.MaxInFlight < 0 || o.MaxInFlight > 100000 {
		return fmt.Errorf("%w: --messages and --workers must be >= 1, --batch 1..10000, --rounds 1..100, --claim-rescan 0s..1m, --lanes 0..messages, "+
			"--blocked >= 0, --blocked-heads 1..1000000, --priorities 0..101, --max-in-flight 0..100000", ErrUsage)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = min(workers*batch, 100000)
	}
	modes, err := parseTracing(o.Tracing)
	if err != nil {
		return err
	}
	if o.Citus != "" {
		if only != "" || lanes != 0 || blocked != 0 {
			return fmt.Errorf("%w: --citus runs pgsweep's claim + complete only; it excludes --only, --lanes and --blocked", ErrUsage)
		}
		return claimCitus(ctx, o, out)
	}
	if only != "" {
		for _, name := range strings.Split(only, ",") {
			if !slices.Contains(claimContenders, name) {
				return fmt.Errorf("%w: --only takes pop, seed003, pgsweep, stats, limited, pgsweep1rt and worker, comma-separated; got %q "+
					"(with --lanes N also lanes, groups, laneworker and serial; with --blocked N also heads and blocked)", ErrUsage, name)
			}
			if need := claimNeeds(name, lanes, blocked); need != "" {
				return fmt.Errorf("%w: --only %s needs %s", ErrUsage, name, need)
			}
		}
	}
	if o.scratch == "" {
		o.scratch = fmt.Sprintf("pgsweep_bench_%d", os.Getpid())
	}
	if o.DB.Schema == o.scratch {
		return fmt.Errorf("%w: --schema %s is the baselines' scratch schema; choose another", ErrUsage, o.DB.Schema)
	}
	pool, err := o.DB.Pool(ctx, int32(workers+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	// The scratch schema first: a schema of that name that is not ours stops
	// the bench before it changes anything.
	if err := scratch.Create(ctx, pool, o.scratch, claimCommand); err != nil {
		return err
	}
	b := &claimBench{scratch: o.scratch, queue: fmt.Sprintf("bench_claim_%d", os.Getpid()), pool: pool, schema: o.DB.Schema, n: n, w: workers, b: batch,
		rescan: rescan, statsEvery: o.StatsInterval, lanes: lanes, priorities: o.Priorities, blocked: blocked, heads: o.BlockedHeads, maxInFlight: o.MaxInFlight, claimMs: map[string][]float64{}, out: out}
	defer b.cleanup(context.WithoutCancel(ctx))
	// pgsweep into its own scratch schema: refused, before anything is
	// installed, when the schema exists and is not ours.
	if _, err := scratch.Reinstall(ctx, pool, b.schema, claimCommand); err != nil {
		return err
	}
	fmt.Fprintf(out, "bench claim: %d messages, %d workers, batch %d, claim_rescan %v (schema %s)\n", n, workers, batch, rescan, o.DB.Schema)
	if lanes > 0 {
		fmt.Fprintf(out, "lanes: the same messages in %d ordered lanes, %d per lane (round-robin)\n", lanes, n/lanes)
	}
	if blocked > 0 {
		fmt.Fprintf(out, "blocked: the same drain behind %d lane heads in flight, with %d messages waiting behind them and with none\n", o.BlockedHeads, blocked)
	}

	// Rounds interleave the contenders, so that a machine whose speed drifts
	// (a shared VM) slows every contender alike; medians and the per-round
	// ratios then say more than one run.
	runs := map[string][]float64{}
	for round := 1; round <= rounds; round++ {
		for _, c := range []struct {
			name string
			run  func(context.Context) (time.Duration, error)
		}{
			{"pop", b.pop}, {"seed003", b.seed003}, {"pgsweep", b.pgsweepSQL}, {"stats", b.pgsweepWithStats}, {"limited", b.pgsweepLimited}, {"pgsweep1rt", b.pgsweepPipelined}, {"worker", b.worker},
			{"lanes", b.pgsweepLanes}, {"groups", b.pgsweepGroups}, {"laneworker", b.laneWorker}, {"serial", b.serial},
			{"heads", b.headsInFlight}, {"blocked", b.blockedBehindHeads},
		} {
			if only != "" && !slices.Contains(strings.Split(only, ","), c.name) {
				continue
			}
			if claimNeeds(c.name, lanes, blocked) != "" || (c.name == "serial" && lanes != 1 && only == "") {
				continue
			}
			variants := []string{tracingOff}
			if c.name == "worker" || c.name == "laneworker" {
				variants = modes
			}
			for _, mode := range variants {
				name := c.name + modeSuffix(mode)
				tr := newTracer(mode)
				b.tp = tr.Provider
				d, err := c.run(ctx)
				b.tp = nil
				tr.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				r := float64(n) / d.Seconds()
				runs[name] = append(runs[name], r)
				spans := ""
				if mode != tracingOff {
					spans = fmt.Sprintf(", %d spans", tr.Spans())
				}
				fmt.Fprintf(out, "%-10s %8d msgs in %6.2fs = %8.0f msg/s (round %d of %d%s)\n", name, n, d.Seconds(), r, round, rounds, spans)
			}
		}
	}
	rates := map[string]float64{}
	for k, rs := range runs {
		rates[k] = median(rs)
	}
	if rounds > 1 {
		fmt.Fprintf(out, "\nresults (medians of %d rounds; per-round ratios in brackets):\n", rounds)
	} else {
		fmt.Fprintln(out, "\nresults:")
	}
	labels := map[string]string{
		"pop":        "pop limit (DELETE … IN (SELECT … SKIP LOCKED))",
		"seed003":    "seed-003 claim CTE + delete by id",
		"pgsweep":    "pgsweep claim + complete (SQL API)",
		"stats":      "the same, maintain() every second, stats_interval --stats-interval",
		"limited":    fmt.Sprintf("the same, max_in_flight %d", o.MaxInFlight),
		"pgsweep1rt": "pgsweep CompleteAndClaim (pipelined, 1 trip)",
		"worker":     "pgsweep Go Worker, no-op handler",
		"lanes":      fmt.Sprintf("pgsweep claim + complete, %d ordered lanes", lanes),
		"groups":     fmt.Sprintf("pgsweep claim + complete, %d groups shared fairly", lanes),
		"laneworker": fmt.Sprintf("pgsweep Go Worker, %d ordered lanes", lanes),
		"serial":     "one serial consumer (1 worker, batch 1)",
		"heads":      fmt.Sprintf("claim + complete behind %d lane heads", o.BlockedHeads),
		"blocked":    fmt.Sprintf("the same, %d messages waiting behind them", blocked),
	}
	for _, k := range claimContenders {
		if r, ok := rates[k]; ok {
			fmt.Fprintf(out, "  %-48s %8.0f msg/s\n", labels[k], r)
		}
		for _, mode := range modes {
			if r, ok := rates[k+modeSuffix(mode)]; ok && mode != tracingOff {
				fmt.Fprintf(out, "  %-48s %8.0f msg/s\n", labels[k]+", tracing "+mode, r)
			}
		}
	}
	ratio := func(a, b, label string) {
		if rates[a] == 0 || rates[b] == 0 {
			return
		}
		fmt.Fprintf(out, "  %-48s %8.2fx", label, rates[a]/rates[b])
		if rounds > 1 {
			rs := make([]float64, len(runs[a]))
			for i := range rs {
				rs[i] = runs[a][i] / runs[b][i]
			}
			slices.Sort(rs)
			fmt.Fprintf(out, "  [%.2f–%.2f, median %.2f]", rs[0], rs[len(rs)-1], median(rs))
		}
		fmt.Fprintln(out)
	}
	ratio("pgsweep", "seed003", "pgsweep / seed-003 (target >= 1.0)")
	ratio("pgsweep", "pop", "pgsweep / pop (target >= 0.6, stretch 0.8)")
	ratio("stats", "pgsweep", fmt.Sprintf("snapshots every %v / none (target >= 0.95)", b.statsEvery))
	ratio("limited", "pgsweep", fmt.Sprintf("max_in_flight %d / none (target >= 0.8)", o.MaxInFlight))
	ratio("pgsweep1rt", "pop", "pgsweep pipelined / pop")
	ratio("worker", "pgsweep", "Worker / pgsweep SQL API")
	ratio("worker/memory", "worker", "Worker: tracing memory / off (target >= 0.8)")
	ratio("laneworker/memory", "laneworker", "Worker, lanes: tracing memory / off (target >= 0.8)")
	ratio("worker", "pop", "Worker / pop")
	ratio("lanes", "pgsweep", fmt.Sprintf("%d lanes / unordered (target >= 0.5 at 1,000)", lanes))
	ratio("groups", "pgsweep", fmt.Sprintf("%d groups / unordered (target >= 0.5 at 1,000)", lanes))
	ratio("groups", "lanes", fmt.Sprintf("%d groups / %d lanes (target >= 1)", lanes, lanes))
	ratio("laneworker", "worker", fmt.Sprintf("Worker: %d lanes / unordered", lanes))
	ratio("lanes", "serial", "1 lane / one serial consumer")
	ratio("laneworker", "serial", "Worker: 1 lane / one serial consumer")
	ratio("blocked", "heads", "blocked / heads: rate")
	if hs, bs := b.claimMs["heads"], b.claimMs["blocked"]; len(hs) > 0 && len(bs) > 0 {
		fmt.Fprintf(out, "  %-48s %8.3f ms\n", "claim behind the heads (median of round means)", median(hs))
		fmt.Fprintf(out, "  %-48s %8.3f ms\n", "claim, messages waiting behind them", median(bs))
		fmt.Fprintf(out, "  %-48s %8.2fx (target <= 2)\n", "claim: blocked / heads", median(bs)/median(hs))
	}
	return nil
}

type claimBench struct {
	// scratch is the schema of the baseline tables and queue the name of
	// pgsweep's queue, both unique to this process so that two benches on
	// one database do not collide.
	scratch, queue string
	pool           *pgxpool.Pool
	schema         string
	n, w           int
	b              int
	rescan         time.Duration        // the queue's claim_rescan
	statsEvery     time.Duration        // the stats contender's stats_interval
	lanes          int                  // --lanes: the lanes contender's lane count
	tp             trace.TracerProvider // the Worker contenders' and their Client's, in a --tracing mode (nil: off)
	priorities     int                  // --priorities: priority levels of pgsweep's messages (0, 1: the default only)
	maxInFlight    int                  // --max-in-flight: the limited contender's max_in_flight
	blocked, heads int                  // --blocked, --blocked-heads
	claimMs        map[string][]float64 // heads, blocked: mean claim (ms) of each round
	out            io.Writer
}

// errKeepGoing tells drain that a step made progress without finishing a message.
var errKeepGoing = errors.New("keep going")

// payload is the same ~100-byte JSON body for every contender.
const benchPayload = `{"order": 12345, "customer": "c-000042", "items": [1, 2, 3], "note": "pgsweep bench claim payload"}`

func (b *claimBench) exec(ctx context.Context, sql string, args ...any) error {
	_, err := b.pool.Exec(ctx, sql, args...)
	return err
}

// cleanup drops both scratch schemas (each only if it is the workload's own).
func (b *claimBench) cleanup(ctx context.Context) {
	_ = scratch.Drop(ctx, b.pool, b.scratch, claimCommand)
	_ = scratch.Drop(ctx, b.pool, b.schema, claimCommand)
}

// drain runs w workers, each calling step (on its own connection) until it
// returns 0 rows, and reports progress every second.
func (b *claimBench) drain(ctx context.Context, name string, step func(ctx context.Context, conn *pgxpool.Conn, worker int) (int, error)) (time.Duration, error) {
	return b.drainWith(ctx, name, b.w, false, step)
}

// drainWith is drain with w workers; untilDone: a worker whose step comes
// back empty waits a millisecond and tries again until all n messages are
// done (lanes: the next message of a lane becomes claimable only when
// another worker completes the one before it, so an empty claim does not
// mean the queue is drained).
func (b *claimBench) drainWith(ctx context.Context, name string, w int, untilDone bool,
	step func(ctx context.Context, conn *pgxpool.Conn, worker int) (int, error)) (time.Duration, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, w)
	conns := make([]*pgxpool.Conn, w)
	for i := range conns {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			return 0, err
		}
		defer c.Release()
		conns[i] = c
	}
	stopProgress := b.progress(name, &done)
	defer stopProgress()
	start := time.Now()
	deadline := start.Add(10 * time.Minute) // untilDone: a liveness bound
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			empty := 0
			for {
				k, err := step(ctx, conns[i], i)
				if errors.Is(err, errKeepGoing) {
					empty = 0
					continue
				}
				if err != nil {
					errs[i] = err
					return
				}
				done.Add(int64(k))
				if k > 0 {
					empty = 0
					continue
				}
				if untilDone {
					if done.Load() >= int64(b.n) || time.Now().After(deadline) {
						return
					}
					if err := ctxsleep.Sleep(ctx, time.Millisecond); err != nil {
						errs[i] = err
						return
					}
					continue
				}
				// Empty: rows locked by others may still come back (or the
				// queue is drained); stop after a few empty claims.
				if empty++; empty >= 3 || done.Load() >= int64(b.n) {
					return
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if got := done.Load(); got != int64(b.n) {
		return 0, fmt.Errorf("drained %d of %d messages", got, b.n)
	}
	return d, nil
}

func (b *claimBench) progress(name string, done *atomic.Int64) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				fmt.Fprintf(b.out, "  %-8s %8d/%d  %8.0f msg/s so far\n", name, d, b.n, float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

func (b *claimBench) prepare(ctx context.Context, name, ddl, fill, table string) error {
	fmt.Fprintf(b.out, "%s: enqueueing %d messages…\n", name, b.n)
	if err := scratch.Create(ctx, b.pool, b.scratch, claimCommand); err != nil {
		return err
	}
	if err := b.exec(ctx, ddl); err != nil {
		return err
	}
	if err := b.exec(ctx, fill, b.n, benchPayload); err != nil {
		return err
	}
	if err := b.exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		return err
	}
	return b.settle(ctx)
}

// settle waits until no autovacuum worker runs in this database, so that a
// contender does not share the two cores with the vacuum of the one before
// it (seed003 leaves 200,000 dead rows behind).
func (b *claimBench) settle(ctx context.Context) error {
	const q = "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type OPERATOR(pg_catalog.=) 'autovacuum worker'::pg_catalog.text" +
		" AND datname OPERATOR(pg_catalog.=) pg_catalog.current_database()"
	deadline := time.Now().Add(2 * time.Minute)
	for said := false; ; {
		var n int
		if err := b.pool.QueryRow(ctx, q).Scan(&n); err != nil {
			return err
		}
		if n == 0 || time.Now().After(deadline) {
			return nil
		}
		if !said {
			fmt.Fprintf(b.out, "  waiting for %d autovacuum worker(s) to finish…\n", n)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (b *claimBench) pop(ctx context.Context) (time.Duration, error) {
	t := b.scratch + ".pop"
	if err := b.prepare(ctx, "pop", "CREATE TABLE "+t+" (id bigserial PRIMARY KEY, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())",
		"INSERT INTO "+t+" (payload) SELECT $2::jsonb FROM generate_series(1, $1)", t); err != nil {
		return 0, err
	}
	q := "DELETE FROM " + t + " WHERE id IN (SELECT id FROM " + t + " ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, payload"
	return b.drain(ctx, "pop", func(ctx context.Context, c *pgxpool.Conn, _ int) (int, error) {
		return countRows(c.Query(ctx, q, b.b))
	})
}

func (b *claimBench) seed003(ctx context.Context) (time.Duration, error) {
	t := b.scratch + ".lease_store"
	ddl := "CREATE TABLE " + t + ` (id bigserial PRIMARY KEY, payload jsonb NOT NULL, status text NOT NULL DEFAULT 'pending',
		visible_after timestamptz NOT NULL DEFAULT now(), lease_owner text, lease_expires_at timestamptz,
		attempt_count int NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX lease_store_lease ON ` + t + ` (status, visible_after, lease_expires_at, created_at)`
	if err := b.prepare(ctx, "seed003", ddl, "INSERT INTO "+t+" (payload) SELECT $2::jsonb FROM generate_series(1, $1)", t); err != nil {
		return 0, err
	}
	claim := `WITH c AS (
		SELECT id FROM ` + t + `
		 WHERE (status IN ('pending', 'failed') AND visible_after <= now())
		    OR (status = 'processing' AND lease_expires_at <= now())
		 ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)
		UPDATE ` + t + ` s SET status = 'processing', lease_owner = $2, lease_expires_at = now() + interval '30 seconds',
		       attempt_count = s.attempt_count + 1
		  FROM c WHERE s.id = c.id
		RETURNING s.id, s.payload`
	del := "DELETE FROM " + t + " WHERE id = ANY($1)"
	return b.drain(ctx, "seed003", func(ctx context.Context, c *pgxpool.Conn, w int) (int, error) {
		ids, err := collectIDs(c.Query(ctx, claim, b.b, fmt.Sprintf("w%d", w)))
		if err != nil || len(ids) == 0 {
			return 0, err
		}
		_, err = c.Exec(ctx, del, ids)
		return len(ids), err
	})
}

func (b *claimBench) enqueuePgsweep(ctx context.Context, name string) (*pgsweep.Client, error) {
	return b.enqueuePgsweepLanes(ctx, name, 0)
}

// enqueuePgsweepLanes enqueues b.n messages; with lanes > 0, message i goes
// to lane i % lanes (so each lane holds its messages in send order).
func (b *claimBench) enqueuePgsweepLanes(ctx context.Context, name string, lanes int) (*pgsweep.Client, error) {
	var laneOf func(int) string
	if lanes > 0 {
		laneOf = func(i int) string { return fmt.Sprintf("lane-%d", i%lanes) }
	}
	return b.enqueueWith(ctx, name, laneOf, nil)
}

// enqueueWith enqueues b.n messages, message i in lane laneOf(i) and group
// groupOf(i) (nil: none).
func (b *claimBench) enqueueWith(ctx context.Context, name string, laneOf, groupOf func(int) string) (*pgsweep.Client, error) {
	fmt.Fprintf(b.out, "%s: enqueueing %d messages…\n", name, b.n)
	c, err := b.resetQueue(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.send(ctx, c, b.n, laneOf, groupOf); err != nil {
		return nil, err
	}
	return c, b.vacuum(ctx)
}

// resetQueue drops the baselines' tables (their dead rows would draw
// autovacuum) and leaves the bench queue empty, with the run's claim_rescan.
func (b *claimBench) resetQueue(ctx context.Context) (*pgsweep.Client, error) {
	if err := scratch.Drop(ctx, b.pool, b.scratch, claimCommand); err != nil {
		return nil, err
	}
	// traced as the Worker that takes the messages: in a --tracing mode
	// other than off, they carry a traceparent
	c, err := pgsweep.NewClient(b.pool, &pgsweep.ClientOptions{Schema: b.schema, TracerProvider: b.tp})
	if err != nil {
		return nil, err
	}
	if err := c.QueueCreate(ctx, b.queue, pgsweep.Outbox, 10); err != nil {
		return nil, err
	}
	if err := c.QueueConfigure(ctx, b.queue, map[string]any{"claim_rescan": fmt.Sprintf("%d microseconds", b.rescan.Microseconds())}); err != nil {
		return nil, err
	}
	s := pgx.Identifier{b.schema}.Sanitize()
	if err := b.exec(ctx, "DELETE FROM "+s+".message WHERE queue = $1", b.queue); err != nil {
		return nil, err
	}
	if err := b.exec(ctx, "DELETE FROM "+s+".lane WHERE queue = $1", b.queue); err != nil {
		return nil, err
	}
	return c, nil
}

// send sends n messages, 10,000 a batch; message i goes to lane laneOf(i)
// and group groupOf(i) (nil: none).
func (b *claimBench) send(ctx context.Context, c *pgsweep.Client, n int, laneOf, groupOf func(i int) string) error {
	ms := make([]pgsweep.Message, 0, 10000)
	for i := 0; i < n; i += 10000 {
		ms = ms[:0]
		for k := range min(10000, n-i) {
			m := pgsweep.Message{Payload: json.RawMessage(benchPayload)}
			if b.priorities > 1 {
				m.Priority = int16((i + k) % b.priorities)
			}
			if laneOf != nil {
				m.Lane = laneOf(i + k)
			}
			if groupOf != nil {
				m.Group = groupOf(i + k)
			}
			ms = append(ms, m)
		}
		if _, err := c.SendBatch(ctx, b.queue, ms); err != nil {
			return err
		}
	}
	return nil
}

// vacuum readies the queue's table for a drain: VACUUM ANALYZE, then no
// autovacuum left running.
func (b *claimBench) vacuum(ctx context.Context) error {
	if err := b.exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{b.schema}.Sanitize()+".message"); err != nil {
		return err
	}
	return b.settle(ctx)
}

func (b *claimBench) pgsweepSQL(ctx context.Context) (time.Duration, error) {
	if _, err := b.enqueuePgsweep(ctx, "pgsweep"); err != nil {
		return 0, err
	}
	return b.drain(ctx, "pgsweep", b.claimComplete(b.b, nil))
}

// pgsweepWithStats is pgsweepSQL while maintain() runs every second with
// stats_interval --stats-interval (default 1 s: a snapshot of the queue
// every second, ten times the default), to show what the snapshots cost the
// claims.
// pgsweepLimited is pgsweep's claim + complete on the queue with
// max_in_flight set (flow.sql): every claim takes slots, every complete
// frees them; the limit is removed again after the drain.
func (b *claimBench) pgsweepLimited(ctx context.Context) (time.Duration, error) {
	c, err := b.enqueuePgsweep(ctx, "limited")
	if err != nil {
		return 0, err
	}
	if err := c.QueueConfigure(ctx, b.queue, map[string]any{"max_in_flight": b.maxInFlight}); err != nil {
		return 0, err
	}
	defer func() {
		_ = c.QueueConfigure(context.WithoutCancel(ctx), b.queue, map[string]any{"max_in_flight": nil})
	}()
	return b.drain(ctx, "limited", b.claimComplete(b.b, nil))
}

func (b *claimBench) pgsweepWithStats(ctx context.Context) (time.Duration, error) {
	c, err := b.enqueuePgsweep(ctx, "stats")
	if err != nil {
		return 0, err
	}
	s := pgx.Identifier{b.schema}.Sanitize()
	if err := b.exec(ctx, "SELECT "+s+".setting_set('stats_interval', $1::pg_catalog.text)", fmt.Sprintf("%d seconds", int(b.statsEvery/time.Second))); err != nil {
		return 0, err
	}
	defer func() { _ = b.exec(context.WithoutCancel(ctx), "SELECT "+s+".setting_reset('stats_interval')") }()
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				done <- nil
				return
			case <-tick.C:
				if err := c.Maintain(sctx, "bench-stats", 10*time.Second); err != nil && sctx.Err() == nil {
					done <- fmt.Errorf("maintain: %w", err)
					return
				}
			}
		}
	}()
	d, err := b.drain(ctx, "stats", b.claimComplete(b.b, nil))
	stop()
	return d, errors.Join(err, <-done)
}

// pgsweepLanes is pgsweepSQL with every message in one of b.lanes ordered
// lanes: a claim takes only lanes' heads, a completion makes the next
// message of each lane claimable.
func (b *claimBench) pgsweepLanes(ctx context.Context) (time.Duration, error) {
	if _, err := b.enqueuePgsweepLanes(ctx, "lanes", b.lanes); err != nil {
		return 0, err
	}
	return b.drainWith(ctx, "lanes", b.w, true, b.claimComplete(b.b, nil))
}

// pgsweepGroups is pgsweepSQL with every message in one of b.lanes groups
// (round-robin): claims take turns between the groups (flow.sql).
func (b *claimBench) pgsweepGroups(ctx context.Context) (time.Duration, error) {
	groupOf := func(i int) string { return fmt.Sprintf("group-%d", i%b.lanes) }
	if _, err := b.enqueueWith(ctx, "groups", nil, groupOf); err != nil {
		return 0, err
	}
	return b.drain(ctx, "groups", b.claimComplete(b.b, nil))
}

// serial is one worker claiming and completing one unordered message at a
// time: the best one lane can do (its messages go one at a time).
func (b *claimBench) serial(ctx context.Context) (time.Duration, error) {
	if _, err := b.enqueuePgsweep(ctx, "serial"); err != nil {
		return 0, err
	}
	return b.drainWith(ctx, "serial", 1, false, b.claimComplete(1, nil))
}

// claimComplete is a drain step: claim up to batch, complete them. With t,
// it also times each claim call that took messages.
func (b *claimBench) claimComplete(batch int, t *callTimer) func(ctx context.Context, conn *pgxpool.Conn, w int) (int, error) {
	return func(ctx context.Context, conn *pgxpool.Conn, w int) (int, error) {
		c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: b.schema})
		if err != nil {
			return 0, err
		}
		start := time.Now()
		cl, err := claim(ctx, c, b.queue, fmt.Sprintf("bench-%d-%d", os.Getpid(), w), batch)
		if err != nil || len(cl.ids) == 0 {
			return 0, err // the empty claims that end a drain are not timed
		}
		t.add(time.Since(start))
		done, err := cl.complete(ctx, c, b.queue)
		if err == nil && len(done) != len(cl.ids) {
			err = fmt.Errorf("completed %d of %d claimed", len(done), len(cl.ids))
		}
		return len(cl.ids), err
	}
}

// pgsweepPipelined is the loop a worker runs: each call completes the
// previous batch and claims the next (Client.CompleteAndClaim: both
// statements pipelined in one round trip and one transaction).
func (b *claimBench) pgsweepPipelined(ctx context.Context) (time.Duration, error) {
	if _, err := b.enqueuePgsweep(ctx, "pgsweep1rt"); err != nil {
		return 0, err
	}
	prev := make([][]int64, b.w)
	prevToken := make([]pgsweep.Token, b.w)
	return b.drain(ctx, "pgsweep1rt", func(ctx context.Context, conn *pgxpool.Conn, w int) (int, error) {
		c, err := pgsweep.NewClient(conn.Conn(), &pgsweep.ClientOptions{Schema: b.schema})
		if err != nil {
			return 0, err
		}
		owner := fmt.Sprintf("bench-%d-%d", os.Getpid(), w)
		done, ds, err := c.CompleteAndClaim(ctx, b.queue, owner, prevToken[w], prev[w], b.b, 30*time.Second)
		if err != nil {
			return 0, err
		}
		if len(done) != len(prev[w]) {
			return 0, fmt.Errorf("completed %d of %d claimed", len(done), len(prev[w]))
		}
		prev[w] = prev[w][:0]
		for _, d := range ds {
			prev[w] = append(prev[w], d.ID)
			prevToken[w] = d.Token
		}
		if len(done) == 0 && len(ds) > 0 {
			return 0, errKeepGoing
		}
		return len(done), nil
	})
}

// worker drains the queue with W pgsweep Workers (one connection each, no-op
// handler, concurrency = batch) and stops them once every message completed.
func (b *claimBench) worker(ctx context.Context) (time.Duration, error) {
	return b.workerLanes(ctx, "worker", 0)
}

// laneWorker is worker with every message in one of b.lanes ordered lanes.
func (b *claimBench) laneWorker(ctx context.Context) (time.Duration, error) {
	return b.workerLanes(ctx, "laneworker", b.lanes)
}

func (b *claimBench) workerLanes(ctx context.Context, name string, lanes int) (time.Duration, error) {
	if _, err := b.enqueuePgsweepLanes(ctx, name, lanes); err != nil {
		return 0, err
	}
	var done atomic.Int64
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	hooks := pgsweep.Hooks{Completed: func(_ string, n int) {
		if done.Add(int64(n)) >= int64(b.n) {
			stop()
		}
	}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ws := make([]*pgsweep.Worker, b.w)
	pools := make([]*pgxpool.Pool, b.w)
	for i := range ws {
		cfg := b.pool.Config().Copy()
		cfg.MaxConns = 1
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return 0, err
		}
		defer p.Close()
		if err := p.Ping(ctx); err != nil {
			return 0, err
		}
		pools[i] = p
		ws[i], err = pgsweep.NewWorker(p, func(context.Context, *pgsweep.Delivery) error { return nil }, pgsweep.WorkerOptions{
			Schema: b.schema, Queue: b.queue, Batch: b.b, Concurrency: b.b, DisableNotify: true,
			PollInterval: 10 * time.Millisecond, Hooks: hooks, Logger: quiet, TracerProvider: b.tp,
		})
		if err != nil {
			return 0, err
		}
	}
	stopProgress := b.progress(name, &done)
	defer stopProgress()
	stopHeap := b.peakHeap()
	defer func() {
		peak, base := stopHeap()
		fmt.Fprintf(b.out, "%s: Go heap %.1f MiB before, peak %.1f MiB while %d Workers (batch %d) drained the queue\n",
			name, float64(base)/(1<<20), float64(peak)/(1<<20), b.w, b.b)
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx) }()
	}
	<-wctx.Done()
	d := time.Since(start)
	wg.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return d, nil
}

// peakHeap samples the Go heap (live and not yet collected objects, so the
// peak includes garbage up to the next collection) every 10ms until the returned function is called, which reports the peak and the
// first sample. It shows the Workers hold what their batches hold, no more.
func (b *claimBench) peakHeap() func() (peak, base uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC() // the base without the enqueue's garbage
	base := read()
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if v := read(); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	}()
	return func() (uint64, uint64) {
		close(stop)
		<-done
		return peak.Load(), base
	}
}
