package main

import (
	"context"
	"fmt"
	"io"

	"github.com/pgsweep/pgsweep"
)

func runMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("migrate")
	var db dbFlags
	db.register(fs)
	dryRun := fs.Bool("dry-run", false, "print the SQL that would run and change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	if *dryRun {
		return migrateDryRun(ctx, &db, out)
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pgsweep.Migrate(ctx, conn, db.schema)
	if err != nil {
		return err
	}
	if res.From == res.To {
		fmt.Fprintf(out, "schema %s is up to date at version %d\n", db.schema, res.To)
	} else {
		fmt.Fprintf(out, "schema %s migrated from version %d to %d\n", db.schema, res.From, res.To)
	}
	return nil
}

// migrateDryRun prints the migrations that a real run would apply. With a
// reachable database it prints only those not yet applied; without one, all.
func migrateDryRun(ctx context.Context, db *dbFlags, out io.Writer) error {
	ms, err := pgsweep.Migrations(db.schema)
	if err != nil {
		return err
	}
	var current int32
	if db.connString() != "" {
		conn, err := db.connect(ctx)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if current, err = pgsweep.CurrentVersion(ctx, conn, db.schema); err != nil {
			return err
		}
	}
	var pending []pgsweep.Migration
	for _, m := range ms {
		if m.Version > current {
			pending = append(pending, m)
		}
	}
	fmt.Fprintf(out, "-- pgsweep migrate --dry-run: schema %s at version %d, %d migration(s) pending\n", db.schema, current, len(pending))
	if len(pending) > 0 {
		fmt.Fprintf(out, "CREATE SCHEMA IF NOT EXISTS %s;\n\n", db.schema)
	}
	fmt.Fprint(out, pgsweep.RenderMigrations(pending))
	return nil
}
