package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

// held is a message the relay holds a claim on.
type held struct {
	msg   Message
	token pgsweep.Token
	// dispatched is when Dispatch was called for it (about when the
	// transaction that sent it committed); zero for a message a claim found.
	dispatched time.Time
}

// db is the relay's side of pgsweep's SQL: claim and claim_ids are read
// column by column (a lane column is taken when claim returns one), the
// acknowledgements go through the Client.
type db struct {
	pool   pgsweep.DBTX
	client *pgsweep.Client
	q      string // quoted schema
	queue  string
	owner  string
	lease  time.Duration
}

func (d *db) fn(name string) string { return d.q + "." + name }

// claim leases up to batch due messages (pgsweep claim: oldest first, and
// one message per lane at a time when the installed pgsweep has lanes).
func (d *db) claim(ctx context.Context, batch int) ([]held, error) {
	rows, err := d.pool.Query(ctx, "SELECT * FROM "+d.fn("claim")+"($1, $2, $3, $4)", d.queue, d.owner, batch, leaseArg(d.lease))
	if err != nil {
		return nil, &pgsweep.Error{Op: "claim", Err: err}
	}
	hs, err := d.scan(rows)
	if err != nil {
		return nil, &pgsweep.Error{Op: "claim", Err: err}
	}
	return hs, nil
}

// claimIDs leases exactly those of ids that are claimable now (claim_ids).
func (d *db) claimIDs(ctx context.Context, ids []int64) ([]held, error) {
	rows, err := d.pool.Query(ctx, "SELECT * FROM "+d.fn("claim_ids")+"($1, $2, $3, $4)", d.queue, d.owner, ids, leaseArg(d.lease))
	if err != nil {
		return nil, &pgsweep.Error{Op: "claim_ids", Err: err}
	}
	hs, err := d.scan(rows)
	if err != nil {
		return nil, &pgsweep.Error{Op: "claim_ids", Err: err}
	}
	return hs, nil
}

// scan reads claim's columns by name, so that a column added to claim's
// result (the lane) is picked up when it is there and nothing breaks while
// it is not.
func (d *db) scan(rows pgx.Rows) ([]held, error) {
	defer rows.Close()
	var (
		id       int64
		key      *string
		lane     *string
		payload  []byte
		headers  []byte
		attempt  int32
		created  time.Time
		expireAt time.Time
		token    pgsweep.Token
		ignore   any
	)
	fds := rows.FieldDescriptions()
	dest := make([]any, len(fds))
	for i, f := range fds {
		switch f.Name {
		case "id":
			dest[i] = &id
		case "key":
			dest[i] = &key
		case "lane":
			dest[i] = &lane
		case "payload":
			dest[i] = &payload
		case "headers":
			dest[i] = &headers
		case "attempt":
			dest[i] = &attempt
		case "created_at":
			dest[i] = &created
		case "lease_expires_at":
			dest[i] = &expireAt
		case "token":
			dest[i] = &token
		default:
			dest[i] = &ignore
		}
	}
	var out []held
	for rows.Next() {
		key, lane = nil, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		h := held{token: token, msg: Message{Queue: d.queue, ID: id, Payload: json.RawMessage(append([]byte(nil), payload...)),
			Attempt: int(attempt), CreatedAt: created}}
		if key != nil {
			h.msg.Key = *key
		}
		if lane != nil {
			h.msg.Lane = *lane
		}
		var err error
		if h.msg.Headers, err = decodeHeaders(headers); err != nil {
			return nil, fmt.Errorf("message %d headers: %w", id, err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// deadLetter moves ids the token holds to the dead letters (a permanent failure).
func (d *db) deadLetter(ctx context.Context, token pgsweep.Token, ids []int64, errText string) ([]int64, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+d.fn("dead_letter")+"($1, $2, $3, $4)", d.queue, token, ids, errText)
	if err != nil {
		return nil, &pgsweep.Error{Op: "dead_letter", Err: err}
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, &pgsweep.Error{Op: "dead_letter", Err: err}
	}
	return done, nil
}

func leaseArg(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d
}

// decodeHeaders turns the headers object into a map; values that are not
// JSON strings keep their JSON text (as pgsweep's Delivery does).
func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "{}" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out, nil
}
