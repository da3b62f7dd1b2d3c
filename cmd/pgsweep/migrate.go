package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
)

func runMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("migrate")
	dryRun := fs.Bool("dry-run", false, "print the SQL that would run and change nothing")
	check := fs.Bool("check", false, "change nothing; exit 0 when the database is current, 1 when it is behind or not installed, "+
		"2 when it is newer than this binary, 3 when it cannot tell (an error)")
	citus := fs.Bool("citus", false, "after migrating, distribute the install over the Citus cluster: SELECT <schema>.citus_distribute() "+
		"(on the coordinator, after every migration; docs/operations.md, \"Scaling out with Citus\")")
	err := parseFlags(fs, args)
	if err == nil && *check && *dryRun {
		err = fmt.Errorf("%w: --check and --dry-run exclude each other", errUsage)
	}
	if err == nil && *citus && (*check || *dryRun) {
		err = fmt.Errorf("%w: --citus changes the database; it excludes --check and --dry-run", errUsage)
	}
	if err == nil {
		err = db.validate()
	}
	if err != nil {
		if hasCheckFlag(args) && !errors.Is(err, flag.ErrHelp) {
			// 2 means "the database is newer" under --check.
			return exitError{3, err}
		}
		return err
	}
	if *check {
		return migrateCheck(ctx, db, out)
	}
	if *dryRun {
		return migrateDryRun(ctx, db, out)
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
	if *citus {
		return migrateCitus(ctx, conn, db.schema, out)
	}
	return nil
}

// migrateCitus is `pgsweep migrate --citus`'s second step: citus_distribute()
// on the coordinator (idempotent, so it runs after every migration), and one
// line saying where everything is. Without Citus the SQL says what to do
// (55000 and a hint), and the hint is printed with the error.
func migrateCitus(ctx context.Context, conn *pgx.Conn, schema string, out io.Writer) error {
	client, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		return err
	}
	objs, err := client.CitusDistribute(ctx)
	if err != nil {
		return citusError(err)
	}
	counts := map[string]int{}
	changed := 0
	for _, o := range objs {
		counts[o.Kind+": "+o.Placement]++
		if o.Changed {
			changed++
		}
	}
	delegated := 0
	for k, n := range counts {
		if strings.HasPrefix(k, "function: delegated") {
			delegated += n
		}
	}
	fmt.Fprintf(out, "schema %s distributed on Citus: %d tables by queue, %d reference tables, %d functions delegated by p_queue, "+
		"%d on every node; %d objects changed\n", schema, counts["table: distributed by queue"], counts["table: reference"], delegated,
		counts["function: on every node"], changed)
	return nil
}

func citusError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Hint != "" {
		return fmt.Errorf("citus_distribute: %w\nhint: %s", err, pgErr.Hint)
	}
	return fmt.Errorf("citus_distribute: %w", err)
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

// migrateCheck is `pgsweep migrate --check`, for deploy pipelines and init
// containers: it changes nothing, prints one line and exits 0 when the
// database is current, 1 when it is behind or pgsweep is not installed, 2
// when it is newer than this binary (which lacks its newest migrations), 3
// when it cannot tell (cannot connect, cannot read the version).
func migrateCheck(ctx context.Context, db *dbFlags, out io.Writer) error {
	conn, err := db.connect(ctx)
	if err != nil {
		return exitError{3, err}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := pgsweep.DatabaseVersion(ctx, conn, db.schema)
	if err != nil {
		return exitError{3, err}
	}
	switch v.Status() {
	case pgsweep.Current:
		fmt.Fprintf(out, "current: schema %s is at %s, this binary's schema (pgsweep %s)\n", db.schema, v.Version(), pgsweep.Version)
		return nil
	case pgsweep.Behind:
		fmt.Fprintf(out, "behind: schema %s is at %s, this binary is %s: %d migration(s) to apply (pgsweep migrate)\n",
			db.schema, v.Version(), pgsweep.Version, v.Pending())
		return exitError{code: 1}
	case pgsweep.Ahead:
		fmt.Fprintf(out, "ahead: schema %s is at %s, newer than this binary (%s): upgrade the pgsweep binary\n",
			db.schema, v.Version(), pgsweep.Version)
		return exitError{code: 2}
	default:
		fmt.Fprintf(out, "not installed: schema %s holds no pgsweep; this binary installs %s (pgsweep migrate)\n", db.schema, pgsweep.Version)
		return exitError{code: 1}
	}
}

// hasCheckFlag reports whether args ask for --check, also when parsing them
// failed before it was reached.
func hasCheckFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "check" && (!hasValue || value != "false" && value != "0") {
			return true
		}
	}
	return false
}
