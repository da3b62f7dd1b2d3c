package runner

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Conn is the connection one pass runs on. *pgx.Conn satisfies it (and so
// does pgxmock's connection, for tests).
type Conn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Close(ctx context.Context) error
}

// Connector opens the connection for one pass. The runner closes it when the
// pass ends, so nothing is held between passes.
type Connector func(ctx context.Context) (Conn, error)

// ConnectConfig returns a Connector that opens a new connection with cfg for
// every pass, named applicationName in pg_stat_activity (when not empty).
func ConnectConfig(cfg *pgx.ConnConfig, applicationName string) Connector {
	return func(ctx context.Context) (Conn, error) {
		c := cfg.Copy()
		if applicationName != "" {
			if len(applicationName) > 63 {
				applicationName = applicationName[:63]
			}
			c.RuntimeParams["application_name"] = applicationName
		}
		return pgx.ConnectConfig(ctx, c)
	}
}

// ConnectURL is ConnectConfig for a connection string (URL or key=value DSN;
// empty: the PG* environment variables). The error never quotes a password.
func ConnectURL(connString, applicationName string) (Connector, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("runner: parse connection string: %s", redactErr(err))
	}
	return ConnectConfig(cfg, applicationName), nil
}
