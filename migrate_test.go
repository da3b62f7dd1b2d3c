package pgsweep_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func latestVersion(t *testing.T) int32 {
	t.Helper()
	ms, err := pgsweep.Migrations(pgsweep.DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	return ms[len(ms)-1].Version
}

func TestMigrateIsIdempotent(t *testing.T) {
	db := pgtest.New(t, 2)
	conn := pgtest.Conn(t, db.URL)
	ctx := context.Background()
	before, err := pgtest.Signature(ctx, conn, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pgsweep.Migrate(ctx, conn, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if want := latestVersion(t); res.From != want || res.To != want {
		t.Fatalf("second migrate: got %+v, want a no-op at version %d", res, want)
	}
	after, err := pgtest.Signature(ctx, conn, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatalf("a no-op migrate changed the schema:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// Many instances starting at once all migrate the same schema: every call
// succeeds and the result is one correct install.
func TestMigrateConcurrently(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	results := make([]pgsweep.MigrateResult, n)
	start := make(chan struct{})
	for i := range n {
		conn := pgtest.Conn(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = pgsweep.Migrate(ctx, conn, schema)
		}()
	}
	close(start)
	wg.Wait()
	want := latestVersion(t)
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		if results[i].To != want {
			t.Fatalf("migrator %d ended at version %d, want %d", i, results[i].To, want)
		}
		if results[i].From == 0 {
			applied++
		}
	}
	if applied != 1 {
		t.Fatalf("%d migrators applied migrations from version 0, want exactly 1", applied)
	}

	ref := pgtest.New(t, 1)
	conn := pgtest.Conn(t, url)
	got, err := pgtest.Signature(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	wantSig, err := pgtest.Signature(ctx, conn, ref.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if got != wantSig {
		t.Fatalf("concurrent install differs from a single install:\n%s\n---\n%s", got, wantSig)
	}
}

// Two installs side by side in one database are independent.
func TestMigrateTwoSchemasSideBySide(t *testing.T) {
	a := pgtest.New(t, 2)
	b := pgtest.New(t, 2)
	ctx := context.Background()
	for _, db := range []*pgtest.DB{a, b} {
		tok, ok, err := db.Client.LeaseAcquire(ctx, "leader", "owner-"+db.Schema, 10*time.Second)
		if err != nil || !ok || tok != 1 {
			t.Fatalf("schema %s: acquire = %d, %v, %v; want token 1 in each schema", db.Schema, tok, ok, err)
		}
	}
}

func TestMigrateRejectsBadSchema(t *testing.T) {
	conn := pgtest.Conn(t, pgtest.URL(t))
	for _, s := range []string{"", "Upper", "a-b", "x;drop table y", strings.Repeat("a", 64)} {
		if _, err := pgsweep.Migrate(context.Background(), conn, s); err == nil {
			t.Errorf("Migrate(%q) succeeded, want an error", s)
		}
	}
}

// A DBA installing with the tern CLI alone gets exactly what pgsweep migrate
// installs, connecting as docs/security.md ("Installing with the tern CLI")
// says: with search_path=pg_catalog,pg_temp.
func TestTernCLIMatchesMigrate(t *testing.T) {
	ref := pgtest.New(t, 1)
	url := ref.URL
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := pgtest.Conn(t, url)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}

	conf, err := os.ReadFile("migrations/tern.conf")
	if err != nil {
		t.Fatal(err)
	}
	confText := strings.ReplaceAll(string(conf), "pgsweep", schema)
	confPath := filepath.Join(t.TempDir(), "tern.conf")
	if err := os.WriteFile(confPath, []byte(confText), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "tern", "migrate",
		"--migrations", "migrations", "--config", confPath, "--conn-string", pgtest.WithParam(url, "search_path", "pg_catalog,pg_temp"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tern migrate: %v\n%s", err, out)
	}

	got, err := pgtest.Signature(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgtest.Signature(ctx, conn, ref.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("tern CLI install differs from pgsweep migrate:\ntern:\n%s\n---\npgsweep migrate:\n%s", got, want)
	}
	if !strings.Contains(got, "function lease_acquire") {
		t.Fatalf("signature does not list the lease functions:\n%s", got)
	}
}

// An install upgraded from every earlier version ends identical to a fresh
// install of the latest version. Each version is a parallel subtest on a
// connection of its own (the test's time grows with the square of the
// migrations: every new one adds an upgrade and lengthens every upgrade).
func TestUpgradeFromEveryVersionMatchesFreshInstall(t *testing.T) {
	fresh := pgtest.New(t, 1)
	ctx := context.Background()
	conn := pgtest.Conn(t, fresh.URL)
	want, err := pgtest.Signature(ctx, conn, fresh.Schema)
	if err != nil {
		t.Fatal(err)
	}
	latest := latestVersion(t)
	t.Run("versions", func(t *testing.T) {
		for v := int32(1); v < latest; v++ {
			t.Run(fmt.Sprint(v), func(t *testing.T) {
				t.Parallel()
				conn := pgtest.Conn(t, fresh.URL)
				schema := pgtest.SchemaName(t)
				t.Cleanup(func() { pgtest.DropSchema(t, fresh.URL, schema) })
				if _, err := pgsweep.MigrateTo(ctx, conn, schema, v); err != nil {
					t.Fatalf("install version %d: %v", v, err)
				}
				res, err := pgsweep.Migrate(ctx, conn, schema)
				if err != nil {
					t.Fatalf("upgrade from %d: %v", v, err)
				}
				if res.From != v || res.To != latest {
					t.Fatalf("upgrade from %d: got %+v", v, res)
				}
				got, err := pgtest.Signature(ctx, conn, schema)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("upgrade from version %d differs from a fresh install:\n%s\n---\n%s", v, got, want)
				}
			})
		}
	})
	if _, err := pgsweep.MigrateTo(ctx, conn, fresh.Schema, 0); err == nil {
		t.Fatal("migrating backwards succeeded, want an error")
	}
}
