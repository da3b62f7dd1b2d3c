// Command migrationgen writes pgsweep's migrations from sql/functions/, so
// that a landed migration carries the full text of every function it
// installs and never changes afterwards (a function edited later ships in a
// new migration).
//
//	go run ./internal/migrationgen new NAME FILE...   write migrations/NNN_NAME.sql including sql/functions/FILE
//	go run ./internal/migrationgen sync               refresh the included functions of unreleased migrations
//	go run ./internal/migrationgen checksums          record the checksums of unreleased migrations
//	go run ./internal/migrationgen release            mark every migration released (run when a version ships)
//
// A migration includes a function file between two marker lines:
//
//	-- pgsweep:include functions/lease.sql
//	...the file's text...
//	-- pgsweep:end functions/lease.sql
//
// `make migration NAME=... FILES="lease.sql claim.sql"` and `make
// migration-sync` call it. Only migrations above the released version in
// migrations/CHECKSUMS are ever rewritten; a landed one is frozen, and
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

func newMigration(root, name string, files []string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("NAME %q: use lower-case letters, digits and _", name)
	}
	names, err := migrationfile.List(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	next := len(names) + 1
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgsweep 0.%d: %s.\n--\n-- TODO: say what this migration changes and why.\n", next, strings.ReplaceAll(name, "_", " "))
	b.WriteString(migrationfile.SearchPathLine + "\n\n")
	for _, f := range files {
		f = strings.TrimPrefix(strings.TrimPrefix(f, "sql/functions/"), "functions/")
		fmt.Fprintf(&b, "%s functions/%s\n%s functions/%s\n\n", migrationfile.IncludeMarker, f, migrationfile.EndMarker, f)
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

// sync rewrites the included function text of every unreleased migration
// from sql/functions/ and records their checksums.
func sync(root string) error {
	sums, err := migrationfile.ReadChecksums(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	names, err := migrationfile.List(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	// A file is refreshed only in the newest migration that includes it: an
	// older unreleased migration keeps the text it had when the newer one
	// was written, so that it matches its own DDL (a view over a column
	// that only the newer migration adds must not be created before it).
	texts := make([]string, len(names))
	newest := map[string]int{}
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(root, "migrations", n))
		if err != nil {
			return err
		}
		texts[i] = string(b)
		for _, f := range migrationfile.Includes(texts[i]) {
			newest[f] = i
		}
	}
	for i, n := range names {
		if i+1 <= sums.Released {
			continue
		}
		path := filepath.Join(root, "migrations", n)
		text := []byte(texts[i])
		out, err := migrationfile.ExpandOnly(string(text), func(f string) bool { return newest[f] == i }, func(f string) (string, error) {
			b, err := os.ReadFile(filepath.Join(root, "sql", f))
			return string(b), err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if out != string(text) {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				return err
			}
			fmt.Println("synced", path)
		}
	}
	return checksums(root)
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
