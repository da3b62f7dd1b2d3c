package migrationfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repo writes a migrations/ and sql/functions/ tree: files maps a path under
// the root to its text.
func repo(t *testing.T, released string, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["migrations/CHECKSUMS"] = "released " + released + "\n"
	for p, text := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	fOld = "CREATE OR REPLACE FUNCTION f(p int) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;"
	fNew = "CREATE OR REPLACE FUNCTION f(p int) RETURNS int LANGUAGE sql AS $$ SELECT 2 $$;"
	g    = "CREATE OR REPLACE FUNCTION g(p text DEFAULT 'x;y') RETURNS text LANGUAGE sql AS $$ SELECT p $$;"
	h    = "CREATE OR REPLACE FUNCTION h() RETURNS int LANGUAGE sql AS $$ SELECT 3 $$;"
	k    = "CREATE OR REPLACE FUNCTION k() RETURNS int LANGUAGE sql AS $$ SELECT 4 $$;"
	v    = "CREATE OR REPLACE VIEW v AS SELECT 1 AS one;"
)

func include(path, body string) string {
	return IncludeMarker + " " + path + "\n" + body + "\n" + EndMarker + " " + path + "\n"
}

func changed(path, body string) string {
	if body != "" {
		body += "\n"
	}
	return ChangedMarker + " " + path + "\n" + body + EndMarker + " " + path + "\n"
}

// first001 installs f (old), g, h and v: the released migration.
var first001 = "-- 1\n" + include("functions/a.sql", "-- f\n"+fOld+"\n\n"+g) + include("functions/b.sql", h+"\n"+v) + "SELECT _grant_all();\n"

func plan(t *testing.T, root string) Plan {
	t.Helper()
	p, err := Sync(root)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func text(t *testing.T, p Plan, name string) string {
	t.Helper()
	for i, n := range p.Names {
		if n == name {
			return p.Texts[i]
		}
	}
	t.Fatalf("no migration %s", name)
	return ""
}

// An unreleased migration carries every changed function and nothing
// unchanged: f (edited) and k (new, in a file no block named yet), not g,
// h or v.
func TestSyncCarriesOnlyWhatChanged(t *testing.T) {
	root := repo(t, "1", map[string]string{
		"migrations/001_one.sql":  first001,
		"migrations/002_two.sql":  "-- 2\n" + changed("functions/a.sql", "") + "\nSELECT _grant_all();\n",
		"sql/functions/a.sql":     "-- f: the doc comment is not installed\n" + fNew + "\n\n" + g + "\n",
		"sql/functions/b.sql":     h + "\n" + v + "\n",
		"sql/functions/c.sql":     k + "\n",
		"migrations/unused.txt":   "",
		"sql/functions/README.md": "",
	})
	p := plan(t, root)
	want := "-- 2\n" + changed("functions/a.sql", fNew) + "\n" + changed("functions/c.sql", k) + "\nSELECT _grant_all();\n"
	if got := text(t, p, "002_two.sql"); got != want {
		t.Fatalf("002:\n%s\nwant:\n%s", got, want)
	}
	if got := text(t, p, "001_one.sql"); got != first001 {
		t.Fatalf("a released migration changed:\n%s", got)
	}
	if len(p.Missing) != 0 {
		t.Fatalf("missing %v", p.Missing)
	}
}

// A whole-file include in an unreleased migration (every migration up to
// 0.35 was written so) is refreshed with the whole file; a later migration's
// changed blocks count what it installs, and a block left empty goes.
func TestSyncAcceptsWholeFileMigrations(t *testing.T) {
	root := repo(t, "1", map[string]string{
		"migrations/001_one.sql":   first001,
		"migrations/002_whole.sql": include("functions/a.sql", fOld+"\n"+g) + "SELECT _grant_all();\n",
		"migrations/003_fine.sql":  changed("functions/b.sql", h) + "SELECT _grant_all();\n",
		"sql/functions/a.sql":      fNew + "\n" + g + "\n",
		"sql/functions/b.sql":      h + "\n" + v + "\n",
	})
	p := plan(t, root)
	if got, want := text(t, p, "002_whole.sql"), include("functions/a.sql", fNew+"\n"+g)+"SELECT _grant_all();\n"; got != want {
		t.Fatalf("002:\n%s\nwant:\n%s", got, want)
	}
	if got, want := text(t, p, "003_fine.sql"), "SELECT _grant_all();\n"; got != want {
		t.Fatalf("003 (h is unchanged):\n%s\nwant:\n%s", got, want)
	}
	if len(p.Missing) != 0 {
		t.Fatalf("missing %v", p.Missing)
	}
}

// A DROP above a block takes the object out of what is installed: the block
// carries it again though its text did not change.
func TestSyncRecreatesWhatAMigrationDrops(t *testing.T) {
	root := repo(t, "1", map[string]string{
		"migrations/001_one.sql": first001,
		"migrations/002_two.sql": "DROP VIEW v;\nALTER TABLE t ALTER COLUMN one TYPE bigint;\n" + changed("functions/b.sql", "") + "SELECT _grant_all();\n",
		"sql/functions/a.sql":    fOld + "\n" + g + "\n",
		"sql/functions/b.sql":    h + "\n" + v + "\n",
	})
	p := plan(t, root)
	if got, want := text(t, p, "002_two.sql"), "DROP VIEW v;\nALTER TABLE t ALTER COLUMN one TYPE bigint;\n"+changed("functions/b.sql", v)+"SELECT _grant_all();\n"; got != want {
		t.Fatalf("002:\n%s\nwant:\n%s", got, want)
	}
}

// An older unreleased migration keeps its text (it must match its own DDL);
// the newest migration with a block for the file carries the change.
func TestSyncRefreshesOnlyTheNewestBlock(t *testing.T) {
	mid := changed("functions/a.sql", fOld) + "SELECT _grant_all();\n"
	root := repo(t, "0", map[string]string{
		"migrations/001_one.sql":   first001,
		"migrations/002_two.sql":   mid,
		"migrations/003_three.sql": changed("functions/a.sql", "") + "SELECT _grant_all();\n",
		"sql/functions/a.sql":      fNew + "\n" + g + "\n",
		"sql/functions/b.sql":      h + "\n" + v + "\n",
	})
	p := plan(t, root)
	if got := text(t, p, "002_two.sql"); got != mid {
		t.Fatalf("002 changed:\n%s", got)
	}
	if got, want := text(t, p, "003_three.sql"), changed("functions/a.sql", fNew)+"SELECT _grant_all();\n"; got != want {
		t.Fatalf("003:\n%s\nwant:\n%s", got, want)
	}
}

// A function edited after the last migration shipped is missing: sync names
// it (and `make migration` makes the migration that carries it).
func TestSyncNamesWhatNoMigrationShips(t *testing.T) {
	root := repo(t, "1", map[string]string{
		"migrations/001_one.sql": first001,
		"sql/functions/a.sql":    fNew + "\n" + g + "\n",
		"sql/functions/b.sql":    h + "\n" + v + "\n",
	})
	p := plan(t, root)
	if want := []string{"functions/a.sql: function f(integer)"}; strings.Join(p.Missing, "|") != strings.Join(want, "|") {
		t.Fatalf("missing %v, want %v", p.Missing, want)
	}
}

// A function file holds only functions, procedures and views, each once.
func TestReadFunctionsRefusesOtherStatements(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"table":     {"sql/functions/a.sql": fOld + "\nCREATE TABLE t (a int);\n"},
		"duplicate": {"sql/functions/a.sql": fOld + "\n", "sql/functions/b.sql": fNew + "\n"},
	} {
		root := repo(t, "0", files)
		if _, err := ReadFunctions(filepath.Join(root, "sql")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A block left empty goes with the blank line after it.
func TestSyncRemovesEmptyBlocksAndTheirBlankLine(t *testing.T) {
	root := repo(t, "1", map[string]string{
		"migrations/001_one.sql": first001,
		"migrations/002_two.sql": "-- 2\n\n" + changed("functions/a.sql", "") + "\n" + changed("functions/b.sql", "") + "\nSELECT _grant_all();\n",
		"sql/functions/a.sql":    fOld + "\n\n" + g + "\n",
		"sql/functions/b.sql":    h + "\n" + v + "\n",
	})
	if got, want := text(t, plan(t, root), "002_two.sql"), "-- 2\n\nSELECT _grant_all();\n"; got != want {
		t.Fatalf("002:\n%q\nwant:\n%q", got, want)
	}
}
