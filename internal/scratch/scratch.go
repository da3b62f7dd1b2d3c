// Package scratch is what pgsweep's scratch commands (pgsweep demo and the
// pgsweep bench workloads) share: the guard that lets them create, re-create
// and drop only schemas they created and marked themselves, and their
// connection flags, which never read the runner's PGSWEEP_DATABASE_URL.
//
// A scratch schema is marked by its comment, set in the transaction that
// creates the schema:
//
//	COMMENT ON SCHEMA x IS 'pgsweep scratch schema (created by pgsweep demo); safe to drop'
//
// A schema that exists without the marker of the command at hand is refused
// (ErrNotScratch) and left exactly as it was.
package scratch

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// ErrNotScratch is wrapped by the error of Create, Drop and Reinstall when the
// schema exists but is not the scratch schema of the command: nothing was
// dropped or changed.
var ErrNotScratch = errors.New("not a pgsweep scratch schema")

// markerPrefix and markerSuffix surround the command in every scratch
// command's marker.
const (
	markerPrefix = "pgsweep scratch schema (created by "
	markerSuffix = "); safe to drop"
)

// Marker returns the comment that marks a schema as the scratch schema of
// command (for example "demo" or "bench claim").
func Marker(command string) string {
	return markerPrefix + "pgsweep " + command + markerSuffix
}

// Beginner starts transactions: a *pgx.Conn, a *pgxpool.Pool or a *pgxpool.Conn.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Create makes schema an empty scratch schema of command, in one
// transaction: it creates the schema and sets its marker when the schema does
// not exist, and drops it with everything in it (the roles its pgsweep
// install created too) and creates it afresh when it is already command's
// marked scratch schema. Any other schema that exists is
// refused with an error that wraps ErrNotScratch and says why; then nothing is
// changed.
func Create(ctx context.Context, db Beginner, schema, command string) error {
	return inTx(ctx, db, func(tx pgx.Tx) error {
		exists, err := check(ctx, tx, schema, command)
		if err != nil {
			return err
		}
		id := pgx.Identifier{schema}.Sanitize()
		if exists {
			if err := dropOwn(ctx, tx, schema); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+id); err != nil {
			return fmt.Errorf("create scratch schema %q: %w", schema, err)
		}
		// COMMENT takes no parameters: the marker is a literal, quoted here.
		if _, err := tx.Exec(ctx, "COMMENT ON SCHEMA "+id+" IS "+quoteLiteral(Marker(command))); err != nil {
			return fmt.Errorf("mark scratch schema %q: %w", schema, err)
		}
		return nil
	})
}

// Drop drops command's scratch schema with everything in it (and, when it
// holds a pgsweep install, the roles the install created). A schema that
// does not exist is not an error; one that exists without command's marker is
// refused (ErrNotScratch) and left as it was.
func Drop(ctx context.Context, db Beginner, schema, command string) error {
	return inTx(ctx, db, func(tx pgx.Tx) error {
		exists, err := check(ctx, tx, schema, command)
		if err != nil || !exists {
			return err
		}
		return dropOwn(ctx, tx, schema)
	})
}

// dropOwn drops a scratch schema that check found to be the command's own.
// One that holds a pgsweep install is uninstalled (pgsweep.Uninstall with
// Force, in a savepoint of tx), so that the roles the install created
// (<schema>_owner, …: cluster-wide) go with it; any other is dropped with
// everything in it.
func dropOwn(ctx context.Context, tx pgx.Tx, schema string) error {
	_, err := pgsweep.Uninstall(ctx, tx, schema, pgsweep.UninstallOptions{Force: true})
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgsweep.ErrNotInstalled) {
		return fmt.Errorf("drop scratch schema %q: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop scratch schema %q: %w", schema, err)
	}
	return nil
}

// Reinstall makes schema a fresh scratch schema of command (Create) and
// installs pgsweep into it: how the demo and the benchmarks that install
// pgsweep start from a known state.
func Reinstall(ctx context.Context, pool *pgxpool.Pool, schema, command string) (pgsweep.MigrateResult, error) {
	if err := Create(ctx, pool, schema, command); err != nil {
		return pgsweep.MigrateResult{}, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return pgsweep.MigrateResult{}, err
	}
	defer conn.Release()
	return pgsweep.Migrate(ctx, conn.Conn(), schema)
}

// check reports whether schema exists, and refuses (ErrNotScratch) one that
// exists without command's marker.
func check(ctx context.Context, tx pgx.Tx, schema, command string) (exists bool, err error) {
	var comment *string
	err = tx.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up schema %q: %w", schema, err)
	}
	if comment != nil && *comment == Marker(command) {
		return true, nil
	}
	var why string
	switch {
	case comment == nil:
		why = "it has no comment"
	case strings.HasPrefix(*comment, markerPrefix+"pgsweep ") && strings.HasSuffix(*comment, markerSuffix):
		other := strings.TrimSuffix(strings.TrimPrefix(*comment, markerPrefix), markerSuffix)
		why = fmt.Sprintf("it is the scratch schema of %s", other)
	default:
		why = fmt.Sprintf("its comment is %q", *comment)
	}
	return true, fmt.Errorf("refusing to use schema %q: it exists and is %w of pgsweep %s (%s; pgsweep %s marks the schemas "+
		"it creates with the comment %q); nothing was dropped or changed. Choose another schema, or, if %q is a leftover "+
		"of an older pgsweep's scratch run, drop it yourself: DROP SCHEMA %s CASCADE",
		schema, ErrNotScratch, command, why, command, Marker(command), schema, pgx.Identifier{schema}.Sanitize())
}

func inTx(ctx context.Context, db Beginner, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// quoteLiteral quotes s as an SQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
