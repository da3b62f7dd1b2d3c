package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// RolePool returns a pool whose connections act as a new login-less role
// that is a member of the install's role kind (monitor, worker, admin), as
// an application's role is, and that role's name. The role goes when t
// ends.
func RolePool(t testing.TB, db *DB, kind string) (*pgxpool.Pool, string) {
	t.Helper()
	role := db.Schema + "_ui_" + kind
	r := pgx.Identifier{role}.Sanitize()
	db.MustExec(t, "CREATE ROLE "+r+" NOLOGIN IN ROLE "+pgx.Identifier{db.Schema + "_" + kind}.Sanitize())
	t.Cleanup(func() {
		conn := Conn(t, db.URL)
		_, _ = conn.Exec(context.Background(), "DROP OWNED BY "+r+"; DROP ROLE "+r)
	})
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "SET ROLE "+r)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, role
}
