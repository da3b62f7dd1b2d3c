package pgsweep

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The Worker's spans (docs/tracing.md). Each message claimed gets a
// consumer span "process <queue>" from its claim to its settlement: its
// parent is the message's creation context (the traceparent header), so
// that a message's path from its send to its handler is one trace, and
// the handler's ctx carries it (spans the handler starts are its
// children). The conventions allow the creation context as the parent
// when one message is processed; a Worker processes each message on its
// own, and a link would split every message's path into two traces in
// most viewers. Its events: claim (the claim returned), then one
// of complete, fail, dead_letter, release (the database took the result)
// or lease_lost (or abandoned, when Run returns without a result). A
// handler's error is recorded on it.
//
// A BatchHandler's ctx carries one more span, "process <queue>" for the
// batch, with a link to each message's creation context and no parent
// (a batch has many).

// Attributes of pgsweep's own (no convention names them).
const (
	attrAttempt = attribute.Key("pgsweep.message.attempt")
	attrLane    = attribute.Key("pgsweep.message.lane")
	attrOwner   = attribute.Key("pgsweep.owner")
	attrOutcome = attribute.Key("pgsweep.outcome")
)

// startProcess starts the span of a claimed message with the options of
// its claim (claimOpts); its event "claim" is when the claim returned (now).
func (w *Worker) startProcess(ctx context.Context, d *Delivery, opts []trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := w.tracer.Start(ExtractTrace(ctx, d.Headers), w.processName, opts...)
	if span.IsRecording() {
		var buf [8]attribute.KeyValue
		attrs := append(append(buf[:0], w.processAttrs...),
			semconv.MessagingMessageID(strconv.FormatInt(d.ID, 10)), attrAttempt.Int(d.Attempt))
		if d.Lane != "" {
			attrs = append(attrs, attrLane.String(d.Lane))
		}
		span.SetAttributes(attrs...)
		span.AddEvent("claim")
	}
	return ctx, span
}

// claimOpts are the start options of the process spans of the messages of
// a claim sent at claimed (they start then): one slice for the claim.
func claimOpts(claimed time.Time) []trace.SpanStartOption {
	return []trace.SpanStartOption{consumerKind, trace.WithTimestamp(claimed)}
}

var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// processAttributes are the attributes every process span of a Worker on
// queue has.
func processAttributes(queue, owner string) []attribute.KeyValue {
	return append(messagingAttrs(queue, semconv.MessagingOperationTypeProcess, "process"), attrOwner.String(owner))
}

// startBatch starts the span a BatchHandler's ctx carries.
func (w *Worker) startBatch(ctx context.Context, js []*job) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, len(js))
	for _, j := range js {
		if sc := MessageSpanContext(j.d.Headers); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc,
				Attributes: []attribute.KeyValue{semconv.MessagingMessageID(strconv.FormatInt(j.d.ID, 10))}})
		}
	}
	ctx, span := w.tracer.Start(ctx, w.processName, trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...))
	if span.IsRecording() {
		span.SetAttributes(messagingAttrs(w.o.Queue, semconv.MessagingOperationTypeProcess, "process")...)
		span.SetAttributes(semconv.MessagingBatchMessageCount(len(js)), attrOwner.String(w.o.Owner))
	}
	return ctx, span
}

// handlerEnded records a handler's result on a span.
func handlerEnded(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// endProcess ends a message's span with the event of its end: a
// settlement, "lease_lost" or "refused".
func endProcess(span trace.Span, event string) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.AddEvent(event)
		span.SetAttributes(attrOutcome.String(event))
		if event == "lease_lost" || event == "refused" {
			span.SetStatus(codes.Error, event)
		}
	}
	span.End()
}

// endBatch ends a batch's span with the number of its messages that failed.
func endBatch(span trace.Span, errs []error) {
	if span.IsRecording() {
		failed := 0
		for _, err := range errs {
			if err != nil {
				failed++
			}
		}
		span.SetAttributes(attribute.Int("pgsweep.batch.failed", failed))
		if failed > 0 {
			span.SetStatus(codes.Error, strconv.Itoa(failed)+" of "+strconv.Itoa(len(errs))+" failed")
		}
	}
	span.End()
}

// noSpan is the span of a message claimed while the tracer is a no-op: a
// shared non-recording span (no allocation).
var noSpan = trace.SpanFromContext(context.Background())

// noopSpanOf reports whether span, the process span of a message with
// headers, came from a no-op tracer (no TracerProvider set): it records
// nothing and is its parent's context itself, where any SDK gives every
// span an id of its own (sampled or not). Then the other messages of the
// claim get no span of their own, only their creation context in their
// handler's ctx, as a no-op tracer would have given them, without its
// allocations.
func noopSpanOf(span trace.Span, headers map[string]string) bool {
	return !span.IsRecording() && span.SpanContext().Equal(MessageSpanContext(headers))
}
