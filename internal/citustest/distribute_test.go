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

// The tables of an install and where citus_distribute puts them.
var (
	distributedTables = []string{"claim_cursor", "lane", "message", "message_dead", "message_processed", "queue_recovery"}
	referenceTables   = []string{"installed_role", "lease", "queue", "setting"}
	localTables       = []string{"maintain_pass", "maintain_run", "maintain_state", "retention_pass", "retention_policy",
		"retention_sweep", "retention_unit", "schema_version"}
)

// fkCount counts the foreign keys between the install's tables (pg_class
// hides Citus's shards on the coordinator; pg_constraint does not).
const fkCount = `SELECT count(*) FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
	WHERE con.contype = 'f' AND c.relnamespace = $1::regnamespace`

// citus_distribute on an install that already holds queues, messages in
// every state, leases and settings: message tables distributed by queue and
// colocated, the rest reference tables, schema_version left on the
// coordinator, every row kept, every table keeping its row type (functions
// take them as arguments) and its foreign keys, every function on every
// node, the queue verbs delegated by p_queue; a second call changes nothing.
func TestCitusDistribute(t *testing.T) {
	in := NewUndistributed(t, 4, -1)
	// The refusals first: they change nothing, so the install the rest of
	// the test distributes is still a fresh one (one install for both).
	t.Run("refusals", func(t *testing.T) { checkDistributeRefusals(t, in) })
	ctx := context.Background()
	c := in.Client
	if err := c.QueueCreate(ctx, "orders", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueCreate(ctx, "events", pgsweep.Inbox, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, _, err := c.Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
		// Inbox messages with keys are sent before distribution: on Citus
		// they are refused today (see TestCitusVerbs, "inbox send with a key").
		if _, _, err := c.Send(ctx, "events", pgsweep.Message{Payload: json.RawMessage(`{}`), Key: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := c.Claim(ctx, "events", "setup", 4, 0)
	if err != nil || len(ev) != 4 {
		t.Fatalf("claim events: %d %v", len(ev), err)
	}
	if _, err := c.Complete(ctx, "events", ev[0].Token, []int64{ev[0].ID, ev[1].ID}); err != nil {
		t.Fatal(err)
	}
	in.Exec(t, "SELECT "+in.Q()+".fail_details('events', $1, $2, 'boom', NULL, NULL)", ev[2].Token, []int64{ev[2].ID}) // max_attempts 1: dead
	if _, _, err := c.LeaseAcquire(ctx, "leader", "setup", time.Minute); err != nil {
		t.Fatal(err)
	}
	in.Exec(t, "SELECT "+in.Q()+".setting_set('recovery_batch_size', '500')")
	counts := func() map[string]int64 {
		m := map[string]int64{}
		for _, tbl := range append(append(append([]string{}, distributedTables...), referenceTables...), localTables...) {
			m[tbl] = in.Int(t, "SELECT count(*) FROM "+in.Rel(tbl))
		}
		return m
	}
	before := counts()
	types := map[string]uint32{}
	rows, err := in.Pool.Query(ctx, "SELECT relname::text, reltype::int8 FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'r'", in.Schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		var ty int64
		if err := rows.Scan(&n, &ty); err != nil {
			t.Fatal(err)
		}
		types[n] = uint32(ty)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	fkBefore := in.Int(t, fkCount, in.Schema)

	res := in.Distribute(t)
	placed := map[string]string{}
	for _, r := range res {
		if r.Kind == "table" {
			placed[r.Name] = r.Placement
			if r.Placement != "local (coordinator)" && !r.Changed {
				t.Errorf("first call: table %s reported unchanged", r.Name)
			}
		}
	}
	for _, tbl := range distributedTables {
		if placed[tbl] != "distributed by queue" {
			t.Errorf("table %s: placement %q, want distributed by queue", tbl, placed[tbl])
		}
	}
	for _, tbl := range referenceTables {
		if placed[tbl] != "reference" {
			t.Errorf("table %s: placement %q, want reference", tbl, placed[tbl])
		}
	}
	for _, tbl := range localTables {
		if placed[tbl] != "local (coordinator)" {
			t.Errorf("table %s: placement %q, want local (coordinator)", tbl, placed[tbl])
		}
		if n := in.Int(t, "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = $1::regclass", in.Schema+"."+tbl); n != 0 {
			t.Errorf("%s was added to Citus's metadata; it belongs to the coordinator", tbl)
		}
	}

	// What Citus says.
	for _, tbl := range distributedTables {
		var method, col string
		var colocated bool
		err := in.Pool.QueryRow(ctx, `SELECT p.partmethod::text, column_to_column_name(p.logicalrelid, p.partkey),
			p.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $2::regclass)
			FROM pg_dist_partition p WHERE p.logicalrelid = $1::regclass`, in.Schema+"."+tbl, in.Schema+".message").Scan(&method, &col, &colocated)
		if err != nil || method != "h" || col != "queue" || !colocated {
			t.Errorf("%s: partmethod %q, column %q, colocated with message %v, err %v; want hash by queue, colocated", tbl, method, col, colocated, err)
		}
	}
	for _, tbl := range referenceTables {
		var method, rep string
		err := in.Pool.QueryRow(ctx, `SELECT partmethod::text, repmodel::text FROM pg_dist_partition WHERE logicalrelid = $1::regclass`,
			in.Schema+"."+tbl).Scan(&method, &rep)
		if err != nil || method != "n" || rep != "t" {
			t.Errorf("%s: partmethod %q repmodel %q (%v); want a reference table", tbl, method, rep, err)
		}
	}

	// Nothing lost, nothing left behind in the coordinator's own tables.
	after := counts()
	for tbl, n := range before {
		if after[tbl] != n {
			t.Errorf("%s: %d rows before citus_distribute, %d after", tbl, n, after[tbl])
		}
	}
	if before["message"] == 0 || before["message_processed"] == 0 || before["message_dead"] == 0 || before["lease"] == 0 {
		t.Fatalf("the fixture is too thin to prove anything: %v", before)
	}
	for _, tbl := range append(append([]string{}, distributedTables...), referenceTables...) {
		if tbl == "lane" {
			continue // empty before distribution
		}
		if n := in.Int(t, "SELECT pg_relation_size($1::regclass)", in.Schema+"."+tbl); n != 0 {
			t.Errorf("%s: the coordinator's table still holds %d bytes of local rows", tbl, n)
		}
	}
	for n, ty := range types {
		var now int64
		if err := in.Pool.QueryRow(ctx, "SELECT reltype::int8 FROM pg_class WHERE oid = $1::regclass", in.Schema+"."+n).Scan(&now); err != nil || uint32(now) != ty {
			t.Errorf("table %s: row type %d before, %d after (%v): functions taking its rows would name another type", n, ty, now, err)
		}
	}
	if n := in.Int(t, fkCount, in.Schema); n != fkBefore {
		t.Errorf("%d foreign keys before, %d after", fkBefore, n)
	}

	// Functions: on every node; the verbs delegated by p_queue, colocated with message.
	everyNode := map[string]bool{}
	for _, r := range res {
		if r.Kind == "function" && r.Placement != "coordinator only" {
			everyNode[r.Name] = true
		}
	}
	for _, fn := range []string{"version()", "_retention_step_done(bigint,retention_unit,text,bigint)"} {
		if everyNode[fn] {
			t.Errorf("%s reads a coordinator table or takes its rows, and was put on every node", fn)
		}
	}
	for _, w := range in.Workers {
		wc := pgtest.Conn(t, w.URL)
		if _, err := wc.Exec(ctx, "SET search_path TO "+in.Q()); err != nil { // types print as citus_distribute's do
			t.Fatal(err)
		}
		rows, err := wc.Query(ctx, "SELECT oid::regprocedure::text FROM pg_proc WHERE pronamespace = $1::regnamespace", in.Schema)
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		on := map[string]bool{}
		for _, f := range have {
			on[f] = true
		}
		for fn := range everyNode {
			if !on[fn] {
				t.Errorf("%s lacks %s", w.Name, fn)
			}
		}
	}
	for _, fn := range []string{"send", "send_batch", "claim", "renew", "complete", "fail", "fail_details", "release",
		"dead_requeue", "queue_recover", "claim_ids", "dead_letter"} {
		var n, good int64
		err := in.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE o.distribution_argument_index = 0
			AND o.colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $2::regclass))
			FROM pg_proc p LEFT JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
			WHERE p.pronamespace = $1::regnamespace AND p.proname = $3`, in.Schema, in.Schema+".message", fn).Scan(&n, &good)
		if err != nil || n == 0 || good != n {
			t.Errorf("%s: %d overloads, %d delegated by p_queue colocated with message (%v)", fn, n, good, err)
		}
	}
	for _, fn := range []string{"queue_create", "queue_configure", "lease_acquire", "maintain"} {
		if n := in.Int(t, `SELECT count(*) FROM pg_proc p JOIN pg_dist_object o ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
			WHERE p.pronamespace = $1::regnamespace AND p.proname = $2 AND o.distribution_argument_index IS NULL`, in.Schema, fn); n == 0 {
			t.Errorf("%s is not on every node, or is delegated", fn)
		}
	}

	// Views: still there, for the roles they were granted to.
	for _, v := range []string{"queue_stats", "leases", "settings", "retention_policies", "retention_passes", "maintenance_passes", "maintenance_runs"} {
		if n := in.Int(t, "SELECT count(*) FROM pg_class c WHERE c.oid = to_regclass($1) AND has_table_privilege($2, c.oid, 'SELECT')",
			in.Schema+"."+v, in.Schema+"_monitor"); n != 1 {
			t.Errorf("view %s is gone or no longer granted to the monitor role", v)
		}
	}
	stats, err := c.QueueStats(ctx)
	if err != nil || len(stats) != 2 {
		t.Fatalf("queue stats after distribution: %v %v", stats, err)
	}

	// Idempotent.
	for _, r := range in.Distribute(t) {
		if r.Changed {
			t.Errorf("second call changed %s %s (%s)", r.Kind, r.Name, r.Placement)
		}
	}

	// Ids stay unique: a message sent now gets its id on its queue's worker,
	// from that node's own range of message_id_seq (Citus starts each
	// node's range at its group id << 48).
	id, _, err := c.Send(ctx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"after":"distribution"}`)})
	if err != nil {
		t.Fatal(err)
	}
	w := in.WorkerOf(t, "orders")
	if lo, hi := int64(w.GroupID)<<48, int64(w.GroupID+1)<<48; id < lo || id >= hi {
		t.Errorf("a message sent to orders (on %s, group %d) got id %d, outside that node's range [%d, %d)", w.Name, w.GroupID, id, lo, hi)
	}
	if n := in.Int(t, "SELECT count(*) - count(DISTINCT id) FROM (SELECT id FROM "+in.Rel("message")+" UNION ALL SELECT id FROM "+
		in.Rel("message_processed")+" UNION ALL SELECT id FROM "+in.Rel("message_dead")+") x"); n != 0 {
		t.Errorf("%d duplicate message ids", n)
	}
}

// Without Citus, citus_distribute says what to do (55000) and changes
// nothing; on the plain single-node test database.
func TestCitusDistributeWithoutCitus(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	var hasCitus bool
	if err := db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&hasCitus); err != nil {
		t.Fatal(err)
	}
	if hasCitus {
		t.Fatal("the single-node test database has the citus extension: this test needs one without")
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{db.Schema + "_admin"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT * FROM "+db.Q()+".citus_distribute()")
	if e := pgtest.PgError(err); e.Code != "55000" || !strings.Contains(e.Message, "Citus extension") ||
		!strings.Contains(e.Hint, "CREATE EXTENSION citus") || !strings.Contains(e.Hint, "citus_add_node") {
		t.Fatalf("citus_distribute without Citus: %v (hint %q); want 55000 naming the Citus extension and what to do", err, e.Hint)
	}
}

// checkDistributeRefusals, on an undistributed install (TestCitusDistribute's,
// before it distributes it): a NOLOGIN owner role cannot work on Citus:
// refused with 55000 naming ALTER ROLE … LOGIN, nothing distributed. Roles
// without the admin role may not call it at all.
func checkDistributeRefusals(t *testing.T, in *Install) {
	ctx := context.Background()
	owner := pgx.Identifier{in.Schema + "_owner"}.Sanitize()
	in.Exec(t, "ALTER ROLE "+owner+" NOLOGIN")
	_, err := in.distribute(ctx)
	if e := pgtest.PgError(err); e.Code != "55000" || !strings.Contains(e.Hint, "ALTER ROLE "+in.Schema+"_owner LOGIN") {
		t.Fatalf("citus_distribute with a NOLOGIN owner: %v (hint %q); want 55000 and ALTER ROLE … LOGIN", err, e.Hint)
	}
	if n := in.Int(t, "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid::regclass::text LIKE $1", in.Schema+".%"); n != 0 {
		t.Fatalf("%d tables distributed by a refused call", n)
	}
	in.Exec(t, "ALTER ROLE "+owner+" LOGIN")

	for _, role := range []string{"_worker", "_monitor"} {
		tx, err := in.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{in.Schema + role}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, "SELECT * FROM "+in.Q()+".citus_distribute()")
		_ = tx.Rollback(ctx)
		if pgtest.PgError(err).Code != "42501" {
			t.Errorf("citus_distribute as %s%s: %v; want 42501", in.Schema, role, err)
		}
	}
}
