package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// installState describes a pgsweep install for before/after comparisons:
// its catalog, version, retention policies and messages.
func installState(t *testing.T, conn *pgx.Conn, schema string) string {
	t.Helper()
	ctx := context.Background()
	v, err := pgsweep.CurrentVersion(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if v == 0 {
		return "not installed"
	}
	sig, err := pgtest.Signature(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	var policies string
	var messages int64
	if err := conn.QueryRow(ctx, "SELECT coalesce(string_agg(row_to_json(p)::text, E'\\n' ORDER BY p.name), '') FROM "+
		pgx.Identifier{schema, "retention_policy"}.Sanitize()+" p").Scan(&policies); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "message"}.Sanitize()).Scan(&messages); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("version %d, %d messages\npolicies:\n%s\n%s", v, messages, policies, sig)
}

// bench claim and bench cleanup pointed at a database with a real install
// (a queue with a message, a policy named bench.published, the name cleanup
// uses) leave it untouched: pointed at it with --schema they are refused,
// and with their defaults they work in scratch installs of their own, which
// they drop at the end. A `pgsweep` schema in the test database, the
// default install that they used to migrate, stays as it was too.
func TestBenchLeavesRealInstallAlone(t *testing.T) {
	real := pgtest.New(t, 1)
	ctx := context.Background()
	conn := pgtest.Conn(t, real.URL)
	tables := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, real.URL, tables) })
	s := pgx.Identifier{real.Schema}.Sanitize()
	for _, q := range []string{
		"CREATE SCHEMA " + pgx.Identifier{tables}.Sanitize(),
		"CREATE TABLE " + pgx.Identifier{tables, "published"}.Sanitize() + ` ("Id" bigint PRIMARY KEY, "ExpiresAt" timestamptz, "StatusName" text)`,
		"SELECT " + s + ".retention_register('bench.published', '" + pgx.Identifier{tables, "published"}.Sanitize() + "'::regclass, 'ExpiresAt', '7 days')",
		"SELECT " + s + ".queue_create('orders')",
		"SELECT " + s + ".send('orders', '{\"order\": 1}')",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	before := installState(t, conn, real.Schema)
	defaultBefore := installState(t, conn, pgsweep.DefaultSchema)
	bench := pgtest.SchemaName(t) + "_b"
	t.Cleanup(func() { pgtest.DropSchema(t, real.URL, bench) })

	claim := []string{"claim", "--database-url", real.URL, "--messages", "200", "--workers", "1", "--batch", "50", "--only", "pgsweep"}
	cleanup := []string{"cleanup", "--database-url", real.URL, "--bench-schema", bench, "--rows", "1000", "--cleaners", "1",
		"--requeue", "0", "--mode", "exclusive"}
	for _, args := range [][]string{append(claim, "--schema", real.Schema), append(cleanup, "--schema", real.Schema)} {
		var out bytes.Buffer
		err := runWorkload(ctx, args, &out)
		if !errors.Is(err, scratch.ErrNotScratch) {
			t.Fatalf("%s --schema %s (a real install): %v, want a refusal\n%s", args[0], real.Schema, err, out.String())
		}
		if after := installState(t, conn, real.Schema); after != before {
			t.Fatalf("%s changed the real install:\n%s\nwas\n%s", args[0], after, before)
		}
	}
	for _, args := range [][]string{claim, cleanup} {
		var out bytes.Buffer
		if err := runWorkload(ctx, args, &out); err != nil {
			t.Fatalf("%s with its default --schema: %v\n%s", args[0], err, out.String())
		}
		if after := installState(t, conn, real.Schema); after != before {
			t.Fatalf("%s changed the real install:\n%s\nwas\n%s", args[0], after, before)
		}
		if after := installState(t, conn, pgsweep.DefaultSchema); after != defaultBefore {
			t.Fatalf("%s changed schema %s:\n%s\nwas\n%s", args[0], pgsweep.DefaultSchema, after, defaultBefore)
		}
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname IN ($1, 'pgsweep_bench_cleanup')`,
		fmt.Sprintf("pgsweep_bench_%d_pgsweep", os.Getpid())).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch installs left behind: %d %v", left, err)
	}
}
