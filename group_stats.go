package pgsweep

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// GroupStats is one group of a queue (Message.Group) as GroupStats reports
// it.
type GroupStats struct {
	Group string
	// InFlight counts the group's messages leased now (leases not expired).
	InFlight int64
	// Waiting counts its other messages: due, scheduled, waiting for a
	// retry or behind a lane's head.
	Waiting int64
	// OldestAge is the age of its oldest waiting message (0: none waits).
	OldestAge time.Duration
	// MaxInFlight is the group's limit: its group_overrides entry, else
	// the queue's group_max_in_flight; 0 when it has none.
	MaxInFlight int
	// Rate is the group's rate, "N/s" or "N/min": its group_overrides
	// entry, else the queue's group_rate; "" when it has none.
	Rate string
	// RateUsed counts the tokens of the group's bucket spent and not yet
	// refilled (0..N): N means its claims wait for the rate.
	RateUsed int
}

// GroupStats returns up to limit (1..10000) groups of queue that have
// messages, those whose oldest waiting message is oldest first (SQL
// group_stats: it reads the queue's grouped messages, a monitor's call).
func (c *Client) GroupStats(ctx context.Context, queue string, limit int) ([]GroupStats, error) {
	rows, err := c.db.Query(ctx, "SELECT group_name, in_flight, waiting, "+
		"coalesce(extract(epoch FROM oldest_age), 0)::pg_catalog.float8, coalesce(max_in_flight, 0), "+
		"coalesce(rate, ''), coalesce(rate_used, 0) FROM "+
		c.fn("group_stats")+"($1, $2)", queue, limit)
	if err != nil {
		return nil, wrapErr("group_stats", err)
	}
	st, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (GroupStats, error) {
		var s GroupStats
		var age float64
		var limit, used int32
		err := r.Scan(&s.Group, &s.InFlight, &s.Waiting, &age, &limit, &s.Rate, &used)
		s.OldestAge = time.Duration(age * float64(time.Second))
		s.MaxInFlight = int(limit)
		s.RateUsed = int(used)
		return s, err
	})
	return st, wrapErr("group_stats", err)
}
