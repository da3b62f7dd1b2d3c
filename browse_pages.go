package pgsweep

import (
	"context"
	"time"

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
	rows, err := c.db.Query(ctx, "SELECT lane, blocked, waiting, waiting_more, head_id, head_attempt, head_state, "+
		"coalesce(extract(epoch FROM oldest_age), 0)::pg_catalog.float8, may_skip FROM "+c.fn("browse_lanes")+
		"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int4, $4::pg_catalog.bool)", queue, lane, limit, blocked)
	if err != nil {
		return Page[BrowsedLane, LaneCursor]{}, wrapErr("browse_lanes", err)
	}
	ls, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BrowsedLane, error) {
		l := BrowsedLane{LaneStats: LaneStats{Queue: queue}}
		var id *int64
		var attempt *int32
		var state *string
		var age float64
		err := r.Scan(&l.Lane, &l.Blocked, &l.Waiting, &l.WaitingMore, &id, &attempt, &state, &age, &l.MaySkip)
		if id != nil {
			l.HeadID = *id
		}
		if attempt != nil {
			l.HeadAttempt = int(*attempt)
		}
		if state != nil {
			l.HeadState = *state
		}
		l.OldestAge = time.Duration(age * float64(time.Second))
		return l, err
	})
	if err != nil {
		return Page[BrowsedLane, LaneCursor]{}, wrapErr("browse_lanes", err)
	}
	p := Page[BrowsedLane, LaneCursor]{Rows: ls, Next: after, End: len(ls) < limit}
	if len(ls) > 0 {
		last := ls[len(ls)-1]
		p.Next = LaneCursor{Lane: last.Lane, Blocked: last.Blocked}
	}
	return p, nil
}

// BrowseLeases returns up to limit (1..1000) leases, live or not, whose
// name comes after after ("" for the first page), by name.
func (c *Client) BrowseLeases(ctx context.Context, after string, limit int) (Page[Lease, string], error) {
	var from *string
	if after != "" {
		from = &after
	}
	rows, err := c.db.Query(ctx, leaseColumns+c.fn("browse_leases")+"($1::pg_catalog.text, $2::pg_catalog.int4)", from, limit)
	if err != nil {
		return Page[Lease, string]{}, wrapErr("browse_leases", err)
	}
	ls, err := pgx.CollectRows(rows, scanLease)
	if err != nil {
		return Page[Lease, string]{}, wrapErr("browse_leases", err)
	}
	p := Page[Lease, string]{Rows: ls, Next: after, End: len(ls) < limit}
	if len(ls) > 0 {
		p.Next = ls[len(ls)-1].Name
	}
	return p, nil
}

// BrowseMaintenancePasses returns up to limit (1..1000) maintenance passes
// with an id below before (0 for the first page), newest first.
func (c *Client) BrowseMaintenancePasses(ctx context.Context, before int64, limit int) (Page[MaintenancePass, int64], error) {
	rows, err := c.db.Query(ctx, maintenancePassColumns+c.fn("browse_maintenance_passes")+
		"($1::pg_catalog.int8, $2::pg_catalog.int4)", beforeArg(before), limit)
	if err != nil {
		return Page[MaintenancePass, int64]{}, wrapErr("browse_maintenance_passes", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MaintenancePass, error) { return scanMaintenancePass(r) })
	if err != nil {
		return Page[MaintenancePass, int64]{}, wrapErr("browse_maintenance_passes", err)
	}
	p := Page[MaintenancePass, int64]{Rows: ps, Next: before, End: len(ps) < limit}
	if len(ps) > 0 {
		p.Next = ps[len(ps)-1].ID
	}
	return p, nil
}

// BrowseRetentionPasses returns up to limit (1..1000) retention passes of
// policy ("" for every policy) with an id below before (0 for the first
// page), newest first. An unknown policy is ErrInvalidArgument.
func (c *Client) BrowseRetentionPasses(ctx context.Context, policy string, before int64, limit int) (Page[RetentionPass, int64], error) {
	var name *string
	if policy != "" {
		name = &policy
	}
	rows, err := c.db.Query(ctx, "SELECT "+passColumns+" FROM "+c.fn("browse_retention_passes")+
		"($1::pg_catalog.text, $2::pg_catalog.int8, $3::pg_catalog.int4)", name, beforeArg(before), limit)
	if err != nil {
		return Page[RetentionPass, int64]{}, wrapErr("browse_retention_passes", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetentionPass, error) { return scanPass(r) })
	if err != nil {
		return Page[RetentionPass, int64]{}, wrapErr("browse_retention_passes", err)
	}
	p := Page[RetentionPass, int64]{Rows: ps, Next: before, End: len(ps) < limit}
	if len(ps) > 0 {
		p.Next = ps[len(ps)-1].ID
	}
	return p, nil
}

// beforeArg is a p_before argument: NULL (the newest) for 0.
func beforeArg(before int64) *int64 {
	if before == 0 {
		return nil
	}
	return &before
}
