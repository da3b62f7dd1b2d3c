package pgsweep_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/runner"
)

// withParam adds key=value to connection string u (a URL or a DSN).
func withParam(u, key, value string) string {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return u + sep + key + "=" + value
	}
	return u + " " + key + "=" + value
}

// Connections pgsweep opens pin search_path to pg_catalog, pg_temp, even
// when the connection string asks for another one: PinSearchPath, and the
// runner's connections, which go through it.
func TestPinSearchPath(t *testing.T) {
	ctx := context.Background()
	url := withParam(pgtest.URL(t), "search_path", "public")
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	show := func(t *testing.T, c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "SELECT pg_catalog.current_setting('search_path')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("control: the connection string's search_path", func(t *testing.T) {
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != "public" {
			t.Fatalf("search_path %q, want the connection string's public", got)
		}
	})
	t.Run("PinSearchPath", func(t *testing.T) {
		c := cfg.Copy()
		pgsweep.PinSearchPath(c)
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
		// RESET (tern runs RESET ALL) returns to the startup value.
		if _, err := conn.Exec(ctx, "SET search_path = public; RESET ALL"); err != nil {
			t.Fatal(err)
		}
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("after RESET ALL: search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
	})
	t.Run("runner", func(t *testing.T) {
		conn, err := runner.ConnectConfig(cfg, "search-path-test")(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if got := show(t, conn); got != pgsweep.SafeSearchPath {
			t.Fatalf("runner connection: search_path %q, want %q", got, pgsweep.SafeSearchPath)
		}
	})
}
