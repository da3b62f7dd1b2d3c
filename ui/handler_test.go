package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// hostile is text an attacker controls (lane keys, group names, error texts): it must
// render as text, never as markup.
const hostile = `<script>alert(1)</script>"><img src=x onerror=alert(2)>`

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// post sends a form POST as a browser on the same origin would (the
// Sec-Fetch-Site header), or from another site; it returns the status and
// the body, or for a redirect the Location.
func post(t *testing.T, url, site string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Site", site)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if loc := res.Header.Get("Location"); loc != "" {
		return res.StatusCode, loc // a redirect: where to
	}
	return res.StatusCode, string(b)
}

var href = regexp.MustCompile(`(?:href|src|action)="([^"]*)"`)

// formAction is a link that only a POST answers (checked for its place, not
// fetched).
var formAction = regexp.MustCompile(`/(pause|resume|requeue|delete|requeue-matching|delete-matching|cancel|skip)$`)

// Every page loads under a path prefix, every link and file it names
// resolves (relative links only), and attacker-controlled text renders as
// text: the lane key, the group name and the error text come back escaped,
// never as tags.
func TestPagesLoadUnderAPrefixAndEscapeEverything(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	if _, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Lane: hostile, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// a group name is the sender's text too, and a limited queue shows its flow control
	if _, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Group: hostile, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Client.QueueConfigure(ctx, "orders", map[string]any{"group_max_in_flight": 1}); err != nil {
		t.Fatal(err)
	}
	// names that a careless template or link would misread: a scheme-like
	// prefix, a slash
	for _, q := range []string{"billing:eu", "http:q1", "a/b"} {
		if err := db.Client.QueueCreate(ctx, q, pgsweep.Outbox, 1); err != nil {
			t.Fatal(err)
		}
	}
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	seen := map[string]bool{}
	pages := []string{"/pgsweep/", "/pgsweep/queues/orders", "/pgsweep/queues/orders/lanes", "/pgsweep/maintenance", "/pgsweep/leases",
		"/pgsweep/retention", "/pgsweep/queues/billing:eu", "/pgsweep/queues/http:q1", "/pgsweep/queues/a%2Fb", "/pgsweep/queues/a%2Fb/lanes"}
	for _, p := range pages {
		status, body := get(t, srv.URL+p)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", p, status, body)
		}
		if strings.Contains(body, "ZgotmplZ") {
			t.Fatalf("GET %s: html/template refused a value as unsafe (ZgotmplZ): a link or action is broken\n%s", p, body)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("GET %s renders hostile text as markup:\n%s", p, body)
		}
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			link := m[1]
			if strings.HasPrefix(link, "/") || strings.Contains(link, "://") {
				t.Fatalf("GET %s: link %q is not relative", p, link)
			}
			u, err := http.NewRequest(http.MethodGet, srv.URL+p, nil)
			if err != nil {
				t.Fatal(err)
			}
			abs := u.URL.ResolveReference(mustParse(t, link)).String()
			if !strings.HasPrefix(abs, srv.URL+"/pgsweep/") {
				t.Fatalf("page %s links to %s, outside the dashboard's prefix", p, abs)
			}
			if seen[abs] || formAction.MatchString(abs) {
				continue
			}
			seen[abs] = true
			if status, _ := get(t, abs); status != http.StatusOK {
				t.Fatalf("page %s links to %s, which answers %d", p, abs, status)
			}
		}
	}
	_, body := get(t, srv.URL+"/pgsweep/queues/orders")
	if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(2)&gt;") {
		t.Fatalf("the lane key is not on the queue page as escaped text:\n%s", body)
	}
	if rows := table(t, body, "groups"); len(rows) != 2 || rows[1][1] != hostile {
		t.Fatalf("the groups table does not show the hostile group's name as text: %q", rows)
	}
	if !strings.Contains(body, "<tr><td>&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(2)&gt;</td><td class=\"n\">0 of 1</td>") {
		t.Fatalf("the group's name is not in the groups table as escaped text:\n%s", body)
	}
	if !seen[srv.URL+"/pgsweep/static/htmx.min.js"] || !seen[srv.URL+"/pgsweep/static/uPlot.iife.min.js"] {
		t.Fatalf("the pages do not load the embedded htmx and uPlot: %v", seen)
	}
	if status, _ := get(t, srv.URL+"/pgsweep/queues/nosuch"); status != http.StatusNotFound {
		t.Fatalf("an unknown queue answers %d, want 404", status)
	}
}

func mustParse(t *testing.T, s string) *neturl.URL {
	t.Helper()
	u, err := neturl.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Pause and resume: an admin's same-origin POST pauses the queue; a POST
// from another site is refused before it reaches the database; a monitor
// sees the button (the page cannot know every grant) but PostgreSQL refuses
// its POST, and nothing changes; ReadOnly shows no button and refuses.
func TestActionsAreTheDatabasesToRefuse(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	paused := func() bool {
		qs, err := db.Client.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return qs[0].Paused
	}
	admin, _ := pgtest.RolePool(t, db, "admin")
	srv := uiserve.Serve(t, admin, db.Schema, ui.Options{})
	if status, body := post(t, srv.URL+"/pgsweep/queues/orders/pause", "cross-site"); status != http.StatusForbidden || paused() {
		t.Fatalf("cross-site POST: %d, paused %v; want 403 and nothing changed\n%s", status, paused(), body)
	}
	if status, body := post(t, srv.URL+"/pgsweep/queues/orders/pause", "same-origin"); status != http.StatusSeeOther || !paused() ||
		!strings.HasPrefix(body, "../orders") {
		t.Fatalf("admin's POST: %d, paused %v, Location %q; want 303, a paused queue and the queue's page under the prefix", status, paused(), body)
	}
	if status, _ := post(t, srv.URL+"/pgsweep/queues/orders/resume", "same-origin"); status != http.StatusSeeOther || paused() {
		t.Fatalf("admin's resume: %d, paused %v", status, paused())
	}

	monitor, _ := pgtest.RolePool(t, db, "monitor")
	msrv := uiserve.Serve(t, monitor, db.Schema, ui.Options{})
	if status, body := get(t, msrv.URL+"/pgsweep/"); status != http.StatusOK || !strings.Contains(body, "orders") {
		t.Fatalf("monitor's overview: %d\n%s", status, body)
	}
	if status, body := post(t, msrv.URL+"/pgsweep/queues/orders/pause", "same-origin"); status != http.StatusForbidden || paused() {
		t.Fatalf("monitor's POST: %d, paused %v; want PostgreSQL's refusal (403) and nothing changed\n%s", status, paused(), body)
	}

	ro := uiserve.Serve(t, admin, db.Schema, ui.Options{ReadOnly: true})
	if _, body := get(t, ro.URL+"/pgsweep/queues/orders"); strings.Contains(body, "<form") {
		t.Fatalf("read-only page shows an action:\n%s", body)
	}
	if status, _ := post(t, ro.URL+"/pgsweep/queues/orders/pause", "same-origin"); status != http.StatusForbidden || paused() {
		t.Fatalf("read-only POST: %d, paused %v", status, paused())
	}
}

// Basic auth guards every path, the files included; the headers forbid
// what the pages never need.
func TestBasicAuthAndHeaders(t *testing.T) {
	db := pgtest.New(t, 2)
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{BasicAuth: func(u, p string) bool { return u == "ops" && p == "s3cret" }})
	for _, p := range []string{"/pgsweep/", "/pgsweep/static/app.js"} {
		if status, _ := get(t, srv.URL+p); status != http.StatusUnauthorized {
			t.Fatalf("GET %s without credentials: %d, want 401", p, status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/pgsweep/", nil)
	req.SetBasicAuth("ops", "s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("with credentials: %d", res.StatusCode)
	}
	csp := res.Header.Get("Content-Security-Policy")
	hosts := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{AllowedHosts: []string{"dash.example:443"}})
	for host, want := range map[string]int{"dash.example:443": http.StatusOK, "DASH.example:443": http.StatusOK, "evil.example:443": http.StatusMisdirectedRequest} {
		req, _ := http.NewRequest(http.MethodGet, hosts.URL+"/pgsweep/", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, res.StatusCode, want)
		}
	}
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers: CSP %q, nosniff %q", csp, res.Header.Get("X-Content-Type-Options"))
	}
}

// The vendored front-end files are the ones scripts/ui-assets.sh fetched:
// each file's SHA-256 matches ui/static/VENDOR, and VENDOR names every
// vendored file there is.
func TestVendoredFilesMatchTheirChecksums(t *testing.T) {
	vendor, err := os.ReadFile("static/VENDOR")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(vendor), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 4 {
			t.Fatalf("VENDOR line %q: want package version file sha256", line)
		}
		b, err := os.ReadFile("static/" + f[2])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f[3] {
			t.Errorf("static/%s: sha256 %s, VENDOR says %s (run make ui-assets, never edit a vendored file)", f[2], got, f[3])
		}
		n++
	}
	if n != 5 {
		t.Fatalf("VENDOR lists %d files, want 5 (htmx and uPlot with their licenses)", n)
	}
}

// The overview shows the install's health findings on top and each queue's
// latest snapshot: before maintenance ever ran, the finding that it does
// not run and no figures; after one pass, the snapshot's figures. The
// queue page lists a state's messages by keyset pages and refuses a bad
// cursor.
func TestOverviewAndQueuePageReadSnapshotsHealthAndBrowse(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	ids := make([]int64, 3)
	for i := range ids {
		id, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	_, body := get(t, srv.URL+"/pgsweep/")
	if !strings.Contains(body, "maintenance_not_running") || !strings.Contains(body, "no snapshot yet") {
		t.Fatalf("before any pass: want the maintenance_not_running finding and no figures\n%s", body)
	}
	if err := db.Client.Maintain(ctx, "ui-test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, body = get(t, srv.URL+"/pgsweep/")
	if strings.Contains(body, "no snapshot yet") || !regexp.MustCompile(`<td class="n">3</td>\s*<td class="n">3</td>`).MatchString(body) {
		t.Fatalf("after a pass: want the snapshot's 3 pending, 3 due\n%s", body)
	}
	_, body = get(t, srv.URL+"/pgsweep/queues/orders?state=pending")
	for _, id := range ids {
		if !strings.Contains(body, fmt.Sprintf(`/messages/%d">%d</a></td>`, id, id)) {
			t.Fatalf("pending page lacks message %d\n%s", id, body)
		}
	}
	_, body = get(t, srv.URL+fmt.Sprintf("/pgsweep/queues/orders?state=pending&after=%d", ids[1]))
	if strings.Contains(body, fmt.Sprintf(`/messages/%d"`, ids[0])) || !strings.Contains(body, fmt.Sprintf(`/messages/%d"`, ids[2])) {
		t.Fatalf("the page after id %d must hold %d only\n%s", ids[1], ids[2], body)
	}
	for _, q := range []string{"?after=x", "?after=-1", "?state=nosuch"} {
		if status, _ := get(t, srv.URL+"/pgsweep/queues/orders"+q); status != http.StatusBadRequest {
			t.Errorf("queue page %s: %d, want 400", q, status)
		}
	}
}
