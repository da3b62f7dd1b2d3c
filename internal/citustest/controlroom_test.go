//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/uiserve"
	"github.com/pgsweep/pgsweep/ui"
)

// The control room on a distributed install: maintain() takes the
// snapshots on the coordinator, stats_latest and stats_history read them,
// health() answers, a queue's messages are browsed by state, by error text
// and one by id, and its lanes a page at a time, on the worker that holds
// them; the leases and the pass histories are browsed; a dead letter is
// deleted, and the dashboard's pages load.
func TestCitusControlRoom(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	queues := in.QueuePerWorker(t, "cr")
	dead := map[string]int64{}
	for _, q := range queues {
		if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 1); err != nil {
			t.Fatal(err)
		}
		ms := make([]pgsweep.Message, 5)
		for i := range ms {
			ms[i] = pgsweep.Message{Payload: json.RawMessage(`{"n": 1}`)}
		}
		if _, err := in.Client.SendBatch(ctx, q, ms); err != nil {
			t.Fatal(err)
		}
		for _, lane := range []string{"lane-b", "lane-a", "lane-a"} {
			if _, _, err := in.Client.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lane}); err != nil {
				t.Fatal(err)
			}
		}
		ds, err := in.Client.Claim(ctx, q, "cr", 2, time.Minute)
		if err != nil || len(ds) != 2 {
			t.Fatalf("claim %s: %d %v", q, len(ds), err)
		}
		if _, err := in.Client.Fail(ctx, q, ds[0].Token, []int64{ds[0].ID}, "timeout on "+q, 0); err != nil {
			t.Fatal(err)
		}
		dead[q] = ds[0].ID
	}
	if _, err := in.Pool.Exec(ctx, "CALL "+in.Q()+".maintain('citus-control-room', '20 seconds')"); err != nil {
		t.Fatalf("maintain: %v", err)
	}
	snaps, err := in.Client.StatsLatest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]pgsweep.QueueSnapshot{}
	for _, s := range snaps {
		got[s.Queue] = s
	}
	for _, q := range queues {
		s := got[q]
		if s.TakenAt.IsZero() || s.Pending != 6 || s.InFlight != 1 || s.Dead != 1 {
			t.Errorf("%s: snapshot %+v, want 6 pending (3 in lanes), 1 in flight, 1 dead", q, s)
		}
		lp, err := in.Client.BrowseLanes(ctx, q, pgsweep.LaneCursor{}, 1)
		if err != nil || len(lp.Rows) != 1 || lp.Rows[0].Lane != "lane-a" || lp.Rows[0].Waiting != 1 || lp.End {
			t.Errorf("%s: lanes page 1: %+v %v; want lane-a, one waiting", q, lp, err)
		} else if lp, err = in.Client.BrowseLanes(ctx, q, lp.Next, 1); err != nil || len(lp.Rows) != 1 || lp.Rows[0].Lane != "lane-b" {
			t.Errorf("%s: lanes page 2: %+v %v; want lane-b", q, lp, err)
		}
		if ls, err := in.Client.LaneStats(ctx, q, 10); err != nil || len(ls) != 2 {
			t.Errorf("%s: lane_stats: %+v %v; want two lanes", q, ls, err)
		}
		if h, err := in.Client.StatsHistory(ctx, q, time.Now().Add(-time.Hour), time.Now().Add(time.Minute)); err != nil || len(h) != 1 {
			t.Errorf("%s: history %d rows, %v; want 1", q, len(h), err)
		}
		p, err := in.Client.BrowseMatching(ctx, q, pgsweep.BrowseDead, "timeout", 0, 10)
		if err != nil || len(p.Messages) != 1 || p.Messages[0].ID != dead[q] || p.Messages[0].LastError != "timeout on "+q {
			t.Errorf("%s: dead letters matching: %+v %v", q, p, err)
		}
		if p, err := in.Client.BrowseMessages(ctx, q, pgsweep.BrowsePending, 0, 10); err != nil || len(p.Messages) != 6 {
			t.Errorf("%s: pending: %+v %v", q, p, err)
		}
		if m, found, err := in.Client.BrowseMessage(ctx, q, dead[q]); err != nil || !found || m.State != pgsweep.BrowseDead {
			t.Errorf("%s: message %d: %+v %v %v", q, dead[q], m, found, err)
		}
	}
	if _, err := in.Client.Health(ctx); err != nil {
		t.Fatalf("health: %v", err)
	}
	if p, err := in.Client.BrowseMaintenancePasses(ctx, 0, 10); err != nil || len(p.Rows) == 0 || p.Rows[0].Owner != "citus-control-room" {
		t.Errorf("maintenance passes: %+v %v; want the pass above first", p, err)
	}
	if _, err := in.Client.BrowseLeases(ctx, "", 10); err != nil {
		t.Errorf("leases: %v", err)
	}
	if _, err := in.Client.BrowseRetentionPasses(ctx, "", 0, 10); err != nil {
		t.Errorf("retention passes: %v", err)
	}
	srv := uiserve.Serve(t, in.Pool, in.Schema, ui.Options{})
	for _, p := range []string{"/pgsweep/", "/pgsweep/queues/" + queues[0], "/pgsweep/queues/" + queues[0] + "?state=dead&error=timeout",
		"/pgsweep/queues/" + queues[0] + "/lanes"} {
		res, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), queues[0]) {
			t.Errorf("GET %s: %d\n%s", p, res.StatusCode, body)
		}
	}
	for _, q := range queues {
		if ids, err := in.Client.DeleteDead(ctx, q, []int64{dead[q]}); err != nil || len(ids) != 1 {
			t.Errorf("%s: delete the dead letter: %v %v", q, ids, err)
		}
	}
}
