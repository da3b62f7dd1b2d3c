package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pgsweep queue pause|resume|purge|drop|stats against a real install: each
// does what its SQL verb does and says so; drop is refused (exit 1, nothing
// changed) while a message is in flight, done with --force; stats shows the
// queue, its lanes (blocked first) and JSON; bad usage exits 2.
func TestQueueCommand(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 2, "orders", pgsweep.Outbox, 1)
	if err := c.QueueConfigure(ctx, "orders", map[string]any{"lane_dead": "block"}); err != nil {
		t.Fatal(err)
	}
	msg := func(p, lane string) pgsweep.Message {
		return pgsweep.Message{Payload: json.RawMessage(`"` + p + `"`), Lane: lane}
	}
	if _, err := c.SendBatch(ctx, "orders", []pgsweep.Message{msg("a1", "order-1"), msg("a2", "order-1"), msg("b1", "order-2"), msg("u", "")}); err != nil {
		t.Fatal(err)
	}
	common := []string{"--database-url", db.URL, "--schema", db.Schema}
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append(args, common...)...)
	}

	if out, errOut, code := cli("queue", "pause", "--queue", "orders"); code != 0 || !strings.Contains(out, "paused queue orders") {
		t.Fatalf("pause: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := cli("queue", "pause", "--queue", "orders"); code != 0 || !strings.Contains(out, "was paused already") {
		t.Fatalf("pause again: exit %d\n%s", code, out)
	}
	if ds, err := c.Claim(ctx, "orders", "w", 10, time.Minute); err != nil || len(ds) != 0 {
		t.Fatalf("a paused queue handed out %d messages (%v)", len(ds), err)
	}
	out, errOut, code := cli("queue", "stats", "--queue", "orders")
	if code != 0 || !strings.Contains(out, "orders") || !strings.Contains(out, "yes") || !strings.Contains(out, "order-1") {
		t.Fatalf("stats of a paused queue: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, code := cli("queue", "resume", "--queue", "orders"); code != 0 || !strings.Contains(out, "resumed queue orders") {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}

	// a1 dies on its only attempt: lane order-1 is blocked; b1 and u stay in flight
	ds, err := c.Claim(ctx, "orders", "w", 10, time.Minute)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claimed %d (%v), want a1, b1 and u", len(ds), err)
	}
	var a1 int64
	for _, d := range ds {
		if string(d.Payload) == `"a1"` {
			a1 = d.ID
		}
	}
	if _, err := c.Fail(ctx, "orders", ds[0].Token, []int64{a1}, "fatal", 0); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = cli("queue", "stats", "--queue", "orders", "--json")
	var rep queueStatsReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Queues) != 1 || rep.Queues[0].BlockedLanes != 1 ||
		len(rep.Lanes) != 2 || rep.Lanes[0].Lane != "order-1" || rep.Lanes[0].HeadState != "dead" {
		t.Fatalf("stats --json: exit %d %+v\n%s%s", code, rep, out, errOut)
	}

	if out, _, code := cli("queue", "purge", "--queue", "orders"); code != 0 || !strings.Contains(out, "purged 1 pending message(s)") {
		t.Fatalf("purge: exit %d\n%s", code, out) // a2, waiting in the blocked lane
	}
	out, errOut, code = cli("queue", "drop", "--queue", "orders")
	if code != 1 || !strings.Contains(errOut, "in flight") || !strings.Contains(errOut, "hint:") {
		t.Fatalf("drop with messages in flight: exit %d\n%s%s", code, out, errOut)
	}
	if n := countIn(t, db, "queue", "name = 'orders'"); n != 1 {
		t.Fatal("a refused drop dropped the queue")
	}
	if out, errOut, code := cli("queue", "drop", "--queue", "orders", "--force"); code != 0 || !strings.Contains(out, "dropped queue orders (2 live message(s) deleted") {
		t.Fatalf("drop --force: exit %d\n%s%s", code, out, errOut)
	}
	if n := countIn(t, db, "queue", "name = 'orders'") + countIn(t, db, "message", "queue = 'orders'") + countIn(t, db, "lane", "queue = 'orders'"); n != 0 {
		t.Fatalf("%d rows of the dropped queue left", n)
	}

	for _, bad := range [][]string{{"queue"}, {"queue", "explode", "--queue", "x"}, {"queue", "pause"}, {"queue", "stats", "--lanes", "-1"}} {
		if _, _, code := cli(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", bad, code)
		}
	}
	if _, errOut, code := cli("queue", "pause", "--queue", "nope"); code != 1 || !strings.Contains(errOut, `unknown queue "nope"`) {
		t.Errorf("unknown queue: exit %d\n%s", code, errOut)
	}
}

// countIn counts the rows of the install's table that match where.
func countIn(t *testing.T, db *pgtest.DB, table, where string) int {
	t.Helper()
	return int(db.Int(t, "SELECT count(*) FROM "+db.Rel(table)+" WHERE "+where))
}

// pgsweep queue grant|revoke: the rights land as rows (and go again); a bad
// right is a usage of the SQL's 22023 (exit 1, nothing changed); missing
// --role or --rights exits 2.
func TestQueueCommandGrantRevoke(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "orders", pgsweep.Outbox, 3)
	ctx := context.Background()
	monitor := db.Schema + "_monitor"
	common := []string{"--database-url", db.URL, "--schema", db.Schema}
	cli := func(args ...string) (string, string, int) {
		return runCLI(t, append(args, common...)...)
	}
	held := func() string {
		var s string
		if err := db.Pool.QueryRow(ctx, "SELECT coalesce(string_agg(privilege, ',' ORDER BY privilege), '') FROM "+
			db.Rel("queue_right")+" WHERE queue = 'orders' AND grantee_name = $1", monitor).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if out, errOut, code := cli("queue", "grant", "--queue", "orders", "--role", monitor, "--rights", "browse, send"); code != 0 ||
		!strings.Contains(out, "granted browse, send on queue orders to role "+monitor) {
		t.Fatalf("grant: exit %d\n%s%s", code, out, errOut)
	}
	if got := held(); got != "browse,send" {
		t.Fatalf("after grant: %q", got)
	}
	if _, errOut, code := cli("queue", "grant", "--queue", "orders", "--role", monitor, "--rights", "send,delete"); code != 1 ||
		!strings.Contains(errOut, "p_rights must hold only send, consume, browse, manage, got 'delete'") {
		t.Fatalf("grant of a bad right: exit %d\n%s", code, errOut)
	}
	if _, _, code := cli("queue", "revoke", "--queue", "orders", "--rights", "send"); code != 2 {
		t.Fatalf("revoke without --role: exit %d, want 2", code)
	}
	if out, errOut, code := cli("queue", "revoke", "--queue", "orders", "--role", monitor, "--rights", "send"); code != 0 ||
		!strings.Contains(out, "revoked send on queue orders from role "+monitor) {
		t.Fatalf("revoke: exit %d\n%s%s", code, out, errOut)
	}
	if got := held(); got != "browse" {
		t.Fatalf("after revoke: %q", got)
	}
}
