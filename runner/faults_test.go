package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Faults: a pass whose connection dies, a long pass after an outage, the
// connection check that stops orphaned sessions. (The kill -9 of a real
// runner process is in cmd/pgsweep: TestRunBinaryKill9StopsItsBackend.)

// The connections of ConnectConfig ask for client_connection_check_interval:
// 1 s by default, another value by option, none with 0; a value set in the
// connection string wins.
func TestConnectionCheckIntervalIsSet(t *testing.T) {
	url := pgtest.URL(t)
	show := func(c Connector) string {
		t.Helper()
		conn, err := c(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var v string
		if err := conn.QueryRow(context.Background(), "SHOW client_connection_check_interval").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts []ConnectOption
		want string
	}{
		{nil, "1s"},
		{[]ConnectOption{WithConnectionCheckInterval(1500 * time.Millisecond)}, "1500ms"},
		{[]ConnectOption{WithConnectionCheckInterval(300 * time.Microsecond)}, "1ms"},
		{[]ConnectOption{WithConnectionCheckInterval(0)}, "0"},
	} {
		if got := show(ConnectConfig(cfg, "check-interval-test", tc.opts...)); got != tc.want {
			t.Errorf("client_connection_check_interval %q, want %q", got, tc.want)
		}
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	own, err := ConnectURL(url+sep+"client_connection_check_interval=250", "check-interval-test")
	if err != nil {
		t.Fatal(err)
	}
	if got := show(own); got != "250ms" {
		t.Errorf("client_connection_check_interval %q, want the connection string's 250ms", got)
	}
}

// fakeServer speaks just enough of the protocol to accept a connection; like
// PgBouncer it refuses client_connection_check_interval at startup. It
// returns its address and the startup parameters of every connection.
func fakeServer(t *testing.T) (string, func() []map[string]string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	var seen []map[string]string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				msg, err := be.ReceiveStartupMessage()
				if err != nil {
					return
				}
				sm, ok := msg.(*pgproto3.StartupMessage)
				if !ok {
					return
				}
				mu.Lock()
				seen = append(seen, sm.Parameters)
				mu.Unlock()
				if _, ok := sm.Parameters[ConnectionCheckParam]; ok {
					be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "08P01",
						Message: "unsupported startup parameter: " + ConnectionCheckParam})
					_ = be.Flush()
					return
				}
				be.Send(&pgproto3.AuthenticationOk{})
				be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
				_ = be.Flush()
				for {
					if _, err := be.Receive(); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() []map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]string(nil), seen...)
	}
}

// A pooler that refuses the parameter (PgBouncer without it in
// ignore_startup_parameters) costs one refused connection; the connector
// connects again without it and leaves it out from then on.
func TestConnectorRetriesWithoutARefusedCheckInterval(t *testing.T) {
	addr, seen := fakeServer(t)
	connect, err := ConnectURL(fmt.Sprintf("postgres://u@%s/db?sslmode=disable&connect_timeout=5", addr), "pooled")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		conn, err := connect(context.Background())
		if err != nil {
			t.Fatalf("connect through a pooler that refuses the parameter: %v", err)
		}
		_ = conn.Close(context.Background())
	}
	got := seen()
	if len(got) != 3 {
		t.Fatalf("%d connection attempts, want 3 (refused, retried, then without the parameter at once)", len(got))
	}
	for i, params := range got {
		_, has := params[ConnectionCheckParam]
		if has != (i == 0) || params["application_name"] != "pooled" {
			t.Fatalf("attempt %d sent %v", i, params)
		}
	}
}

// A runner whose pass's backend is terminated (57P01) cannot record the
// failure on that connection: it records it on a fresh one, so the pass and
// its run get a finish time and its leases are released at once instead of
// after their (here 10 minute) TTL.
func TestTerminatedPassIsRecordedOnAFreshConnection(t *testing.T) {
	db := pgtest.New(t, 3)
	pgtest.InstallStandIns(t, db.Pool, db.Schema, "victim", 30)
	s := db.Q()
	db.MustExec(t, "SELECT "+s+".setting_set('maintain_lease_ttl', '10 minutes')")
	r := newRunner(t, db, "victim", Options{})
	done := make(chan error, 1)
	go func() { _, _, err := r.RunOnce(context.Background()); done <- err }()
	pgtest.Eventually(t, 10*time.Second, nonZero(t, db, "the victim's recovery step to sleep", "SELECT count(*) FROM "+s+".maintain_run r JOIN pg_stat_activity a ON a.application_name = 'pgsweep run victim'"+
		" AND a.wait_event = 'PgSleep' WHERE r.owner = 'victim' AND r.status = 'running'"))
	r.mu.Lock()
	pid := r.passBackend.pid
	r.mu.Unlock()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int64(pid)).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminate the pass's backend %d: %v %v", pid, ok, err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "57P01") {
			t.Fatalf("pass returned %v, want the 57P01 error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pass did not return after its backend was terminated")
	}
	const lost = "the pass's connection was lost: terminating connection due to administrator command (SQLSTATE 57P01)"
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintenance_passes WHERE owner = 'victim' AND (finished_at IS NULL OR error <> $1)", lost); n != 0 {
		t.Fatalf("%d passes of the victim left unfinished or without the error", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintenance_runs WHERE owner = 'victim' AND (finished_at IS NULL OR status <> 'failed' OR error <> $1)", lost); n != 0 {
		t.Fatalf("%d runs of the victim left unfinished or not failed with the error", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".maintenance_runs WHERE owner = 'victim'"); n != 1 {
		t.Fatalf("%d runs of the victim, want its one recovery run", n)
	}
	if n := db.Int(t, "SELECT count(*) FROM "+s+".leases WHERE owner = 'victim'"); n != 0 {
		t.Fatal("the victim's lease was not released")
	}
	if h := r.Health(); h.Healthy || !strings.Contains(h.LastError, "57P01") || h.PassInFlight {
		t.Fatalf("health %+v, want unhealthy with the error", h)
	}
}

// After an outage a long first pass that makes progress is healthy although
// no pass succeeded since; once it stops making progress it is not.
func TestHealthyWhileALongPassMakesProgress(t *testing.T) {
	db := pgtest.New(t, 3)
	s := db.Q()
	db.MustExec(t, fmt.Sprintf(`
		CREATE TABLE %[1]s.gate (stuck boolean NOT NULL);
		INSERT INTO %[1]s.gate VALUES (false);
		GRANT SELECT ON %[1]s.gate TO %[2]s; -- the stand-in runs inside maintain_step, as the owner role
		CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT stuck FROM %[1]s.gate) THEN PERFORM pg_sleep(60); END IF;
			PERFORM pg_sleep(0.05);
			RETURN '{"recovered": 1, "more": true}';
		END $$;
		SELECT %[1]s.setting_set('recovery_interval', '0');`, s, pgx.Identifier{db.Schema + "_owner"}.Sanitize()))
	r := newRunner(t, db, "long", Options{Budget: 2 * time.Minute, HealthyWithin: 2 * time.Second})
	r.progressEvery = 50 * time.Millisecond
	reach := r.connect
	var outage atomic.Bool
	outage.Store(true)
	r.connect = func(ctx context.Context) (Conn, error) {
		if outage.Load() {
			return nil, errors.New("dial tcp: connection refused")
		}
		return reach(ctx)
	}
	if _, _, err := r.RunOnce(context.Background()); err == nil {
		t.Fatal("a pass during the outage succeeded")
	}
	outage.Store(false)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.signals.PartDone.Init()
	done := make(chan error, 1)
	go func() { _, _, err := r.RunOnce(ctx); done <- err }()
	var h Health
	poll := func(what string, cond func(Health) bool) func() error {
		return func() error {
			select {
			case err := <-done:
				t.Fatalf("the pass ended (%v) before %s", err, what)
			default:
			}
			if h = r.Health(); !cond(h) {
				return fmt.Errorf("%s: %+v", what, h)
			}
			return nil
		}
	}
	// Progress is what makes the pass healthy: each step the watcher sees
	// committed is a moment to look.
	healthy := poll("health during the progressing pass", func(h Health) bool { return h.Healthy })
	r.signals.PartDone.WaitUntil(t, "a healthy pass", func(progressMark) bool { return healthy() == nil })
	if !h.PassInFlight || h.LastProgress.IsZero() || !strings.Contains(h.LastError, "connection refused") || !h.LastSuccess.IsZero() {
		t.Fatalf("health %+v: want healthy by progress alone, the outage's error still shown", h)
	}
	db.MustExec(t, "UPDATE "+s+".gate SET stuck = true")
	// time under test: without progress, HealthyWithin passes
	pgtest.Eventually(t, 15*time.Second, poll("the stuck pass to turn unhealthy", func(h Health) bool { return !h.Healthy && h.PassInFlight }))
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled pass did not return")
	}
}

// With a mock connection: a FATAL error ends the pass without another word
// on its connection; the failure is recorded on a fresh one. When that
// cannot connect either, the next pass records it before its CALL.
func TestFatalErrorIsRecordedOnAFreshConnection(t *testing.T) {
	h := newHarness(t, Options{})
	const msg = "the pass's connection was lost: terminating connection due to administrator command (SQLSTATE 57P01)"
	h.mock.ExpectExec(`CALL "pgsweep"\.maintain`).WithArgs(owner, 30*time.Second).
		WillReturnError(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
	h.mock.ExpectClose() // the dead connection: nothing else is said on it
	h.mock.ExpectExec(`SELECT "pgsweep"\.maintain_fail_owner\(\$1, \$2\)`).WithArgs(owner, msg).
		WillReturnResult(pgconn.NewCommandTag("SELECT 1"))
	h.mock.ExpectClose() // the fresh connection
	if _, _, err := h.r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "57P01") {
		t.Fatalf("got %v", err)
	}
	if err := h.mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}

	// The database goes away with the connection: the record waits.
	h.mock.ExpectExec(`CALL "pgsweep"\.maintain`).WithArgs(owner, 30*time.Second).
		WillReturnError(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
	h.mock.ExpectClose()
	h.dial = []error{nil, errors.New("connection refused")}
	if _, _, err := h.r.RunOnce(context.Background()); err == nil {
		t.Fatal("want the error")
	}
	h.mock.ExpectExec(`SELECT "pgsweep"\.maintain_fail_owner\(\$1, \$2\)`).WithArgs(owner, msg).
		WillReturnResult(pgconn.NewCommandTag("SELECT 1"))
	h.expectPass(10*time.Second, 0, `{}`)
	if _, _, err := h.r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.r.pending != nil {
		t.Fatalf("still pending: %+v", h.r.pending)
	}
}

// The backend of an ended pass is recognised by pid and start time: after a
// restart of the server its pid may belong to another session, which must
// not be waited for, let alone terminated; nor is the recording session itself.
func TestRecordingSparesAReusedPid(t *testing.T) {
	db := pgtest.New(t, 2)
	r := newRunner(t, db, "reused", Options{})
	bystander := pgtest.Conn(t, db.URL)
	recorder := pgtest.Conn(t, db.URL)
	ctx := context.Background()
	r.pending = &pendingRecord{msg: "the pass's connection was lost: test", backends: []backend{
		{pid: bystander.PgConn().PID(), start: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{pid: recorder.PgConn().PID()},
	}}
	if err := r.recordPending(ctx, recorder); err != nil {
		t.Fatal(err)
	}
	if err := bystander.Ping(ctx); err != nil {
		t.Fatalf("a session that reused the pid was terminated: %v", err)
	}
	if r.pending != nil {
		t.Fatal("the record is still pending")
	}
}
