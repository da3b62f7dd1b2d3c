package bench

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracing's cost (docs/benchmarks.md, "Tracing"): bench claim's Worker
// contenders and bench relay's burn-down and latency run once per
// --tracing mode, side by side in one run:
//
//	off:    no TracerProvider (the global one, a no-op: what an application
//	        that never set one runs);
//	memory: the OpenTelemetry SDK at 100% sampling (AlwaysSample), every
//	        span handed to an in-memory span processor that counts it (the
//	        SDK snapshots each ended span for it, as for an exporter); the
//	        messages are sent by a Client traced the same way, so they carry
//	        a traceparent that the Worker and the relay read and link to.

// The --tracing modes.
const (
	tracingOff    = "off"
	tracingMemory = "memory"
)

// tracingFlag registers --tracing on fs.
func tracingFlag(fs *flag.FlagSet, p *string, what string) {
	fs.StringVar(p, "tracing", tracingOff, what+" once per tracing mode, comma-separated, side by side: off (no TracerProvider: the global no-op) "+
		"and memory (the OpenTelemetry SDK, 100% sampled, spans counted in memory)")
}

// parseTracing splits a --tracing value into its modes, in order.
func parseTracing(s string) ([]string, error) {
	if s == "" {
		return []string{tracingOff}, nil
	}
	var modes []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m != tracingOff && m != tracingMemory {
			return nil, fmt.Errorf("%w: --tracing takes off and memory, comma-separated; got %q", ErrUsage, m)
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	return modes, nil
}

// tracer is the TracerProvider of one run in a tracing mode; Provider is
// nil for off (the components then use the global provider).
type tracer struct {
	Provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
	spans    *countingProcessor
}

// newTracer returns the provider of mode; Close releases it.
func newTracer(mode string) *tracer {
	if mode != tracingMemory {
		return &tracer{}
	}
	cp := &countingProcessor{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(cp))
	return &tracer{Provider: tp, sdk: tp, spans: cp}
}

// Spans is how many spans ended (0 for off).
func (t *tracer) Spans() int64 {
	if t.spans == nil {
		return 0
	}
	return t.spans.n.Load()
}

// Close shuts the SDK provider down.
func (t *tracer) Close() {
	if t.sdk != nil {
		_ = t.sdk.Shutdown(context.Background())
	}
}

// countingProcessor is the in-memory exporter of the memory mode: it
// counts the ended spans it is handed (each a snapshot the SDK made for
// it) and keeps none, so that a long run's memory stays flat.
type countingProcessor struct{ n atomic.Int64 }

func (p *countingProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *countingProcessor) OnEnd(sdktrace.ReadOnlySpan)                     { p.n.Add(1) }
func (p *countingProcessor) Shutdown(context.Context) error                  { return nil }
func (p *countingProcessor) ForceFlush(context.Context) error                { return nil }

// modeSuffix names a contender's variant: "" for off, "/memory" for memory.
func modeSuffix(mode string) string {
	if mode == tracingOff {
		return ""
	}
	return "/" + mode
}
