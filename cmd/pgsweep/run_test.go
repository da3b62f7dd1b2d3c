package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestRunOnceStatusAndCron(t *testing.T) {
	db := pgtest.New(t, 2)
	conn := []string{"--database-url", db.URL, "--schema", db.Schema}

	out, errOut, code := runCLI(t, append([]string{"run", "--once", "--owner", "cli-once"}, conn...)...)
	if code != 0 || !strings.Contains(out, "by cli-once: recovery done, stats done, retention done") {
		t.Fatalf("run --once: code %d\n%s\n%s", code, out, errOut)
	}

	out, errOut, code = runCLI(t, append([]string{"status", "--json"}, conn...)...)
	if code != 0 {
		t.Fatalf("status --json: code %d: %s", code, errOut)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json is not JSON: %v\n%s", err, out)
	}
	if len(rep.Passes) != 1 || rep.Passes[0].Owner != "cli-once" || rep.Passes[0].Recovery != "done" {
		t.Fatalf("status passes %+v", rep.Passes)
	}
	if len(rep.Leases) != 4 || len(rep.Missing) != 0 { // maintain:recovery, maintain:schedules, maintain:stats, maintain:retention
		t.Fatalf("status leases %+v, missing %v", rep.Leases, rep.Missing)
	}
	out, _, code = runCLI(t, append([]string{"status"}, conn...)...)
	for _, want := range []string{"== queues", "== leases", "maintain:recovery", "== retention policies", "== recent maintenance passes", "cli-once"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status (code %d) lacks %q:\n%s", code, want, out)
		}
	}

	if _, err := db.Pool.Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS pg_cron"); err != nil {
		t.Fatalf("pg_cron must be installable in the test database: %v", err)
	}
	t.Cleanup(func() { runCLI(t, append([]string{"cron", "unschedule"}, conn...)...) })
	out, errOut, code = runCLI(t, append([]string{"cron", "schedule", "--schedule", "*/2 * * * *", "--budget", "15s"}, conn...)...)
	wantCmd := fmt.Sprintf("CALL %s.maintain('pg_cron', '15 seconds')", db.Schema)
	if code != 0 || !strings.Contains(out, wantCmd) {
		t.Fatalf("cron schedule: code %d\n%s\n%s", code, out, errOut)
	}
	_, errOut, code = runCLI(t, append([]string{"cron", "schedule", "--budget", "2h"}, conn...)...)
	if code != 1 || !strings.Contains(errOut, "p_budget must be between 1 second and 1 hour, got 2 hours") {
		t.Fatalf("cron schedule --budget 2h: code %d: %s", code, errOut)
	}
	out, _, code = runCLI(t, append([]string{"cron", "unschedule"}, conn...)...)
	if code != 0 || !strings.Contains(out, "unscheduled") {
		t.Fatalf("cron unschedule: code %d: %s", code, out)
	}
	_, _, code = runCLI(t, append([]string{"cron", "bogus"}, conn...)...)
	if code != 2 {
		t.Fatalf("cron bogus: code %d, want 2", code)
	}
	_, errOut, code = runCLI(t, "run", "--database-url", db.URL, "--log-format", "xml")
	if code != 2 || !strings.Contains(errOut, "--log-format") {
		t.Fatalf("bad --log-format: code %d: %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "run", "--database-url", db.URL, "--connection-check-interval", "-1s")
	if code != 2 || !strings.Contains(errOut, "--connection-check-interval must be between 0") {
		t.Fatalf("bad --connection-check-interval: code %d: %s", code, errOut)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// buildBinary builds pgsweep into the test's temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgsweep")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// kill -9 of the real binary in the middle of a step: PostgreSQL notices the
// dead client within about client_connection_check_interval (1 s by
// default), ends the orphaned session and rolls the step back. Without the
// check the backend would sleep on for 5 minutes and then commit its work.
func TestRunBinaryKill9StopsItsBackend(t *testing.T) {
	db := pgtest.New(t, 2)
	s := db.Q()
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.work (at timestamptz NOT NULL);
		-- the stand-in runs inside maintain_step, as the owner role
		GRANT INSERT ON %[1]s.work TO %[2]s;
		CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO %[1]s.work VALUES (clock_timestamp());
			PERFORM pg_sleep(300);
			RETURN '{"recovered": 1}';
		END $$;
		SELECT %[1]s.setting_set('maintain_lease_ttl', '10 minutes');`, s, pgx.Identifier{db.Schema + "_owner"}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	var logs pgtest.SyncBuffer
	cmd := exec.Command(bin, "run", "--schema", db.Schema, "--owner", "kill9-test", "--http-addr", "", "--log-format", "json")
	cmd.Env = append(os.Environ(), "PGSWEEP_DATABASE_URL="+db.URL)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		// a backend that outlived the test must not block the schema's drop
		_, _ = db.Pool.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'pgsweep run kill9-test'")
	})

	var pid int32
	pgtest.Eventually(t, 20*time.Second, func() error {
		err := db.Pool.QueryRow(ctx, "SELECT a.pid FROM pg_stat_activity a JOIN "+s+".maintain_run r ON r.owner = 'kill9-test' AND r.status = 'running'"+
			" WHERE a.application_name = 'pgsweep run kill9-test' AND a.wait_event = 'PgSleep'").Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if err != nil {
			return fmt.Errorf("the runner never got stuck in its step\n%s", logs.String())
		}
		return nil
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()

	pgtest.Eventually(t, 15*time.Second, func() error {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			return fmt.Errorf("the killed runner's backend %d still runs after the kill: client_connection_check_interval not in effect", pid)
		}
		return nil
	})
	t.Logf("the orphaned backend was gone %v after the kill", time.Since(killed).Round(10*time.Millisecond))
	var work, steps int64
	if err := db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+s+".work), (SELECT coalesce(sum(steps), 0) FROM "+s+
		".maintain_run WHERE owner = 'kill9-test')").Scan(&work, &steps); err != nil {
		t.Fatal(err)
	}
	if work != 0 || steps != 0 {
		t.Fatalf("%d rows of the step's work and %d steps committed: the orphaned step was not rolled back", work, steps)
	}
}

// The real binary: serves /healthz, /metrics (with the queue and health
// gauges) and, with --ui, the dashboard under /ui/; on SIGTERM in the
// middle of a pass it awaits the pass, releases its leases at once and
// exits 0.
func TestRunBinarySIGTERM(t *testing.T) {
	db := pgtest.New(t, 2)
	s := db.Q()
	ctx := context.Background()
	// recovery blocks for a minute once the test flips slow, so SIGTERM lands mid-pass
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.slow (on_ boolean NOT NULL);
		INSERT INTO %[1]s.slow VALUES (false);
		-- the stand-in runs inside maintain_step, as the owner role
		GRANT SELECT ON %[1]s.slow TO %[2]s;
		CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT on_ FROM %[1]s.slow) THEN PERFORM pg_sleep(60); END IF;
			RETURN '{"recovered": 0}';
		END $$;
		SELECT %[1]s.setting_set('recovery_interval', '0');
		SELECT %[1]s.setting_set('maintain_lease_ttl', '10 minutes');`, s, pgx.Identifier{db.Schema + "_owner"}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	addr := freeAddr(t)
	var logs pgtest.SyncBuffer
	cmd := exec.Command(bin, "run", "--schema", db.Schema, "--owner", "sigterm-test", "--http-addr", addr,
		"--interval", "100ms", "--log-format", "json", "--ui")
	cmd.Env = append(os.Environ(), "PGSWEEP_DATABASE_URL="+db.URL)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	pgtest.Eventually(t, 20*time.Second, func() error {
		code, body, err := get("http://" + addr + "/healthz")
		if err != nil || code != http.StatusOK || !strings.Contains(body, `"healthy":true`) {
			return fmt.Errorf("never healthy: %d %s %v\n%s", code, body, err, logs.String())
		}
		return nil
	})
	_, metrics, err := get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pgsweep_maintain_passes_total", "pgsweep_maintain_pass_duration_seconds_bucket",
		`pgsweep_maintain_leases_acquired_total{part="recovery"}`, "pgsweep_runner_last_success_timestamp_seconds", "process_resident_memory_bytes",
		`pgsweep_health_findings{kind="queue_behind"} 0`, `pgsweep_health_findings_by_severity{severity="critical"} `} {
		if !strings.Contains(metrics, name) {
			t.Fatalf("/metrics lacks %s:\n%s", name, metrics)
		}
	}
	if code, body, err := get("http://" + addr + "/ui/"); err != nil || code != http.StatusOK || !strings.Contains(body, "<title>Queues · pgsweep</title>") {
		t.Fatalf("GET /ui/: %d %v\n%s", code, err, body)
	}
	if code, body, err := get("http://" + addr + "/ui/maintenance"); err != nil || code != http.StatusOK || !strings.Contains(body, "sigterm-test") {
		t.Fatalf("GET /ui/maintenance: the runner's own passes: %d %v\n%s", code, err, body)
	}
	if rss, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(rss), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				t.Logf("pgsweep run resident memory: %s", strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
			}
		}
	}

	if _, err := db.Pool.Exec(ctx, "UPDATE "+s+".slow SET on_ = true"); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 20*time.Second, func() error {
		var n int
		// A running recovery run is not enough: it may be a pass that read
		// slow before the flip and is about to finish. Wait for the sleep.
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".maintain_run WHERE owner = 'sigterm-test' AND part = 'recovery' AND status = 'running'"+
			" AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgsweep run sigterm-test' AND wait_event = 'PgSleep')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return errors.New("the runner never got stuck in recovery")
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30s after SIGTERM\n%s", logs.String())
	}
	var live int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".leases WHERE owner = 'sigterm-test'").Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != 0 {
		t.Fatalf("%d leases still held after exit (their TTL is 10 minutes)\n%s", live, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"released leases"`) || !strings.Contains(logs.String(), "maintain:recovery") {
		t.Fatalf("release not logged:\n%s", logs.String())
	}
}

func TestStatusShowsQueuesAndRetentionPolicies(t *testing.T) {
	ctx, db, _ := pgtest.Start(t, 2)
	s := db.Q()
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		SELECT %[1]s.queue_create('orders');
		SELECT %[1]s.send('orders', '{"n": 1}');
		CREATE TABLE %[1]s.events (id bigint PRIMARY KEY, at timestamptz NOT NULL);
		CREATE INDEX ON %[1]s.events (at);
		SELECT %[1]s.retention_register('events', '%[1]s.events', 'at', '1 day');`, s)); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, "status", "--database-url", db.URL, "--schema", db.Schema)
	for _, want := range []string{"orders", "outbox", "events", "LAST_ROWS_DELETED", "exclusive"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("status (code %d) lacks %q:\n%s\n%s", code, want, out, errOut)
		}
	}
	if strings.Contains(out, "TIME_ZONE") {
		t.Fatalf("text status shows every retention column, want the known few:\n%s", out)
	}
	// findings first; a queue without a snapshot says so
	if h, q := strings.Index(out, "maintenance_not_running"), strings.Index(out, "orders"); h < 0 || q < h ||
		!strings.Contains(out, "no snapshot yet") {
		t.Fatalf("status: want the findings first, then orders without a snapshot:\n%s", out)
	}
	out, _, code = runCLI(t, "status", "--json", "--exact", "--database-url", db.URL, "--schema", db.Schema)
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Retention == nil ||
		len(rep.Retention.Rows) != 1 || len(rep.Queues) != 1 || !rep.Queues[0].TakenAt.IsZero() ||
		len(rep.Exact) != 1 || rep.Exact[0].Pending != 1 {
		t.Fatalf("status --json --exact (code %d, %v): %s", code, err, out)
	}
	// a pass takes the snapshot: status reads it (and the finding goes)
	if _, err := db.Pool.Exec(ctx, "CALL "+s+".maintain('status-test', '10 seconds')"); err != nil {
		t.Fatal(err)
	}
	out, _, code = runCLI(t, "status", "--json", "--database-url", db.URL, "--schema", db.Schema)
	rep = statusReport{}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Queues) != 1 || rep.Queues[0].Pending != 1 ||
		rep.Queues[0].TakenAt.IsZero() || rep.Exact != nil {
		t.Fatalf("status --json after a pass (code %d, %v): %s", code, err, out)
	}
	for _, f := range rep.Findings {
		if f.Kind == "maintenance_not_running" {
			t.Fatalf("after a pass: %+v", f)
		}
	}
}
