package uitest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// A limited queue's page shows its flow control and its groups in a real
// browser: both tables are visible and say what is in flight; the group at
// its limit is marked in colour (its cells have a background of their own)
// and the other is not; the hostile group name stays text (no dialog).
func TestQueuePageShowsFlowControl(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx, c := context.Background(), db.Client
	if err := c.QueueConfigure(ctx, "orders", map[string]any{"max_in_flight": 3, "group_max_in_flight": 1}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, g := range []string{hostile, hostile, "acme"} {
		id, _, err := c.Send(ctx, "orders", pgsweep.Message{Group: g, Payload: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// the hostile group reaches its limit (1), acme has room
	if ds, err := c.ClaimIDs(ctx, "orders", "w1", ids[:1], time.Hour); err != nil || len(ds) != 1 {
		t.Fatalf("claim: %d deliveries, %v; want 1", len(ds), err)
	}
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(root+"queues/orders"), chromedp.WaitVisible(chromedp.CSS("#flow")),
		chromedp.WaitVisible(chromedp.CSS("#groups")))
	flow := value(t, b, chromedp.Text(chromedp.CSS("#flow")))
	groups := value(t, b, chromedp.Text(chromedp.CSS("#groups")))
	if !strings.Contains(flow, "1 of 3 in flight") || !strings.Contains(flow, "1 per group") {
		t.Errorf("flow control:\n%s", flow)
	}
	if !strings.Contains(groups, hostile) || !strings.Contains(groups, "at max_in_flight") {
		t.Errorf("groups:\n%s", groups)
	}
	// a cell without a background of its own is transparent (the page's shows through)
	marked := value(t, b, chromedp.Evaluate[[]bool](`Array.from(document.querySelectorAll("#groups tbody tr")).map(function (tr) {
		var bg = getComputedStyle(tr.cells[0]).backgroundColor;
		return bg !== "rgba(0, 0, 0, 0)" && bg !== "transparent" && bg !== getComputedStyle(document.body).backgroundColor;
	})`))
	if len(marked) != 2 || !marked[0] || marked[1] {
		t.Errorf("groups marked (want the hostile one, at its limit, first, then acme, unmarked): %v", marked)
	}
	b.screenshot(t, "queue-flow")
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("queue page with flow control: %s", strings.Join(ps, "; "))
	}
}
