package uitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// hostile is text an attacker controls (a lane key): rendered as markup it
// would open an alert.
const hostile = `<script>alert(1)</script>"><img src=x onerror=alert(2)>`

// browser is one headless Chromium tab that records what went wrong: console
// errors, uncaught exceptions, failed requests and dialogs (an alert that
// opens means hostile text ran).
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func (b *browser) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// take returns the problems since the last call.
func (b *browser) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := os.Getenv("PGSWEEP_CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatal("no browser: install Debian's chromium or set PGSWEEP_CHROMIUM (the dashboard's tests never skip)")
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventLoadingFailed:
			b.problem("request failed: %s %s", e.ErrorText, e.BlockedReason)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				b.problem("HTTP %d for %s", e.Response.Status, e.Response.URL)
			}
		case *page.EventJavascriptDialogOpening:
			b.problem("a dialog opened (%s): %q", e.Type, e.Message)
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.Type == chromedp.ConsoleException {
				b.problem("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line)
			}
		}
	}()
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, page.Enable, page.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return b
}

// do runs steps within a minute.
func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// value runs a that returns a value, within a minute.
func value[T any](t *testing.T, b *browser, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// screenshot saves the page as name.png in the test's artifact directory
// (kept with go test -artifacts).
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png := value(t, b, chromedp.FullScreenshot(100)) // 100: PNG (lower is JPEG)
	if len(png) == 0 {
		t.Fatalf("screenshot %s is empty", name)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Every page loads in a real browser with no console error, no failed
// request and no dialog (the hostile lane key stays text), and its
// screenshot is saved; the queue page's button pauses the queue and the
// page says so.
func TestEveryPageLoadsCleanly(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	if _, _, err := db.Client.Send(ctx, "orders", pgsweep.Message{Lane: hostile, Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{}).URL + "/pgsweep/"
	b := newBrowser(t)
	for _, p := range []struct{ path, name, want string }{
		{"", "overview", "orders"},
		{"queues/orders", "queue", hostile},
		{"queues/orders/lanes", "lanes", hostile},
		{"health", "health", "maintenance_not_running"},
		{"maintenance", "maintenance", "Maintenance"},
		{"leases", "leases", "Leases"},
		{"retention", "retention", "Retention"},
	} {
		b.do(t, chromedp.Navigate(root+p.path), chromedp.WaitVisible(chromedp.CSS("#page")))
		text := value(t, b, chromedp.Text(chromedp.CSS("#page")))
		if !strings.Contains(text, p.want) {
			t.Errorf("page %s does not show %q:\n%s", p.name, p.want, text)
		}
		b.screenshot(t, p.name)
		if ps := b.take(); len(ps) > 0 {
			t.Errorf("page %s: %s", p.name, strings.Join(ps, "; "))
		}
	}
	b.do(t, chromedp.Navigate(root+"queues/orders"), chromedp.Click(chromedp.CSS("form.actions button")),
		chromedp.WaitVisible(chromedp.CSS(".badge")))
	badge := value(t, b, chromedp.Text(chromedp.CSS(".badge")))
	qs, err := db.Client.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if badge != "paused" || !qs[0].Paused {
		t.Fatalf("after the click: badge %q, paused %v", badge, qs[0].Paused)
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("pause: %s", strings.Join(ps, "; "))
	}
}

// The overview refreshes itself: a queue created after the page loaded
// appears without a reload (a 2 s interval), and nothing goes wrong on the
// way.
func TestRefreshShowsWhatChanged(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	ctx := context.Background()
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{Refresh: 2 * time.Second}).URL + "/pgsweep/"
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(root), chromedp.WaitVisible(chromedp.CSS("#page")))
	if err := db.Client.QueueCreate(ctx, "fresh", pgsweep.Outbox, 1); err != nil {
		t.Fatal(err)
	}
	b.do(t, chromedp.WaitVisible(chromedp.CSS(`a[href$="queues/fresh"]`)))
	loads := value(t, b, chromedp.Evaluate[int](`performance.getEntriesByType("navigation").length`))
	if loads != 1 {
		t.Fatalf("%d navigations: the page reloaded instead of refreshing in place", loads)
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("refresh: %s", strings.Join(ps, "; "))
	}
}

// The queue page's charts draw the history: two canvases (messages,
// throughput) with ink on them, also after a refresh swapped the page.
func TestQueueChartsDraw(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "orders", pgsweep.Outbox, 1)
	s := db.Q()
	db.MustExec(t, `INSERT INTO `+s+`.maintain_snapshot (queue, taken_at, since, pending, due, in_flight, failed, dead,
		processed, lanes, blocked_lanes, sent, completed, failures, dead_lettered, retried, failures_live, retries_live)
		SELECT 'orders', now() - make_interval(mins => k), now() - make_interval(mins => k + 1), 10 * k, 10 * k, k, k % 3, k % 2,
		       0, 0, 0, 60 * k, 50 * k, 0, 0, 0, 0, 0
		  FROM generate_series(1, 20) k`)
	root := uiserve.Serve(t, db.Pool, db.Schema, ui.Options{Refresh: 2 * time.Second}).URL + "/pgsweep/"
	b := newBrowser(t)
	inked := `Array.from(document.querySelectorAll(".chart canvas")).map(function (c) {
		var d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		for (var i = 3; i < d.length; i += 4) { if (d[i] !== 0) return true; }
		return false;
	})`
	b.do(t, chromedp.Navigate(root+"queues/orders"), chromedp.WaitVisible(chromedp.CSS("#chart-rate canvas")))
	if got := value(t, b, chromedp.Evaluate[[]bool](inked)); len(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("canvases with ink: %v, want two", got)
	}
	b.screenshot(t, "queue-charts")
	// after a refresh (2 s) the page was swapped; the charts are drawn again
	b.do(t, chromedp.Evaluate[chromedp.Void](`document.getElementById("chart-depth").dataset.old = "1"`),
		chromedp.WaitNotPresent(chromedp.CSS(`#chart-depth[data-old]`)), chromedp.WaitVisible(chromedp.CSS("#chart-rate canvas")))
	if got := value(t, b, chromedp.Evaluate[[]bool](inked)); len(got) != 2 || !got[0] || !got[1] {
		t.Fatalf("after a refresh, canvases with ink: %v, want two", got)
	}
	if ps := b.take(); len(ps) > 0 {
		t.Errorf("charts: %s", strings.Join(ps, "; "))
	}
}
