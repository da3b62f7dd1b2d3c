package pgsweep

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Claim leases up to batch (1..10000) due messages of queue for lease (1
// second..1 hour; 0 means the queue's lease_default), oldest first. Rows
// other claimers hold are skipped, never waited for. Owner is a label (who
// holds the messages, for people and metrics); the fence is the Token every
// returned Delivery carries, the same for all of them and new for every
// call: pass it to Renew, Complete, Fail and Release. The SQL checks the
// arguments (ErrInvalidArgument).
func (c *Client) Claim(ctx context.Context, queue, owner string, batch int, lease time.Duration) ([]Delivery, error) {
	rows, err := c.db.Query(ctx, c.claimSQL(), queue, owner, batch, leaseArg(lease))
	if err != nil {
		return nil, wrapErr("claim", err)
	}
	ds, err := scanDeliveries(rows, queue, batch)
	return ds, wrapErr("claim", err)
}

// ClaimIDs leases exactly those of ids that claim would hand out now (due,
// not in flight, not waiting behind their lane's head), in one claim with
// one token: what direct dispatch calls after the sending transaction
// commits. See the SQL claim_ids.
//
// A call of at most claimIDsGenericMax ids on a pool, or on a connection
// outside a transaction, runs with plan_cache_mode force_generic_plan for
// its own (implicit) transaction: direct dispatch calls claim_ids for one or
// a few ids at a time, and the custom plans PostgreSQL keeps choosing for
// its statements cost more to plan than the generic plans cost to run
// (measured: 0.21 ms against 0.09 ms per call of one id). The setting and
// the call are pipelined in one round trip and one transaction, which ends
// the setting with it. Larger calls, where a plan for the actual ids pays
// off (1,000 ids: about 40 ms custom, 100 ms generic), and calls inside a
// caller's transaction (a pgx.Tx, a connection in a transaction) run plain.
func (c *Client) ClaimIDs(ctx context.Context, queue, owner string, ids []int64, lease time.Duration) ([]Delivery, error) {
	q := "SELECT id, key, payload, headers, attempt, created_at, lease_expires_at, token, lane FROM " +
		c.fn("claim_ids") + "($1, $2, $3, $4)"
	if bs, ok := c.genericPlanSender(); ok && len(ids) <= claimIDsGenericMax {
		b := &pgx.Batch{}
		b.Queue("SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)")
		b.Queue(q, queue, owner, ids, leaseArg(lease))
		br := bs.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, wrapErr("claim_ids", err)
		}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return nil, wrapErr("claim_ids", err)
		}
		ds, err := scanDeliveries(rows, queue, len(ids))
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, wrapErr("claim_ids", err)
		}
		return ds, nil
	}
	rows, err := c.db.Query(ctx, q, queue, owner, ids, leaseArg(lease))
	if err != nil {
		return nil, wrapErr("claim_ids", err)
	}
	ds, err := scanDeliveries(rows, queue, len(ids))
	return ds, wrapErr("claim_ids", err)
}

// claimIDsGenericMax is the most ids ClaimIDs claims with generic plans.
const claimIDsGenericMax = 64

// genericPlanSender returns the client's DBTX as a batchSender when a batch
// it sends runs in a transaction of its own (a pool; a connection that is
// not in a transaction), so a transaction-local setting in the batch ends
// with it.
func (c *Client) genericPlanSender() (batchSender, bool) {
	switch db := c.db.(type) {
	case *pgxpool.Pool:
		return db, true
	case *pgx.Conn:
		return db, db.PgConn().TxStatus() == 'I'
	}
	return nil, false
}

func (c *Client) claimSQL() string {
	return "SELECT id, key, payload, headers, attempt, created_at, lease_expires_at, token, lane FROM " +
		c.fn("claim") + "($1, $2, $3, $4)"
}

// batchSender is implemented by *pgxpool.Pool, *pgx.Conn and pgx.Tx.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// CompleteAndClaim completes done (ids of the claim whose token is token)
// and claims up to batch more messages for owner, in one round trip and one
// transaction when the client's DBTX can pipeline (a pool, connection or
// transaction can): the loop of a worker that finished a batch and wants
// the next. It returns the ids completed and the new deliveries (with their
// new token). With no done ids it is Claim. On an error from a pipelined
// call nothing was done (one transaction) and the ids are nil; without
// pipelining the completion is committed first, and its ids are returned
// even when the claim then fails.
func (c *Client) CompleteAndClaim(ctx context.Context, queue, owner string, token Token, done []int64, batch int, lease time.Duration) ([]int64, []Delivery, error) {
	var acks []ackGroup
	if len(done) > 0 {
		acks = []ackGroup{{token: token, ids: done, lanes: true}}
	}
	byGroup, ds, err := c.completeAndClaim(ctx, queue, owner, acks, batch, lease)
	if len(byGroup) == 0 {
		return nil, ds, err
	}
	return byGroup[0], ds, err
}

// ackGroup is ids of one claim, to complete under its token.
type ackGroup struct {
	token Token
	ids   []int64
	// lanes: some of ids are lane messages (or may be: the caller does not
	// know). Several groups are then completed one transaction each.
	lanes bool
}

// canPipeline reports whether CompleteAndClaim runs in one round trip.
func (c *Client) canPipeline() bool {
	_, ok := c.db.(batchSender)
	return ok
}

// completeAndClaim is CompleteAndClaim for the ids of several claims: the
// complete of one token and the claim, pipelined in one transaction. It
// returns, for each group of acks, the ids completed, or nil for a group
// whose complete was not committed: all nil after an error of the pipelined
// call (one transaction); without pipelining, the groups before the one
// that failed stand, and the claim's error leaves every group's result.
//
// Several tokens with lane messages among them are completed one call (one
// transaction) each, before the claim: each complete locks the lanes of its
// messages in name order (lane.sql), and two completes in one transaction
// would lock a second set after the first -- out of name order -- and
// deadlock with a send_batch locking the same lanes in name order (seen:
// TestWorkerLanesKeepOrder...). Groups without lane messages lock only
// their own rows, which no one else waits for while the leases hold: they
// are pipelined with the claim in one round trip, whatever their number.
func (c *Client) completeAndClaim(ctx context.Context, queue, owner string, acks []ackGroup, batch int, lease time.Duration) ([][]int64, []Delivery, error) {
	if len(acks) == 0 {
		ds, err := c.Claim(ctx, queue, owner, batch, lease)
		return nil, ds, err
	}
	byGroup := make([][]int64, len(acks))
	bs, ok := c.db.(batchSender)
	if !ok || (len(acks) > 1 && slices.ContainsFunc(acks, func(a ackGroup) bool { return a.lanes })) {
		for i, a := range acks {
			done, err := c.Complete(ctx, queue, a.token, a.ids)
			if err != nil {
				return byGroup, nil, err // the earlier completions stand
			}
			byGroup[i] = append([]int64{}, done...)
		}
		ds, err := c.Claim(ctx, queue, owner, batch, lease)
		return byGroup, ds, err // the completions stand even if the claim failed
	}
	b := &pgx.Batch{}
	for _, a := range acks {
		b.Queue("SELECT "+c.fn("complete")+"($1, $2, $3)", queue, a.token, a.ids)
	}
	b.Queue(c.claimSQL(), queue, owner, batch, leaseArg(lease))
	br := bs.SendBatch(ctx, b)
	for i := range acks {
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return nil, nil, wrapErr("complete", err)
		}
		done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			_ = br.Close()
			return nil, nil, wrapErr("complete", err)
		}
		byGroup[i] = append([]int64{}, done...)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, nil, wrapErr("claim", err)
	}
	ds, err := scanDeliveries(rows, queue, batch)
	if err != nil {
		_ = br.Close()
		return nil, nil, wrapErr("claim", err)
	}
	if err := br.Close(); err != nil {
		return nil, nil, wrapErr("claim", err)
	}
	return byGroup, ds, nil
}

// scanDeliveries reads claim's rows, which the SQL returns oldest first.
func scanDeliveries(rows pgx.Rows, queue string, batch int) ([]Delivery, error) {
	defer rows.Close()
	out := make([]Delivery, 0, min(max(batch, 0), 1000))
	var (
		key      *string
		payload  []byte
		headers  []byte
		attempt  int32
		created  time.Time
		expireAt time.Time
		id       int64
		token    Token
		lane     *string
	)
	for rows.Next() {
		if err := rows.Scan(&id, &key, &payload, &headers, &attempt, &created, &expireAt, &token, &lane); err != nil {
			return nil, err
		}
		d := Delivery{Queue: queue, ID: id, Payload: json.RawMessage(append([]byte(nil), payload...)),
			Attempt: int(attempt), CreatedAt: created, LeaseExpiresAt: expireAt, Token: token}
		if key != nil {
			d.Key = *key
		}
		if lane != nil {
			d.Lane = *lane
		}
		var err error
		if d.Headers, err = decodeHeaders(headers); err != nil {
			return nil, fmt.Errorf("message %d headers: %w", id, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Renew extends the leases of the claim whose token is token on ids to
// lease from now (0: the queue's lease_default) and returns the ids it still
// held: an id missing from the result is a lost lease (claimed again, by
// anyone, or recovered).
func (c *Client) Renew(ctx context.Context, queue string, token Token, ids []int64, lease time.Duration) ([]int64, error) {
	return c.ids(ctx, "renew", "SELECT "+c.fn("renew")+"($1, $2, $3, $4)", queue, token, ids, leaseArg(lease))
}

// Complete acknowledges ids that the claim whose token is token holds and
// returns those it acted on. Outbox messages are deleted; inbox messages are
// kept as processed.
func (c *Client) Complete(ctx context.Context, queue string, token Token, ids []int64) ([]int64, error) {
	return c.ids(ctx, "complete", "SELECT "+c.fn("complete")+"($1, $2, $3)", queue, token, ids)
}

// DeadLetter moves ids the claim whose token is token holds to the dead
// letters at once, whatever attempts they have left (a permanent failure,
// such as a broker refusing the message for good). See the SQL dead_letter.
func (c *Client) DeadLetter(ctx context.Context, queue string, token Token, ids []int64, errText string) ([]int64, error) {
	return c.ids(ctx, "dead_letter", "SELECT "+c.fn("dead_letter")+"($1, $2, $3, $4)", queue, token, ids, errText)
}

// Fail reports that processing ids failed with errText. Messages with
// attempts left are retried after retryAfter (0: the queue's exponential
// backoff; the SQL refuses a delay out of its range with
// ErrInvalidArgument); those that used their last attempt move to the dead
// letters. It acts only on ids the claim whose token is token holds and
// returns what it did with each.
func (c *Client) Fail(ctx context.Context, queue string, token Token, ids []int64, errText string, retryAfter time.Duration) ([]FailResult, error) {
	if retryAfter != 0 {
		return c.fail(ctx, queue, token, ids, errText, &retryAfter)
	}
	return c.fail(ctx, queue, token, ids, errText, nil)
}

func (c *Client) ids(ctx context.Context, op, sql string, args ...any) ([]int64, error) {
	rows, err := c.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, wrapErr(op, err)
}

func leaseArg(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d
}

// decodeHeaders turns the headers object into a map; values that are not
// JSON strings keep their JSON text.
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

// QueueCreate creates queue (idempotent); see the SQL queue_create.
func (c *Client) QueueCreate(ctx context.Context, queue string, kind QueueKind, maxAttempts int) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("queue_create")+"($1, $2, $3)", queue, string(kind), maxAttempts)
	return wrapErr("queue_create", err)
}

// QueueConfigure changes a queue's settings: keys max_attempts, backoff_base,
// backoff_max, backoff_jitter (a number 0..1), lease_default, claim_rescan,
// processed_retention, dead_retention (intervals as PostgreSQL interval text
// such as "30 seconds"; nil retention = forever), lane_dead ("move_on" or
// "block"), and flow control (docs/queues.md, "Flow control"): max_in_flight,
// rate ("N/s", "N/min"), rate_burst, group_max_in_flight and
// group_overrides (map[string]any{"acme": map[string]any{"max_in_flight":
// 10}}; a group mapped to nil loses its override). docs/queues.md has the
// ranges; a value out of range is an ErrInvalidArgument and changes nothing.
func (c *Client) QueueConfigure(ctx context.Context, queue string, settings map[string]any) error {
	b, err := json.Marshal(settings)
	if err != nil {
		return errorf("queue_configure", "settings: %w", err)
	}
	_, err = c.db.Exec(ctx, "SELECT "+c.fn("queue_configure")+"($1, $2)", queue, string(b))
	return wrapErr("queue_configure", err)
}

// QueueRecover runs one recovery pass over queue (at most batch rows):
// expired leases are released, exhausted expired rows are dead-lettered.
func (c *Client) QueueRecover(ctx context.Context, queue string, batch int) (RecoverResult, error) {
	var r RecoverResult
	err := c.db.QueryRow(ctx, "SELECT recovered, dead_lettered FROM "+c.fn("queue_recover")+"($1, $2)", queue, batch).
		Scan(&r.Recovered, &r.DeadLettered)
	return r, wrapErr("queue_recover", err)
}

// QueueStats reads the queue_stats view, ordered by queue.
func (c *Client) QueueStats(ctx context.Context) ([]QueueStats, error) {
	rows, err := c.db.Query(ctx, "SELECT queue, kind, pending, processing, failed, processed, dead, "+
		"coalesce(extract(epoch FROM oldest_pending_age), 0)::pg_catalog.float8, paused, lanes, blocked_lanes FROM "+c.q+".queue_stats ORDER BY queue")
	if err != nil {
		return nil, wrapErr("queue_stats", err)
	}
	st, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueStats, error) {
		var s QueueStats
		var kind string
		var age float64
		err := r.Scan(&s.Queue, &kind, &s.Pending, &s.Processing, &s.Failed, &s.Processed, &s.Dead, &age,
			&s.Paused, &s.Lanes, &s.BlockedLanes)
		s.Kind = QueueKind(kind)
		s.OldestPendingAge = time.Duration(age * float64(time.Second))
		return s, err
	})
	return st, wrapErr("queue_stats", err)
}

// NotifyChannel asks the database for the LISTEN channel on which send
// announces new messages in the client's schema (the payload is the queue
// name): SELECT <schema>.notify_channel().
func (c *Client) NotifyChannel(ctx context.Context) (string, error) {
	var ch string
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("notify_channel")+"()").Scan(&ch)
	return ch, wrapErr("notify_channel", err)
}
