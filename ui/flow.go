package ui

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pgsweep/pgsweep"
)

// queueGroups is how many groups the queue page shows.
const queueGroups = 10

// flowView is the queue page's flow control: the queue's settings and what
// claims use of them (FlowStats), with the limits reached marked.
type flowView struct {
	pgsweep.FlowStats
	// Full: the messages in flight are at max_in_flight (or above it,
	// after the limit was lowered).
	Full bool
	// Dry: the rate's tokens are spent; claims wait for the rate.
	Dry bool
}

// groupRow is a row of the queue page's groups table.
type groupRow struct {
	pgsweep.GroupStats
	// RateN is the N of the group's rate (0: no rate).
	RateN int
	// Full: the group's messages in flight are at its max_in_flight.
	Full bool
	// Dry: the group's rate tokens are spent.
	Dry bool
}

// AtLimit reports whether the group's claims wait for one of its limits.
func (g groupRow) AtLimit() bool { return g.Full || g.Dry }

// groupsView is the queue page's groups table: the groups waiting longest
// first, at most queueGroups of them.
type groupsView struct {
	Rows []groupRow
	// More: the queue has more groups with messages than Rows.
	More bool
}

// readFlow reads queue's flow control and its first groups.
func (h *handler) readFlow(ctx context.Context, queue string) (flowView, groupsView, error) {
	fs, err := h.c.FlowStats(ctx, queue)
	if err != nil {
		return flowView{}, groupsView{}, fmt.Errorf("ui: flow control of %q: %w", queue, err)
	}
	gs, err := h.c.GroupStats(ctx, queue, queueGroups+1)
	if err != nil {
		return flowView{}, groupsView{}, fmt.Errorf("ui: groups of %q: %w", queue, err)
	}
	return newFlowView(fs), newGroupsView(gs, queueGroups), nil
}

// newFlowView marks the limits s shows reached.
func newFlowView(s pgsweep.FlowStats) flowView {
	return flowView{FlowStats: s,
		Full: s.MaxInFlight > 0 && s.InFlight >= s.MaxInFlight,
		Dry:  s.Rate != "" && s.RateBurst > 0 && s.RateUsed >= s.RateBurst}
}

// newGroupsView keeps the first n of gs and marks the groups at a limit.
func newGroupsView(gs []pgsweep.GroupStats, n int) groupsView {
	v := groupsView{More: len(gs) > n}
	gs = gs[:min(len(gs), n)]
	v.Rows = make([]groupRow, len(gs))
	for i, g := range gs {
		r := groupRow{GroupStats: g, RateN: rateN(g.Rate)}
		r.Full = g.MaxInFlight > 0 && g.InFlight >= int64(g.MaxInFlight)
		r.Dry = r.RateN > 0 && g.RateUsed >= r.RateN
		v.Rows[i] = r
	}
	return v
}

// rateN is the N of a rate written "N/s" or "N/min" (0 for "" or anything
// else).
func rateN(rate string) int {
	n, per, ok := strings.Cut(rate, "/")
	if !ok || (per != "s" && per != "min") {
		return 0
	}
	v, err := strconv.Atoi(n)
	if err != nil || v < 0 {
		return 0
	}
	return v
}
