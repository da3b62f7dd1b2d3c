package pgsweep

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// CronJob is the pg_cron job that runs maintain() for the client's schema.
type CronJob struct {
	JobID    int64  `json:"jobid"`
	Schedule string `json:"schedule"`
	Command  string `json:"command"`
	Active   bool   `json:"active"`
}

// CronSchedule schedules (or re-schedules) maintain() with pg_cron on
// schedule (a cron expression) with a time budget per run: SELECT
// <schema>.cron_schedule(schedule, budget). It returns the job's id. Without
// pg_cron the database raises an error with a hint that says what to do.
func (c *Client) CronSchedule(ctx context.Context, schedule string, budget time.Duration) (int64, error) {
	var id int64
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("cron_schedule")+"($1, $2)", schedule, budget).Scan(&id)
	return id, wrapErr("cron_schedule", err)
}

// CronUnschedule removes the schema's maintain() job; false when there was none.
func (c *Client) CronUnschedule(ctx context.Context) (bool, error) {
	var removed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("cron_unschedule")+"()").Scan(&removed)
	return removed, wrapErr("cron_unschedule", err)
}

// CronJob reads the schema's maintain() job; false when none is scheduled.
func (c *Client) CronJob(ctx context.Context) (CronJob, bool, error) {
	var j CronJob
	err := c.db.QueryRow(ctx, "SELECT jobid, schedule, command, active FROM "+c.fn("cron_job")+"()").
		Scan(&j.JobID, &j.Schedule, &j.Command, &j.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		return CronJob{}, false, nil
	}
	if err != nil {
		return CronJob{}, false, wrapErr("cron_job", err)
	}
	return j, true, nil
}
