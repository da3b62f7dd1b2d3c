package pgsweep_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// detachEnv is a daily-partitioned table "ev" (no DEFAULT partition) under a
// retention policy of one day, in a test schema.
type detachEnv struct {
	t      *testing.T
	db     *pgtest.DB
	s      string // the schema, quoted
	client *pgsweep.Client
}

func newDetachEnv(t *testing.T) *detachEnv {
	t.Helper()
	db := pgtest.New(t, 8)
	e := &detachEnv{t: t, db: db, s: db.Q()}
	c, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	e.client = c
	e.exec(`CREATE TABLE %[1]s.ev (id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL) PARTITION BY RANGE (at)`)
	e.day(0)
	e.exec(`SELECT %[1]s.retention_register('ev', '%[2]s.ev', 'at', '1 day', p_interval => '1 hour')`)
	return e
}

// exec runs q with %[1]s the quoted schema and %[2]s the bare one.
func (e *detachEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), fmt.Sprintf(q, e.s, e.db.Schema), args...); err != nil {
		e.t.Fatalf("%s: %v", fmt.Sprintf(q, e.s, e.db.Schema), err)
	}
}

func (e *detachEnv) value(q string) int64 {
	e.t.Helper()
	var n int64
	if err := e.db.Pool.QueryRow(context.Background(), fmt.Sprintf(q, e.s, e.db.Schema)).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", fmt.Sprintf(q, e.s, e.db.Schema), err)
	}
	return n
}

// day creates the partition ev_<n> of day n (0 today, -3 three days ago)
// holding 100 rows.
func (e *detachEnv) day(n int) {
	e.t.Helper()
	name := fmt.Sprintf("ev_%d", -n)
	e.exec(fmt.Sprintf(`CREATE TABLE %%[1]s.%[1]s PARTITION OF %%[1]s.ev
		FOR VALUES FROM (date_trunc('day', now()) + interval '%[2]d days') TO (date_trunc('day', now()) + interval '%[3]d days');
		INSERT INTO %%[1]s.ev (at) SELECT date_trunc('day', now()) + interval '%[2]d days' + g * interval '1 minute'
		  FROM generate_series(1, 100) g;
		ANALYZE %%[1]s.%[1]s`, name, n, n+1))
}

func (e *detachEnv) leaves() int64 {
	return e.value(`SELECT count(*) FROM pg_partition_tree('%[1]s.ev') t WHERE t.isleaf`)
}

// waitDetaching waits until a session runs a DETACH ... CONCURRENTLY (or
// FINALIZE) that waits for a lock (the long transaction), and returns its pid.
func (e *detachEnv) waitDetaching(ctx context.Context) int32 {
	e.t.Helper()
	for {
		var pid int32
		err := e.db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE query LIKE 'ALTER TABLE % DETACH PARTITION %' AND wait_event_type = 'Lock'`).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			e.t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			e.t.Fatal("no DETACH ... CONCURRENTLY started waiting")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// holdParent opens a transaction that has read the parent: DETACH's second
// transaction waits for it.
func (e *detachEnv) holdParent(ctx context.Context) pgx.Tx {
	e.t.Helper()
	tx, err := e.db.Pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var n int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.ev WHERE at >= date_trunc('day', now())`, e.s)).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return tx
}

// TestRetentionDetachConcurrently: the runner's DETACH ... CONCURRENTLY
// removes every wholly expired leaf, counts its rows once, and while it
// waits for a long transaction on the parent, inserts into the live
// partition and queries of the parent do not wait at all (each runs with a
// lock_timeout of 100 ms, which a wait behind a plain DETACH's ACCESS
// EXCLUSIVE request would reach).
func TestRetentionDetachConcurrently(t *testing.T) {
	e := newDetachEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, d := range []int{-5, -4, -3, -2} {
		e.day(d)
	}
	e.exec(`SELECT %[1]s.setting_set('retention_lock_timeout', '30 seconds')`)

	long := e.holdParent(ctx)
	type result struct {
		d   pgsweep.DetachResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil)
		done <- result{d, err}
	}()
	e.waitDetaching(ctx)
	probe, err := e.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SET lock_timeout = '100ms'`,
		fmt.Sprintf(`INSERT INTO %s.ev (at) SELECT now() FROM generate_series(1, 10)`, e.s),
		fmt.Sprintf(`SELECT count(*) FROM %s.ev`, e.s),
		`RESET lock_timeout`,
	} {
		if _, err := probe.Exec(ctx, q); err != nil {
			t.Errorf("while DETACH ... CONCURRENTLY waited: %s: %v", q, err)
		}
	}
	probe.Release()
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.d.Errors) > 0 {
		t.Fatalf("detach: %v %v", r.err, r.d.Errors)
	}
	if r.d.Detached != 4 || r.d.Dropped != 0 || r.d.Rows != 400 || r.d.Pending != 0 {
		t.Errorf("result %+v, want 4 detached (dropped by the next call), 400 rows", r.d)
	}
	if n := e.value(`SELECT count(*) FROM pg_class WHERE relnamespace = '%[1]s'::regnamespace AND relname LIKE 'pgsweep\_detached\_%%'`); n != 4 {
		t.Errorf("%d tables renamed pgsweep_detached_<oid>, want 4", n)
	}
	if n := e.leaves(); n != 1 {
		t.Errorf("%d leaves left, want today's only", n)
	}
	if n := e.value(`SELECT count(*) FROM %[1]s.ev`); n != 110 {
		t.Errorf("today's partition holds %d rows, want 110", n)
	}
	if n := e.value(`SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes
		WHERE policy = 'ev' AND strategy = 'detach_concurrently' AND partitions_dropped = 1`); n != 400 {
		t.Errorf("the history counts %d rows, want 400", n)
	}
	if n := e.value(`SELECT count(*) FROM %[1]s.retention_unit WHERE owner IS NOT NULL`); n != 4 {
		t.Errorf("%d claims, want the 4 detached tables' (to be dropped)", n)
	}
	// The policy's own pass is still due: the detach is not it.
	if n := e.value(`SELECT count(*) FROM %[1]s.retention_due() d WHERE d = 'ev'`); n != 1 {
		t.Error("retention_due no longer lists the policy after a concurrent detach")
	}
	// The next call drops them, and counts nothing more.
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil); err != nil || d.Dropped != 4 || d.Detached != 0 || len(d.Errors) > 0 {
		t.Errorf("second call: %+v %v, want the 4 detached tables dropped", d, err)
	}
	if n := e.value(`SELECT count(*) FROM pg_class WHERE relnamespace = '%[1]s'::regnamespace AND relname LIKE 'pgsweep\_detached\_%%'`); n != 0 {
		t.Errorf("%d detached tables left", n)
	}
	if n := e.value(`SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes WHERE strategy = 'detach_concurrently'`); n != 400 {
		t.Errorf("the history counts %d rows after the drops, want 400", n)
	}
	if n := e.value(`SELECT count(*) FROM %[1]s.retention_unit WHERE owner IS NOT NULL`); n != 0 {
		t.Errorf("%d claims left", n)
	}
	// Nothing left to claim.
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil); err != nil || d.Claimed != 0 {
		t.Errorf("third call: %+v %v, want nothing claimed", d, err)
	}
}

// TestRetentionDetachConcurrentlyPending: a long transaction on the parent
// outlasts retention_lock_timeout, so DETACH's second transaction gives up
// and the leaf stays half-detached: no other runner takes it while the claim
// lasts, the maintenance pass leaves it alone (no error), and the next call
// of the claim's holder finishes it with FINALIZE, counting its rows once.
// A runner killed while it waits leaves the same state, which another runner
// finishes once the claim expired.
func TestRetentionDetachConcurrentlyPending(t *testing.T) {
	e := newDetachEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.day(-3)
	e.exec(`SELECT %[1]s.setting_set('retention_lock_timeout', '200 milliseconds')`)
	pending := func() int64 {
		return e.value(`SELECT count(*) FROM pg_inherits WHERE inhparent = '%[1]s.ev'::regclass AND inhdetachpending`)
	}

	long := e.holdParent(ctx)
	d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Pending != 1 || d.Detached != 0 || len(d.Errors) != 1 {
		t.Fatalf("with a long transaction: %+v, want 1 pending and its lock timeout", d)
	}
	if pending() != 1 {
		t.Fatal("the leaf is not half-detached")
	}
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-b", nil); err != nil || d.Claimed != 0 {
		t.Errorf("another runner: %+v %v, want nothing claimed (runner-a holds it)", d, err)
	}
	if _, _, err := e.client.RetentionRun(ctx, "ev", "pass", 10*time.Second); err != nil {
		t.Errorf("the maintenance pass with a half-detached leaf: %v", err)
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The 200 ms timeout served to make the first DETACH give up. FINALIZE
	// waits for every transaction that locked the parent or the leaf, and
	// autovacuum may analyze the freshly filled leaf just now (CI failed on
	// that once): the holder's call gets a timeout a runner would use.
	e.exec(`SELECT %[1]s.setting_set('retention_lock_timeout', '30 seconds')`)
	d, err = e.client.RetentionDetachConcurrently(ctx, "runner-a", nil)
	if err != nil || len(d.Errors) > 0 || d.Detached != 1 || d.Rows != 100 {
		t.Fatalf("after the long transaction: %+v %v, want the leaf finalized, 100 rows", d, err)
	}
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil); err != nil || d.Dropped != 1 {
		t.Fatalf("the next call: %+v %v, want the detached table dropped", d, err)
	}
	if n := e.leaves(); n != 1 {
		t.Errorf("%d leaves left, want today's only", n)
	}

	// Killed while waiting: the claim holds until it expires. The policy's
	// pass ran above, so it is due again only in an hour: the calls pass
	// that time as their clock.
	later := time.Now().Add(2 * time.Hour)
	e.day(-4)
	e.exec(`SELECT %[1]s.setting_set('retention_lock_timeout', '30 seconds')`)
	long = e.holdParent(ctx)
	conn := pgtest.Conn(t, e.db.URL)
	killed, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: e.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := killed.RetentionDetachConcurrently(ctx, "runner-k", &later)
		errc <- err
	}()
	pid := e.waitDetaching(ctx)
	if _, err := e.db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Fatal("the killed runner's call returned no error")
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if pending() != 1 {
		t.Fatal("the killed runner's leaf is not half-detached")
	}
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-b", &later); err != nil || d.Claimed != 0 {
		t.Errorf("before the claim expired: %+v %v, want nothing claimed", d, err)
	}
	// The claim's TTL (the policy's lease_ttl) passes.
	e.exec(`UPDATE %[1]s.retention_unit SET expires_at = now() - interval '1 second' WHERE owner IS NOT NULL`)
	d, err = e.client.RetentionDetachConcurrently(ctx, "runner-b", &later)
	if err != nil || len(d.Errors) > 0 || d.Detached != 1 || d.Rows != 100 {
		t.Fatalf("after the claim expired: %+v %v, want the leaf finalized, 100 rows", d, err)
	}
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-b", &later); err != nil || d.Dropped != 1 {
		t.Fatalf("the next call: %+v %v, want the detached table dropped", d, err)
	}
	if n := e.value(`SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes WHERE strategy = 'detach_concurrently'`); n != 200 {
		t.Errorf("the history counts %d rows, want 200", n)
	}
	if n, p := e.leaves(), pending(); n != 1 || p != 0 {
		t.Errorf("%d leaves left (%d pending), want today's only", n, p)
	}
}

// TestRetentionDetachConcurrentlyLeavesDefault: a parent with a DEFAULT
// partition (PostgreSQL refuses CONCURRENTLY there) is left to the pass's
// plain DETACH, which removes the expired leaf and sweeps the default.
func TestRetentionDetachConcurrentlyLeavesDefault(t *testing.T) {
	e := newDetachEnv(t)
	ctx := context.Background()
	e.day(-3)
	e.exec(`CREATE TABLE %[1]s.ev_default PARTITION OF %[1]s.ev DEFAULT;
		INSERT INTO %[1]s.ev (at) SELECT now() - interval '30 days' FROM generate_series(1, 7)`)
	if d, err := e.client.RetentionDetachConcurrently(ctx, "runner-a", nil); err != nil || d.Claimed != 0 {
		t.Fatalf("%+v %v, want nothing claimed", d, err)
	}
	for range 3 { // detach, then drop the detached table
		if _, _, err := e.client.RetentionRun(ctx, "ev", "pass", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.value(`SELECT count(*) FROM %[1]s.ev WHERE at < now() - interval '1 day'`); n != 0 {
		t.Errorf("%d expired rows left", n)
	}
	if n := e.leaves(); n != 2 {
		t.Errorf("%d leaves, want today's and the default", n)
	}
}

// TestRetentionDetachClaimsSurviveTheUpgrade: a runner's claim in 0.38's
// retention_detaching (a leaf it detached and renamed, not recorded yet)
// becomes a unit of the policy's sweep held by the same runner in 0.39: its
// next call counts the table once and drops it.
func TestRetentionDetachClaimsSurviveTheUpgrade(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	conn := pgtest.Conn(t, url)
	if _, err := pgsweep.MigrateTo(ctx, conn, schema, 38); err != nil {
		t.Fatal(err)
	}
	pool, err := pgtest.Pool(ctx, url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// %[1]s the install's schema, %[2]s the table's (apart: a migration
	// gives everything in the install's schema to its owner role)
	s, ds := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema + "_data"}.Sanitize()
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, fmt.Sprintf(q, s, ds)); err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(q, s, ds), err)
		}
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+ds+" CASCADE") })
	exec(`CREATE SCHEMA %[2]s;
		CREATE TABLE %[2]s.ev (id bigint NOT NULL, at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE %[2]s.ev_old PARTITION OF %[2]s.ev FOR VALUES FROM ('2000-01-01 00:00+00') TO ('2000-01-02 00:00+00');
		CREATE TABLE %[2]s.ev_now PARTITION OF %[2]s.ev FOR VALUES FROM (now() - interval '1 hour') TO (now() + interval '1 day');
		INSERT INTO %[2]s.ev SELECT g, '2000-01-01 00:00+00'::timestamptz + g * interval '1 minute' FROM generate_series(1, 50) g;
		INSERT INTO %[2]s.ev SELECT g, now() FROM generate_series(1, 7) g;
		ANALYZE %[2]s.ev_old;
		SELECT %[1]s.retention_register('ev', '%[2]s.ev'::regclass, 'at', '1 day')`)
	var leaf uint32
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT '%s.ev_old'::regclass::oid`, ds)).Scan(&leaf); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO %[1]s.retention_detaching (leaf, policy, parent, leaf_schema, leaf_name, leaf_owner, owner, began_at, expires_at)
		SELECT c.oid, 'ev', '%[2]s.ev'::regclass, n.nspname, c.relname, c.relowner, 'runner-a', now(), now() + interval '1 minute'
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = '%[2]s.ev_old'::regclass;
		ALTER TABLE %[2]s.ev DETACH PARTITION %[2]s.ev_old`)
	exec(fmt.Sprintf(`ALTER TABLE %%[2]s.ev_old RENAME TO pgsweep_detached_c%d`, leaf))

	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	var claim string
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT string_agg(concat_ws(' ', policy, kind, owner, counted, expires_at > now()), ', ')
		FROM %s.retention_unit WHERE leaf = $1`, s), leaf).Scan(&claim); err != nil {
		t.Fatal(err)
	}
	if claim != "ev drop runner-a f t" {
		t.Errorf("the claim after the upgrade: %q, want a drop unit of ev held by runner-a", claim)
	}
	var gone bool
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT to_regclass('%s.retention_detaching') IS NULL`, s)).Scan(&gone); err != nil || !gone {
		t.Errorf("retention_detaching is still there (%v)", err)
	}
	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.RetentionDetachConcurrently(ctx, "runner-a", nil)
	if err != nil || len(d.Errors) > 0 || d.Dropped != 1 || d.Detached != 1 || d.Rows != 50 {
		t.Fatalf("the runner's next call: %+v %v, want the detached table counted (50 rows) and dropped", d, err)
	}
	var left, rows int64
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM pg_class WHERE oid = $1),
		(SELECT count(*) FROM %s.ev)`, ds), leaf).Scan(&left, &rows); err != nil || left != 0 || rows != 7 {
		t.Errorf("after the call: the detached table %d (want 0 left), ev %d rows (want 7) %v", left, rows, err)
	}
}
