package tracingtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/runner"
)

// The runner's spans on a real PostgreSQL: a pass that recovers expired
// claims and deletes expired rows of a registered retention policy is one
// span with a child per part that ran (and per retention policy under the
// retention part), the counts exact; a part that fails, a pass that fails
// and a part another owner holds show as such; with tracing off the pass
// reads nothing more.

// statements is a runner.Connector whose connections log every statement.
type statements struct {
	mu  sync.Mutex
	sql []string
}

type loggedConn struct {
	*pgx.Conn
	log *statements
}

func (c loggedConn) note(sql string) {
	c.log.mu.Lock()
	c.log.sql = append(c.log.sql, sql)
	c.log.mu.Unlock()
}

func (c loggedConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.note(sql)
	return c.Conn.Exec(ctx, sql, args...)
}

func (c loggedConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.note(sql)
	return c.Conn.Query(ctx, sql, args...)
}

func (c loggedConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.note(sql)
	return c.Conn.QueryRow(ctx, sql, args...)
}

// mentioning counts the logged statements that contain s.
func (l *statements) mentioning(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, q := range l.sql {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

func newTracedRunner(t *testing.T, db *pgtest.DB, owner string, tp trace.TracerProvider) (*runner.Runner, *statements) {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	connect := runner.ConnectConfig(cfg, "pgsweep run "+owner)
	log := &statements{}
	r, err := runner.New(func(ctx context.Context) (runner.Conn, error) {
		c, err := connect(ctx)
		if err != nil {
			return nil, err
		}
		return loggedConn{Conn: c.(*pgx.Conn), log: log}, nil
	}, runner.Options{Schema: db.Schema, Owner: owner, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return r, log
}

// retentionSetup makes every part due at once, three claims of "jobs"
// whose lease expired, and a policy "cap" with 7 expired rows of 10.
func retentionSetup(t *testing.T, db *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	s := db.Q()
	db.MustExec(t, fmt.Sprintf(`
		SELECT %[1]s.setting_set('recovery_interval', '0');
		SELECT %[1]s.setting_set('retention_check_interval', '0');
		SELECT %[1]s.queue_create('jobs', 'outbox', 5);
		CREATE TABLE %[1]s.published ("Id" bigint PRIMARY KEY, "ExpiresAt" timestamp, "StatusName" text NOT NULL);
		INSERT INTO %[1]s.published
		SELECT g, CASE WHEN g <= 7 THEN localtimestamp - interval '2 days' ELSE NULL END,
		       CASE WHEN g <= 7 THEN 'Succeeded' ELSE 'Scheduled' END
		  FROM generate_series(1, 10) g;
		SELECT %[1]s.retention_register('cap', '%[1]s.published', 'ExpiresAt', '1 hour', 'StatusName',
		                                ARRAY['Succeeded', 'Failed'], 1000, 'parallel', '1 second');`, s))
	ms := make([]pgsweep.Message, 5)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: []byte(fmt.Sprintf(`{"n": %d}`, i))}
	}
	if _, err := db.Client.SendBatch(ctx, "jobs", ms); err != nil {
		t.Fatal(err)
	}
	ds, err := db.Client.Claim(ctx, "jobs", "crashed-worker", 3, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: %d %v", len(ds), err)
	}
	expiry := ds[0].LeaseExpiresAt
	pgtest.Eventually(t, 10*time.Second, pgtest.Until("the crashed worker's leases to expire", func() bool {
		var expired bool
		err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp() > $1", expiry).Scan(&expired)
		return err == nil && expired
	}))
}

// childrenOf returns the ended spans whose parent is p, by name.
func (r *recorder) childrenOf(p sdktrace.ReadOnlySpan) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range r.rec.Ended() {
		if s.Parent().SpanID() == p.SpanContext().SpanID() && s.Parent().TraceID() == p.SpanContext().TraceID() {
			out[s.Name()] = append(out[s.Name()], s)
		}
	}
	return out
}

// within fails t unless child lies within parent's span of time.
func within(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.StartTime().Before(parent.StartTime()) || child.EndTime().After(parent.EndTime()) {
		t.Errorf("span %q [%v, %v] is not within its parent %q [%v, %v]", child.Name(), child.StartTime(), child.EndTime(),
			parent.Name(), parent.StartTime(), parent.EndTime())
	}
}

func sortedNames(m map[string][]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestRunnerPassSpans(t *testing.T) {
	db := pgtest.New(t, 4)
	retentionSetup(t, db)
	rec := newRecorder(t)
	r, log := newTracedRunner(t, db, "traced", rec)

	ctx, parent := rec.Tracer("test").Start(context.Background(), "operator")
	p, _, err := r.RunOnce(ctx)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if p.Recovery.Recovered != 3 || p.Deleted["cap"] != 7 || p.Error != "" {
		t.Fatalf("pass %+v: want 3 recovered and 7 rows of cap deleted", p)
	}

	pass := rec.one(t, runner.SpanPass)
	if pass.Parent().SpanID() != parent.SpanContext().SpanID() || pass.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("the pass span's parent is %v, want the caller's span %v", pass.Parent(), parent.SpanContext())
	}
	if pass.SpanKind() != trace.SpanKindInternal || pass.Status().Code != codes.Unset {
		t.Errorf("pass span: kind %v, status %v", pass.SpanKind(), pass.Status())
	}
	wantAttrs(t, pass,
		attribute.String("pgsweep.owner", "traced"),
		attribute.String("pgsweep.schema", db.Schema),
		attribute.Int64("pgsweep.pass.id", p.ID),
		attribute.String("pgsweep.part.recovery", "done"),
		attribute.String("pgsweep.part.schedules", "done"),
		attribute.String("pgsweep.part.stats", "done"),
		attribute.String("pgsweep.part.retention", "done"))

	kids := rec.childrenOf(pass)
	want := []string{runner.SpanDetach, "pgsweep.maintain.recovery", "pgsweep.maintain.retention", "pgsweep.maintain.schedules", "pgsweep.maintain.stats"}
	if got := sortedNames(kids); !slices.Equal(got, want) {
		t.Fatalf("children of the pass span: %v, want %v", got, want)
	}
	for _, ss := range kids {
		if len(ss) != 1 {
			t.Fatalf("%d spans %q under one pass, want 1", len(ss), ss[0].Name())
		}
		within(t, ss[0], pass)
		if ss[0].Status().Code != codes.Unset {
			t.Errorf("span %q: status %v, want unset", ss[0].Name(), ss[0].Status())
		}
	}
	wantAttrs(t, kids["pgsweep.maintain.recovery"][0],
		attribute.String("pgsweep.part.status", "done"),
		attribute.Int64("pgsweep.recovery.recovered", 3),
		attribute.Int64("pgsweep.recovery.lost_leases", 3),
		attribute.Int64("pgsweep.recovery.dead_lettered", 0))
	wantAttrs(t, kids["pgsweep.maintain.schedules"][0],
		attribute.String("pgsweep.part.status", "done"),
		attribute.Int64("pgsweep.schedules.sent", 0))
	wantAttrs(t, kids["pgsweep.maintain.stats"][0],
		attribute.String("pgsweep.part.status", "done"),
		attribute.Int64("pgsweep.stats.queues", 1))
	ret := kids["pgsweep.maintain.retention"][0]
	wantAttrs(t, ret,
		attribute.String("pgsweep.part.status", "done"),
		attribute.Int64("pgsweep.retention.deleted", 7))
	wantAttrs(t, kids[runner.SpanDetach][0],
		attribute.Int("pgsweep.detach.claimed", 0),
		attribute.Int("pgsweep.detach.detached", 0))

	// Under retention, one span per policy it ran: "cap" and the built-in
	// policies of the install, each with its own rows.
	pols := rec.childrenOf(ret)[runner.SpanRetentionPolicy]
	var deleted int64
	var names []string
	for _, s := range pols {
		within(t, s, ret)
		name, _ := attr(s, "pgsweep.retention.policy")
		n, _ := attr(s, "pgsweep.retention.deleted")
		names = append(names, name.AsString())
		deleted += n.AsInt64()
		if name.AsString() == "cap" {
			wantAttrs(t, s, attribute.Int64("pgsweep.retention.deleted", 7), attribute.String("pgsweep.retention.mode", "parallel"))
			if o, _ := attr(s, "pgsweep.retention.outcome"); o.AsString() == "error" || s.Status().Code != codes.Unset {
				t.Errorf("policy cap: outcome %v, status %v", o.Emit(), s.Status())
			}
		}
	}
	t.Logf("policy spans: %v", names)
	if !slices.Contains(names, "cap") || deleted != 7 {
		t.Fatalf("policy spans %v deleted %d rows in all, want cap among them and 7", names, deleted)
	}
	var policies int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Q()+".retention_passes WHERE owner = 'traced'").Scan(&policies); err != nil {
		t.Fatal(err)
	}
	if len(pols) != policies {
		t.Fatalf("%d policy spans, want one per retention pass of the owner: %d", len(pols), policies)
	}
	if log.mentioning("maintenance_runs") != 1 {
		t.Fatalf("the traced pass read maintenance_runs %d times, want once", log.mentioning("maintenance_runs"))
	}
}

// A part that fails is an error on its span (and the pass's status); a
// pass whose CALL fails records the error on the pass span.
func TestRunnerFailedPartSpans(t *testing.T) {
	db := pgtest.New(t, 4)
	s := db.Q()
	db.MustExec(t, fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s._maintain_recovery(p_owner text, p_deadline timestamptz) RETURNS jsonb
		LANGUAGE plpgsql SET search_path FROM CURRENT AS $$ BEGIN RAISE EXCEPTION 'recovery exploded'; END $$`, s))
	rec := newRecorder(t)
	r, _ := newTracedRunner(t, db, "failing", rec)
	p, _, err := r.RunOnce(context.Background())
	if err != nil || p.Parts["recovery"] != "failed" {
		t.Fatalf("pass %+v, %v: want recovery failed", p, err)
	}
	const msg = "recovery exploded (SQLSTATE P0001)"
	pass := rec.one(t, runner.SpanPass)
	if pass.Parent().IsValid() {
		t.Errorf("a pass with no caller's span has parent %v, want a new trace", pass.Parent())
	}
	if pass.Status().Code != codes.Error || pass.Status().Description != "recovery: "+msg {
		t.Errorf("pass span status %v, want error %q", pass.Status(), "recovery: "+msg)
	}
	wantAttrs(t, pass, attribute.String("pgsweep.part.recovery", "failed"), attribute.String("pgsweep.part.retention", "done"))
	recov := rec.one(t, "pgsweep.maintain.recovery")
	if recov.Parent().SpanID() != pass.SpanContext().SpanID() {
		t.Fatal("the recovery span is not a child of the pass span")
	}
	wantAttrs(t, recov, attribute.String("pgsweep.part.status", "failed"))
	if recov.Status().Code != codes.Error || recov.Status().Description != msg {
		t.Errorf("recovery span status %v, want error %q", recov.Status(), msg)
	}
	if ev := eventNames(recov); !slices.Equal(ev, []string{"exception"}) {
		t.Errorf("recovery span events %v, want the recorded error", ev)
	}
	if v, _ := attr2(recov.Events()[0].Attributes, "exception.message"); v.AsString() != msg {
		t.Errorf("recorded error %q, want %q", v.AsString(), msg)
	}
	if st := rec.one(t, "pgsweep.maintain.retention").Status(); st.Code != codes.Unset {
		t.Errorf("retention span status %v: the recovery's error is not its own", st)
	}

	// The CALL itself fails: an error escaped a part that commits.
	db.MustExec(t, fmt.Sprintf(`CREATE OR REPLACE PROCEDURE %[1]s.maintain_step_retention(p_run bigint)
		LANGUAGE plpgsql AS $$ BEGIN COMMIT; RAISE EXCEPTION 'retention exploded'; END $$`, s))
	db.MustExec(t, "SELECT "+s+".setting_set('retention_check_interval', '0')")
	rec2 := newRecorder(t)
	r2, log := newTracedRunner(t, db, "failing-call", rec2)
	if _, _, err := r2.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), "retention exploded") {
		t.Fatalf("got %v, want the escaped retention error", err)
	}
	pass2 := rec2.one(t, runner.SpanPass)
	if pass2.Status().Code != codes.Error || !strings.Contains(pass2.Status().Description, "retention exploded") {
		t.Errorf("failed pass span status %v, want the error", pass2.Status())
	}
	if ev := eventNames(pass2); !slices.Equal(ev, []string{"exception"}) {
		t.Errorf("failed pass span events %v, want the recorded error", ev)
	}
	if kids := sortedNames(rec2.childrenOf(pass2)); !slices.Equal(kids, []string{runner.SpanDetach}) {
		t.Errorf("children of a failed pass: %v, want only the detach (the history is not read)", kids)
	}
	if n := log.mentioning("maintenance_runs"); n != 0 {
		t.Errorf("a failed pass read maintenance_runs %d times", n)
	}
}

// A part whose lease another owner holds has no span: the pass span says
// "busy".
func TestRunnerBusyPartSpans(t *testing.T) {
	db := pgtest.New(t, 4)
	db.MustExec(t, "SELECT "+db.Q()+"._lease_acquire('maintain:recovery', 'another-runner', '10 minutes', NULL)")
	db.MustExec(t, "SELECT "+db.Q()+".setting_set('recovery_interval', '0')")
	rec := newRecorder(t)
	r, _ := newTracedRunner(t, db, "traced", rec)
	p, _, err := r.RunOnce(context.Background())
	if err != nil || p.Parts["recovery"] != "busy" {
		t.Fatalf("pass %+v, %v: want recovery busy", p, err)
	}
	pass := rec.one(t, runner.SpanPass)
	wantAttrs(t, pass, attribute.String("pgsweep.part.recovery", "busy"))
	if pass.Status().Code != codes.Unset {
		t.Errorf("pass span status %v: a busy part is no error", pass.Status())
	}
	if ss := rec.ended("pgsweep.maintain.recovery"); len(ss) != 0 {
		t.Fatalf("%d recovery spans for a part that did not run", len(ss))
	}
	if kids := rec.childrenOf(pass); len(kids["pgsweep.maintain.retention"]) != 1 {
		t.Fatalf("children of the pass: %v, want retention among them", sortedNames(kids))
	}
}

// With tracing off (a provider that does not record, as the default global one) a pass
// reads no history for spans.
func TestRunnerUntracedReadsNothingMore(t *testing.T) {
	db := pgtest.New(t, 4)
	for _, tp := range []trace.TracerProvider{noop.NewTracerProvider()} {
		r, log := newTracedRunner(t, db, "untraced", tp)
		if _, _, err := r.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := log.mentioning("maintenance_runs") + log.mentioning("retention_passes"); n != 0 {
			t.Fatalf("provider %T: %d statements read the history for spans", tp, n)
		}
	}
}

// attr2 is attr over a list of attributes.
func attr2(kvs []attribute.KeyValue, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range kvs {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
