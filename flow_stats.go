package pgsweep

import "context"

// FlowStats is a queue's flow control (docs/queues.md, "Flow control") as
// FlowStats reports it: its settings and what claims use of them now. A
// setting the queue does not have is 0 or "".
type FlowStats struct {
	// MaxInFlight is the queue's max_in_flight.
	MaxInFlight int
	// InFlight counts the messages held under MaxInFlight now (leases
	// claimed before the limit was set count from the moment it was).
	InFlight int
	// Rate is the queue's rate, "N/s" or "N/min".
	Rate string
	// RateBurst is the most tokens saved up: rate_burst, else the rate's N.
	RateBurst int
	// RateUsed counts the tokens spent and not yet refilled (0..RateBurst):
	// RateBurst means claims wait for the rate.
	RateUsed int
	// GroupMaxInFlight and GroupRate are the limits of each group without
	// an override of its own; GroupOverrides counts the groups with one
	// (GroupStats shows each group's).
	GroupMaxInFlight int
	GroupRate        string
	GroupOverrides   int
}

// Limited reports whether the queue has any flow control setting.
func (s FlowStats) Limited() bool {
	return s.MaxInFlight > 0 || s.Rate != "" || s.GroupMaxInFlight > 0 || s.GroupRate != "" || s.GroupOverrides > 0
}

// FlowStats returns queue's flow control (SQL flow_stats, the monitor
// role's).
func (c *Client) FlowStats(ctx context.Context, queue string) (FlowStats, error) {
	var s FlowStats
	var maxIF, inFlight, burst, used, groupMax, overrides int32
	err := c.db.QueryRow(ctx, "SELECT coalesce(max_in_flight, 0), coalesce(in_flight, 0), coalesce(rate, ''), "+
		"coalesce(rate_burst, 0), coalesce(rate_used, 0), coalesce(group_max_in_flight, 0), coalesce(group_rate, ''), "+
		"group_overrides FROM "+c.fn("flow_stats")+"($1)", queue).
		Scan(&maxIF, &inFlight, &s.Rate, &burst, &used, &groupMax, &s.GroupRate, &overrides)
	if err != nil {
		return FlowStats{}, wrapErr("flow_stats", err)
	}
	s.MaxInFlight, s.InFlight, s.RateBurst, s.RateUsed = int(maxIF), int(inFlight), int(burst), int(used)
	s.GroupMaxInFlight, s.GroupOverrides = int(groupMax), int(overrides)
	return s, nil
}
