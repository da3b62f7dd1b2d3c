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
	names, sums := readMigrations(t)
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

// TestMigrationsCarryWhatChanged: every unreleased migration is what `make
// migration-sync` writes, its changed blocks carry only statements that
// differ from what is installed before them (nothing unchanged), and after
// the last migration every function, procedure and view of sql/functions is
// installed exactly as written (every change carried). It reads files only;
// TestFunctionFilesMatchFreshInstall proves the same against a database.
func TestMigrationsCarryWhatChanged(t *testing.T) {
	plan, err := migrationfile.Sync(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Missing) > 0 {
		t.Errorf("no migration ships these as sql/functions writes them (`make migration NAME=what_changed`):\n  %s",
			strings.Join(plan.Missing, "\n  "))
	}
	in := migrationfile.Installed{}
	for i, n := range plan.Names {
		b, err := os.ReadFile(filepath.Join("migrations", n))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != plan.Texts[i] {
			t.Errorf("%s is not what `make migration-sync` writes: run it", n)
		}
		parts, err := migrationfile.Parts(string(b))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		for _, p := range parts {
			text := p.Text
			if p.Block != nil {
				text = p.Block.Body
			}
			sts, err := migrationfile.Split(text)
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if p.Block != nil && p.Block.Marker == migrationfile.ChangedMarker {
				for _, s := range sts {
					if !s.Template && in[s.Key] == s.Text {
						t.Errorf("%s carries %s (%s), which the migrations before it install unchanged", n, s.Key, p.Block.Path)
					}
				}
			}
			in.Apply(sts)
		}
	}
	files, err := migrationfile.ReadFunctions("sql")
	if err != nil {
		t.Fatal(err)
	}
	if missing := in.Missing(files); len(missing) > 0 {
		t.Errorf("after the last migration these differ from sql/functions:\n  %s", strings.Join(missing, "\n  "))
	}
}

// readMigrations returns the names of the migrations (migrations/, in
// order) and what migrations/CHECKSUMS records of them.
func readMigrations(t *testing.T) ([]string, migrationfile.Checksums) {
	t.Helper()
	names, err := migrationfile.List("migrations")
	if err != nil {
		t.Fatal(err)
	}
	sums, err := migrationfile.ReadChecksums("migrations")
	if err != nil {
		t.Fatal(err)
	}
	return names, sums
}
