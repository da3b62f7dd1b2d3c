package main

import (
	"context"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Every command's connection and pool pin search_path (pgsweep.PinSearchPath),
// whatever the --database-url asks for.
func TestCommandConnectionsPinSearchPath(t *testing.T) {
	ctx := context.Background()
	u := pgtest.URL(t)
	sep := " "
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		sep = "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
	}
	d := &dbFlags{url: u + sep + "search_path=public", schema: pgsweep.DefaultSchema}
	conn, err := d.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('search_path')").Scan(&got); err != nil || got != pgsweep.SafeSearchPath {
		t.Errorf("connect: search_path %q (%v), want %q", got, err, pgsweep.SafeSearchPath)
	}
	pool, err := d.pool(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, "SELECT pg_catalog.current_setting('search_path')").Scan(&got); err != nil || got != pgsweep.SafeSearchPath {
		t.Errorf("pool: search_path %q (%v), want %q", got, err, pgsweep.SafeSearchPath)
	}
}
