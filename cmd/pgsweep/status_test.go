package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Intervals are written as PostgreSQL writes them (IntervalStyle postgres):
// the server's own text of each value is the expected output.
func TestFormatIntervalAsPostgreSQL(t *testing.T) {
	conn := pgtest.Conn(t, pgtest.URL(t))
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET IntervalStyle = postgres"); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT v, v::text FROM unnest(ARRAY[
		'1 minute', '0', '7 days', '1 day', '30 seconds', '1.5 seconds', '0.000001 seconds', '-0.5 seconds',
		'100 hours', '-1 day', '-1 day +02:03:04', '1 day -02:03:04', '1 mon', '2 mons', '1 year', '14 mons',
		'-14 mons', '-1 year -2 mons +3 days -04:05:06.789', '1 year 2 mons -3 days 04:05:06.5',
		'-3 mons 2 days', '3 mons -2 days', '36500 days', '-00:00:01.25', '1 year -00:00:01'
	]::interval[]) v`)
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		iv   pgtype.Interval
		want string
	}
	pairs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pair, error) {
		var p pair
		err := r.Scan(&p.iv, &p.want)
		return p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if got := formatInterval(p.iv); got != p.want {
			t.Errorf("formatInterval(%+v) = %q, PostgreSQL says %q", p.iv, got, p.want)
		}
		if got := formatValue(p.iv); got != p.want {
			t.Errorf("formatValue(%+v) = %q, want %q", p.iv, got, p.want)
		}
	}
	if got := formatValue(pgtype.Interval{}); got != "" {
		t.Errorf("NULL interval %q, want empty", got)
	}
}

// `pgsweep status` shows a retention policy's intervals (older_than,
// run_interval) as people write them in text (1m 30s), as PostgreSQL does
// in JSON (00:01:30); it once printed them as Go structs ({60000000 0 0 true}).
func TestStatusPrintsIntervals(t *testing.T) {
	db := pgtest.New(t, 2)
	s := pgx.Identifier{db.Schema}.Sanitize()
	if _, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`
		CREATE TABLE %[1]s.events (id bigint PRIMARY KEY, at timestamptz NOT NULL);
		CREATE INDEX ON %[1]s.events (at);
		SELECT %[1]s.retention_register('events', '%[1]s.events', 'at', '7 days', p_interval => '90 seconds');`, s)); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--database-url", db.URL, "--schema", db.Schema}
	out, errOut, code := runCLI(t, append([]string{"status"}, conn...)...)
	if code != 0 {
		t.Fatalf("status: code %d: %s", code, errOut)
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "events") {
			line = l
		}
	}
	if !strings.Contains(line, "1m 30s") || strings.Contains(out, "true}") {
		t.Fatalf("the policy's run_interval is not shown as 1m 30s:\n%s", out)
	}

	out, errOut, code = runCLI(t, append([]string{"status", "--json"}, conn...)...)
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Retention == nil || len(rep.Retention.Rows) != 1 {
		t.Fatalf("status --json (code %d, %v): %s %s", code, err, out, errOut)
	}
	got := map[string]string{}
	for i, c := range rep.Retention.Columns {
		got[c] = rep.Retention.Rows[0][i]
	}
	if got["older_than"] != "7 days" || got["run_interval"] != "00:01:30" {
		t.Fatalf("status --json: older_than %q, run_interval %q; want 7 days, 00:01:30\n%s", got["older_than"], got["run_interval"], out)
	}
	if strings.Contains(out, "true}") {
		t.Fatalf("status --json still prints a Go struct:\n%s", out)
	}
}
