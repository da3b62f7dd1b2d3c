package pgsweep_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/tern/v2/migrate"
	"github.com/pgsweep/pgsweep/internal/migrationfile"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestLandedMigrationsNeverChange: a migration that has shipped renders the
// same SQL forever (migrations/CHECKSUMS). A changed function ships in a new
// migration (`make migration`), never by editing a landed one.
func TestLandedMigrationsNeverChange(t *testing.T) {
	sums, err := migrationfile.ReadChecksums("migrations")
	if err != nil {
		t.Fatal(err)
	}
	names, err := migrationfile.List("migrations")
	if err != nil {
		t.Fatal(err)
	}
	if sums.Released < 13 || sums.Released > len(names) {
		t.Fatalf("migrations/CHECKSUMS says released %d; there are %d migrations and 13 had shipped when checksums began",
			sums.Released, len(names))
	}
	rendered, err := migrationfile.Render("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		want, ok := sums.Sums[n]
		if !ok {
			t.Errorf("%s has no checksum: run `make migration-sync`", n)
			continue
		}
		if got := migrationfile.Checksum(rendered[n]); got != want {
			if i+1 <= sums.Released {
				t.Errorf("%s has shipped and must never change (rendered SQL checksum %s, recorded %s): "+
					"undo the edit and put the change in a new migration (`make migration`)", n, got, want)
			} else {
				t.Errorf("%s changed since its checksum was recorded: run `make migration-sync`", n)
			}
		}
	}
}

// TestFunctionFilesMatchFreshInstall: sql/functions is the readable truth.
// Running every file again over a fresh install changes nothing; a function
// edited without a migration that ships it makes this fail.
func TestFunctionFilesMatchFreshInstall(t *testing.T) {
	db := pgtest.New(t, 1)
	ctx := context.Background()
	conn := pgtest.Conn(t, db.URL)
	before, err := pgtest.Signature(ctx, conn, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("sql/functions/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no function files (%v)", err)
	}
	sort.Strings(files)
	var all strings.Builder
	all.WriteString(migrationfile.SearchPathLine + "\n")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		all.WriteString("\n")
	}
	// Every migration ends by applying the role model (privileges.sql).
	all.WriteString("SELECT _grant_all();\n")
	sql := renderForSchema(t, all.String(), db.Schema)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		_ = tx.Rollback(ctx)
		t.Fatalf("re-running sql/functions over a fresh install failed (a function's signature or result "+
			"changed without a migration?): %v", err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO DEFAULT"); err != nil {
		t.Fatal(err)
	}
	after, err := pgtest.Signature(ctx, tx.Conn(), db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatalf("sql/functions differs from what the migrations install; ship the change in a new migration "+
			"(`make migration NAME=... FILES=...`):\n%s", lineDiff(before, after))
	}
}

// renderForSchema renders text as tern renders a migration for schema.
func renderForSchema(t *testing.T, text, schema string) string {
	t.Helper()
	m, err := migrate.NewMigratorEx(context.Background(), nil, schema+".v", &migrate.MigratorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Data["schema"] = schema
	if err := m.LoadMigrations(fstest.MapFS{"001_all.sql": {Data: []byte(text)}}); err != nil {
		t.Fatal(err)
	}
	return m.Migrations[0].UpSQL
}
