package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// postForm sends a same-origin form POST and returns the status and the
// Location of the redirect (or the body).
func postForm(t *testing.T, url string, form neturl.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if loc := res.Header.Get("Location"); loc != "" {
		return res.StatusCode, loc
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

// The dead letters' page: filter by error text, requeue all matching,
// delete the selection, delete all matching; a monitor's forged POST is
// refused by PostgreSQL and changes nothing.
func TestDeadLettersFilterRequeueAndDelete(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	c := db.Client
	timeouts := pgtest.DeadLetters(t, c, "orders", 3, "timeout talking to payments", "")
	bad := pgtest.DeadLetters(t, c, "orders", 2, "bad payload: "+hostile, "")
	dead := func() int {
		p, err := c.BrowseMessages(ctx, "orders", pgsweep.BrowseDead, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Messages)
	}
	admin, _ := pgtest.RolePool(t, db, "admin")
	srv := uiserve.Serve(t, admin, db.Schema, ui.Options{})
	base := srv.URL + "/pgsweep/queues/orders"

	status, body := get(t, base+"?state=dead&error="+neturl.QueryEscape("timeout"))
	if status != http.StatusOK || strings.Count(body, `name="id"`) != 3 || !strings.Contains(body, "Requeue all matching") ||
		strings.Contains(body, "<script>alert(1)") {
		t.Fatalf("filtered page: %d, %d rows\n%s", status, strings.Count(body, `name="id"`), body)
	}
	status, loc := postForm(t, base+"/requeue-matching", neturl.Values{"error": {"timeout"}})
	if status != http.StatusSeeOther || !strings.Contains(loc, "done=requeued+3") || dead() != 2 {
		t.Fatalf("requeue all matching: %d %q, %d dead left; want 3 requeued, 2 left", status, loc, dead())
	}
	if p, err := c.BrowseMessages(ctx, "orders", pgsweep.BrowsePending, 0, 100); err != nil || len(p.Messages) != 3 || p.Messages[0].ID != timeouts[0] {
		t.Fatalf("pending after the requeue: %+v %v", p, err)
	}
	from, _ := neturl.Parse(base + "/requeue-matching")
	rel, err := neturl.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	if _, body := get(t, from.ResolveReference(rel).String()); !strings.Contains(body, "Done: requeued 3 message(s)") ||
		!strings.Contains(body, `value="timeout"`) {
		t.Fatalf("the page after the action does not say what was done:\n%s", body)
	}

	monitor, _ := pgtest.RolePool(t, db, "monitor")
	msrv := uiserve.Serve(t, monitor, db.Schema, ui.Options{})
	if status, _ := postForm(t, msrv.URL+"/pgsweep/queues/orders/delete-matching", neturl.Values{"error": {"bad"}}); status != http.StatusForbidden || dead() != 2 {
		t.Fatalf("monitor's delete-matching: %d, %d dead; want 403 and nothing changed", status, dead())
	}
	if status, _ := postForm(t, base+"/delete-matching", neturl.Values{"error": {""}}); status != http.StatusBadRequest || dead() != 2 {
		t.Fatalf("delete-matching without a text: %d, %d dead; want 400 and nothing changed", status, dead())
	}
	if status, loc := postForm(t, base+"/delete", neturl.Values{"id": {itoa(bad[0])}}); status != http.StatusSeeOther ||
		!strings.Contains(loc, "done=deleted+1") || dead() != 1 {
		t.Fatalf("delete the selection: %d %q, %d dead", status, loc, dead())
	}
	if status, loc := postForm(t, base+"/delete-matching", neturl.Values{"error": {"bad payload"}}); status != http.StatusSeeOther ||
		!strings.Contains(loc, "done=deleted+1") || dead() != 0 {
		t.Fatalf("delete all matching: %d %q, %d dead", status, loc, dead())
	}
}

// DeleteDead of the letter that stops its lane (lane_dead block): the
// letter goes and the lane's next message is claimable.
func TestDeleteDeadMovesABlockedLaneOn(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	c := db.Client
	if err := c.QueueConfigure(ctx, "orders", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	first := pgtest.DeadLetters(t, c, "orders", 1, "fatal", "L")
	if _, _, err := c.Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: "L"}); err != nil {
		t.Fatal(err)
	}
	if ds, err := c.Claim(ctx, "orders", "w", 10, time.Minute); err != nil || len(ds) != 0 {
		t.Fatalf("a blocked lane: claimed %d, %v", len(ds), err)
	}
	if got, err := c.DeleteDead(ctx, "orders", append(first, 999999)); err != nil || len(got) != 1 || got[0] != first[0] {
		t.Fatalf("DeleteDead: %v %v, want only the dead letter", got, err)
	}
	if ds, err := c.Claim(ctx, "orders", "w", 10, time.Minute); err != nil || len(ds) != 1 {
		t.Fatalf("after the delete: claimed %d, %v; want the lane's next message", len(ds), err)
	}
	if got, err := c.DeleteDead(ctx, "orders", first); err != nil || len(got) != 0 {
		t.Fatalf("a second DeleteDead: %v %v, want nothing", got, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A message's page: its payload pretty-printed and escaped for a role with
// the browse right, hidden from the monitor; the actions its state allows;
// 404 for an id the queue does not hold, 400 for one that is not an id.
func TestMessagePage(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	c := db.Client
	id, _, err := c.Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"note":` + strconv.Quote(hostile) + `,"n":1}`),
		Headers: map[string]string{"h": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := pgtest.RolePool(t, db, "admin")
	srv := uiserve.Serve(t, admin, db.Schema, ui.Options{})
	page := srv.URL + "/pgsweep/queues/orders/messages/" + itoa(id)
	status, body := get(t, page)
	if status != http.StatusOK || !strings.Contains(body, "\n  &#34;n&#34;: 1") || strings.Contains(body, "<script>alert(1)") ||
		!strings.Contains(body, `&lt;script&gt;alert(1)&lt;/script&gt;`) || !strings.Contains(body, `action="../cancel"`) {
		t.Fatalf("admin's message page: %d\n%s", status, body)
	}
	monitor, _ := pgtest.RolePool(t, db, "monitor")
	msrv := uiserve.Serve(t, monitor, db.Schema, ui.Options{ReadOnly: true})
	status, body = get(t, msrv.URL+"/pgsweep/queues/orders/messages/"+itoa(id))
	if status != http.StatusOK || strings.Contains(body, "alert") || !strings.Contains(body, "needs the queue's browse right") ||
		strings.Contains(body, "<form") {
		t.Fatalf("monitor's message page: %d\n%s", status, body)
	}
	if status, _ := get(t, srv.URL+"/pgsweep/queues/orders/messages/"+itoa(id+100)); status != http.StatusNotFound {
		t.Fatalf("an id the queue does not hold: %d, want 404", status)
	}
	if status, _ := get(t, srv.URL+"/pgsweep/queues/orders/messages/x"); status != http.StatusBadRequest {
		t.Fatalf("an id that is not one: %d, want 400", status)
	}
	// dead: requeue and delete from its page
	dead := pgtest.DeadLetters(t, c, "orders", 1, "boom", "")
	if _, body := get(t, srv.URL+"/pgsweep/queues/orders/messages/"+itoa(dead[0])); !strings.Contains(body, `formaction="../delete"`) ||
		!strings.Contains(body, "boom") {
		t.Fatalf("a dead letter's page:\n%s", body)
	}
	if status, _ := postForm(t, srv.URL+"/pgsweep/queues/orders/delete", neturl.Values{"id": {itoa(dead[0])}}); status != http.StatusSeeOther {
		t.Fatalf("delete from its page: %d", status)
	}
	if _, found, err := c.BrowseMessage(ctx, "orders", dead[0]); err != nil || found {
		t.Fatalf("after the delete: found %v, %v", found, err)
	}
}

// A retention policy's page: its settings, the rows each pass deleted as a
// chart's data, the pass with its outcome; 404 for an unknown policy.
func TestRetentionPolicyPage(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	c := db.Client
	db.MustExec(t, "CREATE TABLE "+db.Q()+".events (id bigint PRIMARY KEY, at timestamptz NOT NULL)")
	db.MustExec(t, "CREATE INDEX ON "+db.Q()+".events (at)")
	db.MustExec(t, "INSERT INTO "+db.Q()+".events SELECT g, now() - interval '2 days' FROM generate_series(1, 25) g")
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "ev<1>", Table: db.Schema + ".events", TimeColumn: "at", OlderThan: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if p, _, err := c.RetentionRun(ctx, "ev<1>", "ui-test", 10*time.Second); err != nil || p.RowsDeleted != 25 {
		t.Fatalf("retention run: %+v %v", p, err)
	}
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	if _, body := get(t, srv.URL+"/pgsweep/retention"); !strings.Contains(body, `href="./retention/ev%3C1%3E"`) {
		t.Fatalf("the retention page does not link the policy:\n%s", body)
	}
	status, body := get(t, srv.URL+"/pgsweep/retention/ev%3C1%3E")
	if status != http.StatusOK || !strings.Contains(body, `"labels":["rows deleted"]`) || !strings.Contains(body, `,[25]]`) ||
		!strings.Contains(body, "<td>drained</td>") || strings.Contains(body, "ev<1>") {
		t.Fatalf("the policy's page: %d\n%s", status, body)
	}
	// no queue yet: the overview suggests the SQL in this install's schema
	if _, body := get(t, srv.URL+"/pgsweep/"); !strings.Contains(body, "SELECT &#34;"+db.Schema+"&#34;.queue_create('name')") {
		t.Fatalf("the overview's hint does not name schema %s:\n%s", db.Schema, body)
	}
	if status, _ := get(t, srv.URL+"/pgsweep/retention/nope"); status != http.StatusNotFound {
		t.Fatalf("an unknown policy: %d, want 404", status)
	}
}
