// Command faultworker is the Worker process of the fault-injection suite
// (internal/faults): one pgsweep.Worker per queue on one pool, each handled
// message recorded in faults.handled (queue, id, key, attempt, worker, time)
// before the handler returns, so the suite can tell which messages were
// handled, how often, and when. Messages whose payload says "poison" always
// fail (and end in the dead letters).
//
//	faultworker --database-url URL --name w1.1 --queues faults_out,faults_in
//
// SIGTERM or SIGINT stops the Workers gracefully (Run returns) and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

func main() {
	url := flag.String("database-url", os.Getenv("PGSWEEP_DATABASE_URL"), "PostgreSQL URL")
	name := flag.String("name", "", "the worker's owner label (also its application_name)")
	queues := flag.String("queues", "", "comma-separated queues to work")
	concurrency := flag.Int("concurrency", 8, "handlers at once, per queue")
	batch := flag.Int("batch", 50, "claim batch, per queue")
	lease := flag.Duration("lease", 5*time.Second, "lease per claim")
	work := flag.Duration("work", 10*time.Millisecond, "mean simulated work per message")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(*url, *name, strings.Split(*queues, ","), *concurrency, *batch, *lease, *work, log); err != nil {
		log.Error("faultworker failed", "err", err)
		os.Exit(1)
	}
}

func run(url, name string, queues []string, concurrency, batch int, lease, work time.Duration, log *slog.Logger) error {
	if url == "" || name == "" || len(queues) == 0 || queues[0] == "" {
		return errors.New("--database-url, --name and --queues are required")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(len(queues)*(concurrency+4) + 2)
	cfg.ConnConfig.RuntimeParams["application_name"] = "faultworker " + name
	// A killed worker's backend stops within about a second (the setting docs/queues.md recommends).
	pgsweep.SetConnectionCheckInterval(cfg.ConnConfig, pgsweep.DefaultConnectionCheckInterval)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	handler := func(ctx context.Context, d *pgsweep.Delivery) error {
		var p struct {
			Poison bool `json:"poison"`
		}
		if err := json.Unmarshal(d.Payload, &p); err != nil {
			return fmt.Errorf("payload: %w", err)
		}
		if p.Poison {
			return pgsweep.RetryAfter(errors.New("poison message"), 100*time.Millisecond)
		}
		if work > 0 {
			select {
			case <-time.After(time.Duration(rand.Int64N(int64(2 * work)))):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err := pool.Exec(ctx, `INSERT INTO faults.handled (queue, msg_id, key, attempt, worker) VALUES ($1, $2, $3, $4, $5)`,
			d.Queue, d.ID, d.Key, d.Attempt, name)
		if err != nil {
			return pgsweep.RetryAfter(err, 200*time.Millisecond)
		}
		return nil
	}

	log.Info("faultworker starting", "name", name, "queues", queues, "pid", os.Getpid())
	var wg sync.WaitGroup
	errs := make(chan error, len(queues))
	for _, q := range queues {
		w, err := pgsweep.NewWorker(pool, handler, pgsweep.WorkerOptions{
			Queue: q, Owner: name, Batch: batch, Concurrency: concurrency, Lease: lease,
			ShutdownTimeout: 10 * time.Second, Logger: log,
		})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				errs <- fmt.Errorf("queue %s: %w", q, err)
				stop()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	log.Info("faultworker stopped", "name", name)
	return nil
}
