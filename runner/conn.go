package runner

import (
	"context"
	"errors"
	"fmt"
	"github.com/pgsweep/pgsweep"
	"strings"
	"sync/atomic"
	"time"

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

// DefaultConnectionCheckInterval is the client_connection_check_interval
// that ConnectConfig and ConnectURL ask the server for on every connection
// they open (pgsweep.DefaultConnectionCheckInterval: the Worker uses the same).
const DefaultConnectionCheckInterval = pgsweep.DefaultConnectionCheckInterval

// ConnectionCheckParam is the PostgreSQL setting behind DefaultConnectionCheckInterval.
const ConnectionCheckParam = pgsweep.ConnectionCheckParam

// SetConnectionCheckInterval is pgsweep.SetConnectionCheckInterval.
func SetConnectionCheckInterval(cfg *pgx.ConnConfig, d time.Duration) {
	pgsweep.SetConnectionCheckInterval(cfg, d)
}

// ConnectOption changes how the connections of ConnectConfig and ConnectURL
// are opened.
type ConnectOption func(*connectSettings)

type connectSettings struct {
	checkInterval time.Duration
}

// WithConnectionCheckInterval sets the client_connection_check_interval the
// connections ask for (DefaultConnectionCheckInterval when this option is not
// given); 0 leaves the server's setting.
func WithConnectionCheckInterval(d time.Duration) ConnectOption {
	return func(s *connectSettings) { s.checkInterval = d }
}

// ConnectConfig returns a Connector that opens a new connection with cfg for
// every pass, named applicationName in pg_stat_activity (when not empty), with
// client_connection_check_interval set to DefaultConnectionCheckInterval
// unless an option or cfg says otherwise, and search_path pinned to
// pgsweep.SafeSearchPath (pgsweep.PinSearchPath).
//
// A server or pooler that refuses the parameter at startup (PgBouncer does,
// unless it is listed in its ignore_startup_parameters) fails the first
// connection: the Connector then connects again without it, and leaves it out
// from then on.
func ConnectConfig(cfg *pgx.ConnConfig, applicationName string, opts ...ConnectOption) Connector {
	s := connectSettings{checkInterval: DefaultConnectionCheckInterval}
	for _, o := range opts {
		o(&s)
	}
	var refused atomic.Bool // the server refused the check interval at startup
	return func(ctx context.Context) (Conn, error) {
		c := cfg.Copy()
		if c.RuntimeParams == nil {
			c.RuntimeParams = map[string]string{}
		}
		if applicationName != "" {
			if len(applicationName) > 63 {
				applicationName = applicationName[:63]
			}
			c.RuntimeParams["application_name"] = applicationName
		}
		pgsweep.PinSearchPath(c)
		_, userSet := c.RuntimeParams[ConnectionCheckParam]
		if !refused.Load() {
			SetConnectionCheckInterval(c, s.checkInterval)
		}
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil && !userSet && refusedParam(err) {
			refused.Store(true)
			c = c.Copy()
			delete(c.RuntimeParams, ConnectionCheckParam)
			return pgx.ConnectConfig(ctx, c)
		}
		return conn, err
	}
}

// refusedParam tells whether a connect error is the server (or a pooler in
// front of it) refusing the client_connection_check_interval startup
// parameter.
func refusedParam(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.Contains(pgErr.Message, ConnectionCheckParam)
}

// ConnectURL is ConnectConfig for a connection string (URL or key=value DSN;
// empty: the PG* environment variables). The error never quotes a password.
func ConnectURL(connString, applicationName string, opts ...ConnectOption) (Connector, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("runner: parse connection string: %s", redactErr(err))
	}
	return ConnectConfig(cfg, applicationName, opts...), nil
}
