package tracingtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
)

// One trace from the application's transaction through the relay and the
// broker to a consumer on the broker's side, and through a Worker to a
// second hop: NATS JetStream and RabbitMQ, each on a real broker, with a
// real PostgreSQL.
func TestE2ETraceNATS(t *testing.T)     { t.Parallel(); e2eTrace(t, natsKit) }
func TestE2ETraceRabbitMQ(t *testing.T) { t.Parallel(); e2eTrace(t, amqpKit) }

// appContext is the application's context for its span "app": a remote
// parent with a tracestate, so that the test sees the tracestate travel too
// (every span of the trace inherits it).
func appContext(t *testing.T) (context.Context, trace.SpanContext) {
	t.Helper()
	ts, err := trace.ParseTraceState("pgsweep=e2e")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:  trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x19}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	return trace.ContextWithRemoteSpanContext(context.Background(), remote), remote
}

// traceParent is the W3C traceparent header of sc.
func traceParent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// byMessageID returns the spans among ss whose attribute k is id.
func byAttr(ss []sdktrace.ReadOnlySpan, k attribute.Key, v string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range ss {
		if got, ok := attr(s, k); ok && got.AsString() == v {
			out = append(out, s)
		}
	}
	return out
}

func e2eTrace(t *testing.T, newKit func(*testing.T, trace.TracerProvider) *brokerKit) {
	rec := newRecorder(t)
	k := newKit(t, rec)
	db := pgtest.New(t, 20)
	ctx := context.Background()
	for _, q := range []string{"orders", "jobs", "followups"} {
		if err := db.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
			t.Fatalf("queue_create %s: %v", q, err)
		}
	}
	c, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}

	// the relay, and the Worker of the second queue, whose handler sends
	// to a third queue in its ctx
	r, err := relay.New(db.Pool, "orders", k.transport(t), relay.Options{Schema: db.Schema, Owner: "relay-1",
		PollInterval: 100 * time.Millisecond, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, context.Background(), r)
	handled := make(chan int64, 1)
	w, err := pgsweep.NewWorker(db.Pool, func(ctx context.Context, d *pgsweep.Delivery) error {
		id, _, err := c.Send(ctx, "followups", pgsweep.Message{Payload: json.RawMessage(`{"followup":true}`)})
		handled <- id
		return err
	}, pgsweep.WorkerOptions{Schema: db.Schema, Queue: "jobs", Owner: "worker-1", PollInterval: 100 * time.Millisecond, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() { stopWorker(); <-workerDone })

	// the application: a span "app" around its transaction, which sends
	// two messages to the outbox and one job
	actx, remote := appContext(t)
	actx, app := rec.Tracer("app").Start(actx, "app")
	tx, err := db.Pool.Begin(actx)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.WithDB(tx)
	var orders [2]int64
	for i := range orders {
		if orders[i], _, err = tc.Send(actx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"order":` + strconv.Itoa(i) + `}`)}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	job, _, err := tc.Send(actx, "jobs", pgsweep.Message{Payload: json.RawMessage(`{"job":1}`)})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := tx.Commit(actx); err != nil {
		t.Fatal(err)
	}
	app.End()
	traceID := remote.TraceID()

	// the broker-side consumer gets both orders; the Worker handles the job
	got := k.receive(t, 2)
	var followup int64
	select {
	case followup = <-handled:
	case <-time.After(time.Minute): // a bound for a loaded machine, not a measurement
		t.Fatal("the Worker did not handle the job")
	}
	pgtest.Eventually(t, time.Minute, queueEmpty(db, "orders"))
	pgtest.Eventually(t, time.Minute, queueEmpty(db, "jobs"))
	publishName := "publish " + k.dest
	pgtest.Eventually(t, time.Minute, pgtest.Until("the relay's publish span and the process spans to end", func() bool {
		return len(rec.ended(publishName)) == 1 && len(rec.ended("process orders")) == 3 && len(rec.ended("process jobs")) == 1
	}))

	appSpan := rec.one(t, "app")
	if appSpan.SpanContext().TraceID() != traceID || appSpan.Parent().SpanID() != remote.SpanID() {
		t.Fatalf("app span: trace %s parent %s, want trace %s parent %s", appSpan.SpanContext().TraceID(), appSpan.Parent().SpanID(), traceID, remote.SpanID())
	}
	sends := rec.ended("send orders")
	if len(sends) != 2 {
		t.Fatalf("%d send spans for orders, want 2", len(sends))
	}
	sendOf := map[int64]sdktrace.ReadOnlySpan{}
	for i, id := range orders {
		ss := byAttr(sends, semconv.MessagingMessageIDKey, strconv.FormatInt(id, 10))
		if len(ss) != 1 {
			t.Fatalf("order %d (%d): %d send spans", i, id, len(ss))
		}
		s := ss[0]
		if s.Parent().SpanID() != appSpan.SpanContext().SpanID() || s.SpanContext().TraceID() != traceID {
			t.Errorf("send span of %d: parent %s trace %s, want the app span %s in trace %s", id, s.Parent().SpanID(), s.SpanContext().TraceID(),
				appSpan.SpanContext().SpanID(), traceID)
		}
		sendOf[id] = s
	}

	// the broker's messages carry the creation context as it was stored
	// (the send span's), and the consumer's span continues it
	for _, d := range got {
		id, err := strconv.ParseInt(d.headers[relay.HeaderID], 10, 64)
		if err != nil || sendOf[id] == nil {
			t.Fatalf("a broker message with %s = %q: not one of %v", relay.HeaderID, d.headers[relay.HeaderID], orders)
		}
		sc := sendOf[id].SpanContext()
		if tp := d.headers[pgsweep.TraceParentHeader]; tp != traceParent(sc) {
			t.Errorf("message %d: traceparent %q, want %q (the send span's)", id, tp, traceParent(sc))
		}
		if ts := d.headers[pgsweep.TraceStateHeader]; ts != "pgsweep=e2e" {
			t.Errorf("message %d: tracestate %q, want %q", id, ts, "pgsweep=e2e")
		}
		if want := "orders/" + strconv.FormatInt(id, 10); d.msgID != want {
			t.Errorf("message %d: broker message id %q, want %q", id, d.msgID, want)
		}
		cs := byAttr(rec.ended("process "+k.dest), semconv.MessagingMessageIDKey, d.msgID)
		if len(cs) != 1 {
			t.Fatalf("message %d: %d consumer spans", id, len(cs))
		}
		if cs[0].Parent().SpanID() != sc.SpanID() || cs[0].SpanContext().TraceID() != traceID || !cs[0].Parent().IsRemote() {
			t.Errorf("consumer span of %d: parent %s (remote %v) trace %s, want the send span %s in trace %s", id, cs[0].Parent().SpanID(),
				cs[0].Parent().IsRemote(), cs[0].SpanContext().TraceID(), sc.SpanID(), traceID)
		}
	}

	// the relay's span: one publish of both, linked to each creation context
	pub := rec.one(t, publishName)
	if pub.SpanKind() != trace.SpanKindProducer {
		t.Errorf("publish span kind %v, want producer", pub.SpanKind())
	}
	wantAttrs(t, pub, semconv.MessagingSystemKey.String(k.system), semconv.MessagingDestinationName(k.dest),
		semconv.MessagingOperationName("publish"), semconv.MessagingOperationTypeSend, semconv.MessagingBatchMessageCount(2),
		attribute.String("pgsweep.queue", "orders"), attribute.String("pgsweep.owner", "relay-1"), attribute.String("pgsweep.relay.path", "claim"),
		attribute.Int("pgsweep.batch.published", 2), attribute.Int("pgsweep.batch.failed", 0), attribute.Int("pgsweep.batch.not_published", 0))
	if len(pub.Links()) != 2 {
		t.Fatalf("publish span has %d links, want 2", len(pub.Links()))
	}
	for _, id := range orders {
		sc := sendOf[id].SpanContext()
		var l *sdktrace.Link
		for i := range pub.Links() {
			if sameSpan(pub.Links()[i].SpanContext, sc) {
				l = &pub.Links()[i]
			}
		}
		if l == nil {
			t.Errorf("publish span: no link to the send span of %d (%s)", id, sc.SpanID())
			continue
		}
		if l.SpanContext.TraceID() != traceID {
			t.Errorf("link of %d: trace %s, want %s", id, l.SpanContext.TraceID(), traceID)
		}
		want := map[attribute.Key]attribute.Value{semconv.MessagingMessageIDKey: attribute.StringValue("orders/" + strconv.FormatInt(id, 10)),
			"pgsweep.message.attempt": attribute.IntValue(1)}
		if len(l.Attributes) != len(want) {
			t.Errorf("link of %d: attributes %v, want %v", id, l.Attributes, want)
		}
		for _, kv := range l.Attributes {
			if want[kv.Key] != kv.Value {
				t.Errorf("link of %d: %s = %v, want %v", id, kv.Key, kv.Value.Emit(), want[kv.Key].Emit())
			}
		}
	}
	// its parent: the batch span of the Worker that runs the relay's claims
	var batch sdktrace.ReadOnlySpan
	var perMessage []sdktrace.ReadOnlySpan
	for _, s := range rec.ended("process orders") {
		if _, ok := attr(s, semconv.MessagingBatchMessageCountKey); ok {
			batch = s
		} else {
			perMessage = append(perMessage, s)
		}
	}
	if batch == nil || pub.Parent().SpanID() != batch.SpanContext().SpanID() {
		t.Errorf("publish span's parent %s is not the relay Worker's batch span", pub.Parent().SpanID())
	}
	// the relay's Worker: one process span per message, its parent the send span
	for _, id := range orders {
		ps := byAttr(perMessage, semconv.MessagingMessageIDKey, strconv.FormatInt(id, 10))
		if len(ps) != 1 {
			t.Fatalf("message %d: %d process spans of the relay's Worker", id, len(ps))
		}
		p := ps[0]
		if p.Parent().SpanID() != sendOf[id].SpanContext().SpanID() || p.SpanContext().TraceID() != traceID {
			t.Errorf("relay Worker's process span of %d: parent %s trace %s, want the send span %s", id, p.Parent().SpanID(),
				p.SpanContext().TraceID(), sendOf[id].SpanContext().SpanID())
		}
		wantAttrs(t, p, semconv.MessagingSystemKey.String(pgsweep.MessagingSystem), attribute.Int("pgsweep.message.attempt", 1))
		if ev := eventNames(p); fmt.Sprint(ev) != "[claim complete]" {
			t.Errorf("relay Worker's process span of %d: events %v, want [claim complete]", id, ev)
		}
	}

	// the Worker path: send jobs -> process jobs -> send followups, one trace
	sendJob := rec.one(t, "send jobs")
	proc := rec.one(t, "process jobs")
	next := rec.one(t, "send followups")
	if sendJob.Parent().SpanID() != appSpan.SpanContext().SpanID() {
		t.Errorf("send jobs: parent %s, want the app span", sendJob.Parent().SpanID())
	}
	if proc.Parent().SpanID() != sendJob.SpanContext().SpanID() || proc.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process jobs: parent %s kind %v, want the send span %s, consumer", proc.Parent().SpanID(), proc.SpanKind(), sendJob.SpanContext().SpanID())
	}
	wantAttrs(t, proc, semconv.MessagingMessageID(strconv.FormatInt(job, 10)), attribute.Int("pgsweep.message.attempt", 1),
		semconv.MessagingDestinationName("jobs"))
	if ev := eventNames(proc); fmt.Sprint(ev) != "[claim complete]" {
		t.Errorf("process jobs: events %v, want [claim complete]", ev)
	}
	if next.Parent().SpanID() != proc.SpanContext().SpanID() {
		t.Errorf("send followups: parent %s, want the process span %s", next.Parent().SpanID(), proc.SpanContext().SpanID())
	}
	wantAttrs(t, next, semconv.MessagingMessageID(strconv.FormatInt(followup, 10)))
	for _, s := range []sdktrace.ReadOnlySpan{sendJob, proc, next} {
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("%s: trace %s, want %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
	}
	// and the followup carries the process span's context
	var hs map[string]string
	if err := db.Pool.QueryRow(ctx, "SELECT headers FROM "+db.Rel("message")+" WHERE id = $1", followup).Scan(&hs); err != nil {
		t.Fatal(err)
	}
	if hs[pgsweep.TraceParentHeader] != traceParent(next.SpanContext()) {
		t.Errorf("followup's traceparent %q, want its send span's %q", hs[pgsweep.TraceParentHeader], traceParent(next.SpanContext()))
	}
	// the picture of docs/tracing.md: this trace, and the relay's batch
	// and publish spans linked to it
	writePicture(t, rec.rec.Ended(), k.system == "nats")
}

// sameSpan reports whether a and b name the same span (a link's context,
// extracted from headers, is remote; the span's own is not).
func sameSpan(a, b trace.SpanContext) bool {
	return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID()
}

// runRelay runs r on ctx until the test ends and waits until it runs.
func runRelay(t *testing.T, ctx context.Context, r *relay.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay run: %v", err)
		}
	})
	pgtest.Eventually(t, time.Minute, pgtest.Until("the relay to run", func() bool { return r.Health().Running }))
}

// queueEmpty is the condition that queue holds no message.
func queueEmpty(db *pgtest.DB, queue string) func() error {
	return func() error {
		var n int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("message")+" WHERE queue = $1", queue).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("queue %s holds %d messages", queue, n)
		}
		return nil
	}
}
