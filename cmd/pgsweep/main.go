// Command pgsweep installs pgsweep into PostgreSQL and runs its maintenance.
//
//	pgsweep migrate    install or upgrade the SQL (tern migrations, embedded);
//	                   --check: exit 0 current, 1 behind, 2 newer than the binary
//	pgsweep version    the binary's version and, given a database, the database's
//	pgsweep run        run maintenance in a loop (any number of replicas)
//	pgsweep status     queues, leases, retention policies, recent passes
//	pgsweep cron       schedule or unschedule maintain() with pg_cron
//	pgsweep uninstall  remove pgsweep from a database (schema, cron job, roles)
//	pgsweep demo       show pgsweep at work in a scratch schema
//	pgsweep bench      measure pgsweep against its baselines in scratch schemas
//	                   (only in the bench build: go build -tags bench; the
//	                   production binary carries no baselines)
//
// migrate, version, run, status and cron take --database-url;
// PGSWEEP_DATABASE_URL and then the standard PG* variables are used when it
// is not given. uninstall needs --database-url (it never falls back to
// PGSWEEP_DATABASE_URL). demo and bench never read PGSWEEP_DATABASE_URL, the
// runner's (often the production) database: without --database-url they
// use the PG* variables only, and they work only in schemas they created.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one pgsweep sub-command.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, out io.Writer) error
}

var commands = map[string]command{
	"migrate":   {"install or upgrade pgsweep's SQL in a database", runMigrate},
	"demo":      {"show leases, queues and retention at work", runDemo},
	"run":       {"run maintenance (recovery, retention) in a loop; any number of replicas", runRun},
	"status":    {"show queues, leases, retention policies and recent maintenance passes", runStatus},
	"cron":      {"schedule or unschedule maintain() with pg_cron", runCron},
	"version":   {"print the binary's version and, given a database, the database's", runVersion},
	"uninstall": {"remove pgsweep from a database: cron job, schema, the roles it created", runUninstall},
	"relay":     {"publish an outbox queue to NATS JetStream or RabbitMQ; any number of replicas", runRelay},
	"queue":     {"pause, resume, purge or drop a queue; queue and lane statistics", runQueue},
	"schedule":  {"periodic schedules: list, create, pause, resume or drop", runSchedule},
	"ui":        {"serve the dashboard: queues, lanes, maintenance, leases, retention", runUI},
}

// errUsage marks errors that are the caller's: exit 2 instead of 1.
var errUsage = errors.New("usage")

// exitError ends a command with an exit status of its own (migrate --check's
// 1, 2 and 3); err, when not nil, is printed first.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(errOut)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(errOut, "pgsweep: unknown command %q\n\n", args[0])
		if args[0] == "bench" {
			fmt.Fprint(errOut, "pgsweep bench is in the bench build only: make build-bench (go build -tags bench ./cmd/pgsweep)\n\n")
		}
		usage(errOut)
		return 2
	}
	if err := cmd.run(ctx, args[1:], out); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ee exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintf(errOut, "pgsweep %s: %v\n", args[0], ee.err)
			}
			return ee.code
		}
		fmt.Fprintf(errOut, "pgsweep %s: %v\n", args[0], err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: pgsweep <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'pgsweep <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("pgsweep "+name, flag.ContinueOnError)
	return fs
}

// parseFlags parses args and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("%w: --log-format must be text or json, got %q", errUsage, format)
	}
}
