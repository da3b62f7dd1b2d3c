package ui

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/pgsweep/pgsweep"
)

// The pages that show a keyset page at a time: a queue's lanes, the
// leases, the maintenance passes. Each reads its page only (the browse_*
// functions), and links to the first and the next page.

// pageSize is how many rows a keyset page of the lanes, leases and
// maintenance pages shows.
const pageSize = 50

// pager is the links under a keyset page, relative to the page: First
// ("" on the first page) and Next ("" on the last; the query of the next
// page's cursor).
type pager struct {
	First string
	Next  string
}

// newPager links to first unless this is the first page, and to the next
// page (the query next) unless this is the last.
func newPager(first string, atFirst, end bool, next url.Values) pager {
	var p pager
	if !atFirst {
		p.First = first
	}
	if !end {
		p.Next = "?" + next.Encode()
	}
	return p
}

// lanesData is the lanes page's: a keyset page of a queue's lanes, blocked
// first (browse_lanes).
type lanesData struct {
	Queue string
	Page  pgsweep.Page[pgsweep.BrowsedLane, pgsweep.LaneCursor]
	Pager pager
}

// lanes shows a queue's lanes a page at a time, blocked lanes first; a
// blocked lane has a button to skip its dead letter when the database says
// the role may (may_skip) and the dashboard is not read-only. The page's
// cursor is ?after=<lane>&blocked=1|0, the last lane of the page before.
func (h *handler) lanes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	d := lanesData{Queue: r.PathValue("queue")}
	q := r.URL.Query()
	after := pgsweep.LaneCursor{Lane: q.Get("after"), Blocked: q.Get("blocked") == "1"}
	var err error
	if d.Page, err = h.c.BrowseLanes(ctx, d.Queue, after, pageSize); err != nil {
		h.fail(w, r, err)
		return
	}
	blocked := "0"
	if d.Page.Next.Blocked {
		blocked = "1"
	}
	d.Pager = newPager("lanes", after.Lane == "", d.Page.End, url.Values{"after": {d.Page.Next.Lane}, "blocked": {blocked}})
	h.render(w, r, "lanes", "Lanes of "+d.Queue, nav("queue"), d)
}

// leasesData is the leases page's: a keyset page by name (browse_leases).
type leasesData struct {
	Page  pgsweep.Page[pgsweep.Lease, string]
	Pager pager
}

func (h *handler) leases(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	var d leasesData
	after := r.URL.Query().Get("after")
	var err error
	if d.Page, err = h.c.BrowseLeases(ctx, after, pageSize); err != nil {
		h.fail(w, r, err)
		return
	}
	d.Pager = newPager("leases", after == "", d.Page.End, url.Values{"after": {d.Page.Next}})
	h.render(w, r, "leases", "Leases", nav("leases"), d)
}

// maintenanceData is the maintenance page's: a keyset page of passes,
// newest first (browse_maintenance_passes).
type maintenanceData struct {
	Page  pgsweep.Page[pgsweep.MaintenancePass, int64]
	Pager pager
}

func (h *handler) maintenance(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	var d maintenanceData
	var before int64
	if b := r.URL.Query().Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before < 1 {
			h.badRequest(w, r, "before must be a pass id (1 or more), got "+b)
			return
		}
	}
	var err error
	if d.Page, err = h.c.BrowseMaintenancePasses(ctx, before, pageSize); err != nil {
		h.fail(w, r, err)
		return
	}
	d.Pager = newPager("maintenance", before == 0, d.Page.End, url.Values{"before": {strconv.FormatInt(d.Page.Next, 10)}})
	h.render(w, r, "maintenance", "Maintenance", nav("maintenance"), d)
}
