package pgsweep_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestStatsSnapshotsByMaintain: CALL maintain() takes a snapshot per queue
// (the part 'stats'), a second one when the part is due again, with the
// counters of the interval; the monitor reads them with StatsLatest and
// StatsHistory, and their gauges equal the exact live count (QueueStats).
func TestStatsSnapshotsByMaintain(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "o", pgsweep.Outbox, 3)
	stats := db.Q()
	db.MustExec(t, "SELECT "+stats+".setting_set('stats_interval', '1 hour')")
	due := func() { // the part is due again without waiting an hour
		db.MustExec(t, "UPDATE "+stats+".maintain_state SET last_finished_at = NULL WHERE part = 'stats'")
	}
	for i := 0; i < 3; i++ {
		if _, _, err := c.Send(ctx, "o", pgsweep.Message{Payload: json.RawMessage(`{"secret": 1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	mon := roleClient(t, db, "monitor")
	if st, err := mon.StatsLatest(ctx); err != nil || len(st) != 1 || !st[0].TakenAt.IsZero() {
		t.Fatalf("before any pass: %+v, %v; want the queue with no snapshot", st, err)
	}
	if err := c.Maintain(ctx, "stats-test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := mon.StatsLatest(ctx)
	if err != nil || len(st) != 1 {
		t.Fatalf("StatsLatest: %+v, %v", st, err)
	}
	first := st[0]
	if first.Queue != "o" || first.Kind != "outbox" || first.TakenAt.IsZero() || !first.Since.IsZero() ||
		first.Pending != 3 || first.Due != 3 || first.InFlight != 0 || first.Sent != 0 {
		t.Fatalf("first snapshot %+v: want 3 pending and due, no counters", first)
	}

	ds, err := c.Claim(ctx, "o", "w", 3, time.Minute)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: %d, %v", len(ds), err)
	}
	if _, err := c.Complete(ctx, "o", ds[0].Token, []int64{ds[0].ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fail(ctx, "o", ds[1].Token, []int64{ds[1].ID}, "boom", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeadLetter(ctx, "o", ds[2].Token, []int64{ds[2].ID}, "bad"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Send(ctx, "o", pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// not due: the interval (an hour) has not passed
	if err := c.Maintain(ctx, "stats-test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, err := mon.StatsLatest(ctx); err != nil || !st[0].TakenAt.Equal(first.TakenAt) {
		t.Fatalf("a pass before stats_interval took a snapshot: %+v, %v", st, err)
	}
	due()
	if err := c.Maintain(ctx, "stats-test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err = mon.StatsLatest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := st[0]
	want := pgsweep.QueueSnapshot{Queue: "o", Kind: "outbox", TakenAt: second.TakenAt, Since: first.TakenAt,
		Pending: 1, Due: 1, Failed: 1, Dead: 1, OldestDueAge: second.OldestDueAge,
		Sent: 1, Completed: 1, Failures: 2, DeadLettered: 1}
	if second != want {
		t.Fatalf("second snapshot\n got %+v\nwant %+v", second, want)
	}
	live, err := c.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := live[0]; l.Pending != second.Pending || l.Processing != second.InFlight || l.Failed != second.Failed || l.Dead != second.Dead {
		t.Fatalf("snapshot %+v and the live count %+v differ", second, l)
	}

	h, err := mon.StatsHistory(ctx, "o", first.TakenAt, second.TakenAt.Add(time.Microsecond))
	if err != nil || len(h) != 2 || !h[0].TakenAt.Equal(first.TakenAt) || h[1] != (pgsweep.QueueSnapshot{
		Queue: "o", TakenAt: second.TakenAt, Since: first.TakenAt, Pending: 1, Due: 1, Failed: 1, Dead: 1,
		OldestDueAge: second.OldestDueAge, Sent: 1, Completed: 1, Failures: 2, DeadLettered: 1}) {
		t.Fatalf("history: %+v, %v", h, err)
	}
	if h, err := mon.StatsHistory(ctx, "o", first.TakenAt, first.TakenAt); err != nil || len(h) != 0 {
		t.Fatalf("an empty range: %+v, %v", h, err)
	}
	if _, err := mon.StatsHistory(ctx, "o", second.TakenAt, first.TakenAt); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("from after to: %v, want ErrInvalidArgument", err)
	}
	if _, err := mon.StatsHistory(ctx, "", first.TakenAt, second.TakenAt); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("an empty queue name: %v, want ErrInvalidArgument", err)
	}

	// the run is recorded like the other parts'
	var counts string
	if err := db.Pool.QueryRow(ctx, "SELECT counts::text FROM "+stats+".maintain_run WHERE part = 'stats' ORDER BY id DESC LIMIT 1").Scan(&counts); err != nil || counts != `{"queues": 1, "trimmed": 0}` {
		t.Fatalf("the stats run's counts: %s, %v", counts, err)
	}
}
