package pgsweep

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Message is what Send puts on a queue.
type Message struct {
	// Payload is the message body, any JSON value. Required.
	Payload json.RawMessage
	// Headers is a JSON object of metadata; nil means {}.
	Headers map[string]string
	// Key is optional. On inbox queues it is the message's identity: a second
	// message with the same key is refused (Send returns ok=false) while the
	// first is live or kept as processed. On outbox queues it is stored as is.
	Key string
	// DeliverAt schedules the message: it is not claimed before that time.
	// The zero value means now.
	DeliverAt time.Time
	// Lane puts the message in an ordered lane of its queue (at most 200
	// characters; empty: no lane). The messages of one lane are handed out
	// one at a time, in the order their sends committed: the next only once
	// the one before it was completed or dead-lettered. Different lanes, and
	// messages without a lane, are worked in parallel. docs/queues.md,
	// "Ordered lanes".
	Lane string
	// UniqueKey makes the send unique on its queue (any queue kind; at most
	// 1000 characters; empty: none): while a message of the queue with this
	// key is pending, scheduled, in flight or waiting for a retry (and for
	// UniqueFor after it was sent), the send inserts nothing and returns that
	// message's id as a duplicate. Not with an inbox Key. docs/queues.md,
	// "Unique sends".
	UniqueKey string
	// UniqueFor keeps UniqueKey taken for this long after the send (1 second
	// to 365 days), even once the message was completed; 0: only while it is
	// in the queue. Needs UniqueKey.
	UniqueFor time.Duration
	// Priority: due messages are claimed highest priority first, then oldest
	// first; -100..100, default 0. A lane stays in its order: its head
	// competes with its own priority. docs/queues.md, "Priorities".
	Priority int16
	// Group puts the message in a group of its queue (a tenant, a customer,
	// a downstream host; at most 200 characters, empty: none). Claims take
	// turns between the groups with due messages, so one group's backlog
	// does not starve the others, and the queue's group_max_in_flight and
	// group_overrides (QueueConfigure) bound each group's leases. A message
	// may have a Lane too: the lane orders it, the group gives it its turns.
	Group string
}

// SendResult is what a send did with one message.
type SendResult struct {
	// ID is the new message's id; for a unique duplicate, the id of the
	// message that holds the key (it may be completed already when the key
	// is held by its UniqueFor window); 0 for an inbox duplicate.
	ID int64
	// Duplicate is true when nothing was inserted: an inbox key already
	// seen, or a UniqueKey held.
	Duplicate bool
}

// Delivery is a claimed message: the caller holds its lease until
// LeaseExpiresAt and must Complete, Fail or Renew it before then.
type Delivery struct {
	// Queue is the queue the message was claimed from.
	Queue string
	// ID is the message's id, stable across retries, processing and dead-lettering.
	ID int64
	// Key is the message's key; empty when it had none.
	Key string
	// Payload is the message body as sent.
	Payload json.RawMessage
	// Headers are the message's headers; nil when there were none.
	Headers map[string]string
	// Attempt counts the claims of this message, 1 on the first delivery.
	Attempt int
	// CreatedAt is when the message was sent (the order claims follow).
	CreatedAt time.Time
	// LeaseExpiresAt is the lease's expiry when it was claimed, on the
	// database clock. A Worker's renewals move the lease on without updating
	// this field.
	LeaseExpiresAt time.Time
	// Lane is the message's ordered lane; empty when it has none. No other
	// message of its lane is delivered until this one is completed or
	// dead-lettered.
	Lane string
	// Token is the fence of the claim that delivered the message: Renew,
	// Complete, Fail and Release act on the message only with this token and
	// only while that claim holds it. Every claim call draws a new token
	// (shared by all the deliveries it returns), so once the lease expired
	// and the message was claimed again -- by anyone, the same owner
	// included -- this token acts on nothing.
	Token Token
}

// Token is the fence of one claim call: a random UUID (version 4) that
// claim stores in the rows it takes and returns with each of them. The zero
// Token is no token: the SQL refuses it (ErrInvalidArgument).
type Token [16]byte

// ParseToken reads a token in the UUID text form claim returns in psql
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).
func ParseToken(s string) (Token, error) {
	var t Token
	err := t.UnmarshalText([]byte(s))
	return t, err
}

// IsZero reports whether t is the zero Token (no token).
func (t Token) IsZero() bool { return t == Token{} }

// String returns the token's UUID text form.
func (t Token) String() string {
	var b [36]byte
	hex.Encode(b[0:8], t[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], t[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], t[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], t[8:10])
	b[23] = '-'
	hex.Encode(b[24:], t[10:])
	return string(b[:])
}

// MarshalText returns the UUID text form (so a token survives JSON).
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText reads the UUID text form.
func (t *Token) UnmarshalText(b []byte) error {
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return fmt.Errorf("pgsweep: token %q is not a UUID", b)
	}
	var h [32]byte
	copy(h[0:8], b[0:8])
	copy(h[8:12], b[9:13])
	copy(h[12:16], b[14:18])
	copy(h[16:20], b[19:23])
	copy(h[20:], b[24:])
	if _, err := hex.Decode(t[:], h[:]); err != nil {
		return fmt.Errorf("pgsweep: token %q is not a UUID", b)
	}
	return nil
}

// ScanUUID lets pgx scan a uuid column into a Token (NULL: the zero Token).
func (t *Token) ScanUUID(v pgtype.UUID) error {
	*t = Token(v.Bytes)
	if !v.Valid {
		*t = Token{}
	}
	return nil
}

// UUIDValue lets pgx send a Token as a uuid; the zero Token is sent as NULL.
func (t Token) UUIDValue() (pgtype.UUID, error) {
	return pgtype.UUID{Bytes: t, Valid: !t.IsZero()}, nil
}

// FailResult tells what Fail did with one message.
type FailResult struct {
	// ID is the message's id. Fail returns a result only for the ids it
	// acted on (those the token's claim held).
	ID   int64
	Dead bool // true: it used its last attempt and moved to the dead letters
}

// QueueKind is the kind of a queue.
type QueueKind string

// Queue kinds: outbox rows are deleted on completion; inbox rows are kept as
// processed (for de-duplication by key) until retention removes them.
const (
	Outbox QueueKind = "outbox"
	Inbox  QueueKind = "inbox"
)

// QueueStats is one row of the queue_stats view.
type QueueStats struct {
	// Queue is the queue's name.
	Queue string
	// Kind is outbox or inbox.
	Kind QueueKind
	// Pending counts messages waiting for their first claim, scheduled ones included.
	Pending int64
	// Processing counts leased messages, live or expired leases.
	Processing int64
	// Failed counts messages waiting for a retry.
	Failed int64
	// Processed counts completed inbox messages kept for de-duplication.
	Processed int64
	// Dead counts dead letters.
	Dead int64
	// OldestPendingAge is the age of the oldest due, unleased message that
	// a claim could take (not one waiting behind its lane's head); zero
	// when there is none.
	OldestPendingAge time.Duration
	// Paused: QueuePause stopped its claims.
	Paused bool
	// Lanes counts the lanes with messages (or blocked).
	Lanes int64
	// BlockedLanes counts the lanes stopped by a dead letter (lane_dead
	// "block"), waiting for RequeueDead or LaneSkip.
	BlockedLanes int64
}

// LaneStats is one row of lane_stats: a lane of a queue and its head.
type LaneStats struct {
	Queue string
	Lane  string
	// Waiting counts the messages waiting behind the lane's head (or behind
	// the dead letter that blocks it); the head itself is not counted.
	Waiting int64
	// HeadID is the lane's head; for a blocked lane, the dead letter it
	// waits for.
	HeadID int64
	// HeadAttempt counts the head's attempts so far.
	HeadAttempt int
	// HeadState is pending, scheduled, processing, failed (waiting for its
	// retry) or dead (the lane is blocked).
	HeadState string
	// OldestAge is the age of the lane's oldest message.
	OldestAge time.Duration
}

// RecoverResult is what one QueueRecover call did.
type RecoverResult struct {
	Recovered    int // expired leases released (lost leases)
	DeadLettered int // exhausted rows moved to the dead letters
}
