package scratch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A foreign schema (no comment, public's comment, another command's marker)
// is refused by Create and Drop with an error naming it and saying why, and
// stays exactly as it was.
func TestForeignSchemaIsRefused(t *testing.T) {
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	ctx := context.Background()
	for _, tc := range []struct{ name, comment, why string }{
		{"no comment", "", "it has no comment"},
		{"public's comment", "'standard public schema'", `its comment is "standard public schema"`},
		{"another command's", "'" + Marker("demo") + "'", "it is the scratch schema of pgsweep demo"},
		{"marker with a suffix", "'" + Marker("bench claim") + " (not really)'", "its comment is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := pgtest.SchemaName(t)
			t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
			id := pgx.Identifier{schema}.Sanitize()
			exec(t, conn, "CREATE SCHEMA "+id+"; CREATE TABLE "+id+".t (id int); INSERT INTO "+id+".t SELECT generate_series(1, 3)")
			if tc.comment != "" {
				exec(t, conn, "COMMENT ON SCHEMA "+id+" IS "+tc.comment)
			}
			before := pgtest.SchemaState(t, conn, schema)
			for op, f := range map[string]func() error{
				"Create": func() error { return Create(ctx, conn, schema, "bench claim") },
				"Drop":   func() error { return Drop(ctx, conn, schema, "bench claim") },
			} {
				err := f()
				if !errors.Is(err, ErrNotScratch) {
					t.Fatalf("%s: %v, want ErrNotScratch", op, err)
				}
				for _, want := range []string{`refusing to use schema "` + schema + `"`, tc.why, "nothing was dropped or changed", "DROP SCHEMA " + id + " CASCADE"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error lacks %q: %v", op, want, err)
					}
				}
				if after := pgtest.SchemaState(t, conn, schema); after != before {
					t.Fatalf("%s changed the schema: %s, was %s", op, after, before)
				}
			}
		})
	}
}

// A command creates and marks its schema in one go, drops and re-creates it
// when it runs again, and drops it; an absent schema is no error for Drop.
func TestOwnSchema(t *testing.T) {
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	ctx := context.Background()
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	id := pgx.Identifier{schema}.Sanitize()

	if err := Drop(ctx, conn, schema, "demo"); err != nil {
		t.Fatalf("Drop of an absent schema: %v", err)
	}
	if err := Create(ctx, conn, schema, "demo"); err != nil {
		t.Fatal(err)
	}
	empty := pgtest.SchemaState(t, conn, schema)
	if !strings.HasPrefix(empty, "comment="+Marker("demo")+"\n") || strings.Contains(empty, "\nrows ") {
		t.Fatalf("after Create: %s, want an empty schema with comment %s", empty, Marker("demo"))
	}
	exec(t, conn, "CREATE TABLE "+id+".t (id int); INSERT INTO "+id+".t VALUES (1)")
	if err := Create(ctx, conn, schema, "demo"); err != nil {
		t.Fatalf("Create again on its own schema: %v", err)
	}
	if got := pgtest.SchemaState(t, conn, schema); got != empty {
		t.Fatalf("after the second Create: %s, want %s (empty again)", got, empty)
	}
	if err := Create(ctx, conn, schema, "bench mixed"); !errors.Is(err, ErrNotScratch) {
		t.Fatalf("another command's Create: %v", err)
	}
	if err := Drop(ctx, conn, schema, "demo"); err != nil {
		t.Fatal(err)
	}
	if got := pgtest.SchemaState(t, conn, schema); got != "absent" {
		t.Fatalf("after Drop: %s", got)
	}
	if Marker("demo") != "pgsweep scratch schema (created by pgsweep demo); safe to drop" {
		t.Fatalf("marker %q", Marker("demo"))
	}
}

// A scratch schema that holds a pgsweep install goes with the roles the
// install created, when the command re-creates it and when it drops it: a
// re-install creates (and records) them afresh instead of finding them left
// over, and none outlives the scratch schema.
func TestScratchInstallGoesWithItsRoles(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	roles := func() string {
		t.Helper()
		var existing, recorded string
		if err := pool.QueryRow(ctx, "SELECT coalesce(string_agg(rolname, ' ' ORDER BY rolname), '') FROM pg_roles WHERE rolname = ANY ($1)",
			pgsweep.RoleNames(schema)).Scan(&existing); err != nil {
			t.Fatal(err)
		}
		var hasTable bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "installed_role"}.Sanitize()).Scan(&hasTable); err != nil {
			t.Fatal(err)
		}
		if hasTable {
			if err := pool.QueryRow(ctx, "SELECT coalesce(string_agg(role_name, ' ' ORDER BY role_name), '') FROM "+
				pgx.Identifier{schema, "installed_role"}.Sanitize()).Scan(&recorded); err != nil {
				t.Fatal(err)
			}
		}
		return strings.ReplaceAll("existing: "+existing+"; recorded: "+recorded, schema, "S")
	}
	if _, err := pgsweep.Migrate(ctx, mustConn(t, pool), schema); err != nil { // learn what an install records
		t.Fatal(err)
	}
	want := roles()
	if _, err := pgsweep.Uninstall(ctx, pool, schema, pgsweep.UninstallOptions{}); err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		if _, err := Reinstall(ctx, pool, schema, "bench claim"); err != nil {
			t.Fatalf("Reinstall %d: %v", run, err)
		}
		if got := roles(); got != want {
			t.Fatalf("after Reinstall %d: %s, want %s (as a fresh install)", run, got, want)
		}
	}
	if err := Drop(ctx, pool, schema, "bench claim"); err != nil {
		t.Fatal(err)
	}
	if got := roles(); got != "existing: ; recorded: " {
		t.Fatalf("after Drop: %s", got)
	}
}

func mustConn(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	c, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c.Conn()
}

// A marker with a quote in it is stored as it is (COMMENT takes a literal).
func TestQuoteLiteral(t *testing.T) {
	if got := quoteLiteral("it's"); got != "'it''s'" {
		t.Fatal(got)
	}
}
