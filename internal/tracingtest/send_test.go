package tracingtest

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// tracedClient is db's client with r as its tracer provider.
func tracedClient(t testing.TB, db *pgtest.DB, tp trace.TracerProvider) *pgsweep.Client {
	t.Helper()
	c, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// claimOne claims the only message due on queue and returns its headers.
func claimOne(t testing.TB, c *pgsweep.Client, queue string) pgsweep.Delivery {
	t.Helper()
	ds, err := c.Claim(context.Background(), queue, "test", 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %d deliveries, %v; want 1", len(ds), err)
	}
	return ds[0]
}

// traceparent is the W3C header of sc (sampled).
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

var payload = json.RawMessage(`{"n":1}`)

// The message sent in the application's transaction carries the context
// of Send's producer span, a child of the application's span; the span
// has the conventions' attributes and the message's id.
func TestSendInjectsCreationContext(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	c := tracedClient(t, db, r)

	actx, app := r.Tracer("app").Start(ctx, "app")
	tx, err := db.Pool.Begin(actx)
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]string{"k": "v"}
	id, ok, err := c.WithDB(tx).Send(actx, "orders", pgsweep.Message{Payload: payload, Headers: mine})
	if err != nil || !ok {
		t.Fatalf("send: %v %v", ok, err)
	}
	if err := tx.Commit(actx); err != nil {
		t.Fatal(err)
	}
	app.End()
	if !maps.Equal(mine, map[string]string{"k": "v"}) {
		t.Errorf("Send changed the caller's headers: %v", mine)
	}

	send := r.one(t, "send orders")
	if send.Parent().SpanID() != app.SpanContext().SpanID() || send.SpanContext().TraceID() != app.SpanContext().TraceID() {
		t.Errorf("send span's parent %v, want the app span %v", send.Parent(), app.SpanContext())
	}
	if send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span kind %v, want producer", send.SpanKind())
	}
	wantAttrs(t, send,
		semconv.MessagingSystemKey.String("pgsweep"),
		semconv.MessagingDestinationName("orders"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingMessageID(itoa(id)))

	d := claimOne(t, c, "orders")
	if got, want := d.Headers["traceparent"], traceparent(send.SpanContext()); got != want {
		t.Errorf("traceparent %q, want the send span's %q", got, want)
	}
	if d.Headers["k"] != "v" {
		t.Errorf("the message's own header was lost: %v", d.Headers)
	}
}

// A traceparent the sender set is kept as it is, and so is its tracestate.
func TestSendKeepsTheSendersTraceparent(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	c := tracedClient(t, db, r)
	own := map[string]string{
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"tracestate":  "congo=t61rcWkgMzE",
	}
	actx, app := r.Tracer("app").Start(ctx, "app")
	if _, _, err := c.Send(actx, "orders", pgsweep.Message{Payload: payload, Headers: own}); err != nil {
		t.Fatal(err)
	}
	app.End()
	d := claimOne(t, c, "orders")
	if !maps.Equal(d.Headers, own) {
		t.Errorf("headers %v, want the sender's %v", d.Headers, own)
	}
}

// SendBatch: one producer span for the batch (its message count), whose
// context every message carries unless it set its own.
func TestSendBatchOneSpan(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	c := tracedClient(t, db, r)
	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ms := []pgsweep.Message{
		{Payload: payload},
		{Payload: payload, Headers: map[string]string{"traceparent": own}},
		{Payload: payload, Headers: map[string]string{"k": "v"}, Priority: 5}, // send_batch_unique's path
	}
	actx, app := r.Tracer("app").Start(ctx, "app")
	ids, err := c.SendBatch(actx, "orders", ms)
	if err != nil {
		t.Fatal(err)
	}
	app.End()
	send := r.one(t, "send orders")
	if send.Parent().SpanID() != app.SpanContext().SpanID() {
		t.Errorf("batch span's parent %v, want the app span", send.Parent())
	}
	wantAttrs(t, send, semconv.MessagingBatchMessageCount(3), semconv.MessagingOperationTypeSend)
	if _, set := attr(send, semconv.MessagingMessageIDKey); set {
		t.Errorf("a batch span names one message id")
	}
	ds, err := c.Claim(ctx, "orders", "test", 10, time.Minute)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: %d, %v", len(ds), err)
	}
	want := map[int64]map[string]string{
		ids[0]: {"traceparent": traceparent(send.SpanContext())},
		ids[1]: {"traceparent": own},
		ids[2]: {"traceparent": traceparent(send.SpanContext()), "k": "v"},
	}
	for _, d := range ds {
		if !maps.Equal(d.Headers, want[d.ID]) {
			t.Errorf("message %d headers %v, want %v", d.ID, d.Headers, want[d.ID])
		}
	}
	if ms[0].Headers != nil || len(ms[2].Headers) != 1 {
		t.Errorf("SendBatch changed the caller's messages: %v, %v", ms[0].Headers, ms[2].Headers)
	}
}

// With tracing on and no span in ctx, the send span is a root and still
// gives the message its creation context; with tracing off and no span,
// nothing is added to the headers.
func TestSendWithoutParent(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	if _, _, err := tracedClient(t, db, r).Send(ctx, "orders", pgsweep.Message{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	send := r.one(t, "send orders")
	if send.Parent().IsValid() {
		t.Errorf("send span has a parent %v, want a root", send.Parent())
	}
	off := tracedClient(t, db, noop.NewTracerProvider())
	d := claimOne(t, off, "orders")
	if d.Headers["traceparent"] != traceparent(send.SpanContext()) {
		t.Errorf("traceparent %q, want the root send span's", d.Headers["traceparent"])
	}
	if _, _, err := off.Send(ctx, "orders", pgsweep.Message{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if d := claimOne(t, off, "orders"); d.Headers != nil {
		t.Errorf("tracing off, no span: headers %v, want none", d.Headers)
	}
}

// A failed send records its error on the span.
func TestSendErrorRecorded(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	_, _, err := tracedClient(t, db, r).Send(ctx, "nope", pgsweep.Message{Payload: payload})
	if err == nil {
		t.Fatal("send to an unknown queue succeeded")
	}
	send := r.one(t, "send nope")
	if send.Status().Code != codes.Error || len(send.Events()) != 1 || send.Events()[0].Name != "exception" {
		t.Errorf("span status %v, events %v; want the error recorded", send.Status(), eventNames(send))
	}
	wantAttrs(t, send, attribute.String("messaging.destination.name", "nope"))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
