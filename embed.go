package pgsweep

import (
	"embed"
	"io/fs"
)

// migrationFiles holds the tern migrations and the function files they include
// as templates (migrations/functions/*.sql, also reachable as sql/functions).
//
//go:embed migrations/*.sql migrations/functions/*.sql
var migrationFiles embed.FS

// MigrationsFS returns the embedded migrations directory: NNN_*.sql at its
// root and the shared function templates under functions/. It is laid out the
// way tern's LoadMigrations expects.
func MigrationsFS() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}
