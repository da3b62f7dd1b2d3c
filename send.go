package pgsweep

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Send puts m on queue in schema pgsweep, using db: pass the application's
// pgx.Tx to make the message part of that transaction (the point of an
// outbox), or a pool or connection to send on its own. It returns the
// message id, and ok=false (id 0) when an inbox queue refused a duplicate key.
// Listeners on the schema's channel are notified when the transaction commits.
// Use Client.WithDB(tx).Send for another schema.
func Send(ctx context.Context, db DBTX, queue string, m Message) (id int64, ok bool, err error) {
	return defaultClient(db).Send(ctx, queue, m)
}

// SendBatch sends many messages at once (1 to 10000) in schema pgsweep and
// returns one id per message in order; 0 marks an inbox duplicate. Messages
// of one lane (Message.Lane) keep their order in ms.
func SendBatch(ctx context.Context, db DBTX, queue string, ms []Message) ([]int64, error) {
	return defaultClient(db).SendBatch(ctx, queue, ms)
}

func defaultClient(db DBTX) *Client {
	return &Client{db: db, schema: DefaultSchema, q: pgx.Identifier{DefaultSchema}.Sanitize()}
}

// Send puts m on queue; see the package-level Send. ok is false when
// nothing was inserted: an inbox duplicate (id 0) or a unique duplicate
// (m.UniqueKey held: id is the holder's). SendResult says which.
//
// The message carries the creation context of ctx's span as the headers
// traceparent and tracestate (unless m.Headers sets a traceparent): Send
// starts a producer span "send <queue>" under ctx's span
// (docs/tracing.md).
func (c *Client) Send(ctx context.Context, queue string, m Message) (int64, bool, error) {
	ctx, span := c.startSend(ctx, queue, 1)
	m.Headers = injectTrace(ctx, m.Headers)
	id, ok, err := c.send(ctx, queue, m)
	endSend(span, id, err)
	return id, ok, err
}

func (c *Client) send(ctx context.Context, queue string, m Message) (int64, bool, error) {
	if m.UniqueKey != "" || m.UniqueFor != 0 || m.Priority != 0 || m.Group != "" {
		r, err := c.sendResult(ctx, queue, m)
		return r.ID, err == nil && !r.Duplicate, err
	}
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return 0, false, errorf("send", "headers: %w", err)
	}
	var id *int64
	args := []any{queue, payloadArg(m.Payload), headers, nullString(m.Key), nullTime(m.DeliverAt)}
	sql := "SELECT " + c.fn("send") + "($1, $2, $3, $4, $5)"
	if m.Lane != "" { // without a lane, the call any version of send takes
		sql = "SELECT " + c.fn("send") + "($1, $2, $3, $4, $5, $6)"
		args = append(args, m.Lane)
	}
	err = c.db.QueryRow(ctx, sql, args...).Scan(&id)
	if err != nil {
		return 0, false, wrapErr("send", err)
	}
	if id == nil {
		return 0, false, nil
	}
	return *id, true, nil
}

// SendResult sends m as Send does and says whether it was a duplicate
// (SQL send_unique). Use it with Message.UniqueKey to learn that a send was
// skipped and which message holds the key.
func (c *Client) SendResult(ctx context.Context, queue string, m Message) (SendResult, error) {
	ctx, span := c.startSend(ctx, queue, 1)
	m.Headers = injectTrace(ctx, m.Headers)
	r, err := c.sendResult(ctx, queue, m)
	endSend(span, r.ID, err)
	return r, err
}

func (c *Client) sendResult(ctx context.Context, queue string, m Message) (SendResult, error) {
	headers, err := encodeHeaders(m.Headers)
	if err != nil {
		return SendResult{}, errorf("send", "headers: %w", err)
	}
	var id *int64
	var r SendResult
	err = c.db.QueryRow(ctx, "SELECT s.id, s.duplicate FROM "+c.fn("send_unique")+
		"($1::pg_catalog.text, $2::pg_catalog.jsonb, $3::pg_catalog.jsonb, $4::pg_catalog.text, $5::pg_catalog.timestamptz, "+
		"$6::pg_catalog.text, $7::pg_catalog.text, $8::pg_catalog.interval, $9::pg_catalog.int2, $10::pg_catalog.text) s",
		queue, payloadArg(m.Payload), headers, nullString(m.Key), nullTime(m.DeliverAt),
		nullString(m.Lane), nullString(m.UniqueKey), nullDuration(m.UniqueFor), m.Priority, nullString(m.Group)).Scan(&id, &r.Duplicate)
	if err != nil {
		return SendResult{}, wrapErr("send", err)
	}
	if id != nil {
		r.ID = *id
	}
	return r, nil
}

// SendBatch sends ms in one call; see the package-level SendBatch. A unique
// duplicate's element is the id of the message that holds its key;
// SendBatchResults says which elements are duplicates.
func (c *Client) SendBatch(ctx context.Context, queue string, ms []Message) ([]int64, error) {
	rs, err := c.sendBatch(ctx, queue, ms, false)
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids, nil
}

// SendBatchResults is SendBatch with one SendResult per message, in order
// (SQL send_batch_unique): Duplicate says the message was not inserted.
func (c *Client) SendBatchResults(ctx context.Context, queue string, ms []Message) ([]SendResult, error) {
	return c.sendBatch(ctx, queue, ms, true)
}

func (c *Client) sendBatch(ctx context.Context, queue string, ms []Message, results bool) ([]SendResult, error) {
	ctx, span := c.startSend(ctx, queue, len(ms))
	rs, err := c.sendBatchTraced(ctx, queue, ms, results)
	endSend(span, 0, err)
	return rs, err
}

// sendBatchTraced sends ms, each with the creation context of ctx's span
// (the batch's send span) unless it set a traceparent of its own.
func (c *Client) sendBatchTraced(ctx context.Context, queue string, ms []Message, results bool) ([]SendResult, error) {
	tc := injectTrace(ctx, nil) // the batch's traceparent and tracestate; nil: none
	payloads := make([]*string, len(ms))
	headers := make([]*string, len(ms))
	var keys, lanes, uniques, groups []*string
	var at []*time.Time
	var uniqueFor []*time.Duration
	var priorities []int16
	for i, m := range ms {
		if m.Payload != nil {
			p := string(m.Payload)
			payloads[i] = &p
		}
		if tc != nil {
			m.Headers = withTrace(m.Headers, tc)
		}
		if m.Headers != nil {
			b, err := json.Marshal(m.Headers)
			if err != nil {
				return nil, errorf("send_batch", "message %d headers: %w", i, err)
			}
			h := string(b)
			headers[i] = &h
		}
		if m.Key != "" {
			if keys == nil {
				keys = make([]*string, len(ms))
			}
			k := m.Key
			keys[i] = &k
		}
		if !m.DeliverAt.IsZero() {
			if at == nil {
				at = make([]*time.Time, len(ms))
			}
			t := m.DeliverAt
			at[i] = &t
		}
		if m.Lane != "" {
			if lanes == nil {
				lanes = make([]*string, len(ms))
			}
			l := m.Lane
			lanes[i] = &l
		}
		if m.UniqueKey != "" {
			if uniques == nil {
				uniques = make([]*string, len(ms))
			}
			u := m.UniqueKey
			uniques[i] = &u
		}
		if m.UniqueFor != 0 {
			if uniqueFor == nil {
				uniqueFor = make([]*time.Duration, len(ms))
			}
			d := m.UniqueFor
			uniqueFor[i] = &d
		}
		if m.Group != "" {
			if groups == nil {
				groups = make([]*string, len(ms))
			}
			g := m.Group
			groups[i] = &g
		}
		if m.Priority != 0 && priorities == nil {
			priorities = make([]int16, len(ms))
		}
		if priorities != nil {
			priorities[i] = m.Priority
		}
	}
	const head = "$2::pg_catalog.jsonb[], $3::pg_catalog.jsonb[], $4::pg_catalog.text[], $5::pg_catalog.timestamptz[]"
	sql := "SELECT " + c.fn("send_batch") + "($1, " + head + ")"
	args := []any{queue, payloads, headers, keys, at}
	switch {
	case results || uniques != nil || uniqueFor != nil || priorities != nil || groups != nil:
		sql = "SELECT b.id, b.duplicate FROM " + c.fn("send_batch_unique") + "($1::pg_catalog.text, " + head +
			", $6::pg_catalog.text[], $7::pg_catalog.text[], $8::pg_catalog.interval[], $9::pg_catalog.int2[], $10::pg_catalog.text[]) b"
		args = append(args, lanes, uniques, uniqueFor, priorities, groups)
		results = true
	case lanes != nil:
		sql = "SELECT " + c.fn("send_batch") + "($1, " + head + ", $6::pg_catalog.text[])"
		args = append(args, lanes)
	}
	rows, err := c.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrapErr("send_batch", err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SendResult, error) {
		var id *int64
		var res SendResult
		var err error
		if results {
			err = r.Scan(&id, &res.Duplicate)
		} else {
			err = r.Scan(&id)
			res.Duplicate = id == nil
		}
		if id != nil {
			res.ID = *id
		}
		return res, err
	})
	return rs, wrapErr("send_batch", err)
}

// nullDuration passes 0 as NULL.
func nullDuration(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d
}

// payloadArg passes a payload as JSON text (nil stays NULL, which the SQL
// rejects with an invalid-argument error).
func payloadArg(p json.RawMessage) any {
	if p == nil {
		return nil
	}
	return string(p)
}

func encodeHeaders(h map[string]string) (any, error) {
	if h == nil {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
