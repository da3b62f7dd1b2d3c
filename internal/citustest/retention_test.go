//go:build citus

package citustest

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

const capEligible = `"ExpiresAt" < localtimestamp - interval '1 hour' AND "StatusName" IN ('Succeeded', 'Failed')`

// capTable makes a CAP-shaped table distributed by "Id" (CAP's primary key),
// fills it with n rows of mixed statuses (as the single-server test does:
// 65% eligible) and records which were eligible at the start.
func capTable(t *testing.T, in *Install, tbl string, n int) (name, truth string, eligible int64) {
	t.Helper()
	name = in.Rel(tbl)
	truth = in.Rel(tbl + "_truth")
	in.Exec(t, fmt.Sprintf(`CREATE TABLE %[1]s ("Id" bigint PRIMARY KEY, "Version" varchar(20), "Name" varchar(200) NOT NULL,
		"Content" text, "Retries" int, "Added" timestamp NOT NULL, "ExpiresAt" timestamp NULL, "StatusName" varchar(50) NOT NULL)`, name))
	in.Exec(t, fmt.Sprintf(`CREATE INDEX ON %s ("ExpiresAt", "StatusName")`, name))
	in.Exec(t, "SELECT create_distributed_table($1, 'Id', colocate_with => 'none')", in.Schema+"."+tbl)
	in.Exec(t, fmt.Sprintf(`
		INSERT INTO %[1]s
		SELECT i, 'v1', 'sample.topic.' || (i %% 50), rpad(md5(i::text), 120, 'x'), i %% 3,
		       localtimestamp - interval '3 days',
		       CASE WHEN k IN (13, 19) THEN localtimestamp + interval '1 day'
		            WHEN k IN (14, 15, 18) THEN NULL
		            ELSE localtimestamp - interval '2 days' + (i %% 1000) * interval '1 second' END,
		       CASE WHEN k <= 8 OR k IN (13, 18) THEN 'Succeeded' WHEN k <= 12 OR k = 19 THEN 'Failed'
		            WHEN k <= 15 THEN 'Scheduled' ELSE 'Queued' END
		  FROM (SELECT i, (i::bigint * 7919) %% 20 AS k FROM generate_series(1, %[2]d) i) s`, name, n))
	// The truth, colocated with the table by "Id" (Citus joins colocated tables only).
	in.Exec(t, fmt.Sprintf(`CREATE TABLE %s ("Id" bigint PRIMARY KEY, eligible boolean)`, truth))
	in.Exec(t, "SELECT create_distributed_table($1, 'Id', colocate_with => $2)", in.Schema+"."+tbl+"_truth", in.Schema+"."+tbl)
	in.Exec(t, fmt.Sprintf(`INSERT INTO %s SELECT "Id", (%s) FROM %s`, truth, capEligible, name))
	in.Exec(t, "VACUUM ANALYZE "+name)
	return name, truth, in.Int(t, "SELECT count(*) FROM "+truth+" WHERE eligible")
}

// capRequeuer moves random Failed rows back to Scheduled with no expiry, as
// CAP does when a message is retried (by "Id": one shard), and logs each
// re-queue in the same transaction.
type capRequeuer struct {
	stop     chan struct{}
	done     chan error
	requeues atomic.Int64
}

func startCapRequeuer(t *testing.T, in *Install, tbl, log string, n int) *capRequeuer {
	t.Helper()
	name := in.Rel(tbl)
	in.Exec(t, "CREATE TABLE "+in.Rel(log)+` ("Id" bigint)`)
	in.Exec(t, "SELECT create_distributed_table($1, 'Id', colocate_with => $2)", in.Schema+"."+log, in.Schema+"."+tbl)
	log = in.Rel(log)
	conn, err := pgx.Connect(context.Background(), in.URL)
	if err != nil {
		t.Fatal(err)
	}
	r := &capRequeuer{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(7, uint64(n)))
		ctx := context.Background()
		for {
			select {
			case <-r.stop:
				r.done <- nil
				return
			default:
			}
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				var id int64
				err := tx.QueryRow(ctx, `SELECT "Id" FROM `+name+` WHERE "Id" = $1 AND "StatusName" = 'Failed'`, rng.IntN(n)+1).Scan(&id)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				if err != nil {
					return err
				}
				tag, err := tx.Exec(ctx, `UPDATE `+name+` SET "StatusName" = 'Scheduled', "ExpiresAt" = NULL
					WHERE "Id" = $1 AND "StatusName" = 'Failed'`, id)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 1 {
					if _, err := tx.Exec(ctx, `INSERT INTO `+log+` VALUES ($1)`, id); err != nil {
						return err
					}
					r.requeues.Add(1)
				}
				return nil
			})
			if err != nil {
				r.done <- fmt.Errorf("requeue: %w", err)
				return
			}
			// Jitter, not a wait: the behaviour under test is timing, the
			// requeues spread across the cleaners' batches.
			time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
		}
	}()
	return r
}

func (r *capRequeuer) finish(t *testing.T) {
	t.Helper()
	close(r.stop)
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
}

// runCapCleaners starts k cleaners at once, each on its own connection to
// the coordinator, each one CALL retention_run.
func runCapCleaners(t *testing.T, in *Install, k int, policy string) []pgtest.RetentionResult {
	t.Helper()
	clients := make([]*pgsweep.Client, k)
	for i := range clients {
		conn, err := pgx.Connect(context.Background(), in.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		clients[i], _ = pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: in.Schema})
	}
	res := pgtest.RetentionRace(clients, policy)
	for i, r := range res {
		if e := pgtest.PgError(r.Err); e.Code == "40P01" || e.Message == "canceling the transaction since it was involved in a distributed deadlock" {
			t.Errorf("cleaner %d: deadlock: %v", i, r.Err)
		} else if r.Err != nil {
			t.Errorf("cleaner %d: %v", i, r.Err)
		}
	}
	return res
}

// checkCapOutcome: every eligible row gone, every other row (re-queued ones
// included) still there.
func checkCapOutcome(t *testing.T, in *Install, name, truth, log string) (deleted int64) {
	t.Helper()
	if wrong := in.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s t
		WHERE (NOT t.eligible OR EXISTS (SELECT 1 FROM %s r WHERE r."Id" = t."Id"))
		  AND NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = t."Id")`, truth, log, name)); wrong != 0 {
		t.Errorf("%d ineligible or re-queued rows were deleted", wrong)
	}
	if left := in.Int(t, `SELECT count(*) FROM `+name+` WHERE `+capEligible); left != 0 {
		t.Errorf("%d eligible rows are left", left)
	}
	if gone := in.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s r
		WHERE NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = r."Id" AND p."StatusName" = 'Scheduled')`, log, name)); gone != 0 {
		t.Errorf("%d re-queued rows are gone or changed", gone)
	}
	return in.Int(t, `SELECT count(*) FROM `+truth) - in.Int(t, `SELECT count(*) FROM `+name)
}

// Retention of CAP's published table distributed by "Id" (8 shards over the
// two workers), eight cleaners at once in each mode while a re-queuer keeps
// moving Failed rows back to Scheduled: no deadlock, no error, nothing
// ineligible or re-queued deleted, every eligible row gone, and the work
// done shard by shard (DESIGN: "retention of a distributed application
// table works shard by shard"): every batch deletes at most the policy's
// batch size, and a pass plans at least one unit per shard.
func TestCitusRetentionCAP(t *testing.T) {
	const rows, cleaners, batch = 40_000, 8, 1000
	in := Shared(t)
	ctx := context.Background()
	shards := func(tbl string) int64 {
		return in.Int(t, "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = $1::regclass", in.Schema+"."+tbl)
	}
	// shardwise: the batches of the passes deleted at most the batch size
	// each, and the sweep was cut into at least one unit per shard (a
	// shard's unit is finished by the batch that reads fewer than a batch
	// of its rows).
	shardwise := func(t *testing.T, tbl string, passes []pgsweep.RetentionPass) {
		t.Helper()
		n := shards(tbl)
		units, batches := 0, 0
		var rows, most int64
		for _, p := range passes {
			units += p.Units
			batches += p.Batches
			rows += p.RowsDeleted
			if p.Batches > 0 && p.RowsDeleted/int64(p.Batches) > batch {
				t.Errorf("pass %d (%s) deleted %d rows in %d batches: over the batch size %d (a multi-shard statement per batch)",
					p.ID, p.Strategy, p.RowsDeleted, p.Batches, batch)
			}
			if p.Batches > 0 && p.RowsDeleted/int64(p.Batches) > most {
				most = p.RowsDeleted / int64(p.Batches)
			}
		}
		if int64(units) < n {
			t.Errorf("the passes finished %d units for a table of %d shards: not shard by shard", units, n)
		}
		t.Logf("shard by shard: %d units finished over %d shards (%.1f a shard), %d batches, %d rows (%.0f a batch; at most %d a batch in one pass)",
			units, n, float64(units)/float64(n), batches, rows, float64(rows)/float64(max(batches, 1)), most)
	}

	t.Run("parallel", func(t *testing.T) {
		name, truth, eligible := capTable(t, in, "published", rows)
		err := in.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap.published", Table: name,
			TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
			Statuses: []string{"Succeeded", "Failed"}, BatchSize: batch, Mode: pgsweep.RetentionParallel})
		if err != nil {
			t.Fatal(err)
		}
		log := in.Rel("published_requeued")
		rq := startCapRequeuer(t, in, "published", "published_requeued", rows)
		pgtest.Eventually(t, 30*time.Second, pgtest.Until("the requeuer to get going", func() bool { return rq.requeues.Load() > 0 }))
		res := runCapCleaners(t, in, cleaners, "cap.published")
		rq.finish(t)
		deleted := checkCapOutcome(t, in, name, truth, log)
		var sum int64
		var passes []pgsweep.RetentionPass
		for _, r := range res {
			if r.Ran {
				sum += r.Pass.RowsDeleted
				passes = append(passes, r.Pass)
			}
		}
		if sum != deleted {
			t.Errorf("pass records count %d deleted rows, the table lost %d", sum, deleted)
		}
		if rq.requeues.Load() == 0 {
			t.Error("the re-queuer re-queued nothing: the test proved nothing about re-queued rows")
		}
		shardwise(t, "published", passes)
		t.Logf("parallel: %d eligible, %d deleted by %d passes; %d re-queued meanwhile", eligible, deleted, len(passes), rq.requeues.Load())
	})

	t.Run("exclusive", func(t *testing.T) {
		name, truth, eligible := capTable(t, in, "received", rows)
		err := in.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap.received", Table: name,
			TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
			Statuses: []string{"Succeeded", "Failed"}, BatchSize: batch, Mode: pgsweep.RetentionExclusive})
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Client.RetentionSetStrategy(ctx, "cap.received", pgsweep.RetentionKeyset); err != nil {
			t.Fatal(err)
		}
		log := in.Rel("received_requeued")
		rq := startCapRequeuer(t, in, "received", "received_requeued", rows)
		pgtest.Eventually(t, 30*time.Second, pgtest.Until("the requeuer to get going", func() bool { return rq.requeues.Load() > 0 }))
		res := runCapCleaners(t, in, cleaners, "cap.received")
		rq.finish(t)
		deleted := checkCapOutcome(t, in, name, truth, log)
		passes, err := in.Client.RetentionPasses(ctx, "cap.received")
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		for _, r := range res {
			if r.Ran {
				ran++
			}
		}
		if ran == 0 || len(passes) != ran {
			t.Fatalf("%d cleaners ran, %d passes recorded", ran, len(passes))
		}
		var sum int64
		sort.Slice(passes, func(i, j int) bool { return passes[i].StartedAt.Before(passes[j].StartedAt) })
		for i, p := range passes {
			sum += p.RowsDeleted
			if p.FinishedAt == nil {
				t.Errorf("pass %d never finished", p.ID)
				continue
			}
			if i > 0 && passes[i-1].FinishedAt != nil && !passes[i-1].FinishedAt.Before(p.StartedAt) {
				t.Errorf("exclusive passes overlap: %s..%s and %s..%s", passes[i-1].StartedAt, *passes[i-1].FinishedAt, p.StartedAt, *p.FinishedAt)
			}
		}
		if sum != deleted {
			t.Errorf("pass records count %d deleted rows, the table lost %d", sum, deleted)
		}
		if rq.requeues.Load() == 0 {
			t.Error("the re-queuer re-queued nothing")
		}
		shardwise(t, "received", passes)
		t.Logf("exclusive: %d eligible, %d deleted in %d passes (%d cleaners found it busy); %d re-queued meanwhile",
			eligible, deleted, len(passes), cleaners-ran, rq.requeues.Load())
	})
}

// TestCitusRetentionOneShardAStatement: a pass over a distributed table, on
// a connection that logs every command the coordinator sends to the workers
// (citus.log_remote_commands), sends each batch's DELETE to one shard --
// exactly one DELETE command a batch, naming one shard -- and sweeps every
// shard; never a multi-shard statement with ctid. Both strategies, with a
// batch size that makes several batches a shard.
func TestCitusRetentionOneShardAStatement(t *testing.T) {
	const rows, batch = 8_000, 200
	in := Shared(t)
	ctx := context.Background()
	tr := in.NewTraced(t)
	c, _ := pgsweep.NewClient(tr.Conn, &pgsweep.ClientOptions{Schema: in.Schema})
	for _, strategy := range []string{pgsweep.RetentionTIDRange, pgsweep.RetentionKeyset} {
		t.Run(strategy, func(t *testing.T) {
			tbl := "onesh_" + strategy
			name, truth, eligible := capTable(t, in, tbl, rows)
			policy := "cap." + tbl
			if err := in.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: policy, Table: name,
				TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
				Statuses: []string{"Succeeded", "Failed"}, BatchSize: batch, Mode: pgsweep.RetentionParallel}); err != nil {
				t.Fatal(err)
			}
			if err := in.Client.RetentionSetStrategy(ctx, policy, strategy); err != nil {
				t.Fatal(err)
			}
			var shardNames []string
			rs, err := in.Pool.Query(ctx, `SELECT shard_name(logicalrelid, shardid, false) FROM pg_dist_shard WHERE logicalrelid = $1::regclass`, name)
			if err != nil {
				t.Fatal(err)
			}
			shardNames, err = pgx.CollectRows(rs, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			tr.Take()
			p, ran, err := c.RetentionRun(ctx, policy, "traced", time.Minute)
			if err != nil || !ran {
				t.Fatalf("retention_run: ran %v, %v", ran, err)
			}
			cmds := tr.Take()
			deletes, perShard := 0, map[string]int{}
			for _, cmd := range cmds {
				if !strings.HasPrefix(cmd.SQL, "DELETE FROM ") {
					continue
				}
				named := 0
				for _, s := range shardNames {
					if strings.Contains(cmd.SQL, s+" ") {
						named++
						perShard[s]++
					}
				}
				if named != 1 {
					t.Errorf("a DELETE names %d shards of %s: %s", named, name, cmd.SQL)
				}
				deletes++
			}
			if deletes != p.Batches {
				t.Errorf("%d DELETE commands went to the workers for %d batches: not one shard a batch", deletes, p.Batches)
			}
			if len(perShard) != len(shardNames) {
				t.Errorf("DELETEs went to %d of the %d shards", len(perShard), len(shardNames))
			}
			if p.Batches > 0 && p.RowsDeleted/int64(p.Batches) > batch {
				t.Errorf("%d rows in %d batches: over the batch size %d", p.RowsDeleted, p.Batches, batch)
			}
			if left := in.Int(t, `SELECT count(*) FROM `+name+` WHERE `+capEligible); left != 0 {
				t.Errorf("%d eligible rows are left", left)
			}
			if wrong := in.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s t WHERE NOT t.eligible
				AND NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = t."Id")`, truth, name)); wrong != 0 {
				t.Errorf("%d ineligible rows were deleted", wrong)
			}
			if p.RowsDeleted != eligible {
				t.Errorf("the pass deleted %d rows, %d were eligible", p.RowsDeleted, eligible)
			}
			per := make([]int, 0, len(perShard))
			for _, s := range shardNames {
				per = append(per, perShard[s])
			}
			t.Logf("%s: %d rows deleted in %d batches (%d units) over %d shards, one DELETE a batch, each to one shard (DELETEs by shard: %v)",
				strategy, p.RowsDeleted, p.Batches, p.Units, len(shardNames), per)
		})
	}
}

// TestCitusRetentionLockedRowDefers: an application holds a row of a
// distributed table locked (on its worker); a pass waits for it no longer
// than retention_lock_timeout, there too, and defers that unit to a later
// pass instead of hanging; the locked row stays, every other unit is swept,
// and the next pass, after the lock is gone, sweeps the rest.
func TestCitusRetentionLockedRowDefers(t *testing.T) {
	const rows, batch = 8_000, 200
	in := Shared(t)
	ctx := context.Background()
	name, truth, eligible := capTable(t, in, "locked", rows)
	if err := in.Client.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap.locked", Table: name,
		TimeColumn: "ExpiresAt", OlderThan: time.Hour, StatusColumn: "StatusName",
		Statuses: []string{"Succeeded", "Failed"}, BatchSize: batch, Mode: pgsweep.RetentionParallel}); err != nil {
		t.Fatal(err)
	}
	locked := in.Int(t, `SELECT min("Id") FROM `+name+` WHERE `+capEligible)
	holder, err := pgx.Connect(ctx, in.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+name+` WHERE "Id" = $1 FOR UPDATE`, locked); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	p, ran, err := in.Client.RetentionRun(runCtx, "cap.locked", "locked-1", 30*time.Second)
	if err != nil || !ran {
		t.Fatalf("first pass (a row locked): ran %v, %v after %s", ran, err, time.Since(start))
	}
	took := time.Since(start)
	if p.Outcome != "deferred" {
		t.Errorf("first pass: outcome %q, want deferred (one unit's row was locked)", p.Outcome)
	}
	if n := in.Int(t, `SELECT count(*) FROM `+name+` WHERE "Id" = $1`, locked); n != 1 {
		t.Errorf("the locked row is gone")
	}
	left := in.Int(t, `SELECT count(*) FROM `+name+` WHERE `+capEligible)
	if left == 0 || left > batch*2 {
		t.Errorf("after the first pass %d eligible rows are left; want those of the deferred unit only (1..%d)", left, batch*2)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	p2, ran, err := in.Client.RetentionRun(runCtx, "cap.locked", "locked-2", 30*time.Second)
	if err != nil || !ran {
		t.Fatalf("second pass: ran %v, %v", ran, err)
	}
	if left := in.Int(t, `SELECT count(*) FROM `+name+` WHERE `+capEligible); left != 0 {
		t.Errorf("after the second pass %d eligible rows are left", left)
	}
	if wrong := in.Int(t, fmt.Sprintf(`SELECT count(*) FROM %s t WHERE NOT t.eligible
		AND NOT EXISTS (SELECT 1 FROM %s p WHERE p."Id" = t."Id")`, truth, name)); wrong != 0 {
		t.Errorf("%d ineligible rows were deleted", wrong)
	}
	if p.RowsDeleted+p2.RowsDeleted != eligible {
		t.Errorf("the passes deleted %d + %d rows, %d were eligible", p.RowsDeleted, p2.RowsDeleted, eligible)
	}
	t.Logf("a row locked on its worker: the first pass took %s, deleted %d rows in %d batches and deferred a unit (%d eligible rows left); the second deleted %d",
		took.Round(time.Millisecond), p.RowsDeleted, p.Batches, left, p2.RowsDeleted)
}
