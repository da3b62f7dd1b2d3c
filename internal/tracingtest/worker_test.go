package tracingtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// runWorker runs a Worker (h or bh) on db's queue with r as its tracer
// provider until the test ends.
func runWorker(t testing.TB, db *pgtest.DB, queue string, r *recorder, h pgsweep.Handler, bh pgsweep.BatchHandler, lease time.Duration) {
	t.Helper()
	o := pgsweep.WorkerOptions{Schema: db.Schema, Queue: queue, Owner: "w1", TracerProvider: r,
		Lease: lease, PollInterval: 50 * time.Millisecond, FlushInterval: time.Millisecond}
	var w *pgsweep.Worker
	var err error
	if h != nil {
		w, err = pgsweep.NewWorker(db.Pool, h, o)
	} else {
		w, err = pgsweep.NewBatchWorker(db.Pool, bh, o)
	}
	if err != nil {
		t.Fatal(err)
	}
	pgtest.RunUntilCleanup(t, w.Run)
}

// sendTraced sends one message under an application span "app" and
// returns the send span's context.
func sendTraced(t testing.TB, c *pgsweep.Client, r *recorder, queue string) trace.SpanContext {
	t.Helper()
	ctx, app := r.Tracer("app").Start(context.Background(), "app")
	defer app.End()
	if _, _, err := c.Send(ctx, queue, pgsweep.Message{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	ss := r.ended("send " + queue)
	return ss[len(ss)-1].SpanContext()
}

// childOf fails t unless s's parent is sc (one trace).
func childOf(t testing.TB, s sdktrace.ReadOnlySpan, sc trace.SpanContext) {
	t.Helper()
	if s.Parent().SpanID() != sc.SpanID() || s.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("span %q: parent %s/%s, want %s/%s", s.Name(), s.Parent().TraceID(), s.Parent().SpanID(), sc.TraceID(), sc.SpanID())
	}
}

// The Worker's process span continues the message's trace: its parent is
// the send span; the handler's ctx carries it; it has the conventions'
// attributes and the events of the message's path.
func TestWorkerProcessSpan(t *testing.T) {
	_, db, _ := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	c := tracedClient(t, db, r)
	send := sendTraced(t, c, r, "orders")
	id := itoa(db.Int(t, "SELECT max(id) FROM "+db.Rel("message")))

	runWorker(t, db, "orders", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		_, s := r.Tracer("handler").Start(ctx, "charge card")
		s.End()
		return nil
	}, nil, 0)
	p := r.wait(t, "process orders", 1)[0]
	childOf(t, p, send)
	if p.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process span kind %v, want consumer", p.SpanKind())
	}
	wantAttrs(t, p,
		semconv.MessagingSystemKey.String("pgsweep"),
		semconv.MessagingDestinationName("orders"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingMessageID(id),
		attribute.Int("pgsweep.message.attempt", 1),
		attribute.String("pgsweep.owner", "w1"),
		attribute.String("pgsweep.outcome", "complete"))
	if got := eventNames(p); !slices.Equal(got, []string{"claim", "complete"}) {
		t.Errorf("process span events %v, want claim, complete", got)
	}
	if p.Status().Code != codes.Unset {
		t.Errorf("process span status %v", p.Status())
	}
	childOf(t, r.one(t, "charge card"), p.SpanContext())
}

// A handler's error is recorded on the span, the failure is its event, and
// the retry is a second process span in the same trace with attempt 2.
func TestWorkerFailureAndRetry(t *testing.T) {
	_, db, _ := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	send := sendTraced(t, tracedClient(t, db, r), r, "orders")
	var mu sync.Mutex
	calls := 0
	runWorker(t, db, "orders", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return pgsweep.RetryAfter(errors.New("card declined"), 0)
		}
		return nil
	}, nil, 0)
	ps := r.wait(t, "process orders", 2)
	first, second := ps[0], ps[1]
	for i, p := range ps {
		childOf(t, p, send)
		wantAttrs(t, p, attribute.Int("pgsweep.message.attempt", i+1))
	}
	if got := eventNames(first); !slices.Equal(got, []string{"claim", "exception", "fail"}) {
		t.Errorf("failed attempt's events %v", got)
	}
	if first.Status().Code != codes.Error || first.Status().Description != "card declined" {
		t.Errorf("failed attempt's status %v, want the handler's error", first.Status())
	}
	wantAttrs(t, first, attribute.String("pgsweep.outcome", "fail"))
	wantAttrs(t, second, attribute.String("pgsweep.outcome", "complete"))
}

// A lease lost while the handler runs ends the span with lease_lost (an
// error): here another owner took the message over after its lease was
// made to expire.
func TestWorkerLeaseLost(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	send := sendTraced(t, tracedClient(t, db, r), r, "orders")
	started := make(chan struct{})
	runWorker(t, db, "orders", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		close(started)
		<-ctx.Done() // cancelled when the lease is lost
		return ctx.Err()
	}, nil, 3*time.Second)
	<-started
	db.MustExec(t, "UPDATE "+db.Rel("message")+" SET visible_at = now() - interval '1 second'")
	if ds, err := c.Claim(ctx, "orders", "thief", 1, time.Minute); err != nil || len(ds) != 1 {
		t.Fatalf("thief's claim: %d, %v", len(ds), err)
	}
	p := r.wait(t, "process orders", 1)[0]
	childOf(t, p, send)
	if got := eventNames(p); !slices.Equal(got, []string{"claim", "lease_lost"}) {
		t.Errorf("events %v, want claim, lease_lost", got)
	}
	if p.Status().Code != codes.Error || p.Status().Description != "lease_lost" {
		t.Errorf("status %v, want lease_lost", p.Status())
	}
}

// A BatchHandler's ctx carries one span for the batch that links to each
// message's creation context; each message still has its process span.
func TestBatchWorkerSpan(t *testing.T) {
	_, db, _ := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	r := newRecorder(t)
	c := tracedClient(t, db, r)
	sends := []trace.SpanContext{sendTraced(t, c, r, "orders"), sendTraced(t, c, r, "orders")}
	var mu sync.Mutex
	var batchCtx []trace.SpanContext
	runWorker(t, db, "orders", r, nil, func(ctx context.Context, ds []*pgsweep.Delivery) []error {
		mu.Lock()
		batchCtx = append(batchCtx, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return make([]error, len(ds))
	}, 0)
	ps := r.wait(t, "process orders", 3) // two messages, one batch
	var batch []sdktrace.ReadOnlySpan
	perMessage := map[trace.TraceID]sdktrace.ReadOnlySpan{}
	for _, p := range ps {
		if _, ok := attr(p, semconv.MessagingBatchMessageCountKey); ok {
			batch = append(batch, p)
		} else {
			perMessage[p.SpanContext().TraceID()] = p
		}
	}
	if len(batch) != 1 || len(perMessage) != 2 {
		t.Fatalf("%d batch spans and %d message spans, want 1 and 2 (one claim took both)", len(batch), len(perMessage))
	}
	b := batch[0]
	wantAttrs(t, b, semconv.MessagingBatchMessageCount(2), attribute.Int("pgsweep.batch.failed", 0))
	if b.Parent().IsValid() {
		t.Errorf("batch span has a parent")
	}
	for _, sc := range sends {
		if !linked(b, sc) {
			t.Errorf("batch span does not link to send span %s", sc.SpanID())
		}
		childOf(t, perMessage[sc.TraceID()], sc)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batchCtx) != 1 || batchCtx[0].SpanID() != b.SpanContext().SpanID() {
		t.Errorf("the batch handler's ctx carries %v, want the batch span", batchCtx)
	}
}
