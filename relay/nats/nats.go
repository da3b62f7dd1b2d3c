// Package nats is the relay's NATS JetStream transport: every message is
// published to a subject that a JetStream stream holds, with the message's
// identity as its Nats-Msg-Id, and counts as published once the stream
// acknowledged it (a publish ack that says Duplicate counts too: the stream
// already holds it). A replay of a message the stream holds, inside the
// stream's duplicate window, is dropped by the stream: with a window longer
// than the longest time between the broker's ack and the database's
// complete (a relay's lease, plus the time to claim the message again), the
// stream holds each message once.
//
// URL form (Open): nats://[USER:PASS@]HOST:PORT[,HOST:PORT...]?subject=SUBJ
// with the optional parameters
//
//	subject_header=H   a message header H, when the message has it, names its subject
//	stream=NAME        create stream NAME for the subject when it does not exist
//	                   (file storage, the duplicate window below); without it the
//	                   stream that holds the subject must exist
//	duplicate_window=D the created stream's duplicate window (default 2m)
//
// The connection reconnects by itself, forever; while it is down, publishes
// fail at once with relay.ErrUnavailable (nothing is buffered), and Check
// reports it.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep/relay"
)

// Options configure a Transport.
type Options struct {
	// Subject is the subject of messages without a SubjectHeader.
	Subject string
	// SubjectHeader, when set, names a message header whose value is the
	// message's subject.
	SubjectHeader string
	// Stream, when set, is created (subjects: Subject) on the first publish
	// if it does not exist.
	Stream string
	// DuplicateWindow is the created stream's duplicate window (default 2m).
	DuplicateWindow time.Duration
	// Logger receives connection events (default slog.Default()).
	Logger *slog.Logger
}

// Transport publishes to JetStream. It is safe for concurrent use.
type Transport struct {
	nc  *natsgo.Conn
	js  jetstream.JetStream
	o   Options
	own bool // Close closes nc

	mu          sync.Mutex
	streamReady bool

	ack acker // matches publish acks (publish.go)
}

// ParseURL splits a relay URL into the server URL (parameters removed) and
// the options its parameters set.
func ParseURL(raw string) (string, Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", Options{}, fmt.Errorf("nats url: %w", redactErr(err))
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return "", Options{}, fmt.Errorf("nats url: scheme must be nats or tls, got %q", u.Scheme)
	}
	q := u.Query()
	o := Options{Subject: q.Get("subject"), SubjectHeader: q.Get("subject_header"), Stream: q.Get("stream")}
	if d := q.Get("duplicate_window"); d != "" {
		if o.DuplicateWindow, err = time.ParseDuration(d); err != nil || o.DuplicateWindow <= 0 {
			return "", Options{}, fmt.Errorf("nats url: duplicate_window must be a positive duration such as 2m, got %q", d)
		}
	}
	for k := range q {
		switch k {
		case "subject", "subject_header", "stream", "duplicate_window":
		default:
			return "", Options{}, fmt.Errorf("nats url: unknown parameter %q (have subject, subject_header, stream, duplicate_window)", k)
		}
	}
	if o.Subject == "" && o.SubjectHeader == "" {
		return "", Options{}, errors.New("nats url: subject=SUBJ is required (or subject_header=H)")
	}
	if o.Stream != "" && o.Subject == "" {
		return "", Options{}, errors.New("nats url: stream= needs subject= (the subject the stream holds)")
	}
	u.RawQuery = ""
	return u.String(), o, nil
}

// Open connects to the server of a relay URL (see the package doc). A
// server that is not reachable yet is retried in the background.
func Open(raw string, name string, logger *slog.Logger) (*Transport, error) {
	server, o, err := ParseURL(raw)
	if err != nil {
		return nil, err
	}
	o.Logger = logger
	log := logger
	if log == nil {
		log = slog.Default()
	}
	nc, err := natsgo.Connect(server,
		natsgo.Name(name),
		natsgo.RetryOnFailedConnect(true),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(250*time.Millisecond),
		natsgo.ReconnectBufSize(-1), // fail publishes at once while disconnected: the relay gives them back
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			log.Warn("nats: disconnected", "err", err)
		}),
		natsgo.ReconnectHandler(func(c *natsgo.Conn) {
			log.Info("nats: reconnected", "server", c.ConnectedUrlRedacted())
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	t, err := New(nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	t.own = true
	return t, nil
}

// New publishes over an existing connection (Close leaves it open).
func New(nc *natsgo.Conn, o Options) (*Transport, error) {
	if o.Subject == "" && o.SubjectHeader == "" {
		return nil, errors.New("nats: Subject or SubjectHeader is required")
	}
	if o.DuplicateWindow <= 0 {
		o.DuplicateWindow = 2 * time.Minute
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(1<<15),
		jetstream.WithPublishAsyncTimeout(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	return &Transport{nc: nc, js: js, o: o, streamReady: o.Stream == "", ack: acker{nc: nc}}, nil
}

// Check reports whether the connection is up (relay.Checker).
func (t *Transport) Check() error {
	if s := t.nc.Status(); s != natsgo.CONNECTED {
		return fmt.Errorf("nats: connection %s", strings.ToLower(s.String()))
	}
	return nil
}

// Close closes the connection Open made (and stops matching acks on a
// connection New was given).
func (t *Transport) Close() error {
	t.ack.stop()
	if t.own {
		t.nc.Close()
	}
	return nil
}

// ensureStream creates Options.Stream when it does not exist (once).
func (t *Transport) ensureStream(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.streamReady {
		return nil
	}
	_, err := t.js.Stream(ctx, t.o.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = t.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: t.o.Stream, Subjects: []string{t.o.Subject}, Storage: jetstream.FileStorage, Duplicates: t.o.DuplicateWindow,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("nats: stream %s: %w", t.o.Stream, err)
	}
	t.streamReady = true
	return nil
}

// Publish publishes msgs and waits for every ack (publish.go).
func (t *Transport) Publish(ctx context.Context, msgs []relay.Message) []relay.Result {
	res := make([]relay.Result, len(msgs))
	if err := t.Check(); err != nil {
		return relay.Unavailable(len(msgs), err)
	}
	if err := t.ensureStream(ctx); err != nil {
		return relay.Unavailable(len(msgs), err)
	}
	subj := make([]string, len(msgs))
	idx := make([]int, 0, len(msgs))
	for i := range msgs {
		subject := t.subject(&msgs[i])
		if subject == "" {
			res[i] = relay.Result{Err: fmt.Errorf("nats: no subject: header %q is missing and the URL names no subject", t.o.SubjectHeader), Permanent: true}
			continue
		}
		subj[i] = subject
		idx = append(idx, i)
	}
	if len(idx) > 0 {
		t.publish(ctx, msgs, subj, idx, res)
	}
	return res
}

// subject is m's subject: its SubjectHeader, else Subject; "" when it has
// none.
func (t *Transport) subject(m *relay.Message) string {
	if t.o.SubjectHeader != "" {
		if s := m.Headers[t.o.SubjectHeader]; s != "" {
			return s
		}
	}
	return t.o.Subject
}

// The relay's spans name the broker and the destination.
var _ relay.Describer = (*Transport)(nil)

// MessagingSystem returns "nats", the messaging.system of the relay's
// spans (relay.Describer).
func (t *Transport) MessagingSystem() string { return "nats" }

// Destination returns the subject m is published to, the
// messaging.destination.name of the relay's spans (relay.Describer).
func (t *Transport) Destination(m *relay.Message) string { return t.subject(m) }

// publishHeader fills h with m's publish headers (EachPublishHeader) as a
// NATS header, plus Nats-Msg-Id = the identity (what jetstream.WithMsgID sets), and returns
// vals, the backing array of h's values. The caller reuses h and vals from
// one message to the next (PublishMsg encodes the header before it
// returns): the relay publishes every message with seven headers or more,
// and a map per message cost more than the rest of the header.
func publishHeader(h natsgo.Header, vals []string, m *relay.Message) []string {
	clear(h)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	var id string
	m.EachPublishHeader(func(k, v string) {
		set(k, v)
		if k == relay.HeaderIdentity { // pgsweep's comes last: it wins, as in h
			id = v
		}
	})
	set(jetstream.MsgIDHeader, id)
	return vals
}

// classify turns a publish error into a Result: the connection or the
// stream did not answer → unavailable; the message itself is refused →
// permanent; anything else is retried.
func classify(err error) relay.Result {
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return relay.Result{Err: fmt.Errorf("nats: %w", err), Permanent: true}
	case errors.Is(err, natsgo.ErrNoResponders), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrReconnectBufExceeded),
		errors.Is(err, natsgo.ErrTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return relay.Result{Err: relay.UnavailableError(fmt.Errorf("nats: %w", err))}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return relay.Result{Err: fmt.Errorf("nats: %w", err), Permanent: true}
	}
	return relay.Result{Err: fmt.Errorf("nats: %w", err)}
}

// redactErr drops a URL's password from a parse error.
func redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New(ue.Err.Error())
	}
	return err
}
