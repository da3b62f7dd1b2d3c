package pgsweep_test

// Per-queue rights through the Go client (sql/functions/queue_rights.sql;
// the same in SQL: sql/tests/queue_rights.sql). Two applications, each with
// its own login role (a member of S_worker) and its own private queue (the
// defaults revoked from S_worker, granted to the application), and an admin
// whose manage on the first application's queues was revoked: every Client
// method on the other application's queue fails with ErrPermissionDenied
// (42501) naming the queue and the right, and nothing in the queue changes.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// clientAs is a Client on a pool of the login role of label.
func (sd *secDB) clientAs(label string) *pgsweep.Client {
	sd.t.Helper()
	c, err := pgsweep.NewClient(poolAs(sd.t, sd, label), &pgsweep.ClientOptions{Schema: sd.db.Schema})
	if err != nil {
		sd.t.Fatal(err)
	}
	return c
}

// queueFingerprint is everything about a queue a verb could change, read as the superuser.
func (sd *secDB) queueFingerprint(queue string) string {
	sd.t.Helper()
	return secValue[string](sd, `SELECT md5(concat_ws('|',
		(SELECT string_agg(m::text, ',' ORDER BY m.id) FROM @S.message m WHERE m.queue = $1),
		(SELECT string_agg(p::text, ',' ORDER BY p.id) FROM @S.message_processed p WHERE p.queue = $1),
		(SELECT string_agg(d::text, ',' ORDER BY d.id) FROM @S.message_dead d WHERE d.queue = $1),
		(SELECT string_agg(l::text, ',' ORDER BY l.name) FROM @S.lane l WHERE l.queue = $1),
		(SELECT q::text FROM @S.queue q WHERE q.name = $1),
		(SELECT string_agg(c::text, ',') FROM @S.claim_cursor c WHERE c.queue = $1),
		(SELECT string_agg(r::text, ',' ORDER BY r.privilege, r.grantee) FROM @S.queue_right r WHERE r.queue = $1)))`, queue)
}

// denied fails the test unless err is a permission-denied error naming role, right and queue.
func denied(t *testing.T, what string, err error, role string, right pgsweep.Right, queue string) {
	t.Helper()
	if !errors.Is(err, pgsweep.ErrPermissionDenied) {
		t.Errorf("%s: want ErrPermissionDenied, got %v", what, err)
		return
	}
	if errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("%s: a permission error must not match ErrInvalidArgument: %v", what, err)
	}
	var pgErr *pgconn.PgError
	want := fmt.Sprintf(`permission denied: role "%s" lacks %s on queue "%s"`, role, right, queue)
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || pgErr.Message != want {
		t.Errorf("%s: want 42501 %q, got %v", what, want, err)
	}
}

func TestQueueRightsCrossApplication(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	su := sd.db.Client
	app1 := sd.login("app1", "worker")
	app2 := sd.login("app2", "worker")
	sd.login("plain", "worker")
	sd.login("admin1", "admin")
	admin2 := sd.login("admin2", "admin")
	c1, c2, cPlain, cAdmin1, cAdmin2 := sd.clientAs("app1"), sd.clientAs("app2"), sd.clientAs("plain"), sd.clientAs("admin1"), sd.clientAs("admin2")

	pay, in1, own2 := "payroll", "payroll-in", "app2-jobs"
	for q, kind := range map[string]pgsweep.QueueKind{pay: pgsweep.Outbox, in1: pgsweep.Inbox, own2: pgsweep.Outbox} {
		if err := su.QueueCreate(ctx, q, kind, 3); err != nil {
			t.Fatal(err)
		}
		must(t, su.QueueRevoke(ctx, q, sd.db.Schema+"_worker", pgsweep.RightSend, pgsweep.RightConsume))
		must(t, su.QueueRevoke(ctx, q, sd.db.Schema+"_admin", pgsweep.RightBrowse, pgsweep.RightManage))
	}
	for _, q := range []string{pay, in1} {
		must(t, su.QueueGrant(ctx, q, app1, pgsweep.RightSend, pgsweep.RightConsume))
		must(t, su.QueueGrant(ctx, q, sd.roles["admin1"], pgsweep.RightManage))
	}
	must(t, su.QueueGrant(ctx, own2, app2, pgsweep.RightSend, pgsweep.RightConsume))
	must(t, su.QueueGrant(ctx, own2, admin2, pgsweep.RightManage))

	// A plain worker lost the defaults.
	_, _, err := cPlain.Send(ctx, pay, pgsweep.Message{Payload: json.RawMessage(`{}`)})
	denied(t, "plain worker send", err, sd.roles["plain"], pgsweep.RightSend, pay)

	// App 1 at work: one message held, one waiting, a dead letter.
	for i := 1; i <= 3; i++ {
		if _, _, err := c1.Send(ctx, pay, pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"salary": %d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c1.Claim(ctx, pay, "app1", 1, time.Minute)
	if err != nil || len(held) != 1 {
		t.Fatalf("app1 claims its own queue: %v %v", held, err)
	}
	tok, ids := held[0].Token, []int64{held[0].ID}
	gone, err := c1.Claim(ctx, pay, "app1", 1, time.Minute)
	if err != nil || len(gone) != 1 {
		t.Fatalf("claim: %v %v", gone, err)
	}
	if _, err := c1.DeadLetter(ctx, pay, gone[0].Token, []int64{gone[0].ID}, "bad"); err != nil {
		t.Fatal(err)
	}
	deadID := gone[0].ID
	before := map[string]string{pay: sd.queueFingerprint(pay), in1: sd.queueFingerprint(in1)}

	// App 2 on app 1's queues, with app 1's real token: every verb refused.
	msg := pgsweep.Message{Payload: json.RawMessage(`{"salary": 1000000}`)}
	_, _, err = c2.Send(ctx, pay, msg)
	denied(t, "Send", err, app2, pgsweep.RightSend, pay)
	_, err = c2.SendBatch(ctx, pay, []pgsweep.Message{msg})
	denied(t, "SendBatch", err, app2, pgsweep.RightSend, pay)
	_, err = c2.Claim(ctx, pay, "app2", 10, time.Minute)
	denied(t, "Claim", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.ClaimIDs(ctx, pay, "app2", ids, time.Minute)
	denied(t, "ClaimIDs", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.Renew(ctx, pay, tok, ids, time.Hour)
	denied(t, "Renew", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.Complete(ctx, pay, tok, ids)
	denied(t, "Complete", err, app2, pgsweep.RightConsume, pay)
	_, _, err = c2.CompleteAndClaim(ctx, pay, "app2", tok, ids, 10, time.Minute)
	denied(t, "CompleteAndClaim", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.Fail(ctx, pay, tok, ids, "x", 0)
	denied(t, "Fail", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.Release(ctx, pay, tok, ids)
	denied(t, "Release", err, app2, pgsweep.RightConsume, pay)
	_, err = c2.DeadLetter(ctx, pay, tok, ids, "x")
	denied(t, "DeadLetter", err, app2, pgsweep.RightConsume, pay)
	// Inbox pre-emption: app 2 cannot take app 1's next message id.
	_, _, err = c2.Send(ctx, in1, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "order-1"})
	denied(t, "inbox Send", err, app2, pgsweep.RightSend, in1)
	_, err = c2.SendBatch(ctx, in1, []pgsweep.Message{{Payload: json.RawMessage(`{}`), Key: "order-1"}})
	denied(t, "inbox SendBatch", err, app2, pgsweep.RightSend, in1)
	// The Worker: Run ends at once with the error.
	wk, err := pgsweep.NewWorker(poolAs(t, sd, "app2"), func(context.Context, *pgsweep.Delivery) error { return nil },
		pgsweep.WorkerOptions{Schema: sd.db.Schema, Queue: pay, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = wk.Run(wctx)
	cancel()
	denied(t, "Worker.Run", err, app2, pgsweep.RightConsume, pay)

	// The admin without manage.
	err = cAdmin2.QueueConfigure(ctx, pay, map[string]any{"max_attempts": 9})
	denied(t, "QueueConfigure", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.QueuePause(ctx, pay)
	denied(t, "QueuePause", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.QueueResume(ctx, pay)
	denied(t, "QueueResume", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.QueuePurge(ctx, pay)
	denied(t, "QueuePurge", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.CancelMessages(ctx, pay, ids)
	denied(t, "CancelMessages", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.RequeueDead(ctx, pay, []int64{deadID}, time.Time{})
	denied(t, "RequeueDead", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.LaneSkip(ctx, pay, "a")
	denied(t, "LaneSkip", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.QueueRecover(ctx, pay, 100)
	denied(t, "QueueRecover", err, admin2, pgsweep.RightManage, pay)
	_, err = cAdmin2.QueueDrop(ctx, pay, true)
	denied(t, "QueueDrop", err, admin2, pgsweep.RightManage, pay)
	err = cAdmin2.QueueGrant(ctx, pay, admin2, pgsweep.RightConsume, pgsweep.RightManage)
	denied(t, "QueueGrant to itself", err, admin2, pgsweep.RightManage, pay)
	err = cAdmin2.QueueRevoke(ctx, pay, app1, pgsweep.RightConsume)
	denied(t, "QueueRevoke of app1's right", err, admin2, pgsweep.RightManage, pay)
	err = cAdmin2.QueueCreate(ctx, pay, pgsweep.Outbox, 7)
	denied(t, "QueueCreate changing max_attempts", err, admin2, pgsweep.RightManage, pay)

	for q, fp := range before {
		if got := sd.queueFingerprint(q); got != fp {
			t.Errorf("queue %s changed under the refused calls", q)
		}
	}

	// The owners' calls work.
	if got, err := c1.Renew(ctx, pay, tok, ids, time.Hour); err != nil || len(got) != 1 {
		t.Errorf("app1 renews: %v %v", got, err)
	}
	if got, err := c1.Complete(ctx, pay, tok, ids); err != nil || len(got) != 1 {
		t.Errorf("app1 completes: %v %v", got, err)
	}
	if _, ok, err := c1.Send(ctx, in1, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "order-1"}); err != nil || !ok {
		t.Errorf("app1's inbox key order-1 must be free (never pre-empted): ok=%v err=%v", ok, err)
	}
	if _, err := cAdmin1.QueuePause(ctx, pay); err != nil {
		t.Errorf("admin1 (manage) pauses: %v", err)
	}
	if _, err := cAdmin1.QueueResume(ctx, pay); err != nil {
		t.Errorf("admin1 resumes: %v", err)
	}
	if _, _, err := c2.Send(ctx, own2, msg); err != nil {
		t.Errorf("app2 sends to its own queue: %v", err)
	}
	_, err = c1.Claim(ctx, own2, "app1", 10, time.Minute)
	denied(t, "app1 on app2's queue", err, app1, pgsweep.RightConsume, own2)

	// Grant through the Client: app2 may now send to app1's inbox (not consume).
	must(t, cAdmin1.QueueGrant(ctx, in1, app2, pgsweep.RightSend))
	if _, _, err := c2.Send(ctx, in1, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "order-2"}); err != nil {
		t.Errorf("granted send: %v", err)
	}
	_, err = c2.Claim(ctx, in1, "app2", 10, time.Minute)
	denied(t, "granted send only", err, app2, pgsweep.RightConsume, in1)
	must(t, cAdmin1.QueueRevoke(ctx, in1, app2, pgsweep.RightSend))
	must(t, cAdmin1.QueueRevoke(ctx, in1, app2, pgsweep.RightSend)) // not held: a no-op
	_, _, err = c2.Send(ctx, in1, msg)
	denied(t, "revoked send", err, app2, pgsweep.RightSend, in1)
}

func TestQueueRightsGrantValidation(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	su := sd.db.Client
	app := sd.login("app", "worker")
	if err := su.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	rights := func() string {
		return secValue[string](sd, `SELECT coalesce(string_agg(grantee_name || ':' || privilege, ',' ORDER BY 1), '') FROM @S.queue_right WHERE queue = 'q'`)
	}
	start := rights()
	for _, c := range []struct {
		name        string
		queue, role string
		rights      []pgsweep.Right
		msg         string
	}{
		{"unknown queue", "nope", app, []pgsweep.Right{pgsweep.RightSend}, `p_queue must name an existing queue`},
		{"no rights", "q", app, nil, `p_rights must be an array of 1 to 4 of send, consume, browse, manage`},
		{"unknown right", "q", app, []pgsweep.Right{pgsweep.RightSend, "delete"}, `p_rights must hold only send, consume, browse, manage, got 'delete'`},
		{"wrong case", "q", app, []pgsweep.Right{"SEND"}, `p_rights must hold only send, consume, browse, manage, got 'SEND'`},
	} {
		for _, op := range []string{"grant", "revoke"} {
			var err error
			if op == "grant" {
				err = su.QueueGrant(ctx, c.queue, c.role, c.rights...)
			} else {
				err = su.QueueRevoke(ctx, c.queue, c.role, c.rights...)
			}
			if !errors.Is(err, pgsweep.ErrInvalidArgument) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("%s %s: want ErrInvalidArgument %q, got %v", op, c.name, c.msg, err)
			}
		}
	}
	// An unknown role: the regrole cast refuses it (42704); the name is
	// taken exactly (no case folding).
	if err := su.QueueGrant(ctx, "q", strings.ToUpper(app), pgsweep.RightSend); sqlstate(err) != "42704" {
		t.Errorf("grant to an unknown role: want 42704, got %v", err)
	}
	if got := rights(); got != start {
		t.Errorf("refused grants changed the rights: %s -> %s", start, got)
	}
	must(t, su.QueueGrant(ctx, "q", app, pgsweep.RightBrowse, pgsweep.RightBrowse))
	if got := rights(); !strings.Contains(got, app+":browse") {
		t.Errorf("granted browse missing: %s", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func poolAs(t *testing.T, sd *secDB, label string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), sd.urlAs(label))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
