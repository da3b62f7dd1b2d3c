package relay

import (
	"context"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
)

// The relay's spans (docs/tracing.md). Every publish of a claim's messages
// (one Relay.publish: all the lane rounds of a claim, or of a direct
// dispatch) is a producer span "publish <destination>", with a link to
// each message's creation context (its traceparent header). Its parent is
// the Worker's batch span ("process <queue>", which the Worker running the
// relay's claims starts for each claim) or, for a direct dispatch, none.
// The Worker also gives each claimed message its "process <queue>" span,
// whose parent is the message's creation context. The broker's messages
// carry the message's traceparent and tracestate headers as they were
// stored, so that a consumer on the broker continues the sender's trace,
// and a replay carries the same ones.
//
// Per message, the span costs nothing while it is not recording (tracing
// off): links and attributes are built only for a recording span.

// TracerName is the instrumentation scope of the relay's spans.
const TracerName = "github.com/pgsweep/pgsweep/relay"

// Describer is implemented by a Transport that names, for the relay's
// spans, its broker and where each message goes (both of pgsweep's do).
// Without it the publish span has no messaging.system and is named
// "publish".
type Describer interface {
	// MessagingSystem is the broker's messaging.system attribute: "nats",
	// "rabbitmq".
	MessagingSystem() string
	// Destination is where m is published, as the messaging.destination.name
	// attribute: a NATS subject, a RabbitMQ "exchange:routing_key" (the
	// routing key alone on the default exchange); "" when it has none.
	Destination(m *Message) string
}

// Attributes of the relay's own (no convention names them).
const (
	attrQueue        = attribute.Key("pgsweep.queue")               // the queue the messages were claimed from
	attrOwner        = attribute.Key("pgsweep.owner")               // the relay's owner label
	attrPath         = attribute.Key("pgsweep.relay.path")          // "claim" or "direct" (Dispatch)
	attrAttempt      = attribute.Key("pgsweep.message.attempt")     // a link's message's attempt, 1 on its first publish
	attrPublished    = attribute.Key("pgsweep.batch.published")     // messages the broker confirmed
	attrFailed       = attribute.Key("pgsweep.batch.failed")        // messages the broker did not confirm (failed, refused, not reached)
	attrNotPublished = attribute.Key("pgsweep.batch.not_published") // messages not published (a lane stopped, shutdown)
	attrOutcome      = attribute.Key("pgsweep.outcome")             // an error event's outcome: failed, permanent, unavailable
)

// The paths a message takes to a publish (attrPath).
const (
	pathClaim  = "claim"
	pathDirect = "direct"
)

// maxErrorEvents bounds the errors one publish span records (one per
// distinct text): a batch that fails whole fails for one reason.
const maxErrorEvents = 3

// producer is the publish span's start option (one slice, not one per span).
var producer = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}

// newTracer returns the relay's tracer from tp (pgsweep.Tracer).
func newTracer(tp trace.TracerProvider) trace.Tracer { return pgsweep.Tracer(tp, TracerName) }

// startPublish starts the span of a publish of hs; parent holds its parent
// span (the Worker's batch span; none for a direct dispatch).
func (r *Relay) startPublish(parent context.Context, hs []held, path string) trace.Span {
	_, span := r.tracer.Start(parent, "publish", producer...)
	if !span.IsRecording() {
		return span
	}
	var system string
	var desc Describer
	if d, ok := r.t.(Describer); ok {
		desc, system = d, d.MessagingSystem()
	}
	// one destination for the batch: the span's name and attribute;
	// several (a subject or routing key header): one per link
	dest, same := "", true
	if desc != nil {
		for i := range hs {
			d := desc.Destination(&hs[i].msg)
			if i == 0 {
				dest = d
			} else if d != dest {
				same = false
				break
			}
		}
	}
	attrs := make([]attribute.KeyValue, 0, 9)
	if system != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(system))
	}
	attrs = append(attrs, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("publish"),
		attrQueue.String(r.queue), attrOwner.String(r.o.Owner), attrPath.String(path))
	if same && dest != "" {
		span.SetName("publish " + dest)
		attrs = append(attrs, semconv.MessagingDestinationName(dest))
	}
	if len(hs) == 1 {
		attrs = append(attrs, semconv.MessagingMessageID(hs[0].msg.Identity()))
	} else {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(len(hs)))
	}
	span.SetAttributes(attrs...)
	for i := range hs {
		m := &hs[i].msg
		sc := pgsweep.MessageSpanContext(m.Headers)
		if !sc.IsValid() {
			continue
		}
		la := []attribute.KeyValue{semconv.MessagingMessageID(m.Identity()), attrAttempt.Int(m.Attempt)}
		if !same {
			if d := desc.Destination(m); d != "" {
				la = append(la, semconv.MessagingDestinationName(d))
			}
		}
		span.AddLink(trace.Link{SpanContext: sc, Attributes: la})
	}
	return span
}

// endPublish ends a publish's span with what became of its messages: the
// counts, and the errors of those the broker did not confirm.
func endPublish(span trace.Span, out []outcome, res []Result) {
	if span.IsRecording() {
		var published, failedN, notPublished int
		var first string
		var seen []string
		for i, o := range out {
			switch o {
			case accepted:
				published++
				continue
			case pending:
				notPublished++
				continue
			}
			failedN++
			text := res[i].Err.Error()
			if first == "" {
				first = text
			}
			if len(seen) < maxErrorEvents && !slices.Contains(seen, text) {
				seen = append(seen, text)
				span.RecordError(res[i].Err, trace.WithAttributes(attrOutcome.String(o.String())))
			}
		}
		span.SetAttributes(attrPublished.Int(published), attrFailed.Int(failedN), attrNotPublished.Int(notPublished))
		if failedN > 0 {
			span.SetStatus(codes.Error, strconv.Itoa(failedN)+" of "+strconv.Itoa(len(out))+" not confirmed: "+first)
		}
	}
	span.End()
}

// String names an outcome (the pgsweep.outcome of an error event).
func (o outcome) String() string {
	switch o {
	case accepted:
		return "published"
	case failed:
		return "failed"
	case permanent:
		return "permanent"
	case unavailable:
		return "unavailable"
	}
	return "not_published"
}
