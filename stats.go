package pgsweep

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue snapshots (sql/functions/stats.sql): the maintenance part "stats"
// takes one per queue every stats_interval; the monitor role reads them with
// StatsLatest (one index probe per queue) and StatsHistory (one range), at a
// cost that does not grow with the messages. QueueStats stays the exact,
// live count.

// QueueSnapshot is one queue's snapshot. The gauges are as of TakenAt; the
// counters cover [Since, TakenAt) and are counted from what the tables
// record (an outbox message sent and completed between two snapshots is in
// neither Sent nor Completed: docs/dashboard.md).
type QueueSnapshot struct {
	Queue  string `json:"queue"`
	Kind   string `json:"kind"`
	Paused bool   `json:"paused"`
	// TakenAt is zero when the queue has no snapshot yet (every other
	// field but Queue, Kind and Paused is then zero too).
	TakenAt time.Time `json:"taken_at"`
	// Since is the previous snapshot's time, zero for a queue's first
	// snapshot, whose counters are zero.
	Since        time.Time     `json:"since"`
	Pending      int64         `json:"pending"`
	Due          int64         `json:"due"`
	InFlight     int64         `json:"in_flight"`
	Failed       int64         `json:"failed"`
	Dead         int64         `json:"dead"`
	Processed    int64         `json:"processed"`
	OldestDueAge time.Duration `json:"oldest_due_age"`
	Lanes        int64         `json:"lanes"`
	BlockedLanes int64         `json:"blocked_lanes"`
	Sent         int64         `json:"sent"`
	Completed    int64         `json:"completed"`
	Failures     int64         `json:"failures"`
	DeadLettered int64         `json:"dead_lettered"`
	Retried      int64         `json:"retried"`
}

const snapshotColumns = "taken_at, since, coalesce(pending, 0), coalesce(due, 0), coalesce(in_flight, 0), " +
	"coalesce(failed, 0), coalesce(dead, 0), coalesce(processed, 0), " +
	"coalesce(extract(epoch FROM oldest_due_age), 0)::pg_catalog.float8, coalesce(lanes, 0), coalesce(blocked_lanes, 0), " +
	"coalesce(sent, 0), coalesce(completed, 0), coalesce(failures, 0), coalesce(dead_lettered, 0), coalesce(retried, 0)"

func scanSnapshot(s *QueueSnapshot, head []any, r pgx.CollectableRow) error {
	var taken, since *time.Time
	var age float64
	dst := append(head, &taken, &since, &s.Pending, &s.Due, &s.InFlight, &s.Failed, &s.Dead, &s.Processed,
		&age, &s.Lanes, &s.BlockedLanes, &s.Sent, &s.Completed, &s.Failures, &s.DeadLettered, &s.Retried)
	if err := r.Scan(dst...); err != nil {
		return err
	}
	if taken != nil {
		s.TakenAt = *taken
	}
	if since != nil {
		s.Since = *since
	}
	s.OldestDueAge = time.Duration(age * float64(time.Second))
	return nil
}

// StatsLatest returns every queue with its latest snapshot, in name order.
func (c *Client) StatsLatest(ctx context.Context) ([]QueueSnapshot, error) {
	rows, err := c.db.Query(ctx, "SELECT queue, kind, paused, "+snapshotColumns+" FROM "+c.fn("stats_latest")+"()")
	if err != nil {
		return nil, wrapErr("stats_latest", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueSnapshot, error) {
		var s QueueSnapshot
		err := scanSnapshot(&s, []any{&s.Queue, &s.Kind, &s.Paused}, r)
		return s, err
	})
	return out, wrapErr("stats_latest", err)
}

// StatsHistory returns queue's snapshots taken in [from, to), oldest first
// (Queue is set, Kind and Paused are not). from after to is an
// ErrInvalidArgument.
func (c *Client) StatsHistory(ctx context.Context, queue string, from, to time.Time) ([]QueueSnapshot, error) {
	rows, err := c.db.Query(ctx, "SELECT "+snapshotColumns+" FROM "+c.fn("stats_history")+"($1, $2, $3)", queue, from, to)
	if err != nil {
		return nil, wrapErr("stats_history", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueSnapshot, error) {
		s := QueueSnapshot{Queue: queue}
		err := scanSnapshot(&s, nil, r)
		return s, err
	})
	return out, wrapErr("stats_history", err)
}
