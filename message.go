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
	Queue          string
	ID             int64
	Key            string // empty when the message had no key
	Payload        json.RawMessage
	Headers        map[string]string
	Attempt        int // 1 on the first delivery
	CreatedAt      time.Time
	LeaseExpiresAt time.Time
}

// FailResult tells what Fail did with one message.
type FailResult struct {
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
	Queue      string
	Kind       QueueKind
	Pending    int64
	Processing int64
	Failed     int64
	Processed  int64
	Dead       int64
	// OldestPendingAge is the age of the oldest due, unleased message; zero
	// when there is none.
	OldestPendingAge time.Duration
}

// RecoverResult is what one QueueRecover call did.
type RecoverResult struct {
	Recovered    int // expired leases released (lost leases)
	DeadLettered int // exhausted rows moved to the dead letters
}
