package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// dbFlags are the connection flags every command shares.
type dbFlags struct {
	url    string
	schema string
}

// newDBFlagSet is the flag set of a command that works on an install:
// --database-url and --schema registered in it.
func newDBFlagSet(name string) (*flag.FlagSet, *dbFlags) {
	fs := newFlagSet(name)
	db := &dbFlags{}
	db.registerWithSchema(fs, pgsweep.DefaultSchema, "schema pgsweep is installed in")
	return fs, db
}

func (d *dbFlags) registerWithSchema(fs *flag.FlagSet, schema, usage string) {
	fs.StringVar(&d.url, "database-url", "", "PostgreSQL URL or DSN (default: $PGSWEEP_DATABASE_URL, then the PG* variables)")
	fs.StringVar(&d.schema, "schema", schema, usage)
}

// connString returns the connection string to use: the flag, then
// PGSWEEP_DATABASE_URL, then "" which makes pgx read the PG* variables.
func (d *dbFlags) connString() string {
	if d.url != "" {
		return d.url
	}
	return os.Getenv("PGSWEEP_DATABASE_URL")
}

func (d *dbFlags) validate() error {
	if err := pgsweep.ValidateSchema(d.schema); err != nil {
		return fmt.Errorf("%w: --schema: %v", errUsage, err)
	}
	return nil
}

// connect and pool pin search_path (pgsweep.PinSearchPath), as every
// connection pgsweep opens itself does.
func (d *dbFlags) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(d.connString())
	if err != nil {
		return nil, fmt.Errorf("%w: --database-url: %v", errUsage, redact(err))
	}
	pgsweep.PinSearchPath(cfg)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", describeTarget(cfg), redact(err))
	}
	return conn, nil
}

func (d *dbFlags) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.connString())
	if err != nil {
		return nil, fmt.Errorf("%w: --database-url: %v", errUsage, redact(err))
	}
	pgsweep.PinSearchPath(cfg.ConnConfig)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", describeTarget(cfg.ConnConfig), redact(err))
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("connect to %s: %w", describeTarget(cfg.ConnConfig), redact(err))
	}
	return p, nil
}

// describeTarget names a database without its password, for logs and errors.
func describeTarget(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}

// redact keeps passwords out of messages: pgx's parse errors can quote the
// connection string.
func redact(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err}
}

type redactedError struct{ err error }

// Error returns the wrapped error's text with any password removed.
func (r redactedError) Error() string { return pgsweep.RedactSecrets(r.err.Error()) }

// Unwrap returns the original error, whose text may still hold a password.
func (r redactedError) Unwrap() error { return r.err }
