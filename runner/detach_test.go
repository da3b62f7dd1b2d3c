package runner

import (
	"context"
	"fmt"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A runner's pass removes the expired partitions of a partitioned policy
// with DETACH ... CONCURRENTLY before maintain() (history strategy
// detach_concurrently, the metric), and maintain()'s own pass sweeps the
// rest; with PlainDetach the pass's plain DETACH does it all.
func TestRunnerDetachesPartitionsConcurrently(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			db := pgtest.New(t, 4)
			s := db.Q()
			db.MustExec(t, fmt.Sprintf(`SELECT %[1]s.setting_set('retention_check_interval', '0');
				SELECT %[1]s.setting_set('retention_duty_cycle', '100');
				CREATE TABLE %[1]s.ev (at timestamptz NOT NULL) PARTITION BY RANGE (at);
				CREATE TABLE %[1]s.ev_old1 PARTITION OF %[1]s.ev FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
				CREATE TABLE %[1]s.ev_old2 PARTITION OF %[1]s.ev FOR VALUES FROM (now() - interval '9 days') TO (now() - interval '8 days');
				CREATE TABLE %[1]s.ev_cut PARTITION OF %[1]s.ev FOR VALUES FROM (now() - interval '8 days') TO (now() + interval '1 day');
				INSERT INTO %[1]s.ev SELECT now() - interval '10 days' + g * interval '1 minute' FROM generate_series(1, 60 * 24 * 10 - 1) g;
				ANALYZE %[1]s.ev_old1; ANALYZE %[1]s.ev_old2;
				SELECT %[1]s.retention_register('ev', '%[2]s.ev', 'at', '7 days')`, s, db.Schema))
			r := newRunner(t, db, "detach-runner", Options{PlainDetach: plain})
			if _, _, err := r.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := db.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s.ev WHERE at < now() - interval '7 days'`, s)); n != 0 {
				t.Errorf("%d expired rows left", n)
			}
			// rows g*1 minute after 10 days ago: those past 3 days are younger
			// than the cutoff (taken seconds after the insert)
			if n := db.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s.ev`, s)); n != 60*24*10-1-60*24*3 {
				t.Errorf("%d rows left, want the %d young ones", n, 60*24*10-1-60*24*3)
			}
			if n := db.Int(t, fmt.Sprintf(`SELECT count(*) FROM pg_partition_tree('%s.ev') WHERE isleaf`, s)); n != 1 {
				t.Errorf("%d leaves, want the one the cutoff cuts through", n)
			}
			conc := db.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s.retention_passes WHERE strategy = 'detach_concurrently' AND partitions_dropped = 1`, s))
			got := testutil.ToFloat64(r.metrics.detached.WithLabelValues("detached"))
			if plain && (conc != 0 || got != 0) {
				t.Errorf("PlainDetach: %d concurrent detaches recorded, metric %v; want none", conc, got)
			}
			if !plain && (conc != 2 || got != 2) {
				t.Errorf("%d concurrent detaches recorded, metric detached=%v; want 2", conc, got)
			}
			// Their rows are the catalog's estimate, exact after ANALYZE:
			// ev_old1 holds minutes 1 to 1439, ev_old2 the next 1440.
			if n := db.Int(t, fmt.Sprintf(`SELECT coalesce(sum(rows_deleted), 0) FROM %s.retention_passes WHERE strategy = 'detach_concurrently'`, s)); !plain && n != 1439+1440 {
				t.Errorf("the concurrent detaches counted %d rows, want %d", n, 1439+1440)
			}
			if n := db.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s.retention_passes WHERE strategy IS DISTINCT FROM 'detach_concurrently' AND outcome = 'drained'`, s)); n != 1 {
				t.Errorf("%d drained passes of the policy's own, want 1 (it sweeps the cut-through leaf)", n)
			}
			// The next pass drops the detached tables (both ways).
			if _, _, err := r.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := db.Int(t, `SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace AND relname LIKE 'pgsweep\_detached\_%'`, db.Schema); n != 0 {
				t.Errorf("%d detached tables left after the next pass", n)
			}
			if d := testutil.ToFloat64(r.metrics.detached.WithLabelValues("dropped")); !plain && d != 2 {
				t.Errorf("metric dropped=%v, want 2", d)
			}
			// The rows metric holds what the history says was deleted, the
			// concurrent detaches' rows included.
			hist := db.Int(t, fmt.Sprintf(`SELECT coalesce(sum(rows_deleted), 0) FROM %s.retention_passes WHERE policy = 'ev'`, s))
			if m := testutil.ToFloat64(r.metrics.rowsDeleted.WithLabelValues("ev")); hist == 0 || int64(m) != hist {
				t.Errorf("pgsweep_retention_rows_deleted_total{policy=ev} = %v, the history says %d", m, hist)
			}
		})
	}
}
