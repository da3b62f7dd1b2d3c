package uitest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// An admin requeues a dead letter in the browser: select it, press the
// button, and it is pending (on the pending tab and in the database); the
// hostile error text stays text on the way, and the message's own page
// loads cleanly.
func TestRequeueADeadLetter(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	id := pgtest.DeadLetters(t, db.Client, "orders", 1, "boom "+hostile, "")[0]
	admin, _ := pgtest.RolePool(t, db, "admin")
	root := uiserve.Serve(t, admin, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(fmt.Sprintf("%squeues/orders/messages/%d", root, id)), chromedp.WaitVisible(chromedp.CSS("#page")))
	if text := value(t, b, chromedp.Text(chromedp.CSS("#page"))); !strings.Contains(text, hostile) || !strings.Contains(text, `"n": 1`) {
		t.Fatalf("the message's page:\n%s", text)
	}
	b.screenshot(t, "message")
	b.do(t, chromedp.Navigate(root+"queues/orders?state=dead"), chromedp.WaitVisible(chromedp.CSS(`input[name="id"]`)),
		chromedp.Click(chromedp.CSS(`input[name="id"]`)),
		chromedp.Click(chromedp.CSS(`form.selection button[type="submit"]:not([formaction])`)),
		chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
	if text := value(t, b, chromedp.Text(chromedp.CSS("p.notice"))); !strings.Contains(text, "requeued 1") {
		t.Fatalf("after the click: %q", text)
	}
	b.do(t, chromedp.Click(chromedp.CSS(`nav.tabs a[href="?state=pending"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`a[href$="messages/%d"]`, id))))
	if m, found, err := db.Client.BrowseMessage(context.Background(), "orders", id); err != nil || !found || m.State != pgsweep.BrowsePending {
		t.Fatalf("in the database: %+v %v %v, want pending", m, found, err)
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("requeue: %s", strings.Join(ps, "; "))
	}
}

// A monitor's pages and the read-only dashboard show no action (no POST
// form), and a POST forged from the monitor's page is refused by
// PostgreSQL: nothing changes.
func TestMonitorAndReadOnlyHaveNoActions(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	id := pgtest.DeadLetters(t, db.Client, "orders", 1, "boom", "")[0]
	monitor, _ := pgtest.RolePool(t, db, "monitor")
	admin, _ := pgtest.RolePool(t, db, "admin")
	b := newBrowser(t)
	posts := `document.querySelectorAll('form[method="post"]').length`
	for _, srv := range []struct {
		name string
		root string
	}{
		{"monitor", uiserve.Serve(t, monitor, db.Schema, ui.Options{ReadOnly: true}).URL + "/pgsweep/"},
		{"read-only admin", uiserve.Serve(t, admin, db.Schema, ui.Options{ReadOnly: true}).URL + "/pgsweep/"},
	} {
		for _, p := range []string{"queues/orders", "queues/orders?state=dead", "queues/orders/lanes", fmt.Sprintf("queues/orders/messages/%d", id)} {
			b.do(t, chromedp.Navigate(srv.root+p), chromedp.WaitVisible(chromedp.CSS("#page")))
			if n := value(t, b, chromedp.Evaluate[int](posts)); n != 0 {
				t.Errorf("%s: %s shows %d action form(s)", srv.name, p, n)
			}
		}
		if ps := b.take(); len(ps) > 0 {
			t.Errorf("%s: %s", srv.name, strings.Join(ps, "; "))
		}
	}
	// a monitor's dashboard that is not read-only still cannot act: the
	// page forges the POST a button would send, and PostgreSQL refuses it
	root := uiserve.Serve(t, monitor, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b.do(t, chromedp.Navigate(root+"queues/orders?state=dead"), chromedp.WaitVisible(chromedp.CSS("#page")))
	status := value(t, b, chromedp.Evaluate[int](fmt.Sprintf(`fetch("./orders/delete", {method: "POST",
		headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "id=%d"}).then(function (r) { return r.status; })`, id),
		chromedp.EvalAwaitPromise))
	if status != 403 {
		t.Fatalf("the monitor's forged POST: %d, want 403", status)
	}
	if m, found, err := db.Client.BrowseMessage(context.Background(), "orders", id); err != nil || !found || m.State != pgsweep.BrowseDead {
		t.Fatalf("after the forged POST: %+v %v %v, want the dead letter untouched", m, found, err)
	}
	b.take() // the 403 itself is what was wanted
}

// On a phone's width every page fits: nothing makes the page scroll
// sideways (wide tables scroll inside themselves).
func TestPhoneWidth(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders-with-a-rather-long-name-for-a-phone", pgsweep.Outbox, 1)
	id := pgtest.DeadLetters(t, db.Client, "orders-with-a-rather-long-name-for-a-phone", 1, "an error text that is long enough to wrap "+strings.Repeat("x", 200), "")[0]
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b := newBrowser(t)
	b.do(t, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	q := "queues/orders-with-a-rather-long-name-for-a-phone"
	for _, p := range []string{"", q, q + "?state=dead", q + "/lanes", fmt.Sprintf("%s/messages/%d", q, id), "health", "maintenance", "leases", "retention"} {
		b.do(t, chromedp.Navigate(root+p), chromedp.WaitVisible(chromedp.CSS("#page")))
		widths := value(t, b, chromedp.Evaluate[[]int](`[document.documentElement.scrollWidth, document.documentElement.clientWidth]`))
		if widths[0] > widths[1] {
			t.Errorf("page %q at 390 px: %d px wide, scrolls sideways", p, widths[0])
		}
		if p == q+"?state=dead" {
			b.screenshot(t, "phone-dead-letters")
		}
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("phone: %s", strings.Join(ps, "; "))
	}
}

// A retention policy's page draws the rows each pass deleted.
func TestRetentionChartDraws(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	db.MustExec(t, "CREATE TABLE "+db.Q()+".events (id bigint PRIMARY KEY, at timestamptz NOT NULL)")
	db.MustExec(t, "CREATE INDEX ON "+db.Q()+".events (at)")
	if err := db.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "ev", Table: db.Schema + ".events", TimeColumn: "at", OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // three passes, each with rows to delete
		db.MustExec(t, fmt.Sprintf("INSERT INTO %s.events SELECT g, now() - interval '2 hours' FROM generate_series(%d, %d) g", db.Q(), i*100+1, i*100+10*(i+1)))
		if _, _, err := db.Client.RetentionRun(ctx, "ev", "ui-test", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(root+"retention/ev"), chromedp.WaitVisible(chromedp.CSS("#chart-deleted canvas")))
	inked := `(function () { var c = document.querySelector("#chart-deleted canvas");
		var d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		for (var i = 3; i < d.length; i += 4) { if (d[i] !== 0) return true; }
		return false; })()`
	if !value(t, b, chromedp.Evaluate[bool](inked)) {
		t.Fatal("the rows-deleted chart has no ink")
	}
	b.screenshot(t, "retention-policy")
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("retention policy page: %s", strings.Join(ps, "; "))
	}
}

// The lanes page in a browser: a blocked lane shows first, and the
// admin's button skips its dead letter (the page comes back with the lane
// no longer blocked); a monitor's page, not read-only, shows no button.
// Nothing goes wrong on the way (no console error, no failed request).
func TestLanesPageSkip(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	if err := db.Client.QueueConfigure(ctx, "orders", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	pgtest.DeadLetters(t, db.Client, "orders", 1, "boom", "zz-blocked")
	for _, l := range []string{"a-lane", "zz-blocked", hostile} {
		if _, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Lane: l, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	admin, _ := pgtest.RolePool(t, db, "admin")
	monitor, _ := pgtest.RolePool(t, db, "monitor")
	b := newBrowser(t)
	firstRow := `(function () { var r = document.querySelector("#page table.grid tbody tr");
		return [r.className, r.cells[0].textContent]; })()`
	forms := `document.querySelectorAll('form[method="post"]').length`

	mroot := uiserve.Serve(t, monitor, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b.do(t, chromedp.Navigate(mroot+"queues/orders/lanes"), chromedp.WaitVisible(chromedp.CSS("#page table.grid")))
	if row := value(t, b, chromedp.Evaluate[[]string](firstRow)); row[0] != "warn" || row[1] != "zz-blocked" {
		t.Fatalf("the monitor's first row: %q, want the blocked lane zz-blocked", row)
	}
	if n := value(t, b, chromedp.Evaluate[int](forms)); n != 0 {
		t.Fatalf("the monitor's lanes page shows %d action form(s)", n)
	}

	root := uiserve.Serve(t, admin, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b.do(t, chromedp.Navigate(root+"queues/orders/lanes"), chromedp.WaitVisible(chromedp.CSS("#page table.grid")))
	if row := value(t, b, chromedp.Evaluate[[]string](firstRow)); row[0] != "warn" || row[1] != "zz-blocked" {
		t.Fatalf("the admin's first row: %q, want the blocked lane zz-blocked", row)
	}
	b.screenshot(t, "lanes")
	b.do(t, chromedp.Click(chromedp.CSS("form.inline button")), chromedp.WaitNotPresent(chromedp.CSS("tr.warn")),
		chromedp.WaitVisible(chromedp.CSS("#page table.grid")))
	if u := value(t, b, chromedp.Evaluate[string](`location.pathname`)); !strings.HasSuffix(u, "/queues/orders/lanes") {
		t.Fatalf("after the skip the browser is at %s, want the lanes page", u)
	}
	p, err := db.Client.BrowseLanes(ctx, "orders", pgsweep.LaneCursor{}, 10)
	if err != nil || len(p.Rows) != 3 || p.Rows[0].Blocked {
		t.Fatalf("after the skip: %+v, %v; want three lanes, none blocked", p.Rows, err)
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("lanes page: %s", strings.Join(ps, "; "))
	}
}
