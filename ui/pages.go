package ui

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

// page is what every template gets.
type page struct {
	Title    string
	Nav      string // the menu entry to mark
	Base     string // the relative path to the dashboard's root: "./", "../"
	Refresh  int    // seconds
	ReadOnly bool
	Schema   string // the install's schema, quoted where SQL needs it (for the SQL a page suggests)
	Data     any
}

// render writes the page template name with data; an error becomes the
// error page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, name, title, nav string, data any) {
	p := page{Title: title, Nav: nav, Base: base(r), Refresh: int(h.o.Refresh.Seconds()), ReadOnly: h.o.ReadOnly,
		Schema: pgx.Identifier{h.o.Schema}.Sanitize(), Data: data}
	var buf bytes.Buffer
	if err := pages[name].Execute(&buf, p); err != nil {
		h.log.Error("ui: rendering a page failed", "page", name, "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// fail shows err on the error page with the status it calls for: 403 for
// what the database refused the role, 400 for a bad argument, 404 for an
// unknown queue, else 500 (and the log).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, pgsweep.ErrPermissionDenied):
		status = http.StatusForbidden
	case errors.Is(err, pgsweep.ErrInvalidArgument):
		status = http.StatusBadRequest
	default:
		h.log.Error("ui: database call failed", "path", r.URL.Path, "err", err)
	}
	w.WriteHeader(status)
	h.render(w, r, "error", http.StatusText(status), "", err.Error())
}

// base is the relative path from r's page to the dashboard's root, so that
// links work under any prefix the handler is mounted at.
func base(r *http.Request) string {
	// the escaped path: a queue named a/b is one segment (a%2Fb)
	depth := strings.Count(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	if depth == 0 {
		return "./"
	}
	return strings.Repeat("../", depth)
}

// list is a page that shows what one Client call returns.
func list[T any](h *handler, name, title string, read func(ctx context.Context) (T, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := h.timeout(r)
		defer cancel()
		v, err := read(ctx)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		h.render(w, r, name, title, nav(name), v)
	}
}

// overviewData is the overview's: the health findings, then every queue's
// latest snapshot (O(queues), whatever the number of messages).
type overviewData struct {
	Findings []pgsweep.Finding
	Queues   []pgsweep.QueueSnapshot
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	var d overviewData
	var err error
	if d.Findings, err = h.c.Health(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	if d.Queues, err = h.c.StatsLatest(ctx); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "overview", "Queues", nav("overview"), d)
}

// queueData is the queue page's.
type queueData struct {
	Stats  pgsweep.QueueSnapshot
	Charts []chart
	State  string // the messages shown: a pgsweep.Browse* state
	States []string
	Page   pgsweep.BrowsePage
	After  int64
	Error  string // the filter: messages whose last error contains it
	Done   string // what the last action did ("requeued 3")
	More   bool   // an action on all matching stopped on its time: some may be left
	// Lanes is the first page of the queue's lanes, blocked first (the
	// lanes page has the others, and the skip buttons)
	Lanes pgsweep.Page[pgsweep.BrowsedLane, pgsweep.LaneCursor]
	// Flow is the queue's flow control; Groups its first groups, those
	// waiting longest first
	Flow   flowView
	Groups groupsView
}

// queueLanes is how many lanes the queue page shows.
const queueLanes = 10

// chartWindow is how far back the queue page's charts go.
const chartWindow = time.Hour

// browseStates are the states a queue page lists messages in.
var browseStates = []string{pgsweep.BrowsePending, pgsweep.BrowseScheduled, pgsweep.BrowseInFlight,
	pgsweep.BrowseFailed, pgsweep.BrowseDead, pgsweep.BrowseProcessed}

func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	name := r.PathValue("queue")
	qs, err := h.c.StatsLatest(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := queueData{State: r.URL.Query().Get("state"), States: browseStates, Error: r.URL.Query().Get("error"),
		Done: r.URL.Query().Get("done"), More: r.URL.Query().Get("more") != ""}
	found := false
	for _, q := range qs {
		if q.Queue == name {
			d.Stats, found = q, true
		}
	}
	if !found {
		w.WriteHeader(http.StatusNotFound)
		h.render(w, r, "error", "Not found", "", "no queue named "+name)
		return
	}
	if d.State == "" {
		d.State = pgsweep.BrowsePending
	}
	if a := r.URL.Query().Get("after"); a != "" {
		if d.After, err = strconv.ParseInt(a, 10, 64); err != nil || d.After < 0 {
			h.badRequest(w, r, "after must be a message id (0 or more), got "+a)
			return
		}
	}
	now := time.Now()
	history, err := h.c.StatsHistory(ctx, name, now.Add(-chartWindow), now)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d.Charts = queueCharts(history)
	if d.Page, err = h.c.BrowseMatching(ctx, name, d.State, d.Error, d.After, 50); err != nil {
		h.fail(w, r, err)
		return
	}
	if d.Lanes, err = h.c.BrowseLanes(ctx, name, pgsweep.LaneCursor{}, queueLanes); err != nil {
		h.fail(w, r, err)
		return
	}
	if d.Flow, d.Groups, err = h.readFlow(ctx, name); err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, "queue", name, nav("queue"), d)
}

// nav is the menu entry a page belongs to.
func nav(page string) string {
	if page == "queue" {
		return "overview"
	}
	return page
}
