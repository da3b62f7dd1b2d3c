package pgsweep

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queue operations (sql/functions/queue_ops.sql and lane.sql; the
// schema's admin role may call them, the monitor role LaneStats). Each acts
// on one queue; an unknown queue or a bad argument is an ErrInvalidArgument
// and changes nothing.

// QueuePause stops the claims of queue: they return nothing until
// QueueResume. Sends, renewals, completions and failures go on. It reports
// whether the queue was running.
func (c *Client) QueuePause(ctx context.Context, queue string) (bool, error) {
	var changed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("queue_pause")+"($1)", queue).Scan(&changed)
	return changed, wrapErr("queue_pause", err)
}

// QueueResume lets claims of queue take messages again (listeners are
// notified). It reports whether the queue was paused.
func (c *Client) QueueResume(ctx context.Context, queue string) (bool, error) {
	var changed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("queue_resume")+"($1)", queue).Scan(&changed)
	return changed, wrapErr("queue_resume", err)
}

// CancelMessages deletes the messages of ids (1..10000) that are pending --
// due, scheduled or waiting in their lane -- and returns those it deleted.
// Messages in flight or waiting for a retry stay. A cancelled lane head lets
// its lane move on.
func (c *Client) CancelMessages(ctx context.Context, queue string, ids []int64) ([]int64, error) {
	return c.ids(ctx, "message_cancel", "SELECT "+c.fn("message_cancel")+"($1, $2)", queue, ids)
}

// QueuePurge deletes every pending message of queue (due, scheduled, waiting
// in a lane) and returns how many. Messages in flight or waiting for a retry,
// processed inbox rows and dead letters stay.
func (c *Client) QueuePurge(ctx context.Context, queue string) (int64, error) {
	var n int64
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("queue_purge")+"($1)", queue).Scan(&n)
	return n, wrapErr("queue_purge", err)
}

// QueueDrop removes queue with all its messages, processed rows, dead
// letters, lanes and built-in retention policies, and returns how many live
// messages it deleted. While a message is in flight (a lease that has not
// expired) it refuses with SQLSTATE 55006 and changes nothing, unless force.
func (c *Client) QueueDrop(ctx context.Context, queue string, force bool) (int64, error) {
	var n int64
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("queue_drop")+"($1, $2)", queue, force).Scan(&n)
	return n, wrapErr("queue_drop", err)
}

// LaneSkip moves a lane that a dead letter stopped (lane_dead "block") on
// to its next message; the dead letter stays. It reports whether the lane
// was blocked.
func (c *Client) LaneSkip(ctx context.Context, queue, lane string) (bool, error) {
	var changed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("lane_skip")+"($1, $2)", queue, lane).Scan(&changed)
	return changed, wrapErr("lane_skip", err)
}

// LaneStats returns up to limit (1..10000) lanes of queue, those that most
// need an operator first: blocked lanes, then the lanes whose head is oldest.
func (c *Client) LaneStats(ctx context.Context, queue string, limit int) ([]LaneStats, error) {
	rows, err := c.db.Query(ctx, "SELECT queue, lane, waiting, head_id, head_attempt, head_state, "+
		"coalesce(extract(epoch FROM oldest_age), 0)::pg_catalog.float8 FROM "+c.fn("lane_stats")+"($1, $2)", queue, limit)
	if err != nil {
		return nil, wrapErr("lane_stats", err)
	}
	st, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LaneStats, error) {
		var s LaneStats
		var h laneHead
		err := r.Scan(&s.Queue, &s.Lane, &s.Waiting, &h.id, &h.attempt, &h.state, &h.age)
		h.set(&s)
		return s, err
	})
	return st, wrapErr("lane_stats", err)
}

// laneHead is what lane_stats and browse_lanes say of a lane's head and
// age, as scanned (NULL when the lane has no head).
type laneHead struct {
	id      *int64
	attempt *int32
	state   *string
	age     float64 // seconds
}

// set copies the head into s.
func (h laneHead) set(s *LaneStats) {
	if h.id != nil {
		s.HeadID = *h.id
	}
	if h.attempt != nil {
		s.HeadAttempt = int(*h.attempt)
	}
	if h.state != nil {
		s.HeadState = *h.state
	}
	s.OldestAge = time.Duration(h.age * float64(time.Second))
}
