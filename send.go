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

// Send puts m on queue; see the package-level Send.
func (c *Client) Send(ctx context.Context, queue string, m Message) (int64, bool, error) {
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

// SendBatch sends ms in one call; see the package-level SendBatch.
func (c *Client) SendBatch(ctx context.Context, queue string, ms []Message) ([]int64, error) {
	payloads := make([]*string, len(ms))
	headers := make([]*string, len(ms))
	var keys, lanes []*string
	var at []*time.Time
	for i, m := range ms {
		if m.Payload != nil {
			p := string(m.Payload)
			payloads[i] = &p
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
	}
	sql := "SELECT " + c.fn("send_batch") + "($1, $2::pg_catalog.jsonb[], $3::pg_catalog.jsonb[], $4::pg_catalog.text[], $5::pg_catalog.timestamptz[])"
	args := []any{queue, payloads, headers, keys, at}
	if lanes != nil {
		sql = "SELECT " + c.fn("send_batch") + "($1, $2::pg_catalog.jsonb[], $3::pg_catalog.jsonb[], $4::pg_catalog.text[], $5::pg_catalog.timestamptz[], $6::pg_catalog.text[])"
		args = append(args, lanes)
	}
	rows, err := c.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrapErr("send_batch", err)
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var id *int64
		if err := r.Scan(&id); err != nil || id == nil {
			return 0, err
		}
		return *id, nil
	})
	return ids, wrapErr("send_batch", err)
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
