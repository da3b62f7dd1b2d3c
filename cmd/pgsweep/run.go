package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep/runner"
)

// runRun is `pgsweep run`: the maintenance runner for databases without
// pg_cron. Run as many replicas as you like; they coordinate in the database.
func runRun(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("run")
	svc := addServiceFlags(fs, "127.0.0.1:9188", "log every pass, also those that did nothing")
	withUI := fs.Bool("ui", false, "serve the dashboard under /ui/ on --http-addr too (docs/dashboard.md; a non-loopback --http-addr then needs --basic-auth-file)")
	uf := addUIFlags(fs)
	interval := fs.Duration("interval", 0, "pause between passes (default: the runner_interval setting, read after every pass)")
	jitter := fs.Duration("jitter", 0, "random +/- spread of the pause (default: the runner_jitter setting; negative: none)")
	budget := fs.Duration("budget", 30*time.Second, "time budget of one pass, 1s to 1h")
	owner := fs.String("owner", "", "lease owner identity, unique per replica (default: host:pid:random)")
	once := fs.Bool("once", false, "run one pass, print what it did and exit")
	plainDetach := fs.Bool("plain-detach", false,
		"leave expired partitions to maintain()'s plain DETACH instead of removing them with DETACH ... CONCURRENTLY first (docs/retention.md)")
	checkInterval := fs.Duration("connection-check-interval", runner.DefaultConnectionCheckInterval,
		"client_connection_check_interval of the runner's connections: how soon the server stops the work of a runner that died (0: the server's setting)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	if *withUI {
		if *svc.httpAddr == "" {
			return fmt.Errorf("%w: --ui serves the dashboard on --http-addr, which is empty", errUsage)
		}
		if err := uf.check("--http-addr", *svc.httpAddr); err != nil {
			return err
		}
	}
	if *checkInterval < 0 || *checkInterval > 24*time.Hour {
		return fmt.Errorf("%w: --connection-check-interval must be between 0 (the server's setting) and 24h, got %v", errUsage, *checkInterval)
	}
	logger, err := svc.logger()
	if err != nil {
		return err
	}
	cfg, err := pgx.ParseConfig(db.connString())
	if err != nil {
		return fmt.Errorf("%w: --database-url: %v", errUsage, redact(err))
	}
	if *owner == "" {
		*owner = runner.DefaultOwner()
	}
	stopTracing, err := setupTracing(ctx, "pgsweep-run", logger)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer stopTracing() // after the runner stopped: its last pass's spans are flushed
	r, err := runner.New(runner.ConnectConfig(cfg, "pgsweep run "+*owner, runner.WithConnectionCheckInterval(*checkInterval)), runner.Options{
		Schema:      db.schema,
		Owner:       *owner,
		Budget:      *budget,
		Interval:    *interval,
		Jitter:      *jitter,
		Logger:      logger.With("database", describeTarget(cfg)),
		PlainDetach: *plainDetach,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

	if *once {
		p, _, err := r.RunOnce(ctx)
		if err != nil {
			return redact(err)
		}
		fmt.Fprintf(out, "pass %d by %s: recovery %s, stats %s, retention %s\n", p.ID, r.Owner(), p.Parts["recovery"], p.Parts["stats"], p.Parts["retention"])
		if p.Error != "" {
			return fmt.Errorf("pass %d recorded an error: %s", p.ID, p.Error)
		}
		return nil
	}

	var pool *pgxpool.Pool
	if *withUI {
		if pool, err = db.pool(ctx, 4); err != nil {
			return err
		}
		defer pool.Close()
	}
	stop, err := svc.serveWith(logger, func(ln net.Listener) (http.Handler, error) {
		h := runner.Handler(r)
		if !*withUI {
			return h, nil
		}
		dash, err := uf.handler(pool, db.schema, *svc.httpAddr, ln, logger)
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", h)
		mux.Handle("/healthz", h)
		mux.Handle("/ui/", http.StripPrefix("/ui", dash))
		mux.Handle("GET /{$}", http.RedirectHandler("ui/", http.StatusFound))
		return mux, nil
	})
	if err != nil {
		return err
	}
	defer stop()
	// Run returns nil once ctx is cancelled (SIGINT/SIGTERM): the pass in
	// flight was awaited and the leases released, so the exit code is 0.
	return r.Run(ctx)
}
