package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	neturl "net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// nextLink is the pager's link to the next page.
var nextLink = regexp.MustCompile(`<a href="([^"]*)">Next page</a>`)

// walk follows a keyset page's "Next page" links from path to the last
// page and returns every page's body.
func walk(t *testing.T, base, path string) []string {
	t.Helper()
	var bodies []string
	for url := base + path; ; {
		status, body := get(t, url)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", url, status, body)
		}
		bodies = append(bodies, body)
		m := nextLink.FindStringSubmatch(body)
		if m == nil {
			return bodies
		}
		if len(bodies) > 10 {
			t.Fatalf("more than 10 pages from %s", path)
		}
		next, err := neturl.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		u, _ := neturl.Parse(url)
		url = u.ResolveReference(next).String()
	}
}

// The lanes page: blocked lanes first, a hostile lane key as text, pages
// of 50 to the end with no lane twice; the admin's skip button moves the
// lane on and comes back to the lanes page; the monitor's page has no
// button and its forged POST is refused by PostgreSQL.
func TestLanesPage(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	if err := db.Client.QueueConfigure(ctx, "orders", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	pgtest.DeadLetters(t, db.Client, "orders", 1, "boom", "zz-blocked")
	lanes := []string{hostile, "zz-blocked"}
	for i := range 60 {
		lanes = append(lanes, fmt.Sprintf("lane-%02d", i))
	}
	for _, l := range lanes {
		if _, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Lane: l, Payload: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	admin, _ := pgtest.RolePool(t, db, "admin")
	srv := uiserve.Serve(t, admin, db.Schema, ui.Options{})
	pages := walk(t, srv.URL, "/pgsweep/queues/orders/lanes")
	if len(pages) != 2 {
		t.Fatalf("%d pages of 61 lanes, want 2", len(pages))
	}
	first := pages[0]
	if i, j := strings.Index(first, "zz-blocked"), strings.Index(first, "lane-00"); i < 0 || j < 0 || i > j {
		t.Fatalf("the blocked lane is not first:\n%s", first)
	}
	if !strings.Contains(strings.Join(pages, ""), "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(strings.Join(pages, ""), "<script>alert") {
		t.Fatal("the hostile lane key is not on the lanes pages as escaped text")
	}
	for i := range 60 {
		if n := strings.Count(strings.Join(pages, ""), fmt.Sprintf(">lane-%02d<", i)); n != 1 {
			t.Errorf("lane-%02d on the pages %d times, want once", i, n)
		}
	}
	if strings.Count(first, "<form") != 1 {
		t.Fatalf("the admin's first page: want one skip button (the blocked lane)\n%s", first)
	}

	monitor, _ := pgtest.RolePool(t, db, "monitor")
	msrv := uiserve.Serve(t, monitor, db.Schema, ui.Options{})
	if status, body := get(t, msrv.URL+"/pgsweep/queues/orders/lanes"); status != http.StatusOK || strings.Contains(body, "<form") || !strings.Contains(body, "zz-blocked") {
		t.Fatalf("the monitor's lanes page: %d, want the blocked lane and no button\n%s", status, body)
	}
	skip := neturl.Values{"lane": {"zz-blocked"}, "back": {"lanes"}}
	if status, _ := postForm(t, msrv.URL+"/pgsweep/queues/orders/skip", skip); status != http.StatusForbidden {
		t.Fatalf("the monitor's forged skip: %d, want 403", status)
	}
	if ro := uiserve.Serve(t, admin, db.Schema, ui.Options{ReadOnly: true}); strings.Contains(walk(t, ro.URL, "/pgsweep/queues/orders/lanes")[0], "<form") {
		t.Fatal("the read-only lanes page shows a button")
	}
	if status, loc := postForm(t, srv.URL+"/pgsweep/queues/orders/skip", skip); status != http.StatusSeeOther || loc != "../orders/lanes" {
		t.Fatalf("the admin's skip: %d, Location %q; want 303 to the lanes page", status, loc)
	}
	p, err := db.Client.BrowseLanes(ctx, "orders", pgsweep.LaneCursor{}, 1)
	if err != nil || p.Rows[0].Blocked {
		t.Fatalf("after the skip: %+v, %v; want no blocked lane", p.Rows, err)
	}
	if status, _ := get(t, srv.URL+"/pgsweep/queues/orders/lanes?after="+strings.Repeat("l", 201)+"&blocked=0"); status != http.StatusBadRequest {
		t.Fatalf("a 201-character cursor: %d, want 400", status)
	}
	// a cursor is only compared: one with a newline (a lane named before 0.34's name rule) pages on
	if status, _ := get(t, srv.URL+"/pgsweep/queues/orders/lanes?after=a%0Ab&blocked=0"); status != http.StatusOK {
		t.Fatalf("a cursor with a newline: %d, want 200", status)
	}
}

// The leases and maintenance pages go a keyset page at a time: every row
// once, over two pages.
func TestLeasesAndMaintenancePages(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	for i := range 55 {
		if _, ok, err := db.Client.LeaseAcquire(ctx, fmt.Sprintf("job-%02d", i), "me", time.Minute); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	db.MustExec(t, "INSERT INTO "+db.Q()+".maintain_pass (owner, started_at, budget) SELECT 'pass-' || g, now(), '1 minute' FROM generate_series(1, 60) g")
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	for _, c := range []struct {
		path, format string
		n            int
	}{{"/pgsweep/leases", ">job-%02d<", 55}, {"/pgsweep/maintenance", ">pass-%d<", 60}} {
		pages := walk(t, srv.URL, c.path)
		if len(pages) != 2 {
			t.Fatalf("%s: %d pages, want 2", c.path, len(pages))
		}
		all := strings.Join(pages, "")
		for i := range c.n {
			k := i
			if c.path == "/pgsweep/maintenance" {
				k = i + 1
			}
			if n := strings.Count(all, fmt.Sprintf(c.format, k)); n != 1 {
				t.Errorf("%s: row %d on the pages %d times, want once", c.path, k, n)
			}
		}
		if !strings.Contains(pages[1], ">First page</a>") {
			t.Errorf("%s: the second page does not link to the first", c.path)
		}
	}
	if status, _ := get(t, srv.URL+"/pgsweep/maintenance?before=x"); status != http.StatusBadRequest {
		t.Fatalf("maintenance?before=x: %d, want 400", status)
	}
}
