// Package pgtest is pgsweep's test harness: it finds a real PostgreSQL and
// gives each test its own freshly migrated schema.
//
// The database is, in order: TEST_DATABASE_URL; the cluster started by
// `make db` (its DSN is in .pgsweep/dsn at the repository root). When neither
// is available the test fails if CI is set and is skipped otherwise: CI never
// passes without a database.
package pgtest

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	urlOnce sync.Once
	urlVal  string
	urlErr  error
)

// URL returns the connection string of the test database, or ends the test.
func URL(t testing.TB) string {
	t.Helper()
	urlOnce.Do(func() { urlVal, urlErr = findURL() })
	if urlErr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no test database (CI=%s requires one): %v", os.Getenv("CI"), urlErr)
		}
		t.Skipf("no test database: %v (set TEST_DATABASE_URL or run `make db`)", urlErr)
	}
	watchDecoys(t, urlVal)
	return urlVal
}

func findURL() (string, error) {
	var tried []string
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		if err := ping(u); err != nil {
			return "", fmt.Errorf("TEST_DATABASE_URL is set but unusable: %w", err)
		}
		return u, nil
	}
	tried = append(tried, "TEST_DATABASE_URL is not set")

	if root, err := RepoRoot(); err == nil {
		b, err := os.ReadFile(filepath.Join(root, ".pgsweep", "dsn"))
		if err == nil {
			u := strings.TrimSpace(string(b))
			if err := ping(u); err == nil {
				return u, nil
			} else {
				tried = append(tried, fmt.Sprintf("`make db` cluster at %s: %v", u, err))
			}
		} else {
			tried = append(tried, "no `make db` cluster (.pgsweep/dsn missing)")
		}
	}

	return "", fmt.Errorf("%s", strings.Join(tried, "; "))
}

func ping(u string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// SkipIfShort skips a long test under `go test -short`, except in CI: CI
// always runs everything.
func SkipIfShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip(why)
	}
}

// WithParam returns connection string u (a URL or a key=value DSN) with
// key=value added.
func WithParam(u, key, value string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return u + sep + key + "=" + value
	}
	return u + " " + key + "=" + value
}

// WithDatabase returns connection string u (a URL or a key=value DSN)
// pointing at database db instead.
func WithDatabase(u, db string) (string, error) {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		p, err := neturl.Parse(u)
		if err != nil {
			return "", err
		}
		p.Path = "/" + db
		return p.String(), nil
	}
	return u + " dbname='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(db) + "'", nil
}

// NeedCluster ends a test whose cluster lacks what it needs (a setting, an
// extension): a skip on a developer's cluster, a failure in CI, which must
// provide it (scripts/db.sh sets it up).
func NeedCluster(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("the test cluster lacks what this test needs (CI=%s must provide it): %s", os.Getenv("CI"), why)
	}
	t.Skip(why)
}
