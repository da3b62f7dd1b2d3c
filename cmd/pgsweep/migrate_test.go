package main

import (
	"context"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func schemaExists(t *testing.T, url, schema string) bool {
	t.Helper()
	conn := pgtest.Conn(t, url)
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestMigrateDryRunChangesNothing(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })

	out, errOut, code := runCLI(t, "migrate", "--dry-run", "--database-url", url, "--schema", schema)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"CREATE TABLE lease", "SET LOCAL search_path TO " + schema, "-- migration 1: 001_leases.sql"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q", want)
		}
	}
	if schemaExists(t, url, schema) {
		t.Fatal("dry-run created the schema")
	}

	out, errOut, code = runCLI(t, "migrate", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "migrated from version 0") {
		t.Fatalf("migrate: exit %d, %q %q", code, out, errOut)
	}
	out, _, code = runCLI(t, "migrate", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: exit %d, %q", code, out)
	}
	out, _, code = runCLI(t, "migrate", "--dry-run", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "0 migration(s) pending") || strings.Contains(out, "CREATE TABLE") {
		t.Fatalf("dry-run on a current schema: exit %d, %q", code, out)
	}
}

func TestMigrateUsageErrors(t *testing.T) {
	cases := [][]string{
		{"migrate", "--schema", "Bad-Name", "--database-url", "postgres://x@127.0.0.1:1/x"},
		{"migrate", "--no-such-flag"},
		{"migrate", "extra-arg"},
		{"no-such-command"},
	}
	for _, args := range cases {
		_, errOut, code := runCLI(t, args...)
		if code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with a message", args, code, errOut)
		}
	}
}

func TestConnectErrorHidesPassword(t *testing.T) {
	_, errOut, code := runCLI(t, "migrate", "--database-url", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if strings.Contains(errOut, "s3cret") {
		t.Fatalf("password leaked: %s", errOut)
	}
}

// migrate --citus on PostgreSQL without Citus: the install is migrated (the
// first step stands), then citus_distribute refuses with 55000 and the CLI
// prints its hint and exits 1. --citus with --check or --dry-run is a usage
// error. (On a Citus coordinator: internal/citustest, TestCitusMigrateCLI.)
func TestMigrateCitusWithoutCitus(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })

	for _, extra := range []string{"--check", "--dry-run"} {
		_, errOut, code := runCLI(t, "migrate", "--citus", extra, "--database-url", url, "--schema", schema)
		if extra == "--check" && code != 3 || extra == "--dry-run" && code != 2 || !strings.Contains(errOut, "--citus") {
			t.Errorf("migrate --citus %s: exit %d, %q; want a usage error naming --citus", extra, code, errOut)
		}
	}
	if schemaExists(t, url, schema) {
		t.Fatal("a refused migrate --citus created the schema")
	}
	out, errOut, code := runCLI(t, "migrate", "--citus", "--database-url", url, "--schema", schema)
	if code != 1 || !strings.Contains(out, "migrated from version 0") ||
		!strings.Contains(errOut, "Citus extension") || !strings.Contains(errOut, "SQLSTATE 55000") || !strings.Contains(errOut, "hint: Install Citus") {
		t.Fatalf("migrate --citus without Citus: exit %d\nout: %s\nerr: %s", code, out, errOut)
	}
	out, _, code = runCLI(t, "migrate", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("the install is not complete after a refused citus step: exit %d, %q", code, out)
	}
}
