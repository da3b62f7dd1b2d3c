package pgsweep

import (
	"encoding/json"
	"time"
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
}

// FailResult tells what Fail did with one message.
type FailResult struct {
	// ID is the message's id. Fail returns a result only for the ids it
	// acted on (those owner held).
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
	// OldestPendingAge is the age of the oldest due, unleased message; zero
	// when there is none.
	OldestPendingAge time.Duration
}

// RecoverResult is what one QueueRecover call did.
type RecoverResult struct {
	Recovered    int // expired leases released (lost leases)
	DeadLettered int // exhausted rows moved to the dead letters
}
