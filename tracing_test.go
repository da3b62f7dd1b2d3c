package pgsweep_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
)

// ExtractTrace never fails or panics, whatever the headers hold, and reads
// a span context only from a traceparent of at most 256 characters.
func FuzzExtractTrace(f *testing.F) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, s := range []string{valid, "", "garbage", valid + "-x", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", 300),
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-" + strings.Repeat("z", 32) + "-00f067aa0ba902b7-01", "\xff\xfe"} {
		f.Add(s, "vendor=x")
		f.Add(s, strings.Repeat("k=v,", 5000))
	}
	f.Fuzz(func(t *testing.T, parent, state string) {
		h := map[string]string{pgsweep.TraceParentHeader: parent, pgsweep.TraceStateHeader: state}
		sc := trace.SpanContextFromContext(pgsweep.ExtractTrace(context.Background(), h))
		if sc.IsValid() && len(parent) > 256 {
			t.Errorf("a traceparent of %d characters was read", len(parent))
		}
		if sc.IsValid() != pgsweep.MessageSpanContext(h).IsValid() {
			t.Errorf("ExtractTrace and MessageSpanContext disagree on %q", parent)
		}
		if sc.IsValid() && (!sc.IsRemote() || sc.TraceState().Len() > 0 && len(state) > 8192) {
			t.Errorf("span context %v from %q, %d characters of tracestate", sc, parent, len(state))
		}
	})
}

// Without a traceparent, ExtractTrace returns ctx itself.
func TestExtractTraceWithoutHeader(t *testing.T) {
	ctx := context.WithValue(context.Background(), struct{}{}, 1)
	for _, h := range []map[string]string{nil, {}, {"other": "x"}} {
		if got := pgsweep.ExtractTrace(ctx, h); got != ctx {
			t.Errorf("headers %v: a new context", h)
		}
	}
}
