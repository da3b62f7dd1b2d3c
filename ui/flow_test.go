package ui_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

var (
	rowRe  = regexp.MustCompile(`(?s)<tr( class="warn")?>(.*?)</tr>`)
	cellRe = regexp.MustCompile(`(?s)<t[dh][^>]*>(.*?)</t[dh]>`)
	tagRe  = regexp.MustCompile(`<[^>]*>`)
)

// table returns the rows of the table whose id is id in body: each row is
// "warn" or "" (its marking), then its cells' text. It fails the test when
// the page has no such table.
func table(t *testing.T, body, id string) [][]string {
	t.Helper()
	start := strings.Index(body, `<table class="grid" id="`+id+`">`)
	if start < 0 {
		t.Fatalf("no table %s on the page:\n%s", id, body)
	}
	end := strings.Index(body[start:], "</table>")
	var rows [][]string
	for _, r := range rowRe.FindAllStringSubmatch(body[start:start+end], -1) {
		row := []string{strings.TrimSpace(strings.TrimPrefix(r[1], ` class="`))}
		row[0] = strings.TrimSuffix(row[0], `"`)
		for _, c := range cellRe.FindAllStringSubmatch(r[2], -1) {
			row = append(row, html.UnescapeString(strings.TrimSpace(tagRe.ReplaceAllString(c[1], ""))))
		}
		rows = append(rows, row)
	}
	return rows
}

// sendTo sends one message of group g (none when empty) to queue q, in a
// transaction of its own, and returns its id.
func sendTo(ctx context.Context, t *testing.T, c *pgsweep.Client, q, g string) int64 {
	t.Helper()
	id, _, err := c.Send(ctx, q, pgsweep.Message{Payload: []byte(`{}`), Group: g})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// anyAge stands for a wall-clock age in a wanted row: the test checks the
// cell holds an age, not which.
const anyAge = "<age>"

var ageRe = regexp.MustCompile(`^\d+(s|m\d\ds|h\d\dm|d\d\dh)$`)

// sameRows compares got with want, anyAge matching any age.
func sameRows(got, want [][]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if len(got[i]) != len(want[i]) {
			return false
		}
		for k := range got[i] {
			if want[i][k] == anyAge && ageRe.MatchString(got[i][k]) {
				continue
			}
			if got[i][k] != want[i][k] {
				return false
			}
		}
	}
	return true
}

// The queue page shows a queue's flow control and its groups as
// flow_stats and group_stats see them after two claims: the queue's
// max_in_flight with what is in flight, its rate with the tokens spent
// (all of them: marked), the group defaults and overrides; each group with
// its limits, a group at its max_in_flight and one whose rate is spent
// marked. A queue at its max_in_flight is marked; a queue without settings
// says so in one line, and one without grouped messages has no groups. The
// rates are per minute, the slowest there are: no token comes back within
// the test, so the figures are exact (the assertions hold for 60 s after
// the claim). The monitor role sees the same page.
func TestQueuePageShowsFlowControlAndGroups(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "limited", pgsweep.Outbox, 3)
	ctx, c := context.Background(), db.Client
	if err := c.QueueConfigure(ctx, "limited", map[string]any{"max_in_flight": 5, "rate": "1/min", "rate_burst": 2,
		"group_max_in_flight": 1, "group_overrides": map[string]any{"acme": map[string]any{"max_in_flight": 10, "rate": "1/min"}}}); err != nil {
		t.Fatal(err)
	}
	// one transaction each: the groups' oldest waiting messages are in this order
	acme := sendTo(ctx, t, c, "limited", "acme")
	sendTo(ctx, t, c, "limited", "acme")
	beta := sendTo(ctx, t, c, "limited", "beta")
	sendTo(ctx, t, c, "limited", "beta")
	sendTo(ctx, t, c, "limited", "gamma")
	if ds, err := c.ClaimIDs(ctx, "limited", "w1", []int64{acme, beta}, time.Hour); err != nil || len(ds) != 2 {
		t.Fatalf("claim_ids: %d deliveries, %v; want 2", len(ds), err)
	}

	for _, q := range []string{"narrow", "plain"} {
		if err := c.QueueCreate(ctx, q, pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.QueueConfigure(ctx, "narrow", map[string]any{"max_in_flight": 2, "group_rate": "30/s"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		sendTo(ctx, t, c, "narrow", "")
	}
	if ds, err := c.Claim(ctx, "narrow", "w1", 3, time.Hour); err != nil || len(ds) != 2 {
		t.Fatalf("claim of narrow: %d deliveries, %v; want 2 (its max_in_flight)", len(ds), err)
	}
	sendTo(ctx, t, c, "plain", "solo")

	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	monitor, _ := pgtest.RolePool(t, db, "monitor")
	msrv := uiserve.Serve(t, monitor, db.Schema, ui.Options{})
	for _, url := range []string{srv.URL, msrv.URL} {
		status, body := get(t, url+"/pgsweep/queues/limited")
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", url, status, body)
		}
		want := [][]string{
			{"", "max_in_flight", "2 of 5 in flight"},
			{"warn", "rate", "1/min, burst 2: 2 used — claims wait for the rate"},
			{"", "group_max_in_flight", "1 per group"},
			{"", "group_rate", "none"},
			{"", "group_overrides", "1 group with limits of its own"},
		}
		if got := table(t, body, "flow"); !reflect.DeepEqual(got, want) {
			t.Errorf("flow control:\n got %q\nwant %q", got, want)
		}
		want = [][]string{
			{"", "Group", "In flight", "Waiting", "Oldest waiting", "Rate", "Rate used", "Limit"},
			{"warn", "acme", "1 of 10", "1", anyAge, "1/min", "1 of 1", "waits for the rate"},
			{"warn", "beta", "1 of 1", "1", anyAge, "–", "–", "at max_in_flight"},
			{"", "gamma", "0 of 1", "1", anyAge, "–", "–", ""},
		}
		if got := table(t, body, "groups"); !sameRows(got, want) {
			t.Errorf("groups:\n got %q\nwant %q", got, want)
		}
		if strings.Contains(body, "the queue has more") {
			t.Errorf("3 groups: the page says there are more")
		}
	}

	_, body := get(t, srv.URL+"/pgsweep/queues/narrow")
	want := [][]string{
		{"warn", "max_in_flight", "2 of 2 in flight — at the limit"},
		{"", "rate", "none"},
		{"", "group_max_in_flight", "none"},
		{"", "group_rate", "30/s per group"},
		{"", "group_overrides", "none"},
	}
	if got := table(t, body, "flow"); !reflect.DeepEqual(got, want) {
		t.Errorf("narrow's flow control:\n got %q\nwant %q", got, want)
	}
	if !strings.Contains(body, `<p class="empty">No groups with messages.</p>`) || strings.Contains(body, `id="groups"`) {
		t.Errorf("narrow has no grouped message: want the empty line, no groups table\n%s", body)
	}

	_, body = get(t, srv.URL+"/pgsweep/queues/plain")
	if !strings.Contains(body, `<p class="empty" id="flow">No limits: the queue has no max_in_flight, rate, group_max_in_flight, group_rate or group_overrides (queue_configure; docs/queues.md, “Flow control”).</p>`) ||
		strings.Contains(body, `<table class="grid" id="flow">`) {
		t.Errorf("plain has no settings: want the no-limits line\n%s", body)
	}
	want = [][]string{
		{"", "Group", "In flight", "Waiting", "Oldest waiting", "Rate", "Rate used", "Limit"},
		{"", "solo", "0", "1", anyAge, "–", "–", ""},
	}
	if got := table(t, body, "groups"); !sameRows(got, want) {
		t.Errorf("plain's groups:\n got %q\nwant %q", got, want)
	}
}

// The queue page shows the 10 groups waiting longest and says when there
// are more.
func TestQueuePageShowsTenGroups(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "many", pgsweep.Outbox, 3)
	ctx := context.Background()
	for g := range 11 {
		sendTo(ctx, t, db.Client, "many", fmt.Sprintf("g%02d", g))
	}
	srv := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{})
	_, body := get(t, srv.URL+"/pgsweep/queues/many")
	rows := table(t, body, "groups")
	if len(rows) != 11 || rows[1][1] != "g00" || rows[10][1] != "g09" {
		t.Fatalf("want the header and g00..g09 (the oldest waiting first), got %q", rows)
	}
	if !strings.Contains(body, `<p class="muted">The 10 groups waiting longest; the queue has more (<code>group_stats</code> lists up to 10,000).</p>`) {
		t.Fatalf("11 groups: the page does not say there are more\n%s", body)
	}
}
