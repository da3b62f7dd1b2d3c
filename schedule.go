package pgsweep

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Periodic schedules (schedule.sql, docs/schedules.md): a message sent to a
// queue at every slot of a cron expression, by the maintenance pass
// (Maintain, `pgsweep run`, pg_cron), each slot exactly once.

// CatchUp says what a maintenance pass sends for the slots of a schedule it
// finds overdue (nothing ran maintenance for a while).
type CatchUp string

const (
	// CatchUpLatest sends one message, for the latest overdue slot (the default).
	CatchUpLatest CatchUp = "latest"
	// CatchUpAll sends every overdue slot, oldest first, at most 1000 per
	// schedule per step of the pass.
	CatchUpAll CatchUp = "all"
	// CatchUpNone sends nothing for a slot older than the setting
	// schedule_missed_after (5 minutes) and waits for the next one.
	CatchUpNone CatchUp = "none"
)

// ScheduleOptions are schedule_create's optional arguments; the zero value
// takes every default.
type ScheduleOptions struct {
	// Payload is the message's payload (nil: {}).
	Payload json.RawMessage
	// Headers are the message's headers, a JSON object (nil: {}); the headers
	// pgsweep-schedule and pgsweep-slot are added to every message.
	Headers json.RawMessage
	// Lane puts the messages in that ordered lane of the queue ("": none).
	Lane string
	// TimeZone is the IANA zone the expression is read in ("": UTC).
	TimeZone string
	// CatchUp is the catch-up mode ("": CatchUpLatest).
	CatchUp CatchUp
}

// ScheduleCreate creates schedule name, or replaces it (an upsert: its
// history and whether it is paused stay): a message to queue at every slot
// of cron, a five-field cron expression ("*/5 * * * *", "0 9 * * MON-FRI")
// or "@every <interval>" ("@every 30 seconds"). The caller needs the admin
// role and send on the queue; the schedule then sends as the caller's role.
// A bad argument is an *Error matching ErrInvalidArgument that names it.
func (c *Client) ScheduleCreate(ctx context.Context, name, queue, cron string, opts *ScheduleOptions) error {
	var o ScheduleOptions
	if opts != nil {
		o = *opts
	}
	payload, headers := o.Payload, o.Headers
	if payload == nil {
		payload = json.RawMessage(`{}`)
	}
	if headers == nil {
		headers = json.RawMessage(`{}`)
	}
	zone := o.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	catchUp := string(o.CatchUp)
	if catchUp == "" {
		catchUp = string(CatchUpLatest)
	}
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("schedule_create")+
		"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.jsonb, $5::pg_catalog.jsonb, $6::pg_catalog.text, $7::pg_catalog.text, $8::pg_catalog.text)",
		name, queue, cron, string(payload), string(headers), nullIfEmpty(o.Lane), zone, catchUp)
	return wrapErr("schedule_create", err)
}

// SchedulePause stops schedule name from sending until ScheduleResume; it
// returns false when it was paused already. An unknown name is
// ErrInvalidArgument.
func (c *Client) SchedulePause(ctx context.Context, name string) (bool, error) {
	var changed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("schedule_pause")+"($1::pg_catalog.text)", name).Scan(&changed)
	return changed, wrapErr("schedule_pause", err)
}

// ScheduleResume lets a paused schedule send again, from its first slot
// after now (the slots of the pause are not sent); it returns false when
// it was not paused. An unknown name is ErrInvalidArgument.
func (c *Client) ScheduleResume(ctx context.Context, name string) (bool, error) {
	var changed bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("schedule_resume")+"($1::pg_catalog.text)", name).Scan(&changed)
	return changed, wrapErr("schedule_resume", err)
}

// ScheduleDrop removes schedule name; it returns false when there was none.
func (c *Client) ScheduleDrop(ctx context.Context, name string) (bool, error) {
	var dropped bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("schedule_drop")+"($1::pg_catalog.text)", name).Scan(&dropped)
	return dropped, wrapErr("schedule_drop", err)
}

// Schedule is one row of the schedules view (the monitor role reads it):
// no payload and no headers.
type Schedule struct {
	Name     string `json:"name"`
	Queue    string `json:"queue"`
	Cron     string `json:"cron"`
	TimeZone string `json:"time_zone"`
	// NextAt is the next slot to send (nil: none within 9 years).
	NextAt *time.Time `json:"next_at"`
	// LastAt is when the schedule last sent a message, LastID that
	// message's id (nil: never).
	LastAt  *time.Time `json:"last_at"`
	LastID  *int64     `json:"last_id"`
	Paused  bool       `json:"paused"`
	CatchUp CatchUp    `json:"catch_up"`
	Lane    string     `json:"lane,omitempty"`
	// Owner is the role the schedule sends as (its creator).
	Owner string `json:"owner"`
	// LastSlot is the latest slot handled (sent or skipped by the catch-up
	// mode); every slot up to it is done.
	LastSlot time.Time `json:"last_slot"`
	// LastError says why the latest due slot was not sent (the owner lacks
	// send on the queue); empty when it was.
	LastError string    `json:"last_error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Schedules lists every schedule, by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	rows, err := c.db.Query(ctx, `SELECT name, queue, cron, time_zone, next_at, last_at, last_id, paused, catch_up,
		coalesce(lane, ''::pg_catalog.text), owner, last_slot, coalesce(last_error, ''::pg_catalog.text), created_at, updated_at
		  FROM `+c.fn("schedules")+` ORDER BY name`)
	if err != nil {
		return nil, wrapErr("schedules", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Schedule, error) {
		var s Schedule
		var catchUp string
		err := r.Scan(&s.Name, &s.Queue, &s.Cron, &s.TimeZone, &s.NextAt, &s.LastAt, &s.LastID, &s.Paused, &catchUp,
			&s.Lane, &s.Owner, &s.LastSlot, &s.LastError, &s.CreatedAt, &s.UpdatedAt)
		s.CatchUp = CatchUp(catchUp)
		return s, err
	})
	return list, wrapErr("schedules", err)
}

// ScheduleNextTimes returns the next n (1-10000) slots of a schedule
// expression after after (zero: now) in time zone zone ("": UTC), without
// creating anything: what a schedule with it would send.
func (c *Client) ScheduleNextTimes(ctx context.Context, cron, zone string, after time.Time, n int) ([]time.Time, error) {
	if zone == "" {
		zone = "UTC"
	}
	var at *time.Time
	if !after.IsZero() {
		at = &after
	}
	rows, err := c.db.Query(ctx, "SELECT t FROM "+c.fn("schedule_next_times")+
		"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.timestamptz, $4::pg_catalog.int4) t", cron, zone, at, n)
	if err != nil {
		return nil, wrapErr("schedule_next_times", err)
	}
	ts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	return ts, wrapErr("schedule_next_times", err)
}
