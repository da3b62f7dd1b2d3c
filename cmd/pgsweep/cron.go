package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
)

// runCron is `pgsweep cron schedule|unschedule`: maintain() run by pg_cron
// inside the database instead of by `pgsweep run`.
func runCron(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "schedule" && args[0] != "unschedule") {
		fmt.Fprintln(out, "usage: pgsweep cron schedule [--schedule '* * * * *'] [--budget 50s] | pgsweep cron unschedule")
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return fmt.Errorf("%w: want schedule or unschedule", errUsage)
	}
	sub := args[0]
	fs, db := newDBFlagSet("cron " + sub)
	schedule := fs.String("schedule", "* * * * *", "pg_cron schedule (schedule only)")
	budget := fs.Duration("budget", 50*time.Second, "time budget of one pass, 1s to 1h; keep it below the schedule's period (schedule only)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	client, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.schema})
	if err != nil {
		return err
	}
	if sub == "unschedule" {
		removed, err := client.CronUnschedule(ctx)
		if err != nil {
			return withHint(err)
		}
		if removed {
			fmt.Fprintf(out, "unscheduled the maintain job of schema %s\n", db.schema)
		} else {
			fmt.Fprintf(out, "no maintain job was scheduled for schema %s\n", db.schema)
		}
		return nil
	}
	id, err := client.CronSchedule(ctx, *schedule, *budget)
	if err != nil {
		return withHint(err)
	}
	job, found, err := client.CronJob(ctx)
	if err == nil && !found {
		err = fmt.Errorf("pg_cron job %d was scheduled but cron_job() does not show it", id)
	}
	if err != nil {
		return withHint(err)
	}
	fmt.Fprintf(out, "pg_cron job %d runs %q on %q\n", id, job.Command, *schedule)
	return nil
}

// withHint adds the database's HINT to an error message: pgx leaves it out,
// and pgsweep's hints say what to do instead.
func withHint(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Hint != "" {
		return fmt.Errorf("%w\nhint: %s", err, pgErr.Hint)
	}
	return err
}
