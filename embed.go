package pgsweep

import (
	"embed"
	"io/fs"
)

// migrationFiles holds the tern migrations. Each carries the full text of
// the functions it installs (copied from sql/functions when it was written,
// frozen once shipped), so nothing else is needed to apply them.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// MigrationsFS returns the embedded migrations directory (NNN_*.sql), laid
// out the way tern's LoadMigrations expects.
func MigrationsFS() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}
