package tracingtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorder is a tracer provider that samples every span and keeps the
// ended ones in memory.
type recorder struct {
	*sdktrace.TracerProvider
	rec   *tracetest.SpanRecorder
	endCh chan struct{} // capacity 1: a span ended since the last look
}

func newRecorder(t testing.TB) *recorder {
	r := &recorder{rec: tracetest.NewSpanRecorder(), endCh: make(chan struct{}, 1)}
	r.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(r.rec), sdktrace.WithSpanProcessor(endSignal(r.endCh)))
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r
}

// endSignal is a span processor that signals each span's end.
type endSignal chan struct{}

func (endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endSignal) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case e <- struct{}{}:
	default:
	}
}
func (endSignal) Shutdown(context.Context) error   { return nil }
func (endSignal) ForceFlush(context.Context) error { return nil }

// wait returns once n spans named name have ended, or ends the test when
// that has not happened within a minute (a bound for a loaded machine,
// not a measurement).
func (r *recorder) wait(t testing.TB, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		if ss := r.ended(name); len(ss) >= n {
			return ss
		}
		select {
		case <-r.endCh:
		case <-timeout:
			t.Fatalf("%d spans named %q ended, want %d (ended: %v)", len(r.ended(name)), name, n, r.names())
		}
	}
}

// ended returns the ended spans named name.
func (r *recorder) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name, or ends the test.
func (r *recorder) one(t testing.TB, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	ss := r.ended(name)
	if len(ss) != 1 {
		t.Fatalf("%d ended spans named %q, want 1 (ended: %v)", len(ss), name, r.names())
	}
	return ss[0]
}

func (r *recorder) names() []string {
	var out []string
	for _, s := range r.rec.Ended() {
		out = append(out, s.Name())
	}
	return out
}

// attr returns the value of a span's attribute k, and whether it is set.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs fails t unless s has each attribute of want with its value.
func wantAttrs(t testing.TB, s sdktrace.ReadOnlySpan, want ...attribute.KeyValue) {
	t.Helper()
	for _, kv := range want {
		got, ok := attr(s, kv.Key)
		if !ok || got != kv.Value {
			t.Errorf("span %q: %s = %v (set: %v), want %v", s.Name(), kv.Key, got.Emit(), ok, kv.Value.Emit())
		}
	}
}

// eventNames returns the names of a span's events, in order.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// linked reports whether s links to the span of sc (a link's context is
// remote, read from headers: only the ids are compared).
func linked(s sdktrace.ReadOnlySpan, sc trace.SpanContext) bool {
	return slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool {
		return l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID()
	})
}
