// Package amqp is the relay's RabbitMQ transport (AMQP 0-9-1): messages are
// published persistent (delivery mode 2), mandatory (a message no queue is
// bound for comes back and fails, it is not silently dropped), with
// publisher confirms (a message counts as published once the broker
// confirmed it), message_id = the message's identity, timestamp = its
// created_at, content type application/json, and the message's headers plus
// pgsweep's (relay.Message.PublishHeaders) as AMQP headers.
//
// RabbitMQ keeps no duplicate window: a replay (a relay died between the
// broker's confirm and the database's complete) is delivered again, with the
// same message_id. Consumers de-duplicate by message_id -- a pgsweep inbox
// queue keyed by it processes each message once (docs/relay.md).
//
// URL form (Open): amqp[s]://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key=K
// with the optional parameters
//
//	exchange=X            the exchange (default: the default exchange "")
//	routing_key=K         the routing key (with the default exchange: the queue name)
//	routing_key_header=H  a message header H, when the message has it, is its routing key
//	declare_queue=Q       declare durable queue Q (and bind it to X with K when X is
//	                      set) on every connect, for a setup with nothing declared yet
//
// The transport keeps one connection and reconnects by itself after the
// broker restarts or the connection drops (backoff 100 ms to 5 s); while it
// is down, publishes fail at once with relay.ErrUnavailable and Check
// reports it.
package amqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/pgsweep/pgsweep/relay"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Options configure a Transport.
type Options struct {
	Exchange         string
	RoutingKey       string
	RoutingKeyHeader string
	DeclareQueue     string
	// MaxMessageSize: a larger body is refused for good (dead-lettered)
	// without being sent; RabbitMQ's max_message_size default is 128 MiB.
	MaxMessageSize int
	// Name is the connection name the broker shows.
	Name   string
	Logger *slog.Logger
}

// chunk is the most messages published before their confirms are awaited
// (and the size of a channel's return buffer).
const chunk = 1000

// Transport publishes to RabbitMQ. It is safe for concurrent use: each
// Publish call takes a channel of its own.
type Transport struct {
	url string
	o   Options
	log *slog.Logger

	mu     sync.Mutex
	conn   *amqp091.Connection
	gen    int // connection generation; channels of an older one are dropped
	free   []*channel
	lastEr error
	closed chan struct{}
	done   chan struct{}
}

type channel struct {
	ch      *amqp091.Channel
	gen     int
	returns chan amqp091.Return
}

// ParseURL splits a relay URL into the broker URL (parameters removed) and
// the options its parameters set.
func ParseURL(raw string) (string, Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", Options{}, fmt.Errorf("amqp url: %v", err)
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", Options{}, fmt.Errorf("amqp url: scheme must be amqp or amqps, got %q", u.Scheme)
	}
	q := u.Query()
	o := Options{Exchange: q.Get("exchange"), RoutingKey: q.Get("routing_key"), RoutingKeyHeader: q.Get("routing_key_header"),
		DeclareQueue: q.Get("declare_queue")}
	for k := range q {
		switch k {
		case "exchange", "routing_key", "routing_key_header", "declare_queue":
			q.Del(k)
		}
	}
	if o.RoutingKey == "" && o.RoutingKeyHeader == "" {
		return "", Options{}, errors.New("amqp url: routing_key=K is required (or routing_key_header=H)")
	}
	u.RawQuery = q.Encode() // the client's own parameters (heartbeat, ...) stay
	return u.String(), o, nil
}

// Open starts a transport on a relay URL (see the package doc). It returns
// at once; the connection is made (and remade) in the background.
func Open(raw string, name string, logger *slog.Logger) (*Transport, error) {
	broker, o, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	if _, err := amqp091.ParseURI(broker); err != nil {
		return nil, fmt.Errorf("amqp url: %v", err)
	}
	o.Name, o.Logger = name, logger
	return New(broker, o), nil
}

// New starts a transport to the broker at url (an amqp:// URL without the
// relay's parameters) and connects in the background.
func New(url string, o Options) *Transport {
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = 128 << 20
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	t := &Transport{url: url, o: o, log: log, closed: make(chan struct{}), done: make(chan struct{}),
		lastEr: errors.New("amqp: not connected yet")}
	go t.keepConnected()
	return t
}

// keepConnected dials, waits for the connection to close, and dials again.
func (t *Transport) keepConnected() {
	defer close(t.done)
	backoff := 100 * time.Millisecond
	for {
		cfg := amqp091.Config{Properties: amqp091.NewConnectionProperties(), Heartbeat: 5 * time.Second,
			Dial: amqp091.DefaultDial(5 * time.Second)}
		if t.o.Name != "" {
			cfg.Properties.SetClientConnectionName(t.o.Name)
		}
		conn, err := amqp091.DialConfig(t.url, cfg)
		if err == nil {
			if err = t.declare(conn); err != nil {
				_ = conn.Close()
			}
		}
		if err != nil {
			t.mu.Lock()
			t.lastEr = fmt.Errorf("amqp: connect: %w", err)
			t.mu.Unlock()
			select {
			case <-t.closed:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		closing := conn.NotifyClose(make(chan *amqp091.Error, 1))
		t.mu.Lock()
		t.conn = conn
		t.gen++
		t.free = nil
		t.lastEr = nil
		t.mu.Unlock()
		t.log.Info("amqp: connected")
		select {
		case <-t.closed:
			_ = conn.Close()
			return
		case e := <-closing:
			t.mu.Lock()
			t.conn = nil
			t.free = nil
			t.lastEr = fmt.Errorf("amqp: connection closed: %v", e)
			t.mu.Unlock()
			t.log.Warn("amqp: connection lost; reconnecting", "err", e)
		}
	}
}

// declare declares DeclareQueue (durable) and its binding.
func (t *Transport) declare(conn *amqp091.Connection) error {
	if t.o.DeclareQueue == "" {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(t.o.DeclareQueue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.o.DeclareQueue, err)
	}
	if t.o.Exchange != "" {
		if err := ch.QueueBind(t.o.DeclareQueue, t.o.RoutingKey, t.o.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s to %s: %w", t.o.DeclareQueue, t.o.Exchange, err)
		}
	}
	return nil
}

// Check reports whether the connection is up (relay.Checker).
func (t *Transport) Check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil || t.conn.IsClosed() {
		if t.lastEr != nil {
			return t.lastEr
		}
		return errors.New("amqp: not connected")
	}
	return nil
}

// Close stops reconnecting and closes the connection.
func (t *Transport) Close() error {
	select {
	case <-t.closed:
	default:
		close(t.closed)
	}
	<-t.done
	return nil
}

// take returns a confirm-mode channel for one Publish call.
func (t *Transport) take() (*channel, error) {
	t.mu.Lock()
	conn, gen := t.conn, t.gen
	if conn == nil {
		err := t.lastEr
		t.mu.Unlock()
		if err == nil {
			err = errors.New("amqp: not connected")
		}
		return nil, err
	}
	for len(t.free) > 0 {
		c := t.free[len(t.free)-1]
		t.free = t.free[:len(t.free)-1]
		if !c.ch.IsClosed() {
			t.mu.Unlock()
			return c, nil
		}
	}
	t.mu.Unlock()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return &channel{ch: ch, gen: gen, returns: ch.NotifyReturn(make(chan amqp091.Return, chunk))}, nil
}

// give puts a channel back for the next Publish.
func (t *Transport) give(c *channel) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.ch.IsClosed() || c.gen != t.gen || t.conn == nil {
		_ = c.ch.Close()
		return
	}
	t.free = append(t.free, c)
}

// routingKey is m's routing key: its RoutingKeyHeader, else RoutingKey.
func (t *Transport) routingKey(m *relay.Message) string {
	if t.o.RoutingKeyHeader != "" {
		if k := m.Headers[t.o.RoutingKeyHeader]; k != "" {
			return k
		}
	}
	return t.o.RoutingKey
}

// The relay's spans name the broker and the destination.
var _ relay.Describer = (*Transport)(nil)

// MessagingSystem returns "rabbitmq", the messaging.system of the relay's
// spans (relay.Describer).
func (t *Transport) MessagingSystem() string { return "rabbitmq" }

// Destination returns where m is published, the messaging.destination.name
// of the relay's spans (relay.Describer), as the OpenTelemetry conventions
// name a RabbitMQ destination: "exchange:routing_key", the routing key
// alone on the default exchange.
func (t *Transport) Destination(m *relay.Message) string {
	key := t.routingKey(m)
	switch {
	case t.o.Exchange == "":
		return key
	case key == "":
		return t.o.Exchange
	}
	return t.o.Exchange + ":" + key
}

// Publish publishes msgs on a channel of its own and waits for every
// confirm; a returned (unroutable) message fails.
func (t *Transport) Publish(ctx context.Context, msgs []relay.Message) []relay.Result {
	res := make([]relay.Result, len(msgs))
	c, err := t.take()
	if err != nil {
		return relay.Unavailable(len(msgs), err)
	}
	defer t.give(c)
	for lo := 0; lo < len(msgs); lo += chunk {
		hi := min(lo+chunk, len(msgs))
		t.publishChunk(ctx, c, msgs[lo:hi], res[lo:hi])
	}
	return res
}

func (t *Transport) publishChunk(ctx context.Context, c *channel, msgs []relay.Message, res []relay.Result) {
	dcs := make([]*amqp091.DeferredConfirmation, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		key := t.routingKey(m)
		switch {
		case key == "":
			res[i] = relay.Result{Err: fmt.Errorf("amqp: no routing key: header %q is missing and the URL names none", t.o.RoutingKeyHeader), Permanent: true}
			continue
		case len(key) > 255:
			res[i] = relay.Result{Err: fmt.Errorf("amqp: routing key of %d bytes (at most 255)", len(key)), Permanent: true}
			continue
		case len(m.Payload) > t.o.MaxMessageSize:
			res[i] = relay.Result{Err: fmt.Errorf("amqp: message of %d bytes (at most %d)", len(m.Payload), t.o.MaxMessageSize), Permanent: true}
			continue
		}
		h := m.PublishHeaders()
		table := make(amqp091.Table, len(h))
		for k, v := range h {
			table[k] = v
		}
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, t.o.Exchange, key, true, false, amqp091.Publishing{
			Headers:      table,
			ContentType:  "application/json",
			DeliveryMode: amqp091.Persistent,
			MessageId:    m.Identity(),
			Timestamp:    m.CreatedAt,
			Body:         m.Payload,
		})
		if err != nil {
			for j := i; j < len(msgs); j++ {
				if res[j].Err == nil {
					res[j] = relay.Result{Err: relay.UnavailableError(fmt.Errorf("amqp: publish: %w", err))}
				}
			}
			break
		}
		dcs[i] = dc
	}
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
		acked, err := dc.WaitContext(ctx)
		switch {
		case err != nil:
			res[i] = relay.Result{Err: relay.UnavailableError(fmt.Errorf("amqp: no confirm: %w", err))}
		case !acked && c.ch.IsClosed():
			res[i] = relay.Result{Err: relay.UnavailableError(errors.New("amqp: channel closed before the confirm"))}
		case !acked:
			res[i] = relay.Result{Err: errors.New("amqp: the broker refused the message (nack)")}
		}
	}
	// A mandatory message no queue took comes back before its confirm, so
	// every return of this chunk is in the buffer by now.
	byID := make(map[string]int, len(msgs))
	for i := range msgs {
		byID[strconv.FormatInt(msgs[i].ID, 10)] = i
	}
	for {
		select {
		case r, ok := <-c.returns:
			if !ok {
				return
			}
			id, _ := r.Headers[relay.HeaderID].(string)
			if i, found := byID[id]; found && res[i].Err == nil {
				res[i] = relay.Result{Err: fmt.Errorf("amqp: unroutable: %d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)}
			}
			continue
		default:
		}
		return
	}
}
