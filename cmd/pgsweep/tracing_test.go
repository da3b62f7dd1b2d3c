package main

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay/relaytest"
	"github.com/pgsweep/pgsweep/runner"
)

// The CLI's trace export, end to end: `pgsweep run` and `pgsweep relay` run
// as child processes with the OTEL_* variables pointing at an OTLP/HTTP
// collector in the test, which decodes what arrives.

func TestReadExportSettings(t *testing.T) {
	const offUnset = "neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set"
	for _, c := range []struct {
		env     map[string]string
		want    exportSettings
		wantErr string
	}{
		{env: nil, want: exportSettings{reason: offUnset}},
		{env: map[string]string{envEndpoint: "http://collector:4318"},
			want: exportSettings{on: true, url: "http://collector:4318/v1/traces", from: envEndpoint}},
		{env: map[string]string{envEndpoint: "https://collector:4318/base/"},
			want: exportSettings{on: true, url: "https://collector:4318/base/v1/traces", from: envEndpoint}},
		{env: map[string]string{envTracesEndpoint: "http://collector:4318"},
			want: exportSettings{on: true, url: "http://collector:4318/", from: envTracesEndpoint}},
		{env: map[string]string{envEndpoint: "http://a:4318", envTracesEndpoint: "http://b:4318/custom"},
			want: exportSettings{on: true, url: "http://b:4318/custom", from: envTracesEndpoint}},
		{env: map[string]string{envEndpoint: "http://user:secret@collector:4318"},
			want: exportSettings{on: true, url: "http://user:xxxxx@collector:4318/v1/traces", from: envEndpoint}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envExporter: "none"},
			want: exportSettings{reason: "OTEL_TRACES_EXPORTER=none"}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envExporter: "otlp"},
			want: exportSettings{on: true, url: "http://collector:4318/v1/traces", from: envEndpoint}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envSDKDisabled: "true"},
			want: exportSettings{reason: "OTEL_SDK_DISABLED=true"}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envProtocol: "http/protobuf"},
			want: exportSettings{on: true, url: "http://collector:4318/v1/traces", from: envEndpoint}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envProtocol: "grpc", envTracesProtocol: "http/protobuf"},
			want: exportSettings{on: true, url: "http://collector:4318/v1/traces", from: envEndpoint}},
		{env: map[string]string{envEndpoint: "http://collector:4318", envSampler: "parentbased_traceidratio", envSamplerArg: "0.25"},
			want: exportSettings{on: true, url: "http://collector:4318/v1/traces", from: envEndpoint}},
		// a protocol or sampler nobody uses is not checked while the export is off
		{env: map[string]string{envProtocol: "grpc"}, want: exportSettings{reason: offUnset}},

		{env: map[string]string{envExporter: "zipkin"},
			wantErr: `OTEL_TRACES_EXPORTER="zipkin": pgsweep exports traces with otlp only (or none: no export)`},
		{env: map[string]string{envEndpoint: "collector:4318"},
			wantErr: `OTEL_EXPORTER_OTLP_ENDPOINT: want an http:// or https:// URL with a host (OTLP/HTTP), got "collector:4318"`},
		{env: map[string]string{envEndpoint: "http://a:4318", envTracesEndpoint: "grpc://b:4317"},
			wantErr: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: want an http:// or https:// URL with a host (OTLP/HTTP), got "grpc://b:4317"`},
		{env: map[string]string{envEndpoint: "http://collector:4318", envProtocol: "grpc"},
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": pgsweep exports OTLP over HTTP only: set it to http/protobuf, or unset it`},
		{env: map[string]string{envEndpoint: "http://collector:4318", envTracesProtocol: "http/json"},
			wantErr: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json": pgsweep exports OTLP over HTTP only: set it to http/protobuf, or unset it`},
		{env: map[string]string{envEndpoint: "http://collector:4318", envSampler: "sometimes"},
			wantErr: `OTEL_TRACES_SAMPLER="sometimes": want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio`},
		{env: map[string]string{envEndpoint: "http://collector:4318", envSampler: "traceidratio", envSamplerArg: "2"},
			wantErr: `OTEL_TRACES_SAMPLER_ARG="2": want a ratio between 0 and 1`},
	} {
		got, err := readExportSettings(func(k string) string { return c.env[k] })
		if c.wantErr != "" {
			if err == nil || err.Error() != c.wantErr {
				t.Errorf("%v: got %+v, %v; want the error %q", c.env, got, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v: got %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
}

// collector is an OTLP/HTTP trace receiver.
type collector struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*coltracepb.ExportTraceServiceRequest
	bad  []string // requests it could not take
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		defer c.mu.Unlock()
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				c.bad = append(c.bad, err.Error())
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			c.bad = append(c.bad, fmt.Sprintf("%s %s (%s): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		c.reqs = append(c.reqs, req)
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(c.Close)
	return c
}

// otlpSpan is one span received, with its resource's and scope's names.
type otlpSpan struct {
	name, service, version, scope string
	traceID, spanID, parentID     string
	attrs                         map[string]*commonpb.AnyValue
}

func (c *collector) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs)
}

// spans returns every span received; it fails t if a request was refused.
func (c *collector) spans(t *testing.T) []otlpSpan {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Fatalf("the collector refused requests: %v", c.bad)
	}
	var out []otlpSpan
	for _, req := range c.reqs {
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					sp := otlpSpan{name: s.Name, service: res["service.name"], version: res["service.version"], scope: ss.GetScope().GetName(),
						traceID: hex.EncodeToString(s.TraceId), spanID: hex.EncodeToString(s.SpanId), parentID: hex.EncodeToString(s.ParentSpanId),
						attrs: map[string]*commonpb.AnyValue{}}
					for _, kv := range s.Attributes {
						sp.attrs[kv.Key] = kv.Value
					}
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

// named returns the spans named name.
func named(spans []otlpSpan, name string) []otlpSpan {
	var out []otlpSpan
	for _, s := range spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// childEnv is the test's environment without any OTEL_* variable, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// startCLI runs `pgsweep args...` in a child process (this test binary, as
// TestRelayHelperProcess does) with env as its whole environment.
func startCLI(t *testing.T, env []string, args ...string) *relayProc {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayHelperProcess$")
	cmd.Env = append(env, helperEnv+"=1", helperArgs+"="+string(b))
	p := &relayProc{cmd: cmd, out: &pgtest.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgsweep %v: %v", args, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// expiredClaims sends 5 messages to a queue "jobs" and claims 3 of them
// with leases that have expired when it returns; recovery is due at once.
func expiredClaims(t *testing.T, db *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	db.MustExec(t, "SELECT "+db.Q()+".setting_set('recovery_interval', '0'); SELECT "+db.Q()+".queue_create('jobs', 'outbox', 5)")
	ms := make([]pgsweep.Message, 5)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: []byte(`{}`)}
	}
	if _, err := db.Client.SendBatch(ctx, "jobs", ms); err != nil {
		t.Fatal(err)
	}
	ds, err := db.Client.Claim(ctx, "jobs", "crashed-worker", 3, time.Second)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: %d %v", len(ds), err)
	}
	pgtest.Eventually(t, 10*time.Second, pgtest.Until("the leases to expire", func() bool {
		var expired bool
		err := db.Pool.QueryRow(ctx, "SELECT clock_timestamp() > $1", ds[0].LeaseExpiresAt).Scan(&expired)
		return err == nil && expired
	}))
}

// `pgsweep run --once` exports its pass's spans to the endpoint of
// OTEL_EXPORTER_OTLP_ENDPOINT before it exits: the batch processor's
// schedule (10 minutes here) never fires, the flush at exit sends them.
func TestRunOnceExportsSpans(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, 4)
	expiredClaims(t, db)
	col := newCollector(t)
	p := startCLI(t, childEnv("PGSWEEP_DATABASE_URL="+db.URL, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_BSP_SCHEDULE_DELAY=600000"),
		"run", "--once", "--schema", db.Schema, "--owner", "otlp-once", "--http-addr", "")
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("run --once: exit %d\n%s", code, p.out.String())
	}
	out := p.out.String()
	if !strings.Contains(out, "tracing export on") || !strings.Contains(out, "endpoint="+col.URL+"/v1/traces") ||
		!strings.Contains(out, "service=pgsweep-run") {
		t.Errorf("the log does not say where spans go:\n%s", out)
	}
	spans := col.spans(t)
	passes := named(spans, runner.SpanPass)
	if len(passes) != 1 {
		t.Fatalf("%d pass spans received, want 1 (spans: %d)\n%s", len(passes), len(spans), out)
	}
	pass := passes[0]
	if pass.service != "pgsweep-run" || pass.version != pgsweep.Version || pass.scope != pgsweep.TracerName {
		t.Errorf("pass span from service %q version %q scope %q, want pgsweep-run %s %s", pass.service, pass.version, pass.scope, pgsweep.Version, pgsweep.TracerName)
	}
	if v := pass.attrs["pgsweep.owner"].GetStringValue(); v != "otlp-once" {
		t.Errorf("pgsweep.owner = %q", v)
	}
	if v := pass.attrs["pgsweep.part.recovery"].GetStringValue(); v != "done" {
		t.Errorf("pgsweep.part.recovery = %q, want done", v)
	}
	rec := named(spans, "pgsweep.maintain.recovery")
	if len(rec) != 1 || rec[0].parentID != pass.spanID || rec[0].traceID != pass.traceID {
		t.Fatalf("recovery spans %+v: want one, a child of the pass span %s", rec, pass.spanID)
	}
	if n := rec[0].attrs["pgsweep.recovery.recovered"].GetIntValue(); n != 3 {
		t.Errorf("pgsweep.recovery.recovered = %d, want 3", n)
	}
	if n := rec[0].attrs["pgsweep.recovery.lost_leases"].GetIntValue(); n != 3 {
		t.Errorf("pgsweep.recovery.lost_leases = %d, want 3", n)
	}
	for _, s := range spans {
		if s.service != "pgsweep-run" || s.traceID != pass.traceID {
			t.Errorf("span %q: service %q trace %s, want pgsweep-run and the pass's trace", s.name, s.service, s.traceID)
		}
	}
}

// The runner's loop flushes its spans when SIGTERM stops it;
// OTEL_SERVICE_NAME names the service; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is used as it is.
func TestRunLoopFlushesSpansOnSIGTERM(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, 4)
	col := newCollector(t)
	p := startCLI(t, childEnv("PGSWEEP_DATABASE_URL="+db.URL, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="+col.URL+"/v1/traces",
		"OTEL_SERVICE_NAME=maintenance-eu", "OTEL_BSP_SCHEDULE_DELAY=600000"),
		"run", "--schema", db.Schema, "--owner", "otlp-loop", "--http-addr", "", "--interval", "50ms")
	// Three passes ended in the database: the first two had ended in the
	// runner too (and their spans with them) before the third began.
	pgtest.Eventually(t, 30*time.Second, pgtest.Until("three passes of the runner", func() bool {
		var n int
		err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("maintenance_passes")+
			" WHERE owner = 'otlp-loop' AND duration IS NOT NULL").Scan(&n)
		return err == nil && n >= 3
	}))
	if n := col.requests(); n != 0 {
		t.Fatalf("%d export requests before the stop: the batch schedule fired", n)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("run: exit %d after SIGTERM\n%s", code, p.out.String())
	}
	ids := map[int64]bool{}
	rows, err := db.Pool.Query(context.Background(), "SELECT id FROM "+db.Rel("maintenance_passes")+" WHERE owner = 'otlp-loop'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// The pass SIGTERM cancelled, if any, has a span without a pass id.
	seen := map[int64]bool{}
	for _, s := range named(col.spans(t), runner.SpanPass) {
		if s.service != "maintenance-eu" || s.version != pgsweep.Version {
			t.Errorf("pass span of service %q version %q, want maintenance-eu %s", s.service, s.version, pgsweep.Version)
		}
		if v, ok := s.attrs["pgsweep.pass.id"]; ok {
			if id := v.GetIntValue(); !ids[id] || seen[id] {
				t.Errorf("pass span of pass %d: not one of the runner's passes %v, or twice", id, ids)
			}
			seen[v.GetIntValue()] = true
		}
	}
	if len(seen) < 2 {
		t.Fatalf("%d spans of ended passes flushed at the stop, want at least the 2 that had ended\n%s", len(seen), p.out.String())
	}
}

// Tracing off: with no OTEL_* variable, or with the export disabled by
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true while an endpoint is
// set, nothing reaches the collector and the pass succeeds.
func TestRunWithoutTracingExportsNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, 4)
	col := newCollector(t)
	for i, c := range []struct {
		env    []string
		reason string
	}{
		{nil, "neither OTEL_EXPORTER_OTLP_ENDPOINT nor OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.URL, "OTEL_TRACES_EXPORTER=none"}, "OTEL_TRACES_EXPORTER=none"},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.URL, "OTEL_SDK_DISABLED=true"}, "OTEL_SDK_DISABLED=true"},
	} {
		p := startCLI(t, childEnv(append(c.env, "PGSWEEP_DATABASE_URL="+db.URL)...),
			"run", "--once", "--schema", db.Schema, "--owner", fmt.Sprintf("untraced-%d", i), "--http-addr", "")
		if code := p.wait(t, 60*time.Second); code != 0 {
			t.Fatalf("%v: exit %d\n%s", c.env, code, p.out.String())
		}
		if out := p.out.String(); !strings.Contains(out, `msg="tracing export off" reason="`+c.reason+`"`) {
			t.Errorf("%v: the log does not say the export is off (%s):\n%s", c.env, c.reason, out)
		}
	}
	if n := col.requests(); n != 0 {
		t.Fatalf("%d export requests with tracing off", n)
	}
}

// A value pgsweep cannot honour stops `pgsweep run` and `pgsweep relay`
// before they start: a usage error (exit 2) naming the variable.
func TestTracingBadVariablesAreUsageErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, 2)
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
			`OTEL_EXPORTER_OTLP_PROTOCOL="grpc": pgsweep exports OTLP over HTTP only: set it to http/protobuf, or unset it`},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318"},
			`OTEL_EXPORTER_OTLP_ENDPOINT: want an http:// or https:// URL with a host (OTLP/HTTP), got a value that is not a URL`},
	} {
		for _, args := range [][]string{
			{"run", "--once", "--schema", db.Schema, "--http-addr", ""},
			{"relay", "--schema", db.Schema, "--queue", "q", "--to", "nats://127.0.0.1:1?subject=s", "--http-addr", ""},
		} {
			p := startCLI(t, childEnv(append(c.env, "PGSWEEP_DATABASE_URL="+db.URL)...), args...)
			if code := p.wait(t, 30*time.Second); code != 2 || !strings.Contains(p.out.String(), "pgsweep "+args[0]+": usage: "+c.want) {
				t.Errorf("%s with %v: exit %d, want 2 and the error %q:\n%s", args[0], c.env, code, c.want, p.out.String())
			}
		}
	}
	var passes int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("maintenance_passes")).Scan(&passes); err != nil || passes != 0 {
		t.Fatalf("%d passes (%v): a refused configuration ran one", passes, err)
	}
}

// `pgsweep relay` sets up the export as `pgsweep run` does (service
// pgsweep-relay), publishes, and on SIGTERM flushes and exits 0.
func TestRelayTracingExport(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	const n = 20
	db, _ := relayDB(t, n)
	name := "T" + randSuffix()
	col := newCollector(t)
	p := startCLI(t, childEnv("PGSWEEP_DATABASE_URL="+db.URL, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL, "OTEL_BSP_SCHEDULE_DELAY=600000"),
		"relay", "--schema", db.Schema, "--queue", "q", "--to", base+"?subject=pgsweep.trace."+name+"&stream="+name, "--http-addr", "")
	t.Cleanup(func() {
		nc, err := natsgo.Connect(base)
		if err != nil {
			return
		}
		defer nc.Close()
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(context.Background(), name)
		}
	})
	pgtest.Eventually(t, 60*time.Second, queueEmpty(t, db, "q"))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("relay: exit %d after SIGTERM\n%s", code, p.out.String())
	}
	out := p.out.String()
	if !strings.Contains(out, "tracing export on") || !strings.Contains(out, "endpoint="+col.URL+"/v1/traces") ||
		!strings.Contains(out, "service=pgsweep-relay") {
		t.Errorf("the log does not say where spans go:\n%s", out)
	}
	// Every span the relay exported carries its service (the relay's own
	// spans: docs/tracing.md): its publish spans, and its Worker's process
	// spans (one per message, and one per batch).
	spans := col.spans(t)
	for _, s := range spans {
		if s.service != "pgsweep-relay" || s.version != pgsweep.Version {
			t.Errorf("span %q of service %q version %q, want pgsweep-relay %s", s.name, s.service, s.version, pgsweep.Version)
		}
	}
	if pub, proc := named(spans, "publish pgsweep.trace."+name), named(spans, "process q"); len(pub) == 0 || len(proc) < n+len(pub) {
		t.Errorf("%d publish spans and %d process spans exported for %d messages, want at least 1 and %d", len(pub), len(proc), n, n+len(pub))
	}
	if !strings.Contains(out, fmt.Sprintf("%d published", n)) {
		t.Errorf("the relay did not report %d published:\n%s", n, out)
	}
}
