package pgsweep

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotInstalled is wrapped by Uninstall's error when the schema does not
// exist or holds no pgsweep (no tern version table): nothing was dropped.
var ErrNotInstalled = errors.New("pgsweep is not installed")

// ErrMessagesPending is wrapped by Uninstall's error when the install still
// holds messages (pending, in flight, scheduled or waiting to retry) and
// UninstallOptions.Force is not set: nothing was dropped.
var ErrMessagesPending = errors.New("messages are pending")

// uninstallLockTimeout bounds the wait for the message table's lock: an
// uninstall that queues behind a running worker's transaction would stall
// every other session that touches the table behind it.
const uninstallLockTimeout = "10s"

// TxBeginner starts a transaction: a *pgx.Conn, a *pgxpool.Pool, a
// *pgxpool.Conn, or a pgx.Tx (a savepoint inside it).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// UninstallOptions control Uninstall.
type UninstallOptions struct {
	// Force drops the install even though messages are pending, in flight,
	// scheduled or waiting to retry: they are lost, never delivered.
	Force bool
	// DryRun plans the uninstall and returns its SQL without running it;
	// nothing changes (not even a lock is taken on the message table).
	DryRun bool
}

// MessageCounts are the messages an install holds, by state.
type MessageCounts struct {
	Pending   int64 // due now, waiting for a worker
	InFlight  int64 // claimed by a worker whose lease has not been settled
	Scheduled int64 // sent with a delivery time still in the future
	Retrying  int64 // failed, waiting for their retry
	Dead      int64 // dead letters (they do not stop an uninstall)
}

// Live is every message not yet delivered: what makes Uninstall refuse.
func (c MessageCounts) Live() int64 { return c.Pending + c.InFlight + c.Scheduled + c.Retrying }

func (c MessageCounts) String() string {
	return fmt.Sprintf("%d pending, %d in flight, %d scheduled, %d waiting to retry", c.Pending, c.InFlight, c.Scheduled, c.Retrying)
}

// UninstallResult is what Uninstall did, or, with DryRun, would do.
type UninstallResult struct {
	Schema        string
	SchemaVersion int32
	// Messages were in the install when it was dropped (or checked).
	Messages MessageCounts
	// CronJobs are the pg_cron jobs (ids) of the install that were unscheduled.
	CronJobs []int64
	// Roles are the roles the install created (its installed_role table)
	// that were dropped.
	Roles []string
	// KeptRoles are roles named <schema>_owner, _admin, _worker or _monitor
	// that existed before the install (not in installed_role): left alone.
	KeptRoles []string
	// SQL is the statements, in order, run in one transaction.
	SQL []string
	// DryRun tells that nothing was run.
	DryRun bool
}

// Script renders the result's statements as one psql-ready transaction, with
// a header that says what they remove.
func (r UninstallResult) Script() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgsweep uninstall: schema %s at version %d (%s); messages: %s, %d dead letters\n",
		r.Schema, r.SchemaVersion, ReleaseVersion(r.SchemaVersion), r.Messages, r.Messages.Dead)
	if len(r.Roles) > 0 {
		fmt.Fprintf(&b, "-- roles the install created (dropped): %s\n", strings.Join(r.Roles, ", "))
	}
	if len(r.KeptRoles) > 0 {
		fmt.Fprintf(&b, "-- roles that existed before the install (kept): %s\n", strings.Join(r.KeptRoles, ", "))
	}
	b.WriteString("BEGIN;\n")
	for _, s := range r.SQL {
		b.WriteString(s)
		b.WriteString(";\n")
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}

// Uninstall removes pgsweep from schema, in one transaction on db: it
// unschedules the install's pg_cron job (when pg_cron is in the database),
// drops the schema with everything in it (CASCADE: also objects elsewhere
// that depend on pgsweep's, such as a view over queue_stats), and drops the
// roles the install created (those in its installed_role table: DROP OWNED
// BY, which revokes what they were granted in this database, then DROP
// ROLE). Roles that existed before the install are kept.
//
// It refuses, changing nothing, while the install holds messages not yet
// delivered (ErrMessagesPending) unless opts.Force, and when the schema holds
// no pgsweep (ErrNotInstalled). A role that cannot be dropped because it
// still has privileges or objects in another database fails the whole
// uninstall (nothing changes) with an error that names the role and the
// databases. With opts.DryRun it returns the statements it would run and
// runs none; the refusal, if any, is returned with them.
//
// db may be a pgx.Tx: then Uninstall runs in a savepoint of it.
func Uninstall(ctx context.Context, db TxBeginner, schema string, opts UninstallOptions) (UninstallResult, error) {
	res := UninstallResult{Schema: schema, DryRun: opts.DryRun}
	if err := ValidateSchema(schema); err != nil {
		return res, err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("uninstall %s: %w", schema, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// On Citus, dropping distributed tables and changing catalogs in one
	// transaction needs sequential shard commands; elsewhere the setting is
	// an unused placeholder.
	if _, err := tx.Exec(ctx, "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"); err != nil {
		return res, fmt.Errorf("uninstall %s: %w", schema, err)
	}

	if err := planUninstall(ctx, tx, &res, opts); err != nil {
		return res, err
	}
	if opts.DryRun {
		if res.Messages.Live() > 0 && !opts.Force {
			return res, refusal(res)
		}
		return res, nil
	}
	for _, s := range res.SQL {
		if _, err := tx.Exec(ctx, s); err != nil {
			return res, uninstallError(schema, s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("uninstall %s: commit: %w", schema, err)
	}
	return res, nil
}

// planUninstall checks the install, locks it (unless a dry run), counts its
// messages and fills res with what the uninstall drops and the statements.
func planUninstall(ctx context.Context, tx pgx.Tx, res *UninstallResult, opts UninstallOptions) error {
	schema := res.Schema
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	exists := func(name string) (bool, error) {
		var ok bool
		err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`, q(name)).Scan(&ok)
		return ok, err
	}

	// Not while a migration of any schema runs (they take the same lock).
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8)", migrateLockKey); err != nil {
		return fmt.Errorf("uninstall %s: migrate lock: %w", schema, err)
	}
	var schemaExists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name)`, schema).Scan(&schemaExists); err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	}
	if !schemaExists {
		return fmt.Errorf("uninstall %s: %w there: schema %s does not exist; nothing was changed", schema, ErrNotInstalled, schema)
	}
	if ok, err := exists(VersionTable); err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	} else if !ok {
		return fmt.Errorf("uninstall %s: %w there: schema %s has no %s table, so it is not a pgsweep install "+
			"(pgsweep uninstall drops only installs); nothing was changed", schema, ErrNotInstalled, schema, q(VersionTable))
	}
	v, err := CurrentVersion(ctx, tx, schema)
	if err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	}
	res.SchemaVersion = v

	lockTimeout := "SET LOCAL lock_timeout = '" + uninstallLockTimeout + "'"
	res.SQL = append(res.SQL, lockTimeout)
	hasMessages, err := exists("message")
	if err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	}
	if hasMessages {
		// The lock keeps senders out between the count and the drop.
		lock := "LOCK TABLE " + q("message") + " IN ACCESS EXCLUSIVE MODE"
		res.SQL = append(res.SQL, lock)
		if !opts.DryRun {
			for _, s := range []string{lockTimeout, lock} {
				if _, err := tx.Exec(ctx, s); err != nil {
					return uninstallError(schema, s, err)
				}
			}
		}
		c := &res.Messages
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text
		                                       AND visible_at OPERATOR(pg_catalog.<=) pg_catalog.now()),
		        pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'processing'::pg_catalog.text),
		        pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'pending'::pg_catalog.text
		                                       AND visible_at OPERATOR(pg_catalog.>) pg_catalog.now()),
		        pg_catalog.count(*) FILTER (WHERE status OPERATOR(pg_catalog.=) 'failed'::pg_catalog.text)
		   FROM `+q("message")).Scan(&c.Pending, &c.InFlight, &c.Scheduled, &c.Retrying); err != nil {
			return fmt.Errorf("uninstall %s: count messages: %w", schema, err)
		}
		if ok, err := exists("message_dead"); err != nil {
			return fmt.Errorf("uninstall %s: %w", schema, err)
		} else if ok {
			if err := tx.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+q("message_dead")).Scan(&c.Dead); err != nil {
				return fmt.Errorf("uninstall %s: count dead letters: %w", schema, err)
			}
		}
		if c.Live() > 0 && !opts.Force && !opts.DryRun {
			return refusal(*res)
		}
	}

	// The pg_cron job, when pg_cron is in this database: the name is
	// cron_job_name()'s, computed here so that it works on every version.
	var cron bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_cron'::pg_catalog.name)`).Scan(&cron); err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	}
	if cron {
		// A role without USAGE on schema cron cannot see (or unschedule) a job
		// scheduled for this install, and dropping the schema under a job
		// leaves it failing every minute: say so instead.
		var usage bool
		var me string
		if err := tx.QueryRow(ctx, `SELECT pg_catalog.has_schema_privilege('cron'::pg_catalog.text, 'USAGE'::pg_catalog.text), current_user`).Scan(&usage, &me); err != nil {
			return fmt.Errorf("uninstall %s: %w", schema, err)
		}
		if !usage {
			return fmt.Errorf("uninstall %s: pg_cron is installed and %s has no USAGE on schema cron, so it cannot "+
				"unschedule the job pgsweep-maintain:%s: run uninstall as the role that scheduled it (or a superuser), "+
				"or unschedule it first (SELECT %s.cron_unschedule()) and GRANT USAGE ON SCHEMA cron to this role", schema,
				me, schema, pgx.Identifier{schema}.Sanitize())
		}
		rows, err := tx.Query(ctx, `SELECT jobid FROM cron.job
		  WHERE database OPERATOR(pg_catalog.=) pg_catalog.current_database()::pg_catalog.text
		    AND jobname OPERATOR(pg_catalog.=) (
		        SELECT CASE WHEN pg_catalog.octet_length(n) OPERATOR(pg_catalog.<=) 63 THEN n
		                    ELSE pg_catalog.left(n, 54) OPERATOR(pg_catalog.||) ':'::pg_catalog.text
		                         OPERATOR(pg_catalog.||) pg_catalog.left(pg_catalog.md5(n), 8) END
		          FROM (SELECT 'pgsweep-maintain:'::pg_catalog.text OPERATOR(pg_catalog.||) $1::pg_catalog.text AS n) x)
		  ORDER BY jobid`, schema)
		if res.CronJobs, err = collect[int64](rows, err); err != nil {
			return fmt.Errorf("uninstall %s: read pg_cron jobs: %w", schema, err)
		}
		for _, id := range res.CronJobs {
			res.SQL = append(res.SQL, fmt.Sprintf("SELECT cron.unschedule(%d::pg_catalog.int8)", id))
		}
	}

	res.SQL = append(res.SQL, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")

	// The roles: those the install created go, the others of the four names stay.
	ok, err := exists("installed_role")
	if err != nil {
		return fmt.Errorf("uninstall %s: %w", schema, err)
	}
	roleQuery := `SELECT rolname, false FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[]) ORDER BY 1`
	if ok {
		roleQuery = `SELECT r.rolname, EXISTS (SELECT FROM ` + q("installed_role") + ` i
		                           WHERE i.role_name OPERATOR(pg_catalog.=) r.rolname::pg_catalog.text)
		   FROM pg_catalog.pg_roles r
		  WHERE r.rolname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[])
		     OR r.rolname::pg_catalog.text OPERATOR(pg_catalog.=) ANY (SELECT role_name FROM ` + q("installed_role") + `)
		  ORDER BY 1`
	}
	rows, err := tx.Query(ctx, roleQuery, RoleNames(schema))
	if err != nil {
		return fmt.Errorf("uninstall %s: read roles: %w", schema, err)
	}
	for rows.Next() {
		var name string
		var created bool
		if err := rows.Scan(&name, &created); err != nil {
			rows.Close()
			return fmt.Errorf("uninstall %s: read roles: %w", schema, err)
		}
		if created {
			res.Roles = append(res.Roles, name)
		} else {
			res.KeptRoles = append(res.KeptRoles, name)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("uninstall %s: read roles: %w", schema, err)
	}
	for _, r := range res.Roles {
		id := pgx.Identifier{r}.Sanitize()
		res.SQL = append(res.SQL, "DROP OWNED BY "+id, "DROP ROLE "+id)
	}
	return nil
}

// RoleNames returns the names of the four roles an install into schema
// creates when they are missing: <schema>_owner, _admin, _worker, _monitor.
func RoleNames(schema string) []string {
	return []string{schema + "_owner", schema + "_admin", schema + "_worker", schema + "_monitor"}
}

// refusal is the error of an uninstall refused for its messages.
func refusal(res UninstallResult) error {
	c := res.Messages
	return fmt.Errorf("uninstall %s: %w: the schema holds %d message(s) not yet delivered (%s); nothing was changed. "+
		"Let the workers drain the queues (SELECT * FROM %s.queue_stats) and try again, or use --force, which loses "+
		"them for good, together with %d dead letter(s), the processed inbox keys, leases, retention policies and history",
		res.Schema, ErrMessagesPending, c.Live(), c, res.Schema, c.Dead)
}

// uninstallError explains the errors a DBA can act on.
func uninstallError(schema, stmt string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "2BP01" && strings.HasPrefix(stmt, "DROP ROLE "):
			role := strings.Trim(strings.TrimPrefix(stmt, "DROP ROLE "), `"`)
			return fmt.Errorf("uninstall %s: role %s cannot be dropped: it still has privileges or objects in another database (%s); "+
				"nothing was changed. Connect to each database named there and run DROP OWNED BY %s (it revokes what the role "+
				"was granted there and drops what it owns), then uninstall again: %w",
				schema, role, strings.ReplaceAll(pgErr.Detail, "\n", "; "), pgx.Identifier{role}.Sanitize(), err)
		case pgErr.Code == "55P03":
			return fmt.Errorf("uninstall %s: %s: the lock was not granted within %s: sessions are using pgsweep "+
				"(stop its workers and runners first); nothing was changed: %w", schema, stmt, uninstallLockTimeout, err)
		}
	}
	return fmt.Errorf("uninstall %s: %s: %w; nothing was changed", schema, stmt, err)
}

func collect[T any](rows pgx.Rows, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[T])
}
