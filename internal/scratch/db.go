package scratch

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// ErrUsage is wrapped by errors that are the caller's (a bad flag value): the
// CLI exits with status 2 for them.
var ErrUsage = errors.New("usage")

// URLUsage is the help text of --database-url for the bench workloads.
const URLUsage = "PostgreSQL URL or DSN (default: the PG* variables; $PGSWEEP_DATABASE_URL, the runner's database, is never read)"

// DB is the database a scratch command works on: --database-url, and
// --schema, the schema pgsweep is installed in. Unlike the other commands'
// flags it never reads PGSWEEP_DATABASE_URL, the runner's (often the
// production) database: an empty URL means the standard PG* variables.
type DB struct {
	URL    string
	Schema string
}

// RegisterFlags registers --database-url (help text urlUsage) and --schema
// (default schema, help text schemaUsage) on fs.
func (d *DB) RegisterFlags(fs *flag.FlagSet, urlUsage, schema, schemaUsage string) {
	fs.StringVar(&d.URL, "database-url", "", urlUsage)
	fs.StringVar(&d.Schema, "schema", schema, schemaUsage)
}

// Validate checks --schema; the error wraps ErrUsage.
func (d *DB) Validate() error {
	if err := pgsweep.ValidateSchema(d.Schema); err != nil {
		return fmt.Errorf("%w: --schema: %v", ErrUsage, err)
	}
	return nil
}

// ConnConfig parses URL ("" reads the PG* variables and nothing else).
func (d *DB) ConnConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(d.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: --database-url: %v", ErrUsage, redact(err))
	}
	pgsweep.PinSearchPath(cfg)
	return cfg, nil
}

// Connect opens one connection.
func (d *DB) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := d.ConnConfig()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, d.connectError(cfg, err)
	}
	return conn, nil
}

// Pool opens a pool of at most maxConns connections (0: pgx's default) and
// checks that it connects.
func (d *DB) Pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: --database-url: %v", ErrUsage, redact(err))
	}
	pgsweep.PinSearchPath(cfg.ConnConfig)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, d.connectError(cfg.ConnConfig, err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, d.connectError(cfg.ConnConfig, err)
	}
	return p, nil
}

// connectError names the target without its password and, when no
// --database-url was given, says where the target came from.
func (d *DB) connectError(cfg *pgx.ConnConfig, err error) error {
	target := fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	if d.URL == "" {
		return fmt.Errorf("connect to %s (no --database-url: the PG* variables; PGSWEEP_DATABASE_URL is never read here): %w", target, redact(err))
	}
	return fmt.Errorf("connect to %s: %w", target, redact(err))
}

// redact keeps passwords out of messages: pgx's errors can quote the
// connection string.
func redact(err error) error { return redactedError{err} }

type redactedError struct{ err error }

// Error returns the wrapped error's text with any password removed.
func (r redactedError) Error() string { return pgsweep.RedactSecrets(r.err.Error()) }

// Unwrap returns the original error, whose text may still hold a password.
func (r redactedError) Unwrap() error { return r.err }
