package pgsweep_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/migrationfile"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestMigrationsChangedBlocksInstallWhatWholeFilesDo: the last two
// migrations written with whole-file includes (034 and 035), rewritten as `make migration` writes a migration today
// (changed blocks, computed by `make migration-sync`), carry fewer
// statements than their whole-file includes (each one sync refreshes: the
// newest holder of a file's block) and install exactly the
// catalog of a fresh install. It proves the statement splitter and the
// object keys on the real history, before an unreleased migration does.
func TestMigrationsChangedBlocksInstallWhatWholeFilesDo(t *testing.T) {
	names, sums := readMigrations(t)
	sqlDir, err := filepath.Abs("sql")
	if err != nil {
		t.Fatal(err)
	}
	// The last two migrations written with whole-file includes (later ones
	// are written in changed blocks already, and stay as they are).
	const rewritten = 2
	texts := make([]string, len(names))
	last := -1
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join("migrations", n))
		if err != nil {
			t.Fatal(err)
		}
		texts[i] = string(b)
		if strings.Contains(texts[i], migrationfile.IncludeMarker+" ") {
			last = i
		}
	}
	first := last - rewritten + 1
	if first < 0 {
		t.Fatalf("fewer than %d migrations with whole-file includes", rewritten)
	}
	// sync writes the migrations into a tree of their own (from first on
	// unreleased) and syncs them from today's sql/functions.
	sync := func(changed bool) (string, migrationfile.Plan) {
		root := t.TempDir()
		if err := os.Symlink(sqlDir, filepath.Join(root, "sql")); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "migrations")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			text := texts[i]
			if changed && i >= first && i <= last {
				text = strings.ReplaceAll(text, migrationfile.IncludeMarker+" ", migrationfile.ChangedMarker+" ")
			}
			if err := os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, migrationfile.ChecksumFile), []byte(fmt.Sprintf("released %d\n", min(first, sums.Released))), 0o644); err != nil {
			t.Fatal(err)
		}
		plan, err := migrationfile.Sync(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Missing) > 0 {
			t.Fatalf("rewritten, the migrations miss %v", plan.Missing)
		}
		return dir, plan
	}
	// The same includes as whole files, synced from today's sql/functions:
	// what the rewritten blocks are compared with (the files may have grown
	// objects since those migrations landed).
	_, wholePlan := sync(false)
	dir, plan := sync(true)
	creates := func(text string) int {
		sts, err := migrationfile.Split(text)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range sts {
			if s.Key != "" {
				n++
			}
		}
		return n
	}
	// Sync refreshes a block only in the newest migration holding its file
	// (an older unreleased one keeps its text): a rewritten migration whose
	// files all have blocks in later migrations keeps its whole text. Every
	// one that sync refreshed must leave something out, and one must be.
	refreshed := 0
	for i := first; i < len(names); i++ {
		rewrittenText := strings.ReplaceAll(texts[i], migrationfile.IncludeMarker+" ", migrationfile.ChangedMarker+" ")
		if i <= last && plan.Texts[i] != rewrittenText {
			refreshed++
			if got, was := creates(plan.Texts[i]), creates(wholePlan.Texts[i]); got >= was {
				t.Errorf("%s rewritten creates %d objects, whole files %d: nothing was left out", names[i], got, was)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, names[i]), []byte(plan.Texts[i]), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	if refreshed == 0 {
		t.Fatalf("sync refreshed none of the %d rewritten migrations", rewritten)
	}

	fresh := pgtest.New(t, 1)
	ctx := context.Background()
	conn := pgtest.Conn(t, fresh.URL)
	want, err := pgtest.Signature(ctx, conn, fresh.Schema)
	if err != nil {
		t.Fatal(err)
	}
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, fresh.URL, schema) })
	installSet(t, ctx, conn, os.DirFS(dir), "rewritten migrations", schema)
	got, err := pgtest.Signature(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("the rewritten migrations install something else than a fresh install:\n%s", lineDiff(want, got))
	}
}
