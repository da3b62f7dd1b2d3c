package relay

import (
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// recorder is a Transport that records every Publish call and fails the
// messages it is told to (a unit test of the relay's lane order; the
// integration tests use the real brokers).
type recorder struct {
	mu    sync.Mutex
	calls [][]Message
	fail  map[int64]Result
}

func (r *recorder) Publish(_ context.Context, msgs []Message) []Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, append([]Message(nil), msgs...))
	res := make([]Result, len(msgs))
	for i, m := range msgs {
		res[i] = r.fail[m.ID]
	}
	return res
}

func (r *recorder) Close() error { return nil }

// The relay's own lane order, whatever claim returns: the lanes of claimed
// messages are set here (pgsweep's claim hands out one message per lane at
// a time, so this takes more than a claim would give; the process test
// TestRelayLanesInOrderUnderCrashes runs real lanes). Per lane the transport sees the messages one per Publish call, in send
// order; no call holds two messages of one lane; after a lane's message
// fails, the lane's later messages are not published but given back
// (attempt not spent), while other lanes and messages without a lane go on.
func TestLanesOneInFlightInOrder(t *testing.T) {
	db := pgtest.NewQueue(t, 4, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	// lanes a, b, c interleaved, and messages without a lane
	lanes := []string{"a", "b", "", "a", "c", "a", "b", "", "c", "a", "b", "b"}
	msgs := make([]pgsweep.Message, len(lanes))
	for i := range lanes {
		msgs[i] = pgsweep.Message{Payload: json.RawMessage(strconv.Itoa(i))}
	}
	ids, err := db.Client.SendBatch(ctx, "q", msgs)
	if err != nil {
		t.Fatal(err)
	}
	laneOf := map[int64]string{}
	for i, id := range ids {
		laneOf[id] = lanes[i]
	}
	// lane c's first message (index 4) fails: c's second (index 8) must not go out
	rec := &recorder{fail: map[int64]Result{ids[4]: {Err: errors.New("refused")}}}
	r, err := New(db.Pool, "q", rec, Options{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := db.Client.Claim(ctx, "q", "lanes", 100, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	hs := make([]held, len(ds))
	for i := range ds {
		hs[i] = heldOf(&ds[i])
	}
	if len(hs) != len(lanes) {
		t.Fatalf("claimed %d, want %d", len(hs), len(lanes))
	}
	for i := range hs {
		if hs[i].msg.Lane != "" {
			t.Fatalf("message %d was sent without a lane but claimed with lane %q", hs[i].msg.ID, hs[i].msg.Lane)
		}
		hs[i].msg.Lane = laneOf[hs[i].msg.ID]
	}
	out, res := r.publish(ctx, ctx, hs, r.startPublish(ctx, hs, pathClaim))
	r.settle(ctx, hs, out, res)

	published := map[string][]int64{}
	for k, call := range rec.calls {
		inCall := map[string]bool{}
		for _, m := range call {
			if m.Lane == "" {
				continue
			}
			if inCall[m.Lane] {
				t.Errorf("call %d publishes two messages of lane %s at once", k, m.Lane)
			}
			inCall[m.Lane] = true
			published[m.Lane] = append(published[m.Lane], m.ID)
		}
	}
	want := map[string][]int64{
		"a": {ids[0], ids[3], ids[5], ids[9]},
		"b": {ids[1], ids[6], ids[10], ids[11]},
		"c": {ids[4]}, // failed: ids[8] waits
	}
	for lane, w := range want {
		if fmt.Sprint(published[lane]) != fmt.Sprint(w) {
			t.Errorf("lane %s published %v, want %v (in send order)", lane, published[lane], w)
		}
	}
	var status string
	var attempt int
	if err := db.Pool.QueryRow(ctx, "SELECT status, attempt FROM "+db.Rel("message")+
		" WHERE queue = 'q' AND id = $1", ids[8]).Scan(&status, &attempt); err != nil {
		t.Fatal(err)
	}
	if status != "pending" || attempt != 0 {
		t.Errorf("lane c's second message: %s, attempt %d; want given back (pending, attempt 0)", status, attempt)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT status, attempt FROM "+db.Rel("message")+
		" WHERE queue = 'q' AND id = $1", ids[4]).Scan(&status, &attempt); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || attempt != 1 {
		t.Errorf("lane c's failed message: %s, attempt %d; want failed after attempt 1", status, attempt)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Rel("message")+" WHERE queue = 'q'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 2 {
		t.Errorf("%d messages left, want 2 (lane c's)", left)
	}
}

// Identity is the key when there is one, else <queue>/<id>; the publish
// headers carry the message's own headers and pgsweep's, pgsweep's winning.
func TestIdentityAndHeaders(t *testing.T) {
	m := Message{Queue: "orders", ID: 42, Attempt: 3, Headers: map[string]string{"trace": "x", HeaderAttempt: "forged"}}
	if m.Identity() != "orders/42" {
		t.Errorf("identity %q", m.Identity())
	}
	h := m.PublishHeaders()
	if h["trace"] != "x" || h[HeaderAttempt] != "3" || h[HeaderIdentity] != "orders/42" || h[HeaderID] != "42" || h[HeaderQueue] != "orders" {
		t.Errorf("headers %v", h)
	}
	if _, ok := h[HeaderLane]; ok {
		t.Errorf("a message without a lane has a lane header")
	}
	m.Key, m.Lane = "order-42", "customer-7"
	if m.Identity() != "order-42" || m.PublishHeaders()[HeaderLane] != "customer-7" {
		t.Errorf("keyed: %q %v", m.Identity(), m.PublishHeaders())
	}
	if !errors.Is(UnavailableError(errors.New("x")), ErrUnavailable) || !errors.Is(Unavailable(1, nil)[0].Err, ErrUnavailable) {
		t.Errorf("unavailable errors do not match ErrUnavailable")
	}
}
