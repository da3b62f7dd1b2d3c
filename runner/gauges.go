package runner

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
)

// DefaultGaugeInterval is how often the runner reads the queue and health
// gauges unless Options.GaugeInterval says otherwise: the snapshots change
// every stats_interval (10 s by default), and a scrape every 15 s is
// Prometheus' usual pace.
const DefaultGaugeInterval = 15 * time.Second

// readGauges refreshes the gauges that describe the database rather than
// this runner, after each pass: the queues from their latest snapshot
// (stats_latest: one index probe per queue, whatever the messages; the
// pass just ran the stats part when it was due) and the findings of
// health(). A failed read keeps the previous values and is logged: the
// pass itself succeeded. A schema without these functions (an install
// older than 0.40, or without the message store) is warned about once.
func (r *Runner) readGauges(ctx context.Context, conn Conn) {
	every := r.opts.GaugeInterval
	if every == 0 {
		every = DefaultGaugeInterval
	}
	if every > 0 && !r.gaugesAt.IsZero() && time.Since(r.gaugesAt) < every {
		return
	}
	r.gaugesAt = time.Now()
	c := r.sql(conn)
	if snaps, err := c.StatsLatest(ctx); r.gaugeErr("queue", err) {
		r.metrics.setSnapshots(snaps)
	}
	if findings, err := c.Health(ctx); r.gaugeErr("health", err) {
		r.metrics.setFindings(findings)
	}
}

// gaugeErr reports whether a gauge read succeeded, logging why not.
func (r *Runner) gaugeErr(source string, err error) bool {
	if err == nil {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42P01") { // undefined function or table
		r.mu.Lock()
		warn := !r.warnedGauges[source]
		if r.warnedGauges == nil {
			r.warnedGauges = map[string]bool{}
		}
		r.warnedGauges[source] = true
		r.mu.Unlock()
		if warn {
			r.log.Warn(source+" metrics unavailable: this schema lacks the function", "error", pgsweep.RedactSecrets(err.Error()))
		}
		return false
	}
	r.log.Warn(source+" metrics not refreshed", "error", pgsweep.RedactSecrets(err.Error()))
	return false
}
