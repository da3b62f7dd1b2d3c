package main

import (
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pgsweep uninstall refuses a busy install (exit 1, the counts, nothing
// changed); --dry-run prints the SQL and changes nothing; --force removes
// the schema and the roles the install created. The library tests
// (uninstall_test.go at the root) cover the cron job, kept roles and the
// psql script.
func TestUninstallCommand(t *testing.T) {
	ctx, db, _ := pgtest.Start(t, 1)
	s := db.Q()
	if _, err := db.Pool.Exec(ctx, "SELECT "+s+".queue_create('q'); SELECT "+s+".send('q', '{}')"); err != nil {
		t.Fatal(err)
	}
	db.Pool.Close()
	args := []string{"uninstall", "--database-url", db.URL, "--schema", db.Schema}

	out, errOut, code := runCLI(t, args...)
	if code != 1 || !strings.Contains(errOut, "1 message(s) not yet delivered (1 pending") || !strings.Contains(errOut, "--force") {
		t.Fatalf("busy: exit %d\n%s\n%s", code, out, errOut)
	}
	if !schemaExists(t, db.URL, db.Schema) {
		t.Fatal("a refused uninstall dropped the schema")
	}
	out, errOut, code = runCLI(t, append(args, "--dry-run", "--force")...)
	if code != 0 || !strings.Contains(out, "DROP SCHEMA "+s+" CASCADE;") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	if !schemaExists(t, db.URL, db.Schema) {
		t.Fatal("the dry run dropped the schema")
	}
	out, errOut, code = runCLI(t, append(args, "--force")...)
	if code != 0 || !strings.Contains(out, "1 message(s) and 0 dead letter(s) dropped") {
		t.Fatalf("--force: exit %d\n%s\n%s", code, out, errOut)
	}
	if schemaExists(t, db.URL, db.Schema) {
		t.Fatal("--force left the schema")
	}
	conn := pgtest.Conn(t, db.URL)
	var roles int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_roles WHERE rolname = ANY ($1)", pgsweep.RoleNames(db.Schema)).Scan(&roles); err != nil || roles != 0 {
		t.Fatalf("roles left: %d %v", roles, err)
	}
	out, errOut, code = runCLI(t, args...)
	if code != 1 || !strings.Contains(errOut, "pgsweep is not installed there") {
		t.Fatalf("again: exit %d\n%s\n%s", code, out, errOut)
	}
}

// uninstall never reads PGSWEEP_DATABASE_URL: without --database-url it is a
// usage error.
func TestUninstallNeedsDatabaseURL(t *testing.T) {
	t.Setenv("PGSWEEP_DATABASE_URL", pgtest.URL(t))
	out, errOut, code := runCLI(t, "uninstall", "--schema", "whatever")
	if code != 2 || !strings.Contains(errOut, "--database-url is required") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}
