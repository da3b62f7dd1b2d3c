package pgsweep_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// capTable creates a CAP-shaped table ("published" of CAP 10.0.1's
// PostgreSQL storage) named tbl in schema, with its ("ExpiresAt","StatusName")
// index.
func capTable(t *testing.T, db *pgtest.DB, tbl string) string {
	t.Helper()
	name := db.Rel(tbl)
	_, err := db.Pool.Exec(context.Background(), fmt.Sprintf(`
		CREATE TABLE %[1]s ("Id" bigint PRIMARY KEY, "Version" varchar(20), "Name" varchar(200) NOT NULL,
			"Content" text, "Retries" int, "Added" timestamp NOT NULL, "ExpiresAt" timestamp NULL,
			"StatusName" varchar(50) NOT NULL);
		CREATE INDEX ON %[1]s ("ExpiresAt", "StatusName");`, name))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func countRows(t *testing.T, db pgsweep.DBTX, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestRetentionRunThroughClient(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	tbl := capTable(t, db, "published")
	_, err := db.Pool.Exec(ctx, `INSERT INTO `+tbl+` ("Id", "Name", "Added", "ExpiresAt", "StatusName")
		SELECT i, 'n', now(), CASE WHEN i % 4 = 3 THEN now() + interval '1 day' ELSE now() - interval '2 hours' END,
		       CASE WHEN i % 4 = 0 THEN 'Succeeded' WHEN i % 4 = 1 THEN 'Failed' ELSE 'Queued' END
		  FROM generate_series(1, 5000) i`)
	if err != nil {
		t.Fatal(err)
	}
	c := db.Client
	err = c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "ExpiresAt",
		OlderThan: time.Hour, StatusColumn: "StatusName", Statuses: []string{"Succeeded", "Failed"}, BatchSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	pass, ok, err := c.RetentionRun(ctx, "cap", "replica-1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("run: %v %v", ok, err)
	}
	if pass.Outcome != "drained" || pass.RowsDeleted != 2500 || pass.Owner != "replica-1" || pass.FinishedAt == nil ||
		pass.Mode != pgsweep.RetentionExclusive || pass.LeaseToken == nil || pass.Batches < 9 {
		t.Fatalf("pass: %+v", pass)
	}
	if n := countRows(t, db.Pool, `SELECT count(*) FROM `+tbl+` WHERE "StatusName" IN ('Succeeded', 'Failed')`); n != 0 {
		t.Fatalf("%d eligible rows left", n)
	}
	if n := countRows(t, db.Pool, `SELECT count(*) FROM `+tbl); n != 2500 {
		t.Fatalf("%d rows left, want the 2500 ineligible ones", n)
	}
	st, err := c.RetentionPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].LastPass == nil || st[0].LastPass.ID != pass.ID || st[0].OlderThan == nil ||
		*st[0].OlderThan != time.Hour || st[0].BatchSize != 300 || st[0].Interval != time.Minute {
		t.Fatalf("policies: %+v", st)
	}
	// The next pass finds nothing and says so.
	pass2, ok, err := c.RetentionRun(ctx, "cap", "", time.Minute)
	if err != nil || !ok || pass2.RowsDeleted != 0 || !strings.HasPrefix(pass2.Owner, "pid") {
		t.Fatalf("second run: %+v %v %v", pass2, ok, err)
	}
	passes, err := c.RetentionPasses(ctx, "cap")
	if err != nil || len(passes) != 2 {
		t.Fatalf("passes: %v %v", passes, err)
	}

	// keep forever: nothing to do
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "Added"}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.RetentionRun(ctx, "cap", "", time.Minute); err != nil || ok {
		t.Fatalf("keep-forever run: %v %v", ok, err)
	}
	if ok, err := c.RetentionUnregister(ctx, "cap"); err != nil || !ok {
		t.Fatalf("unregister: %v %v", ok, err)
	}
}

func TestRetentionInvalidArgumentsChangeNothing(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	tbl := capTable(t, db, "published")
	c := db.Client
	good := pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "ExpiresAt", OlderThan: time.Hour,
		StatusColumn: "StatusName", Statuses: []string{"Succeeded"}}
	if err := c.RetentionRegister(ctx, good); err != nil {
		t.Fatal(err)
	}
	before, err := c.RetentionPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(p *pgsweep.RetentionPolicy){
		"p_table must be an existing table":                    func(p *pgsweep.RetentionPolicy) { p.Table = "nosuch" },
		"p_time_column must name a column":                     func(p *pgsweep.RetentionPolicy) { p.TimeColumn = "expiresat" },
		"p_time_column must be of type timestamptz":            func(p *pgsweep.RetentionPolicy) { p.TimeColumn = "Retries" },
		"p_status_column must be text-like":                    func(p *pgsweep.RetentionPolicy) { p.StatusColumn = "Retries" },
		"p_batch_size must be between 1 and 10000":             func(p *pgsweep.RetentionPolicy) { p.BatchSize = 10001 },
		"p_mode must be 'exclusive' or 'parallel'":             func(p *pgsweep.RetentionPolicy) { p.Mode = "both" },
		"p_older_than must be between 0 seconds and 100 years": func(p *pgsweep.RetentionPolicy) { p.OlderThan = -time.Second },
		"p_interval must be greater than 0":                    func(p *pgsweep.RetentionPolicy) { p.Interval = -time.Second },
		"p_statuses must be a non-empty array":                 func(p *pgsweep.RetentionPolicy) { p.Statuses = []string{} },
		"p_statuses needs p_status_column":                     func(p *pgsweep.RetentionPolicy) { p.StatusColumn = "" },
		"p_name must be a non-empty string of at most 190":     func(p *pgsweep.RetentionPolicy) { p.Name = "" },
	}
	for msg, mutate := range bad {
		p := good
		p.OlderThan = 2 * time.Hour // would change the policy if accepted
		mutate(&p)
		err := c.RetentionRegister(ctx, p)
		if !errors.Is(err, pgsweep.ErrInvalidArgument) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: got %v", msg, err)
		}
	}
	if _, _, err := c.RetentionRun(ctx, "cap", "", 48*time.Hour); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("budget of 48h: got %v", err)
	}
	if _, _, err := c.RetentionRun(ctx, "nosuch", "", time.Second); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("unknown policy: got %v", err)
	}
	after, err := c.RetentionPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("failed calls changed the policy:\n%+v\n%+v", before, after)
	}
}

// A policy that no index can serve is accepted with a NOTICE saying so.
func TestRetentionRegisterWarnsWithoutIndex(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	tbl := capTable(t, db, "published")
	bare := db.Rel("bare")
	if _, err := conn.Exec(ctx, `CREATE TABLE `+bare+` (id bigint, at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "ExpiresAt",
		OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(notices) != 0 {
		t.Fatalf("indexed table: unexpected notices %q", notices)
	}
	mu.Unlock()
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "bare", Table: bare, TimeColumn: "at",
		OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) != 1 || !strings.Contains(notices[0], "no btree index") {
		t.Fatalf("notices: %q", notices)
	}
}

// A parallel cleaner that finds the policy row locked while it would plan
// (another cleaner planning, or a registration left open: both lock it FOR NO
// KEY UPDATE, which the pass record's foreign key check does not wait for)
// polls for the units without waiting on the lock, and gives up when its
// budget is spent.
func TestRetentionParallelPlanningNeverWaits(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	tbl := capTable(t, db, "published")
	c := db.Client
	if err := c.RetentionRegister(ctx, pgsweep.RetentionPolicy{Name: "cap", Table: tbl, TimeColumn: "ExpiresAt",
		OlderThan: time.Hour, Mode: pgsweep.RetentionParallel}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM `+db.Schema+`.retention_policy WHERE name = 'cap' FOR NO KEY UPDATE`); err != nil {
		t.Fatal(err)
	}
	cleaner := cleanerConn(t, db) // lock_timeout 100ms: a wait on the row would fail
	p, ran, err := cleaner.RetentionRun(ctx, "cap", "poller", 300*time.Millisecond)
	if err != nil || !ran || p.Outcome != "budget" || p.Batches != 0 {
		t.Fatalf("got %+v %v %v, want a pass that gave up on its budget", p, ran, err)
	}
}
