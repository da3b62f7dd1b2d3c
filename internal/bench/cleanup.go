package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// cleanupCommand names the cleanup workload in its scratch schema's marker.
const cleanupCommand = "bench cleanup"

// CleanupOptions are the flags of `pgsweep bench cleanup`.
type CleanupOptions struct {
	// DB is where to run; DB.Schema is the scratch schema pgsweep is
	// installed into for the run, where the bench's retention policy is
	// registered: created and marked by the workload and dropped at the end
	// (with the roles the install created). A schema of that name that the
	// workload did not create, such as a real install, is refused and left
	// alone.
	DB          scratch.DB
	Rows        int    // rows in the CAP-shaped table
	Cleaners    int    // sessions per contender (the single DELETE always uses one)
	Batch       int    // CAP's batch count and the policy's batch size, 1..10000
	Eligible    string // percent of rows eligible for deletion, e.g. "1%" ("": 90%)
	Modes       string // contenders, comma-separated: single, cap, exclusive, parallel
	Repeat      int    // runs per contender; the median run is reported
	Requeue     int    // re-queues of random Failed rows per second (0: none)
	BenchSchema string // the scratch schema of the benchmark's tables
	// Partitioned runs the partitioned-table workload instead (partitioned.go):
	// Partitions daily partitions of PartitionRows rows each.
	Partitioned   bool
	Partitions    int
	PartitionRows int
}

// RegisterFlags registers the flags of `pgsweep bench cleanup` on fs, with their defaults.
func (o *CleanupOptions) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, scratch.URLUsage, "pgsweep_bench_cleanup", "scratch schema pgsweep is installed into for the run, "+
		"created and dropped by it (only one this command created; a real install is refused)")
	fs.IntVar(&o.Rows, "rows", 1_000_000, "rows in the CAP-shaped table")
	fs.BoolVar(&o.Partitioned, "partitioned", false, "drain a daily-partitioned table instead: partition drop vs row sweep vs one DELETE, with a writer's insert latency")
	fs.IntVar(&o.Partitions, "partitions", 10, "with --partitioned: daily partitions (all but the two youngest expired), 3..100")
	fs.IntVar(&o.PartitionRows, "partition-rows", 1_000_000, "with --partitioned: rows per partition")
	fs.IntVar(&o.Cleaners, "cleaners", 8, "sessions per contender (the single DELETE always uses one)")
	fs.IntVar(&o.Batch, "batch", 10000, "batch size (CAP's batch count, the policy's batch size)")
	fs.StringVar(&o.Eligible, "eligible", "", "percent of rows eligible for deletion, e.g. 1% (default: 90%, a mostly expired table)")
	fs.StringVar(&o.Modes, "mode", "single,cap,exclusive,parallel", "contenders to run, comma-separated")
	fs.IntVar(&o.Repeat, "repeat", 1, "runs per contender; the median run is reported")
	fs.IntVar(&o.Requeue, "requeue", 200, "re-queues of random Failed rows per second during each run (0: none)")
	fs.StringVar(&o.BenchSchema, "bench-schema", "pgsweep_bench", "scratch schema for the benchmark's tables (dropped and recreated; only one this command created)")
}

// Cleanup runs `pgsweep bench cleanup`: on one CAP-shaped table in one
// database it compares one plain DELETE (the speed limit), CAP 10.0.1's
// PostgreSQL collector loop in K sessions, and pgsweep's retention_run in K
// sessions in each mode, while a re-queuer keeps moving random Failed rows
// back to Scheduled, and prints a table of the results to out. The tables
// live in the scratch schema BenchSchema (kept for inspection), pgsweep in
// the scratch schema DB.Schema (dropped at the end): a schema of either name
// that exists and that this workload did not create is refused before
// anything changes, so bench cleanup never touches a real install or its
// policies.
func Cleanup(ctx context.Context, opts CleanupOptions, out io.Writer) error {
	db := opts.DB
	if err := db.Validate(); err != nil {
		return err
	}
	o := cleanupOpts{rows: opts.Rows, cleaners: opts.Cleaners, batch: opts.Batch, repeat: opts.Repeat,
		requeue: opts.Requeue, bench: opts.BenchSchema}
	if opts.Eligible != "" {
		v, err := parsePercent(opts.Eligible)
		if err != nil {
			return fmt.Errorf("%w: --eligible: %v", ErrUsage, err)
		}
		o.eligible = v
	}
	o.modes = strings.Split(opts.Modes, ",")
	for _, m := range o.modes {
		if m != "single" && m != "cap" && m != "exclusive" && m != "parallel" {
			return fmt.Errorf("%w: --mode: unknown contender %q (single, cap, exclusive, parallel)", ErrUsage, m)
		}
	}
	if o.rows < 1 || o.cleaners < 1 || o.batch < 1 || o.batch > 10000 || o.repeat < 1 || o.requeue < 0 {
		return fmt.Errorf("%w: --rows, --cleaners, --repeat must be positive, --batch 1..10000, --requeue >= 0", ErrUsage)
	}
	if err := pgsweep.ValidateSchema(o.bench); err != nil {
		return fmt.Errorf("%w: --bench-schema: %v", ErrUsage, err)
	}
	if o.bench == db.Schema {
		return fmt.Errorf("%w: --schema and --bench-schema must differ (both are %s)", ErrUsage, o.bench)
	}

	conn, err := db.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The scratch schema first: one that is not ours stops the bench before
	// it changes anything.
	if err := scratch.Create(ctx, conn, o.bench, cleanupCommand); err != nil {
		return err
	}
	// pgsweep into its own scratch schema, refused likewise.
	if err := scratch.Create(ctx, conn, db.Schema, cleanupCommand); err != nil {
		return err
	}
	defer func() { _ = scratch.Drop(context.WithoutCancel(ctx), conn, db.Schema, cleanupCommand) }()
	if _, err := pgsweep.Migrate(ctx, conn, db.Schema); err != nil {
		return err
	}
	if opts.Partitioned {
		if opts.Partitions < 3 || opts.Partitions > 100 || opts.PartitionRows < 1 {
			return fmt.Errorf("%w: --partitions must be 3..100 and --partition-rows positive", ErrUsage)
		}
		pool, err := db.Pool(ctx, 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			return err
		}
		pb := &partitionedBench{pool: pool, client: client, q: pgx.Identifier{db.Schema}.Sanitize(), bench: pgx.Identifier{o.bench}.Sanitize(),
			parts: opts.Partitions, perPart: opts.PartitionRows, out: out}
		return pb.run(ctx)
	}
	b := &cleanupBench{o: o, db: &db, conn: conn, out: out,
		tbl: pgx.Identifier{o.bench, "published"}.Sanitize(), tpl: pgx.Identifier{o.bench, "template"}.Sanitize(),
		truth: pgx.Identifier{o.bench, "truth"}.Sanitize(), requeued: pgx.Identifier{o.bench, "requeued"}.Sanitize()}
	return b.run(ctx)
}

type cleanupOpts struct {
	rows     int
	cleaners int
	batch    int
	eligible float64 // percent; 0: the dense default (90%)
	modes    []string
	repeat   int
	requeue  int // re-queues per second; 0: none
	bench    string
}

// The CAP collector's statement (CAP 10.0.1, PostgreSqlDataStorage.DeleteExpiresAsync).
const capDeleteSQL = `DELETE FROM %[1]s WHERE "Id" IN (SELECT "Id" FROM %[1]s
	WHERE "ExpiresAt" < $1 AND "StatusName" IN ('Succeeded', 'Failed') LIMIT $2)`

const benchPredicate = `"ExpiresAt" < $1 AND "StatusName" IN ('Succeeded', 'Failed')`

func parsePercent(s string) (float64, error) {
	var v float64
	if _, err := fmt.Sscanf(strings.TrimSuffix(s, "%"), "%g", &v); err != nil || v <= 0 || v > 100 {
		return 0, fmt.Errorf("want a percentage in (0, 100], got %q", s)
	}
	return v, nil
}

type cleanupBench struct {
	o                         cleanupOpts
	db                        *scratch.DB
	conn                      *pgx.Conn
	out                       io.Writer
	tbl, tpl, truth, requeued string
	cutoff                    time.Time
}

type cleanupResult struct {
	name                  string
	sessions              int
	deleted               int64
	elapsed               time.Duration
	deadlocks, errs       int64
	lockWaits             int
	maxWait               time.Duration
	wrong, left, requeues int64
	firstErr              error
	strategy              string
	working               int // sessions that deleted something
}

func (r cleanupResult) rate() float64 { return float64(r.deleted) / r.elapsed.Seconds() }

func (b *cleanupBench) run(ctx context.Context) error {
	o := b.o
	dist := "90% eligible (mostly expired)"
	if o.eligible > 0 {
		dist = fmt.Sprintf("%g%% eligible", o.eligible)
	}
	fmt.Fprintf(b.out, "bench cleanup: %d CAP rows, %s, batch %d, %d sessions per contender, %d re-queues/s, %d run(s) each\n",
		o.rows, dist, o.batch, o.cleaners, o.requeue, o.repeat)
	if err := b.makeTemplate(ctx); err != nil {
		return err
	}
	var results []cleanupResult
	for _, m := range o.modes {
		var runs []cleanupResult
		for i := 0; i < o.repeat; i++ {
			r, err := b.runOne(ctx, m)
			if err != nil {
				return err
			}
			fmt.Fprintf(b.out, "  %-22s run %d: %9d rows in %6.2fs = %9.0f rows/s\n", r.name, i+1, r.deleted,
				r.elapsed.Seconds(), r.rate())
			runs = append(runs, r)
		}
		sort.Slice(runs, func(i, j int) bool { return runs[i].rate() < runs[j].rate() })
		results = append(results, runs[len(runs)/2])
	}
	// The policy goes with the scratch install (dropped by Cleanup); the
	// tables stay for inspection.
	b.report(results)
	for _, r := range results {
		if r.firstErr != nil {
			fmt.Fprintf(b.out, "%s: first error: %v\n", r.name, r.firstErr)
		}
	}
	return nil
}

// makeTemplate builds the unlogged template every run copies. The dense
// default mirrors a CAP table after an outage of the collector: 85.5%
// Succeeded and 4.5% Failed long expired, the rest Scheduled, Queued or not
// yet expired. --eligible P% keeps P% long expired and makes most of the rest
// Succeeded but not yet expired (kept for days, as CAP does).
func (b *cleanupBench) makeTemplate(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintf(b.out, "building the template table (%d rows)...\n", b.o.rows)
	p := 0.9
	if b.o.eligible > 0 {
		p = b.o.eligible / 100
	}
	b.cutoff = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	sql := fmt.Sprintf(`
		SELECT setseed(0.42);
		CREATE UNLOGGED TABLE %[1]s AS
		SELECT i AS "Id", 'v1'::varchar(20) AS "Version", ('sample.topic.' || (i %% 50))::varchar(200) AS "Name",
		       rpad(md5(i::text), 200, md5((i * 7)::text))::text AS "Content", (i %% 3)::int AS "Retries",
		       ts AS "Added",
		       CASE WHEN r < %[2]g THEN ts + interval '1 day'
		            WHEN r < %[2]g + (1 - %[2]g) * 0.7 THEN timestamp '2999-01-01'
		            WHEN r < %[2]g + (1 - %[2]g) * 0.85 THEN NULL
		            ELSE ts + interval '1 day' END AS "ExpiresAt",
		       (CASE WHEN r < %[2]g * 0.95 THEN 'Succeeded' WHEN r < %[2]g THEN 'Failed'
		             WHEN r < %[2]g + (1 - %[2]g) * 0.7 THEN 'Succeeded'
		             WHEN r < %[2]g + (1 - %[2]g) * 0.85 THEN 'Scheduled' ELSE 'Queued' END)::varchar(50) AS "StatusName"
		  FROM (SELECT i, timestamp '2024-01-01' + i * interval '10 seconds' AS ts, random() AS r
		          FROM generate_series(1, %[3]d) i) s;`,
		b.tpl, p, b.o.rows)
	if _, err := b.conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	fmt.Fprintf(b.out, "template ready in %.1fs\n", time.Since(start).Seconds())
	return nil
}

// reset copies the template into a fresh, analyzed, checkpointed table and
// records which rows are eligible.
func (b *cleanupBench) reset(ctx context.Context) (eligible int64, err error) {
	stmts := []string{
		`DROP TABLE IF EXISTS ` + b.tbl + `, ` + b.truth + `, ` + b.requeued,
		`CREATE TABLE ` + b.tbl + ` ("Id" bigint NOT NULL, "Version" varchar(20), "Name" varchar(200) NOT NULL,
			"Content" text, "Retries" int, "Added" timestamp NOT NULL, "ExpiresAt" timestamp NULL,
			"StatusName" varchar(50) NOT NULL)`,
		`INSERT INTO ` + b.tbl + ` SELECT * FROM ` + b.tpl + ` ORDER BY "Id"`,
		`ALTER TABLE ` + b.tbl + ` ADD PRIMARY KEY ("Id")`,
		`CREATE INDEX ON ` + b.tbl + ` ("ExpiresAt", "StatusName")`,
		`VACUUM ANALYZE ` + b.tbl,
		`CREATE UNLOGGED TABLE ` + b.requeued + ` ("Id" bigint)`,
		`CHECKPOINT`,
	}
	for _, s := range stmts {
		if _, err := b.conn.Exec(ctx, s); err != nil {
			return 0, fmt.Errorf("reset: %s: %w", strings.Fields(s)[0], err)
		}
	}
	if _, err := b.conn.Exec(ctx, `CREATE UNLOGGED TABLE `+b.truth+` AS SELECT "Id", (`+benchPredicate+`) AS eligible FROM `+b.tbl,
		b.cutoff); err != nil {
		return 0, fmt.Errorf("reset: truth: %w", err)
	}
	err = b.conn.QueryRow(ctx, `SELECT count(*) FROM `+b.truth+` WHERE eligible`).Scan(&eligible)
	return eligible, err
}

func (b *cleanupBench) sessions(ctx context.Context, n int) ([]*pgx.Conn, error) {
	conns := make([]*pgx.Conn, 0, n)
	for range n {
		c, err := b.db.Connect(ctx)
		if err != nil {
			for _, c := range conns {
				_ = c.Close(ctx)
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func (b *cleanupBench) runOne(ctx context.Context, mode string) (cleanupResult, error) {
	k := b.o.cleaners
	name := map[string]string{"single": "single DELETE", "cap": "CAP collector loop",
		"exclusive": "pgsweep exclusive", "parallel": "pgsweep parallel"}[mode]
	if mode == "single" {
		k = 1
	}
	r := cleanupResult{name: name, sessions: k}
	eligible, err := b.reset(ctx)
	if err != nil {
		return r, err
	}
	policy := "bench.published"
	if mode == "exclusive" || mode == "parallel" {
		client, err := pgsweep.NewClient(b.conn, &pgsweep.ClientOptions{Schema: b.db.Schema})
		if err != nil {
			return r, err
		}
		// Rows expired more than a day before the template's cutoff date...
		// the policy's age is computed from now, so express the same cutoff.
		err = client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: policy, Table: b.tbl, TimeColumn: "ExpiresAt",
			OlderThan: time.Since(b.cutoff).Round(time.Hour), StatusColumn: "StatusName",
			Statuses: []string{"Succeeded", "Failed"}, BatchSize: b.o.batch, Mode: mode})
		if err != nil {
			return r, err
		}
	}
	conns, err := b.sessions(ctx, k)
	if err != nil {
		return r, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	pids := make([]uint32, len(conns))
	for i, c := range conns {
		pids[i] = c.PgConn().PID()
	}

	var deleted atomic.Int64
	sampler := b.startLockSampler(ctx, pids)
	rq := b.startRequeuer(ctx)
	progress := b.startProgress(ctx, name, eligible, func() int64 {
		if mode == "exclusive" || mode == "parallel" {
			var n int64
			_ = b.conn.QueryRow(ctx, `SELECT coalesce(sum(rows_deleted), 0) FROM `+pgx.Identifier{b.db.Schema}.Sanitize()+
				`.retention_pass WHERE policy = $1 AND started_at >= now() - interval '1 hour'`, policy).Scan(&n)
			return n
		}
		return deleted.Load()
	})

	var wg sync.WaitGroup
	var mu sync.Mutex
	start := time.Now()
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err, firstErr error
			var n, deadlocks int64
			var strategy string
			switch mode {
			case "single":
				var tag pgconn.CommandTag
				tag, err = c.Exec(ctx, `DELETE FROM `+b.tbl+` WHERE `+benchPredicate, b.cutoff)
				n = tag.RowsAffected()
				deleted.Add(n)
			case "cap":
				n, deadlocks, firstErr, err = b.capLoop(ctx, c, &deleted)
			default:
				var id *int64
				err = c.QueryRow(ctx, `CALL `+pgx.Identifier{b.db.Schema}.Sanitize()+`.retention_run($1, $2, $3, NULL, NULL)`,
					policy, fmt.Sprintf("bench-%d", i), time.Hour).Scan(&id)
				if err == nil && id != nil {
					err = c.QueryRow(ctx, `SELECT rows_deleted, coalesce(strategy, '') FROM `+
						pgx.Identifier{b.db.Schema}.Sanitize()+`.retention_pass WHERE id = $1`, *id).Scan(&n, &strategy)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if n > 0 {
				r.working++
			}
			r.deadlocks += deadlocks
			if r.firstErr == nil {
				r.firstErr = firstErr
			}
			if strategy != "" {
				r.strategy = strategy
			}
			if err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
					r.deadlocks++
				} else {
					r.errs++
				}
				if r.firstErr == nil {
					r.firstErr = err
				}
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	progress()
	r.requeues = rq()
	r.lockWaits, r.maxWait = sampler()

	var rows int64
	if err := b.conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+b.truth+`) - (SELECT count(*) FROM `+b.tbl+`)`).Scan(&rows); err != nil {
		return r, err
	}
	r.deleted = rows
	err = b.conn.QueryRow(ctx, `SELECT count(*) FROM `+b.truth+` t
		WHERE (NOT t.eligible OR t."Id" IN (SELECT "Id" FROM `+b.requeued+`))
		  AND NOT EXISTS (SELECT 1 FROM `+b.tbl+` p WHERE p."Id" = t."Id")`).Scan(&r.wrong)
	if err != nil {
		return r, err
	}
	err = b.conn.QueryRow(ctx, `SELECT count(*) FROM `+b.tbl+` WHERE `+benchPredicate, b.cutoff).Scan(&r.left)
	return r, err
}

// capLoop is CAP's collector in one replica: delete batches until a batch
// deletes nothing. A deadlock fails that batch; CAP logs it and carries on.
func (b *cleanupBench) capLoop(ctx context.Context, c *pgx.Conn, total *atomic.Int64) (n, deadlocks int64, firstErr, err error) {
	q := fmt.Sprintf(capDeleteSQL, b.tbl)
	for {
		tag, err := c.Exec(ctx, q, b.cutoff, b.o.batch)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				deadlocks++
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			return n, deadlocks, firstErr, err
		}
		n += tag.RowsAffected()
		total.Add(tag.RowsAffected())
		if tag.RowsAffected() == 0 {
			return n, deadlocks, firstErr, nil
		}
	}
}

// startLockSampler watches pg_locks for lock waits of the given sessions and
// returns a function that stops it and reports the number of distinct waits
// seen and the longest. Waits shorter than the 5 ms sampling period can go
// unseen; each one seen is counted once, by its waitstart.
func (b *cleanupBench) startLockSampler(ctx context.Context, pids []uint32) func() (int, time.Duration) {
	conn, err := b.db.Connect(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	seen := map[string]time.Duration{}
	go func() {
		defer close(done)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		ipids := make([]int32, len(pids))
		for i, p := range pids {
			ipids[i] = int32(p)
		}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, `SELECT pid, coalesce(waitstart, now())::text, clock_timestamp() - coalesce(waitstart, now())
				FROM pg_locks WHERE NOT granted AND pid = ANY ($1)`, ipids)
			if err != nil {
				return
			}
			for rows.Next() {
				var pid int32
				var ws string
				var d time.Duration
				if rows.Scan(&pid, &ws, &d) == nil {
					key := fmt.Sprint(pid, ws)
					if d > seen[key] {
						seen[key] = d
					}
				}
			}
			rows.Close()
		}
	}()
	return func() (int, time.Duration) {
		close(stop)
		<-done
		var max time.Duration
		for _, d := range seen {
			if d > max {
				max = d
			}
		}
		return len(seen), max
	}
}

// startRequeuer re-queues random Failed rows (CAP retrying a message) and
// logs each committed re-queue in the same transaction. It returns a function
// that stops it and reports how many rows it re-queued.
func (b *cleanupBench) startRequeuer(ctx context.Context) func() int64 {
	if b.o.requeue == 0 {
		return func() int64 { return 0 }
	}
	conn, err := b.db.Connect(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	var n atomic.Int64
	go func() {
		defer close(done)
		if err != nil {
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rng := rand.New(rand.NewPCG(1, 2))
		t := time.NewTicker(time.Second / time.Duration(b.o.requeue))
		defer t.Stop()
		q := `WITH u AS (
			UPDATE ` + b.tbl + ` SET "StatusName" = 'Scheduled', "ExpiresAt" = NULL
			 WHERE "Id" = (SELECT "Id" FROM ` + b.tbl + ` WHERE "Id" >= $1 AND "StatusName" = 'Failed' ORDER BY "Id" LIMIT 1)
			   AND "StatusName" = 'Failed'
			RETURNING "Id")
			INSERT INTO ` + b.requeued + ` SELECT "Id" FROM u`
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			tag, err := conn.Exec(ctx, q, rng.IntN(b.o.rows)+1)
			if err != nil {
				return
			}
			n.Add(tag.RowsAffected())
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return n.Load()
	}
}

// startProgress prints progress every second until the returned function is called.
func (b *cleanupBench) startProgress(ctx context.Context, name string, eligible int64, deleted func() int64) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(b.out, "    %s: %5.1fs, %d of %d eligible rows deleted\n", name, time.Since(start).Seconds(),
					deleted(), eligible)
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

func (b *cleanupBench) report(results []cleanupResult) {
	var base float64
	for _, r := range results {
		if strings.HasPrefix(r.name, "single") {
			base = r.rate()
		}
	}
	fmt.Fprintln(b.out)
	w := tabwriter.NewWriter(b.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "contender\tsessions\trows deleted\tseconds\trows/s\tvs DELETE\tdeadlocks\tlock waits\tlongest wait\twrongly deleted\teligible left\tre-queued\terrors\tstrategy\t")
	for _, r := range results {
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2fx", r.rate()/base)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f\t%.0f\t%s\t%d\t%d\t%v\t%d\t%d\t%d\t%d\t%s\t\n", r.name, r.sessions, r.deleted,
			r.elapsed.Seconds(), r.rate(), ratio, r.deadlocks, r.lockWaits, r.maxWait.Round(time.Millisecond), r.wrong,
			r.left, r.requeues, r.errs, r.strategy)
	}
	_ = w.Flush()
}
