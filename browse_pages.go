package pgsweep

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Keyset pages of the control room (sql/functions/browse_lanes.sql,
// browse_passes.sql, lease.sql): each call reads the rows of its page,
// never the whole table, and a row that stays is never repeated nor
// skipped from one page to the next. The monitor role may call them.

// Page is one keyset page: its rows, the cursor that asks for the next
// page, and whether this page is the last.
type Page[T, C any] struct {
	Rows []T
	// Next is the cursor argument of the next page.
	Next C
	// End says there is no next page.
	End bool
}

// LaneCursor is where a page of BrowseLanes begins: after the lane Lane,
// in the blocked part (Blocked) or in the other. The zero value asks for
// the first page.
type LaneCursor struct {
	Lane    string
	Blocked bool
}

// BrowsedLane is one lane as BrowseLanes shows it: the figures of
// LaneStats, with Waiting counted up to 100.
type BrowsedLane struct {
	LaneStats
	// Blocked: a dead letter (HeadID) stops the lane (lane_dead "block").
	Blocked bool
	// WaitingMore: more than Waiting (100) messages wait (LaneStats counts
	// them all).
	WaitingMore bool
	// MaySkip: the lane is blocked and the caller may skip its dead letter
	// (LaneSkip: the queue's manage right and EXECUTE on lane_skip).
	MaySkip bool
}

// BrowseLanes returns up to limit (1..1000) lanes of queue from after on:
// the blocked lanes first, then the others, each part by name. Pass the
// zero LaneCursor for the first page and Page.Next for the next one.
func (c *Client) BrowseLanes(ctx context.Context, queue string, after LaneCursor, limit int) (Page[BrowsedLane, LaneCursor], error) {
	var lane *string
	var blocked *bool
	if after.Lane != "" {
		lane, blocked = &after.Lane, &after.Blocked
	}
	return browse(ctx, c, "browse_lanes", "SELECT lane, blocked, waiting, waiting_more, head_id, head_attempt, head_state, "+
		"coalesce(extract(epoch FROM oldest_age), 0)::pg_catalog.float8, may_skip FROM "+c.fn("browse_lanes")+
		"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.bool)", []any{queue, lane, limit, blocked},
		func(r pgx.CollectableRow) (BrowsedLane, error) {
			l := BrowsedLane{LaneStats: LaneStats{Queue: queue}}
			var h laneHead
			err := r.Scan(&l.Lane, &l.Blocked, &l.Waiting, &l.WaitingMore, &h.id, &h.attempt, &h.state, &h.age, &l.MaySkip)
			h.set(&l.LaneStats)
			return l, err
		}, after, limit, func(l BrowsedLane) LaneCursor { return LaneCursor{Lane: l.Lane, Blocked: l.Blocked} })
}

// browse runs the statement of one keyset page (verb names it in errors)
// and returns the page: the next page begins after its last row (key), and
// a page with fewer than limit rows is the last.
func browse[T, C any](ctx context.Context, c *Client, verb, sql string, args []any, scan pgx.RowToFunc[T],
	after C, limit int, key func(T) C) (Page[T, C], error) {
	rows, err := c.db.Query(ctx, sql, args...)
	if err != nil {
		return Page[T, C]{}, wrapErr(verb, err)
	}
	ts, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return Page[T, C]{}, wrapErr(verb, err)
	}
	p := Page[T, C]{Rows: ts, Next: after, End: len(ts) < limit}
	if len(ts) > 0 {
		p.Next = key(ts[len(ts)-1])
	}
	return p, nil
}

// BrowseLeases returns up to limit (1..1000) leases, live or not, whose
// name comes after after ("" for the first page), by name.
func (c *Client) BrowseLeases(ctx context.Context, after string, limit int) (Page[Lease, string], error) {
	return browse(ctx, c, "browse_leases", leaseColumns+c.fn("browse_leases")+"($1::pg_catalog.text, $2::pg_catalog.int4)",
		[]any{nullIfEmpty(after), limit}, scanLease, after, limit, func(l Lease) string { return l.Name })
}

// BrowseMaintenancePasses returns up to limit (1..1000) maintenance passes
// with an id below before (0 for the first page), newest first.
func (c *Client) BrowseMaintenancePasses(ctx context.Context, before int64, limit int) (Page[MaintenancePass, int64], error) {
	return browse(ctx, c, "browse_maintenance_passes", maintenancePassColumns+c.fn("browse_maintenance_passes")+
		"($1::pg_catalog.int8, $2::pg_catalog.int4)", []any{beforeArg(before), limit},
		func(r pgx.CollectableRow) (MaintenancePass, error) { return scanMaintenancePass(r) },
		before, limit, func(p MaintenancePass) int64 { return p.ID })
}

// BrowseRetentionPasses returns up to limit (1..1000) retention passes of
// policy ("" for every policy) with an id below before (0 for the first
// page), newest first. An unknown policy is ErrInvalidArgument.
func (c *Client) BrowseRetentionPasses(ctx context.Context, policy string, before int64, limit int) (Page[RetentionPass, int64], error) {
	return browse(ctx, c, "browse_retention_passes", "SELECT "+passColumns+" FROM "+c.fn("browse_retention_passes")+
		"($1::pg_catalog.text, $2::pg_catalog.int8, $3::pg_catalog.int4)", []any{nullIfEmpty(policy), beforeArg(before), limit},
		func(r pgx.CollectableRow) (RetentionPass, error) { return scanPass(r) },
		before, limit, func(p RetentionPass) int64 { return p.ID })
}

// beforeArg is a p_before argument: NULL (the newest) for 0.
func beforeArg(before int64) *int64 {
	if before == 0 {
		return nil
	}
	return &before
}
