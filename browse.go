package pgsweep

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Browsing a queue's messages (sql/functions/browse.sql): the monitor role
// pages through one state of a queue, keyset-paginated by id. Payloads,
// headers and keys come back only to a caller that holds the queue's
// browse right (QueueGrant; by default <schema>_admin); everyone else sees
// ids, states, attempts, times, lanes, errors and sizes.

// Browse states, the values of BrowseMessages' state argument.
const (
	BrowsePending   = "pending"   // waiting for a claim (due, or behind its lane's head)
	BrowseScheduled = "scheduled" // sent for later
	BrowseInFlight  = "in_flight" // leased
	BrowseFailed    = "failed"    // waiting for a retry
	BrowseDead      = "dead"      // dead letters
	BrowseProcessed = "processed" // inbox messages kept for de-duplication
)

// BrowsedMessage is one message as BrowseMessages shows it.
type BrowsedMessage struct {
	ID        int64     `json:"id"`
	State     string    `json:"state"`
	Lane      string    `json:"lane,omitempty"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	// At is the state's time: when a pending message became due (zero while
	// it waits in its lane), a scheduled one's delivery time, an in-flight
	// one's lease expiry, a failed one's retry time, when a dead letter died
	// or an inbox message was processed.
	At time.Time `json:"at"`
	// Holder is the lease's owner of an in-flight message.
	Holder        string `json:"holder,omitempty"`
	WaitingInLane bool   `json:"waiting_in_lane"`
	LastError     string `json:"last_error,omitempty"`
	// PayloadBytes and HeadersBytes are the stored sizes (compressed, when
	// PostgreSQL compressed them).
	PayloadBytes int `json:"payload_bytes"`
	HeadersBytes int `json:"headers_bytes"`
	// Key, Payload and Headers are set only for a caller with the queue's
	// browse right.
	Key     string          `json:"key,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Headers json.RawMessage `json:"headers,omitempty"`
}

// BrowsePage is one page of BrowseMessages.
type BrowsePage struct {
	Messages []BrowsedMessage
	// Next is the after argument of the next page.
	Next int64
	// End says there is no next page.
	End bool
}

// BrowseMessages returns up to limit (1..1000) messages of queue in state
// (Browse*) whose id is greater than after (0 for the first page), oldest id
// first. A page of the live states reads at most 10,000 rows: it may hold
// fewer than limit messages and not be the last (End false); go on from
// Next.
func (c *Client) BrowseMessages(ctx context.Context, queue, state string, after int64, limit int) (BrowsePage, error) {
	return c.BrowseMatching(ctx, queue, state, "", after, limit)
}

// BrowseMatching is BrowseMessages keeping only the messages whose last
// error contains errorContains (case-sensitive, 1..1000 characters; ""
// keeps every message): the dead letters of one cause. Such a page reads
// at most 10,000 rows, dead letters included.
func (c *Client) BrowseMatching(ctx context.Context, queue, state, errorContains string, after int64, limit int) (BrowsePage, error) {
	var filter *string
	if errorContains != "" {
		filter = &errorContains
	}
	rows, err := c.db.Query(ctx, "SELECT "+browseColumns+" FROM "+c.fn("browse_messages")+
		"($1, $2, $3::pg_catalog.int8, $4::pg_catalog.int4, $5::pg_catalog.text)",
		queue, state, after, limit, filter)
	if err != nil {
		return BrowsePage{}, wrapErr("browse_messages", err)
	}
	defer rows.Close()
	page := BrowsePage{Next: after}
	marker := false
	for rows.Next() {
		m, cursor, ok, err := scanBrowsed(rows)
		if err != nil {
			return BrowsePage{}, wrapErr("browse_messages", err)
		}
		page.Next = cursor
		if !ok { // the scan stopped before the page filled
			marker = true
			continue
		}
		page.Messages = append(page.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return BrowsePage{}, wrapErr("browse_messages", err)
	}
	page.End = !marker && len(page.Messages) < limit
	return page, nil
}

// BrowseMessage returns one message of queue by id, in whichever state it
// is (found false when the queue holds no message with that id: never
// sent, completed, or removed by retention). Payload, headers and key as
// for BrowseMessages.
func (c *Client) BrowseMessage(ctx context.Context, queue string, id int64) (m BrowsedMessage, found bool, err error) {
	rows, err := c.db.Query(ctx, "SELECT "+browseColumns+" FROM "+c.fn("browse_message")+"($1, $2::pg_catalog.int8)", queue, id)
	if err != nil {
		return m, false, wrapErr("browse_message", err)
	}
	defer rows.Close()
	if rows.Next() {
		m, _, found, err = scanBrowsed(rows)
		if err != nil {
			return m, false, wrapErr("browse_message", err)
		}
	}
	return m, found, wrapErr("browse_message", rows.Err())
}

const browseColumns = "id, cursor, state, coalesce(lane, ''), coalesce(attempts, 0), created_at, at, " +
	"coalesce(holder, ''), coalesce(waiting_in_lane, false), coalesce(last_error, ''), coalesce(payload_bytes, 0), " +
	"coalesce(headers_bytes, 0), coalesce(key, ''), payload, headers"

// scanBrowsed reads one row of browseColumns; ok is false for the row that
// only says where a stopped scan goes on (no id).
func scanBrowsed(rows pgx.Rows) (m BrowsedMessage, cursor int64, ok bool, err error) {
	var id *int64
	var created, at *time.Time
	var payload, headers []byte
	if err := rows.Scan(&id, &cursor, &m.State, &m.Lane, &m.Attempts, &created, &at, &m.Holder, &m.WaitingInLane, &m.LastError,
		&m.PayloadBytes, &m.HeadersBytes, &m.Key, &payload, &headers); err != nil {
		return m, 0, false, err
	}
	if id == nil {
		return m, cursor, false, nil
	}
	m.ID = *id
	if created != nil {
		m.CreatedAt = *created
	}
	if at != nil {
		m.At = *at
	}
	if payload != nil {
		m.Payload = json.RawMessage(payload)
	}
	if headers != nil {
		m.Headers = json.RawMessage(headers)
	}
	return m, cursor, true, nil
}
