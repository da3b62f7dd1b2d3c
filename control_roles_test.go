package pgsweep_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// roleClient returns db's client on a connection of a new NOLOGIN member of
// <schema>_<kind> (admin, worker or monitor), as an application's role is:
// the control room's functions are called with that role's rights.
func roleClient(t *testing.T, db *pgtest.DB, kind string) *pgsweep.Client {
	t.Helper()
	ctx := context.Background()
	su := pgtest.Conn(t, db.URL)
	role := db.Schema + "_" + kind + "_member"
	id := pgx.Identifier{role}.Sanitize()
	if _, err := su.Exec(ctx, "CREATE ROLE "+id+" NOLOGIN IN ROLE "+pgx.Identifier{db.Schema + "_" + kind}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = su.Exec(context.Background(), "DROP ROLE IF EXISTS "+id) })
	conn := pgtest.Conn(t, db.URL)
	if _, err := conn.Exec(ctx, "SET ROLE "+id); err != nil {
		t.Fatal(err)
	}
	return db.Client.WithDB(conn)
}
