package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// partitionedBench is `pgsweep bench cleanup --partitioned`: a table of
// `parts` daily RANGE partitions of `perPart` rows each, all but the two
// youngest wholly expired, drained three ways in one run -- pgsweep dropping
// the expired partitions, pgsweep sweeping them row by row (a status
// condition keeps it from dropping), and one DELETE -- while a writer keeps
// inserting single rows into today's partition. It reports each drain's time
// and the writer's p99 insert latency during it against an idle window.
type partitionedBench struct {
	pool    *pgxpool.Pool
	client  *pgsweep.Client
	q       string // quoted pgsweep schema
	bench   string // quoted bench schema
	parts   int
	perPart int
	out     io.Writer
}

// load creates and fills the table, with a DEFAULT partition unless
// noDefault (PostgreSQL refuses DETACH ... CONCURRENTLY with one).
func (b *partitionedBench) load(ctx context.Context, noDefault bool) error {
	tbl := b.bench + ".pt"
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s;
		CREATE TABLE %[1]s (id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL,
		                    status text NOT NULL DEFAULT 'done', body text) PARTITION BY RANGE (at);`, tbl))
	if err != nil {
		return err
	}
	if !noDefault {
		if _, err := b.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s_default PARTITION OF %[1]s DEFAULT`, tbl)); err != nil {
			return err
		}
	}
	for d := 1 - b.parts; d <= 1; d++ { // days 1-parts .. 0, and tomorrow (empty)
		if _, err := b.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s_%[2]d PARTITION OF %[1]s
			FOR VALUES FROM (date_trunc('day', now()) + interval '%[3]d days') TO (date_trunc('day', now()) + interval '%[4]d days')`,
			tbl, d+b.parts, d, d+1)); err != nil {
			return err
		}
	}
	// one statement per partition: commits in pieces, progress visible
	for d := 1 - b.parts; d <= 0; d++ {
		if _, err := b.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (at, body)
			SELECT date_trunc('day', now()) + interval '%[2]d days' + g * (interval '1 day' / %[3]d), repeat('x', 100)
			  FROM generate_series(0, %[3]d - 1) g`, tbl, d, b.perPart)); err != nil {
			return err
		}
	}
	// VACUUM, not only ANALYZE: partitions expire days after they were
	// written, long after autovacuum processed them; without it autovacuum
	// starts on every loaded partition during the contenders' runs (the
	// inserts trigger it) and holds the leaves pgsweep wants to detach.
	_, err = b.pool.Exec(ctx, "VACUUM (ANALYZE) "+tbl)
	return err
}

// writer inserts single rows into today's partition on its own connection until stop, recording
// when each started and how long it took.
func (b *partitionedBench) writer(ctx context.Context, conn *pgxpool.Conn, stop <-chan struct{}) ([]claimSample, error) {
	var out []claimSample
	for {
		select {
		case <-stop:
			return out, nil
		default:
		}
		t0 := time.Now()
		if _, err := conn.Exec(ctx, "INSERT INTO "+b.bench+".pt (at) VALUES (now())"); err != nil {
			return out, err
		}
		out = append(out, claimSample{at: t0, lat: time.Since(t0)})
		time.Sleep(time.Millisecond)
	}
}

// warm opens n connections in the pool (if it has fewer idle) and leaves
// them idle, so that the contender does not open one during its window.
func (b *partitionedBench) warm(ctx context.Context, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.Ping(ctx); err != nil {
			return err
		}
	}
	return nil
}

func maxLatency(samples []claimSample, from, to time.Time) time.Duration {
	var m time.Duration
	for _, s := range samples {
		if !s.at.Before(from) && s.at.Before(to) {
			m = max(m, s.lat)
		}
	}
	return m
}

func p99(samples []claimSample, from, to time.Time) (time.Duration, int) {
	var l []time.Duration
	for _, s := range samples {
		if !s.at.Before(from) && s.at.Before(to) {
			l = append(l, s.lat)
		}
	}
	if len(l) == 0 {
		return 0, 0
	}
	slices.Sort(l)
	return l[min(len(l)-1, int(0.99*float64(len(l))))], len(l)
}

func (b *partitionedBench) run(ctx context.Context) error {
	expired := int64(b.parts-2) * int64(b.perPart)
	fmt.Fprintf(b.out, "bench cleanup --partitioned: %d daily partitions x %d rows, %d wholly expired (%d rows), a writer inserting into today's\n\n",
		b.parts, b.perPart, b.parts-2, expired)
	fmt.Fprintf(b.out, "%-34s %12s %10s %12s %14s %14s\n", "contender", "rows", "time", "rows/s", "insert p99 idle", "insert p99 during")
	// The cutoff: yesterday's midnight, so days 1-parts..-2 are wholly
	// expired: older_than 1 day, and every pass runs as of today's midnight
	// (retention_run's p_now), so that pgsweep drains exactly the rows the
	// DELETE deletes. (Until 0.30 the policy kept "1 day plus the time since
	// midnight" and passes ran on the clock: the cutoff crept a few seconds
	// into yesterday's partition, and each pass also swept that whole leaf
	// for the few rows of those seconds.)
	register := func(name, extra string) error {
		_, err := b.pool.Exec(ctx, fmt.Sprintf(`SELECT %[1]s.setting_set('retention_lock_timeout', '200 milliseconds');
			SELECT %[1]s.retention_register('%[2]s', '%[3]s', 'at', interval '1 day'%[4]s,
			       p_batch_size => 10000)`, b.q, name, b.bench[1:len(b.bench)-1]+".pt", extra))
		return err
	}
	pass := func(name string) error {
		var id *int64
		return b.pool.QueryRow(ctx, fmt.Sprintf("CALL %s.retention_run($1, 'bench', '10 minutes', date_trunc('day', now()), NULL)", b.q),
			name).Scan(&id)
	}
	drain := func(name string) (int64, error) {
		var total int64
		for {
			if err := pass(name); err != nil {
				return 0, err
			}
			var rows int64
			var left bool
			if err := b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes WHERE policy = $1),
				EXISTS (SELECT 1 FROM %[2]s.pt WHERE at < date_trunc('day', now()) - interval '1 day')`, b.q, b.bench), name).Scan(&rows, &left); err != nil {
				return 0, err
			}
			total = rows
			if !left {
				return total, nil
			}
		}
	}
	expiredRows := func() (int64, error) { // the rows one DELETE would remove
		var n int64
		err := b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.pt WHERE at < date_trunc('day', now()) - interval '1 day'`,
			b.bench)).Scan(&n)
		return n, err
	}
	contenders := []struct {
		name      string
		noDefault bool
		policy    string // registered before the timed window ("" none)
		extra     string // retention_register's further arguments
		run       func() (int64, error)
		after     func() error // more work the contender leaves for later, timed apart
	}{
		{"pgsweep runner: DETACH CONCURRENTLY", true, "pt_conc", "", func() (int64, error) {
			// What the Go runner does before each pass (retention_detach.sql),
			// then the pass itself; no DEFAULT partition (PostgreSQL refuses
			// CONCURRENTLY with one).
			var midnight time.Time
			if err := b.pool.QueryRow(ctx, "SELECT date_trunc('day', now())").Scan(&midnight); err != nil {
				return 0, err
			}
			d, err := b.client.RetentionDetachConcurrently(ctx, "bench", &midnight)
			if err != nil {
				return 0, err
			}
			if len(d.Errors) > 0 || d.Detached != b.parts-2 {
				return 0, fmt.Errorf("concurrent detach: %+v, want %d partitions detached", d, b.parts-2)
			}
			return drain("pt_conc")
		}, func() error {
			// The runner's next call drops the detached tables.
			d, err := b.client.RetentionDetachConcurrently(ctx, "bench", nil)
			if err != nil {
				return err
			}
			if len(d.Errors) > 0 || d.Dropped != b.parts-2 {
				return fmt.Errorf("the next call: %+v, want %d detached tables dropped", d, b.parts-2)
			}
			return nil
		}},
		{"pgsweep pass: plain DETACH", false, "pt_drop", "", func() (int64, error) {
			return drain("pt_drop")
		}, func() error {
			// The drain detached the expired partitions; the next pass
			// drops the detached tables (retention_partition.sql).
			if err := pass("pt_drop"); err != nil {
				return err
			}
			var left int64
			if err := b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM pg_catalog.pg_class c
				WHERE c.relnamespace = '%s'::regnamespace AND c.relname LIKE 'pgsweep\_detached\_%%'`, b.bench)).Scan(&left); err != nil {
				return err
			}
			if left > 0 {
				return fmt.Errorf("%d detached partitions left after the next pass", left)
			}
			return nil
		}},
		{"pgsweep: sweep rows (status filter)", false, "pt_sweep", ", 'status', ARRAY['done']", func() (int64, error) {
			return drain("pt_sweep")
		}, nil},
		{"one DELETE", false, "", "", func() (int64, error) {
			tag, err := b.pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.pt WHERE at < date_trunc('day', now()) - interval '1 day'`, b.bench))
			return tag.RowsAffected(), err
		}, nil},
	}
	outcomes := make([]outcome, 0, len(contenders))
	for _, c := range contenders {
		if err := b.load(ctx, c.noDefault); err != nil {
			return err
		}
		// The rows each contender really removes, counted before it runs
		// (untimed): pgsweep reports a dropped partition's rows from the
		// statistics, which can be off (an ANALYZE that runs before the
		// loading session's insert counts reach the statistics leaves the
		// live-tuple count doubled).
		expiredBefore, err := expiredRows()
		if err != nil {
			return err
		}
		// The policy is registered before the timed window: a registration
		// is made once, not per drain (until 0.31 it was timed, with its
		// catalog reads, on the two shared cores).
		if c.policy != "" {
			if err := register(c.policy, c.extra); err != nil {
				return err
			}
		}
		if _, err := b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		// The writer has a connection of its own, and the pool holds open
		// the ones the contender will use: until 0.31 the contender's first
		// statement took the writer's idle connection, and the writer's next
		// insert waited 4-5 ms for a new one to be opened (server logs: no
		// insert in the window took over 2 ms), which the p99 counted.
		wconn, err := b.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		if err := b.warm(ctx, 3); err != nil {
			wconn.Release()
			return err
		}
		stop := make(chan struct{})
		var samples []claimSample
		var werr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); samples, werr = b.writer(ctx, wconn, stop) }()
		idleFrom := time.Now()
		time.Sleep(2 * time.Second)
		start := time.Now()
		rows, err := c.run()
		end := time.Now()
		afterStart, afterEnd := end, end
		if err == nil && c.after != nil {
			time.Sleep(100 * time.Millisecond)
			afterStart = time.Now()
			err = c.after()
			afterEnd = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		wconn.Release()
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if werr != nil {
			return fmt.Errorf("writer: %w", werr)
		}
		expiredAfter, err := expiredRows()
		if err != nil {
			return err
		}
		reported := rows
		rows = expiredBefore - expiredAfter
		idle, _ := p99(samples, idleFrom, start)
		during, n := p99(samples, start, end)
		elapsed := end.Sub(start)
		fmt.Fprintf(b.out, "%-34s %12d %10v %12.0f %14v %14v (%d inserts, max %v)\n", c.name, rows, elapsed.Round(time.Millisecond),
			float64(rows)/elapsed.Seconds(), idle.Round(time.Microsecond), during.Round(time.Microsecond), n,
			maxLatency(samples, start, end).Round(time.Microsecond))
		if reported != rows {
			fmt.Fprintf(b.out, "%-34s %12d  (rows the passes reported: from the statistics for dropped partitions)\n", "  reported", reported)
		}
		if c.after != nil {
			a, an := p99(samples, afterStart, afterEnd)
			w, wn := p99(samples, start, afterEnd)
			fmt.Fprintf(b.out, "%-34s %12s %10v %12s %14s %14v (%d inserts, max %v)\n", "  then: next pass drops them", "",
				afterEnd.Sub(afterStart).Round(time.Millisecond), "", "", a.Round(time.Microsecond), an,
				maxLatency(samples, afterStart, afterEnd).Round(time.Microsecond))
			fmt.Fprintf(b.out, "%-34s %12s %10s %12s %14s %14v (%d inserts, max %v)\n", "  drain to last drop, all in all", "",
				"", "", "", w.Round(time.Microsecond), wn, maxLatency(samples, start, afterEnd).Round(time.Microsecond))
		}
		o := outcome{time: elapsed, all: elapsed + afterEnd.Sub(afterStart)}
		if idle > 0 {
			w, _ := p99(samples, start, afterEnd)
			o.ratio, o.allRatio = float64(during)/float64(idle), float64(w)/float64(idle)
		}
		outcomes = append(outcomes, o)
	}
	conc, drop, del := outcomes[0], outcomes[1], outcomes[3]
	fmt.Fprintf(b.out, "\nrunner (DETACH CONCURRENTLY, then the pass): one DELETE / drop %.0fx (target >= 50x); insert p99 during / idle %.2fx (target <= 2x)\n",
		float64(del.time)/float64(conc.time), conc.ratio)
	fmt.Fprintf(b.out, "pass alone (plain DETACH, pg_cron installs): one DELETE / drop %.0fx; insert p99 during the drops / idle: %.2fx\n",
		float64(del.time)/float64(drop.time), drop.ratio)
	fmt.Fprintf(b.out, "counting the next pass's (call's) drop of the detached tables too: runner %.0fx, pass %.0fx; insert p99 / idle over both: runner %.2fx, pass %.2fx\n",
		float64(del.time)/float64(conc.all), float64(del.time)/float64(drop.all), conc.allRatio, drop.allRatio)
	return nil
}

// outcome is one contender's drain: its time, the time counting what it
// left for later (after), and the writer's insert p99 over each against idle.
type outcome struct {
	time, all       time.Duration
	ratio, allRatio float64
}
