package bench

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// bench cleanup runs end to end on a small table, twice: the second run
// re-creates the scratch schema the first one created and marked.
func TestBenchCleanupSmall(t *testing.T) {
	db := scratchDB(t)
	bench := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, db.URL, bench) })
	for run := 1; run <= 2; run++ {
		var out bytes.Buffer
		err := runWorkload(context.Background(), []string{"cleanup", "--database-url", db.URL, "--schema", db.Schema,
			"--bench-schema", bench, "--rows", "3000", "--cleaners", "2", "--batch", "500", "--requeue", "20"}, &out)
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out.String())
		}
		for _, want := range []string{"single DELETE", "CAP collector loop", "pgsweep exclusive", "pgsweep parallel", "wrongly deleted"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("run %d: output lacks %q:\n%s", run, want, out.String())
			}
		}
	}
	var comment string
	conn := pgtest.Conn(t, db.URL)
	if err := conn.QueryRow(context.Background(), "SELECT obj_description($1::regnamespace, 'pg_namespace')", bench).Scan(&comment); err != nil ||
		comment != scratch.Marker("bench cleanup") {
		t.Fatalf("bench schema comment %q %v", comment, err)
	}
	var left int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = $1) + "+
		"(SELECT count(*) FROM pg_roles WHERE rolname = ANY ($2))", db.Schema, pgsweep.RoleNames(db.Schema)).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the scratch install %s or its roles left behind: %d %v", db.Schema, left, err)
	}
}

// bench cleanup --partitioned runs end to end on small partitions: the
// runner's concurrent detach (it fails the run unless every expired
// partition was dropped), the pass's plain DETACH, the row sweep and one
// DELETE, each draining exactly the expired rows.
func TestBenchCleanupPartitionedSmall(t *testing.T) {
	db := scratchDB(t)
	bench := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, db.URL, bench) })
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"cleanup", "--database-url", db.URL, "--schema", db.Schema,
		"--bench-schema", bench, "--partitioned", "--partitions", "4", "--partition-rows", "2000"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, name := range []string{"pgsweep runner: DETACH CONCURRENTLY", "pgsweep pass: plain DETACH", "pgsweep: sweep rows (status filter)", "one DELETE"} {
		var line string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, name) {
				line = l
			}
		}
		if f := strings.Fields(strings.TrimPrefix(line, name)); len(f) == 0 || f[0] != "4000" {
			t.Errorf("%s: line %q, want 4000 rows drained (2 expired partitions)\n%s", name, line, out.String())
		}
	}
}

// bench mixed runs end to end on a small backlog in a fresh scratch schema.
func TestBenchMixedSmall(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"mixed", "--database-url", url, "--schema", schema,
		"--rows", "2000", "--workers", "2", "--rate", "200", "--phase", "1s"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"without cleanup (before+after)", "while cleanup ran", "p99 during cleanup / p99 without", "rows deleted"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// bench ui, small: every page is served and measured (its statements
// recorded and explained), the snapshot timed; bad flags name the range.
func TestBenchUISmall(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"ui", "--database-url", url, "--schema", schema,
		"--queues", "3", "--lanes", "20", "--messages", "3000", "--runs", "2"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"snapshot (the stats part of one pass): ", "for 3 queues, 3000 messages",
		"/queues/q0000?state=dead&error=timeout", "/maintenance", "targets: every page under 50ms and 2000 buffers"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// every page row: a time, buffers read (> 0: each page reads something) and its statements
	rows := regexp.MustCompile(`(?m)^(/\S*)\s+([0-9.]+)\s+([0-9]+)\s+([0-9]+)\s+(ok|OVER)$`).FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 12 {
		t.Fatalf("%d page rows, want 12:\n%s", len(rows), out.String())
	}
	for _, r := range rows {
		if r[3] == "0" || r[4] == "0" {
			t.Errorf("page %s: %s buffers, %s statements; want some of each", r[1], r[3], r[4])
		}
	}
	err = runWorkload(context.Background(), []string{"ui", "--database-url", url, "--schema", schema, "--queues", "0"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--queues 1..10000") {
		t.Fatalf("--queues 0: %v", err)
	}
}
