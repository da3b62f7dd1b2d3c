package runner

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pashagolub/pgxmock/v3"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	dto "github.com/prometheus/client_model/go"
)

// These tests drive the loop with pgxmock connections and an injected sleep:
// every wait is handed to the test on a channel, so nothing here sleeps.

const owner = "test-owner"

type harness struct {
	t        *testing.T
	r        *Runner
	mock     pgxmock.PgxConnIface
	logs     *pgtest.SyncBuffer
	sleeps   chan time.Duration
	wake     chan struct{}
	mu       sync.Mutex
	dial     []error // errors returned by the next connects, in order; nil = the mock
	noGauges bool    // expectPass expects no gauge reads (GaugeInterval not yet elapsed)
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	mock, err := pgxmock.NewConn()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, mock: mock, logs: &pgtest.SyncBuffer{}, sleeps: make(chan time.Duration, 100), wake: make(chan struct{})}
	opts.Owner = owner
	if opts.GaugeInterval == 0 {
		opts.GaugeInterval = -1 // every pass reads them: each expectPass expects the reads
	}
	opts.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	connect := func(ctx context.Context) (Conn, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.dial) > 0 {
			err := h.dial[0]
			h.dial = h.dial[1:]
			if err != nil {
				return nil, err
			}
		}
		return mock, nil
	}
	r, err := New(connect, opts)
	if err != nil {
		t.Fatal(err)
	}
	r.rand = func() float64 { return 0.5 } // no jitter unless a test says otherwise
	r.sleep = func(ctx context.Context, d time.Duration) error {
		h.sleeps <- d
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.wake:
			return nil
		}
	}
	h.r = r
	t.Cleanup(func() {
		if err := mock.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// nextSleep waits for the loop to ask for its next sleep and returns it.
func (h *harness) nextSleep() time.Duration {
	h.t.Helper()
	select {
	case d := <-h.sleeps:
		return d
	case <-time.After(10 * time.Second):
		h.t.Fatal("the loop never asked to sleep")
		return 0
	}
}

func (h *harness) expectPass(interval, jitter time.Duration, counts string, status ...string) {
	rec, ret := "done", "done"
	if len(status) == 2 {
		rec, ret = status[0], status[1]
	}
	h.mock.ExpectExec(`CALL "pgsweep"\.maintain\(\$1, \$2\)`).WithArgs(owner, 30*time.Second).
		WillReturnResult(pgconn.NewCommandTag("CALL"))
	h.mock.ExpectQuery(`SELECT id, owner, started_at, duration, coalesce\(recovery, ''\), coalesce\(retention, ''\), counts, coalesce\(error, ''\), coalesce\(stats, ''\), coalesce\(schedules, ''\) FROM "pgsweep"\.maintenance_passes WHERE owner OPERATOR\(pg_catalog\.=\) \$1::pg_catalog\.text`).
		WithArgs(owner).
		WillReturnRows(pgxmock.NewRows([]string{"id", "owner", "started_at", "duration", "recovery", "retention", "counts", "error", "stats", "schedules"}).
			AddRow(int64(7), owner, time.Now(), (*time.Duration)(nil), rec, ret, []byte(counts), "", "done", "done"))
	h.mock.ExpectQuery(`SELECT "pgsweep"\.setting_interval\(n\) FROM pg_catalog\.unnest\(\$1::pg_catalog\.text\[\]\)`).
		WithArgs([]string{"runner_interval", "runner_jitter"}).
		WillReturnRows(pgxmock.NewRows([]string{"setting_interval"}).AddRow(interval).AddRow(jitter))
	if !h.noGauges {
		h.mock.ExpectQuery(`FROM "pgsweep"\.stats_latest\(\)`).WillReturnError(&pgconn.PgError{Code: "42883", Message: `function pgsweep.stats_latest() does not exist`})
		h.mock.ExpectQuery(`FROM "pgsweep"\.health\(\)`).WillReturnError(&pgconn.PgError{Code: "42883", Message: `function pgsweep.health() does not exist`})
	}
	h.mock.ExpectClose()
}

func (h *harness) expectRelease(names ...string) {
	rows := pgxmock.NewRows([]string{"lease_release_owner"})
	for _, n := range names {
		rows.AddRow(n)
	}
	h.mock.ExpectQuery(`SELECT "pgsweep"\.lease_release_owner\(\$1\)`).WithArgs(owner).WillReturnRows(rows)
	h.mock.ExpectClose()
}

func (h *harness) start() (context.CancelFunc, chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	return cancel, done
}

func wait(t *testing.T, done chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestBackoffGrowsCapsAndResetsOnSuccess(t *testing.T) {
	h := newHarness(t, Options{BackoffMin: time.Second, BackoffMax: 4 * time.Second})
	dialErr := errors.New("failed to connect to postgres://app:s3cret@db.internal:5432/app: connection refused")
	h.dial = []error{dialErr, dialErr, dialErr, dialErr, dialErr, nil, dialErr}
	h.expectPass(10*time.Second, 0, `{}`)
	h.expectRelease()
	cancel, done := h.start()

	var got []time.Duration
	for range 7 {
		got = append(got, h.nextSleep())
		if len(got) < 7 {
			h.wake <- struct{}{}
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second, 10 * time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sleeps %v, want %v (grow, cap at 4s, interval after success, reset)", got, want)
		}
	}
	cancel()
	wait(t, done)
	logs := h.logs.String()
	if strings.Contains(logs, "s3cret") {
		t.Fatalf("a password reached the log:\n%s", logs)
	}
	if !strings.Contains(logs, "consecutive_failures=5") || !strings.Contains(logs, "retry_in=4s") {
		t.Fatalf("log lines do not say how often it failed and when it retries:\n%s", logs)
	}
	if !strings.Contains(logs, "maintenance pass succeeded again") {
		t.Fatalf("recovery not logged:\n%s", logs)
	}
	if got := counterValue(t, h.r.metrics, "pgsweep_maintain_pass_errors_total", nil); got != 6 {
		t.Fatalf("pass errors = %v, want 6", got)
	}
}

// The gauges are read after a pass at most every GaugeInterval: the second
// pass, sooner, reads none (health() costs tens of milliseconds a call).
func TestGaugesReadAtMostEveryGaugeInterval(t *testing.T) {
	h := newHarness(t, Options{GaugeInterval: time.Hour})
	h.expectPass(10*time.Second, 0, `{}`)
	h.noGauges = true
	h.expectPass(10*time.Second, 0, `{}`)
	h.expectRelease()
	cancel, done := h.start()
	h.nextSleep()
	h.wake <- struct{}{}
	h.nextSleep()
	cancel()
	wait(t, done)
	if err := h.mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(h.logs.String(), "not refreshed") { // an unexpected read fails in the mock
		t.Fatalf("the second pass read the gauges:\n%s", h.logs.String())
	}
}

func TestIntervalAndJitterComeFromSettingsEachPass(t *testing.T) {
	h := newHarness(t, Options{})
	h.r.rand = func() float64 { return 1 } // the top of the jitter range
	h.expectPass(10*time.Second, 2*time.Second, `{}`)
	h.expectPass(3*time.Second, 5*time.Second, `{}`) // jitter is capped at the interval
	h.expectRelease()
	cancel, done := h.start()
	if d := h.nextSleep(); d != 12*time.Second {
		t.Fatalf("first sleep %v, want 10s + 2s jitter", d)
	}
	h.wake <- struct{}{}
	if d := h.nextSleep(); d != 6*time.Second {
		t.Fatalf("second sleep %v, want the changed 3s interval + jitter capped at 3s", d)
	}
	cancel()
	wait(t, done)
}

func TestFlagsOverrideSettings(t *testing.T) {
	h := newHarness(t, Options{Interval: time.Minute, Jitter: -1})
	h.r.rand = func() float64 { return 0 }
	h.expectPass(10*time.Second, 2*time.Second, `{}`)
	h.expectRelease()
	cancel, done := h.start()
	if d := h.nextSleep(); d != time.Minute {
		t.Fatalf("sleep %v, want the 1m override without jitter", d)
	}
	cancel()
	wait(t, done)
}

func TestStopReleasesLeasesAtOnce(t *testing.T) {
	h := newHarness(t, Options{})
	h.expectPass(10*time.Second, 0, `{}`)
	h.expectRelease("maintain:recovery")
	_, done := h.start()
	h.nextSleep()
	h.r.Stop() // returns only after Run has released the leases
	wait(t, done)
	if !strings.Contains(h.logs.String(), "released leases") {
		t.Fatalf("release not logged:\n%s", h.logs.String())
	}
}

// blockingConn lets a test hold CALL maintain in flight: the call returns
// only after its context is cancelled AND the test lets it finish, like a
// server that needs a moment to roll back the step it was cancelled in.
type blockingConn struct {
	Conn
	started chan struct{}
	finish  chan struct{}
}

func (b *blockingConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.HasPrefix(sql, "CALL ") {
		close(b.started)
		<-ctx.Done()
		<-b.finish
		return pgconn.CommandTag{}, &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	}
	return b.Conn.Exec(ctx, sql, args...)
}

func TestCancelMidPassAwaitsThePass(t *testing.T) {
	h := newHarness(t, Options{})
	bc := &blockingConn{Conn: h.mock, started: make(chan struct{}), finish: make(chan struct{})}
	calls := 0
	h.r.connect = func(ctx context.Context) (Conn, error) {
		calls++
		if calls == 1 {
			return bc, nil
		}
		return h.mock, nil
	}
	h.mock.ExpectClose() // the cancelled pass's connection
	// history closed and leases released together, by maintain_fail_owner
	h.mock.ExpectQuery(`SELECT name FROM "pgsweep"\.leases WHERE owner OPERATOR\(pg_catalog\.=\) \$1::pg_catalog\.text`).WithArgs(owner).
		WillReturnRows(pgxmock.NewRows([]string{"name"}).AddRow("maintain:retention"))
	h.mock.ExpectExec(`SELECT "pgsweep"\.maintain_fail_owner\(\$1, \$2\)`).
		WithArgs(owner, "the runner stopped during this pass").WillReturnResult(pgconn.NewCommandTag("SELECT 1"))
	h.mock.ExpectClose()
	cancel, done := h.start()
	<-bc.started
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while the pass was still in flight")
	case <-time.After(100 * time.Millisecond):
	}
	close(bc.finish)
	wait(t, done)
	if len(h.sleeps) != 0 {
		t.Fatal("a stopped runner went on to sleep")
	}
}

func TestSQLErrorIsRecordedAgainstTheOwner(t *testing.T) {
	h := newHarness(t, Options{})
	h.mock.ExpectExec(`CALL "pgsweep"\.maintain`).WithArgs(owner, 30*time.Second).
		WillReturnError(&pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "x"`})
	h.mock.ExpectExec(`SELECT "pgsweep"\.maintain_fail_owner\(\$1, \$2\)`).
		WithArgs(owner, `maintain raised: duplicate key value violates unique constraint "x" (SQLSTATE 23505)`).
		WillReturnResult(pgconn.NewCommandTag("SELECT 1"))
	h.mock.ExpectClose()
	h.expectRelease()
	cancel, done := h.start()
	if d := h.nextSleep(); d != time.Second {
		t.Fatalf("sleep %v, want the first backoff step", d)
	}
	if hl := h.r.Health(); hl.Healthy || !strings.Contains(hl.LastError, "duplicate key") {
		t.Fatalf("health %+v, want unhealthy with the error", hl)
	}
	cancel()
	wait(t, done)
}

func TestNotInstalledIsNotRecorded(t *testing.T) {
	h := newHarness(t, Options{})
	h.mock.ExpectExec(`CALL "pgsweep"\.maintain`).WithArgs(owner, 30*time.Second).
		WillReturnError(&pgconn.PgError{Code: "3F000", Message: `schema "pgsweep" does not exist`})
	h.mock.ExpectClose()
	if _, _, err := h.r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), `schema "pgsweep" does not exist`) {
		t.Fatalf("got %v", err)
	}
}

func TestPassCountsBecomeMetrics(t *testing.T) {
	h := newHarness(t, Options{})
	h.expectPass(10*time.Second, 0,
		`{"recovery": {"recovered": 5, "lost_leases": 4, "dead_lettered": 1}, "retention": {"deleted": {"cap_published": 1200, "cap_received": 3}}}`,
		"done", "lost")
	p, _, err := h.r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Recovery != (RecoveryCounts{Recovered: 5, LostLeases: 4, DeadLettered: 1}) || p.Deleted["cap_published"] != 1200 {
		t.Fatalf("pass %+v", p)
	}
	m := h.r.metrics
	for name, want := range map[string]float64{
		"pgsweep_recovery_rows_recovered_total": 5,
		"pgsweep_recovery_lost_leases_total":    4,
		"pgsweep_recovery_dead_lettered_total":  1,
		"pgsweep_maintain_passes_total":         1,
	} {
		if got := counterValue(t, m, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := counterValue(t, m, "pgsweep_retention_rows_deleted_total", map[string]string{"policy": "cap_published"}); got != 1200 {
		t.Errorf("deleted{cap_published} = %v", got)
	}
	if got := counterValue(t, m, "pgsweep_maintain_leases_acquired_total", map[string]string{"part": "retention"}); got != 1 {
		t.Errorf("leases acquired{retention} = %v", got)
	}
	if got := counterValue(t, m, "pgsweep_maintain_leases_lost_total", map[string]string{"part": "retention"}); got != 1 {
		t.Errorf("leases lost{retention} = %v", got)
	}
	if !strings.Contains(h.logs.String(), "queue metrics unavailable") {
		t.Errorf("missing queue_stats not warned about:\n%s", h.logs.String())
	}
	if !h.r.Health().Healthy {
		t.Error("unhealthy after a successful pass")
	}
}

// TestGaugesFromSnapshotsAndFindings: the queue gauges come from the
// latest snapshots (a queue without one has none), the health gauges count
// findings per kind and severity, every known one present (0 when absent).
func TestGaugesFromSnapshotsAndFindings(t *testing.T) {
	m := NewMetrics()
	at := time.Unix(1700000000, 0)
	m.setSnapshots([]pgsweep.QueueSnapshot{
		{Queue: "orders", Kind: "outbox", TakenAt: at, Pending: 10, Due: 7, InFlight: 2, Failed: 1, Dead: 3, OldestDueAge: 90 * time.Second},
		{Queue: "fresh", Kind: "inbox"}, // no snapshot yet
	})
	for state, want := range map[string]float64{"pending": 10, "due": 7, "processing": 2, "failed": 1, "dead": 3, "processed": 0} {
		if got := gaugeValue(t, m, "pgsweep_queue_depth", map[string]string{"queue": "orders", "kind": "outbox", "state": state}); got != want {
			t.Errorf("depth{orders,%s} = %v, want %v", state, got, want)
		}
	}
	if got := gaugeValue(t, m, "pgsweep_queue_oldest_pending_age_seconds", map[string]string{"queue": "orders"}); got != 90 {
		t.Errorf("oldest{orders} = %v", got)
	}
	if got := gaugeValue(t, m, "pgsweep_queue_snapshot_timestamp_seconds", map[string]string{"queue": "orders"}); got != 1700000000 {
		t.Errorf("snapshot time{orders} = %v", got)
	}
	if metricValue(t, m, "pgsweep_queue_depth", map[string]string{"queue": "fresh", "state": "pending"}) != nil {
		t.Error("a queue without a snapshot has depth gauges")
	}

	m.setFindings([]pgsweep.Finding{{Severity: "critical", Kind: "maintenance_not_running"},
		{Severity: "warning", Kind: "queue_behind"}, {Severity: "warning", Kind: "queue_behind"}})
	for kind, want := range map[string]float64{"maintenance_not_running": 1, "queue_behind": 2, "index_bloat": 0} {
		if got := gaugeValue(t, m, "pgsweep_health_findings", map[string]string{"kind": kind}); got != want {
			t.Errorf("findings{%s} = %v, want %v", kind, got, want)
		}
	}
	for sev, want := range map[string]float64{"critical": 1, "warning": 2, "info": 0} {
		if got := gaugeValue(t, m, "pgsweep_health_findings_by_severity", map[string]string{"severity": sev}); got != want {
			t.Errorf("by severity{%s} = %v, want %v", sev, got, want)
		}
	}
	m.setFindings(nil) // the problems went: every gauge back to 0
	if got := gaugeValue(t, m, "pgsweep_health_findings", map[string]string{"kind": "queue_behind"}); got != 0 {
		t.Errorf("findings{queue_behind} after they went = %v", got)
	}
}

func TestHealthGoesStale(t *testing.T) {
	h := newHarness(t, Options{HealthyWithin: time.Minute})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h.r.now = func() time.Time { return now }
	if h.r.Health().Healthy {
		t.Fatal("healthy before any pass")
	}
	h.expectPass(10*time.Second, 0, `{}`)
	if _, _, err := h.r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !h.r.Health().Healthy {
		t.Fatal("unhealthy right after a successful pass")
	}
	now = now.Add(61 * time.Second)
	if h.r.Health().Healthy {
		t.Fatal("still healthy a minute after the last success")
	}
}

// New checks what only Go knows (schema name, connector, interval); the
// owner and budget are maintain()'s arguments, checked by the SQL
// (TestRunStopsWhenMaintainRefusesItsArguments).
func TestNewValidates(t *testing.T) {
	c := func(context.Context) (Conn, error) { return nil, errors.New("x") }
	for _, o := range []Options{{Schema: "Bad"}, {Interval: -1}} {
		if _, err := New(c, o); err == nil {
			t.Errorf("New accepted %+v", o)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New accepted a nil connector")
	}
}

func metricValue(t *testing.T, m *Metrics, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, metric := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range metric.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return metric
		}
	}
	return nil
}

func counterValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	if mv := metricValue(t, m, name, labels); mv != nil {
		return mv.GetCounter().GetValue()
	}
	return 0
}

func gaugeValue(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	if mv := metricValue(t, m, name, labels); mv != nil {
		return mv.GetGauge().GetValue()
	}
	return -1
}

func TestConnectURLRedactsPasswords(t *testing.T) {
	_, err := ConnectURL("postgres://app:s3cret@db:notaport/app", "x")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("got %v, want an error without the password", err)
	}
	if _, err := ConnectURL("postgres://app@db/app", "x"); err != nil {
		t.Fatal(err)
	}
}

// mockClient is a Client on the mocked connection, schema pgsweep.
func mockClient(t *testing.T, db pgsweep.DBTX) *pgsweep.Client {
	t.Helper()
	c, err := pgsweep.NewClient(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
