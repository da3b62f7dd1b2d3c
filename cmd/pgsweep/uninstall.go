package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pgsweep/pgsweep"
)

// runUninstall is `pgsweep uninstall`, a thin wrapper of pgsweep.Uninstall
// (sql/uninstall.sql does the same from psql). It needs --database-url: a
// command that drops a schema never falls back to PGSWEEP_DATABASE_URL.
func runUninstall(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("uninstall")
	var db dbFlags
	fs.StringVar(&db.url, "database-url", "", "PostgreSQL URL or DSN of the database to uninstall from (required; "+
		"PGSWEEP_DATABASE_URL is never read; PG* variables fill what the DSN leaves out)")
	fs.StringVar(&db.schema, "schema", pgsweep.DefaultSchema, "schema pgsweep is installed in")
	force := fs.Bool("force", false, "uninstall even though messages are pending, in flight or scheduled: they are lost")
	dryRun := fs.Bool("dry-run", false, "print the SQL that would run and change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if db.url == "" {
		return fmt.Errorf("%w: --database-url is required (uninstall never reads PGSWEEP_DATABASE_URL)", errUsage)
	}
	if err := db.validate(); err != nil {
		return err
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pgsweep.Uninstall(ctx, conn, db.schema, pgsweep.UninstallOptions{Force: *force, DryRun: *dryRun})
	if *dryRun && len(res.SQL) > 0 {
		fmt.Fprintf(out, "-- pgsweep uninstall --dry-run: nothing was changed\n%s", res.Script())
	}
	if err != nil {
		return err
	}
	if *dryRun {
		return nil
	}
	var jobs []string
	for _, id := range res.CronJobs {
		jobs = append(jobs, fmt.Sprint(id))
	}
	fmt.Fprintf(out, "pgsweep %s uninstalled from schema %s of %s: %d message(s) and %d dead letter(s) dropped; pg_cron jobs unscheduled: %s; "+
		"roles dropped: %s; roles kept (they existed before the install): %s\n",
		pgsweep.ReleaseVersion(res.SchemaVersion), db.schema, describeTarget(conn.Config()), res.Messages.Live(), res.Messages.Dead,
		orNone(jobs), orNone(res.Roles), orNone(res.KeptRoles))
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
