package relay

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"
)

// Message is one outbox message as a Transport publishes it.
type Message struct {
	// Queue is the pgsweep queue the message was claimed from.
	Queue string
	// ID is the message's id in its queue, stable across retries.
	ID int64
	// Key is the message's key; empty when it has none.
	Key string
	// Lane is the message's ordered lane; empty when it has none (or the
	// installed pgsweep has no lanes). Messages of one lane reach the
	// Transport one at a time, oldest first.
	Lane string
	// Payload is the message body as sent: a JSON value.
	Payload json.RawMessage
	// Headers are the message's own headers; nil when there were none.
	Headers map[string]string
	// Attempt counts the claims of the message, 1 on its first publish.
	Attempt int
	// CreatedAt is when the message was sent (the database clock).
	CreatedAt time.Time
}

// Identity is the message's stable identity: its key when it has one, else
// "<queue>/<id>". A Transport gives it to the broker as the message id
// (JetStream's Nats-Msg-Id, AMQP's message_id), so that the replay of a
// message the broker accepted but the database did not record as published
// (a crash in between) is recognised: JetStream's duplicate window drops it,
// a consumer's inbox de-duplicates it. Messages that share a key share the
// identity: a key is the sender's idempotency key.
func (m *Message) Identity() string {
	if m.Key != "" {
		return m.Key
	}
	return m.Queue + "/" + strconv.FormatInt(m.ID, 10)
}

// The headers every Transport adds to a published message (besides the
// message's own headers, which are published as they are).
const (
	HeaderIdentity  = "pgsweep-identity"   // Identity()
	HeaderQueue     = "pgsweep-queue"      // the queue
	HeaderID        = "pgsweep-id"         // the message's id in its queue
	HeaderAttempt   = "pgsweep-attempt"    // 1 on the first publish
	HeaderCreatedAt = "pgsweep-created-at" // RFC 3339 with nanoseconds, UTC
	HeaderLane      = "pgsweep-lane"       // the lane, when the message has one
)

// PublishHeaders returns the headers a Transport publishes with m: the
// message's own, then pgsweep's (which win over a message header of the
// same name).
func (m *Message) PublishHeaders() map[string]string {
	h := make(map[string]string, len(m.Headers)+6)
	m.EachPublishHeader(func(k, v string) { h[k] = v })
	return h
}

// EachPublishHeader calls f with each header of PublishHeaders, in that
// order (a later call for the same name wins), without building a map: for
// a Transport that encodes headers its own way per message.
func (m *Message) EachPublishHeader(f func(k, v string)) {
	for k, v := range m.Headers {
		f(k, v)
	}
	f(HeaderIdentity, m.Identity())
	f(HeaderQueue, m.Queue)
	f(HeaderID, strconv.FormatInt(m.ID, 10))
	f(HeaderAttempt, strconv.Itoa(m.Attempt))
	f(HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	if m.Lane != "" {
		f(HeaderLane, m.Lane)
	}
}

// Result is what became of one published message.
type Result struct {
	// Err is nil when the broker confirmed the message (it is stored: the
	// relay completes it). Otherwise the message was not confirmed.
	Err error
	// Permanent marks a failure no retry can mend (the broker refuses the
	// message itself: too large, an invalid subject): the relay moves the
	// message to the dead letters at once. Other failures are retried after
	// the queue's backoff and dead-lettered after its last attempt.
	Permanent bool
}

// ErrUnavailable is wrapped by a Result's Err when the broker could not be
// reached (no connection, the connection dropped before the confirmation,
// the broker did not answer in time). The relay then gives the message back
// without spending an attempt (release) and pauses until the broker answers
// again: an outage never dead-letters a message. The broker may still have
// stored a message whose confirmation was lost: its replay carries the same
// identity.
var ErrUnavailable = errors.New("broker unavailable")

// Transport publishes messages to a broker. Publish must return one Result
// per message, in order, and only once every message is confirmed or has
// failed; it must give up when ctx is done (the messages not confirmed by
// then fail with ErrUnavailable). Messages in one call belong to different
// lanes (at most one message per lane). The relay calls Publish from several
// goroutines at once.
type Transport interface {
	Publish(ctx context.Context, msgs []Message) []Result
	// Close releases the broker connection. The relay never calls it: the
	// caller that made the transport closes it after the relay stopped.
	Close() error
}

// Unavailable returns n results that failed with err wrapped in
// ErrUnavailable: a Transport's answer when it has no connection.
func Unavailable(n int, err error) []Result {
	rs := make([]Result, n)
	e := UnavailableError(err)
	if e == nil {
		e = ErrUnavailable
	}
	for i := range rs {
		rs[i] = Result{Err: e}
	}
	return rs
}

// UnavailableError wraps err so that errors.Is(e, ErrUnavailable) holds.
func UnavailableError(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return unavailableError{err}
}

type unavailableError struct{ err error }

func (u unavailableError) Error() string   { return "broker unavailable: " + u.err.Error() }
func (u unavailableError) Unwrap() []error { return []error{ErrUnavailable, u.err} }
