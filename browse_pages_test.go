package pgsweep_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// laneRow is what a test compares of a lane on a page.
type laneRow struct {
	Lane        string
	Blocked     bool
	Waiting     int64
	HeadState   string
	MaySkip     bool
	WaitingMore bool
}

func laneRows(ls []pgsweep.BrowsedLane) []laneRow {
	out := make([]laneRow, len(ls))
	for i, l := range ls {
		out[i] = laneRow{l.Lane, l.Blocked, l.Waiting, l.HeadState, l.MaySkip, l.WaitingMore}
	}
	return out
}

// TestBrowseLanes: the blocked lanes first, by name, then the others; a
// page at a time to the end; may_skip for the superuser, not for the
// monitor; a worker may not browse; bad arguments are ErrInvalidArgument.
func TestBrowseLanes(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "lq", pgsweep.Outbox, 1)
	if err := c.QueueConfigure(ctx, "lq", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	zz := pgtest.DeadLetters(t, c, "lq", 1, "boom", "zz")[0]
	m := pgtest.DeadLetters(t, c, "lq", 1, "boom", "m")[0]
	for _, lane := range []string{"zz", "zz", "c", "a", "b", "b"} {
		if _, _, err := c.Send(ctx, "lq", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lane}); err != nil {
			t.Fatal(err)
		}
	}
	var got [][]laneRow
	var after pgsweep.LaneCursor
	for {
		p, err := c.BrowseLanes(ctx, "lq", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, laneRows(p.Rows))
		if p.End {
			break
		}
		after = p.Next
	}
	want := [][]laneRow{
		{{"m", true, 0, "dead", true, false}, {"zz", true, 2, "dead", true, false}},
		{{"a", false, 0, "pending", false, false}, {"b", false, 1, "pending", false, false}},
		{{"c", false, 0, "pending", false, false}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pages:\n got %+v\nwant %+v", got, want)
	}
	first, err := c.BrowseLanes(ctx, "lq", pgsweep.LaneCursor{}, 1)
	if err != nil || len(first.Rows) != 1 || first.Rows[0].HeadID != m || first.Rows[0].Queue != "lq" || first.Rows[0].HeadAttempt != 1 {
		t.Fatalf("first lane: %+v, %v; want m blocked by %d", first.Rows, err, m)
	}
	if p, err := c.BrowseLanes(ctx, "lq", pgsweep.LaneCursor{Lane: "m", Blocked: true}, 1); err != nil || p.Rows[0].HeadID != zz {
		t.Fatalf("after m: %+v, %v; want zz blocked by %d", p.Rows, err, zz)
	}

	mp, err := roleClient(t, db, "monitor").BrowseLanes(ctx, "lq", pgsweep.LaneCursor{}, 2)
	if err != nil || len(mp.Rows) != 2 || mp.Rows[0].MaySkip || mp.Rows[1].MaySkip || !mp.Rows[0].Blocked {
		t.Fatalf("the monitor's page: %+v, %v; want the blocked lanes, may_skip false", mp.Rows, err)
	}
	if _, err := roleClient(t, db, "worker").BrowseLanes(ctx, "lq", pgsweep.LaneCursor{}, 2); !errors.Is(err, pgsweep.ErrPermissionDenied) {
		t.Fatalf("a worker's browse: %v, want ErrPermissionDenied", err)
	}
	for _, bad := range []func() error{
		func() error { _, err := c.BrowseLanes(ctx, "lq", pgsweep.LaneCursor{}, 0); return err },
		func() error { _, err := c.BrowseLanes(ctx, "nope", pgsweep.LaneCursor{}, 10); return err },
		func() error {
			_, err := c.BrowseLanes(ctx, "lq", pgsweep.LaneCursor{Lane: strings.Repeat("l", 201)}, 10)
			return err
		},
	} {
		if err := bad(); !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Errorf("bad argument: %v, want ErrInvalidArgument", err)
		}
	} // a cursor is only compared: one with a newline (a lane named before
	// 0.34's name rule) pages on
	if _, err := c.BrowseLanes(ctx, "lq", pgsweep.LaneCursor{Lane: "a\nb"}, 10); err != nil {
		t.Errorf("a cursor with a newline: %v, want a page", err)
	}
}

// TestBrowseLanesStableUnderClaims pages through a queue's lanes, 7 at a
// time, while other sessions send to new lanes, claim their heads and
// complete them (lanes come and go around the cursor): every lane that
// stays throughout (blocked, or its head held in flight) is on exactly one
// page, and no lane is on two.
func TestBrowseLanesStableUnderClaims(t *testing.T) {
	ctx, _, c := pgtest.StartQueue(t, 8, "sq", pgsweep.Outbox, 1)
	if err := c.QueueConfigure(ctx, "sq", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	stable := map[string]bool{}
	for i := range 10 {
		lane := fmt.Sprintf("blocked-%02d", i)
		pgtest.DeadLetters(t, c, "sq", 1, "boom", lane)
		stable[lane] = true
	}
	for i := range 60 {
		lane := fmt.Sprintf("held-%02d", i)
		for range 2 {
			if _, _, err := c.Send(ctx, "sq", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lane}); err != nil {
				t.Fatal(err)
			}
		}
		stable[lane] = true
	}
	if ds, err := c.Claim(ctx, "sq", "holder", 100, time.Hour); err != nil || len(ds) != 60 {
		t.Fatalf("holding the 60 heads: %d, %v", len(ds), err)
	}

	stop := make(chan struct{})
	moved := make(chan struct{}, 1) // a churn round ended
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// lanes that sort among the stable ones: before, between, after
				lane := fmt.Sprintf("%s-%d-%d", []string{"a", "held-30x", "zz"}[i%3], w, i)
				for range 2 { // two: the lane stays until a later round takes its second
					if _, _, err := c.Send(ctx, "sq", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lane}); err != nil {
						errs <- err
						return
					}
				}
				ds, err := c.Claim(ctx, "sq", fmt.Sprintf("churn-%d", w), 5, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				for _, d := range ds {
					if _, err := c.Complete(ctx, "sq", d.Token, []int64{d.ID}); err != nil {
						errs <- err
						return
					}
				}
				select {
				case moved <- struct{}{}:
				default:
				}
			}
		}()
	}
	seen := map[string]int{}
	var after pgsweep.LaneCursor
	for pages := 0; ; pages++ {
		select { // forget a round that ended before this page is read
		case <-moved:
		default:
		}
		p, err := c.BrowseLanes(ctx, "sq", after, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range p.Rows {
			seen[l.Lane]++
		}
		if p.End {
			break
		}
		after = p.Next
		select { // let the churn move lanes between pages: a round that ended after the read
		case <-moved:
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("no churn round in 30 s")
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d lanes seen, %d of them the churn's (made and emptied while the pages were read)", len(seen), len(seen)-len(stable))
	for lane, n := range seen {
		if n > 1 {
			t.Errorf("lane %s on %d pages", lane, n)
		}
	}
	for lane := range stable {
		if seen[lane] != 1 {
			t.Errorf("stable lane %s on %d pages, want 1", lane, seen[lane])
		}
	}
}

// TestBrowseLeasesAndPasses: leases by name, maintenance and retention
// passes newest first, a page at a time, to the end.
func TestBrowseLeasesAndPasses(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 4)
	for _, n := range []string{"le", "la", "ld", "lb", "lc"} {
		if _, ok, err := c.LeaseAcquire(ctx, n, "o-"+n, time.Minute); err != nil || !ok {
			t.Fatalf("lease %s: %v %v", n, ok, err)
		}
	}
	var names [][]string
	for after := ""; ; {
		p, err := c.BrowseLeases(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		var page []string
		for _, l := range p.Rows {
			if !l.Live || l.Owner != "o-"+l.Name {
				t.Errorf("lease %+v: want live, held by o-%s", l, l.Name)
			}
			page = append(page, l.Name)
		}
		names = append(names, page)
		if p.End {
			break
		}
		after = p.Next
	}
	if want := [][]string{{"la", "lb"}, {"lc", "ld"}, {"le"}}; !reflect.DeepEqual(names, want) {
		t.Fatalf("lease pages %v, want %v", names, want)
	}

	for i := range 3 {
		if err := c.Maintain(ctx, fmt.Sprintf("m%d", i), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	p1, err := c.BrowseMaintenancePasses(ctx, 0, 2)
	if err != nil || len(p1.Rows) != 2 || p1.End || p1.Rows[0].Owner != "m2" || p1.Rows[1].Owner != "m1" || p1.Next != p1.Rows[1].ID {
		t.Fatalf("maintenance page 1: %+v, %v; want m2, m1", p1, err)
	}
	p2, err := c.BrowseMaintenancePasses(ctx, p1.Next, 2)
	if err != nil || len(p2.Rows) != 1 || !p2.End || p2.Rows[0].Owner != "m0" {
		t.Fatalf("maintenance page 2: %+v, %v; want m0, the end", p2, err)
	}

	db.MustExec(t, "CREATE TABLE "+db.Q()+".events (id bigint PRIMARY KEY, at timestamptz NOT NULL)")
	db.MustExec(t, "CREATE INDEX ON "+db.Q()+".events (at)")
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "ev", Table: db.Schema + ".events", TimeColumn: "at", OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		db.MustExec(t, fmt.Sprintf("INSERT INTO %s.events SELECT g, now() - interval '2 hours' FROM generate_series(%d, %d) g", db.Q(), i*10+1, i*10+i+1))
		if _, _, err := c.RetentionRun(ctx, "ev", fmt.Sprintf("r%d", i), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var deleted []int64
	var before int64
	for {
		p, err := c.BrowseRetentionPasses(ctx, "ev", before, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Rows {
			deleted = append(deleted, r.RowsDeleted)
		}
		if p.End {
			break
		}
		before = p.Next
	}
	if want := []int64{3, 2, 1}; !reflect.DeepEqual(deleted, want) {
		t.Fatalf("rows deleted by the passes, newest first: %v, want %v", deleted, want)
	}
	if all, err := c.BrowseRetentionPasses(ctx, "", 0, 10); err != nil || len(all.Rows) != 3 || !all.End {
		t.Fatalf("every policy's passes: %+v, %v", all, err)
	}
	if _, err := c.BrowseRetentionPasses(ctx, "no-such-policy", 0, 10); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("an unknown policy: %v, want ErrInvalidArgument", err)
	}
	if _, err := c.BrowseMaintenancePasses(ctx, -1, 10); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("a negative cursor: %v, want ErrInvalidArgument", err)
	}
}
