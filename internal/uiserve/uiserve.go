// Package uiserve serves the dashboard to tests (ui's handler tests, the
// browser tests of internal/uitest).
package uiserve

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep/ui"
)

// Serve mounts the dashboard of schema, read through pool, under /pgsweep/
// as an application would, on a test server that closes when t ends.
func Serve(t testing.TB, pool *pgxpool.Pool, schema string, o ui.Options) *httptest.Server {
	t.Helper()
	o.Schema = schema
	h, err := ui.NewHandler(pool, o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/pgsweep/", http.StripPrefix("/pgsweep", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
