package pgsweep_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// healthDB is an install whose health thresholds are all zero, so that a
// condition is a finding as soon as it exists (no test waits for an age).
func healthDB(t *testing.T) *pgtest.DB {
	t.Helper()
	db := pgtest.New(t, 4)
	s := db.Q()
	for _, name := range []string{"health_transaction_age", "health_idle_in_transaction_age", "health_prepared_age", "health_lock_wait", "health_due_age"} {
		db.MustExec(t, "SELECT "+s+".setting_set($1, '0 seconds')", name)
	}
	return db
}

// findingOf returns the finding of kind about object, if health() has one.
func findingOf(t *testing.T, c *pgsweep.Client, kind, object string) (pgsweep.Finding, bool) {
	t.Helper()
	fs, err := c.Health(context.Background())
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	for _, f := range fs {
		if f.Kind == kind && f.Object == object {
			return f, true
		}
	}
	return pgsweep.Finding{}, false
}

func waitFinding(t *testing.T, c *pgsweep.Client, kind, object string, present bool) pgsweep.Finding {
	t.Helper()
	var got pgsweep.Finding
	pgtest.Eventually(t, 30*time.Second, func() error {
		f, ok := findingOf(t, c, kind, object)
		if ok != present {
			return fmt.Errorf("finding %s %q present: %v, want %v", kind, object, ok, present)
		}
		got = f
		return nil
	})
	return got
}

func backendPid(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	if err := conn.QueryRow(context.Background(), "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// TestHealthIdleInTransaction: a session idle in an open transaction that
// holds an xid is named by its pid with the horizon it holds back, and the
// finding goes when the transaction ends.
func TestHealthIdleInTransaction(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	other := pgtest.Conn(t, db.URL)
	pid := backendPid(t, other)
	object := fmt.Sprintf("pid %d", pid)
	if _, found := findingOf(t, db.Client, "idle_in_transaction", object); found {
		t.Fatal("a finding before the transaction began")
	}
	if _, err := other.Exec(ctx, "BEGIN; SELECT pg_catalog.txid_current()"); err != nil {
		t.Fatal(err)
	}
	f := waitFinding(t, db.Client, "idle_in_transaction", object, true)
	if f.Severity != "warning" || !strings.Contains(f.Detail, "holding the xmin horizon back by") ||
		!strings.Contains(f.Advice, fmt.Sprintf("pg_terminate_backend(%d)", pid)) {
		t.Fatalf("finding %+v", f)
	}
	if _, err := other.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	waitFinding(t, db.Client, "idle_in_transaction", object, false)
}

// TestHealthLongTransactionAndLockWait: a session of a login role that is a
// member of <schema>_worker waits for a lock another session holds: it is a
// long transaction (active, open past the threshold) and a lock wait naming
// the blocker; both go when the blocker lets go.
func TestHealthLongTransactionAndLockWait(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	su := pgtest.Conn(t, db.URL)
	login := db.Schema + "_app"
	id := pgx.Identifier{login}.Sanitize()
	if _, err := su.Exec(ctx, "CREATE ROLE "+id+" LOGIN IN ROLE "+pgx.Identifier{db.Schema + "_worker"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pgtest.Conn(t, db.URL).Exec(context.Background(), "DROP ROLE IF EXISTS "+id) })
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(login)
	app := pgtest.Conn(t, u.String())

	holder := pgtest.Conn(t, db.URL)
	holderPid := backendPid(t, holder)
	key := time.Now().UnixNano()
	if _, err := holder.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	appPid := backendPid(t, app)
	if _, err := app.Exec(ctx, "BEGIN; SELECT pg_catalog.txid_current()"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := app.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", key)
		if err == nil {
			_, err = app.Exec(ctx, "COMMIT")
		}
		done <- err
	}()
	object := fmt.Sprintf("pid %d", appPid)
	f := waitFinding(t, db.Client, "lock_wait", object, true)
	if !strings.Contains(f.Detail, "user "+login+" ") || !strings.Contains(f.Detail, fmt.Sprintf("blocked by pid(s) %d", holderPid)) ||
		!strings.Contains(f.Detail, "ExclusiveLock lock on advisory") {
		t.Fatalf("lock wait finding %+v", f)
	}
	lt := waitFinding(t, db.Client, "long_transaction", object, true)
	if !strings.Contains(lt.Detail, "(active)") || !strings.Contains(lt.Detail, "holding the xmin horizon back by") {
		t.Fatalf("long transaction finding %+v", lt)
	}
	// the holder is a superuser's session, not the install's: no lock wait of its own
	if _, found := findingOf(t, db.Client, "lock_wait", fmt.Sprintf("pid %d", holderPid)); found {
		t.Fatal("the holder is reported as waiting")
	}
	if _, err := holder.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFinding(t, db.Client, "lock_wait", object, false)
	waitFinding(t, db.Client, "long_transaction", object, false)
}

// TestHealthReplicationSlot: an inactive physical slot that reserves WAL is
// named with the WAL it keeps, and goes when the slot is dropped. A logical
// slot (whose catalog_xmin holds the horizon back) needs wal_level logical.
func TestHealthReplicationSlot(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	su := pgtest.Conn(t, db.URL)
	slot := randomName("pgsweep_health_")
	if _, err := su.Exec(ctx, "SELECT pg_catalog.pg_create_physical_replication_slot($1, true)", slot); err != nil {
		t.Fatal(err)
	}
	dropped := false
	drop := func() {
		if _, err := pgtest.Conn(t, db.URL).Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot($1)", slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
		dropped = true
	}
	t.Cleanup(func() {
		if !dropped {
			drop()
		}
	})
	f := waitFinding(t, db.Client, "replication_slot", "slot "+slot, true)
	if !strings.Contains(f.Detail, "physical slot, inactive") || !strings.Contains(f.Detail, "of WAL") ||
		!strings.Contains(f.Advice, "pg_drop_replication_slot('"+slot+"')") {
		t.Fatalf("finding %+v", f)
	}
	drop()
	waitFinding(t, db.Client, "replication_slot", "slot "+slot, false)

	t.Run("logical", func(t *testing.T) {
		var level string
		if err := su.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
			t.Fatal(err)
		}
		if level != "logical" {
			pgtest.NeedCluster(t, "wal_level is "+level+" on this cluster: a logical slot (catalog_xmin) cannot be made; set wal_level = logical (scripts/db.sh) to run this")
		}
		lslot := randomName("pgsweep_health_l_")
		if _, err := su.Exec(ctx, "SELECT pg_catalog.pg_create_logical_replication_slot($1, 'test_decoding')", lslot); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_, _ = pgtest.Conn(t, db.URL).Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot($1)", lslot)
		}()
		f := waitFinding(t, db.Client, "replication_slot", "slot "+lslot, true)
		if !strings.Contains(f.Detail, "logical slot, inactive, holding the xmin horizon back by") {
			t.Fatalf("finding %+v", f)
		}
		if _, err := su.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot($1)", lslot); err != nil {
			t.Fatal(err)
		}
		waitFinding(t, db.Client, "replication_slot", "slot "+lslot, false)
	})
}

// TestHealthPreparedTransaction: a prepared transaction is named by its gid,
// and goes when it is committed. It needs max_prepared_transactions > 0.
func TestHealthPreparedTransaction(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	su := pgtest.Conn(t, db.URL)
	var max int
	if err := su.QueryRow(ctx, "SELECT pg_catalog.current_setting('max_prepared_transactions')::pg_catalog.int4").Scan(&max); err != nil {
		t.Fatal(err)
	}
	if max == 0 {
		pgtest.NeedCluster(t, "max_prepared_transactions = 0 on this cluster: PREPARE TRANSACTION is refused; set it (scripts/db.sh) to run this test")
	}
	gid := randomName("pgsweep health ")
	if _, err := su.Exec(ctx, "BEGIN; SELECT pg_catalog.txid_current(); PREPARE TRANSACTION '"+gid+"'"); err != nil {
		t.Fatal(err)
	}
	finished := false
	t.Cleanup(func() {
		if !finished {
			_, _ = pgtest.Conn(t, db.URL).Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'")
		}
	})
	f := waitFinding(t, db.Client, "prepared_transaction", "gid "+gid, true)
	if !strings.Contains(f.Detail, "holding the xmin horizon back by") || !strings.Contains(f.Advice, "COMMIT PREPARED '"+gid+"'") {
		t.Fatalf("finding %+v", f)
	}
	if _, err := su.Exec(ctx, "COMMIT PREPARED '"+gid+"'"); err != nil {
		t.Fatal(err)
	}
	finished = true
	waitFinding(t, db.Client, "prepared_transaction", "gid "+gid, false)
}

// TestHealthInstall: maintenance that never ran, autovacuum off on one of
// the install's tables, dead rows in it, and a queue falling behind (from
// its snapshot) are found, and go when their cause does.
func TestHealthInstall(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	c := db.Client
	s := db.Q()
	f := waitFinding(t, c, "maintenance_not_running", "maintain", true)
	if f.Severity != "critical" {
		t.Fatalf("finding %+v", f)
	}
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Maintain(ctx, "health-test", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFinding(t, c, "maintenance_not_running", "maintain", false)
	qb := waitFinding(t, c, "queue_behind", "queue q", true)
	if !strings.Contains(qb.Detail, "1 due, 0 in flight") {
		t.Fatalf("finding %+v", qb)
	}

	table := db.Schema + ".message"
	db.MustExec(t, "ALTER TABLE "+s+".message SET (autovacuum_enabled = off)")
	av := waitFinding(t, c, "autovacuum_disabled", "table "+table, true)
	if av.Advice != "ALTER TABLE "+table+" RESET (autovacuum_enabled)" {
		t.Fatalf("finding %+v", av)
	}
	db.MustExec(t, "SELECT "+s+".setting_set('health_dead_tuples', '1')")
	db.MustExec(t, "SELECT "+s+".setting_set('health_dead_tuples_percent', '0')")
	conn := pgtest.Conn(t, db.URL)
	if _, err := conn.Exec(ctx, "DELETE FROM "+s+".message"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	dt := waitFinding(t, c, "dead_tuples", "table "+table, true)
	if !strings.Contains(dt.Detail, " dead rows, 0 live; last vacuum never") {
		t.Fatalf("finding %+v", dt)
	}
	db.MustExec(t, "ALTER TABLE "+s+".message RESET (autovacuum_enabled)")
	waitFinding(t, c, "autovacuum_disabled", "table "+table, false)
	// VACUUM removes them once no other session of the database still
	// sees them (another test's transaction may, for a moment): vacuum
	// again until it has
	pgtest.Eventually(t, 30*time.Second, func() error {
		if _, err := conn.Exec(ctx, "VACUUM "+s+".message"); err != nil {
			t.Fatal(err)
		}
		if f, found := findingOf(t, c, "dead_tuples", "table "+table); found {
			return fmt.Errorf("after VACUUM: %+v", f)
		}
		return nil
	})
}

// TestHealthMonitor: the monitor role may call Health; without pg_monitor
// it is told that it cannot see other roles' sessions.
func TestHealthMonitor(t *testing.T) {
	db := healthDB(t)
	mon := roleClient(t, db, "monitor")
	f, found := findingOf(t, mon, "health_limited", "role "+db.Schema+"_monitor_member")
	if !found || f.Severity != "info" || !strings.Contains(f.Advice, "GRANT pg_monitor TO") {
		t.Fatalf("health_limited: %+v, %v", f, found)
	}
	if _, found := findingOf(t, mon, "maintenance_not_running", "maintain"); !found {
		t.Fatal("the monitor does not see the install's findings")
	}
	if _, found := findingOf(t, db.Client, "health_limited", "role postgres"); found {
		t.Fatal("a superuser sees every session")
	}
	// a worker may not
	w := roleClient(t, db, "worker")
	_, err := w.Health(context.Background())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("a worker's Health: %v, want 42501", err)
	}
}

// TestHealthFindingKindsMatchTheSQL: FindingKinds (the Prometheus gauges'
// labels) lists exactly the kinds health.sql reports.
func TestHealthFindingKindsMatchTheSQL(t *testing.T) {
	src, err := os.ReadFile("sql/functions/health.sql")
	if err != nil {
		t.Fatal(err)
	}
	inSQL := map[string]bool{}
	for _, m := range regexp.MustCompile(`kind := '([a-z_]+)'`).FindAllStringSubmatch(string(src), -1) {
		inSQL[m[1]] = true
	}
	inGo := map[string]bool{}
	for _, k := range pgsweep.FindingKinds {
		if inGo[k] {
			t.Errorf("FindingKinds lists %q twice", k)
		}
		inGo[k] = true
		if !inSQL[k] {
			t.Errorf("FindingKinds lists %q, which health.sql never reports", k)
		}
	}
	for k := range inSQL {
		if !inGo[k] {
			t.Errorf("health.sql reports %q, which FindingKinds lacks", k)
		}
	}
}

// TestHealthIndexBloat: a queue's primary key emptied by deletes and a
// VACUUM keeps its pages: index_bloat names it, and REINDEX ends it.
func TestHealthIndexBloat(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	c := db.Client
	s := pgx.Identifier{db.Schema}.Sanitize()
	db.MustExec(t, "SELECT "+s+".setting_set('health_index_bloat_mb', '0')")
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	db.MustExec(t, "SELECT "+s+".send_batch('q', array_agg('{}'::jsonb)) FROM generate_series(1, 5000)")
	db.MustExec(t, "SELECT "+s+".send_batch('q', array_agg('{}'::jsonb)) FROM generate_series(1, 5000)")
	var pkey string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_catalog.format('%I.%I', n.nspname, i.relname) FROM pg_catalog.pg_index x
		JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid JOIN pg_catalog.pg_namespace n ON n.oid = i.relnamespace
		WHERE x.indrelid = $1::regclass AND x.indisprimary`, db.Schema+".message").Scan(&pkey); err != nil {
		t.Fatal(err)
	}
	db.MustExec(t, "VACUUM "+s+".message")
	if f, found := findingOf(t, c, "index_bloat", "index "+pkey); found {
		t.Fatalf("a full index is not bloated: %+v", f)
	}
	db.MustExec(t, "DELETE FROM "+s+".message")
	var f pgsweep.Finding
	// VACUUM removes the entries once no other session still sees them
	// (another test's transaction may, for a moment): vacuum until it has
	pgtest.Eventually(t, 30*time.Second, func() error {
		db.MustExec(t, "VACUUM "+s+".message")
		var found bool
		if f, found = findingOf(t, c, "index_bloat", "index "+pkey); !found {
			return errors.New("no index_bloat finding after the deletes")
		}
		return nil
	})
	if f.Severity != "warning" || !strings.Contains(f.Detail, "% is free space") || f.Advice != "REINDEX INDEX CONCURRENTLY "+pkey+
		" gives the space back without blocking the queue. If it returns, vacuum falls behind: see the dead_tuples and xmin findings." {
		t.Fatalf("finding %+v", f)
	}
	// the same index under the default size floor (100 MB): not reported
	db.MustExec(t, "SELECT "+s+".setting_reset('health_index_bloat_mb')")
	if f, found := findingOf(t, c, "index_bloat", "index "+pkey); found {
		t.Fatalf("an index under health_index_bloat_mb: %+v", f)
	}
	db.MustExec(t, "SELECT "+s+".setting_set('health_index_bloat_mb', '0')")
	db.MustExec(t, "REINDEX INDEX "+pkey)
	if f, found := findingOf(t, c, "index_bloat", "index "+pkey); found {
		t.Fatalf("after REINDEX: %+v", f)
	}
}

// TestHealthCronFailing: the pg_cron job that runs maintain() is a
// cron_failing finding when its last run failed (the row pg_cron writes)
// and when it is inactive; a run that succeeded after a failure clears it.
func TestHealthCronFailing(t *testing.T) {
	db := healthDB(t)
	ctx := context.Background()
	c := db.Client
	s := pgx.Identifier{db.Schema}.Sanitize()
	if _, err := db.Pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_cron"); err != nil {
		pgtest.NeedCluster(t, "pg_cron is not installable in the test database: "+err.Error())
	}
	var id int64
	if err := db.Pool.QueryRow(ctx, "SELECT cron.schedule("+s+".cron_job_name(), '0 0 1 1 *', 'SELECT 1')").Scan(&id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.MustExec(t, "SELECT cron.unschedule($1::bigint)", id) })
	object := fmt.Sprintf("cron job %d", id)
	if f, found := findingOf(t, c, "cron_failing", object); found {
		t.Fatalf("a job that never ran: %+v", f)
	}
	run := func(status, message string) {
		db.MustExec(t, `INSERT INTO cron.job_run_details (jobid, runid, job_pid, database, username, command, status, return_message, start_time, end_time)
			VALUES ($1, nextval('cron.runid_seq'), 1, current_database(), current_user, 'SELECT 1', $2, $3, now(), now())`, id, status, message)
	}
	run("failed", "ERROR:  permission denied for procedure maintain")
	f, found := findingOf(t, c, "cron_failing", object)
	if !found || f.Severity != "critical" || !strings.Contains(f.Detail, "failed: ERROR:  permission denied for procedure maintain") {
		t.Fatalf("after a failed run: %+v %v", f, found)
	}
	run("succeeded", "CALL")
	if f, found := findingOf(t, c, "cron_failing", object); found {
		t.Fatalf("after a run that succeeded: %+v", f)
	}
	db.MustExec(t, "SELECT cron.alter_job($1::bigint, active := false)", id)
	f, found = findingOf(t, c, "cron_failing", object)
	if !found || !strings.Contains(f.Detail, "is inactive") {
		t.Fatalf("an inactive job: %+v %v", f, found)
	}
	// pg_cron shows a job only to the role that scheduled it: the monitor sees nothing
	if f, found := findingOf(t, roleClient(t, db, "monitor"), "cron_failing", object); found {
		t.Fatalf("the monitor sees another role's job: %+v", f)
	}
}
