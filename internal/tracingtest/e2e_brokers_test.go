package tracingtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep/relay"
	relayamqp "github.com/pgsweep/pgsweep/relay/amqp"
	relaynats "github.com/pgsweep/pgsweep/relay/nats"
	"github.com/pgsweep/pgsweep/relay/relaytest"
)

// The end-to-end tests' brokers: a real nats-server (JetStream) and a real
// RabbitMQ, found by relaytest (NATS_URL, AMQP_URL; `make test` starts
// them; with CI set a missing broker fails the test). Each test gets a
// destination of its own and a consumer on it, on the broker's side, that
// continues the trace from the broker message's headers as any W3C Trace
// Context consumer does: propagation.TraceContext over a carrier of the
// broker's headers.

// delivery is one message as the broker-side consumer received it.
type delivery struct {
	headers map[string]string // the broker message's headers (string values)
	msgID   string            // the broker's message id: Nats-Msg-Id, AMQP message_id
	span    trace.SpanContext // the consumer span it started
}

// brokerKit is one broker with a destination of a test's own.
type brokerKit struct {
	system string // messaging.system of the relay's span
	dest   string // messaging.destination.name of the relay's span
	url    string // the relay URL (pgsweep relay --to) that publishes there
	got    chan delivery
	// stored is how many messages the broker holds for consumers that
	// come later: the JetStream stream's count (after its duplicate
	// window); -1 for RabbitMQ, whose consumer took them.
	stored func(t *testing.T) int
}

func randHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// consumerSpan is what the broker-side consumer does with a message: it
// extracts the creation context from the headers (carrier) and starts its
// consumer span as that context's child.
func consumerSpan(tp trace.TracerProvider, system, dest, msgID string, carrier propagation.TextMapCarrier) trace.SpanContext {
	ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	_, span := tp.Tracer("broker-consumer").Start(ctx, "process "+dest, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(semconv.MessagingSystemKey.String(system), semconv.MessagingDestinationName(dest),
			semconv.MessagingOperationTypeProcess, semconv.MessagingMessageID(msgID)))
	span.End()
	return span.SpanContext()
}

// natsCarrier is a propagation carrier over a NATS message's headers
// (case-sensitive, as NATS keeps them).
type natsCarrier natsgo.Header

func (c natsCarrier) Get(k string) string { return natsgo.Header(c).Get(k) }
func (c natsCarrier) Set(k, v string)     { natsgo.Header(c).Set(k, v) }
func (c natsCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// amqpCarrier is a propagation carrier over an AMQP message's headers.
type amqpCarrier amqp091.Table

func (c amqpCarrier) Get(k string) string {
	s, _ := c[k].(string)
	return s
}
func (c amqpCarrier) Set(k, v string) { c[k] = v }
func (c amqpCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// natsKit makes a JetStream stream of the test's own (a 2-minute duplicate
// window) and subscribes to its subject: the subscription sees every
// publish, the stream holds what its duplicate window let through.
func natsKit(t *testing.T, tp trace.TracerProvider) *brokerKit {
	t.Helper()
	name := "TRACE" + randHex()
	subject := "pgsweep.trace." + name
	ns := relaytest.NewStream(t, name, subject)
	base, nc, st := ns.Base, ns.Conn, ns.Stream
	k := &brokerKit{system: "nats", dest: subject, url: base + "?subject=" + url.QueryEscape(subject), got: make(chan delivery, 100)}
	sub, err := nc.Subscribe(subject, func(m *natsgo.Msg) {
		h := map[string]string{}
		for key := range m.Header {
			h[key] = m.Header.Get(key)
		}
		id := m.Header.Get(jetstream.MsgIDHeader)
		k.got <- delivery{headers: h, msgID: id, span: consumerSpan(tp, "nats", subject, id, natsCarrier(m.Header))}
	})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil { // the subscription is registered before anything is published
		t.Fatal(err)
	}
	k.stored = func(t *testing.T) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatalf("stream info: %v", err)
		}
		return int(info.State.Msgs)
	}
	return k
}

// amqpKit declares a durable queue of the test's own on the default
// exchange and consumes it.
func amqpKit(t *testing.T, tp trace.TracerProvider) *brokerKit {
	t.Helper()
	base := relaytest.AMQP(t)
	q := "pgsweep-trace-" + randHex()
	conn, err := amqp091.Dial(base)
	if err != nil {
		t.Fatalf("amqp: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatalf("declare: %v", err)
	}
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(q, false, false, false)
			_ = c.Close()
		}
	})
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	v := u.Query()
	v.Set("routing_key", q)
	u.RawQuery = v.Encode()
	k := &brokerKit{system: "rabbitmq", dest: q, url: u.String(), got: make(chan delivery, 100), stored: func(*testing.T) int { return -1 }}
	var wg sync.WaitGroup
	wg.Go(func() {
		for d := range ds {
			h := map[string]string{}
			for key, val := range d.Headers {
				if s, ok := val.(string); ok {
					h[key] = s
				}
			}
			k.got <- delivery{headers: h, msgID: d.MessageId, span: consumerSpan(tp, "rabbitmq", q, d.MessageId, amqpCarrier(d.Headers))}
		}
	})
	t.Cleanup(func() { _ = ch.Close(); wg.Wait() })
	return k
}

// receive waits for n deliveries.
func (k *brokerKit) receive(t *testing.T, n int) []delivery {
	t.Helper()
	out := make([]delivery, 0, n)
	timeout := time.NewTimer(time.Minute) // a bound for a loaded machine, not a measurement
	defer timeout.Stop()
	for len(out) < n {
		select {
		case d := <-k.got:
			out = append(out, d)
		case <-timeout.C:
			t.Fatalf("the broker-side consumer received %d messages, want %d", len(out), n)
		}
	}
	return out
}

// transport opens the relay's transport to the kit's destination.
func (k *brokerKit) transport(t *testing.T) relay.Transport {
	t.Helper()
	var tr relay.Transport
	var err error
	switch k.system {
	case "nats":
		tr, err = relaynats.Open(k.url, t.Name(), nil)
	default:
		tr, err = relayamqp.Open(k.url, t.Name(), nil)
	}
	if err != nil {
		t.Fatalf("open %s: %v", k.system, err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}
