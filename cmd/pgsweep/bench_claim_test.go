package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The claim benchmark runs end to end on a small queue, drains every
// contender completely (it fails otherwise) and prints every rate and ratio.
func TestBenchClaimSmall(t *testing.T) {
	db := pgtest.New(t, 2)
	var out bytes.Buffer
	err := runBench(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "2000", "--workers", "3", "--batch", "50"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"pop limit", "seed-003 claim CTE", "pgsweep claim + complete", "CompleteAndClaim",
		"Go Worker", "pgsweep / seed-003", "pgsweep / pop", "Worker / pgsweep"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	var left int
	if err := db.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pgsweep_bench_%'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schemas left behind: %d %v", left, err)
	}
}
