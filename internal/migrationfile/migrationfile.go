// Package migrationfile reads and writes pgsweep's migration files: their
// list, their top-level statements (Split), the function statements they
// carry between marker lines (Sync), and the recorded checksums that freeze
// landed migrations. migrationgen writes with it; the tests check with it.
package migrationfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/tern/v2/migrate"
)

// SearchPathLine starts every migration: objects are created in the target
// schema and functions pin it with SET search_path FROM CURRENT.
const SearchPathLine = `SET LOCAL search_path TO {{ .schema | default "pgsweep" }}, pg_temp;`

// IncludeMarker and EndMarker enclose a whole function file's text in a
// migration (every migration up to 0.35 carries its functions so;
// ChangedMarker blocks carry only what changed).
const (
	IncludeMarker = "-- pgsweep:include"
	EndMarker     = "-- pgsweep:end"
)

// ChecksumFile is the name of the checksum record inside migrations/.
const ChecksumFile = "CHECKSUMS"

var migrationRe = regexp.MustCompile(`^(\d+)_.+\.sql$`)

// List returns the migration file names in dir, in order; it fails when
// their numbers are not 1, 2, 3, … without gaps.
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && migrationRe.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for i, n := range names {
		v, _ := strconv.Atoi(migrationRe.FindStringSubmatch(n)[1])
		if v != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %d", n, i+1)
		}
	}
	return names, nil
}

// Checksums is the content of migrations/CHECKSUMS.
type Checksums struct {
	// Released is the highest migration number that has shipped: those
	// migrations never change again.
	Released int
	// Sums maps a migration file name to the SHA-256 of its SQL rendered
	// for the default schema.
	Sums map[string]string
}

// ReadChecksums reads dir/CHECKSUMS (empty when missing).
func ReadChecksums(dir string) (Checksums, error) {
	c := Checksums{Sums: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(dir, ChecksumFile))
	if os.IsNotExist(err) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "released":
			if c.Released, err = strconv.Atoi(f[1]); err != nil {
				return c, fmt.Errorf("%s line %d: %w", ChecksumFile, i+1, err)
			}
		case len(f) == 2:
			c.Sums[f[1]] = f[0]
		default:
			return c, fmt.Errorf("%s line %d: cannot parse %q", ChecksumFile, i+1, line)
		}
	}
	return c, nil
}

// WriteChecksums writes dir/CHECKSUMS.
func WriteChecksums(dir string, c Checksums) error {
	var b strings.Builder
	b.WriteString("# SHA-256 of each migration's SQL as rendered for schema pgsweep.\n")
	b.WriteString("# Migrations up to `released` have shipped and never change (TestLandedMigrationsNeverChange).\n")
	b.WriteString("# Written by `make migration` / `make migration-sync`; `make migration-release` moves `released`.\n")
	fmt.Fprintf(&b, "released %d\n", c.Released)
	names := make([]string, 0, len(c.Sums))
	for n := range c.Sums {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", c.Sums[n], n)
	}
	return os.WriteFile(filepath.Join(dir, ChecksumFile), []byte(b.String()), 0o644)
}

// Render renders every migration in dir for the default schema, as tern
// would apply them: file name to SQL.
func Render(dir string) (map[string]string, error) {
	m, err := migrate.NewMigratorEx(context.Background(), nil, "pgsweep.schema_version", &migrate.MigratorOptions{})
	if err != nil {
		return nil, err
	}
	m.Data["schema"] = "pgsweep"
	if err := m.LoadMigrations(os.DirFS(dir)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, mg := range m.Migrations {
		out[mg.Name] = mg.UpSQL
	}
	return out, nil
}

// Checksum is the hex SHA-256 of sql.
func Checksum(sql string) string {
	h := sha256.Sum256([]byte(sql))
	return hex.EncodeToString(h[:])
}

// RenderedChecksum renders the migrations in dir and returns name's checksum.
func RenderedChecksum(dir, name string) (string, error) {
	r, err := Render(dir)
	if err != nil {
		return "", err
	}
	sql, ok := r[name]
	if !ok {
		return "", fmt.Errorf("migration %s not found in %s", name, dir)
	}
	return Checksum(sql), nil
}
