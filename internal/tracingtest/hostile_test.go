package tracingtest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Messages sent from SQL (a DBA in psql) with headers written by hand:
// a valid traceparent is continued like one Send wrote; a malformed,
// oversized or invalid one is ignored -- the process span is a new root --
// and is never an error: every message is processed and completed.
func TestHandWrittenAndHostileHeaders(t *testing.T) {
	_, db, _ := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	const (
		tid = "4bf92f3577b34da6a3ce929d0e0e4736"
		sid = "00f067aa0ba902b7"
	)
	valid := "00-" + tid + "-" + sid + "-01"
	cases := []struct {
		name    string
		headers any  // the headers object, as JSON
		parent  bool // the process span's parent is tid/sid
	}{
		{"by hand in psql", map[string]string{"traceparent": valid, "tracestate": "vendor=x"}, true},
		{"not sampled", map[string]string{"traceparent": "00-" + tid + "-" + sid + "-00"}, true},
		{"garbage", map[string]string{"traceparent": "garbage"}, false},
		{"empty", map[string]string{"traceparent": ""}, false},
		{"zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-" + sid + "-01"}, false},
		{"zero span id", map[string]string{"traceparent": "00-" + tid + "-0000000000000000-01"}, false},
		{"version ff", map[string]string{"traceparent": "ff-" + tid + "-" + sid + "-01"}, false},
		{"upper case", map[string]string{"traceparent": "00-" + strings.ToUpper(tid) + "-" + sid + "-01"}, false},
		{"version 00 too long", map[string]string{"traceparent": valid + "-extra"}, false},
		// A later version may append fields; this one is valid but oversized.
		{"oversized", map[string]string{"traceparent": "01-" + tid + "-" + sid + "-01-" + strings.Repeat("a", 10000)}, false},
		{"not a string", map[string]any{"traceparent": 12}, false},
		{"an object", map[string]any{"traceparent": map[string]string{"a": "b"}}, false},
		{"control characters", map[string]string{"traceparent": "00-" + tid + "-" + sid + "-01\x01\n"}, false},
		{"oversized tracestate", map[string]string{"traceparent": valid, "tracestate": "v=" + strings.Repeat("x", 9000)}, true},
		{"malformed tracestate", map[string]string{"traceparent": valid, "tracestate": "=,=,,;;"}, true},
	}
	byID := map[string]int{}
	for i, tc := range cases {
		h, err := json.Marshal(tc.headers)
		if err != nil {
			t.Fatal(err)
		}
		id := db.Int(t, "SELECT "+db.Rel("send")+"('orders', '{}'::jsonb, $1::jsonb)", string(h))
		byID[itoa(id)] = i
	}
	r := newRecorder(t)
	runWorker(t, db, "orders", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		// what an application's handler does with the context: start spans from it
		_, s := r.Tracer("handler").Start(ctx, "work")
		s.End()
		return nil
	}, nil, 0)
	ps := r.wait(t, "process orders", len(cases))
	seen := map[int]sdktrace.ReadOnlySpan{}
	for _, p := range ps {
		v, _ := attr(p, semconv.MessagingMessageIDKey)
		seen[byID[v.AsString()]] = p
	}
	for i, tc := range cases {
		p, ok := seen[i]
		if !ok {
			t.Errorf("%s: no process span", tc.name)
			continue
		}
		switch {
		case tc.parent && (p.Parent().TraceID().String() != tid || p.Parent().SpanID().String() != sid || !p.Parent().IsRemote()):
			t.Errorf("%s: parent %s/%s, want the header's %s/%s", tc.name, p.Parent().TraceID(), p.Parent().SpanID(), tid, sid)
		case !tc.parent && p.Parent().IsValid():
			t.Errorf("%s: parent %s/%s, want a new root", tc.name, p.Parent().TraceID(), p.Parent().SpanID())
		}
		if v, _ := attr(p, "pgsweep.outcome"); v.AsString() != "complete" {
			t.Errorf("%s: outcome %q, want complete", tc.name, v.AsString())
		}
	}
	if got := r.ended("work"); len(got) != len(cases) {
		t.Errorf("%d handler spans, want %d", len(got), len(cases))
	}
	if n := db.Int(t, "SELECT count(*) FROM "+db.Rel("message")); n != 0 {
		t.Errorf("%d messages left, want every one completed", n)
	}
}
