package pgsweep_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Eight cleaners drop and sweep a daily-partitioned table while 4 writers
// insert into today's partition and 4 readers query the parent, and a long
// transaction keeps reading one old partition for a while:
//   - no writer or reader ever waits longer than retention_lock_timeout plus
//     one retry (each DETACH requests the parent's lock for at most 200 ms,
//     and a cleaner that misses it defers, so a writer can queue behind at
//     most a couple of requests);
//   - the partition the long transaction reads is not dropped while it
//     reads (its drop is deferred, a later pass drops it), and the writers
//     are not blocked meanwhile;
//   - every wholly expired partition ends dropped, every row younger than the
//     cutoff is still there (writers' rows included), the partly expired day
//     is swept of its eligible rows only.
func TestRetentionPartitionsUnderLiveTraffic(t *testing.T) {
	pgtest.SkipIfShort(t, "loads ten partitions and runs 17 sessions")
	for _, mode := range []string{"exclusive", "parallel"} {
		t.Run(mode, func(t *testing.T) { partitionRun(t, mode, false) })
	}
	// As the Go runner does it: each cleaner first removes expired leaves
	// with DETACH ... CONCURRENTLY (no DEFAULT partition, which forbids it),
	// then runs its pass.
	t.Run("concurrent", func(t *testing.T) { partitionRun(t, "exclusive", true) })
}

func partitionRun(t *testing.T, mode string, concurrent bool) {
	ctx, db, _ := pgtest.Start(t, 24)
	s := db.Q()
	const lockTimeout = 200 * time.Millisecond
	// Days -9..0 and +1, and a default; cutoff now - 3 days + 12 hours apart
	// from midnight, so day -3 is cut through (swept), days -9..-4 wholly
	// expired (dropped).
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(fmt.Sprintf(`SELECT %[1]s.setting_set('retention_lock_timeout', '200 milliseconds');
		CREATE TABLE %[1]s.parts (id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL, writer int)
		    PARTITION BY RANGE (at);`, s))
	if !concurrent {
		exec(fmt.Sprintf(`CREATE TABLE %[1]s.parts_default PARTITION OF %[1]s.parts DEFAULT`, s))
	}
	client, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var pendingSeen atomic.Int64
	for d := -9; d <= 1; d++ {
		exec(fmt.Sprintf(`CREATE TABLE %[1]s.parts_d%[2]d PARTITION OF %[1]s.parts
		    FOR VALUES FROM (date_trunc('day', now()) + interval '%[3]d days') TO (date_trunc('day', now()) + interval '%[4]d days')`,
			s, d+10, d, d+1))
	}
	exec(fmt.Sprintf(`INSERT INTO %[1]s.parts (at) SELECT date_trunc('day', now()) - interval '9 days' + g * interval '1 minute'
		  FROM generate_series(0, 9 * 24 * 60 - 1) g;
		ANALYZE %[1]s.parts;
		SELECT %[1]s.retention_register('parts', '%[2]s.parts', 'at', now() - date_trunc('day', now()) + interval '2 days 12 hours',
		       p_batch_size => 5000, p_mode => '%[3]s');`, s, db.Schema, mode))
	cutoffSQL := fmt.Sprintf(`(SELECT now() - older_than FROM %s.retention_policy WHERE name = 'parts')`, s)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var maxWait atomic.Int64
	var written atomic.Int64
	errs := make(chan error, 32)
	observe := func(d time.Duration) {
		for {
			cur := maxWait.Load()
			if int64(d) <= cur || maxWait.CompareAndSwap(cur, int64(d)) {
				return
			}
		}
	}
	for w := range 4 {
		wg.Add(2)
		go func() { // writer into today's partition
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.parts (at, writer) VALUES (now(), %d)`, s, w)); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				observe(time.Since(t0))
				written.Add(1)
			}
		}()
		go func() { // reader of the parent
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				var n int64
				if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.parts WHERE at > now() - interval '1 hour'`, s)).Scan(&n); err != nil {
					errs <- fmt.Errorf("reader %d: %w", w, err)
					return
				}
				observe(time.Since(t0))
			}
		}()
	}

	// A long transaction reads the oldest partition for 2 seconds.
	reading := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			errs <- err
			close(reading)
			return
		}
		defer tx.Rollback(ctx)
		var n int64
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.parts_d1`, s)).Scan(&n); err != nil {
			errs <- err
		}
		close(reading)
		// Hold the partition until a cleaner has been held off by it (a
		// deferred drop, or a DETACH CONCURRENTLY left pending), not for a
		// fixed time: on a loaded machine the first drop step may come
		// later than any fixed wait.
		held := time.Now().Add(60 * time.Second)
		for time.Now().Before(held) {
			var deferred int64
			if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(sum(deferred), 0) FROM %s.retention_passes WHERE policy = 'parts'`, s)).Scan(&deferred); err != nil {
				errs <- err
				break
			}
			if deferred+pendingSeen.Load() > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond) // a poll in a goroutine (Eventually needs the test's own)
		}
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.parts_d1`, s)).Scan(&n); err != nil {
			errs <- fmt.Errorf("the long reader lost its partition while reading it: %w", err)
		}
	}()
	<-reading

	// Eight cleaners, each passing until nothing is left to drop or delete.
	var cwg sync.WaitGroup
	deadline := time.Now().Add(90 * time.Second)
	for c := range 8 {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			for time.Now().Before(deadline) {
				if concurrent {
					d, err := client.RetentionDetachConcurrently(ctx, fmt.Sprintf("cleaner-%d", c), nil)
					if err != nil {
						errs <- fmt.Errorf("cleaner %d: concurrent detach: %w", c, err)
						return
					}
					pendingSeen.Add(int64(d.Pending))
				}
				if _, err := conn.Exec(ctx, fmt.Sprintf(`CALL %s.retention_run('parts', 'cleaner-%d', '5 seconds')`, s, c)); err != nil {
					errs <- fmt.Errorf("cleaner %d: %w", c, err)
					return
				}
				var left bool
				if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s.parts WHERE at < %s)
					OR EXISTS (SELECT 1 FROM pg_partition_tree('%s.parts') t JOIN pg_class c ON c.oid = t.relid
					            WHERE t.isleaf AND c.relname IN ('parts_d1','parts_d2','parts_d3','parts_d4','parts_d5','parts_d6'))
					OR EXISTS (SELECT 1 FROM %s.retention_unit WHERE owner IS NOT NULL) -- a leaf half-detached (not in pg_partition_tree)`,
					s, cutoffSQL, s, s)).Scan(&left); err != nil {
					errs <- err
					return
				}
				if !left {
					return
				}
				time.Sleep(50 * time.Millisecond) // time under test: cleaners pass on an interval, as runners do
			}
		}()
	}
	cwg.Wait()
	<-readDone
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	var leftOld, leftYoung, deferred, dropped int64
	var leaves []string
	rows, err := db.Pool.Query(ctx, fmt.Sprintf(`SELECT c.relname FROM pg_partition_tree('%s.parts') t JOIN pg_class c ON c.oid = t.relid
		WHERE t.isleaf ORDER BY 1`, s))
	if err != nil {
		t.Fatal(err)
	}
	leaves, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		dst *int64
		sql string
	}{
		{&leftOld, fmt.Sprintf(`SELECT count(*) FROM %s.parts WHERE at < %s`, s, cutoffSQL)},
		// The loaded rows never eligible: younger than the cutoff as it is now
		// (the cutoff moves with the clock; rows it passed meanwhile may go).
		{&leftYoung, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.parts WHERE at >= %[2]s AND writer IS NULL)
			- (SELECT count(*) FROM generate_series(0, 9 * 24 * 60 - 1) g
			    WHERE date_trunc('day', now()) - interval '9 days' + g * interval '1 minute' >= %[2]s)`, s, cutoffSQL)},
		{&deferred, fmt.Sprintf(`SELECT coalesce(sum(deferred), 0) FROM %s.retention_passes WHERE policy = 'parts'`, s)},
		{&dropped, fmt.Sprintf(`SELECT coalesce(sum(partitions_dropped), 0) FROM %s.retention_passes WHERE policy = 'parts'`, s)},
	} {
		if err := db.Pool.QueryRow(ctx, q.sql).Scan(q.dst); err != nil {
			t.Fatal(err)
		}
	}
	if leftOld != 0 {
		t.Errorf("%d eligible rows are left", leftOld)
	}
	if leftYoung != 0 {
		t.Errorf("%d rows younger than the cutoff are missing (negative: extra): an ineligible row was deleted", -leftYoung)
	}
	if dropped != 6 {
		t.Errorf("%d partitions dropped, want the 6 wholly expired days; leaves now: %v", dropped, leaves)
		if rows, err := db.Pool.Query(ctx, fmt.Sprintf(`SELECT format('%%s %%s %%s rows=%%s parts=%%s deferred=%%s', id, owner, strategy, rows_deleted, partitions_dropped, deferred)
			FROM %s.retention_passes WHERE policy = 'parts' AND (partitions_dropped > 0 OR deferred > 0) ORDER BY id`, s)); err == nil {
			hist, _ := pgx.CollectRows(rows, pgx.RowTo[string])
			t.Logf("passes: %v", hist)
		}
	}
	if deferred+pendingSeen.Load() == 0 {
		t.Error("no drop was deferred or left half-detached: the long reader of parts_d1 should have held one off")
	}
	var writerRows int64
	if err := db.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.parts WHERE writer IS NOT NULL`, s)).Scan(&writerRows); err != nil {
		t.Fatal(err)
	}
	if writerRows != written.Load() {
		t.Errorf("the writers inserted %d rows, %d are there", written.Load(), writerRows)
	}
	// lock_timeout plus one retry, and a second of slack for this shared machine.
	if bound := 2*lockTimeout + time.Second; time.Duration(maxWait.Load()) > bound {
		t.Errorf("a writer or reader waited %v, more than lock_timeout plus a retry (%v)", time.Duration(maxWait.Load()), bound)
	}
	t.Logf("%s (concurrent %v): %d partitions dropped, %d drops deferred, %d left half-detached, %d rows written meanwhile, longest writer/reader statement %v",
		mode, concurrent, dropped, deferred, pendingSeen.Load(), written.Load(), time.Duration(maxWait.Load()))
}
