package pgsweep

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"
)

// DefaultSchema is the schema pgsweep installs into unless told otherwise.
const DefaultSchema = "pgsweep"

// VersionTable is the name of tern's version table inside the target schema.
const VersionTable = "schema_version"

// migrateLockKey serialises pgsweep migrations of every schema in a database.
const migrateLockKey = int64(0x7067737765657031) // "pgsweep1"

// ternLockKey is the advisory lock the tern CLI holds while it migrates
// (tern's migrate.lockNum): Migrate holds it too, so that a tern CLI install
// and pgsweep migrate of the same database wait for each other.
const ternLockKey = int64(9628173550095224)

var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidateSchema reports whether name can be used as pgsweep's schema. Names
// are restricted to lower-case unquoted identifiers so that the same name works
// in templates, in psql and in pg_cron commands without quoting surprises.
func ValidateSchema(name string) error {
	if !schemaPattern.MatchString(name) {
		return fmt.Errorf("schema %q: must match %s (lower-case letters, digits and _, at most 63 characters)", name, schemaPattern)
	}
	return nil
}

// Migration is one step of the install, as it would be applied.
type Migration struct {
	// Version is the schema version once this step is applied: 1 for the
	// first step, counting up.
	Version int32
	// Name is the migration's file name, e.g. "001_leases.sql".
	Name string
	// SQL is the step's script with the schema filled in.
	SQL string
}

// MigrateResult tells what a Migrate call did.
type MigrateResult struct {
	// From is the version installed before the call (0: none) and To the
	// version after it; they are equal when nothing was applied. After a
	// failed migration To is 0: earlier steps may have been committed, so
	// read CurrentVersion to learn where the schema stands.
	From, To int32
}

// Migrations renders every migration for schema, in order, without touching
// any database: what `pgsweep migrate --dry-run` prints and what the tern CLI
// would apply with the same [data] schema.
func Migrations(schema string) ([]Migration, error) {
	m, err := loadMigrator(context.Background(), nil, schema)
	if err != nil {
		return nil, err
	}
	out := make([]Migration, 0, len(m.Migrations))
	for _, mg := range m.Migrations {
		out = append(out, Migration{Version: mg.Sequence, Name: mg.Name, SQL: mg.UpSQL})
	}
	return out, nil
}

func loadMigrator(ctx context.Context, conn *pgx.Conn, schema string) (*migrate.Migrator, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	m, err := migrate.NewMigratorEx(ctx, conn, schema+"."+VersionTable, &migrate.MigratorOptions{})
	if err != nil {
		return nil, fmt.Errorf("prepare version table %s.%s: %w", schema, VersionTable, err)
	}
	m.Data["schema"] = schema
	if err := m.LoadMigrations(MigrationsFS()); err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return m, nil
}

// migrationName is how tern names a migration file: its sequence number, an
// underscore, a name, ".sql".
var migrationName = regexp.MustCompile(`^(\d+)_.+\.sql$`)

// LatestVersion returns the schema version the embedded migrations install:
// the number of the last migration (tern numbers them 1, 2, … without gaps).
// A database at this version is current for this binary; `pgsweep migrate
// --check` compares with it.
func LatestVersion() int32 { return latestVersion() }

var latestVersion = sync.OnceValue(func() int32 {
	entries, err := fs.ReadDir(MigrationsFS(), ".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var latest int32
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil {
			panic(fmt.Sprintf("migration %s: %v", e.Name(), err))
		}
		latest = max(latest, int32(n))
	}
	return latest
})

// CurrentVersion returns the migration version installed in schema, 0 when
// pgsweep is not installed there. It changes nothing.
func CurrentVersion(ctx context.Context, db DBTX, schema string) (int32, error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	var v int32
	var exists bool
	if err := db.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`, schema+"."+VersionTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	if err := db.QueryRow(ctx, "SELECT version FROM "+pgx.Identifier{schema, VersionTable}.Sanitize()).Scan(&v); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
		return 0, fmt.Errorf("read version: %w", err)
	}
	return v, nil
}

// Migrate installs or upgrades pgsweep in schema on conn. It is safe to call
// from many processes at once (they serialise on an advisory lock) and a
// no-op when the schema is current. Each migration runs in its own
// transaction.
//
// Every statement it sends is immune to the connection's search_path (see
// SafeSearchPath): tern renders the migrations, but Migrate applies them
// itself, keeping tern's version table, because tern's own statements
// (its advisory lock, after a RESET ALL) resolve names through the
// session's search_path.
func Migrate(ctx context.Context, conn *pgx.Conn, schema string) (MigrateResult, error) {
	return MigrateTo(ctx, conn, schema, -1)
}

// MigrateTo is Migrate stopping at version (-1: the latest). It only moves
// forward: a target below the installed version is an error, because down
// migrations would drop data. Migrations are frozen once shipped, so the
// install it leaves at version N is the release at N.
func MigrateTo(ctx context.Context, conn *pgx.Conn, schema string, version int32) (MigrateResult, error) {
	if err := ValidateSchema(schema); err != nil {
		return MigrateResult{}, err
	}
	for _, key := range []int64{migrateLockKey, ternLockKey} {
		if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1::pg_catalog.int8)", key); err != nil {
			return MigrateResult{}, fmt.Errorf("migrate lock: %w", err)
		}
		defer func() {
			// A failed unlock leaves the lock to the session's end; the
			// caller's error, if any, is the more useful one.
			_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_advisory_unlock($1::pg_catalog.int8)", key)
		}()
	}

	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return MigrateResult{}, fmt.Errorf("create schema %s: %w", schema, err)
	}
	// On Citus a migration changes distributed tables and functions in one
	// transaction, which needs sequential shard commands (Citus refuses
	// function DDL after a parallel ALTER TABLE on the shards). Elsewhere the
	// setting is an unused placeholder. Session level: each migration runs
	// in its own transaction on this connection.
	if _, err := conn.Exec(ctx, "SET citus.multi_shard_modify_mode TO 'sequential'"); err != nil {
		return MigrateResult{}, fmt.Errorf("migrate %s: %w", schema, err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "RESET citus.multi_shard_modify_mode") }()
	m, err := loadMigrator(ctx, nil, schema)
	if err != nil {
		return MigrateResult{}, err
	}
	vt := pgx.Identifier{schema, VersionTable}.Sanitize()
	// tern's version table: one row, the number of the last migration applied.
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+vt+" (version pg_catalog.int4 NOT NULL)"); err != nil {
		return MigrateResult{}, fmt.Errorf("prepare version table %s: %w", vt, err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+vt+" (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM "+vt+")"); err != nil {
		return MigrateResult{}, fmt.Errorf("prepare version table %s: %w", vt, err)
	}
	from, err := CurrentVersion(ctx, conn, schema)
	if err != nil {
		return MigrateResult{}, err
	}
	target := version
	if target < 0 {
		target = int32(len(m.Migrations))
	}
	if target < from || target > int32(len(m.Migrations)) {
		return MigrateResult{From: from, To: from}, fmt.Errorf("migrate %s: target version %d is outside %d (installed) to %d (latest)",
			schema, target, from, len(m.Migrations))
	}
	for v := from; v < target; v++ {
		if err := applyMigration(ctx, conn, vt, m.Migrations[v]); err != nil {
			return MigrateResult{From: from}, fmt.Errorf("migrate %s: %w", schema, describeMigrationErr(err))
		}
	}
	to, err := CurrentVersion(ctx, conn, schema)
	if err != nil {
		return MigrateResult{From: from}, err
	}
	return MigrateResult{From: from, To: to}, nil
}

// applyMigration runs one migration and records its number in the version
// table vt, in one transaction, as tern does (its errors are tern's
// MigrationPgError).
func applyMigration(ctx context.Context, conn *pgx.Conn, vt string, mg *migrate.Migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, mg.UpSQL); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return migrate.MigrationPgError{MigrationName: mg.Name, Sql: mg.UpSQL, PgError: pgErr}
		}
		return fmt.Errorf("migration %s: %w", mg.Name, err)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+vt+" SET version = $1::pg_catalog.int4", mg.Sequence); err != nil {
		return fmt.Errorf("migration %s: record version: %w", mg.Name, err)
	}
	return tx.Commit(ctx)
}

// describeMigrationErr keeps tern's location information but drops the full
// SQL text it embeds, which can be thousands of lines.
func describeMigrationErr(err error) error {
	var mErr migrate.MigrationPgError
	if errors.As(err, &mErr) {
		if mErr.PgError != nil {
			return fmt.Errorf("migration %s failed: %w", mErr.MigrationName, mErr.PgError)
		}
		return fmt.Errorf("migration %s failed", mErr.MigrationName)
	}
	return err
}

// RenderMigrations renders migrations as one SQL script with a header before
// each step.
func RenderMigrations(ms []Migration) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "-- migration %d: %s\n%s\n\n", m.Version, m.Name, m.SQL)
	}
	return b.String()
}
