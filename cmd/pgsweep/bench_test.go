package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Every scratch command refuses a schema it did not create, whatever it
// holds (a table of someone's rows; public's comment; a real pgsweep
// install), with an error that names the schema and says why, and changes
// nothing: the schema, its objects and rows stay, and the pgsweep schema
// bench claim and bench cleanup would migrate is not even created.
func TestScratchCommandsRefuseForeignSchemas(t *testing.T) {
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	ctx := context.Background()
	small := map[string][]string{
		"demo":          {"--messages", "100", "--cap-rows", "1000", "--timeout", "20s"},
		"bench claim":   {"--messages", "100", "--workers", "1", "--batch", "10"},
		"bench cleanup": {"--rows", "1000", "--cleaners", "1", "--requeue", "0"},
		"bench mixed":   {"--rows", "1000", "--phase", "1s", "--workers", "1", "--rate", "100"},
	}
	for _, cmd := range []string{"demo", "bench claim", "bench cleanup", "bench mixed"} {
		for _, kind := range []string{"a table", "public's comment", "a pgsweep install"} {
			t.Run(cmd+" on "+kind, func(t *testing.T) {
				if strings.HasPrefix(cmd, "bench ") {
					needBench(t)
				}
				foreign := pgtest.SchemaName(t)
				if cmd == "bench claim" { // its scratch schema is named after the process
					foreign = fmt.Sprintf("pgsweep_bench_%d", os.Getpid())
				}
				fresh := pgtest.SchemaName(t)
				t.Cleanup(func() { pgtest.DropSchema(t, url, foreign); pgtest.DropSchema(t, url, fresh) })
				id := pgx.Identifier{foreign}.Sanitize()
				switch kind {
				case "a pgsweep install":
					if _, err := pgsweep.Migrate(ctx, conn, foreign); err != nil {
						t.Fatal(err)
					}
				default:
					if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := conn.Exec(ctx, "CREATE TABLE "+id+".t (id int PRIMARY KEY, body text); INSERT INTO "+id+
					".t SELECT g, 'row ' || g FROM generate_series(1, 5) g"); err != nil {
					t.Fatal(err)
				}
				if kind == "public's comment" {
					if _, err := conn.Exec(ctx, "COMMENT ON SCHEMA "+id+" IS 'standard public schema'"); err != nil {
						t.Fatal(err)
					}
				}
				before := pgtest.SchemaState(t, conn, foreign)

				args := append(strings.Fields(cmd), "--database-url", url)
				switch cmd {
				case "demo", "bench mixed":
					args = append(args, "--schema", foreign)
				case "bench claim":
					args = append(args, "--schema", fresh)
				case "bench cleanup":
					args = append(args, "--schema", fresh, "--bench-schema", foreign)
				}
				out, errOut, code := runCLI(t, append(args, small[cmd]...)...)
				if code != 1 {
					t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
				}
				for _, want := range []string{`refusing to use schema "` + foreign + `"`, "is not a pgsweep scratch schema of pgsweep " + cmd,
					"nothing was dropped or changed"} {
					if !strings.Contains(errOut, want) {
						t.Errorf("error lacks %q:\n%s", want, errOut)
					}
				}
				if after := pgtest.SchemaState(t, conn, foreign); after != before {
					t.Fatalf("schema %s changed:\n%s\nwas\n%s", foreign, after, before)
				}
				if cmd == "bench claim" || cmd == "bench cleanup" {
					if s := pgtest.SchemaState(t, conn, fresh); s != "absent" {
						t.Fatalf("--schema %s was created although the command was refused", fresh)
					}
				}
			})
		}
	}
}

// bench never reads PGSWEEP_DATABASE_URL, the runner's database: without
// --database-url it goes where the PG* variables say, even when
// PGSWEEP_DATABASE_URL names a working database, and its error says so; with
// --database-url a bogus PGSWEEP_DATABASE_URL is no matter.
func TestBenchIgnoresPgsweepDatabaseURL(t *testing.T) {
	url := pgtest.URL(t)
	conn := pgtest.Conn(t, url)
	const bogus = "postgres://bogus:s3cret@pgsweep-bogus.invalid:5432/nope"
	for _, workload := range []string{"claim", "cleanup", "mixed"} {
		for name, env := range map[string]string{"working": url, "bogus": bogus} {
			t.Run(workload+" without --database-url, PGSWEEP_DATABASE_URL "+name, func(t *testing.T) {
				t.Setenv("PGSWEEP_DATABASE_URL", env)
				t.Setenv("PGHOST", "127.0.0.1")
				t.Setenv("PGPORT", "1") // nothing listens there
				t.Setenv("PGUSER", "pgvars")
				t.Setenv("PGDATABASE", "pgvarsdb")
				t.Setenv("PGCONNECT_TIMEOUT", "5")
				schema := pgtest.SchemaName(t)
				t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
				size := []string{"--rows", "1000"}
				if workload == "claim" {
					size = []string{"--messages", "100"}
				}
				out, errOut, code := runCLI(t, append([]string{"bench", workload, "--schema", schema}, size...)...)
				if code != 1 || !strings.Contains(errOut, "connect to pgvars@127.0.0.1:1/pgvarsdb") ||
					!strings.Contains(errOut, "PGSWEEP_DATABASE_URL is never read") ||
					strings.Contains(errOut, "bogus") || strings.Contains(errOut, "s3cret") {
					t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
				}
				if s := pgtest.SchemaState(t, conn, schema); s != "absent" {
					t.Fatalf("bench reached the database of PGSWEEP_DATABASE_URL: schema %s exists", schema)
				}
			})
		}
	}
	t.Run("claim with --database-url", func(t *testing.T) {
		t.Setenv("PGSWEEP_DATABASE_URL", bogus)
		schema := pgtest.SchemaName(t) // a scratch install of its own
		t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
		out, errOut, code := runCLI(t, "bench", "claim", "--database-url", url, "--schema", schema,
			"--messages", "200", "--workers", "2", "--batch", "50", "--only", "pgsweep")
		if code != 0 || !strings.Contains(out, "pgsweep claim + complete") {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
	})
}

// Bad flag values of the workloads are usage errors: exit 2, the message
// names the flag.
func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "claim", "--rounds", "0"}, "--rounds 1..100"},
		{[]string{"bench", "cleanup", "--bench-schema", "no such"}, "--bench-schema"},
		{[]string{"bench", "mixed", "--phase", "10ms"}, "--phase must be at least 1s"},
		{[]string{"bench", "claim", "--database-url", "postgres://u:pw@h:notaport/db"}, "--database-url"},
		{[]string{"bench", "nope"}, `unknown workload "nope"`},
		{[]string{"demo", "--messages", "1", "--database-url", "postgres://x@h/db"}, "--messages must be at least 100"},
	} {
		_, errOut, code := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "pw@") {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
