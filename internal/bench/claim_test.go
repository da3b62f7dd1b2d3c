package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// The claim benchmark runs end to end on a small queue, drains every
// contender completely (it fails otherwise) and prints every rate and ratio.
func TestBenchClaimSmall(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "2000", "--workers", "3", "--batch", "50"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"pop limit", "seed-003 claim CTE", "pgsweep claim + complete", "CompleteAndClaim",
		"Go Worker", "pgsweep / seed-003", "pgsweep / pop", "Worker / pgsweep", "worker: Go heap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var left int
	if err := pgtest.Conn(t, db.URL).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname IN ($1, $2)", fmt.Sprintf("pgsweep_bench_%d", os.Getpid()), db.Schema).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schemas left behind: %d %v", left, err)
	}
}

// --rounds interleaves the contenders and reports medians and the spread of
// the per-round ratios; out of range it is a usage error that names it.
func TestBenchClaimRounds(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "500", "--workers", "2", "--batch", "50", "--rounds", "2"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"(round 2 of 2)", "medians of 2 rounds", "pgsweep / pop (target >= 0.6, stretch 0.8)", "snapshots every 1s / none (target >= 0.95)", "median "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	err = runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema, "--rounds", "0"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--rounds 1..100") {
		t.Fatalf("--rounds 0: %v", err)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := median(xs); m != 2 || xs[0] != 3 {
		t.Fatalf("median %v of odd count, input now %v", m, xs)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median %v of even count", m)
	}
}

// --only takes a comma-separated list and runs just those contenders;
// --claim-rescan sets the bench queue's claim_rescan. Bad values are usage
// errors that name the flag and what it takes, before anything runs.
func TestBenchClaimOnlyAndRescan(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "500", "--workers", "2", "--batch", "50", "--only", "pgsweep,worker", "--claim-rescan", "0s"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"claim_rescan 0s", "pgsweep claim + complete", "Go Worker", "Worker / pgsweep"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, unwanted := range []string{"pop limit", "seed-003 claim CTE", "CompleteAndClaim"} {
		if strings.Contains(out.String(), unwanted) {
			t.Errorf("output has %q, which --only left out:\n%s", unwanted, out.String())
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"--only pop,bogus", `--only takes pop, seed003, pgsweep, stats, limited, pgsweep1rt and worker, comma-separated; got "bogus"`},
		{"--claim-rescan 2m", "--claim-rescan 0s..1m"},
		{"--stats-interval 500ms", "--stats-interval must be 1s..1m, got 500ms"},
		{"--stats-interval 2m", "--stats-interval must be 1s..1m, got 2m0s"},
	} {
		err := runWorkload(context.Background(), append([]string{"claim", "--database-url", db.URL}, strings.Fields(tc.args)...), &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// scratchDB is the test database and a fresh name for the scratch schema a
// workload installs pgsweep into (dropped when the test ends, should the
// workload fail to).
func scratchDB(t *testing.T) scratch.DB {
	t.Helper()
	db := scratch.DB{URL: pgtest.URL(t), Schema: pgtest.SchemaName(t)}
	t.Cleanup(func() { pgtest.DropSchema(t, db.URL, db.Schema) })
	return db
}

// runWorkload parses args[1:] with the flags the workload args[0] registers
// and runs it, as the CLI's `pgsweep bench` does.
func runWorkload(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var run func() error
	switch args[0] {
	case "claim":
		var o ClaimOptions
		o.RegisterFlags(fs)
		run = func() error { return Claim(ctx, o, out) }
	case "cleanup":
		var o CleanupOptions
		o.RegisterFlags(fs)
		run = func() error { return Cleanup(ctx, o, out) }
	case "mixed":
		var o MixedOptions
		o.RegisterFlags(fs)
		run = func() error { return Mixed(ctx, o, out) }
	case "relay":
		var o RelayOptions
		o.RegisterFlags(fs)
		run = func() error { return Relay(ctx, o, out) }
	case "ui":
		var o UIOptions
		o.RegisterFlags(fs)
		run = func() error { return UI(ctx, o, out) }
	default:
		return fmt.Errorf("unknown workload %q", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return run()
}

// --citus: excludes --only and --lanes, and refuses a coordinator that is
// the --database-url server itself (both installs would share the
// cluster-wide roles of --schema), before it installs anything. Against a
// real coordinator: internal/citustest, TestCitusBenchClaimSmall.
func TestBenchClaimCitusUsage(t *testing.T) {
	db := scratchDB(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--citus", db.URL, "--lanes", "10"}, "excludes --only, --lanes and --blocked"},
		{[]string{"--citus", db.URL, "--only", "pgsweep"}, "excludes --only, --lanes and --blocked"},
		{[]string{"--citus", db.URL, "--blocked", "10"}, "excludes --only, --lanes and --blocked"},
		{[]string{"--citus", db.URL}, "reach the same PostgreSQL server"},
	} {
		var out bytes.Buffer
		args := append([]string{"claim", "--database-url", db.URL, "--schema", db.Schema, "--messages", "100"}, tc.args...)
		err := runWorkload(context.Background(), args, &out)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
	var n int
	if err := pgtest.Conn(t, db.URL).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", db.Schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s was created: %d %v", db.Schema, n, err)
	}
}

// --lanes N drains the same messages in N ordered lanes, with the SQL API
// and with the Go Workers, and with --lanes 1 also one serial consumer; every
// contender drains its queue completely (the drain fails otherwise) and the
// ratios are printed.
func TestBenchClaimLanes(t *testing.T) {
	db := scratchDB(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--messages", "400", "--lanes", "20", "--only", "pgsweep,lanes,worker,laneworker"},
			[]string{"20 ordered lanes, 20 per lane", "pgsweep claim + complete, 20 ordered lanes", "pgsweep Go Worker, 20 ordered lanes",
				"20 lanes / unordered (target >= 0.5 at 1,000)", "Worker: 20 lanes / unordered", "laneworker: Go heap"}},
		{[]string{"--messages", "60", "--lanes", "1", "--only", "lanes,laneworker,serial"},
			[]string{"one serial consumer (1 worker, batch 1)", "1 lane / one serial consumer", "Worker: 1 lane / one serial consumer"}},
	} {
		var out bytes.Buffer
		args := append([]string{"claim", "--database-url", db.URL, "--schema", db.Schema, "--workers", "3", "--batch", "10"}, c.args...)
		if err := runWorkload(context.Background(), args, &out); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, out.String())
		}
		for _, want := range c.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", c.args, want, out.String())
			}
		}
	}
}

// --blocked N drains behind lane heads in flight, with N messages waiting
// behind them and with none, and times the claims of both; the heads stay
// in flight (the drains take only the unordered messages). Out of range,
// and heads or blocked without --blocked, are usage errors.
func TestBenchClaimBlocked(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "500", "--workers", "3", "--batch", "50", "--blocked", "300", "--blocked-heads", "30", "--only", "heads,blocked"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"30 lane heads in flight, 300 messages waiting behind them, 500 to drain",
		"30 lane heads in flight, 0 messages waiting", "claim + complete behind 30 lane heads", "the same, 300 messages waiting behind them",
		"blocked / heads: rate", "claim behind the heads (median of round means)", "claim: blocked / heads", "(target <= 2)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--blocked", "-1"}, "--blocked >= 0"},
		{[]string{"--blocked", "10", "--blocked-heads", "-1"}, "--blocked-heads 1..1000000"},
		{[]string{"--blocked", "10", "--blocked-heads", "1000001"}, "--blocked-heads 1..1000000"},
		{[]string{"--only", "blocked"}, "--only blocked needs --blocked N"},
	} {
		out.Reset()
		err := runWorkload(context.Background(), append([]string{"claim", "--database-url", db.URL, "--schema", db.Schema}, c.args...), &out)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error naming %q", c.args, err, c.want)
		}
	}
}
