package pgsweep_test

// The shadow suite (docs/security.md, "Go statements and search_path"):
// every statement pgsweep's Go code sends must resolve the same whatever
// the caller's search_path holds. A hostile role with CREATE on public (as
// on every database upgraded from PostgreSQL 14 or older) and on the
// database fills public, its own schema and a schema named after the
// migrating role ("$user") with decoys of every pg_catalog function,
// operator and type name pgsweep uses (internal/shadowtest); then a
// superuser whose search_path puts those schemas BEFORE pg_catalog -- the
// worst case, worse than the default "$user", public -- migrates, uses
// every Client verb, runs a Worker, a relay, maintain(), a runner pass that
// detaches partitions, and uninstalls. No decoy may run. Controls show the
// decoys are in effect: an unqualified statement does run one.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/shadowtest"
	"github.com/pgsweep/pgsweep/relay"
	"github.com/pgsweep/pgsweep/runner"
)

// shadowDB is a database of its own holding the decoys.
type shadowDB struct {
	t   *testing.T
	cfg *pgx.ConnConfig // superuser, the database, the hostile search_path
	// noTypes is cfg with the schema of the decoy types left out of the
	// search_path: see knownTypeHole.
	noTypes *pgx.ConnConfig
	safe    *pgx.Conn // superuser, pinned search_path: the test's own reads
	decoys  *shadowtest.Decoys
	// path is the hostile search_path: the decoy schemas before pg_catalog.
	path string
	url  string // the database's connection string (default search_path)
}

func newShadowDB(t *testing.T) *shadowDB {
	t.Helper()
	ctx := context.Background()
	base := pgtest.URL(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := hex.EncodeToString(b[:])
	dbName := "pgsweep_shadow_" + tag
	role := "shadow_hostile_" + tag

	admin := pgtest.Conn(t, base)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{dbName}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", dbName, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop database %s: %v", dbName, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", dbName, err)
		}
		if _, err := c.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})

	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = dbName
	safeCfg := cfg.Copy()
	pgsweep.PinSearchPath(safeCfg)
	safe, err := pgx.ConnectConfig(ctx, safeCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = safe.Close(context.Background()) })

	root, err := pgtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	names, err := shadowtest.Names(root)
	if err != nil {
		t.Fatal(err)
	}
	// public, the hostile role's own schema, and a schema named after the
	// migrating role: "$user" of its default search_path.
	schemas := []string{"public", role, cfg.User}
	types := role + "_types"
	d, err := shadowtest.Install(ctx, safe, shadowtest.Options{Role: role, Schemas: schemas, TypeSchemas: []string{types}, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("decoys: %d functions, %d operators, %d types in %v (%d signatures skipped) for %d names",
		d.Functions, d.Operators, d.Types, schemas, d.Skipped, len(names))
	if d.Functions < 1000 || d.Operators < 500 || d.Types < 20 {
		t.Fatalf("too few decoys: %d functions, %d operators, %d types", d.Functions, d.Operators, d.Types)
	}
	hostileCfg := cfg.Copy()
	path := `"$user", public, ` + pgx.Identifier{role}.Sanitize() + `, ` + pgx.Identifier{types}.Sanitize() + `, pg_catalog`
	hostileCfg.RuntimeParams = map[string]string{"search_path": path}
	noTypesCfg := cfg.Copy()
	noTypesCfg.RuntimeParams = map[string]string{"search_path": `"$user", public, ` + pgx.Identifier{role}.Sanitize() + `, pg_catalog`}
	u, err := pgtest.WithDatabase(base, dbName)
	if err != nil {
		t.Fatal(err)
	}
	return &shadowDB{t: t, cfg: hostileCfg, noTypes: noTypesCfg, safe: safe, decoys: d, path: path, url: u}
}

// conn opens a superuser connection with the hostile search_path.
func (s *shadowDB) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), s.cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	var got string
	if err := c.QueryRow(context.Background(), "SELECT pg_catalog.current_setting('search_path')").Scan(&got); err != nil || got != s.path {
		t.Fatalf("search_path %q (%v), want %q", got, err, s.path)
	}
	return c
}

// pool opens a pool of superuser connections with the hostile search_path.
func (s *shadowDB) pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig = s.cfg.Copy()
	pc.MaxConns = 8
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func (s *shadowDB) hits(t *testing.T) int64 {
	t.Helper()
	n, err := s.decoys.Hits(context.Background(), s.safe)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// step runs f as a subtest and fails it if a decoy ran meanwhile.
func (s *shadowDB) step(t *testing.T, name string, f func(t *testing.T)) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) {
		before := s.hits(t)
		defer func() {
			if after := s.hits(t); after != before {
				log, _ := s.decoys.Log(context.Background(), s.safe)
				t.Errorf("%d decoy call(s) during %s (the log keeps only calls that did not raise: %v); "+
					"the server log's WARNINGs name every one", after-before, name, log)
			}
		}()
		f(t)
	})
}

func (s *shadowDB) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := s.safe.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// shadowTransport is a broker that confirms everything at once.
type shadowTransport struct {
	published atomic.Int64
	done      chan struct{}
	want      int64
}

func (s *shadowTransport) Publish(_ context.Context, msgs []relay.Message) []relay.Result {
	if s.published.Add(int64(len(msgs))) >= s.want {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
	return make([]relay.Result, len(msgs))
}

func (s *shadowTransport) Close() error { return nil }

func TestShadowDecoys(t *testing.T) {
	pgtest.SkipIfShort(t, "creates a database and a few thousand decoys")
	s := newShadowDB(t)
	ctx := context.Background()
	schema := "shadow_" + strings.TrimPrefix(s.cfg.Database, "pgsweep_shadow_")

	// The controls: the decoys are in effect, and they raise for anyone but
	// their owner.
	t.Run("control", func(t *testing.T) {
		c := s.conn(t)
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{"SELECT pg_advisory_lock($1)", []any{"42"}},            // the example: a twin (or float8) in public
			{"SELECT 1::oid = 1", nil},                              // no exact operator in pg_catalog
			{"SELECT 'x'::text", nil},                               // a domain named text
			{"SELECT sum(x) FROM (VALUES (1), (2)) v(x)", nil},      // a plain sum(integer) before the aggregate
			{"SELECT interval '1 hour' / 2", nil},                   // interval / integer
			{"SELECT now() - interval '1 day' > '2000-01-01'", nil}, // twins of - and >
		} {
			before := s.hits(t)
			_, err := c.Exec(ctx, q.sql, q.args...)
			if after := s.hits(t); after <= before {
				t.Errorf("control %s: no decoy ran (hits %d -> %d, err %v): the suite could not fail", q.sql, before, after, err)
			}
			if err == nil || !strings.Contains(err.Error(), "shadow decoy") {
				t.Errorf("control %s: %v, want the decoy's exception", q.sql, err)
			}
		}
		// With the default search_path ("$user", public: pg_catalog first,
		// implicitly), an inexact operator still finds the decoy.
		plain := s.cfg.Copy()
		plain.RuntimeParams = map[string]string{}
		pc, err := pgx.ConnectConfig(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close(ctx)
		before := s.hits(t)
		if _, err := pc.Exec(ctx, "SELECT 1::oid = 1"); err == nil || s.hits(t) <= before {
			t.Errorf("control with the default search_path: %v, hits %d -> %d", err, before, s.hits(t))
		}
		// The hostile role itself may call its decoys: recorded, no error.
		tx, err := pc.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{s.decoys.Role}.Sanitize()+"; SELECT 1::oid = 1; RESET ROLE"); err != nil {
			t.Fatalf("the hostile role's own call: %v", err)
		}
		var who string
		if err := tx.QueryRow(ctx, "SELECT who::pg_catalog.text FROM "+pgx.Identifier{s.decoys.Audit}.Sanitize()+".hit ORDER BY at DESC LIMIT 1").Scan(&who); err != nil || who != s.decoys.Role {
			t.Errorf("the log of the hostile role's own call: %q, %v", who, err)
		}
	})

	// Registered before the first step: the install's roles are the
	// cluster's, and outlive the database.
	t.Cleanup(func() { pgtest.DropSchema(t, s.url, schema) })
	if !s.step(t, "migrate", func(t *testing.T) {
		res, err := pgsweep.Migrate(ctx, s.conn(t), schema)
		if err != nil || res.To != pgsweep.LatestVersion() {
			t.Fatalf("migrate: %+v, %v", res, err)
		}
	}) {
		t.FailNow()
	}
	s.step(t, "migrate again", func(t *testing.T) {
		res, err := pgsweep.Migrate(ctx, s.conn(t), schema)
		if err != nil || res.From != res.To || res.To != pgsweep.LatestVersion() {
			t.Fatalf("migrate again: %+v, %v", res, err)
		}
	})
	s.step(t, "migrate --check", func(t *testing.T) {
		v, err := pgsweep.DatabaseVersion(ctx, s.conn(t), schema)
		if err != nil || v.Status() != pgsweep.Current {
			t.Fatalf("version: %+v, %v", v, err)
		}
	})

	pool := s.pool(t)
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	s.step(t, "client verbs", func(t *testing.T) { shadowClientVerbs(t, client) })
	s.step(t, "worker", func(t *testing.T) { shadowWorker(t, client, pool, schema) })
	s.step(t, "relay", func(t *testing.T) { shadowRelay(t, client, pool, schema) })

	// Retention: a plain table with old rows, a partitioned one with two
	// expired partitions; both the superuser's.
	q := pgx.Identifier{schema}.Sanitize()
	app := pgx.Identifier{schema + "_app"}.Sanitize()
	s.exec(t, "CREATE SCHEMA "+app)
	s.exec(t, fmt.Sprintf(`SELECT %[1]s.setting_set('retention_check_interval', '0');
		SELECT %[1]s.setting_set('retention_duty_cycle', '100');
		CREATE TABLE %[2]s.events (id int, at timestamptz NOT NULL);
		INSERT INTO %[2]s.events SELECT i, now() - interval '3 days' FROM generate_series(1, 2000) i;
		CREATE TABLE %[2]s.ev (at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE %[2]s.ev_old1 PARTITION OF %[2]s.ev FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
		CREATE TABLE %[2]s.ev_old2 PARTITION OF %[2]s.ev FOR VALUES FROM (now() - interval '9 days') TO (now() - interval '8 days');
		CREATE TABLE %[2]s.ev_cut PARTITION OF %[2]s.ev FOR VALUES FROM (now() - interval '8 days') TO (now() + interval '1 day');
		INSERT INTO %[2]s.ev SELECT now() - interval '10 days' + g * interval '1 hour' FROM generate_series(1, 24 * 10 - 1) g`, q, app))
	s.step(t, "retention register", func(t *testing.T) {
		for _, p := range []pgsweep.RetentionPolicy{
			{Name: "events", Table: schema + "_app.events", TimeColumn: "at", OlderThan: 24 * time.Hour, BatchSize: 500},
			{Name: "ev", Table: schema + "_app.ev", TimeColumn: "at", OlderThan: 7 * 24 * time.Hour},
		} {
			if err := client.RetentionRegister(ctx, p); err != nil {
				t.Fatalf("register %s: %v", p.Name, err)
			}
		}
		if _, err := client.RetentionPolicies(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := client.RetentionDue(ctx); err != nil {
			t.Fatal(err)
		}
	})
	// The runner opens its connections through this Connector, not
	// runner.ConnectConfig: the hostile search_path, not the pinned one.
	s.step(t, "runner pass with partitions to detach", func(t *testing.T) {
		connect := func(ctx context.Context) (runner.Conn, error) { return pgx.ConnectConfig(ctx, s.noTypes.Copy()) }
		r, err := runner.New(connect, runner.Options{Schema: schema, Owner: "shadow-runner", Budget: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // the second pass drops the detached tables
			if _, _, err := r.RunOnce(ctx); err != nil {
				t.Fatalf("pass %d: %v", i+1, err)
			}
		}
		var left int64
		if err := s.safe.QueryRow(ctx, fmt.Sprintf("SELECT pg_catalog.count(*) FROM pg_catalog.pg_partition_tree('%s.ev') WHERE isleaf", strings.ReplaceAll(app, "'", "''"))).Scan(&left); err != nil || left != 1 {
			t.Errorf("%d leaves left (%v), want the one the cutoff cuts through", left, err)
		}
		var conc int64
		if err := s.safe.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+q+".retention_passes WHERE strategy OPERATOR(pg_catalog.=) 'detach_concurrently'").Scan(&conc); err != nil || conc != 2 {
			t.Errorf("%d partitions removed by DETACH ... CONCURRENTLY (%v), want 2", conc, err)
		}
	})
	s.exec(t, fmt.Sprintf(`INSERT INTO %[1]s.events SELECT i, now() - interval '3 days' FROM generate_series(1, 600) i`, app))
	s.step(t, "maintain as superuser", func(t *testing.T) {
		mc, err := pgx.ConnectConfig(ctx, s.noTypes.Copy())
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Close(ctx)
		c := client.WithDB(mc)
		if err := c.Maintain(ctx, "shadow-su", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := c.LatestMaintenancePass(ctx, "shadow-su"); err != nil || !ok || p.Error != "" {
			t.Fatalf("the pass: %+v, %v, %v", p, ok, err)
		}
		if _, err := c.MaintenanceProgress(ctx, "shadow-su"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.RetentionRun(ctx, "events", "shadow-su", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := c.BrowseRetentionPasses(ctx, "", 0, 5); err != nil {
			t.Fatal(err)
		}
		if _, err := c.BrowseRetentionPasses(ctx, "events", 1<<40, 5); err != nil {
			t.Fatal(err)
		}
	})
	// The procedures maintain, maintain_step_retention and retention_run
	// cannot pin search_path, and PL/pgSQL resolves the types of their
	// variables through the caller's search_path: their declarations name
	// pg_catalog's types. This step puts the decoy types' schema (a domain
	// named text, jsonb, ...) before pg_catalog.
	s.step(t, "maintain with decoy types before pg_catalog", func(t *testing.T) {
		if err := client.WithDB(s.conn(t)).Maintain(ctx, "shadow-types", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	s.step(t, "uninstall --dry-run", func(t *testing.T) {
		res, err := pgsweep.Uninstall(ctx, s.conn(t), schema, pgsweep.UninstallOptions{DryRun: true, Force: true})
		if err != nil || len(res.SQL) == 0 {
			t.Fatalf("dry run: %+v, %v", res, err)
		}
	})
	s.step(t, "uninstall", func(t *testing.T) {
		if _, err := pgsweep.Uninstall(ctx, s.conn(t), schema, pgsweep.UninstallOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	})

	// The tern CLI runs its own unqualified lock query (SELECT
	// pg_advisory_lock($1), untyped): docs/security.md tells a DBA to connect
	// it with search_path=pg_catalog,pg_temp. Without it, it resolves to a
	// decoy (the text one wins an untyped parameter; pgx then cannot even
	// encode the key); with it, the install runs and no decoy does.
	ternSchema := "tern_" + strings.TrimPrefix(s.cfg.Database, "pgsweep_shadow_")
	t.Cleanup(func() { pgtest.DropSchema(t, s.url, ternSchema) })
	tern := func(t *testing.T, connString string) ([]byte, error) {
		conf, err := os.ReadFile("migrations/tern.conf")
		if err != nil {
			t.Fatal(err)
		}
		confPath := filepath.Join(t.TempDir(), "tern.conf")
		if err := os.WriteFile(confPath, []byte(strings.ReplaceAll(string(conf), "pgsweep", ternSchema)), 0o600); err != nil {
			t.Fatal(err)
		}
		s.exec(t, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{ternSchema}.Sanitize())
		return exec.CommandContext(ctx, "go", "tool", "tern", "migrate", "--migrations", "migrations",
			"--config", confPath, "--conn-string", connString).CombinedOutput()
	}
	t.Run("control: tern CLI without search_path", func(t *testing.T) {
		if out, err := tern(t, s.url); err == nil || !strings.Contains(string(out), "pg_advisory_lock") && !strings.Contains(string(out), "OID 25") && !strings.Contains(string(out), "shadow decoy") {
			t.Errorf("tern CLI with the default search_path: %v\n%s\nwant its lock query to reach a decoy", err, out)
		}
	})
	s.step(t, "tern CLI with the documented search_path", func(t *testing.T) {
		if out, err := tern(t, withSearchPath(s.url)); err != nil {
			t.Fatalf("tern migrate: %v\n%s", err, out)
		}
		v, err := pgsweep.CurrentVersion(ctx, s.conn(t), ternSchema)
		if err != nil || v != pgsweep.LatestVersion() {
			t.Fatalf("tern CLI install at version %d (%v), want %d", v, err, pgsweep.LatestVersion())
		}
		if _, err := pgsweep.Uninstall(ctx, s.conn(t), ternSchema, pgsweep.UninstallOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	})
}

// withSearchPath adds search_path=pg_catalog,pg_temp to connection string
// u (a URL or a key=value DSN): how docs/security.md tells a DBA to connect
// the tern CLI.
func withSearchPath(u string) string { return pgtest.WithParam(u, "search_path", "pg_catalog,pg_temp") }

// shadowClientVerbs calls every Client verb once.
func shadowClientVerbs(t *testing.T, c *pgsweep.Client) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("queue_create", c.QueueCreate(ctx, "jobs", pgsweep.Outbox, 3))
	must("queue_create inbox", c.QueueCreate(ctx, "inbox", pgsweep.Inbox, 2))
	must("queue_configure", c.QueueConfigure(ctx, "jobs", map[string]any{"backoff_base": "1 second"}))
	_, _, err := c.Send(ctx, "jobs", pgsweep.Message{Payload: json.RawMessage(`{"a":1}`), Headers: map[string]string{"h": "v"}})
	must("send", err)
	_, _, err = c.Send(ctx, "jobs", pgsweep.Message{Payload: json.RawMessage(`2`), Key: "k1", Lane: "L", DeliverAt: time.Now().Add(-time.Second)})
	must("send with a lane", err)
	_, _, err = c.Send(ctx, "inbox", pgsweep.Message{Payload: json.RawMessage(`3`), Key: "in-1"})
	must("send inbox", err)
	ids, err := c.SendBatch(ctx, "jobs", []pgsweep.Message{{Payload: json.RawMessage(`4`)}, {Payload: json.RawMessage(`5`), Key: "k2", Lane: "M"}, {Payload: json.RawMessage(`6`)}})
	must("send_batch", err)
	for range 2 { // the second time, a duplicate of each
		_, err = c.SendResult(ctx, "jobs", pgsweep.Message{Payload: json.RawMessage(`7`), UniqueKey: "u1", UniqueFor: time.Minute, Priority: 3})
		must("send_unique", err)
		_, err = c.SendBatchResults(ctx, "jobs", []pgsweep.Message{{Payload: json.RawMessage(`8`), UniqueKey: "u2", Priority: -2},
			{Payload: json.RawMessage(`9`), UniqueKey: "u3", UniqueFor: time.Hour, Lane: "N"}})
		must("send_batch_unique", err)
	}
	ds, err := c.Claim(ctx, "jobs", "shadow", 2, time.Minute)
	must("claim", err)
	if len(ds) == 0 {
		t.Fatal("claim: nothing")
	}
	tok := ds[0].Token
	all := make([]int64, len(ds))
	for i, d := range ds {
		all[i] = d.ID
	}
	_, err = c.Renew(ctx, "jobs", tok, all, time.Minute)
	must("renew", err)
	_, err = c.Release(ctx, "jobs", tok, all[:1])
	must("release", err)
	_, err = c.Complete(ctx, "jobs", tok, all[1:])
	must("complete", err)
	ds, err = c.ClaimIDs(ctx, "jobs", "shadow", ids, time.Minute)
	must("claim_ids", err)
	if len(ds) > 0 {
		_, err = c.Fail(ctx, "jobs", ds[0].Token, []int64{ds[0].ID}, "boom", 0)
		must("fail", err)
		_, err = c.Fail(ctx, "jobs", ds[0].Token, []int64{ds[0].ID}, "boom", time.Second)
		must("fail with a delay", err)
	}
	done, next, err := c.CompleteAndClaim(ctx, "jobs", "shadow", tok, nil, 5, time.Minute)
	must("complete_and_claim", err)
	_ = done
	if len(next) > 0 {
		_, _, err = c.CompleteAndClaim(ctx, "jobs", "shadow", next[0].Token, []int64{next[0].ID}, 5, time.Minute)
		must("complete_and_claim with done ids", err)
		if len(next) > 1 {
			_, err = c.DeadLetter(ctx, "jobs", next[1].Token, []int64{next[1].ID}, "permanent")
			must("dead_letter", err)
			_, err = c.RequeueDead(ctx, "jobs", []int64{next[1].ID}, time.Time{})
			must("dead_requeue", err)
		}
	}
	in, err := c.Claim(ctx, "inbox", "shadow", 1, 0)
	must("claim inbox", err)
	if len(in) == 1 {
		_, err = c.Complete(ctx, "inbox", in[0].Token, []int64{in[0].ID})
		must("complete inbox", err)
	}
	_, err = c.QueueRecover(ctx, "jobs", 100)
	must("queue_recover", err)
	_, err = c.QueueStats(ctx)
	must("queue_stats", err)
	_, err = c.LaneStats(ctx, "jobs", 10)
	must("lane_stats", err)
	// the dashboard's reads (browse*, stats*, health), each with and without a cursor
	lanes, err := c.BrowseLanes(ctx, "jobs", pgsweep.LaneCursor{}, 1)
	must("browse_lanes", err)
	_, err = c.BrowseLanes(ctx, "jobs", lanes.Next, 1)
	must("browse_lanes after a cursor", err)
	msgs, err := c.BrowseMessages(ctx, "jobs", "pending", 0, 1)
	must("browse_messages", err)
	_, err = c.BrowseMatching(ctx, "jobs", "dead", "shadow", 1, 5)
	must("browse_messages by error", err)
	if len(msgs.Messages) > 0 {
		_, _, err = c.BrowseMessage(ctx, "jobs", msgs.Messages[0].ID)
		must("browse_message", err)
	}
	_, err = c.StatsLatest(ctx)
	must("stats_latest", err)
	_, err = c.StatsHistory(ctx, "jobs", time.Now().Add(-time.Hour), time.Now())
	must("stats_history", err)
	_, err = c.Health(ctx)
	must("health", err)
	_, err = c.DeleteDead(ctx, "jobs", []int64{-1})
	must("dead_delete", err)
	// periodic schedules (schedule.go)
	must("schedule_create", c.ScheduleCreate(ctx, "shadow-sched", "jobs", "*/5 * * * MON-FRI", &pgsweep.ScheduleOptions{
		Payload: json.RawMessage(`{"s": 1}`), TimeZone: "Europe/Berlin", CatchUp: pgsweep.CatchUpAll, Lane: "sched"}))
	_, err = c.ScheduleNextTimes(ctx, "@every 90 seconds", "UTC", time.Time{}, 3)
	must("schedule_next_times", err)
	_, err = c.Schedules(ctx)
	must("schedules", err)
	_, err = c.SchedulePause(ctx, "shadow-sched")
	must("schedule_pause", err)
	_, err = c.ScheduleResume(ctx, "shadow-sched")
	must("schedule_resume", err)
	_, err = c.ScheduleDrop(ctx, "shadow-sched")
	must("schedule_drop", err)
	_, err = c.QueuePause(ctx, "jobs")
	must("queue_pause", err)
	_, err = c.QueueResume(ctx, "jobs")
	must("queue_resume", err)
	_, err = c.LaneSkip(ctx, "jobs", "nope")
	must("lane_skip", err)
	_, err = c.CancelMessages(ctx, "jobs", []int64{-1})
	must("message_cancel", err)
	_, err = c.NotifyChannel(ctx)
	must("notify_channel", err)
	_, ok, err := c.LeaseAcquire(ctx, "shadow-lease", "shadow", time.Minute)
	must("lease_acquire", err)
	if !ok {
		t.Error("lease_acquire: not acquired")
	}
	_, err = c.LeaseRenew(ctx, "shadow-lease", "shadow", time.Minute)
	must("lease_renew", err)
	_, err = c.Leases(ctx)
	must("leases", err)
	leases, err := c.BrowseLeases(ctx, "", 1)
	must("browse_leases", err)
	_, err = c.BrowseLeases(ctx, leases.Next, 1)
	must("browse_leases after a cursor", err)
	_, err = c.OwnerLeases(ctx, "shadow")
	must("owner leases", err)
	_, err = c.LeaseRelease(ctx, "shadow-lease", "shadow")
	must("lease_release", err)
	_, err = c.LeaseReleaseOwner(ctx, "shadow")
	must("lease_release_owner", err)
	_, err = c.SettingIntervals(ctx, "recovery_interval", "retention_check_interval")
	must("setting_interval", err)
	start, err := c.BackendStart(ctx)
	must("backend_start", err)
	_, err = c.BackendAlive(ctx, 1, &start)
	must("backend alive", err)
	_, err = c.BackendAlive(ctx, 1, nil)
	must("backend alive without a start", err)
	_, err = c.MaintenancePasses(ctx, 5)
	must("maintenance_passes", err)
	_, err = c.BrowseMaintenancePasses(ctx, 0, 5)
	must("browse_maintenance_passes", err)
	_, err = c.BrowseMaintenancePasses(ctx, 1<<40, 5)
	must("browse_maintenance_passes before an id", err)
	_, _, err = c.CronJob(ctx)
	must("cron_job", err)
	_, err = c.QueuePurge(ctx, "inbox")
	must("queue_purge", err)
	_, err = c.QueueDrop(ctx, "inbox", true)
	must("queue_drop", err)
}

// shadowWorker runs a Worker on the hostile pool until it processed a
// batch of messages (one fails once).
func shadowWorker(t *testing.T, c *pgsweep.Client, pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.QueueCreate(ctx, "work", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.QueueConfigure(ctx, "work", map[string]any{"backoff_base": "10 milliseconds", "backoff_max": "20 milliseconds"}); err != nil {
		t.Fatal(err)
	}
	const n = 40
	ms := make([]pgsweep.Message, n)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i))}
		if i%4 == 0 {
			ms[i].Lane = fmt.Sprintf("lane-%d", i%3)
		}
	}
	if _, err := c.SendBatch(ctx, "work", ms); err != nil {
		t.Fatal(err)
	}
	var completed atomic.Int64
	all := make(chan struct{})
	var failedOnce atomic.Bool
	w, err := pgsweep.NewWorker(pool, func(_ context.Context, d *pgsweep.Delivery) error {
		if string(d.Payload) == "7" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("once")
		}
		return nil
	}, pgsweep.WorkerOptions{Schema: schema, Queue: "work", Batch: 8, Concurrency: 4, PollInterval: 50 * time.Millisecond,
		Hooks: pgsweep.Hooks{Completed: func(_ string, k int) {
			if completed.Add(int64(k)) == n {
				close(all)
			}
		}}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Errorf("the worker completed %d of %d", completed.Load(), n)
	}
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("worker: %v", err)
	}
}

// shadowRelay runs a relay (a broker that confirms everything) on the
// hostile pool, with direct dispatch, until it published its queue.
func shadowRelay(t *testing.T, c *pgsweep.Client, pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.QueueCreate(ctx, "out", pgsweep.Outbox, 3); err != nil {
		t.Fatal(err)
	}
	const n = 20
	ms := make([]pgsweep.Message, n)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(fmt.Sprint(i)), Lane: fmt.Sprintf("l%d", i%2)}
	}
	ids, err := c.SendBatch(ctx, "out", ms)
	if err != nil {
		t.Fatal(err)
	}
	tr := &shadowTransport{done: make(chan struct{}), want: n + 1}
	r, err := relay.New(pool, "out", tr, relay.Options{Schema: schema, Owner: "shadow-relay"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	id, _, err := c.Send(ctx, "out", pgsweep.Message{Payload: json.RawMessage(`"direct"`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Dispatch(ctx, []int64{id}); err != nil {
		t.Errorf("dispatch: %v", err)
	}
	select {
	case <-tr.done:
	case <-ctx.Done():
		t.Errorf("the relay published %d of %d (ids %v)", tr.published.Load(), n+1, ids)
	}
	stop()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("relay: %v", err)
	}
}
