package tracingtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
)

// The relay's publish span on the paths and outcomes the end-to-end tests
// do not take: direct dispatch, a transport that does not describe itself,
// messages the broker refuses, messages without a creation context, and a
// batch for several destinations. The transports here are stand-ins: what
// the spans say does not depend on the broker.

// fakeTransport confirms every message but those whose "fail" header says
// "permanent" (refused for good) or "retry" (failed).
type fakeTransport struct{}

func (fakeTransport) Publish(_ context.Context, msgs []relay.Message) []relay.Result {
	res := make([]relay.Result, len(msgs))
	for i, m := range msgs {
		switch m.Headers["fail"] {
		case "permanent":
			res[i] = relay.Result{Err: errors.New("refused for good"), Permanent: true}
		case "retry":
			res[i] = relay.Result{Err: errors.New("try again")}
		}
	}
	return res
}

func (fakeTransport) Close() error { return nil }

// describedTransport is fakeTransport that names its broker "fake" and
// publishes each message to its "to" header, or to "default".
type describedTransport struct{ fakeTransport }

func (describedTransport) MessagingSystem() string { return "fake" }
func (describedTransport) Destination(m *relay.Message) string {
	if to := m.Headers["to"]; to != "" {
		return to
	}
	return "default"
}

// spanTest is a queue "orders", a Client that traces to rec, and a relay
// of the queue to tr that traces to rec.
func spanTest(t *testing.T, tr relay.Transport, opts relay.Options) (*pgtest.DB, *recorder, *pgsweep.Client, *relay.Relay) {
	t.Helper()
	rec := newRecorder(t)
	db := pgtest.NewQueue(t, 10, "orders", pgsweep.Outbox, 5)
	c, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	opts.Schema, opts.Owner, opts.TracerProvider = db.Schema, "relay-1", rec
	r, err := relay.New(db.Pool, "orders", tr, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db, rec, c, r
}

// publishSpans waits until n publish spans named name ended and returns them.
func publishSpans(t *testing.T, rec *recorder, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	pgtest.Eventually(t, time.Minute, pgtest.Until(fmt.Sprintf("%d spans %q", n, name), func() bool { return len(rec.ended(name)) >= n }))
	ss := rec.ended(name)
	if len(ss) != n {
		for _, s := range ss {
			t.Logf("%s: %v", s.Name(), s.Attributes())
		}
		t.Fatalf("%d spans %q, want %d", len(ss), name, n)
	}
	return ss
}

// Direct dispatch: the publish span is a root (Run's ctx has no say),
// path "direct", linked to the message's creation context.
func TestRelaySpanDirectDispatch(t *testing.T) {
	t.Parallel()
	// The relay's Worker claims at start, and then after PollInterval (an
	// hour) only: a probe sent before it starts is what its first claims
	// get (the claim at start, and the one pipelined with the probe's
	// complete), and once the probe's process span ended (after that
	// round trip) the Worker claims nothing more: Dispatch publishes the
	// message.
	db, rec, c, r := spanTest(t, describedTransport{}, relay.Options{DisableNotify: true, PollInterval: time.Hour})
	probe, _, err := db.Client.Send(context.Background(), "orders", pgsweep.Message{Payload: json.RawMessage(`0`)})
	if err != nil {
		t.Fatal(err)
	}
	// Run's ctx carries a span of the application's: not the publish's parent
	runCtx, runSpan := rec.Tracer("app").Start(context.Background(), "run")
	defer runSpan.End()
	runRelay(t, runCtx, r)
	pgtest.Eventually(t, time.Minute, pgtest.Until("the probe's process span to end", func() bool {
		return len(byAttr(rec.ended("process orders"), semconv.MessagingMessageIDKey, strconv.FormatInt(probe, 10))) == 1
	}))
	ctx, app := rec.Tracer("app").Start(context.Background(), "app")
	id, _, err := c.Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	app.End()
	if err := r.Dispatch(ctx, []int64{id}); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, time.Minute, queueEmpty(db, "orders"))
	pubs := publishSpans(t, rec, "publish default", 2)
	direct := byAttr(pubs, "pgsweep.relay.path", "direct")
	if len(direct) != 1 || len(byAttr(pubs, "pgsweep.relay.path", "claim")) != 1 {
		t.Fatalf("publish spans: %d direct, want 1 (and the probe's, claim)", len(direct))
	}
	pub := direct[0]
	send := rec.one(t, "send orders")
	if pub.Parent().IsValid() {
		t.Errorf("direct dispatch's publish span has parent %s, want none", pub.Parent().SpanID())
	}
	wantAttrs(t, pub, semconv.MessagingSystemKey.String("fake"), semconv.MessagingDestinationName("default"),
		semconv.MessagingMessageID("orders/"+strconv.FormatInt(id, 10)), attribute.String("pgsweep.relay.path", "direct"),
		attribute.Int("pgsweep.batch.published", 1), attribute.Int("pgsweep.batch.failed", 0))
	if _, ok := attr(pub, semconv.MessagingBatchMessageCountKey); ok {
		t.Errorf("messaging.batch.message_count set on the publish of one message")
	}
	if pub.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", pub.Status())
	}
	if len(pub.Links()) != 1 || !sameSpan(pub.Links()[0].SpanContext, send.SpanContext()) {
		t.Fatalf("links %v, want one to the send span %s", pub.Links(), send.SpanContext().SpanID())
	}
	// the Worker did not claim it: no process span but the probe's (and its batch's)
	if n := len(rec.ended("process orders")); n != 2 {
		t.Errorf("%d process spans, want 2 (the probe's; direct dispatch publishes without the Worker)", n)
	}
}

// A transport that does not describe itself: "publish", no
// messaging.system. Refused and failed messages: the span's status is
// Error, an exception event per distinct error, the counts; a message
// without a creation context gets no link.
func TestRelaySpanFailures(t *testing.T) {
	t.Parallel()
	db, rec, c, r := spanTest(t, fakeTransport{}, relay.Options{PollInterval: 100 * time.Millisecond})
	ctx, app := rec.Tracer("app").Start(context.Background(), "app")
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, m := range []pgsweep.Message{
		{Payload: json.RawMessage(`"ok"`)},
		{Payload: json.RawMessage(`"refused"`), Headers: map[string]string{"fail": "permanent"}},
		{Payload: json.RawMessage(`"retried"`), Headers: map[string]string{"fail": "retry"}},
	} {
		id, _, err := c.WithDB(tx).Send(ctx, "orders", m)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// sent outside any span: no traceparent
	plain, _, err := db.Client.WithDB(tx).Send(context.Background(), "orders", pgsweep.Message{Payload: json.RawMessage(`"plain"`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	app.End()
	runRelay(t, context.Background(), r)
	pgtest.Eventually(t, time.Minute, pgtest.Until("a publish of all four", func() bool {
		return len(byAttrInt(rec.ended("publish"), semconv.MessagingBatchMessageCountKey, 4)) == 1
	}))
	pub := byAttrInt(rec.ended("publish"), semconv.MessagingBatchMessageCountKey, 4)[0]
	if _, ok := attr(pub, semconv.MessagingSystemKey); ok {
		t.Errorf("messaging.system set for a transport that does not describe itself")
	}
	if _, ok := attr(pub, semconv.MessagingDestinationNameKey); ok {
		t.Errorf("messaging.destination.name set for a transport that does not describe itself")
	}
	wantAttrs(t, pub, semconv.MessagingOperationName("publish"), semconv.MessagingOperationTypeSend,
		attribute.Int("pgsweep.batch.published", 2), attribute.Int("pgsweep.batch.failed", 2), attribute.Int("pgsweep.batch.not_published", 0))
	// the first failure of the batch (in the order of the claim, as the
	// links are) names the status, and comes first in the events
	errText := map[string]string{"orders/" + strconv.FormatInt(ids[1], 10): "permanent: refused for good",
		"orders/" + strconv.FormatInt(ids[2], 10): "failed: try again"}
	var order []string
	for _, l := range pub.Links() {
		v, _ := linkAttr(l, semconv.MessagingMessageIDKey)
		if e, ok := errText[v.AsString()]; ok {
			order = append(order, e)
		}
	}
	if len(order) != 2 {
		t.Fatalf("links %v: want one to each failed message", pub.Links())
	}
	if st, want := pub.Status(), "2 of 4 not confirmed: "+order[0][strings.Index(order[0], ": ")+2:]; st.Code != codes.Error || st.Description != want {
		t.Errorf("status %v %q, want Error %q", st.Code, st.Description, want)
	}
	var events []string
	for _, e := range pub.Events() {
		var msg, outcome string
		for _, kv := range e.Attributes {
			switch kv.Key {
			case semconv.ExceptionMessageKey:
				msg = kv.Value.AsString()
			case "pgsweep.outcome":
				outcome = kv.Value.AsString()
			}
		}
		events = append(events, e.Name+": "+outcome+": "+msg)
	}
	if want := fmt.Sprint([]string{"exception: " + order[0], "exception: " + order[1]}); fmt.Sprint(events) != want {
		t.Errorf("events %v, want %s", events, want)
	}
	if len(pub.Links()) != 3 {
		t.Fatalf("%d links, want 3 (the message without a traceparent has none)", len(pub.Links()))
	}
	for i, l := range pub.Links() {
		v, _ := linkAttr(l, semconv.MessagingMessageIDKey)
		if v.AsString() == "orders/"+strconv.FormatInt(plain, 10) {
			t.Errorf("link %d is the message sent without a creation context", i)
		}
	}
	// the Worker's process spans record each message's end
	pgtest.Eventually(t, time.Minute, pgtest.Until("the process spans to end", func() bool {
		for _, id := range ids {
			if len(byAttr(rec.ended("process orders"), semconv.MessagingMessageIDKey, strconv.FormatInt(id, 10))) == 0 {
				return false
			}
		}
		return true
	}))
	for i, want := range []string{"complete", "dead_letter", "fail"} {
		ps := byAttr(rec.ended("process orders"), semconv.MessagingMessageIDKey, strconv.FormatInt(ids[i], 10))
		if len(ps) == 0 {
			t.Fatalf("no process span for message %d", ids[i])
		}
		if ev := eventNames(ps[0]); ev[len(ev)-1] != want {
			t.Errorf("message %d: events %v, want the last %q", ids[i], ev, want)
		}
	}
}

// A batch for several destinations (a subject or routing key header): the
// span is named "publish", and each link names its message's destination.
func TestRelaySpanSeveralDestinations(t *testing.T) {
	t.Parallel()
	db, rec, c, r := spanTest(t, describedTransport{}, relay.Options{PollInterval: 100 * time.Millisecond})
	ctx, app := rec.Tracer("app").Start(context.Background(), "app")
	if _, err := c.SendBatch(ctx, "orders", []pgsweep.Message{
		{Payload: json.RawMessage(`1`), Headers: map[string]string{"to": "x"}},
		{Payload: json.RawMessage(`2`), Headers: map[string]string{"to": "y"}},
	}); err != nil {
		t.Fatal(err)
	}
	app.End()
	runRelay(t, context.Background(), r)
	pgtest.Eventually(t, time.Minute, queueEmpty(db, "orders"))
	pub := publishSpans(t, rec, "publish", 1)[0]
	if _, ok := attr(pub, semconv.MessagingDestinationNameKey); ok {
		t.Errorf("messaging.destination.name set on a batch for two destinations")
	}
	wantAttrs(t, pub, semconv.MessagingSystemKey.String("fake"), semconv.MessagingBatchMessageCount(2))
	var dests []string
	for _, l := range pub.Links() {
		v, _ := linkAttr(l, semconv.MessagingDestinationNameKey)
		dests = append(dests, v.AsString())
	}
	if fmt.Sprint(dests) != "[x y]" && fmt.Sprint(dests) != "[y x]" {
		t.Errorf("links' destinations %v, want x and y", dests)
	}
}

// byAttrInt returns the spans among ss whose attribute k is v.
func byAttrInt(ss []sdktrace.ReadOnlySpan, k attribute.Key, v int) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range ss {
		if got, ok := attr(s, k); ok && got.AsInt64() == int64(v) {
			out = append(out, s)
		}
	}
	return out
}

var _ trace.TracerProvider = (*recorder)(nil)
