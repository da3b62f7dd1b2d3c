package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// bench claim --citus URL: pgsweep's claim + complete (the contender
// pgsweep) on a Citus coordinator and on a single node, side by side in one
// run (issue 15; docs/benchmarks.md, "Citus"). pgsweep is installed into
// the scratch schema --schema on both; on the coordinator it is distributed
// (citus_distribute), and the run uses one queue per worker node, named so
// that each queue's shard is on a different worker: every claim and complete
// is pushed down whole to its queue's worker. The single node gets the same
// queues. --messages is split evenly between the queues, --workers spread
// over them (worker i claims from queue i mod k), each on a connection of
// its own. Each round drains the coordinator, then the single node; the
// report gives the median rates and the latency of every claim call (p50,
// p99, mean) over all rounds. It measures; it asserts nothing about speed:
// on one machine the coordinator adds a hop to every call.

// citusQueue is a queue of the Citus run and the worker node it lives on.
type citusQueue struct {
	name string
	node string // host:port
}

// citusSide is one database of the run: the coordinator or the single node.
type citusSide struct {
	label string
	pool  *pgxpool.Pool
	bench *claimBench
	rates []float64
	lat   []time.Duration // every claim call of every round
}

func claimCitus(ctx context.Context, o ClaimOptions, out io.Writer) error {
	if o.scratch == "" {
		o.scratch = fmt.Sprintf("pgsweep_bench_%d", os.Getpid())
	}
	single, err := o.DB.Pool(ctx, int32(o.Workers+2))
	if err != nil {
		return err
	}
	defer single.Close()
	cdb := scratch.DB{URL: o.Citus, Schema: o.DB.Schema}
	coord, err := cdb.Pool(ctx, int32(o.Workers+2))
	if err != nil {
		return fmt.Errorf("--citus: %w", err)
	}
	defer coord.Close()
	// Two servers: on one, both installs would share the cluster-wide roles
	// of --schema, and the second would replace the first.
	server := func(p *pgxpool.Pool) (string, error) {
		var id string
		err := p.QueryRow(ctx, "SELECT pg_catalog.current_setting('port'::pg_catalog.text) OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) pg_catalog.pg_postmaster_start_time()::pg_catalog.text").Scan(&id)
		return id, err
	}
	sid, err := server(single)
	if err != nil {
		return err
	}
	cid, err := server(coord)
	if err != nil {
		return fmt.Errorf("--citus: %w", err)
	}
	if sid == cid {
		return fmt.Errorf("%w: --citus and --database-url reach the same PostgreSQL server; the single node must be another server", ErrUsage)
	}
	sides := []*citusSide{{label: "citus", pool: coord}, {label: "single", pool: single}}
	for _, sd := range sides {
		sd.bench = &claimBench{scratch: o.scratch, pool: sd.pool, schema: o.DB.Schema, w: o.Workers, b: o.Batch, rescan: o.ClaimRescan, out: out}
		defer sd.bench.cleanup(context.WithoutCancel(ctx))
		// Refused, before anything is installed, when the schema exists and is not ours.
		if _, err := scratch.Reinstall(ctx, sd.pool, o.DB.Schema, claimCommand); err != nil {
			return fmt.Errorf("%s: %w", sd.label, err)
		}
	}
	queues, err := distributeForBench(ctx, coord, o.DB.Schema, fmt.Sprintf("bench_claim_%d", os.Getpid()))
	if err != nil {
		return fmt.Errorf("citus: %w", err)
	}
	k := len(queues)
	if o.Workers < k || o.Messages < k {
		return fmt.Errorf("%w: --citus with %d worker nodes needs --workers and --messages >= %d (one queue per node)", ErrUsage, k, k)
	}
	perQueue := o.Messages / k
	total := perQueue * k
	fmt.Fprintf(out, "bench claim --citus: pgsweep claim + complete, %d queues x %d messages, %d workers (worker i claims queue i mod %d), batch %d, claim_rescan %v (schema %s)\n",
		k, perQueue, o.Workers, k, o.Batch, o.ClaimRescan, o.DB.Schema)
	for _, q := range queues {
		fmt.Fprintf(out, "  queue %s: on Citus worker %s\n", q.name, q.node)
	}
	names := make([]string, k)
	for i, q := range queues {
		names[i] = q.name
	}
	for round := 1; round <= o.Rounds; round++ {
		for _, sd := range sides {
			d, lat, err := sd.bench.drainQueues(ctx, sd.label, names, perQueue)
			if err != nil {
				return fmt.Errorf("%s: %w", sd.label, err)
			}
			r := float64(total) / d.Seconds()
			sd.rates = append(sd.rates, r)
			sd.lat = append(sd.lat, lat...)
			p50, p99, _ := latencies(lat)
			fmt.Fprintf(out, "%-7s %8d msgs in %6.2fs = %8.0f msg/s, claim p50 %v p99 %v (round %d of %d)\n",
				sd.label, total, d.Seconds(), r, p50, p99, round, o.Rounds)
		}
	}
	fmt.Fprintf(out, "\nresults (rates: medians of %d rounds; claim latency: every claim call of every round):\n", o.Rounds)
	labels := map[string]string{
		"citus":  fmt.Sprintf("Citus coordinator, %d queues on %d worker nodes", k, k),
		"single": "single node",
	}
	for _, sd := range sides {
		p50, p99, mean := latencies(sd.lat)
		fmt.Fprintf(out, "  %-46s %8.0f msg/s  claim p50 %8v  p99 %8v  mean %8v  (%d calls)\n",
			labels[sd.label], median(sd.rates), p50, p99, mean, len(sd.lat))
	}
	rs := make([]float64, o.Rounds)
	for i := range rs {
		rs[i] = sides[0].rates[i] / sides[1].rates[i]
	}
	slices.Sort(rs)
	fmt.Fprintf(out, "  %-46s %8.2fx  [%.2f–%.2f, median %.2f]\n", "Citus / single node", median(sides[0].rates)/median(sides[1].rates),
		rs[0], rs[len(rs)-1], median(rs))
	return nil
}

// distributeForBench distributes the scratch install in schema on the Citus
// coordinator behind pool (its owner role, made by the install, may log in:
// Citus connects to the workers as the role that runs the statement) and
// returns one queue name per worker node, each hashed to a shard on that
// node (prefix_0, prefix_1, …, the first that lands on each node).
func distributeForBench(ctx context.Context, pool *pgxpool.Pool, schema, prefix string) ([]citusQueue, error) {
	// Only a role the scratch install created may be changed: an owner role
	// that existed before (another install's, in another database of the
	// cluster) is left alone.
	var ours bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{schema, "installed_role"}.Sanitize()+" WHERE role_name = $1)",
		schema+"_owner").Scan(&ours); err != nil {
		return nil, fmt.Errorf("who created %s_owner: %w", schema, err)
	}
	if !ours {
		return nil, fmt.Errorf("%w: role %s_owner existed before the scratch install, and --citus would let it log in; choose another --schema",
			ErrUsage, schema)
	}
	if _, err := pool.Exec(ctx, "ALTER ROLE "+pgx.Identifier{schema + "_owner"}.Sanitize()+" LOGIN"); err != nil {
		return nil, fmt.Errorf("let %s_owner log in: %w", schema, err)
	}
	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		return nil, err
	}
	if _, err := c.CitusDistribute(ctx); err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT nodename || ':' || nodeport FROM pg_dist_node
		WHERE noderole = 'primary' AND isactive AND shouldhaveshards AND groupid <> 0 ORDER BY nodename, nodeport`)
	if err != nil {
		return nil, fmt.Errorf("list the worker nodes: %w", err)
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the worker nodes: %w", err)
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("the coordinator has no worker node that holds shards (citus_add_node)")
	}
	message := pgx.Identifier{schema, "message"}.Sanitize()
	found := map[string]string{}
	for i := 0; i < 10000 && len(found) < len(nodes); i++ {
		name := fmt.Sprintf("%s_%d", prefix, i)
		var node string
		err := pool.QueryRow(ctx, `SELECT p.nodename || ':' || p.nodeport FROM pg_dist_shard_placement p
			WHERE p.shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)`, message, name).Scan(&node)
		if err != nil {
			return nil, fmt.Errorf("find the shard of queue %s: %w", name, err)
		}
		if _, ok := found[node]; !ok && slices.Contains(nodes, node) {
			found[node] = name
		}
	}
	if len(found) < len(nodes) {
		return nil, fmt.Errorf("no queue name of 10000 landed on %d of the %d worker nodes", len(nodes)-len(found), len(nodes))
	}
	qs := make([]citusQueue, 0, len(nodes))
	for _, n := range nodes {
		qs = append(qs, citusQueue{name: found[n], node: n})
	}
	return qs, nil
}

// drainQueues enqueues perQueue messages into each of queues and drains
// them with b.w workers, worker i claiming from queue i mod len(queues)
// (claim b.b, complete them). It returns the time of the drain and the
// latency of every claim call.
func (b *claimBench) drainQueues(ctx context.Context, name string, queues []string, perQueue int) (time.Duration, []time.Duration, error) {
	for _, q := range queues {
		b.queue, b.n = q, perQueue
		if _, err := b.enqueuePgsweep(ctx, name+" "+q); err != nil {
			return 0, nil, err
		}
	}
	b.n = perQueue * len(queues)
	lat := make([][]time.Duration, b.w)
	pid := os.Getpid()
	d, err := b.drain(ctx, name, func(ctx context.Context, conn *pgxpool.Conn, w int) (int, error) {
		c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: b.schema})
		if err != nil {
			return 0, err
		}
		q := queues[w%len(queues)]
		t0 := time.Now()
		cl, err := claim(ctx, c, q, fmt.Sprintf("bench-%d-%d", pid, w), b.b)
		lat[w] = append(lat[w], time.Since(t0))
		if err != nil || len(cl.ids) == 0 {
			return 0, err
		}
		done, err := cl.complete(ctx, c, q)
		if err == nil && len(done) != len(cl.ids) {
			err = fmt.Errorf("completed %d of %d claimed", len(done), len(cl.ids))
		}
		return len(cl.ids), err
	})
	return d, slices.Concat(lat...), err
}

// latencies returns the median, 99th percentile and mean of ds (zero when
// empty), rounded to 10µs.
func latencies(ds []time.Duration) (p50, p99, mean time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return r(s[len(s)/2]), r(s[(len(s)-1)*99/100]), r(sum / time.Duration(len(s)))
}
