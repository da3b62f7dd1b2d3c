package pgsweep_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

const capEligible = `"ExpiresAt" < localtimestamp - interval '1 hour' AND "StatusName" IN ('Succeeded', 'Failed')`

// fillCAP loads n rows of mixed statuses into a CAP-shaped table and records
// in <tbl>_truth which of them were eligible at the start: 45% Succeeded and
// 20% Failed long expired (eligible), and, not eligible, Succeeded or Failed
// expiring tomorrow, Scheduled with no expiry, Queued long expired, and
// Succeeded with no expiry.
func fillCAP(t *testing.T, db *pgtest.DB, tbl string, n int) (truth string, eligible int64) {
	t.Helper()
	ctx := context.Background()
	truth = db.Rel(tbl + "_truth")
	name := db.Rel(tbl)
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		INSERT INTO %[1]s
		SELECT i, 'v1', 'sample.topic.' || (i %% 50), rpad(md5(i::text), 120, 'x'), i %% 3,
		       localtimestamp - interval '3 days',
		       CASE WHEN k IN (13, 19) THEN localtimestamp + interval '1 day'
		            WHEN k IN (14, 15, 18) THEN NULL
		            ELSE localtimestamp - interval '2 days' + (i %% 1000) * interval '1 second' END,
		       CASE WHEN k <= 8 OR k IN (13, 18) THEN 'Succeeded' WHEN k <= 12 OR k = 19 THEN 'Failed'
		            WHEN k <= 15 THEN 'Scheduled' ELSE 'Queued' END
		  FROM (SELECT i, (i::bigint * 7919) %% 20 AS k FROM generate_series(1, %[3]d) i) s;
		CREATE TABLE %[2]s AS SELECT "Id", (%[4]s) AS eligible FROM %[1]s;`, name, truth, n, capEligible))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE `+name); err != nil {
		t.Fatal(err)
	}
	return truth, countRows(t, db.Pool, `SELECT count(*) FROM `+truth+` WHERE eligible`)
}

// requeuer keeps moving random Failed rows back to Scheduled with no expiry,
// as CAP does when a message is retried, and records each re-queue in the
// same transaction, so that the log holds exactly the committed re-queues.
type requeuer struct {
	stop     chan struct{}
	done     chan error
	requeues atomic.Int64
	maxWait  atomic.Int64 // longest single UPDATE, in microseconds
}

func startRequeuer(t *testing.T, db *pgtest.DB, tbl string, n int) *requeuer {
	t.Helper()
	name := db.Rel(tbl)
	log := db.Rel(tbl + "_requeued")
	if _, err := db.Pool.Exec(context.Background(), `CREATE TABLE `+log+` ("Id" bigint)`); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t, db.URL)
	r := &requeuer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		rng := rand.New(rand.NewPCG(7, uint64(n)))
		for {
			select {
			case <-r.stop:
				r.done <- nil
				return
			default:
			}
			start := time.Now()
			tag, err := conn.Exec(context.Background(), fmt.Sprintf(`
				WITH u AS (
				    UPDATE %[1]s SET "StatusName" = 'Scheduled', "ExpiresAt" = NULL
				     WHERE "Id" = (SELECT "Id" FROM %[1]s WHERE "Id" >= $1 AND "StatusName" = 'Failed'
				                    ORDER BY "Id" LIMIT 1)
				       AND "StatusName" = 'Failed'
				    RETURNING "Id")
				INSERT INTO %[2]s SELECT "Id" FROM u`, name, log), rng.IntN(n)+1)
			if err != nil {
				r.done <- fmt.Errorf("requeue: %w", err)
				return
			}
			if us := time.Since(start).Microseconds(); us > r.maxWait.Load() {
				r.maxWait.Store(us)
			}
			r.requeues.Add(tag.RowsAffected())
			// Jitter, not a wait: the behaviour under test is timing, the
			// requeues spread across the cleaners' batches.
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
	}()
	return r
}

func (r *requeuer) finish(t *testing.T) {
	t.Helper()
	close(r.stop)
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// checkOutcome proves from the truth table and the re-queue log that every
// eligible row is gone and every other row is still there.
func checkOutcome(t *testing.T, db *pgtest.DB, tbl, truth string) (deleted int64) {
	t.Helper()
	name := db.Rel(tbl)
	log := db.Rel(tbl + "_requeued")
	wrong := countRows(t, db.Pool, fmt.Sprintf(`SELECT count(*) FROM %s t
		WHERE (NOT t.eligible OR t."Id" IN (SELECT "Id" FROM %s))
		  AND NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = t."Id")`, truth, log, name))
	if wrong != 0 {
		t.Errorf("%d ineligible or re-queued rows were deleted", wrong)
	}
	if left := countRows(t, db.Pool, `SELECT count(*) FROM `+name+` WHERE `+capEligible); left != 0 {
		t.Errorf("%d eligible rows are left", left)
	}
	if requeuedGone := countRows(t, db.Pool, fmt.Sprintf(`SELECT count(*) FROM %s r
		WHERE NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = r."Id" AND p."StatusName" = 'Scheduled')`, log, name)); requeuedGone != 0 {
		t.Errorf("%d re-queued rows are gone or changed", requeuedGone)
	}
	return countRows(t, db.Pool, `SELECT count(*) FROM `+truth) - countRows(t, db.Pool, `SELECT count(*) FROM `+name)
}

// cleanerConn is a cleaner's own session. lock_timeout makes any lock wait
// longer than 100 ms an error, so "no errors" also proves "no long waits".
func cleanerConn(t *testing.T, db *pgtest.DB) *pgsweep.Client {
	t.Helper()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["lock_timeout"] = "100ms"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runCleaners starts k cleaners at the same instant and waits for them.
func runCleaners(t *testing.T, db *pgtest.DB, k int, policy string) []pgtest.RetentionResult {
	t.Helper()
	clients := make([]*pgsweep.Client, k)
	for i := range clients {
		clients[i] = cleanerConn(t, db)
	}
	res := pgtest.RetentionRace(clients, policy)
	for i, r := range res {
		var pgErr *pgconn.PgError
		if errors.As(r.Err, &pgErr) && pgErr.Code == "40P01" {
			t.Errorf("cleaner %d: deadlock: %v", i, r.Err)
		} else if errors.As(r.Err, &pgErr) && pgErr.Code == "55P03" {
			t.Errorf("cleaner %d: waited over 100ms for a lock: %v", i, r.Err)
		} else if r.Err != nil {
			t.Errorf("cleaner %d: %v", i, r.Err)
		}
	}
	return res
}

// Eight cleaners at once on 500,000 CAP rows, first in parallel mode on one
// table, then in exclusive mode on another, while a re-queuer keeps changing
// Failed rows back to Scheduled: no deadlock, no lock wait over 100 ms, no
// error, every eligible row gone and every other row (re-queued ones
// included) still there; in exclusive mode the pass records never overlap.
func TestRetentionEightCleanersUnderRequeue(t *testing.T) {
	pgtest.SkipIfShort(t, "loads 500,000 rows")
	const rows, cleaners = 500_000, 8
	db := pgtest.New(t, 4)
	ctx := context.Background()
	// A cleaner's DELETE waits on a row lock at most retention_lock_timeout
	// (it sets lock_timeout itself, over the session's), then defers the unit
	// and leaves its rows: at 100 ms, a wait over 100 ms shows as eligible rows
	// left (checkOutcome) or an exclusive pass not 'drained'.
	if _, err := db.Pool.Exec(ctx, "SELECT "+db.Q()+".setting_set('retention_lock_timeout', '100 milliseconds')"); err != nil {
		t.Fatal(err)
	}

	t.Run("parallel", func(t *testing.T) {
		tbl := capTable(t, db, "published")
		truth, eligible := fillCAP(t, db, "published", rows)
		err := db.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap.published", Table: tbl,
			TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
			Statuses: []string{"Succeeded", "Failed"}, BatchSize: 2000, Mode: pgsweep.RetentionParallel})
		if err != nil {
			t.Fatal(err)
		}
		rq := startRequeuer(t, db, "published", rows)
		pgtest.Eventually(t, 30*time.Second, pgtest.Until("the requeuer to get going", func() bool { return rq.requeues.Load() > 0 }))
		res := runCleaners(t, db, cleaners, "cap.published")
		rq.finish(t)
		deleted := checkOutcome(t, db, "published", truth)

		var sum int64
		working := 0
		for _, r := range res {
			if !r.Ran {
				t.Errorf("a parallel cleaner did not run: %+v", r)
				continue
			}
			sum += r.Pass.RowsDeleted
			if r.Pass.Batches > 0 {
				working++
			}
			if r.Pass.Strategy != "" && r.Pass.Strategy != pgsweep.RetentionTIDRange {
				t.Errorf("dense backlog walked by %s", r.Pass.Strategy)
			}
		}
		if sum != deleted {
			t.Errorf("pass records count %d deleted rows, the table lost %d", sum, deleted)
		}
		if working < 2 {
			t.Errorf("only %d of %d parallel cleaners deleted anything", working, cleaners)
		}
		if rq.requeues.Load() == 0 {
			t.Error("the re-queuer re-queued nothing: the test proved nothing about re-queued rows")
		}
		t.Logf("parallel: %d eligible, %d deleted by %d working cleaners; %d re-queued meanwhile (longest re-queue %v)",
			eligible, deleted, working, rq.requeues.Load(), time.Duration(rq.maxWait.Load())*time.Microsecond)
	})

	t.Run("exclusive", func(t *testing.T) {
		tbl := capTable(t, db, "received")
		truth, eligible := fillCAP(t, db, "received", rows)
		err := db.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap.received", Table: tbl,
			TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
			Statuses: []string{"Succeeded", "Failed"}, BatchSize: 2000, Mode: pgsweep.RetentionExclusive})
		if err != nil {
			t.Fatal(err)
		}
		// The keyset walk, forced, so that both strategies face the re-queuer.
		if err := db.Client.RetentionSetStrategy(ctx, "cap.received", pgsweep.RetentionKeyset); err != nil {
			t.Fatal(err)
		}
		rq := startRequeuer(t, db, "received", rows)
		pgtest.Eventually(t, 30*time.Second, pgtest.Until("the requeuer to get going", func() bool { return rq.requeues.Load() > 0 }))
		res := runCleaners(t, db, cleaners, "cap.received")
		rq.finish(t)
		deleted := checkOutcome(t, db, "received", truth)

		ran := 0
		for _, r := range res {
			if r.Ran {
				ran++
			}
		}
		passes, err := db.Client.RetentionPasses(ctx, "cap.received")
		if err != nil {
			t.Fatal(err)
		}
		if ran == 0 || len(passes) != ran {
			t.Fatalf("%d cleaners ran, %d passes recorded", ran, len(passes))
		}
		var sum int64
		sort.Slice(passes, func(i, j int) bool { return passes[i].StartedAt.Before(passes[j].StartedAt) })
		for i, p := range passes {
			sum += p.RowsDeleted
			if p.FinishedAt == nil || p.Outcome != "drained" || p.Strategy != pgsweep.RetentionKeyset && p.Batches > 0 {
				t.Errorf("pass %+v", p)
				continue
			}
			if i > 0 && !passes[i-1].FinishedAt.Before(p.StartedAt) {
				t.Errorf("exclusive passes overlap: %s..%s and %s..%s", passes[i-1].StartedAt, *passes[i-1].FinishedAt,
					p.StartedAt, *p.FinishedAt)
			}
			if i > 0 && *p.LeaseToken <= *passes[i-1].LeaseToken {
				t.Errorf("lease tokens do not increase: %d then %d", *passes[i-1].LeaseToken, *p.LeaseToken)
			}
		}
		if sum != deleted {
			t.Errorf("pass records count %d deleted rows, the table lost %d", sum, deleted)
		}
		if rq.requeues.Load() == 0 {
			t.Error("the re-queuer re-queued nothing")
		}
		t.Logf("exclusive: %d eligible, %d deleted in %d passes (%d cleaners returned busy); %d re-queued meanwhile",
			eligible, deleted, len(passes), cleaners-ran, rq.requeues.Load())
	})
}

// An exclusive cleaner killed in the middle of its pass loses nothing: its
// batch in flight rolls back, its committed batches are counted on its pass,
// other cleaners find the policy busy until its lease expires, and then one
// takes over and finishes the sweep.
func TestRetentionExclusiveCrashTakeover(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	tbl := capTable(t, db, "published")
	truth, eligible := fillCAP(t, db, "published", 20_000)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+db.Rel("published_requeued")+` ("Id" bigint)`); err != nil {
		t.Fatal(err)
	}
	c := db.Client
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "ExpiresAt",
		OlderThan: time.Hour, StatusColumn: "StatusName", Statuses: []string{"Succeeded", "Failed"}, BatchSize: 10}); err != nil {
		t.Fatal(err)
	}
	if err := c.RetentionSetLeaseTTL(ctx, "cap", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	// Slow every batch down so that the cleaner is killed inside one.
	slow := db.Rel("slow")
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.01); RETURN NULL; END $$;
		CREATE TRIGGER slow AFTER DELETE ON %[2]s FOR EACH STATEMENT EXECUTE FUNCTION %[1]s();`, slow, tbl)); err != nil {
		t.Fatal(err)
	}

	a := cleanerConn(t, db)
	aDone := make(chan error, 1)
	go func() {
		_, _, err := a.RetentionRun(ctx, "cap", "A", time.Minute)
		aDone <- err
	}()
	var pid int32
	pgtest.Eventually(t, 30*time.Second, func() error {
		err := db.Pool.QueryRow(ctx, `SELECT pid FROM `+db.Schema+`.retention_pass WHERE owner = 'A' AND rows_deleted >= 100`).Scan(&pid)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("cleaner A never got going: %v", err)
		}
		if err != nil {
			return fmt.Errorf("cleaner A never got going: %w", err)
		}
		return nil
	})
	var killed bool
	if err := db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate A: %v %v", killed, err)
	}
	if err := <-aDone; err == nil {
		t.Fatal("cleaner A finished although it was killed")
	}
	if _, err := db.Pool.Exec(ctx, `DROP TRIGGER slow ON `+tbl); err != nil {
		t.Fatal(err)
	}

	left := countRows(t, db.Pool, `SELECT count(*) FROM `+tbl)
	b := cleanerConn(t, db)
	if p, ran, err := b.RetentionRun(ctx, "cap", "B", time.Minute); err != nil || ran {
		t.Fatalf("B ran while A's lease was live: %+v %v %v", p, ran, err)
	}
	if n := countRows(t, db.Pool, `SELECT count(*) FROM `+tbl); n != left {
		t.Fatalf("a busy cleaner deleted %d rows", left-n)
	}
	passes, err := c.RetentionPasses(ctx, "cap")
	if err != nil || len(passes) != 1 || passes[0].Outcome != "abandoned" || passes[0].FinishedAt != nil {
		t.Fatalf("A's pass: %+v %v", passes, err)
	}
	passA := passes[0]

	// After the TTL, B takes over the open sweep.
	var passB pgsweep.RetentionPass
	pgtest.Eventually(t, 10*time.Second, func() error {
		p, ran, err := b.RetentionRun(ctx, "cap", "B", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !ran {
			return errors.New("B never took over")
		}
		passB = p
		return nil
	})
	if passB.Outcome != "drained" || *passB.LeaseToken <= *passA.LeaseToken || !passB.StartedAt.After(*passA.LastBatchAt) {
		t.Fatalf("takeover: A %+v, B %+v", passA, passB)
	}
	deleted := checkOutcome(t, db, "published", truth)
	if deleted != eligible || passA.RowsDeleted+passB.RowsDeleted != eligible {
		t.Fatalf("%d eligible, %d deleted; the passes count %d + %d", eligible, deleted, passA.RowsDeleted, passB.RowsDeleted)
	}
	t.Logf("A deleted %d rows before it was killed, B the other %d (%v after A's last batch)",
		passA.RowsDeleted, passB.RowsDeleted, passB.StartedAt.Sub(*passA.LastBatchAt))
}
