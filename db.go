package pgsweep

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what pgsweep needs to run SQL: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx all satisfy it. Passing the application's own transaction makes a
// call part of that transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
