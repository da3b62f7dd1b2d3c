package pgsweep_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The longest queue name queue_create accepts (172 characters: its built-in
// policy pgsweep.processed:<queue> has 190, the most a policy name may have)
// works everywhere, the procedures that COMMIT included: send, claim,
// complete, fail, built-in retention (retention_builtin_sync, then CALL
// retention_run of both its policies) and CALL maintain, whose pass retains
// another queue's rows beside it without an error. A 178-character name was
// accepted once and broke built-in retention for every queue; now it is
// refused (sql/tests/bad_input.sql has the messages).
func TestLongestQueueName(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 2)
	schema := db.Q()
	long := strings.Repeat("q", 171) + "Z"
	if err := c.QueueCreate(ctx, strings.Repeat("q", 178), pgsweep.Inbox, 1); sqlState(err) != "22023" {
		t.Fatalf("queue_create of 178 characters: %v, want 22023", err)
	}
	for _, q := range []string{long, "other"} {
		if err := c.QueueCreate(ctx, q, pgsweep.Inbox, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.QueueConfigure(ctx, q, map[string]any{"processed_retention": "1 second", "dead_retention": "1 second"}); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"done", "dead"} {
			if _, ok, err := c.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: k}); err != nil || !ok {
				t.Fatalf("send %s: %v %v", k, ok, err)
			}
		}
		if _, ok, err := c.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "done"}); err != nil || ok {
			t.Fatalf("duplicate send: accepted %v, %v", ok, err)
		}
		ds, err := c.Claim(ctx, q, "w", 10, time.Minute)
		if err != nil || len(ds) != 2 {
			t.Fatalf("claim: %d, %v", len(ds), err)
		}
		for _, d := range ds {
			if d.Key == "done" {
				_, err = c.Complete(ctx, q, d.Token, []int64{d.ID})
			} else {
				_, err = c.Fail(ctx, q, d.Token, []int64{d.ID}, "boom", 0)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	where := "queue = '" + long + "'"
	if p, d := count(t, db, "message_processed", where), count(t, db, "message_dead", where); p != 1 || d != 1 {
		t.Fatalf("%d processed and %d dead rows, want 1 and 1", p, d)
	}
	time.Sleep(1100 * time.Millisecond) // time under test: the rows' 1 second retention passes

	db.MustExec(t, "SELECT "+schema+".retention_builtin_sync()")
	for _, name := range []string{"pgsweep.processed:" + long, "pgsweep.dead:" + long} {
		pass, ok, err := c.RetentionRun(ctx, name, "t", 10*time.Second)
		if err != nil || !ok || pass.RowsDeleted != 1 || pass.Outcome != "drained" {
			t.Fatalf("retention_run %.30s…: %+v %v %v", name, pass, ok, err)
		}
	}
	if p, d := count(t, db, "message_processed", where), count(t, db, "message_dead", where); p != 0 || d != 0 {
		t.Fatalf("after retention_run: %d processed and %d dead rows", p, d)
	}

	db.MustExec(t, "CALL "+schema+".maintain('t', '30 seconds')")
	var passErr *string
	if err := db.Pool.QueryRow(ctx, "SELECT error FROM "+schema+".maintain_pass ORDER BY id DESC LIMIT 1").Scan(&passErr); err != nil {
		t.Fatal(err)
	}
	if passErr != nil {
		t.Fatalf("maintain pass error: %s", *passErr)
	}
	if p, d := count(t, db, "message_processed", "true"), count(t, db, "message_dead", "true"); p != 0 || d != 0 {
		t.Fatalf("after maintain: %d processed and %d dead rows left (queue other)", p, d)
	}
	if _, ok, err := c.Send(ctx, long, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: "done"}); err != nil || !ok {
		t.Fatalf("send after retention freed the key: %v %v", ok, err)
	}
}
