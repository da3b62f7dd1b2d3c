package pgsweep

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The maintenance pass (maintain.sql) as a runner drives it and an operator
// reads it back. The runner (package runner) and the CLI reach these
// statements through the Client, on the connection they pass to WithDB.

// Maintain runs one maintenance pass as owner with a time budget (1 second to
// 1 hour): CALL <schema>.maintain(owner, budget). The procedure commits as it
// goes, so db must not be in a transaction. The returned error wraps the
// driver's error as it came (a *pgconn.PgError for an error the server
// raised), so a caller can tell a dead connection from a raised error.
func (c *Client) Maintain(ctx context.Context, owner string, budget time.Duration) error {
	_, err := c.db.Exec(ctx, "CALL "+c.fn("maintain")+"($1, $2)", owner, budget)
	return wrapErr("maintain", err)
}

// MaintainFailOwner records message as the error of owner's unfinished
// maintenance passes and runs (their finish time set to now) and releases
// every lease owner holds: what a runner calls, on a working connection, when
// maintain() failed in a way it could not record itself.
func (c *Client) MaintainFailOwner(ctx context.Context, owner, message string) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("maintain_fail_owner")+"($1, $2)", owner, message)
	return wrapErr("maintain_fail_owner", err)
}

// MaintenancePass is one row of the maintenance_passes view.
type MaintenancePass struct {
	ID        int64     `json:"id"`
	Owner     string    `json:"owner"`
	StartedAt time.Time `json:"started_at"`
	// Duration is how long the pass took; nil while it runs (or after it
	// was abandoned, until a takeover closes it).
	Duration *time.Duration `json:"duration"`
	// Recovery, Schedules, Stats and Retention are the outcomes of the
	// pass's parts ("done", "more", "running", "error", …); empty when the
	// part did not run (Schedules: or the install predates it).
	Recovery  string `json:"recovery"`
	Schedules string `json:"schedules"`
	Stats     string `json:"stats"`
	Retention string `json:"retention"`
	// Counts is the pass's counters as the database wrote them:
	// {"recovery": {...}, "schedules": {"sent": n, ...}, "retention": {"deleted": {"<policy>": rows}}}.
	Counts json.RawMessage `json:"counts"`
	Error  string          `json:"error,omitempty"`
}

const maintenancePassColumns = "SELECT id, owner, started_at, duration, coalesce(recovery, ''), coalesce(retention, ''), counts, coalesce(error, ''), coalesce(stats, ''), coalesce(schedules, '') FROM "

func scanMaintenancePass(r pgx.Row) (MaintenancePass, error) {
	var p MaintenancePass
	err := r.Scan(&p.ID, &p.Owner, &p.StartedAt, &p.Duration, &p.Recovery, &p.Retention, &p.Counts, &p.Error, &p.Stats, &p.Schedules)
	return p, err
}

// MaintenancePasses lists the latest limit maintenance passes, newest first.
func (c *Client) MaintenancePasses(ctx context.Context, limit int) ([]MaintenancePass, error) {
	rows, err := c.db.Query(ctx, maintenancePassColumns+c.fn("maintenance_passes")+" ORDER BY id DESC LIMIT $1", limit)
	if err != nil {
		return nil, wrapErr("maintenance_passes", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MaintenancePass, error) { return scanMaintenancePass(r) })
	return ps, wrapErr("maintenance_passes", err)
}

// LatestMaintenancePass reads owner's latest maintenance pass. It returns
// false when owner has none.
func (c *Client) LatestMaintenancePass(ctx context.Context, owner string) (MaintenancePass, bool, error) {
	p, err := scanMaintenancePass(c.db.QueryRow(ctx, maintenancePassColumns+c.fn("maintenance_passes")+
		" WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text ORDER BY id DESC LIMIT 1", owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return MaintenancePass{}, false, nil
	}
	if err != nil {
		return MaintenancePass{}, false, wrapErr("maintenance_passes", err)
	}
	return p, true, nil
}

// MaintenanceProgress is what the database shows of a pass's progress. It
// changes only when the pass commits something: a step of a part, the end
// of a part, a retention batch, or a lease renewal (maintain() renews its
// part's lease after every step, and during a long retention policy).
type MaintenanceProgress struct {
	// Pass is the id of owner's latest pass (0: none).
	Pass int64
	// Steps counts the committed steps and finished parts of that pass.
	Steps int64
	// Batches counts the retention batches owner's passes committed since it began.
	Batches int64
	// LeaseExpiry is the latest expiry of owner's leases (zero: none).
	LeaseExpiry time.Time
}

// MaintenanceProgress reads the progress of owner's latest pass.
func (c *Client) MaintenanceProgress(ctx context.Context, owner string) (MaintenanceProgress, error) {
	var m MaintenanceProgress
	var expiry *time.Time
	err := c.db.QueryRow(ctx, `WITH p AS (SELECT id, started_at FROM `+c.fn("maintenance_passes")+`
		 WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text ORDER BY id DESC LIMIT 1)
		SELECT coalesce((SELECT id FROM p), 0::pg_catalog.int8),
		       (SELECT coalesce(pg_catalog.sum(steps), 0::pg_catalog.int8) OPERATOR(pg_catalog.+) pg_catalog.count(finished_at)
		          FROM `+c.fn("maintenance_runs")+`
		         WHERE pass_id OPERATOR(pg_catalog.=) (SELECT id FROM p))::pg_catalog.int8,
		       (SELECT coalesce(pg_catalog.sum(batches), 0::pg_catalog.int8) FROM `+c.fn("retention_passes")+`
		         WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text
		           AND started_at OPERATOR(pg_catalog.>=) (SELECT started_at FROM p))::pg_catalog.int8,
		       (SELECT pg_catalog.max(expires_at) FROM `+c.fn("leases")+` WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text)`, owner).
		Scan(&m.Pass, &m.Steps, &m.Batches, &expiry)
	if expiry != nil {
		m.LeaseExpiry = *expiry
	}
	return m, wrapErr("maintenance progress", err)
}

// OwnerLeases lists the names of the leases owner holds or held last
// (live or not), ordered by name, without releasing them.
func (c *Client) OwnerLeases(ctx context.Context, owner string) ([]string, error) {
	rows, err := c.db.Query(ctx, "SELECT name FROM "+c.fn("leases")+" WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text ORDER BY name", owner)
	if err != nil {
		return nil, wrapErr("leases", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, wrapErr("leases", err)
}

// SettingIntervals reads interval settings (settings.sql), in one round
// trip: for each name, the value set with setting_set, or its default, in
// the order of names. An unknown name is an *Error that Is ErrInvalidArgument.
func (c *Client) SettingIntervals(ctx context.Context, names ...string) ([]time.Duration, error) {
	rows, err := c.db.Query(ctx, "SELECT "+c.fn("setting_interval")+"(n) FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY t(n, i) ORDER BY i", names)
	if err != nil {
		return nil, wrapErr("setting_interval", err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowTo[time.Duration])
	return ds, wrapErr("setting_interval", err)
}

// BackendStart returns when the session of db's connection started
// (pg_stat_activity.backend_start): with its pid, it tells that session apart
// from a later one a restarted server gave the same pid.
func (c *Client) BackendStart(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := c.db.QueryRow(ctx, "SELECT backend_start FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()").Scan(&t)
	return t, wrapErr("backend_start", err)
}

// backendMatch selects another session by pid and, when start is not nil, by
// its start time.
const backendMatch = " FROM pg_catalog.pg_stat_activity WHERE pid OPERATOR(pg_catalog.=) $1::pg_catalog.int4" +
	" AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()" +
	" AND ($2::pg_catalog.timestamptz IS NULL OR backend_start OPERATOR(pg_catalog.=) $2::pg_catalog.timestamptz)"

// BackendAlive tells whether the session pid (started at start, when not
// nil) is still connected: a runner waits for the backend of a pass it gave
// up on before it records that pass as failed.
func (c *Client) BackendAlive(ctx context.Context, pid uint32, start *time.Time) (bool, error) {
	var n int
	err := c.db.QueryRow(ctx, "SELECT pg_catalog.count(*)"+backendMatch, int64(pid), start).Scan(&n)
	return n > 0, wrapErr("pg_stat_activity", err)
}

// TerminateBackend ends the session pid (started at start, when not nil)
// with pg_terminate_backend. The role needs the right to signal it (the same
// role, or pg_signal_backend).
func (c *Client) TerminateBackend(ctx context.Context, pid uint32, start *time.Time) error {
	_, err := c.db.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend(pid)"+backendMatch, int64(pid), start)
	return wrapErr("pg_terminate_backend", err)
}
