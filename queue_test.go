package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// count counts the rows of the install's table (an alias may follow its
// name) that match where.
func count(t *testing.T, db *pgtest.DB, table, where string) int {
	t.Helper()
	return int(db.Int(t, "SELECT count(*) FROM "+db.Q()+"."+table+" WHERE "+where))
}

func ids(ds []pgsweep.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

// tok returns the token of one claim's deliveries (the same for all of
// them); the zero Token when there are none.
func tok(ds []pgsweep.Delivery) pgsweep.Token {
	if len(ds) == 0 {
		return pgsweep.Token{}
	}
	return ds[0].Token
}

// Sending inside the application's transaction: the message exists only if
// the transaction commits.
func TestSendInsideTransaction(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "orders", pgsweep.Outbox, 5)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.WithDB(tx).Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"n":1}`)}); err != nil || !ok {
		t.Fatalf("send: %v %v", ok, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "message", "true"); n != 0 {
		t.Fatalf("a rolled back send left %d rows", n)
	}

	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, ok, err := c.WithDB(tx).Send(ctx, "orders", pgsweep.Message{
		Payload: json.RawMessage(`{"n":2}`), Headers: map[string]string{"trace": "abc"}, Key: "k"})
	if err != nil || !ok {
		t.Fatalf("send: %v %v", ok, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Claim(ctx, "orders", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	d := ds[0]
	if d.ID != id || string(d.Payload) != `{"n": 2}` || d.Headers["trace"] != "abc" || d.Key != "k" || d.Attempt != 1 || d.Queue != "orders" {
		t.Fatalf("delivery %+v", d)
	}
	if !d.LeaseExpiresAt.After(time.Now().Add(50 * time.Second)) {
		t.Fatalf("lease of a minute expires at %v", d.LeaseExpiresAt)
	}
	if d.Token.IsZero() {
		t.Fatal("the delivery carries no token")
	}
	done, err := c.Complete(ctx, "orders", d.Token, []int64{d.ID})
	if err != nil || !slices.Equal(done, []int64{d.ID}) {
		t.Fatalf("complete: %v %v", done, err)
	}
	if n := count(t, db, "message", "true"); n != 0 {
		t.Fatalf("completed outbox message still there: %d", n)
	}
}

func TestSendBatchAndScheduled(t *testing.T) {
	ctx, _, c := pgtest.StartQueue(t, 4, "in", pgsweep.Inbox, 3)
	got, err := c.SendBatch(ctx, "in", []pgsweep.Message{
		{Payload: json.RawMessage(`1`), Key: "a"},
		{Payload: json.RawMessage(`2`), Key: "a"},
		{Payload: json.RawMessage(`3`)},
		{Payload: json.RawMessage(`4`), Key: "b", DeliverAt: time.Now().Add(time.Hour)},
	})
	if err != nil || len(got) != 4 || got[0] == 0 || got[1] != 0 || got[2] == 0 || got[3] == 0 {
		t.Fatalf("send batch: %v %v", got, err)
	}
	if _, ok, err := c.Send(ctx, "in", pgsweep.Message{Payload: json.RawMessage(`5`), Key: "b"}); err != nil || ok {
		t.Fatalf("duplicate of a scheduled key: %v %v", ok, err)
	}
	ds, err := c.Claim(ctx, "in", "w", 10, 0)
	if err != nil || !slices.Equal(ids(ds), []int64{got[0], got[2]}) {
		t.Fatalf("claim: %v %v (the scheduled message must wait)", ids(ds), err)
	}
	if _, err := c.Complete(ctx, "in", tok(ds), ids(ds)); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Send(ctx, "in", pgsweep.Message{Payload: json.RawMessage(`1`), Key: "a"}); err != nil || ok {
		t.Fatalf("duplicate of a processed key: %v %v", ok, err)
	}
	st, err := c.QueueStats(ctx)
	if err != nil || len(st) != 1 || st[0].Pending != 1 || st[0].Processed != 2 || st[0].Kind != pgsweep.Inbox {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// A stale token's renew, complete, fail and release after a takeover act on
// nothing, and the new claim's work is untouched -- also when the takeover
// is by the same owner, which the owner label could not tell apart.
func TestStaleTokenActsOnNothing(t *testing.T) {
	for _, newOwner := range []string{"new", "old"} {
		t.Run("takeover by "+newOwner, func(t *testing.T) {
			ctx, db, c := pgtest.StartQueue(t, 4, "q", pgsweep.Outbox, 5)
			if _, err := c.SendBatch(ctx, "q", []pgsweep.Message{{Payload: json.RawMessage(`1`)}, {Payload: json.RawMessage(`2`)}}); err != nil {
				t.Fatal(err)
			}
			old, err := c.Claim(ctx, "q", "old", 10, time.Second)
			if err != nil || len(old) != 2 || old[0].Token != old[1].Token || old[0].Token.IsZero() {
				t.Fatalf("claim: %+v %v (want two deliveries with one token)", old, err)
			}
			// Let the lease lapse without waiting: move it into the past.
			db.MustExec(t, fmt.Sprintf("UPDATE %s.message SET visible_at = now() - interval '1 second'", db.Q()))
			taken, err := c.Claim(ctx, "q", newOwner, 10, time.Minute)
			if err != nil || !slices.Equal(ids(taken), ids(old)) || taken[0].Attempt != 2 || tok(taken) == tok(old) {
				t.Fatalf("takeover: %+v %v", taken, err)
			}
			if got, err := c.Renew(ctx, "q", tok(old), ids(old), time.Minute); err != nil || len(got) != 0 {
				t.Fatalf("stale renew acted on %v (%v)", got, err)
			}
			if got, err := c.Complete(ctx, "q", tok(old), ids(old)); err != nil || len(got) != 0 {
				t.Fatalf("stale complete acted on %v (%v)", got, err)
			}
			if got, err := c.Fail(ctx, "q", tok(old), ids(old), "late", 0); err != nil || len(got) != 0 {
				t.Fatalf("stale fail acted on %v (%v)", got, err)
			}
			if got, err := c.Release(ctx, "q", tok(old), ids(old)); err != nil || len(got) != 0 {
				t.Fatalf("stale release acted on %v (%v)", got, err)
			}
			if _, got, err := c.CompleteAndClaim(ctx, "q", "old", tok(old), ids(old), 10, time.Minute); err != nil || len(got) != 0 {
				t.Fatalf("stale CompleteAndClaim: claimed %v (%v)", ids(got), err)
			}
			if n := count(t, db, "message", fmt.Sprintf("owner = '%s' AND token = '%s' AND status = 'processing' AND attempt = 2 AND last_error IS NULL", newOwner, tok(taken))); n != 2 {
				t.Fatalf("the new claim's rows changed: %d left as they were", n)
			}
			if got, err := c.Renew(ctx, "q", tok(taken), ids(old), time.Minute); err != nil || len(got) != 2 {
				t.Fatalf("holder renew: %v %v", got, err)
			}
			res, err := c.Fail(ctx, "q", tok(taken), ids(old)[:1], "boom", time.Hour)
			if err != nil || len(res) != 1 || res[0].Dead {
				t.Fatalf("fail: %+v %v", res, err)
			}
		})
	}
}

func TestQueueClientInvalidArguments(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 2, "q", pgsweep.Outbox, 5)
	if _, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	some, err := pgsweep.ParseToken("8f6f1c52-3a5e-4d3c-9d61-0a4b2c1e7f90")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"unknown queue":   func() error { _, err := c.Claim(ctx, "nope", "w", 10, time.Minute); return err },
		"batch 0":         func() error { _, err := c.Claim(ctx, "q", "w", 0, time.Minute); return err },
		"batch 10001":     func() error { _, err := c.Claim(ctx, "q", "w", 10001, time.Minute); return err },
		"short lease":     func() error { _, err := c.Claim(ctx, "q", "w", 10, time.Millisecond); return err },
		"long lease":      func() error { _, err := c.Claim(ctx, "q", "w", 10, 2*time.Hour); return err },
		"empty owner":     func() error { _, err := c.Claim(ctx, "q", "", 10, time.Minute); return err },
		"negative batch":  func() error { _, err := c.Claim(ctx, "q", "w", -1, time.Minute); return err },
		"nil ids":         func() error { _, err := c.Complete(ctx, "q", some, nil); return err },
		"empty ids":       func() error { _, err := c.Renew(ctx, "q", some, []int64{}, time.Minute); return err },
		"zero token":      func() error { _, err := c.Complete(ctx, "q", pgsweep.Token{}, []int64{1}); return err },
		"zero token fail": func() error { _, err := c.Fail(ctx, "q", pgsweep.Token{}, []int64{1}, "e", 0); return err },
		"renew lease":     func() error { _, err := c.Renew(ctx, "q", some, []int64{1}, 2*time.Hour); return err },
		"retry after -1s": func() error { _, err := c.Fail(ctx, "q", some, []int64{1}, "e", -time.Second); return err },
		"retry after 31d": func() error { _, err := c.Fail(ctx, "q", some, []int64{1}, "e", 31*24*time.Hour); return err },
		"nil payload":     func() error { _, _, err := c.Send(ctx, "q", pgsweep.Message{}); return err },
		"bad kind":        func() error { return c.QueueCreate(ctx, "x", "topic", 5) },
		"unknown setting": func() error { return c.QueueConfigure(ctx, "q", map[string]any{"nope": 1}) },
		"fail ids":        func() error { _, err := c.Fail(ctx, "q", some, nil, "e", 0); return err },
		"release token":   func() error { _, err := c.Release(ctx, "q", pgsweep.Token{}, []int64{1}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := count(t, db, "message", "status = 'pending' AND attempt = 0"); n != 1 {
		t.Fatalf("failed calls changed messages")
	}
	if n := count(t, db, "queue", "true"); n != 1 {
		t.Fatalf("failed calls changed queues")
	}
}

// CompleteAndClaim completes what the token's claim holds and claims the
// next batch (with a new token) in one transaction; another token's ids are
// not completed.
func TestCompleteAndClaim(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "q", pgsweep.Outbox, 5)
	sendN(t, c, "q", 5)
	first, err := c.Claim(ctx, "q", "w", 2, time.Minute)
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %v %v", first, err)
	}
	done, next, err := c.CompleteAndClaim(ctx, "q", "w", tok(first), ids(first), 2, time.Minute)
	if err != nil || !slices.Equal(done, ids(first)) || len(next) != 2 || next[0].ID <= first[1].ID || tok(next) == tok(first) {
		t.Fatalf("complete and claim: %v %v %v", done, ids(next), err)
	}
	done, last, err := c.CompleteAndClaim(ctx, "q", "w", tok(first), ids(next), 10, time.Minute)
	if err != nil || len(done) != 0 || len(last) != 1 {
		t.Fatalf("the previous claim's token completed %v (%v); claimed %v", done, err, ids(last))
	}
	if _, _, err := c.CompleteAndClaim(ctx, "q", "w", tok(next), ids(next), 0, time.Minute); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("batch 0: got %v", err)
	}
	if n := count(t, db, "message", fmt.Sprintf("token = '%s'", tok(next))); n != 2 {
		t.Fatalf("a failed call must roll back its complete too: %d rows still held by the token, want 2", n)
	}
	if done, ds, err := c.CompleteAndClaim(ctx, "q", "w", tok(next), nil, 10, time.Minute); err != nil || done != nil || len(ds) != 0 {
		t.Fatalf("nothing done, nothing left: %v %v %v", done, ds, err)
	}
}

// A dead inbox message holds its key against redeliveries; RequeueDead sends
// it back with a fresh set of attempts, and a second call finds nothing.
func TestRequeueDead(t *testing.T) {
	ctx, _, c := pgtest.StartQueue(t, 2, "in", pgsweep.Inbox, 1)
	msg := pgsweep.Message{Payload: json.RawMessage(`{"n":1}`), Key: "m-1"}
	id, ok, err := c.Send(ctx, "in", msg)
	if err != nil || !ok {
		t.Fatalf("send: %v %v", ok, err)
	}
	ds, err := c.Claim(ctx, "in", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	res, err := c.Fail(ctx, "in", tok(ds), []int64{id}, "broken", 0)
	if err != nil || len(res) != 1 || !res[0].Dead {
		t.Fatalf("fail: %+v %v", res, err)
	}
	if _, ok, err := c.Send(ctx, "in", msg); err != nil || ok {
		t.Fatalf("redelivery of a dead key: accepted=%v err=%v, want a duplicate", ok, err)
	}
	got, err := c.RequeueDead(ctx, "in", []int64{id, id + 1000}, time.Time{})
	if err != nil || !slices.Equal(got, []int64{id}) {
		t.Fatalf("RequeueDead = %v, %v; want [%d]", got, err, id)
	}
	if got, err := c.RequeueDead(ctx, "in", []int64{id}, time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("second RequeueDead = %v, %v; want nothing", got, err)
	}
	ds, err = c.Claim(ctx, "in", "w", 10, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != id || ds[0].Attempt != 1 || ds[0].Key != "m-1" {
		t.Fatalf("claim after requeue: %+v %v", ds, err)
	}
	if _, err := c.RequeueDead(ctx, "in", nil, time.Time{}); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("RequeueDead(nil ids) = %v, want ErrInvalidArgument", err)
	}
}

// Release gives back only what the token's claim holds, takes the attempt
// back, and the message is due again at once.
func TestClientRelease(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	seedQueue(t, db, 3, 2)
	ds, err := db.Client.Claim(ctx, "q", "w", 2, time.Minute)
	if err != nil || len(ds) != 2 {
		t.Fatalf("claim: %v %v", ds, err)
	}
	other, err := pgsweep.ParseToken("8f6f1c52-3a5e-4d3c-9d61-0a4b2c1e7f90")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := db.Client.Release(ctx, "q", other, ids(ds)); err != nil || len(got) != 0 {
		t.Fatalf("another token released %v, %v", got, err)
	}
	got, err := db.Client.Release(ctx, "q", tok(ds), ids(ds[:1]))
	if err != nil || !slices.Equal(got, []int64{ds[0].ID}) {
		t.Fatalf("Release = %v, %v; want [%d]", got, err, ds[0].ID)
	}
	again, err := db.Client.Claim(ctx, "q", "w2", 2, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != ds[0].ID || again[0].Attempt != 1 {
		t.Fatalf("after release: %+v %v; want message %d at attempt 1", again, err, ds[0].ID)
	}
	if _, err := db.Client.Release(ctx, "q", pgsweep.Token{}, ids(ds)); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("Release with the zero token: %v, want ErrInvalidArgument", err)
	}
}
