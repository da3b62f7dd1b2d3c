package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// pgsweep version prints the binary's version; given a database, the
// install's and where it stands.
func TestVersionCommand(t *testing.T) {
	t.Setenv("PGSWEEP_DATABASE_URL", "")
	want := fmt.Sprintf("pgsweep %s (schema version %d)\n", pgsweep.Version, pgsweep.LatestVersion())
	out, errOut, code := runCLI(t, "version")
	if code != 0 || out != want {
		t.Fatalf("exit %d, %q %q; want %q", code, out, errOut, want)
	}
	db := pgtest.New(t, 1)
	out, errOut, code = runCLI(t, "version", "--database-url", db.URL, "--schema", db.Schema)
	if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "schema "+db.Schema+": "+pgsweep.ReleaseVersion(pgsweep.LatestVersion())+", current") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	t.Setenv("PGSWEEP_DATABASE_URL", db.URL)
	out, errOut, code = runCLI(t, "version", "--schema", "no_pgsweep_here")
	if code != 0 || !strings.Contains(out, "schema no_pgsweep_here: not installed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
}

// migrate --check changes nothing and exits 1 when pgsweep is not installed
// or behind, 0 when current, 2 when the database is newer than the binary
// (faked by bumping the version table), 3 when it cannot tell; one line each.
func TestMigrateCheckExitCodes(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	latest := pgsweep.LatestVersion()
	check := func(wantCode int, want string) {
		t.Helper()
		out, errOut, code := runCLI(t, "migrate", "--check", "--database-url", url, "--schema", schema)
		if code != wantCode || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 || errOut != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, wantCode, want)
		}
	}

	check(1, "not installed: schema "+schema+" holds no pgsweep; this binary installs "+pgsweep.Version)
	if schemaExists(t, url, schema) {
		t.Fatal("migrate --check created the schema")
	}
	if _, err := pgsweep.MigrateTo(ctx, conn, schema, latest-1); err != nil {
		t.Fatal(err)
	}
	check(1, fmt.Sprintf("behind: schema %s is at %s, this binary is %s: 1 migration(s) to apply", schema, pgsweep.ReleaseVersion(latest-1), pgsweep.Version))
	if v, err := pgsweep.CurrentVersion(ctx, conn, schema); err != nil || v != latest-1 {
		t.Fatalf("migrate --check migrated: version %d %v", v, err)
	}
	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatal(err)
	}
	check(0, "current: schema "+schema+" is at "+pgsweep.ReleaseVersion(latest)+", this binary's schema (pgsweep "+pgsweep.Version+")")
	if _, err := conn.Exec(ctx, "UPDATE "+pgx.Identifier{schema, pgsweep.VersionTable}.Sanitize()+" SET version = $1", latest+1); err != nil {
		t.Fatal(err)
	}
	check(2, fmt.Sprintf("ahead: schema %s is at %s, newer than this binary (%s)", schema, pgsweep.ReleaseVersion(latest+1), pgsweep.Version))
	out, _, code := runCLI(t, "version", "--database-url", url, "--schema", schema)
	if code != 0 || !strings.Contains(out, pgsweep.ReleaseVersion(latest+1)+", ahead") {
		t.Fatalf("version on a newer database: exit %d %q", code, out)
	}

	// Errors are 3 under --check, so that 1 and 2 keep their meaning.
	for _, args := range [][]string{
		{"migrate", "--check", "--database-url", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2"},
		{"migrate", "--check", "--schema", "Bad-Name", "--database-url", url},
		{"migrate", "--no-such-flag", "--check"},
		{"migrate", "--check", "--dry-run", "--database-url", url},
	} {
		out, errOut, code := runCLI(t, args...)
		if code != 3 || errOut == "" || out != "" || strings.Contains(errOut, "s3cret") {
			t.Errorf("%v: exit %d, %q %q; want exit 3 and a message", args, code, out, errOut)
		}
	}
}
