package pgsweep_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The binary's version is 0.<last migration>.<patch>, and CHANGELOG.md has
// an entry for every schema version, the newest first and equal to Version:
// a new migration without its changelog entry fails here (and so does one
// that leaves the patch of a Go-only release behind).
func TestVersionFollowsMigrationsAndChangelog(t *testing.T) {
	ms, err := pgsweep.Migrations(pgsweep.DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	latest := ms[len(ms)-1].Version
	if got := pgsweep.LatestVersion(); got != latest || int(got) != len(ms) {
		t.Fatalf("LatestVersion() = %d, want %d (the last of %d migrations)", got, latest, len(ms))
	}
	if want := fmt.Sprintf("0.%d.", latest); !strings.HasPrefix(pgsweep.Version, want) {
		t.Fatalf("Version = %q, want %s<patch>", pgsweep.Version, want)
	}

	b, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	heads := regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+)\b`).FindAllStringSubmatch(string(b), -1)
	if len(heads) == 0 || heads[0][1] != pgsweep.Version {
		t.Fatalf("CHANGELOG.md: the newest entry must be %s, the binary's version; entries: %v", pgsweep.Version, heads)
	}
	seen := map[string]bool{}
	for _, h := range heads {
		seen[h[1]] = true
	}
	for v := int32(1); v <= latest; v++ {
		if !seen[pgsweep.ReleaseVersion(v)] {
			t.Errorf("CHANGELOG.md has no entry for %s (migration %d)", pgsweep.ReleaseVersion(v), v)
		}
	}
}

// DatabaseVersion reads the install's version: not installed, behind,
// current, and ahead (a version table bumped past this binary's migrations,
// as a newer pgsweep would leave it); <schema>.version() says the same.
func TestDatabaseVersion(t *testing.T) {
	db := pgtest.New(t, 1)
	ctx := context.Background()
	latest := pgsweep.LatestVersion()

	v, err := pgsweep.DatabaseVersion(ctx, db.Pool, db.Schema)
	if err != nil || v.SchemaVersion != latest || v.Status() != pgsweep.Current || v.Version() != pgsweep.ReleaseVersion(latest) || v.Pending() != 0 {
		t.Fatalf("fresh install: %+v %s %v", v, v.Status(), err)
	}
	var fn string
	if err := db.Pool.QueryRow(ctx, "SELECT "+db.Q()+".version()").Scan(&fn); err != nil || fn != pgsweep.ReleaseVersion(latest) {
		t.Fatalf("%s.version() = %q, %v; want %s", db.Schema, fn, err, pgsweep.ReleaseVersion(latest))
	}

	v, err = pgsweep.DatabaseVersion(ctx, db.Pool, "no_such_schema_here")
	if err != nil || v.SchemaVersion != 0 || v.Status() != pgsweep.NotInstalled || v.Version() != "" || v.Pending() != latest {
		t.Fatalf("missing schema: %+v %s %v", v, v.Status(), err)
	}

	behind := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, db.URL, behind) })
	conn := pgtest.Conn(t, db.URL)
	if _, err := pgsweep.MigrateTo(ctx, conn, behind, latest-1); err != nil {
		t.Fatal(err)
	}
	v, err = pgsweep.DatabaseVersion(ctx, conn, behind)
	if err != nil || v.SchemaVersion != latest-1 || v.Status() != pgsweep.Behind || v.Pending() != 1 {
		t.Fatalf("one behind: %+v %s %v", v, v.Status(), err)
	}

	bumpVersion(t, conn, db.Schema, latest+1)
	v, err = pgsweep.DatabaseVersion(ctx, conn, db.Schema)
	if err != nil || v.Status() != pgsweep.Ahead || v.Version() != pgsweep.ReleaseVersion(latest+1) || v.Pending() != 0 {
		t.Fatalf("ahead: %+v %s %v", v, v.Status(), err)
	}
}

// bumpVersion sets schema's tern version table to version, as a newer
// pgsweep's migrations would.
func bumpVersion(t *testing.T, conn *pgx.Conn, schema string, version int32) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, pgsweep.VersionTable}.Sanitize()+" SET version = $1", version); err != nil {
		t.Fatal(err)
	}
}
