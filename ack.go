package pgsweep

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgsweep/pgsweep/internal/consumer"
)

// Release gives ids that the claim whose token is token holds back to the
// queue unprocessed, as if they had never been claimed: the attempt is taken
// back and they are due at once. It returns the ids it acted on. Use it for
// messages claimed but never started, such as those a worker still holds
// when it shuts down; a message whose handler ran should be completed or
// failed instead.
func (c *Client) Release(ctx context.Context, queue string, token Token, ids []int64) ([]int64, error) {
	return c.ids(ctx, "release", "SELECT "+c.fn("release")+"($1, $2, $3)", queue, token, ids)
}

// RequeueDead sends dead letters of queue back to it as pending messages with
// a fresh set of attempts, due at deliverAt (zero: now), and returns the ids
// it requeued. Ids that are not dead letters of the queue are ignored, and so
// is an inbox dead letter whose key another message holds meanwhile.
func (c *Client) RequeueDead(ctx context.Context, queue string, ids []int64, deliverAt time.Time) ([]int64, error) {
	var at any
	if !deliverAt.IsZero() {
		at = deliverAt
	}
	return c.ids(ctx, "dead_requeue", "SELECT "+c.fn("dead_requeue")+"($1, $2, $3)", queue, ids, at)
}

// DeleteDead removes dead letters of queue for good and returns the ids it
// deleted (ids that are not dead letters of the queue are ignored). A letter
// that stopped its lane goes and the lane moves on, as with LaneSkip; an
// inbox letter's key goes with it. It needs the queue's manage right.
func (c *Client) DeleteDead(ctx context.Context, queue string, ids []int64) ([]int64, error) {
	return c.ids(ctx, "dead_delete", "SELECT "+c.fn("dead_delete")+"($1, $2)", queue, ids)
}

// fail is Fail with the retry delay as an optional value: nil means the
// queue's backoff, a value (also 0: at once) is used as is: the SQL says
// which delays it accepts. errText is made valid for a PostgreSQL text value.
func (c *Client) fail(ctx context.Context, queue string, token Token, ids []int64, errText string, retryAfter *time.Duration) ([]FailResult, error) {
	var ra any
	if retryAfter != nil {
		ra = *retryAfter
	}
	rows, err := c.db.Query(ctx, "SELECT id, dead FROM "+c.fn("fail_details")+"($1, $2, $3, $4, $5)",
		queue, token, ids, cleanText(errText), ra)
	if err != nil {
		return nil, wrapErr("fail", err)
	}
	res, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailResult, error) {
		var f FailResult
		err := r.Scan(&f.ID, &f.Dead)
		return f, err
	})
	return res, wrapErr("fail", err)
}

// cleanText makes s storable as text: PostgreSQL rejects NUL bytes and
// invalid UTF-8, and a handler's error may carry either.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// ConsumerStore records the outcomes of queue's messages with the Client's
// verbs: the store of pgsweep's own consumers, the Worker and the relay
// (internal/consumer). A Fail without a fixed delay takes the queue's
// backoff. Applications call Complete, Fail, DeadLetter and Release.
func (c *Client) ConsumerStore(queue string) consumer.Store[Token] {
	return consumer.Store[Token]{
		Complete: func(ctx context.Context, tok Token, ids []int64) ([]int64, error) {
			return c.Complete(ctx, queue, tok, ids)
		},
		Fail: func(ctx context.Context, tok Token, ids []int64, text string, after *time.Duration) (int, int, error) {
			res, err := c.fail(ctx, queue, tok, ids, text, after)
			return len(res), countDead(res), err
		},
		DeadLetter: func(ctx context.Context, tok Token, ids []int64, text string) ([]int64, error) {
			return c.DeadLetter(ctx, queue, tok, ids, text)
		},
		Release: func(ctx context.Context, tok Token, ids []int64) ([]int64, error) {
			return c.Release(ctx, queue, tok, ids)
		},
	}
}

// countDead is how many of res used their last attempt.
func countDead(res []FailResult) int {
	n := 0
	for _, r := range res {
		if r.Dead {
			n++
		}
	}
	return n
}
