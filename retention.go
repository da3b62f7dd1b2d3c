package pgsweep

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Retention modes (RetentionPolicy.Mode).
const (
	// RetentionExclusive runs one cleaner at a time under the lease
	// retention:<name>; other cleaners return at once.
	RetentionExclusive = "exclusive"
	// RetentionParallel lets any number of cleaners run, each on disjoint rows.
	RetentionParallel = "parallel"
)

// Retention strategies (RetentionSetStrategy, RetentionPass.Strategy).
const (
	// RetentionAuto picks a strategy per sweep from the table's statistics.
	RetentionAuto = "auto"
	// RetentionTIDRange walks the heap in consecutive block ranges.
	RetentionTIDRange = "tid_range"
	// RetentionKeyset walks an index on the time column from the oldest row.
	RetentionKeyset = "keyset"
)

// RetentionPolicy is what RetentionRegister registers: rows of Table whose
// TimeColumn is older than OlderThan (and whose StatusColumn is one of
// Statuses, when given) are deleted by RetentionRun.
type RetentionPolicy struct {
	// Name identifies the policy (at most 190 characters); registering an
	// existing name updates that policy. Exclusive cleaners take the lease
	// retention:<Name>.
	Name string
	// Table as SQL names it: "cap.published", or `"cap"."Published"`.
	Table string
	// TimeColumn is the name of the column whose age decides, as stored
	// (not quoted); it must be of type timestamptz, timestamp or date.
	TimeColumn string
	// OlderThan is the retention period; 0 keeps rows forever (SQL NULL)
	// unless AtExpiry is set.
	OlderThan time.Duration
	// AtExpiry says TimeColumn holds an expiry moment (CAP's ExpiresAt):
	// rows are deleted once it has passed, OlderThan later (SQL p_older_than
	// OlderThan, which may then be 0).
	AtExpiry     bool
	StatusColumn string   // empty: no status condition
	Statuses     []string // the statuses that may be deleted
	BatchSize    int      // 1..10000; 0: 1000
	Mode         string   // RetentionExclusive (default) or RetentionParallel
	// Interval between passes, for schedulers (retention_due); 0: 1 minute.
	Interval time.Duration
}

// RetentionPass is one row of the retention_passes view: one cleaner's pass.
type RetentionPass struct {
	// ID identifies the pass; later passes have higher IDs.
	ID int64
	// Policy is the policy's name.
	Policy string
	// Owner names the cleaner: the owner given to RetentionRun, or one the
	// database generated ("pid<backend pid>-<8 hex digits>").
	Owner string
	// Mode is the policy's mode when the pass began: RetentionExclusive or
	// RetentionParallel.
	Mode     string
	Strategy string // empty until the pass deleted its first batch
	// Outcome: running, drained, budget, lease_lost, error or abandoned (the
	// cleaner's session ended mid-pass).
	Outcome string
	// StartedAt is when the pass began, once it held its locks (database
	// clock).
	StartedAt time.Time
	// FinishedAt is when the pass ended; nil while it runs or when it was
	// abandoned.
	FinishedAt *time.Time
	// LastBatchAt is when the pass's latest batch finished deleting; nil
	// before its first batch.
	LastBatchAt *time.Time
	// Elapsed is the pass's duration: from StartedAt to FinishedAt, or, for a
	// pass that has not finished, to LastBatchAt (0 before the first batch).
	Elapsed time.Duration
	// RowsDeleted is the number of rows the pass deleted, over all batches.
	RowsDeleted int64
	// Batches is the number of delete batches the pass committed.
	Batches int
	// Units is the number of the sweep's work units the pass finished; each
	// batch finishes one unit.
	Units      int
	LeaseToken *int64 // exclusive mode: the lease's fencing token
	// Error is the error that ended the pass (Outcome error), usually
	// "<SQLSTATE>: <message>"; empty otherwise.
	Error string
}

// RetentionStatus is one row of the retention_policies view.
type RetentionStatus struct {
	// Name is the policy's name.
	Name string
	// Table is the table as schema.table, each part quoted where SQL needs
	// it: "cap.published", or `"cap"."Published"`.
	Table string
	// TimeColumn is the name of the column whose age decides (timestamptz,
	// timestamp or date), not quoted.
	TimeColumn string
	OlderThan  *time.Duration // nil: rows are kept forever
	// StatusColumn is the status column's name; empty when the policy has no
	// status condition.
	StatusColumn string
	// Statuses are the statuses that may be deleted; nil without a
	// StatusColumn.
	Statuses []string
	// FilterColumn is the column of the extra filter set with
	// RetentionSetFilter; empty when there is none.
	FilterColumn string
	// FilterValues are the values FilterColumn must hold for a row to be
	// deleted; nil without a FilterColumn.
	FilterValues []string
	// BatchSize is the number of rows one delete batch aims at (1..10000).
	BatchSize int
	// Mode is RetentionExclusive or RetentionParallel.
	Mode string
	// Interval is how long after a pass began the policy is due again
	// (RetentionDue).
	Interval time.Duration
	// TimeZone is the time zone in which timestamp and date columns are read:
	// the one set with RetentionSetTimeZone or, when none was, the reading
	// session's TimeZone setting. It does not apply to timestamptz columns.
	TimeZone string
	// LeaseTTL is the TTL of an exclusive policy's lease (30 seconds unless
	// set with RetentionSetLeaseTTL).
	LeaseTTL time.Duration
	// Strategy is the strategy set with RetentionSetStrategy: RetentionAuto
	// (the default), RetentionTIDRange or RetentionKeyset. The one a pass
	// used is in RetentionPass.Strategy.
	Strategy string
	// OpenUnits is the number of work units of the current sweep not yet
	// finished; 0 when no sweep is open (the next pass plans one).
	OpenUnits int64
	// LastPass is the policy's latest pass, nil if it never ran.
	LastPass *RetentionPass
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RetentionRegister registers or updates a retention policy for any table.
// Invalid arguments return an error matching ErrInvalidArgument and change
// nothing.
func (c *Client) RetentionRegister(ctx context.Context, p RetentionPolicy) error {
	var olderThan *time.Duration
	if p.OlderThan != 0 || p.AtExpiry {
		olderThan = &p.OlderThan
	}
	batch, mode, interval := p.BatchSize, p.Mode, p.Interval
	if batch == 0 {
		batch = 1000
	}
	if mode == "" {
		mode = RetentionExclusive
	}
	if interval == 0 {
		interval = time.Minute
	}
	var statuses []string
	if p.Statuses != nil {
		statuses = p.Statuses
	}
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("retention_register")+"($1, $2::pg_catalog.text, $3, $4, $5, $6, $7, $8, $9)",
		p.Name, p.Table, p.TimeColumn, olderThan, nullIfEmpty(p.StatusColumn), statuses, batch, mode, interval)
	return wrapErr("retention_register", err)
}

// RetentionUnregister removes a policy and its history. It returns false
// when there was no such policy.
func (c *Client) RetentionUnregister(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("retention_unregister")+"($1)", name).Scan(&ok)
	return ok, wrapErr("retention_unregister", err)
}

// RetentionSetFilter restricts a policy to rows whose column is one of
// values (pgsweep's built-in policies use it for one queue each). An empty
// column removes the filter.
func (c *Client) RetentionSetFilter(ctx context.Context, name, column string, values []string) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("retention_set_filter")+"($1, $2, $3)", name, nullIfEmpty(column), values)
	return wrapErr("retention_set_filter", err)
}

// RetentionSetTimeZone sets the time zone in which a timestamp-without-time-
// zone column is read; empty means the database's TimeZone.
func (c *Client) RetentionSetTimeZone(ctx context.Context, name, tz string) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("retention_set_time_zone")+"($1, $2)", name, nullIfEmpty(tz))
	return wrapErr("retention_set_time_zone", err)
}

// RetentionSetStrategy forces a strategy (RetentionTIDRange, RetentionKeyset)
// or restores RetentionAuto.
func (c *Client) RetentionSetStrategy(ctx context.Context, name, strategy string) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("retention_set_strategy")+"($1, $2)", name, strategy)
	return wrapErr("retention_set_strategy", err)
}

// RetentionSetLeaseTTL sets the TTL of an exclusive policy's lease (1 second
// to 1 hour): how long other cleaners wait after a cleaner crashed.
func (c *Client) RetentionSetLeaseTTL(ctx context.Context, name string, ttl time.Duration) error {
	_, err := c.db.Exec(ctx, "SELECT "+c.fn("retention_set_lease_ttl")+"($1, $2)", name, ttl)
	return wrapErr("retention_set_lease_ttl", err)
}

// acquirer is what *pgxpool.Pool offers to pin one connection.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// RetentionRun runs one pass of policy name: it deletes expired rows in
// batches, each committed, until the sweep is drained or budget (0 to 24h) is
// spent. owner names the cleaner (empty: the database generates one). It
// returns the pass and true, or false when there was nothing to do: another
// cleaner holds an exclusive policy, or the policy keeps rows forever.
//
// The procedure commits, so the client's DBTX must not be a transaction.
func (c *Client) RetentionRun(ctx context.Context, name, owner string, budget time.Duration) (RetentionPass, bool, error) {
	db := c.db
	if a, ok := db.(acquirer); ok {
		// One connection for the call and the clean-up below.
		conn, err := a.Acquire(ctx)
		if err != nil {
			return RetentionPass{}, false, wrapErr("retention_run", err)
		}
		defer conn.Release()
		db = conn
	}
	var id *int64
	err := db.QueryRow(ctx, "CALL "+c.fn("retention_run")+"($1, $2, $3, NULL, NULL)",
		name, nullIfEmpty(owner), budget).Scan(&id)
	if err != nil {
		// A cancelled call can leave the session holding the policy's
		// advisory lock (the procedure cannot catch a cancel); drop it so
		// that a pooled connection does not block other cleaners.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = db.Exec(cctx, "SELECT "+c.fn("retention_step_unlock")+"($1)", name)
		return RetentionPass{}, false, wrapErr("retention_run", err)
	}
	if id == nil {
		return RetentionPass{}, false, nil
	}
	ps, err := c.retentionPasses(ctx, db, "id OPERATOR(pg_catalog.=) $1::pg_catalog.int8", *id)
	if err != nil {
		return RetentionPass{}, false, err
	}
	if len(ps) == 0 {
		return RetentionPass{}, false, errorf("retention_run", "pass %d vanished (policy unregistered?)", *id)
	}
	return ps[0], true, nil
}

const passColumns = `id, policy, owner, mode, coalesce(strategy, ''), outcome, started_at, finished_at, last_batch_at,
	elapsed, rows_deleted, batches, units, lease_token, coalesce(error, '')`

func scanPass(r pgx.Row) (RetentionPass, error) {
	var p RetentionPass
	err := r.Scan(&p.ID, &p.Policy, &p.Owner, &p.Mode, &p.Strategy, &p.Outcome, &p.StartedAt, &p.FinishedAt,
		&p.LastBatchAt, &p.Elapsed, &p.RowsDeleted, &p.Batches, &p.Units, &p.LeaseToken, &p.Error)
	return p, err
}

func (c *Client) retentionPasses(ctx context.Context, db DBTX, where string, args ...any) ([]RetentionPass, error) {
	rows, err := db.Query(ctx, "SELECT "+passColumns+" FROM "+c.q+".retention_passes WHERE "+where+" ORDER BY id", args...)
	if err != nil {
		return nil, wrapErr("retention_passes", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetentionPass, error) { return scanPass(r) })
	return ps, wrapErr("retention_passes", err)
}

// RetentionPasses lists the recorded passes of policy name, oldest first.
func (c *Client) RetentionPasses(ctx context.Context, name string) ([]RetentionPass, error) {
	return c.retentionPasses(ctx, c.db, "policy OPERATOR(pg_catalog.=) $1::pg_catalog.text", name)
}

// RetentionPolicies lists every policy with its last pass, ordered by name.
func (c *Client) RetentionPolicies(ctx context.Context) ([]RetentionStatus, error) {
	rows, err := c.db.Query(ctx, `SELECT name, table_name, time_column, older_than, coalesce(status_column, ''),
		statuses, coalesce(filter_column, ''), filter_values, batch_size, mode, run_interval, time_zone, lease_ttl,
		strategy, open_units FROM `+c.q+`.retention_policies ORDER BY name`)
	if err != nil {
		return nil, wrapErr("retention_policies", err)
	}
	ss, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetentionStatus, error) {
		var s RetentionStatus
		err := r.Scan(&s.Name, &s.Table, &s.TimeColumn, &s.OlderThan, &s.StatusColumn, &s.Statuses, &s.FilterColumn,
			&s.FilterValues, &s.BatchSize, &s.Mode, &s.Interval, &s.TimeZone, &s.LeaseTTL, &s.Strategy, &s.OpenUnits)
		return s, err
	})
	if err != nil {
		return nil, wrapErr("retention_policies", err)
	}
	// every policy's last pass in one statement: a lookup of the newest id per policy
	names := make([]string, len(ss))
	at := make(map[string]int, len(ss))
	for i := range ss {
		names[i], at[ss[i].Name] = ss[i].Name, i
	}
	rows, err = c.db.Query(ctx, "SELECT "+passColumns+" FROM "+c.q+".retention_passes WHERE id OPERATOR(pg_catalog.=) ANY (SELECT "+
		"(SELECT pg_catalog.max(x.id) FROM "+c.q+".retention_passes x WHERE x.policy OPERATOR(pg_catalog.=) p.p) "+
		"FROM pg_catalog.unnest($1::pg_catalog.text[]) AS p)", names)
	if err != nil {
		return nil, wrapErr("retention_policies", err)
	}
	last, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetentionPass, error) { return scanPass(r) })
	if err != nil {
		return nil, wrapErr("retention_policies", err)
	}
	for _, p := range last {
		ss[at[p.Policy]].LastPass = &p
	}
	return ss, nil
}

// RetentionDue lists the policies whose interval has passed since their last
// pass began, oldest first.
func (c *Client) RetentionDue(ctx context.Context) ([]string, error) {
	rows, err := c.db.Query(ctx, "SELECT "+c.fn("retention_due")+"()")
	if err != nil {
		return nil, wrapErr("retention_due", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, wrapErr("retention_due", err)
}
