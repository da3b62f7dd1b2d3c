package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// reinstall drops schema with everything in it and installs pgsweep there
// afresh: how the demo and the benchmarks start from a known state.
func reinstall(ctx context.Context, pool *pgxpool.Pool, schema string) (pgsweep.MigrateResult, error) {
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return pgsweep.MigrateResult{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return pgsweep.MigrateResult{}, err
	}
	defer conn.Release()
	return pgsweep.Migrate(ctx, conn.Conn(), schema)
}
