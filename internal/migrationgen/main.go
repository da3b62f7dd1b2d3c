// Command migrationgen writes pgsweep's migrations from sql/functions/, so
// that a migration carries the functions that changed, and a landed
// migration never changes afterwards (a function edited later ships in a
// new migration).
//
//	go run ./internal/migrationgen new NAME [FILE...]  write migrations/NNN_NAME.sql carrying what changed
//	go run ./internal/migrationgen sync                refresh what the unreleased migrations carry
//	go run ./internal/migrationgen checksums           record the checksums of unreleased migrations
//	go run ./internal/migrationgen release             mark every migration released (run when a version ships)
//
// A migration carries, of each function file, the CREATE OR REPLACE
// FUNCTION, PROCEDURE and VIEW statements whose text differs from what the
// migrations before it install (migrationfile.Sync), between marker lines:
//
//	-- pgsweep:changed functions/lease.sql
//	...the changed statements of the file...
//	-- pgsweep:end functions/lease.sql
//
// Migrations up to 0.35 include whole files instead (-- pgsweep:include);
// sync still refreshes such a block in an unreleased migration with the
// whole file. `make migration NAME=... [FILES="lease.sql claim.sql"]` and
// `make migration-sync` call it. Only migrations above the released version
// in migrations/CHECKSUMS are ever rewritten; a landed one is frozen, and
// TestLandedMigrationsNeverChange fails if its rendered SQL changes.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/pgsweep/pgsweep/internal/migrationfile"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "migrationgen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: migrationgen new NAME FILE... | sync | checksums | release")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	switch args[0] {
	case "new":
		if len(args) < 2 {
			return fmt.Errorf("usage: migrationgen new NAME [FILE...]")
		}
		return newMigration(root, args[1], args[2:])
	case "sync":
		return sync(root)
	case "checksums":
		return checksums(root)
	case "release":
		return release(root)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory")
		}
		dir = parent
	}
}

var nameRe = regexp.MustCompile(`^[a-z0-9_]+$`)

// newMigration writes migrations/NNN_name.sql with a changed block for
// each of files (in that order: list a file before one whose statements
// need it), then one for every other file with a changed statement, in
// name order, and syncs.
func newMigration(root, name string, files []string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("NAME %q: use lower-case letters, digits and _", name)
	}
	names, err := migrationfile.List(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	plan, err := migrationfile.Sync(root)
	if err != nil {
		return err
	}
	changed := map[string]bool{}
	for _, m := range plan.Missing {
		changed[m[:strings.Index(m, ":")]] = true
	}
	var paths []string
	listed := map[string]bool{}
	for _, f := range files {
		p := "functions/" + strings.TrimPrefix(strings.TrimPrefix(f, "sql/functions/"), "functions/")
		if _, err := os.Stat(filepath.Join(root, "sql", p)); err != nil {
			return fmt.Errorf("FILES: %w", err)
		}
		paths = append(paths, p)
		listed[p] = true
	}
	all, err := migrationfile.ReadFunctions(filepath.Join(root, "sql"))
	if err != nil {
		return err
	}
	for _, f := range all {
		if changed[f.Path] && !listed[f.Path] {
			paths = append(paths, f.Path)
		}
	}
	next := len(names) + 1
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgsweep 0.%d: %s.\n--\n-- TODO: say what this migration changes and why.\n", next, strings.ReplaceAll(name, "_", " "))
	b.WriteString(migrationfile.SearchPathLine + "\n\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "%s %s\n%s %s\n\n", migrationfile.ChangedMarker, p, migrationfile.EndMarker, p)
	}
	b.WriteString("-- Ownership, SECURITY DEFINER and grants as privileges.sql says (every migration ends so).\nSELECT _grant_all();\n")
	path := filepath.Join(root, "migrations", fmt.Sprintf("%03d_%s.sql", next, name))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := sync(root); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

// sync rewrites the unreleased migrations as migrationfile.Sync computes
// them and records their checksums; it fails when a function of
// sql/functions is still installed by no migration as written.
func sync(root string) error {
	plan, err := migrationfile.Sync(root)
	if err != nil {
		return err
	}
	for i, n := range plan.Names {
		path := filepath.Join(root, "migrations", n)
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if string(old) != plan.Texts[i] {
			if err := os.WriteFile(path, []byte(plan.Texts[i]), 0o644); err != nil {
				return err
			}
			fmt.Println("synced", path)
		}
	}
	if err := checksums(root); err != nil {
		return err
	}
	if len(plan.Missing) > 0 {
		return fmt.Errorf("no migration ships these functions as sql/functions writes them "+
			"(`make migration NAME=what_changed`):\n  %s", strings.Join(plan.Missing, "\n  "))
	}
	return nil
}

func checksums(root string) error {
	dir := filepath.Join(root, "migrations")
	sums, err := migrationfile.ReadChecksums(dir)
	if err != nil {
		return err
	}
	names, err := migrationfile.List(dir)
	if err != nil {
		return err
	}
	for i, n := range names {
		if _, ok := sums.Sums[n]; ok && i+1 <= sums.Released {
			continue // landed: frozen
		}
		sum, err := migrationfile.RenderedChecksum(dir, n)
		if err != nil {
			return err
		}
		sums.Sums[n] = sum
	}
	return migrationfile.WriteChecksums(dir, sums)
}

func release(root string) error {
	dir := filepath.Join(root, "migrations")
	if err := checksums(root); err != nil {
		return err
	}
	sums, err := migrationfile.ReadChecksums(dir)
	if err != nil {
		return err
	}
	names, err := migrationfile.List(dir)
	if err != nil {
		return err
	}
	sums.Released = len(names)
	return migrationfile.WriteChecksums(dir, sums)
}
