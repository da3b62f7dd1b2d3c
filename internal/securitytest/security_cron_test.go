package pgsweep_test

// The security model through a real pg_cron job (pg_cron 1.4: jobs start on
// the minute, so each test waits up to 90 seconds; both run in parallel).
// pg_cron must be preloaded and its extension created in the test database
// (scripts/db.sh does both); without it the tests skip, or fail under CI.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// cronReady skips (fails under CI) unless pg_cron runs jobs in this database.
func (sd *secDB) cronReady() {
	sd.t.Helper()
	ok := secValue[bool](sd, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')
		AND EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'pg_cron launcher')
		AND current_setting('cron.database_name', true) = current_database()`)
	if !ok {
		if os.Getenv("CI") != "" {
			sd.t.Fatal("pg_cron is not running jobs in the test database (CI requires it: scripts/db.sh preloads it)")
		}
		sd.t.Skip("pg_cron is not running jobs in the test database")
	}
}

// unscheduleAtEnd removes the job and its run history when the test ends.
func (sd *secDB) unscheduleAtEnd(jobid int64) {
	sd.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = sd.db.Pool.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobid = $1`, jobid)
		_, _ = sd.db.Pool.Exec(ctx, `DELETE FROM cron.job_run_details WHERE jobid = $1`, jobid)
	})
}

// awaitCron waits (at most 90 seconds) until every job has a finished run
// and returns their status and message by job id.
func (sd *secDB) awaitCron(jobids ...int64) map[int64][2]string {
	sd.t.Helper()
	var runs map[int64][2]string
	pgtest.Eventually(sd.t, 90*time.Second, func() error {
		rows, err := sd.db.Pool.Query(context.Background(), `SELECT DISTINCT ON (jobid) jobid, status, coalesce(return_message, '')
			FROM cron.job_run_details WHERE jobid = ANY ($1) AND status IN ('succeeded', 'failed') ORDER BY jobid, runid`, jobids)
		if err != nil {
			sd.t.Fatal(err)
		}
		runs = map[int64][2]string{}
		for rows.Next() {
			var id int64
			var status, msg string
			if err := rows.Scan(&id, &status, &msg); err != nil {
				sd.t.Fatal(err)
			}
			runs[id] = [2]string{status, msg}
		}
		if err := rows.Err(); err != nil {
			sd.t.Fatal(err)
		}
		if len(runs) != len(jobids) {
			return fmt.Errorf("pg_cron ran %d of jobs %v", len(runs), jobids)
		}
		return nil
	})
	return runs
}

// TestHostileCronJob: issue 10's escalations through pg_cron. A superuser
// schedules maintenance with cron_schedule; its job's session resolves names
// in the hostile schema first (the role's search_path, as public would be
// first in pg_cron's session), where every operator and every routine name
// of the install has a hostile twin; a control job in the same kind of
// session shows that they are in effect there. The pass deletes the
// tenant's old rows and runs the hostile policies' triggers, which run as
// the hostile role and gain nothing: no hostile code runs as anyone else,
// no way out of the role works, nothing is kept, the victim keeps its rows
// and the hostile role stays NOSUPERUSER.
func TestHostileCronJob(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	sd.cronReady()
	ctx := context.Background()
	sd.hostile()
	sd.tenant()
	sd.names["@@vs"] = "sec_vs_" + sd.tag
	sd.names["@@victim"] = sd.roles["victim"]
	if _, err := sd.connAs("hostile").Exec(ctx, sd.sql(secTriggerSQL)); err != nil {
		t.Fatalf("hostile triggers: %v", err)
	}
	sd.exec(`CREATE TABLE @hx.cron_control (search_path text, operator oid)`)

	sd.login("cronsu")
	sd.exec(`ALTER ROLE @cronsu SUPERUSER; ALTER ROLE @cronsu SET search_path = @hx, pg_catalog, @S`)
	cronsu := sd.connAs("cronsu")
	var control, job int64
	if err := cronsu.QueryRow(ctx, `SELECT cron.schedule($1, '* * * * *', $2)`, "sec-control-"+sd.tag,
		sd.sql(`INSERT INTO @hx.cron_control SELECT pg_catalog.current_setting('search_path'),
			pg_catalog.to_regoperator('/(interval,integer)')::pg_catalog.oid`)).Scan(&control); err != nil {
		t.Fatal(err)
	}
	sd.unscheduleAtEnd(control)
	if err := cronsu.QueryRow(ctx, sd.sql(`SELECT @S.cron_schedule('* * * * *', '30 seconds')`)).Scan(&job); err != nil {
		t.Fatal(err)
	}
	sd.unscheduleAtEnd(job)
	if u := secValue[string](sd, `SELECT username::text FROM cron.job WHERE jobid = $1`, job); u != sd.roles["cronsu"] {
		t.Fatalf("the job runs as %s, want the superuser that scheduled it (%s)", u, sd.roles["cronsu"])
	}
	start := time.Now()
	runs := sd.awaitCron(control, job)
	t.Logf("pg_cron ran both jobs after %v", time.Since(start).Round(time.Second))
	for id, r := range runs {
		if r[0] != "succeeded" {
			t.Fatalf("job %d: %s: %s", id, r[0], r[1])
		}
	}
	_, _ = sd.db.Pool.Exec(ctx, `SELECT cron.unschedule($1); SELECT cron.unschedule($2)`, control, job)

	// The control: pg_cron's session resolved interval / integer to the hostile operator.
	var path string
	var opSchema *string
	if err := sd.db.Pool.QueryRow(ctx, sd.sql(`SELECT c.search_path, o.oprnamespace::regnamespace::text FROM @hx.cron_control c
		LEFT JOIN pg_operator o ON o.oid = c.operator LIMIT 1`)).Scan(&path, &opSchema); err != nil {
		t.Fatalf("the control job left no row: %v", err)
	}
	if opSchema == nil || *opSchema != "sec_hx_"+sd.tag || !strings.HasPrefix(path, "sec_hx_"+sd.tag) {
		t.Fatalf("control: pg_cron's session had search_path %q and resolved interval / integer in %s: the hostile schema was not in effect",
			path, secStr(opSchema))
	}

	if n := secValue[int64](sd, `SELECT count(*) FROM @S.maintenance_passes WHERE owner = 'pg_cron'`); n == 0 {
		t.Fatal("the job recorded no maintenance pass")
	}
	sd.assertTriggersContained(nil, "", sd.roles["cronsu"])
	if n := secValue[int64](sd, `SELECT count(*) FROM @ts.events`); n != 0 {
		t.Errorf("the tenant's old rows: %d left (want 0)", n)
	}
}

// TestGrantsOperationsDocCron: the pg_cron GRANTs of docs/operations.md,
// then cron_schedule connected as that role. Its job (run as the role, not
// a superuser) records a pass without error that ran billing's policy.
func TestGrantsOperationsDocCron(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	sd.cronReady()
	ctx := context.Background()
	sd.docBilling()
	blocks := sd.docBlocks()
	var cronBlocks []secDocBlock
	for _, b := range blocks {
		if strings.Contains(b.sql, sd.roles["pgsweep_cron"]) || b.as == sd.roles["pgsweep_cron"] {
			cronBlocks = append(cronBlocks, b)
		}
	}
	if len(cronBlocks) != 2 || cronBlocks[1].as != sd.roles["pgsweep_cron"] {
		t.Fatalf("docs/operations.md: want the DBA's pg_cron block, then one connected as pgsweep_cron; got %d blocks", len(cronBlocks))
	}
	sd.runDocBlocks(cronBlocks, func(secDocBlock) bool { return true })
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), sd.db.URL)
		if err == nil {
			defer conn.Close(context.Background())
			_, _ = conn.Exec(context.Background(), `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = $1`, "pgsweep-maintain:"+sd.db.Schema)
		}
	})
	job := secValue[int64](sd, `SELECT jobid FROM cron.job WHERE jobname = $1 AND username = $2`, "pgsweep-maintain:"+sd.db.Schema, sd.roles["pgsweep_cron"])
	sd.unscheduleAtEnd(job)
	runs := sd.awaitCron(job)
	if r := runs[job]; r[0] != "succeeded" {
		t.Fatalf("the job of %s: %s: %s", sd.roles["pgsweep_cron"], r[0], r[1])
	}
	_, _ = sd.db.Pool.Exec(ctx, `SELECT cron.unschedule($1)`, job)
	if e := secValue[string](sd, `SELECT coalesce(string_agg(coalesce(error, '-'), '; '), 'no pass') FROM @S.maintenance_passes WHERE owner = 'pg_cron'`); e != "-" {
		t.Errorf("the job's pass: %s (want one pass without error)", e)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @bs.events`); n != 0 {
		t.Errorf("billing's table holds %d old rows after the job (want 0)", n)
	}
}
