//go:build citus

package citustest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/bench"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// benchCitus runs `pgsweep bench claim --citus` (bench.Claim with
// ClaimOptions.Citus) from the single-node test database to the cluster's
// coordinator: messages and workers per queue, one queue per worker node.
// It checks that the scratch schema is gone from both databases afterwards.
func benchCitus(t *testing.T, messages, workers, batch, rounds int) string {
	t.Helper()
	c := Get(t)
	single := scratch.DB{URL: pgtest.URL(t), Schema: pgtest.SchemaName(t)}
	k := len(c.Workers)
	var out bytes.Buffer
	err := bench.Claim(context.Background(), bench.ClaimOptions{DB: single, Citus: c.URL, Messages: messages * k, Workers: workers * k,
		Batch: batch, Rounds: rounds, ClaimRescan: time.Second}, &out)
	if err != nil {
		t.Fatalf("bench claim --citus: %v\n%s", err, out.String())
	}
	for _, url := range []string{single.URL, c.URL} {
		if n := queryInt(t, pgtest.Conn(t, url), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", single.Schema); n != 0 {
			t.Errorf("the scratch schema %s is still in %s", single.Schema, url)
		}
	}
	return out.String()
}

// `pgsweep bench claim --citus` on a small load: it installs and distributes
// a scratch install, puts one queue on each worker, drains both databases
// completely (it fails otherwise), reports rates and claim latencies, and
// drops everything it made.
func TestCitusBenchClaimSmall(t *testing.T) {
	c := Get(t)
	out := benchCitus(t, 300, 2, 50, 1)
	for _, w := range c.Workers {
		if !strings.Contains(out, fmt.Sprintf("on Citus worker %s:%d", w.Host, w.Port)) {
			t.Errorf("no queue on %s (port %d):\n%s", w.Name, w.Port, out)
		}
	}
	for _, want := range []string{"(round 1 of 1)", "Citus coordinator, 2 queues on 2 worker nodes", "single node", "claim p50", "Citus / single node"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestCitusBenchClaim is the claim benchmark of docs/benchmarks.md, "Citus":
// `pgsweep bench claim --citus` with the sizes of the record. It measures;
// it asserts nothing about speed. It runs only with PGSWEEP_CITUS_BENCH=1
// (a benchmark, not a test):
//
//	PGSWEEP_CITUS_BENCH=1 make test-citus (or go test -tags citus -run 'TestCitusBenchClaim$' -v ./internal/citustest/)
//
// PGSWEEP_CITUS_BENCH_MESSAGES (per queue, default 20000), _WORKERS (per
// queue, default 4), _BATCH (default 100) and _ROUNDS (default 3) tune it.
func TestCitusBenchClaim(t *testing.T) {
	if os.Getenv("PGSWEEP_CITUS_BENCH") != "1" {
		t.Skip("the Citus claim benchmark runs only with PGSWEEP_CITUS_BENCH=1")
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv("PGSWEEP_CITUS_BENCH_" + name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	t.Log("\n" + benchCitus(t, env("MESSAGES", 20000), env("WORKERS", 4), env("BATCH", 100), env("ROUNDS", 3)))
}

// bench claim --citus lets only an owner role that its scratch install
// created log in: one that existed before (another install's, say) makes
// it stop with a usage error, the role unchanged.
func TestCitusBenchClaimLeavesOtherRoles(t *testing.T) {
	c := Get(t)
	single := scratch.DB{URL: pgtest.URL(t), Schema: pgtest.SchemaName(t)}
	owner := pgx.Identifier{single.Schema + "_owner"}.Sanitize()
	conn := pgtest.Conn(t, c.URL)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE ROLE "+owner+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pgtest.Conn(t, c.URL).Exec(context.Background(), "DROP ROLE IF EXISTS "+owner) })
	err := bench.Claim(ctx, bench.ClaimOptions{DB: single, Citus: c.URL, Messages: 100, Workers: 2, Batch: 10, Rounds: 1}, io.Discard)
	if !errors.Is(err, bench.ErrUsage) || !strings.Contains(err.Error(), "existed before the scratch install") {
		t.Fatalf("bench claim --citus with a foreign owner role: %v, want a usage error", err)
	}
	var login bool
	if err := conn.QueryRow(ctx, "SELECT rolcanlogin FROM pg_roles WHERE rolname = $1", single.Schema+"_owner").Scan(&login); err != nil || login {
		t.Fatalf("the foreign role: can log in %v (%v), want it left NOLOGIN", login, err)
	}
	if n := queryInt(t, conn, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", single.Schema); n != 0 {
		t.Errorf("the scratch schema %s is still on the coordinator", single.Schema)
	}
}
