package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"go.opentelemetry.io/otel/trace"
)

// Pass is what one maintain() pass of this runner did, as recorded in the
// maintenance_passes view.
type Pass struct {
	// ID is the pass's id in the maintenance_passes view.
	ID int64
	// Parts maps each part ("recovery", "schedules", "stats", "retention") to what it did: done,
	// failed, lost (its lease was taken over), busy (another session ran
	// it), not due, or no budget.
	Parts map[string]string
	// Recovery is what the recovery part did, summed over its steps; zero
	// when it did not run in this pass.
	Recovery RecoveryCounts
	// Schedules is what the schedules part did, summed over its steps;
	// zero when it did not run in this pass.
	Schedules ScheduleCounts
	// Deleted is the number of rows retention deleted, per policy.
	Deleted map[string]int64
	// Error is the pass's recorded error ("<part>: <message>; ..."), empty
	// when every part that ran succeeded.
	Error string
}

// RecoveryCounts are the recovery part's counts for one pass.
type RecoveryCounts struct {
	// Recovered is the number of messages whose lease had expired and that
	// were made claimable again, their old owner fenced out.
	Recovered int64 `json:"recovered"`
	// LostLeases is the number of leases found lost: one per recovered
	// message, so it equals Recovered.
	LostLeases int64 `json:"lost_leases"`
	// DeadLettered is the number of messages with no attempt left that were
	// moved to the dead letters.
	DeadLettered int64 `json:"dead_lettered"`
}

// ScheduleCounts are the schedules part's counts for one pass
// (maintain_schedules.sql).
type ScheduleCounts struct {
	// Sent is the number of messages the schedules sent.
	Sent int64 `json:"sent"`
	// Fired is the number of schedules that sent at least one.
	Fired int64 `json:"fired"`
	// Skipped is the number of schedules whose overdue slots their catch-up
	// mode dropped (latest: all but the latest; none: all).
	Skipped int64 `json:"skipped"`
	// Refused is the number of due schedules whose owner lacks send on the
	// queue: nothing was sent for them.
	Refused int64 `json:"refused"`
}

// QueueStats is one row of the queue_stats view (pgsweep.QueueStats).
type QueueStats = pgsweep.QueueStats

// Settings are the runner settings read from the database after each pass
// (runner_interval, runner_jitter).
type Settings struct {
	// Interval is runner_interval, the pause between two passes (1 second to
	// 1 hour), and Jitter is runner_jitter, the random spread (+/-) added to
	// it (at most Interval takes effect). Options.Interval and Options.Jitter
	// override them. Both are zero when the pass failed before reading them.
	Interval, Jitter time.Duration
}

// sql returns the client that runs pgsweep's statements on conn.
func (r *Runner) sql(conn Conn) *pgsweep.Client { return r.client.WithDB(conn) }

// noConn stands in for a connection in the Runner's client until WithDB
// gives it a pass's own.
type noConn struct{}

var errNoConn = errors.New("runner: no connection")

func (noConn) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoConn
}
func (noConn) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoConn }
func (noConn) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errNoConn }

// detachConcurrently removes expired partitions with DETACH ...
// CONCURRENTLY before maintain() runs (Client.RetentionDetachConcurrently:
// statements built in Go from typed values, each run as the policy's
// owner; a partition owned by another role is skipped, and logged).
// Nothing it fails at fails the pass: maintain()'s plain DETACH is the
// fallback, and an install older than 0.31 has no such claims at all.
func (r *Runner) detachConcurrently(ctx context.Context, conn Conn) {
	ctx, span := r.tracer.Start(ctx, SpanDetach, trace.WithSpanKind(trace.SpanKindInternal))
	d, err := r.sql(conn).RetentionDetachConcurrently(ctx, r.owner, nil)
	var pgErr *pgconn.PgError
	if ctx.Err() == nil && errors.As(err, &pgErr) && pgErr.Code == "42883" {
		traceDetach(span, d, nil) // not installed: nothing failed
	} else {
		traceDetach(span, d, err)
	}
	r.metrics.observeDetach(d)
	for _, e := range d.Errors {
		r.log.Warn("concurrent detach: a statement failed; the pass or a later one retries", "error", redactErr(e))
	}
	for _, s := range d.Skipped {
		r.log.Info("concurrent detach: partition left to the pass", "policy", s.Policy, "table", s.Table, "reason", s.Reason)
	}
	if d.Claimed > 0 {
		r.log.Info("concurrent detach", "claimed", d.Claimed, "detached", d.Detached, "dropped", d.Dropped,
			"pending", d.Pending, "released", d.Released, "rows", d.Rows)
	}
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.As(err, &pgErr) && pgErr.Code == "42883":
		r.log.Debug("concurrent detach: not installed (pgsweep older than 0.31)")
	default:
		r.log.Warn("concurrent detach failed; the pass detaches expired partitions itself", "error", redactErr(err))
	}
}

// callMaintain runs one pass. A database error raised by maintain() (the
// connection still works) is recorded against this owner's unfinished
// history rows, which releases its leases too: maintain() cannot record an
// error that escaped a part that commits (see maintain_retention.sql). When
// the error left the connection dead (the backend was terminated, 57P01, or
// the network failed), nothing more can be said on it: the record is left
// pending, for a fresh connection once the pass's backend is gone (RunOnce).
func (r *Runner) callMaintain(ctx context.Context, conn Conn) error {
	err := r.sql(conn).Maintain(ctx, r.owner, r.opts.Budget)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("CALL maintain: %w", err) // a stop: RunOnce records it
	}
	var pgErr *pgconn.PgError
	isPg := errors.As(err, &pgErr)
	if connDead(conn, err) {
		msg := "the pass's connection was lost: " + redactErr(err)
		if isPg {
			msg = fmt.Sprintf("the pass's connection was lost: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		}
		r.mu.Lock()
		r.addPending(msg, r.passBackend)
		r.mu.Unlock()
		return fmt.Errorf("CALL maintain: %w", err)
	}
	// Missing objects (pgsweep not installed or not migrated) leave nothing to
	// record; anything else raised by maintain() is recorded.
	if isPg && pgErr.Code != "3F000" && pgErr.Code != "42883" && pgErr.Code != "42P01" {
		msg := fmt.Sprintf("maintain raised: %s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
		if ferr := r.sql(conn).MaintainFailOwner(ctx, r.owner, msg); ferr != nil {
			r.log.Warn("could not record the failed pass", "error", redactErr(ferr))
		}
	}
	return fmt.Errorf("CALL maintain: %w", err)
}

// connDead tells whether err left conn unusable: a FATAL or PANIC error from
// the server (which closes the session, e.g. 57P01 after
// pg_terminate_backend), a closed connection, or -- for a connection that
// cannot say whether it is closed -- any error that did not come from the
// server.
func connDead(conn Conn, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC") {
		return true
	}
	if c, ok := conn.(interface{ IsClosed() bool }); ok {
		return c.IsClosed()
	}
	return !errors.As(err, &pgErr)
}

// readPass reads back this owner's latest pass.
func (r *Runner) readPass(ctx context.Context, conn Conn) (*Pass, error) {
	row, found, err := r.sql(conn).LatestMaintenancePass(ctx, r.owner)
	if err == nil && !found {
		err = errors.New("no pass of this owner")
	}
	if err != nil {
		return nil, fmt.Errorf("read pass: %w", err)
	}
	p := Pass{ID: row.ID, Error: row.Error, Parts: map[string]string{}}
	if row.Recovery != "" {
		p.Parts["recovery"] = row.Recovery
	}
	if row.Schedules != "" {
		p.Parts["schedules"] = row.Schedules
	}
	if row.Stats != "" {
		p.Parts["stats"] = row.Stats
	}
	if row.Retention != "" {
		p.Parts["retention"] = row.Retention
	}
	if err := parseCounts(row.Counts, &p); err != nil {
		return nil, fmt.Errorf("read pass %d: %w", p.ID, err)
	}
	return &p, nil
}

// parseCounts reads {"recovery": {...}, "retention": {"deleted": {policy: n}}}.
func parseCounts(raw []byte, p *Pass) error {
	p.Deleted = map[string]int64{}
	if len(raw) == 0 {
		return nil
	}
	var c struct {
		Recovery  RecoveryCounts `json:"recovery"`
		Schedules ScheduleCounts `json:"schedules"`
		Retention struct {
			Deleted map[string]int64 `json:"deleted"`
		} `json:"retention"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("counts %s: %w", raw, err)
	}
	p.Recovery = c.Recovery
	p.Schedules = c.Schedules
	for k, v := range c.Retention.Deleted {
		p.Deleted[k] = v
	}
	return nil
}

// readSettings reads runner_interval and runner_jitter: a change made by SQL
// applies to the sleep after the next pass.
func (r *Runner) readSettings(ctx context.Context, conn Conn) (Settings, error) {
	var s Settings
	d, err := r.sql(conn).SettingIntervals(ctx, "runner_interval", "runner_jitter")
	if err != nil {
		return s, fmt.Errorf("read runner settings: %w", err)
	}
	s.Interval, s.Jitter = d[0], d[1]
	return s, nil
}

// ReadQueueStats reads the queue_stats view through c (Client.QueueStats).
// It returns (nil, ErrNoQueueStats) when the view does not exist (a schema
// without the message store).
func ReadQueueStats(ctx context.Context, c *pgsweep.Client) ([]QueueStats, error) {
	stats, err := c.QueueStats(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil, ErrNoQueueStats
	}
	if err != nil {
		return nil, fmt.Errorf("read queue_stats: %w", err)
	}
	return stats, nil
}

// ErrNoQueueStats is returned by ReadQueueStats when the schema has no
// queue_stats view.
var ErrNoQueueStats = errors.New("queue_stats does not exist in this schema (the message store is not installed)")
