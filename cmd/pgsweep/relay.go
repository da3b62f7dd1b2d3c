package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/relay"
	_ "github.com/pgsweep/pgsweep/relay/amqp" // relay.OpenURL: amqp://, amqps://
	_ "github.com/pgsweep/pgsweep/relay/nats" // relay.OpenURL: nats://, tls://
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// relayHooks are passed to the relay (tests set them in a child process).
var relayHooks relay.Hooks

// runRelay is `pgsweep relay`: publish a queue to a broker until SIGINT or
// SIGTERM, then drain and exit 0. Run any number of replicas.
func runRelay(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("relay")
	queue := fs.String("queue", "", "the outbox queue to publish (required)")
	to := fs.String("to", "", "the broker: nats://HOST:PORT?subject=SUBJ[&stream=NAME] or amqp://USER:PASS@HOST:PORT/VHOST?routing_key=K[&exchange=X] (required; docs/relay.md)")
	owner := fs.String("owner", "", "label of this relay's claims (default: host-pid-random)")
	batch := fs.Int("batch", 100, "messages per claim, 1..10000 (checked by the database's claim)")
	lease := fs.Duration("lease", 30*time.Second, "lease of a claim, 1s..1h, checked by the database's claim (renewed while a publish takes long)")
	poll := fs.Duration("poll-interval", time.Second, "longest pause between claims (sends wake the relay at once through NOTIFY)")
	shutdown := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGTERM, how long publishes in flight may still take")
	svc := addServiceFlags(fs, "127.0.0.1:9189", "debug logging")
	checkInterval := fs.Duration("connection-check-interval", pgsweep.DefaultConnectionCheckInterval,
		"client_connection_check_interval of the relay's connections (0: the server's setting)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	if *queue == "" {
		return fmt.Errorf("%w: --queue is required", errUsage)
	}
	if *to == "" {
		return fmt.Errorf("%w: --to is required (nats://… or amqp://…)", errUsage)
	}
	logger, err := svc.logger()
	if err != nil {
		return err
	}
	if *owner == "" {
		*owner = pgsweep.NewOwnerID()
	}
	stopTracing, err := setupTracing(ctx, "pgsweep-relay", logger)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	defer stopTracing() // after the relay stopped: its last spans are flushed
	name := "pgsweep relay " + *owner
	t, target, err := openTransport(*to, name, logger)
	if err != nil {
		return fmt.Errorf("%w: --to: %v", errUsage, err)
	}
	defer t.Close()

	cfg, err := pgxpool.ParseConfig(db.connString())
	if err != nil {
		return fmt.Errorf("%w: --database-url: %v", errUsage, redact(err))
	}
	pgsweep.SetConnectionCheckInterval(cfg.ConnConfig, *checkInterval)
	pgsweep.PinSearchPath(cfg.ConnConfig)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", describeTarget(cfg.ConnConfig), redact(err))
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r, err := relay.New(pool, *queue, t, relay.Options{
		Schema:          db.schema,
		Owner:           *owner,
		Batch:           *batch,
		Lease:           *lease,
		PollInterval:    *poll,
		ShutdownTimeout: *shutdown,
		Logger:          logger.With("database", describeTarget(cfg.ConnConfig), "to", target),
		Metrics:         relay.NewMetrics(reg),
		Hooks:           relayHooks,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	stop, err := svc.serve(relay.Handler(r, reg), logger)
	if err != nil {
		return err
	}
	defer stop()
	// Run returns nil once ctx is cancelled (SIGINT/SIGTERM) and the
	// publishes in flight are recorded: exit 0.
	if err := r.Run(ctx); err != nil {
		return redact(err)
	}
	fmt.Fprintf(out, "relay %s stopped: %d published\n", *owner, r.Health().Published)
	return nil
}

// openTransport opens the transport a --to URL names and describes the
// target without its password.
func openTransport(to, name string, logger *slog.Logger) (relay.Transport, string, error) {
	u, err := url.Parse(to)
	if err != nil {
		return nil, "", errors.New("not a URL")
	}
	target := u.Scheme + "://" + u.Host + u.Path
	if u.RawQuery != "" {
		target += "?" + u.RawQuery
	}
	t, err := relay.OpenURL(to, name, logger)
	return t, target, err
}
