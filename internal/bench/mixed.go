package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/ctxsleep"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// mixedCommand names the mixed workload in its scratch schema's marker.
const mixedCommand = "bench mixed"

// MixedOptions are the flags of `pgsweep bench mixed`.
type MixedOptions struct {
	// DB is where to run; DB.Schema is the scratch schema the workload
	// installs pgsweep into (dropped and re-created; only one it created).
	DB           scratch.DB
	Rows         int           // rows in the retention backlog (90% expired), 1000..100000000
	Workers      int           // workers claiming and completing, 1..128
	Batch        int           // claim batch size, 1..10000
	Rate         int           // messages per second the producer sends, 10..1000000
	CleanupBatch int           // batch size of the backlog's retention policy, 1..10000
	DutyCycle    int           // retention_duty_cycle for the run: 1..100 fixed, 0 the default (adaptive)
	Phase        time.Duration // length of each quiet window, at least 1s
}

// RegisterFlags registers the flags of `pgsweep bench mixed` on fs, with their defaults.
func (o *MixedOptions) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, scratch.URLUsage, "pgsweep_mixed", "scratch schema the benchmark installs into; dropped and re-created (only one this command created)")
	fs.IntVar(&o.Rows, "rows", 1_000_000, "rows in the retention backlog (90% expired)")
	fs.IntVar(&o.Workers, "workers", 4, "workers claiming and completing")
	fs.IntVar(&o.Batch, "batch", 10, "claim batch size")
	fs.IntVar(&o.Rate, "rate", 2000, "messages per second the producer sends")
	fs.IntVar(&o.CleanupBatch, "cleanup-batch", 1000, "batch size of the backlog's retention policy, 1..10000 (1000: retention_register's default)")
	fs.IntVar(&o.DutyCycle, "duty-cycle", 0, "retention_duty_cycle setting for the run: 1..100 a fixed duty cycle (0: leave the default, adaptive pacing)")
	fs.DurationVar(&o.Phase, "phase", 10*time.Second, "length of each quiet window, before and after the cleanup (which lasts until the backlog is drained)")
}

// mixedBench measures what cleanup costs live traffic: W workers claim and
// complete a steady stream of messages; the claim latency is recorded first
// with nothing else running, then while maintain() drains a retention
// backlog on the same database.
type mixedBench struct {
	db         scratch.DB
	rows       int
	workers    int
	batch      int
	rate       int
	phase      time.Duration
	duty       int
	cleanBatch int
	out        io.Writer
	pool       *pgxpool.Pool
	client     *pgsweep.Client
	q          string
}

// Mixed runs `pgsweep bench mixed`: it installs pgsweep into the scratch
// schema o.DB.Schema (a schema that exists and that this workload did not
// create is refused before anything changes), loads a retention backlog,
// and prints to out the claim latency of a steady stream of messages without
// and while maintain() drains the backlog.
func Mixed(ctx context.Context, o MixedOptions, out io.Writer) error {
	b := &mixedBench{db: o.DB, rows: o.Rows, workers: o.Workers, batch: o.Batch, rate: o.Rate, phase: o.Phase,
		duty: o.DutyCycle, cleanBatch: o.CleanupBatch, out: out}
	if err := b.db.Validate(); err != nil {
		return err
	}
	switch {
	case b.rows < 1000 || b.rows > 100_000_000:
		return fmt.Errorf("%w: --rows must be 1000..100000000, got %d", ErrUsage, b.rows)
	case b.workers < 1 || b.workers > 128:
		return fmt.Errorf("%w: --workers must be 1..128, got %d", ErrUsage, b.workers)
	case b.batch < 1 || b.batch > 10000:
		return fmt.Errorf("%w: --batch must be 1..10000, got %d", ErrUsage, b.batch)
	case b.rate < 10 || b.rate > 1_000_000:
		return fmt.Errorf("%w: --rate must be 10..1000000, got %d", ErrUsage, b.rate)
	case b.cleanBatch < 1 || b.cleanBatch > 10000:
		return fmt.Errorf("%w: --cleanup-batch must be 1..10000, got %d", ErrUsage, b.cleanBatch)
	case b.duty < 0 || b.duty > 100:
		return fmt.Errorf("%w: --duty-cycle must be 1..100 (0: the default), got %d", ErrUsage, b.duty)
	case b.phase < time.Second:
		return fmt.Errorf("%w: --phase must be at least 1s, got %v", ErrUsage, b.phase)
	}
	return b.run(ctx)
}

func (b *mixedBench) run(ctx context.Context) error {
	var err error
	if b.pool, err = b.db.Pool(ctx, int32(b.workers+8)); err != nil {
		return err
	}
	defer b.pool.Close()
	if err := b.setup(ctx); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "bench mixed: %d workers (batch %d) on a stream of %d msg/s; backlog %d rows (90%% expired)\n",
		b.workers, b.batch, b.rate, b.rows)

	// One run of live traffic: quiet for a phase, then maintain() drains the
	// backlog, then quiet for another phase. "Without cleanup" is both quiet
	// windows (A-B-A), so that a drift of the queue's own state over time
	// (dead tuples, autovacuum) is not mistaken for the cleanup's cost.
	fmt.Fprintf(b.out, "\n== live traffic: %v quiet, maintain() drains the backlog, %v quiet\n", b.phase, b.phase)
	var deleted atomic.Int64
	var cleanStart, cleanEnd time.Time
	samples, total, err := b.traffic(ctx, func(ctx context.Context) error {
		if err := ctxsleep.Sleep(ctx, b.phase); err != nil {
			return err
		}
		cleanStart = time.Now()
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		for {
			if _, err := conn.Exec(ctx, "CALL "+b.q+".maintain('bench', '5 seconds')"); err != nil {
				return err
			}
			n, left, err := b.backlogProgress(ctx, conn.Conn())
			if err != nil {
				return err
			}
			deleted.Store(n)
			if left == 0 {
				cleanEnd = time.Now()
				return ctxsleep.Sleep(ctx, b.phase)
			}
		}
	}, &deleted)
	if err != nil {
		return err
	}
	busy, quiet := split(samples, cleanStart, cleanEnd, total)
	cleanupTime := cleanEnd.Sub(cleanStart)
	p := func(l []time.Duration, q float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[min(len(l)-1, int(q*float64(len(l))))]
	}
	fmt.Fprintf(b.out, "\n%-31s %9s %9s %9s %9s %10s\n", "claim latency", "claims", "p50", "p99", "max", "msg/s")
	for _, r := range []struct {
		name string
		res  window
	}{{"without cleanup (before+after)", quiet}, {"while cleanup ran", busy}} {
		fmt.Fprintf(b.out, "%-31s %9d %9v %9v %9v %10.0f\n", r.name, len(r.res.lat), p(r.res.lat, 0.5).Round(time.Microsecond),
			p(r.res.lat, 0.99).Round(time.Microsecond), p(r.res.lat, 1).Round(time.Microsecond), float64(r.res.done)/r.res.elapsed.Seconds())
	}
	ratio := float64(p(busy.lat, 0.99)) / float64(p(quiet.lat, 0.99))
	pacedRate := float64(deleted.Load()) / cleanupTime.Seconds()
	fmt.Fprintf(b.out, "\np99 during cleanup / p99 without: %.2fx (target <= 1.20x)\n", ratio)
	fmt.Fprintf(b.out, "cleanup: %d rows deleted in %v (%.0f rows/s) by CALL maintain() in a loop\n",
		deleted.Load(), cleanupTime.Round(time.Millisecond), pacedRate)

	// The same backlog again, drained unpaced (CALL retention_run never
	// pauses) under the same live traffic: the pace maintain() is measured
	// against.
	fmt.Fprintf(b.out, "\n== live traffic: the same backlog drained unpaced by CALL retention_run\n")
	if err := b.loadBacklog(ctx); err != nil {
		return err
	}
	var unpaced atomic.Int64
	var uStart, uEnd time.Time
	_, _, err = b.traffic(ctx, func(ctx context.Context) error {
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		uStart = time.Now()
		for {
			if _, err := conn.Exec(ctx, "CALL "+b.q+".retention_run('backlog', 'bench-unpaced', '5 seconds')"); err != nil {
				return err
			}
			n, left, err := b.backlogProgress(ctx, conn.Conn())
			if err != nil {
				return err
			}
			unpaced.Store(n - deleted.Load())
			if left == 0 {
				uEnd = time.Now()
				return nil
			}
		}
	}, &unpaced)
	if err != nil {
		return err
	}
	unpacedRate := float64(unpaced.Load()) / uEnd.Sub(uStart).Seconds()
	fmt.Fprintf(b.out, "unpaced: %d rows deleted in %v (%.0f rows/s) by CALL retention_run in a loop\n",
		unpaced.Load(), uEnd.Sub(uStart).Round(time.Millisecond), unpacedRate)
	fmt.Fprintf(b.out, "paced drain rate / unpaced: %.2f (target >= 0.25); p99 during cleanup / p99 without: %.2fx (target <= 1.20x)\n",
		pacedRate/unpacedRate, ratio)
	return nil
}

// backlogProgress returns the rows the backlog policy's passes deleted so
// far and whether eligible rows are left (1) or not (0).
func (b *mixedBench) backlogProgress(ctx context.Context, conn *pgx.Conn) (deleted, left int64, err error) {
	err = conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes WHERE policy = 'backlog'),
		(SELECT count(*) FROM (SELECT 1 FROM %[1]s.backlog WHERE status = 'done' AND expires_at < now() - interval '1 hour' LIMIT 1) x)`, b.q)).
		Scan(&deleted, &left)
	return deleted, left, err
}

// loadBacklog fills the backlog table: b.rows rows, 90% expired.
func (b *mixedBench) loadBacklog(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`
		TRUNCATE %[1]s.backlog;
		INSERT INTO %[1]s.backlog SELECT g, CASE WHEN g %% 10 = 0 THEN 'queued' ELSE 'done' END,
		       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() - interval '2 days' END, repeat('x', 200)
		  FROM generate_series(1, %[2]d) g;`, b.q, b.rows))
	if err != nil {
		return err
	}
	_, err = b.pool.Exec(ctx, "VACUUM ANALYZE "+b.q+".backlog")
	return err
}

// setup re-creates the schema, a queue and the retention backlog.
func (b *mixedBench) setup(ctx context.Context) error {
	b.q = pgx.Identifier{b.db.Schema}.Sanitize()
	_, err := scratch.Reinstall(ctx, b.pool, b.db.Schema, mixedCommand)
	if err != nil {
		return err
	}
	if b.client, err = pgsweep.NewClient(b.pool, &pgsweep.ClientOptions{Schema: b.db.Schema}); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "loading %d backlog rows...\n", b.rows)
	_, err = b.pool.Exec(ctx, fmt.Sprintf(`
		SELECT %[1]s.setting_set('retention_check_interval', '0');
		SELECT %[1]s.queue_create('bench');
		CREATE TABLE %[1]s.backlog (id bigint PRIMARY KEY, status text NOT NULL, expires_at timestamptz, body text);
		CREATE INDEX ON %[1]s.backlog (expires_at, status);
		SELECT %[1]s.retention_register('backlog', '%[1]s.backlog', 'expires_at', '1 hour', 'status', ARRAY['done'],
		       %[3]d, 'exclusive', '1 second');`, b.q, b.rows, b.cleanBatch))
	if err != nil {
		return err
	}
	if b.duty != 0 {
		if _, err := b.pool.Exec(ctx, "SELECT "+b.q+".setting_set('retention_duty_cycle', $1)", fmt.Sprint(b.duty)); err != nil {
			return err
		}
	}
	return b.loadBacklog(ctx)
}

// claimSample is one claim: when it started, how long it took, and how
// many messages the completion that followed acted on.
type claimSample struct {
	at  time.Time
	lat time.Duration
	n   int
}

// window is the claims of a stretch of the run.
type window struct {
	lat     []time.Duration // sorted
	done    int64
	elapsed time.Duration
}

// split sorts the claims of a run that lasted total into those that started
// in [from, to) and the others.
func split(samples []claimSample, from, to time.Time, total time.Duration) (in, out window) {
	in.elapsed = to.Sub(from)
	out.elapsed = total - in.elapsed
	for _, s := range samples {
		w := &out
		if !s.at.Before(from) && s.at.Before(to) {
			w = &in
		}
		w.lat = append(w.lat, s.lat)
		w.done += int64(s.n)
	}
	slices.Sort(in.lat)
	slices.Sort(out.lat)
	return in, out
}

// traffic runs the producer and the workers until side returns or one of
// them fails, printing progress once a second. It returns every claim the
// workers made and how long the traffic ran.
func (b *mixedBench) traffic(ctx context.Context, side func(context.Context) error, deleted *atomic.Int64) ([]claimSample, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		samples []claimSample
		done    atomic.Int64
		errc    = make(chan error, b.workers+1) // producer and workers end only on error or cancel
		sideErr = make(chan error, 1)
	)
	start := time.Now()
	wg.Add(2)
	go func() { defer wg.Done(); errc <- b.produce(ctx) }()
	go func() { defer wg.Done(); sideErr <- side(ctx) }()
	for w := range b.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine, err := b.work(ctx, fmt.Sprintf("w%d", w), &done)
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
			errc <- err
		}()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var result error
wait:
	for {
		select {
		case <-tick.C:
			fmt.Fprintf(b.out, "  %4.0fs  %7d messages done  %8d backlog rows deleted\n",
				time.Since(start).Seconds(), done.Load(), deleted.Load())
		case err := <-errc:
			if err != nil {
				result = err
				break wait
			}
		case result = <-sideErr:
			break wait
		}
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return samples, elapsed, result
}

// produce sends rate messages per second in batches every 10 ms.
func (b *mixedBench) produce(ctx context.Context) error {
	per := max(1, b.rate/100)
	payload := json.RawMessage(`{"bench": true}`)
	batch := make([]pgsweep.Message, per)
	for i := range batch {
		batch[i] = pgsweep.Message{Payload: payload}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if _, err := b.client.SendBatch(ctx, "bench", batch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// work claims and completes until ctx ends, recording each claim's latency.
// An empty claim waits 5 ms (a steady stream keeps the queue short).
func (b *mixedBench) work(ctx context.Context, owner string, done *atomic.Int64) ([]claimSample, error) {
	var lat []claimSample
	for ctx.Err() == nil {
		t0 := time.Now()
		cl, err := claim(ctx, b.client, "bench", owner, b.batch)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return lat, err
		}
		lat = append(lat, claimSample{at: t0, lat: time.Since(t0)})
		if len(cl.ids) == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		n, err := cl.complete(ctx, b.client, "bench")
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return lat, err
		}
		lat[len(lat)-1].n = len(n)
		done.Add(int64(len(n)))
	}
	return lat, nil
}
