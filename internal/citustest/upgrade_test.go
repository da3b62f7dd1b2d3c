//go:build citus

package citustest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// citusVersion is the schema version that brought citus_distribute.
func citusVersion(t *testing.T) int32 {
	t.Helper()
	ms, err := pgsweep.Migrations("pgsweep")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.Contains(m.SQL, "FUNCTION citus_distribute()") {
			return m.Version
		}
	}
	t.Fatal("no migration creates citus_distribute()")
	return 0
}

// placements lists where every shard of the install's distributed tables is.
func placements(t *testing.T, in *Install) map[string]int {
	t.Helper()
	rows, err := in.Pool.Query(context.Background(), `SELECT s.logicalrelid::text || ':' || s.shardid, p.nodeport
		FROM pg_dist_shard s JOIN pg_dist_placement pl ON pl.shardid = s.shardid JOIN pg_dist_node p ON p.groupid = pl.groupid
		WHERE s.logicalrelid::text LIKE $1 AND p.noderole = 'primary'`, in.Schema+".%")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	var k string
	var port int32
	_, err = pgx.ForEachRow(rows, []any{&k, &port}, func() error { out[k+fmt.Sprint("@", port)] = int(port); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Upgrading a distributed install: the install made at the version that
// brought citus_distribute is distributed and filled (queues on both
// workers, messages pending, in flight, processed and dead, a lease,
// settings), then migrated to the latest version, then given a later
// migration as the rules ask one to be written (a column on message, a new
// message table keyed by queue, a new verb taking p_queue; ending with
// _grant_all(), which on Citus re-applies owners and grants to the
// distributed functions on every node), then citus_distribute() again.
// Every row is still there, every shard on its node, the in-flight messages
// complete with the tokens of their pre-upgrade claims, the new table is
// distributed and colocated, the new verb runs on its queue's worker, and
// a third call changes nothing.
func TestCitusUpgrade(t *testing.T) {
	in := NewUndistributed(t, 4, citusVersion(t))
	in.Distribute(t)
	ctx := context.Background()
	c := in.Client
	s := in.Q()
	queues := in.QueuePerWorker(t, "up")
	inflight := map[string]pgsweep.Delivery{}
	for _, q := range queues {
		if err := c.QueueCreate(ctx, q, pgsweep.Inbox, 1); err != nil {
			t.Fatal(err)
		}
		ms := make([]pgsweep.Message, 12)
		for i := range ms {
			ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
		}
		if _, err := c.SendBatch(ctx, q, ms); err != nil {
			t.Fatal(err)
		}
		ds, err := c.Claim(ctx, q, "before", 6, 10*time.Minute)
		if err != nil || len(ds) != 6 {
			t.Fatalf("claim %s: %d %v", q, len(ds), err)
		}
		if _, err := c.Complete(ctx, q, ds[0].Token, []int64{ds[0].ID, ds[1].ID}); err != nil {
			t.Fatal(err)
		}
		in.Exec(t, "SELECT "+s+".dead_letter($1, $2, $3, 'refused')", q, ds[2].Token, []int64{ds[2].ID})
		inflight[q] = ds[3]
	}
	if _, _, err := c.LeaseAcquire(ctx, "upgrade-leader", "before", time.Hour); err != nil {
		t.Fatal(err)
	}
	in.Exec(t, "SELECT "+s+".setting_set('recovery_batch_size', '321')")
	tables := append(append(append([]string{}, distributedTables...), referenceTables...), localTables...)
	counts := func() map[string]int64 {
		m := map[string]int64{}
		for _, tbl := range tables {
			m[tbl] = in.Int(t, "SELECT count(*) FROM "+in.Rel(tbl))
		}
		return m
	}
	before, where := counts(), placements(t, in)

	// The released migrations after the Citus one, if any.
	conn := pgtest.Conn(t, in.URL)
	res, err := pgsweep.Migrate(ctx, conn, in.Schema)
	if err != nil {
		t.Fatalf("migrate a distributed install from %d: %v", res.From, err)
	}
	// A later migration, written by the rules (docs/operations.md,
	// "Scaling out with Citus"): in Citus's sequential mode (otherwise the
	// ALTER TABLE on every shard at once forbids the CREATE FUNCTION after
	// it in the same transaction: "cannot run function command because
	// there was a parallel operation on a distributed table").
	later := fmt.Sprintf(`
		SET LOCAL search_path TO %[1]s, pg_temp;
		SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
		ALTER TABLE message ADD COLUMN note text;
		CREATE TABLE message_note (queue text NOT NULL, id bigint NOT NULL, note text NOT NULL, PRIMARY KEY (queue, id));
		CREATE OR REPLACE FUNCTION note_count(p_queue text) RETURNS bigint LANGUAGE plpgsql STABLE SET search_path FROM CURRENT AS $$
		DECLARE v bigint;
		BEGIN
			SELECT count(*) INTO v FROM message m WHERE m.queue = p_queue AND m.note IS NULL;
			RETURN v;
		END $$;
		SELECT _grant_all();`, s)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, later); err != nil {
		t.Fatalf("a later migration on a distributed install: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// What changes: the later migration's table and verb, and the functions
	// that the released migrations after the Citus one dropped and created
	// again (021 recreates claim_ids): new functions are distributed too.
	changed := map[string]string{}
	for _, r := range in.Distribute(t) {
		if r.Changed {
			changed[r.Name] = r.Placement
			// queue_right (0.34), message_unique and schedule (0.41), flow_bucket, flow_gate,
			// flow_grant and group_cursor (0.43): tables new since the install
			if r.Kind == "table" && !slices.Contains([]string{"message_note", "queue_right", "message_unique", "schedule",
				"flow_bucket", "flow_gate", "flow_grant", "group_cursor"}, r.Name) {
				t.Errorf("citus_distribute after the upgrade converted table %s again", r.Name)
			}
		}
	}
	if changed["message_note"] != "distributed by queue" || changed["note_count(text)"] != "delegated by p_queue" {
		t.Errorf("citus_distribute after the later migration changed %v; want message_note distributed and note_count(text) delegated", changed)
	}
	t.Logf("migrated %d -> %d, then citus_distribute changed: %v", res.From, res.To, changed)
	for _, r := range in.Distribute(t) {
		if r.Changed {
			t.Errorf("a third call changed %s %s", r.Kind, r.Name)
		}
	}

	after := counts()
	for tbl, n := range before {
		if tbl == "setting" && after[tbl] >= n { // later migrations add settings (0.34: six)
			continue
		}
		if tbl == "maintain_state" && after[tbl] == n+2 { // 0.40 adds the maintenance part stats, 0.41 schedules
			continue
		}
		if after[tbl] != n {
			t.Errorf("%s: %d rows before the upgrade, %d after", tbl, n, after[tbl])
		}
	}
	now := placements(t, in)
	for k := range where {
		if _, ok := now[k]; !ok {
			t.Errorf("shard placement %s moved or vanished", k)
		}
	}
	if n := in.Int(t, `SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = $1::regclass
		AND colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = $2::regclass)`,
		in.Schema+".message_note", in.Schema+".message"); n != 1 {
		t.Error("message_note is not colocated with message")
	}
	if v := in.Int(t, "SELECT count(*) FROM "+in.Rel("setting")+" WHERE name = 'recovery_batch_size' AND value = '321'"); v != 1 {
		t.Error("the setting changed")
	}
	tr := in.NewTraced(t)
	for i, q := range queues {
		d := inflight[q]
		done, err := c.Complete(ctx, q, d.Token, []int64{d.ID})
		if err != nil || len(done) != 1 {
			t.Errorf("%s: the pre-upgrade claim's token completed %v (%v)", q, done, err)
		}
		tr.Take()
		var n int64
		if err := tr.Conn.QueryRow(ctx, "SELECT "+s+".note_count($1)", q).Scan(&n); err != nil || n != 8 {
			t.Errorf("note_count(%s) = %d (%v), want 8", q, n, err)
		}
		if cmds := tr.Take(); !pushed(cmds, in.Schema, "note_count", in.Workers[i].Port) {
			t.Errorf("the new verb did not run on %s; remote commands:%s", in.Workers[i].Name, describeCmds(cmds))
		}
		id, _, err := c.Send(ctx, q, pgsweep.Message{Payload: json.RawMessage(`{"after":"upgrade"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1 AND id = $2", q, id); n != 1 {
			t.Errorf("%s: a send after the upgrade left no row", q)
		}
	}
	// The monitor's views (migration 025 replaced three of them, and Citus
	// copied those to the workers; citus_distribute put them back on the
	// coordinator alone) read as on a fresh install.
	as := asMonitor(t, in)
	checkViewsForMonitor(t, in, as)
	if got, err := as("SELECT owner FROM " + in.Rel("leases") + " WHERE name = 'upgrade-leader' AND live"); err != nil || len(got) != 1 || got[0] != "before" {
		t.Errorf("leases for a monitor login after the upgrade: %v %v; want the live lease of before", got, err)
	}
	if got, err := as("SELECT value FROM " + in.Rel("settings") + " WHERE name = 'recovery_batch_size'"); err != nil || len(got) != 1 || got[0] != "321" {
		t.Errorf("settings for a monitor login after the upgrade: %v %v; want 321", got, err)
	}
	if got, err := as("SELECT count(*) FROM "+in.Rel("queue_stats")+" WHERE queue = ANY($1)", queues); err != nil || len(got) != 1 || got[0] != fmt.Sprint(len(queues)) {
		t.Errorf("queue_stats for a monitor login after the upgrade: %v %v; want %d queues", got, err, len(queues))
	}
	if n := in.Int(t, "SELECT count(*) - count(DISTINCT id) FROM (SELECT id FROM "+in.Rel("message")+" UNION ALL SELECT id FROM "+
		in.Rel("message_processed")+" UNION ALL SELECT id FROM "+in.Rel("message_dead")+") x"); n != 0 {
		t.Errorf("%d duplicate message ids", n)
	}
}

// `pgsweep migrate --citus` on the coordinator, as a DBA runs it: the
// migration installs, the Citus step refuses while the owner role cannot log
// in and says what to do (exit 1); after ALTER ROLE … LOGIN the same command
// distributes the install, and run again changes nothing.
func TestCitusMigrateCLI(t *testing.T) {
	c := Get(t)
	root, err := pgtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "pgsweep")
	build := exec.Command("go", "build", "-o", bin, "./cmd/pgsweep")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pgsweep: %v\n%s", err, out)
	}
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { Uninstall(t, c.URL, schema) })
	run := func() (string, int) {
		cmd := exec.Command(bin, "migrate", "--citus", "--database-url", c.URL, "--schema", schema)
		cmd.Env = append(os.Environ(), "PGSWEEP_DATABASE_URL=")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run()
	if code != 1 || !strings.Contains(out, "migrated from version 0") || !strings.Contains(out, "ALTER ROLE "+schema+"_owner LOGIN") {
		t.Fatalf("first migrate --citus: exit %d\n%s", code, out)
	}
	conn := pgtest.Conn(t, c.URL)
	if _, err := conn.Exec(context.Background(), "ALTER ROLE "+pgx.Identifier{schema + "_owner"}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	out, code = run()
	if code != 0 || !strings.Contains(out, "up to date") || !strings.Contains(out, "distributed on Citus: 12 tables by queue, 5 reference tables") {
		t.Fatalf("migrate --citus after ALTER ROLE: exit %d\n%s", code, out)
	}
	out, code = run()
	if code != 0 || !strings.Contains(out, "0 objects changed") {
		t.Fatalf("migrate --citus again: exit %d\n%s", code, out)
	}
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = $1::regclass AND partmethod = 'h'",
		schema+".message").Scan(&n); err != nil || n != 1 {
		t.Fatalf("message is not distributed after migrate --citus: %d %v", n, err)
	}
}

// Placing a queue: a busy queue gets a shard of its own
// (isolate_tenant_to_new_shard, with the shards of every message table:
// CASCADE) and that shard moves to the other worker
// (citus_move_shard_placement). Its messages go along, a claim made before
// the move completes with its token after it, and the verbs now run on the
// new worker; citus_distribute then finds nothing to change.
func TestCitusMoveQueue(t *testing.T) {
	in := New(t, 4)
	ctx := context.Background()
	q := in.QueuePerWorker(t, "hot")[0]
	if err := in.Client.QueueCreate(ctx, q, pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	ms := make([]pgsweep.Message, 200)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i))}
	}
	if _, err := in.Client.SendBatch(ctx, q, ms); err != nil {
		t.Fatal(err)
	}
	held, err := in.Client.Claim(ctx, q, "before-move", 10, 10*time.Minute)
	if err != nil || len(held) != 10 {
		t.Fatalf("claim: %d %v", len(held), err)
	}
	from := in.WorkerOf(t, q)
	var shard int64
	if err := in.Pool.QueryRow(ctx, "SELECT isolate_tenant_to_new_shard($1::regclass, $2::text, 'CASCADE', 'block_writes')",
		in.Schema+".message", q).Scan(&shard); err != nil {
		t.Fatalf("isolate queue %s: %v", q, err)
	}
	to := in.Workers[0]
	if to.Port == from.Port {
		to = in.Workers[1]
	}
	in.Exec(t, "SELECT citus_move_shard_placement($1, $2, $3, $4, $5, 'block_writes')", shard, from.Host, from.Port, to.Host, to.Port)
	if w := in.WorkerOf(t, q); w.Port != to.Port {
		t.Fatalf("queue %s is on %s after the move, want %s", q, w.Name, to.Name)
	}
	if n := in.Int(t, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1", q); n != 200 {
		t.Fatalf("%d of 200 messages after the move", n)
	}
	ids := make([]int64, len(held))
	for i, d := range held {
		ids[i] = d.ID
	}
	if done, err := in.Client.Complete(ctx, q, held[0].Token, ids); err != nil || len(done) != 10 {
		t.Fatalf("complete the claim made before the move: %v %v", done, err)
	}
	tr := in.NewTraced(t)
	tc, _ := pgsweep.NewClient(tr.Conn, &pgsweep.ClientOptions{Schema: in.Schema})
	tr.Take()
	ds, err := tc.Claim(ctx, q, "after-move", 190, time.Minute)
	if err != nil || len(ds) != 190 {
		t.Fatalf("claim after the move: %d %v", len(ds), err)
	}
	if cmds := tr.Take(); !pushed(cmds, in.Schema, "claim", to.Port) {
		t.Errorf("the claim did not run on %s after the move; remote commands:%s", to.Name, describeCmds(cmds))
	}
	for _, r := range in.Distribute(t) {
		if r.Changed {
			t.Errorf("citus_distribute after the move changed %s %s", r.Kind, r.Name)
		}
	}
}
