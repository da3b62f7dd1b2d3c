package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// 64 sessions send the same unique key at once, each in a transaction that
// stays open until all have sent: exactly one message exists, exactly one
// send inserted it, and every other one was told Duplicate with its id.
func TestUniqueSendConcurrent(t *testing.T) {
	for _, kind := range []pgsweep.QueueKind{pgsweep.Outbox, pgsweep.Inbox} {
		t.Run(string(kind), func(t *testing.T) {
			db := pgtest.NewQueue(t, 2, "q", kind, 3)
			ctx := context.Background()
			const n = 64
			results := make([]pgsweep.SendResult, n)
			errs := make([]error, n)
			var sent sync.WaitGroup
			sent.Add(n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				conn := pgtest.Conn(t, db.URL)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					tx, err := conn.Begin(ctx)
					if err != nil {
						errs[i] = err
						sent.Done()
						return
					}
					c, _ := pgsweep.NewClient(tx, &pgsweep.ClientOptions{Schema: db.Schema})
					// the first sender holds the key until the others queue behind it
					results[i], errs[i] = c.SendResult(ctx, "q", pgsweep.Message{
						Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), UniqueKey: "order-42", UniqueFor: time.Hour})
					if errs[i] != nil {
						_ = tx.Rollback(ctx)
						sent.Done()
						return
					}
					sent.Done()
					errs[i] = tx.Commit(ctx)
				}()
			}
			close(start)
			wg.Wait()
			inserted, id := 0, int64(0)
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("session %d: %v", i, errs[i])
				}
				if !results[i].Duplicate {
					inserted++
					id = results[i].ID
				}
			}
			if inserted != 1 {
				t.Fatalf("%d sends inserted, want 1", inserted)
			}
			for i := range n {
				if results[i].ID != id {
					t.Fatalf("session %d got id %d, want the holder %d", i, results[i].ID, id)
				}
			}
			if got := count(t, db, "message", "queue = 'q'"); got != 1 {
				t.Fatalf("%d messages, want 1", got)
			}
			if got := count(t, db, "message_unique", "queue = 'q'"); got != 1 {
				t.Fatalf("%d windows, want 1", got)
			}
		})
	}
}

// The key is held while the message is live, also while it waits for a
// retry; completing it frees a key sent without a window but not one with
// a window; dead-lettering frees it.
func TestUniqueSendLifecycle(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "q", pgsweep.Outbox, 1)
	ctx := context.Background()
	c := db.Client
	send := func(key string, window time.Duration) pgsweep.SendResult {
		t.Helper()
		r, err := c.SendResult(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`{}`), UniqueKey: key, UniqueFor: window})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := send("a", 0)
	if a.Duplicate || a.ID == 0 {
		t.Fatalf("first send: %+v", a)
	}
	if r := send("a", 0); !r.Duplicate || r.ID != a.ID {
		t.Fatalf("second send: %+v, want duplicate of %d", r, a.ID)
	}
	// Send (the bool form): ok false, the holder's id
	if id, ok, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`{}`), UniqueKey: "a"}); err != nil || ok || id != a.ID {
		t.Fatalf("Send: %d %v %v, want %d false", id, ok, err, a.ID)
	}
	ds, err := c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	if r := send("a", 0); !r.Duplicate {
		t.Fatal("in flight: the key must be held")
	}
	if _, err := c.Complete(ctx, "q", ds[0].Token, []int64{ds[0].ID}); err != nil {
		t.Fatal(err)
	}
	b := send("a", 0)
	if b.Duplicate {
		t.Fatal("completed without a window: the key must be free")
	}
	// a window survives the completion
	w := send("w", time.Hour)
	ds, err = c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	for _, d := range ds {
		if _, err := c.Complete(ctx, "q", d.Token, []int64{d.ID}); err != nil {
			t.Fatal(err)
		}
	}
	if r := send("w", 0); !r.Duplicate || r.ID != w.ID {
		t.Fatalf("window: %+v, want duplicate of %d", r, w.ID)
	}
	// dead-lettered (max_attempts 1): the key is free
	d := send("d", 0)
	ds, err = c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != d.ID {
		t.Fatalf("claim: %v %v", ds, err)
	}
	if _, err := c.Fail(ctx, "q", ds[0].Token, []int64{d.ID}, "boom", 0); err != nil {
		t.Fatal(err)
	}
	if count(t, db, "message_dead", fmt.Sprintf("id = %d", d.ID)) != 1 {
		t.Fatal("not dead-lettered")
	}
	if r := send("d", 0); r.Duplicate {
		t.Fatal("dead-lettered: the key must be free")
	}
}

// Claims take higher priorities first, then (created_at, id); a batch
// returns them in that order; a lane keeps its order whatever the
// priorities of its messages.
func TestPriorityClaimOrder(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "q", pgsweep.Outbox, 3)
	ctx := context.Background()
	c := db.Client
	prios := []int16{0, 5, -3, 5, 100, -100, 0, 1}
	ms := make([]pgsweep.Message, len(prios))
	for i, p := range prios {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Priority: p}
	}
	sent, err := c.SendBatch(ctx, "q", ms)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{sent[4], sent[1], sent[3], sent[7], sent[0], sent[6], sent[2], sent[5]}
	var got []int64
	for len(got) < len(want) {
		ds, err := c.Claim(ctx, "q", "w", 3, time.Minute)
		if err != nil || len(ds) == 0 {
			t.Fatalf("claim: %v %v", ds, err)
		}
		got = append(got, ids(ds)...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}

	// a lane: a low-priority head holds back a high-priority message behind it
	lo, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: "L", Priority: -50})
	if err != nil {
		t.Fatal(err)
	}
	hi, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: "L", Priority: 50})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != lo {
		t.Fatalf("lane: claimed %v %v, want only the head %d", ids(ds), err, lo)
	}
	if _, err := c.Complete(ctx, "q", ds[0].Token, []int64{lo}); err != nil {
		t.Fatal(err)
	}
	ds, err = c.Claim(ctx, "q", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != hi {
		t.Fatalf("lane: claimed %v %v, want %d", ids(ds), err, hi)
	}
}

// 32 sessions: 16 send batches to several lanes in random order, 16 claim
// and complete. No deadlock, and every message sent is completed exactly
// once.
func TestSendBatchLanesCompleteNoDeadlock(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "q", pgsweep.Outbox, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lanes := []string{"a", "B", "c", "_d", "E", "f-1", "F.2", "g"}
	const senders, workers, rounds = 16, 16, 25
	send := func(c *pgsweep.Client, s int) (int, error) {
		r := rand.New(rand.NewPCG(uint64(s), 7))
		n := 0
		for range rounds {
			perm := r.Perm(len(lanes))
			var ms []pgsweep.Message
			for _, k := range perm[:2+r.IntN(len(lanes)-1)] {
				ms = append(ms, pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lanes[k]},
					pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: lanes[k]})
			}
			if _, err := c.SendBatch(ctx, "q", ms); err != nil {
				return n, err
			}
			n += len(ms)
		}
		return n, nil
	}
	settle := func(c *pgsweep.Client, _ int, ds []pgsweep.Delivery) (int, error) {
		byToken := map[pgsweep.Token][]int64{}
		for _, d := range ds {
			byToken[d.Token] = append(byToken[d.Token], d.ID)
		}
		n := 0
		for tok, ids := range byToken {
			done, err := c.Complete(ctx, "q", tok, ids)
			n += len(done)
			if err != nil {
				return n, fmt.Errorf("complete: %w", err)
			}
		}
		return n, nil
	}
	sent, completed, errs := sendClaimRace(ctx, t, db, senders, workers, 8, send, settle)
	for _, err := range errs {
		if pe := pgtest.PgError(err); pe != nil && pe.Code == "40P01" {
			t.Errorf("deadlock: %v", err)
		} else {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}
	if want := int64(senders * rounds); sent < 2*2*want/2 {
		t.Fatalf("sent %d messages, too few", sent)
	}
	if completed != sent {
		t.Fatalf("completed %d of %d", completed, sent)
	}
	if n := count(t, db, "message", "queue = 'q'"); n != 0 {
		t.Fatalf("%d messages left", n)
	}
	if n := count(t, db, "lane", "queue = 'q'"); n != 0 {
		t.Fatalf("%d lanes left", n)
	}
}

// queue_drop racing a send, 1,000 times: the send either lands before the
// drop (and goes with the queue) or fails as a send to an unknown queue; no
// message is ever left without its queue.
func TestQueueDropRacesSend(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	sender, _ := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
	dropper, _ := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
	landed, refused := 0, 0
	for i := range 1000 {
		q := fmt.Sprintf("r%d", i)
		if err := db.Client.QueueCreate(ctx, q, pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var sendErr, dropErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _, sendErr = sender.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`), Lane: []string{"", "l"}[i%2]})
		}()
		go func() {
			defer wg.Done()
			_, dropErr = dropper.QueueDrop(ctx, q, true)
		}()
		wg.Wait()
		if dropErr != nil {
			t.Fatalf("round %d: drop: %v", i, dropErr)
		}
		switch {
		case sendErr == nil:
			landed++
		case errors.Is(sendErr, pgsweep.ErrInvalidArgument):
			refused++
		default:
			t.Fatalf("round %d: send: %v", i, sendErr)
		}
	}
	orphans := db.Int(t, "SELECT count(*) FROM "+db.Q()+".message m WHERE NOT EXISTS (SELECT 1 FROM "+db.Q()+".queue q WHERE q.name = m.queue)")
	orphanLanes := db.Int(t, "SELECT count(*) FROM "+db.Q()+".lane l WHERE NOT EXISTS (SELECT 1 FROM "+db.Q()+".queue q WHERE q.name = l.queue)")
	if orphans != 0 || orphanLanes != 0 {
		t.Fatalf("%d messages and %d lanes without their queue (%d sends landed before the drop, %d refused)", orphans, orphanLanes, landed, refused)
	}
	t.Logf("%d sends landed before the drop, %d were refused", landed, refused)
}
