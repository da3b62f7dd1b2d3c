package pgsweep_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The Go client's side of lanes: Message.Lane (Send and SendBatch),
// Delivery.Lane, one head per lane in a claim, the next after a completion,
// a blocked lane skipped, QueueStats and LaneStats; a bad lane name is an
// ErrInvalidArgument.
func TestClientLanes(t *testing.T) {
	ctx, _, c := pgtest.StartQueue(t, 4, "o", pgsweep.Outbox, 1)
	msg := func(p, lane string) pgsweep.Message {
		return pgsweep.Message{Payload: json.RawMessage(`"` + p + `"`), Lane: lane}
	}
	a1, _, err := c.Send(ctx, "o", msg("a1", "A"))
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.SendBatch(ctx, "o", []pgsweep.Message{msg("a2", "A"), msg("b1", "B"), msg("u", ""), msg("b2", "B")})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Claim(ctx, "o", "w", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ds {
		got[string(d.Payload)] = d.Lane
	}
	if want := map[string]string{`"a1"`: "A", `"b1"`: "B", `"u"`: ""}; len(got) != len(want) || got[`"a1"`] != "A" || got[`"b1"`] != "B" || got[`"u"`] != "" {
		t.Fatalf("claimed %v, want the heads and the unordered message with their lanes %v", got, want)
	}
	st, err := c.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Lanes != 2 || st[0].BlockedLanes != 0 || st[0].Paused {
		t.Fatalf("queue stats %+v", st)
	}
	// a1 completes: a2 is next; b1 fails on its only attempt: lane B moves on (move_on)
	if _, err := c.Complete(ctx, "o", ds[0].Token, []int64{a1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fail(ctx, "o", ds[0].Token, []int64{batch[1]}, "fatal", 0); err != nil {
		t.Fatal(err)
	}
	next, err := c.Claim(ctx, "o", "w", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(next), []int64{batch[0], batch[3]}) {
		t.Fatalf("claimed %v after a1 completed and b1 died, want a2 and b2 %v", ids(next), []int64{batch[0], batch[3]})
	}
	// lane_dead block: c1 dies and stops lane C; LaneStats shows it; LaneSkip moves on
	if err := c.QueueConfigure(ctx, "o", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	cs, err := c.SendBatch(ctx, "o", []pgsweep.Message{msg("c1", "C"), msg("c2", "C")})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := c.Claim(ctx, "o", "w", 10, time.Minute)
	if err != nil || len(c1) != 1 || c1[0].ID != cs[0] {
		t.Fatalf("claimed %v (%v), want c1", c1, err)
	}
	if res, err := c.Fail(ctx, "o", c1[0].Token, []int64{cs[0]}, "fatal", 0); err != nil || len(res) != 1 || !res[0].Dead {
		t.Fatalf("fail c1: %v %v", res, err)
	}
	ls, err := c.LaneStats(ctx, "o", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 || ls[0].Lane != "C" || ls[0].HeadState != "dead" || ls[0].HeadID != cs[0] || ls[0].Waiting != 1 || ls[0].HeadAttempt != 1 ||
		ls[1].HeadState != "processing" || ls[2].HeadState != "processing" {
		t.Fatalf("lane stats %+v, want lane C (blocked by c1, c2 waiting) first, then A and B (a2 and b2 in flight)", ls)
	}
	if one, err := c.LaneStats(ctx, "o", 1); err != nil || len(one) != 1 || one[0].Lane != "C" {
		t.Fatalf("LaneStats limit 1: %+v %v", one, err)
	}
	if none, err := c.Claim(ctx, "o", "w", 10, time.Minute); err != nil || len(none) != 0 {
		t.Fatalf("a blocked lane handed out %v (%v)", ids(none), err)
	}
	if skipped, err := c.LaneSkip(ctx, "o", "C"); err != nil || !skipped {
		t.Fatalf("LaneSkip: %v %v", skipped, err)
	}
	if c2, err := c.Claim(ctx, "o", "w", 10, time.Minute); err != nil || len(c2) != 1 || c2[0].ID != cs[1] || c2[0].Lane != "C" {
		t.Fatalf("after LaneSkip claimed %v (%v), want c2", ids(c2), err)
	}
	// bad lane names
	for _, lane := range []string{strings.Repeat("x", 201)} {
		if _, _, err := c.Send(ctx, "o", msg("bad", lane)); !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Fatalf("Send with a %d-character lane: %v, want ErrInvalidArgument", len(lane), err)
		}
		if _, err := c.SendBatch(ctx, "o", []pgsweep.Message{msg("ok", ""), msg("bad", lane)}); !errors.Is(err, pgsweep.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "p_lanes[2]") {
			t.Fatalf("SendBatch with a %d-character lane: %v, want ErrInvalidArgument naming p_lanes[2]", len(lane), err)
		}
	}
	if _, err := c.LaneStats(ctx, "o", 0); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("LaneStats limit 0: %v", err)
	}
}

// Pause and resume, cancel, purge and drop from the Go client.
func TestClientQueueOps(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "q", pgsweep.Outbox, 3)
	send := func(p string, at time.Time) int64 {
		id, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`"` + p + `"`), DeliverAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := send("first", time.Time{})
	if paused, err := c.QueuePause(ctx, "q"); err != nil || !paused {
		t.Fatalf("QueuePause: %v %v", paused, err)
	}
	if again, err := c.QueuePause(ctx, "q"); err != nil || again {
		t.Fatalf("QueuePause again: %v %v, want false", again, err)
	}
	if ds, err := c.Claim(ctx, "q", "w", 10, time.Minute); err != nil || len(ds) != 0 {
		t.Fatalf("a paused queue handed out %v (%v)", ids(ds), err)
	}
	if st, err := c.QueueStats(ctx); err != nil || len(st) != 1 || !st[0].Paused || st[0].Pending != 1 {
		t.Fatalf("stats of the paused queue: %+v %v", st, err)
	}
	if resumed, err := c.QueueResume(ctx, "q"); err != nil || !resumed {
		t.Fatalf("QueueResume: %v %v", resumed, err)
	}
	held, err := c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(held) != 1 || held[0].ID != first {
		t.Fatalf("after resume claimed %v (%v)", ids(held), err)
	}
	later := send("later", time.Now().Add(time.Hour))
	due := send("due", time.Time{})
	if gone, err := c.CancelMessages(ctx, "q", []int64{first, later}); err != nil || !slices.Equal(gone, []int64{later}) {
		t.Fatalf("CancelMessages: %v %v, want only the scheduled one %d (not %d in flight)", gone, err, later, first)
	}
	if n, err := c.QueuePurge(ctx, "q"); err != nil || n != 1 {
		t.Fatalf("QueuePurge: %d %v, want 1 (due)", n, err)
	}
	_ = due
	_, err = c.QueueDrop(ctx, "q", false)
	if pgtest.PgError(err).Code != "55006" {
		t.Fatalf("QueueDrop with a message in flight: %v, want SQLSTATE 55006", err)
	}
	if count(t, db, "queue", "name = 'q'") != 1 {
		t.Fatal("a refused drop changed something")
	}
	if n, err := c.QueueDrop(ctx, "q", true); err != nil || n != 1 {
		t.Fatalf("QueueDrop force: %d %v, want 1 live message deleted", n, err)
	}
	if _, err := c.QueuePause(ctx, "q"); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("QueuePause of a dropped queue: %v, want ErrInvalidArgument", err)
	}
}
