//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pushed reports whether cmds hold a call of the install's function fn sent
// whole to the node on port: the call was pushed down (delegated).
func pushed(cmds []RemoteCommand, schema, fn string, port int) bool {
	for _, c := range cmds {
		if c.Port == port && strings.HasPrefix(c.SQL, "SELECT") &&
			(strings.Contains(c.SQL, schema+"."+fn+"(") || strings.Contains(c.SQL, `"`+schema+`".`+fn+"(")) {
			return true
		}
	}
	return false
}

func describeCmds(cmds []RemoteCommand) string {
	var b strings.Builder
	for _, c := range cmds {
		sql := c.SQL
		if len(sql) > 120 {
			sql = sql[:120] + "…"
		}
		fmt.Fprintf(&b, "\n\t:%d %s", c.Port, sql)
	}
	return b.String()
}

// TestCitusSQLHasNoCrashingUpdates: no function of the install sets a column
// to a bare array element in an UPDATE, which crashes Citus 13.2.2 (see
// CrashingUpdates). Today fail_details does (fail.sql: SET visible_at =
// v_due[least(m.attempt, v_k)]): every fail and fail_details call kills the
// backend of the node that runs it. The fix is to wrap the value, e.g.
// coalesce(v_due[least(m.attempt, v_k)], v_now), which is the same value.
func TestCitusSQLHasNoCrashingUpdates(t *testing.T) {
	in := Shared(t)
	if bad := in.CrashingUpdates(t); len(bad) > 0 {
		t.Errorf("these UPDATEs crash Citus 13.2.2 (a bare array element as a SET value; wrap it, e.g. in coalesce()):\n\t%s",
			strings.Join(bad, "\n\t"))
	}
}

// Every queue verb, in autocommit and inside a transaction block, works on
// a distributed install. In autocommit each is pushed down whole to the
// worker that holds its queue (citus.log_remote_commands shows the call
// itself going to that worker). Inside a transaction block so are those
// citus_distribute forces (claim, renew, complete, fail, claim_ids,
// dead_letter, queue_recover; claim since 0.22 reads its cursor in a
// statement of its own); the others run on the coordinator, each statement
// routed to the queue's shard: the verbs that NOTIFY (send, send_batch,
// release, dead_requeue: a worker cannot PREPARE a transaction that ran
// NOTIFY).
func TestCitusVerbs(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	tr := in.NewTraced(t)
	queues := in.QueuePerWorker(t, "verbs")
	out, inbox := queues[0], queues[1]
	if err := in.Client.QueueCreate(ctx, out, pgsweep.Outbox, 2); err != nil {
		t.Fatal(err)
	}
	if err := in.Client.QueueCreate(ctx, inbox, pgsweep.Inbox, 2); err != nil {
		t.Fatal(err)
	}
	wOut, wIn := in.WorkerOf(t, out), in.WorkerOf(t, inbox)
	crashing := in.CrashingUpdates(t)

	for _, inTx := range []bool{false, true} {
		mode := "autocommit"
		if inTx {
			mode = "transaction"
		}
		// call runs f on the traced connection (in a transaction block when
		// inTx) and checks that fn went to w whole, when want says so.
		call := func(t *testing.T, fn string, w Node, wantPushed bool, f func(c *pgsweep.Client) error) {
			t.Helper()
			tr.Take()
			var err error
			if inTx {
				var tx pgx.Tx
				if tx, err = tr.Conn.Begin(ctx); err != nil {
					t.Fatal(err)
				}
				c, _ := pgsweep.NewClient(tx, &pgsweep.ClientOptions{Schema: in.Schema})
				if err = f(c); err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
			} else {
				c, _ := pgsweep.NewClient(tr.Conn, &pgsweep.ClientOptions{Schema: in.Schema})
				err = f(c)
			}
			if err != nil {
				t.Fatalf("%s (%s): %v", fn, mode, err)
			}
			cmds := tr.Take()
			if got := pushed(cmds, in.Schema, fn, w.Port); got != wantPushed {
				t.Errorf("%s (%s): pushed down to %s: %v, want %v; remote commands:%s", fn, mode, w.Name, got, wantPushed, describeCmds(cmds))
			}
		}
		t.Run(mode, func(t *testing.T) {
			var ids []int64
			call(t, "send", wOut, !inTx, func(c *pgsweep.Client) error {
				id, _, err := c.Send(ctx, out, pgsweep.Message{Payload: json.RawMessage(`{"a":1}`)})
				ids = append(ids, id)
				return err
			})
			call(t, "send_batch", wOut, !inTx, func(c *pgsweep.Client) error {
				got, err := c.SendBatch(ctx, out, []pgsweep.Message{{Payload: json.RawMessage(`1`)}, {Payload: json.RawMessage(`2`)}, {Payload: json.RawMessage(`3`)}})
				ids = append(ids, got...)
				return err
			})
			var ds []pgsweep.Delivery
			call(t, "claim", wOut, true, func(c *pgsweep.Client) error {
				var err error
				ds, err = c.Claim(ctx, out, "verbs", 10, time.Minute)
				if err == nil && len(ds) != 4 {
					err = fmt.Errorf("claimed %d of 4", len(ds))
				}
				return err
			})
			tok := ds[0].Token
			call(t, "renew", wOut, true, func(c *pgsweep.Client) error {
				got, err := c.Renew(ctx, out, tok, []int64{ds[0].ID, ds[1].ID}, time.Minute)
				if err == nil && len(got) != 2 {
					err = fmt.Errorf("renewed %v", got)
				}
				return err
			})
			call(t, "release", wOut, !inTx, func(c *pgsweep.Client) error {
				got, err := c.Release(ctx, out, tok, []int64{ds[3].ID})
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("released %v", got)
				}
				return err
			})
			call(t, "complete", wOut, true, func(c *pgsweep.Client) error {
				got, err := c.Complete(ctx, out, tok, []int64{ds[0].ID})
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("completed %v", got)
				}
				return err
			})
			call(t, "dead_letter", wOut, true, func(c *pgsweep.Client) error {
				_, err := tr.Conn.Exec(ctx, "SELECT "+in.Q()+".dead_letter($1, $2, $3, 'refused')", out, tok, []int64{ds[1].ID})
				return err
			})
			call(t, "dead_requeue", wOut, !inTx, func(c *pgsweep.Client) error {
				got, err := c.RequeueDead(ctx, out, []int64{ds[1].ID}, time.Time{})
				if err == nil && len(got) != 1 {
					err = fmt.Errorf("requeued %v", got)
				}
				return err
			})
			call(t, "queue_recover", wOut, true, func(c *pgsweep.Client) error {
				_, err := c.QueueRecover(ctx, out, 100)
				return err
			})
			t.Run("fail", func(t *testing.T) {
				if len(crashing) > 0 {
					t.Fatalf("not called: fail would crash the Citus node that runs it (TestCitusSQLHasNoCrashingUpdates: %s)", strings.Join(crashing, "; "))
				}
				call(t, "fail_details", wOut, true, func(c *pgsweep.Client) error {
					got, err := c.Fail(ctx, out, tok, []int64{ds[2].ID}, "boom", 0)
					if err == nil && len(got) != 1 {
						err = fmt.Errorf("failed %v", got)
					}
					return err
				})
			})
			t.Run("inbox send with a key", func(t *testing.T) {
				// send's de-duplication asks _inbox_key_kept, a LANGUAGE sql
				// function with parameters: Citus cannot plan its queries
				// ("could not create distributed plan"; DESIGN.md: claim
				// paths in PL/pgSQL). Rewritten in PL/pgSQL it works.
				call(t, "send", wIn, !inTx, func(c *pgsweep.Client) error {
					id, ok, err := c.Send(ctx, inbox, pgsweep.Message{Payload: json.RawMessage(`{}`), Key: fmt.Sprintf("key-%s", mode)})
					if err == nil && (!ok || id == 0) {
						err = fmt.Errorf("send returned %d %v", id, ok)
					}
					return err
				})
			})
			t.Run("inbox send without a key", func(t *testing.T) {
				call(t, "send", wIn, !inTx, func(c *pgsweep.Client) error {
					_, _, err := c.Send(ctx, inbox, pgsweep.Message{Payload: json.RawMessage(`{}`)})
					return err
				})
			})
			// The Worker's pipeline: complete + claim in one round trip (one
			// implicit transaction).
			t.Run("CompleteAndClaim", func(t *testing.T) {
				c, _ := pgsweep.NewClient(tr.Conn, &pgsweep.ClientOptions{Schema: in.Schema})
				got, err := c.Claim(ctx, out, "verbs", 1, time.Minute)
				if err != nil || len(got) != 1 {
					t.Fatalf("claim: %v %v", got, err)
				}
				done, next, err := c.CompleteAndClaim(ctx, out, "verbs", got[0].Token, []int64{got[0].ID}, 10, time.Minute)
				if err != nil || len(done) != 1 {
					t.Fatalf("CompleteAndClaim: completed %v, claimed %d: %v", done, len(next), err)
				}
				for _, d := range next {
					if _, err := c.Complete(ctx, out, d.Token, []int64{d.ID}); err != nil {
						t.Fatal(err)
					}
				}
			})
		})
	}

	// Priorities: the claim's per-level positions (claim_cursor, distributed
	// by queue) are written by the delegated claim on the queue's worker, and
	// a lane's next head moves its level's position back (_lane_next).
	t.Run("priorities", func(t *testing.T) {
		q := in.QueuePerWorker(t, "prio")[1]
		c := in.Client
		if err := c.QueueCreate(ctx, q, pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
		msg := func(p int16, lane string) pgsweep.Message {
			return pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"p":%d,"lane":%q}`, p, lane)), Priority: p, Lane: lane}
		}
		ids, err := c.SendBatch(ctx, q, []pgsweep.Message{msg(4, "L"), msg(4, "L"), msg(4, ""), msg(0, ""), msg(9, ""), msg(-2, "")})
		if err != nil {
			t.Fatal(err)
		}
		claim := func(n int) []int64 {
			t.Helper()
			ds, err := c.Claim(ctx, q, "prio", n, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return deliveryIDs(ds)
		}
		first := claim(2) // a rescan: 9, then the lane's head at 4
		if fmt.Sprint(first) != fmt.Sprint([]int64{ids[4], ids[0]}) {
			t.Fatalf("claimed %v, want %v", first, []int64{ids[4], ids[0]})
		}
		levels := func() string {
			t.Helper()
			var s string
			if err := in.Pool.QueryRow(ctx, "SELECT coalesce(priority_levels::text, '') || ' ' || coalesce(priority_ids::text, '') FROM "+
				in.Rel("claim_cursor")+" WHERE queue = $1", q).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		if got, want := levels(), fmt.Sprintf("{9,4} {%d,%d}", ids[4], ids[0]); got != want {
			t.Fatalf("positions %q, want %q", got, want)
		}
		if got := claim(1); fmt.Sprint(got) != fmt.Sprint([]int64{ids[2]}) {
			t.Fatalf("claimed %v from the positions, want %d", got, ids[2])
		}
		ds, err := c.Claim(ctx, q, "prio", 1, time.Minute) // the default priority
		if err != nil || len(ds) != 1 || ds[0].ID != ids[3] {
			t.Fatalf("claimed %v %v, want %d", deliveryIDs(ds), err, ids[3])
		}
		// complete the lane's head: its next message lies behind level 4's position
		var headTok pgsweep.Token
		if err := in.Pool.QueryRow(ctx, "SELECT token FROM "+in.Rel("message")+" WHERE queue = $1 AND id = $2", q, ids[0]).Scan(&headTok); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Complete(ctx, q, headTok, []int64{ids[0]}); err != nil {
			t.Fatal(err)
		}
		if got, want := levels(), fmt.Sprintf("{9,4} {%d,%d}", ids[4], ids[1]); got != want {
			t.Fatalf("positions after the lane moved on %q, want %q", got, want)
		}
		if got := claim(5); fmt.Sprint(got) != fmt.Sprint([]int64{ids[1], ids[5]}) {
			t.Fatalf("claimed %v, want the lane's next head, then -2: %v", got, []int64{ids[1], ids[5]})
		}
	})

	// Flow control on a distributed queue: the slots and the bucket live in
	// the queue's shard group, and the claims, pushed down to its worker,
	// hold the limit there; a completion inside a transaction block frees
	// its slots without a NOTIFY (which would break the two-phase commit).
	t.Run("flow control", func(t *testing.T) {
		q := in.QueuePerWorker(t, "flow")[0]
		c := in.Client
		if err := c.QueueCreate(ctx, q, pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
		ms := make([]pgsweep.Message, 10)
		for i := range ms {
			ms[i].Payload = json.RawMessage(`{}`)
		}
		if _, err := c.SendBatch(ctx, q, ms); err != nil {
			t.Fatal(err)
		}
		if err := c.QueueConfigure(ctx, q, map[string]any{"max_in_flight": 2}); err != nil {
			t.Fatal(err)
		}
		claim := func(n int) []pgsweep.Delivery {
			t.Helper()
			ds, err := c.Claim(ctx, q, "flow", n, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return ds
		}
		first := claim(5)
		if len(first) != 2 {
			t.Fatalf("claimed %d with max_in_flight 2, want 2", len(first))
		}
		if got := claim(5); len(got) != 0 {
			t.Fatalf("claimed %d more with every slot taken, want 0", len(got))
		}
		if renewed, err := c.Renew(ctx, q, first[0].Token, deliveryIDs(first), time.Minute); err != nil || len(renewed) != 2 {
			t.Fatalf("renew with the slots held: %v %v", renewed, err)
		}
		tx, err := in.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txc, _ := pgsweep.NewClient(tx, &pgsweep.ClientOptions{Schema: in.Schema})
		if done, err := txc.Complete(ctx, q, first[0].Token, deliveryIDs(first)); err != nil || len(done) != 2 {
			t.Fatalf("complete in a transaction block: %v %v", done, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		second := claim(5)
		if len(second) != 2 {
			t.Fatalf("claimed %d after the completion freed the slots, want 2", len(second))
		}
		if got, err := c.Release(ctx, q, second[0].Token, []int64{second[0].ID}); err != nil || len(got) != 1 {
			t.Fatalf("release: %v %v", got, err)
		}
		if got, err := c.Fail(ctx, q, second[1].Token, []int64{second[1].ID}, "boom", 0); err != nil || len(got) != 1 {
			t.Fatalf("fail: %v %v", got, err)
		}
		if got := claim(5); len(got) != 2 {
			t.Fatalf("claimed %d after release and fail freed the slots, want 2", len(got))
		}
		if err := c.QueueConfigure(ctx, q, map[string]any{"max_in_flight": nil, "rate": "1/min", "rate_burst": 3}); err != nil {
			t.Fatal(err)
		}
		if got := claim(5); len(got) != 3 {
			t.Fatalf("claimed %d with a full bucket of 3, want 3", len(got))
		}
		if got := claim(5); len(got) != 0 {
			t.Fatalf("claimed %d from an empty bucket, want 0", len(got))
		}
		// groups: turns between them, a limit per group, on the queue's shard
		if err := c.QueueConfigure(ctx, q, map[string]any{"rate": nil, "group_max_in_flight": 1}); err != nil {
			t.Fatal(err)
		}
		gs := make([]pgsweep.Message, 6)
		for i := range gs {
			gs[i] = pgsweep.Message{Payload: json.RawMessage(`{}`), Group: fmt.Sprintf("g%d", i%3)}
		}
		if _, err := c.SendBatch(ctx, q, gs); err != nil {
			t.Fatal(err)
		}
		var grouped []pgsweep.Delivery
		for _, d := range claim(100) {
			if in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1 AND id = $2 AND grp IS NOT NULL", q, d.ID) == 1 {
				grouped = append(grouped, d)
			}
		}
		if len(grouped) != 3 {
			t.Fatalf("claimed %d grouped messages with group_max_in_flight 1 and 3 groups, want 3", len(grouped))
		}
		if st, err := c.GroupStats(ctx, q, 10); err != nil || len(st) != 3 || st[0].InFlight != 1 || st[0].Waiting != 1 || st[0].MaxInFlight != 1 {
			t.Fatalf("group_stats: %+v %v, want 3 groups with 1 in flight and 1 waiting each", st, err)
		}
		if done, err := c.Complete(ctx, q, grouped[0].Token, deliveryIDs(grouped)); err != nil || len(done) != 3 {
			t.Fatalf("complete: %v %v", done, err)
		}
		if got := claim(100); len(got) != 3 {
			t.Fatalf("claimed %d after the groups' leases were settled, want their 3 others", len(got))
		}
		// a rate per group: each group's bucket on the queue's shard
		if err := c.QueueConfigure(ctx, q, map[string]any{"group_max_in_flight": nil, "group_rate": "1/min"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.SendBatch(ctx, q, gs); err != nil {
			t.Fatal(err)
		}
		if got := claim(100); len(got) != 3 {
			t.Fatalf("claimed %d with group_rate 1/min and 3 groups, want 3", len(got))
		}
		if got := claim(100); len(got) != 0 {
			t.Fatalf("claimed %d from the groups' empty buckets, want 0", len(got))
		}
		if fs, err := c.FlowStats(ctx, q); err != nil || fs.GroupRate != "1/min" || !fs.Limited() {
			t.Fatalf("flow_stats: %+v %v, want group_rate 1/min", fs, err)
		}
		if st, err := c.GroupStats(ctx, q, 10); err != nil || len(st) != 3 || st[0].Rate != "1/min" || st[0].RateUsed != 1 {
			t.Fatalf("group_stats: %+v %v, want 3 groups at 1/min with their token used", st, err)
		}
	})

	// Not pushed down, and correct: the views over every queue, and leases
	// (reference tables, on the coordinator).
	// The install is shared: queue_stats holds a row for every queue of it,
	// these two among them.
	stats, err := in.Client.QueueStats(ctx)
	mine := 0
	for _, st := range stats {
		if st.Queue == out || st.Queue == inbox {
			mine++
		}
	}
	if err != nil || mine != 2 || int64(len(stats)) != in.Int(t, "SELECT count(*) FROM "+in.Rel("queue")) {
		t.Fatalf("queue_stats: %+v %v; want a row for every queue, %s and %s among them", stats, err, out, inbox)
	}
	tok, ok, err := in.Client.LeaseAcquire(ctx, "verbs", "a", time.Minute)
	if err != nil || !ok || tok == 0 {
		t.Fatalf("lease_acquire: %d %v %v", tok, ok, err)
	}
	if _, ok, err := in.Client.LeaseAcquire(ctx, "verbs", "b", time.Minute); err != nil || ok {
		t.Fatalf("a second owner acquired a live lease: %v %v", ok, err)
	}
}

// The outbox pattern on Citus: send inside the application's transaction,
// with the application's own rows on the coordinator (a local table) and in
// a distributed table on another worker. Inside the transaction send runs on
// the coordinator and its INSERT goes to the queue's shard, in the same
// distributed transaction: a rollback leaves neither the rows nor the
// message, a commit (two-phase, across the three nodes) keeps all, and the
// notification comes from the coordinator, where a Worker LISTENs. (Forced
// onto the worker, send's NOTIFY would make the commit fail: PostgreSQL
// cannot PREPARE a transaction that ran NOTIFY.)
func TestCitusSendInApplicationTransaction(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	q := in.QueuePerWorker(t, "outbox")[0]
	if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	w := in.WorkerOf(t, q)
	local, dist := in.Rel("app_orders"), in.Rel("app_lines")
	in.Exec(t, "CREATE TABLE "+local+" (id bigint PRIMARY KEY, note text)")
	in.Exec(t, "CREATE TABLE "+dist+" (order_id bigint PRIMARY KEY, note text)")
	in.Exec(t, "SELECT create_distributed_table($1, 'order_id', colocate_with => 'none')", in.Schema+".app_lines")
	// an order id whose row of app_lines lives on the other worker
	var orderID int64
	for i := int64(1); ; i++ {
		var port int32
		if err := in.Pool.QueryRow(ctx, `SELECT nodeport FROM pg_dist_shard_placement
			WHERE shardid = get_shard_id_for_distribution_column($1::regclass, $2::bigint)`, in.Schema+".app_lines", i).Scan(&port); err != nil {
			t.Fatal(err)
		}
		if int(port) != w.Port {
			orderID = i
			break
		}
	}
	channel, err := in.Client.NotifyChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listener := in.NewTraced(t).Conn
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	tr := in.NewTraced(t)
	order := func(id int64, commit bool) {
		t.Helper()
		tr.Take()
		tx, err := tr.Conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "INSERT INTO "+local+" VALUES ($1, 'order')", id); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+dist+" VALUES ($1, 'line')", id); err != nil {
			t.Fatal(err)
		}
		c, _ := pgsweep.NewClient(tx, &pgsweep.ClientOptions{Schema: in.Schema})
		if _, _, err := c.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"order":%d}`, id))}); err != nil {
			t.Fatal(err)
		}
		cmds := tr.Take()
		insert := false
		for _, c := range cmds {
			insert = insert || c.Port == w.Port && strings.HasPrefix(c.SQL, "INSERT INTO "+in.Schema+".message_")
		}
		if !insert {
			t.Errorf("send's INSERT did not go to the queue's shard on %s; remote commands:%s", w.Name, describeCmds(cmds))
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit the order and its message: %v", err)
			}
		}
	}
	count := func(id int64) (orders, lines, messages int64) {
		return in.Int(t, "SELECT count(*) FROM "+local+" WHERE id = $1", id),
			in.Int(t, "SELECT count(*) FROM "+dist+" WHERE order_id = $1", id),
			in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1 AND payload->>'order' = $2", q, fmt.Sprint(id))
	}
	order(orderID, false)
	if o, l, m := count(orderID); o+l+m != 0 {
		t.Fatalf("rolled back: %d orders, %d lines, %d messages left", o, l, m)
	}
	order(orderID, true)
	if o, l, m := count(orderID); o != 1 || l != 1 || m != 1 {
		t.Fatalf("committed: %d orders, %d lines, %d messages; want 1 each", o, l, m)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil || n.Payload != q {
		t.Fatalf("the coordinator's listener got %+v, %v; want a notification for %s", n, err, q)
	}
}

// NOTIFY is per node. A send in autocommit runs on the queue's worker, and so
// does its notification: a LISTEN on that worker hears it, one on the
// coordinator does not (a Worker listening there relies on its
// PollInterval for these). A send inside a transaction block runs on the
// coordinator and notifies there (TestCitusSendInApplicationTransaction).
func TestCitusNotifyIsPerNode(t *testing.T) {
	in := Shared(t)
	ctx := context.Background()
	q := in.QueuePerWorker(t, "notify")[0]
	if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	w := in.WorkerOf(t, q)
	channel, err := in.Client.NotifyChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listen := func(url string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	onCoordinator, onWorker := listen(in.URL), listen(w.URL)
	if _, _, err := in.Client.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := onWorker.WaitForNotification(wctx); err != nil || n.Payload != q {
		t.Fatalf("the listener on %s got %+v, %v; want a notification for %s", w.Name, n, err, q)
	}
	qctx, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if n, err := onCoordinator.WaitForNotification(qctx); err == nil {
		t.Fatalf("the coordinator's listener heard %+v from an autocommit send: NOTIFY is no longer per node, update docs/operations.md", n)
	}
}

// Uninstall of a distributed install: pgsweep.Uninstall counts the messages
// left (a multi-shard query) and then drops the schema in the same
// transaction, which Citus refuses ("cannot run schema command because there
// was a parallel operation on a distributed table in the transaction")
// unless the transaction runs in Citus's sequential mode
// (uninstall.go: SET LOCAL citus.multi_shard_modify_mode TO 'sequential'
// first; on PostgreSQL without Citus the setting is an inert placeholder).
func TestCitusUninstall(t *testing.T) {
	in := New(t, 2)
	ctx := context.Background()
	if err := in.Client.QueueCreate(ctx, "u", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := in.Client.Send(ctx, "u", pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	conn, err := in.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	_, err = pgsweep.Uninstall(ctx, conn.Conn(), in.Schema, pgsweep.UninstallOptions{Force: true})
	if err != nil {
		t.Fatalf("pgsweep.Uninstall of a distributed install: %v (SQLSTATE %q)", err, pgtest.PgError(err).Code)
	}
	if n := in.Int(t, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", in.Schema); n != 0 {
		t.Fatal("the schema is still there")
	}
}

// The views, read by the roles they are granted to (a login role of the
// monitor role). Citus reads a reference or distributed table behind a view
// with the privileges of the role running the query, not of the view's
// owner (citusdata/citus#6161), and the monitor role holds no privilege on
// any table: leases, settings and queue_stats read their tables through
// SECURITY DEFINER functions owned by S_owner (lease_rows, setting_rows,
// _queue_rows; migration 025), whose result columns are spelled out (a
// function returning a table's row type made citus_distribute fail with a
// circular dependency). The retention and maintenance views read
// coordinator tables and work as on one server. The login still reads no
// table directly, on the coordinator or on a worker.
func TestCitusViewsForTheirRoles(t *testing.T) {
	in := New(t, 2)
	ctx := context.Background()
	queues := in.QueuePerWorker(t, "v")
	for _, q := range queues {
		if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := in.Client.Send(ctx, queues[1], pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := in.Client.LeaseAcquire(ctx, "views", "me", time.Minute); err != nil || !ok {
		t.Fatalf("lease_acquire: %v %v", ok, err)
	}
	as := asMonitor(t, in)
	checkViewsForMonitor(t, in, as)
	// The rows are the tables' rows.
	if got, err := as("SELECT queue || ':' || pending FROM " + in.Rel("queue_stats") + " ORDER BY queue"); err != nil ||
		strings.Join(got, ",") != queues[0]+":0,"+queues[1]+":1" {
		t.Errorf("queue_stats for a monitor login: %v %v; want %s:0 and %s:1", got, err, queues[0], queues[1])
	}
	if got, err := as("SELECT pending FROM "+in.Rel("queue_stats")+" WHERE queue = $1", queues[1]); err != nil || len(got) != 1 || got[0] != "1" {
		t.Errorf("queue_stats WHERE queue = %s for a monitor login: %v %v; want 1", queues[1], got, err)
	}
	if got, err := as("SELECT owner FROM " + in.Rel("leases") + " WHERE name = 'views' AND live"); err != nil || len(got) != 1 || got[0] != "me" {
		t.Errorf("leases for a monitor login: %v %v; want the live lease of me", got, err)
	}
	want := in.Int(t, "SELECT count(*) FROM "+in.Rel("setting"))
	if got, err := as("SELECT name FROM " + in.Rel("settings")); err != nil || len(got) == 0 || int64(len(got)) != want {
		t.Errorf("settings for a monitor login: %d rows, %v; want %d", len(got), err, want)
	}

	// A migration that replaces a view on a distributed install (025 did)
	// has Citus copy it, with the functions it calls, to the workers;
	// citus_distribute, called after every migration, puts it back on the
	// coordinator alone, still readable by the monitor.
	var def string
	if err := in.Pool.QueryRow(ctx, "SELECT pg_get_viewdef($1::regclass)", in.Schema+".leases").Scan(&def); err != nil {
		t.Fatal(err)
	}
	in.Exec(t, "CREATE OR REPLACE VIEW "+in.Rel("leases")+" AS "+def)
	for _, w := range in.Workers {
		if n := queryInt(t, pgtest.Conn(t, w.URL), "SELECT count(*) FROM pg_views WHERE schemaname = $1 AND viewname = 'leases'", in.Schema); n != 1 {
			t.Fatalf("CREATE OR REPLACE VIEW leases on the coordinator left %d copies on %s, want 1: Citus no longer copies replaced views, drop this part", n, w.Name)
		}
	}
	in.Distribute(t)
	checkViewsForMonitor(t, in, as)
	if got, err := as("SELECT owner FROM " + in.Rel("leases") + " WHERE name = 'views' AND live"); err != nil || len(got) != 1 || got[0] != "me" {
		t.Errorf("leases for a monitor login after citus_distribute: %v %v; want the live lease of me", got, err)
	}
}

// monitorViews are the views granted to the monitor role (_view_grants).
var monitorViews = []string{"queue_stats", "leases", "settings", "retention_policies", "retention_passes", "maintenance_passes", "maintenance_runs"}

// asMonitor creates a login role of the install's monitor role (dropped
// when the test ends) and returns a function that runs sql as that login
// and returns the first column of every row as text.
func asMonitor(t *testing.T, in *Install) func(sql string, args ...any) ([]string, error) {
	t.Helper()
	ctx := context.Background()
	login := pgx.Identifier{in.Schema + "_dash"}.Sanitize()
	in.Exec(t, "CREATE ROLE "+login+" LOGIN IN ROLE "+pgx.Identifier{in.Schema + "_monitor"}.Sanitize())
	t.Cleanup(func() { _, _ = in.Pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+login) })
	return func(sql string, args ...any) ([]string, error) {
		var got []string
		err := pgx.BeginFunc(ctx, in.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+login); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, sql, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					return err
				}
				got = append(got, fmt.Sprint(vals[0]))
			}
			return rows.Err()
		})
		return got, err
	}
}

// checkViewsForMonitor: the monitor's login reads every view of the
// monitor role, and no table (42501) -- on the coordinator, the views
// exist there alone, as citus_distribute creates them, not on a worker
// (but for the internal views the verbs read there).
func checkViewsForMonitor(t *testing.T, in *Install, as func(sql string, args ...any) ([]string, error)) {
	t.Helper()
	for _, v := range monitorViews {
		if _, err := as("SELECT * FROM " + in.Rel(v)); err != nil {
			t.Errorf("view %s for a monitor login: %v", v, err)
		}
	}
	for _, table := range []string{"queue", "lease", "setting", "message"} {
		_, err := as("SELECT * FROM " + in.Rel(table))
		if pgtest.PgError(err).Code != "42501" {
			t.Errorf("SELECT FROM %s as a monitor login: %v, want permission denied (42501)", table, err)
		}
	}
	// The internal views (a leading _) are read by the verbs on the workers:
	// they are the exception, on every node and distributed objects.
	const public = `viewname NOT LIKE '\_%'`
	for _, w := range in.Workers {
		wc := pgtest.Conn(t, w.URL)
		if n := queryInt(t, wc, "SELECT count(*) FROM pg_views WHERE schemaname = $1 AND "+public, in.Schema); n != 0 {
			t.Errorf("%s holds %d of the install's views; citus_distribute keeps them on the coordinator", w.Name, n)
		}
		if n := queryInt(t, wc, "SELECT count(*) FROM pg_views WHERE schemaname = $1 AND viewname = '_queue_right_held'", in.Schema); n != 1 {
			t.Errorf("%s holds %d views _queue_right_held, want 1: the verbs read it there", w.Name, n)
		}
	}
	if n := in.Int(t, `SELECT count(*) FROM pg_dist_object o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND o.objid = c.oid
		WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'v' AND c.relname NOT LIKE '\_%'`, in.Schema); n != 0 {
		t.Errorf("%d of the install's views are distributed objects; citus_distribute keeps them on the coordinator", n)
	}
}

func deliveryIDs(ds []pgsweep.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}
