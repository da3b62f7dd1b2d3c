package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/scratch"
	"github.com/pgsweep/pgsweep/ui"
)

// bench ui: what the dashboard costs at scale. It fills a scratch install
// with --queues queues, --lanes lanes and --messages messages (some in
// flight, some dead), takes one snapshot (the stats part, timed), then
// serves every page --runs times from the ui handler in process and prints
// each page's server time (median) and the buffers its statements read:
// every statement a page sends is recorded by a pgx tracer and run again
// under EXPLAIN (ANALYZE, BUFFERS), so the figure is the page's own
// statements, what their functions read included. Targets (issue 24):
// every page under 50 ms and 2,000 buffers.

const uiCommand = "bench ui"

// UIOptions are the flags of `pgsweep bench ui`.
type UIOptions struct {
	DB       scratch.DB
	Queues   int
	Lanes    int
	Messages int
	Runs     int
}

// RegisterFlags registers the flags of `pgsweep bench ui`.
func (o *UIOptions) RegisterFlags(fs *flag.FlagSet) {
	o.DB.RegisterFlags(fs, scratch.URLUsage, "", "scratch schema pgsweep is installed into for the run, created and dropped by it "+
		"(default pgsweep_bench_ui_<pid>); any other schema that exists, a real install included, is refused")
	fs.IntVar(&o.Queues, "queues", 100, "queues (1..10000)")
	fs.IntVar(&o.Lanes, "lanes", 10000, "lanes, spread over the queues, 5 messages each (0..messages/5)")
	fs.IntVar(&o.Messages, "messages", 2000000, "messages in all (>= queues)")
	fs.IntVar(&o.Runs, "runs", 5, "requests per page; the median is shown (1..100)")
}

// uiTargets are the limits per page.
const (
	uiTargetTime    = 50 * time.Millisecond
	uiTargetBuffers = 2000
)

// UI runs `pgsweep bench ui`.
func UI(ctx context.Context, o UIOptions, out io.Writer) error {
	if o.DB.Schema == "" {
		o.DB.Schema = fmt.Sprintf("pgsweep_bench_ui_%d", os.Getpid())
	}
	if err := o.DB.Validate(); err != nil {
		return err
	}
	if o.Queues < 1 || o.Queues > 10000 || o.Messages < o.Queues || o.Lanes < 0 || o.Lanes*5 > o.Messages || o.Runs < 1 || o.Runs > 100 {
		return fmt.Errorf("%w: --queues 1..10000, --messages >= --queues, --lanes 0..messages/5, --runs 1..100", ErrUsage)
	}
	pool, err := o.DB.Pool(ctx, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := scratch.Reinstall(ctx, pool, o.DB.Schema, uiCommand); err != nil {
		return err
	}
	defer func() { _ = scratch.Drop(context.WithoutCancel(ctx), pool, o.DB.Schema, uiCommand) }()
	fmt.Fprintf(out, "bench ui: %d queues, %d lanes, %d messages (schema %s)\n", o.Queues, o.Lanes, o.Messages, o.DB.Schema)

	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: o.DB.Schema})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := uiFill(ctx, c, pool, o, out); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	fmt.Fprintf(out, "filled in %v\n", time.Since(start).Round(time.Second))
	s := pgx.Identifier{o.DB.Schema}.Sanitize()
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+s+".message"); err != nil {
		return err
	}
	var part time.Duration
	if err := c.Maintain(ctx, "bench-ui", time.Minute); err != nil {
		return fmt.Errorf("maintain: %w", err)
	}
	if err := pool.QueryRow(ctx, "SELECT finished_at - started_at FROM "+s+".maintain_run WHERE part = 'stats' AND status = 'done' ORDER BY id DESC LIMIT 1").
		Scan(&part); err != nil {
		return fmt.Errorf("the stats part did not run: %w", err)
	}
	fmt.Fprintf(out, "snapshot (the stats part of one pass): %v for %d queues, %d messages\n", part.Round(time.Millisecond), o.Queues, o.Messages)

	rec := &queryRecorder{}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = rec
	cfg.MaxConns = 2
	upool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer upool.Close()
	h, err := ui.NewHandler(upool, ui.Options{Schema: o.DB.Schema})
	if err != nil {
		return err
	}
	var someID, deadID int64
	if err := pool.QueryRow(ctx, "SELECT (SELECT max(id) FROM "+s+".message WHERE queue = 'q0000'), (SELECT max(id) FROM "+s+".message_dead WHERE queue = 'q0000')").
		Scan(&someID, &deadID); err != nil {
		return err
	}
	pages := []string{"/", "/queues/q0000", "/queues/q0000/lanes", "/queues/q0000?state=in_flight", "/queues/q0000?state=dead",
		"/queues/q0000?state=dead&error=timeout", "/queues/q0000?state=scheduled",
		fmt.Sprintf("/queues/q0000/messages/%d", someID), fmt.Sprintf("/queues/q0000/messages/%d", deadID),
		"/maintenance", "/leases", "/retention"}
	fmt.Fprintf(out, "\n%-42s %10s %9s %8s\n", "page", "server ms", "buffers", "queries")
	failed := 0
	for _, p := range pages {
		var times []float64
		for range o.Runs {
			rec.reset()
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, p, nil)
			w := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(w, req)
			times = append(times, float64(time.Since(t0).Microseconds())/1000)
			if w.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d\n%s", p, w.Code, w.Body.String())
			}
		}
		qs := rec.take()
		buffers, err := explainBuffers(ctx, pool, qs)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		ms := median(times)
		mark := "ok"
		if ms > float64(uiTargetTime.Milliseconds()) || buffers > uiTargetBuffers {
			mark, failed = "OVER", failed+1
		}
		fmt.Fprintf(out, "%-42s %10.1f %9d %8d  %s\n", p, ms, buffers, len(qs), mark)
	}
	fmt.Fprintf(out, "\ntargets: every page under %v and %d buffers; %d page(s) over\n", uiTargetTime, uiTargetBuffers, failed)
	return nil
}

// uiFill creates the queues and sends the messages with send_batch (lanes
// first, 5 messages each), then puts some of q0000's in flight and some
// dead.
func uiFill(ctx context.Context, c *pgsweep.Client, pool *pgxpool.Pool, o UIOptions, out io.Writer) error {
	s := pgx.Identifier{o.DB.Schema}.Sanitize()
	for q := range o.Queues {
		if err := c.QueueCreate(ctx, fmt.Sprintf("q%04d", q), pgsweep.Outbox, 1); err != nil {
			return err
		}
	}
	const batch = 10000
	sent, next := 0, max(o.Messages/10, 1)
	send := func(q, n int, lanes []*string) error {
		if _, err := pool.Exec(ctx, "SELECT "+s+".send_batch($1, array_fill('{}'::jsonb, ARRAY[$2::int]), p_lanes => $3::text[])",
			fmt.Sprintf("q%04d", q), n, lanes); err != nil {
			return err
		}
		sent += n
		if sent >= next {
			fmt.Fprintf(out, "  sent %d of %d\n", sent, o.Messages)
			for next <= sent {
				next += max(o.Messages/10, 1)
			}
		}
		return nil
	}
	perQueue := make([][]*string, o.Queues) // lane l is in queue l mod queues, 5 messages each
	for l := range o.Lanes {
		name := fmt.Sprintf("lane-%d", l)
		for range 5 {
			perQueue[l%o.Queues] = append(perQueue[l%o.Queues], &name)
		}
	}
	for q, ls := range perQueue {
		for len(ls) > 0 {
			k := min(batch, len(ls))
			if err := send(q, k, ls[:k]); err != nil {
				return err
			}
			ls = ls[k:]
		}
	}
	for q := 0; sent < o.Messages; q = (q + 1) % o.Queues {
		if err := send(q, min(batch, o.Messages-sent), nil); err != nil {
			return err
		}
	}
	// in flight and dead letters in q0000
	ds, err := c.Claim(ctx, "q0000", "bench-ui", 1000, time.Hour)
	if err != nil {
		return err
	}
	var dead []int64
	var tok pgsweep.Token
	for i, d := range ds {
		if i%2 == 0 {
			dead, tok = append(dead, d.ID), d.Token
		}
	}
	if len(dead) > 0 {
		if _, err := c.Fail(ctx, "q0000", tok, dead, "timeout talking to the payments service", 0); err != nil {
			return err
		}
	}
	return nil
}

// queryRecorder is a pgx tracer that keeps the statements sent (and their
// arguments) since the last reset.
type queryRecorder struct {
	mu sync.Mutex
	qs []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (r *queryRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.qs = append(r.qs, recorded{d.SQL, slices.Clone(d.Args)})
	r.mu.Unlock()
	return ctx
}

func (r *queryRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *queryRecorder) reset() { r.mu.Lock(); r.qs = nil; r.mu.Unlock() }

func (r *queryRecorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.qs)
}

// explainBuffers runs each statement again under EXPLAIN (ANALYZE, BUFFERS)
// and sums the shared buffers its plan read (hit or not), the functions'
// own statements included (they run inside the plan's nodes), in a warm
// session (a dashboard's pool keeps its connections).
func explainBuffers(ctx context.Context, pool *pgxpool.Pool, qs []recorded) (int64, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	var total int64
	for _, q := range qs {
		var doc []byte
		// twice on one connection, the second counted: the first also reads
		// the catalogs into the session's caches, as a page's first call does
		for range 2 {
			if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+q.sql, q.args...).Scan(&doc); err != nil {
				return 0, fmt.Errorf("explain %q: %w", q.sql, err)
			}
		}
		var plans []struct {
			Plan struct {
				Hit  int64 `json:"Shared Hit Blocks"`
				Read int64 `json:"Shared Read Blocks"`
			} `json:"Plan"`
		}
		if err := json.Unmarshal(doc, &plans); err != nil || len(plans) != 1 {
			return 0, fmt.Errorf("explain %q: %v", q.sql, err)
		}
		total += plans[0].Plan.Hit + plans[0].Plan.Read
	}
	return total, nil
}
