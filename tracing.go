package pgsweep

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (docs/tracing.md): a message carries the span context it was
// created in as W3C Trace Context headers (TraceParentHeader and
// TraceStateHeader), set by Send and SendBatch (or by hand, from psql);
// the relay passes them on to the broker unchanged and the Worker
// continues the trace from them. Spans follow the OpenTelemetry messaging
// semantic conventions; they go to the TracerProvider of ClientOptions or
// WorkerOptions, by default the global one (a no-op until the application
// sets one).

// The message headers that carry a message's creation context (W3C Trace
// Context, https://www.w3.org/TR/trace-context/).
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// TracerName is the instrumentation scope of pgsweep's spans.
const TracerName = "github.com/pgsweep/pgsweep"

// MessagingSystem is the messaging.system attribute of pgsweep's spans.
const MessagingSystem = "pgsweep"

// The longest traceparent and tracestate headers read: longer ones are
// ignored as if absent (a hostile or broken sender's header costs nothing
// to skip). A version-00 traceparent is 55 characters; W3C asks that at
// least 512 characters of tracestate be propagated.
const (
	maxTraceParent = 256
	maxTraceState  = 8192
)

// traceContext is the one propagator: W3C Trace Context, whatever the
// application's global propagator is, so that consumers in any language
// read what pgsweep writes.
var traceContext propagation.TraceContext

// traceCarrier is the propagation carrier over message headers. It reads
// oversized values as absent.
type traceCarrier map[string]string

func (h traceCarrier) Get(key string) string {
	v := h[key]
	switch {
	case key == TraceParentHeader && len(v) > maxTraceParent,
		key == TraceStateHeader && len(v) > maxTraceState:
		return ""
	}
	return v
}

func (h traceCarrier) Set(key, value string) { h[key] = value }

func (h traceCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// ExtractTrace returns ctx with the span context that a message's headers
// carry (its creation context) as the remote parent of the spans started
// from it. Headers without a traceparent, or with a malformed or oversized
// one, leave ctx as it is: the next span is a new root. It never fails.
// Use it where a message is read outside the Worker: after Client.Claim,
// or on a broker the relay published to (any W3C Trace Context library
// reads the same headers there).
func ExtractTrace(ctx context.Context, headers map[string]string) context.Context {
	if headers[TraceParentHeader] == "" {
		return ctx
	}
	return traceContext.Extract(ctx, traceCarrier(headers))
}

// MessageSpanContext returns the creation context a message's headers
// carry, or an invalid SpanContext (IsValid false) when they carry none
// that parses. For a span link.
func MessageSpanContext(headers map[string]string) trace.SpanContext {
	return trace.SpanContextFromContext(ExtractTrace(context.Background(), headers))
}

// injectTrace returns h with the traceparent and tracestate of ctx's span:
// a copy, h itself is never changed. h is returned as it is when ctx holds
// no valid span context or the sender set a traceparent of its own.
func injectTrace(ctx context.Context, h map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return h
	}
	if _, set := h[TraceParentHeader]; set {
		return h
	}
	out := make(map[string]string, len(h)+2)
	for k, v := range h {
		out[k] = v
	}
	traceContext.Inject(ctx, traceCarrier(out))
	return out
}

// Tracer returns the tracer of instrumentation scope from tp at pgsweep's
// version, or from the global provider when tp is nil (it follows a
// provider set later with otel.SetTracerProvider). The Client, the Worker,
// the relay and the runner take theirs from it.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(scope, trace.WithInstrumentationVersion(Version))
}

// newTracer returns pgsweep's tracer (scope TracerName) from tp.
func newTracer(tp trace.TracerProvider) trace.Tracer { return Tracer(tp, TracerName) }

// messagingAttrs are the attributes every span of an operation on queue
// has (OpenTelemetry messaging semantic conventions).
func messagingAttrs(queue string, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKey.String(MessagingSystem),
		semconv.MessagingDestinationName(queue),
		op,
		semconv.MessagingOperationName(name),
	}
}

// withTrace returns h with the headers of tc (a traceparent and maybe a
// tracestate): a copy; h as it is when it sets a traceparent of its own.
func withTrace(h, tc map[string]string) map[string]string {
	if _, set := h[TraceParentHeader]; set {
		return h
	}
	out := make(map[string]string, len(h)+len(tc))
	for k, v := range h {
		out[k] = v
	}
	for k, v := range tc {
		out[k] = v
	}
	return out
}

// startSend starts the producer span of a send of n messages to queue.
func (c *Client) startSend(ctx context.Context, queue string, n int) (context.Context, trace.Span) {
	ctx, span := c.tr().Start(ctx, "send "+queue, trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(queue, semconv.MessagingOperationTypeSend, "send")...)
		if n != 1 {
			span.SetAttributes(semconv.MessagingBatchMessageCount(n))
		}
	}
	return ctx, span
}

// endSend ends a send's span: the message's id (of a single send; 0: none
// or a batch), the error.
func endSend(span trace.Span, id int64, err error) {
	if span.IsRecording() {
		if id != 0 {
			span.SetAttributes(semconv.MessagingMessageID(strconv.FormatInt(id, 10)))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
