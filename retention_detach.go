package pgsweep

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DETACH PARTITION ... CONCURRENTLY for partitioned retention policies
// (retention_detach.sql, docs/retention.md "Partitioned tables"). PostgreSQL
// runs it only outside a transaction block, so no procedure can: the runner
// calls RetentionDetachConcurrently before each maintenance pass.

// DetachResult is what one RetentionDetachConcurrently call did.
type DetachResult struct {
	// Claimed is the number of leaves claimed (detach, finalize or drop).
	Claimed int
	// Detached is the number of leaves now out of their parent, their rows
	// (Rows) counted as deleted in a retention pass of strategy
	// "detach_concurrently".
	Detached int
	// Dropped is the number of detached tables dropped: those of earlier
	// calls (the commit of a DROP releases the files, which takes CPU and
	// I/O from the inserts of its moment, so it is left to the next call).
	Dropped int
	// Pending is the number of leaves left half-detached (DETACH's second
	// transaction reached lock_timeout: a transaction that began before it
	// still runs); a later call finishes them with FINALIZE.
	Pending int
	// Released is the number of leaves still attached after a failed DETACH
	// (lock_timeout, not the owner): the maintenance pass's plain DETACH or
	// a later call takes them.
	Released int
	// Rows is the rows of the leaves detached by this call; RowsByPolicy
	// the same per policy.
	Rows         int64
	RowsByPolicy map[string]int64
	// Errors holds each statement that failed, naming the leaf; a lock
	// timeout is one of them. They change nothing above: the catalog is read
	// again after each leaf.
	Errors []error
}

type detachClaim struct {
	policy, action                          string
	leaf, parent                            uint32
	countSQL, detachSQL, renameSQL, dropSQL *string
	lockTimeoutMS                           int64
}

// RetentionDetachConcurrently removes the expired partitions of partitioned
// retention policies that are due, one leaf at a time, without the ACCESS
// EXCLUSIVE lock on the parent a plain DETACH takes: it claims them
// (retention_detach_claim, as owner), runs ALTER TABLE ... DETACH PARTITION
// ... CONCURRENTLY (or FINALIZE for a leaf a killed call left half-detached)
// and renames the detached table pgsweep_detached_c<oid> on its connection,
// with lock_timeout = retention_lock_timeout, and records each leaf
// (retention_detach_done); the next call drops the detached tables. The
// statements run as the connection's role, which must be able to act as the
// table's owner (retention_detach_claim lists only those leaves; the
// maintenance pass detaches the others as the policy's owner). Leaves whose
// parent has a DEFAULT partition are left to the pass: PostgreSQL refuses
// CONCURRENTLY there.
//
// now, when not nil, is the time the cutoffs are computed from (tests and
// benchmarks; a role other than the schema's owner cannot pass it). The
// client's DBTX must not be a transaction. The error is for what stopped the
// call (the connection, the claim); a statement that failed on one leaf is
// in DetachResult.Errors.
func (c *Client) RetentionDetachConcurrently(ctx context.Context, owner string, now *time.Time) (DetachResult, error) {
	var res DetachResult
	db := c.db
	if a, ok := db.(acquirer); ok {
		conn, err := a.Acquire(ctx)
		if err != nil {
			return res, wrapErr("retention_detach_claim", err)
		}
		defer conn.Release()
		db = conn
	}
	claims, err := c.detachClaims(ctx, db, owner, now)
	if err != nil || len(claims) == 0 {
		return res, err
	}
	res.Claimed = len(claims)
	var before string
	if err := db.QueryRow(ctx, "SELECT pg_catalog.current_setting('lock_timeout')").Scan(&before); err != nil {
		return res, wrapErr("retention_detach_claim", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = db.Exec(cctx, "SELECT pg_catalog.set_config('lock_timeout', $1, false)", before)
	}()
	// A parent whose leaf stayed half-detached (its second transaction
	// reached lock_timeout) detaches no other leaf until it is finalized:
	// PostgreSQL refuses a second one; those claims are only released.
	// The same goes after a DETACH that did not get its lock: the next
	// would wait as long again.
	stuck := map[uint32]bool{}
	seen := map[uint32]bool{} // a table under two policies is claimed for each
	for _, cl := range claims {
		if seen[cl.leaf] {
			continue
		}
		seen[cl.leaf] = true
		if stuck[cl.parent] && cl.action != "drop" {
			cl.countSQL, cl.detachSQL, cl.renameSQL, cl.dropSQL = nil, nil, nil, nil
		}
		blocked, err := c.detachOne(ctx, db, owner, cl, &res)
		if err != nil {
			return res, err
		}
		stuck[cl.parent] = stuck[cl.parent] || blocked
	}
	return res, nil
}

func (c *Client) detachClaims(ctx context.Context, db DBTX, owner string, now *time.Time) ([]detachClaim, error) {
	params, args := "$1", []any{owner}
	if now != nil { // the p_now overload
		params, args = "$1, $2", []any{owner, *now}
	}
	rows, err := db.Query(ctx, "SELECT policy, leaf, parent, action, count_sql, detach_sql, rename_sql, drop_sql, lock_timeout_ms FROM "+
		c.fn("retention_detach_claim")+"("+params+")", args...)
	if err != nil {
		return nil, wrapErr("retention_detach_claim", err)
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (detachClaim, error) {
		var cl detachClaim
		err := r.Scan(&cl.policy, &cl.leaf, &cl.parent, &cl.action, &cl.countSQL, &cl.detachSQL, &cl.renameSQL, &cl.dropSQL, &cl.lockTimeoutMS)
		return cl, err
	})
	return claims, wrapErr("retention_detach_claim", err)
}

// detachOne works one claim: count, DETACH (or FINALIZE) and rename, or
// DROP, each in its own transaction, then records what the catalog says.
// Only an error that leaves the connection unusable (or a cancel) stops the
// call. blocked: the leaf's parent detaches nothing more in this call (its
// leaf stayed half-detached, or its DETACH did not get its lock in time).
func (c *Client) detachOne(ctx context.Context, db DBTX, owner string, cl detachClaim, res *DetachResult) (blocked bool, err error) {
	var rows *int64
	if cl.countSQL != nil {
		var n int64
		if err := db.QueryRow(ctx, *cl.countSQL).Scan(&n); err == nil {
			rows = &n
		} else if !errors.Is(err, pgx.ErrNoRows) && fatal(ctx, err) { // no row: gone meanwhile
			return false, wrapErr("retention_detach_claim", err)
		}
	}
	if _, err := db.Exec(ctx, "SELECT pg_catalog.set_config('lock_timeout', $1, false)",
		strconv.FormatInt(cl.lockTimeoutMS, 10)+"ms"); err != nil {
		return false, wrapErr("retention_detach_claim", err)
	}
	ok, lockTimeout := true, false
	if cl.detachSQL != nil {
		if _, err := db.Exec(ctx, *cl.detachSQL); err != nil {
			if fatal(ctx, err) {
				return false, wrapErr("retention_detach_claim", err)
			}
			res.Errors = append(res.Errors, fmt.Errorf("policy %s: %s: %w", cl.policy, *cl.detachSQL, err))
			ok = false
			var pgErr *pgconn.PgError
			lockTimeout = errors.As(err, &pgErr) && pgErr.Code == "55P03"
		}
	}
	for _, sql := range []*string{cl.renameSQL, cl.dropSQL} {
		if !ok || sql == nil {
			continue
		}
		if _, err := db.Exec(ctx, *sql); err != nil {
			if fatal(ctx, err) {
				return false, wrapErr("retention_detach_claim", err)
			}
			res.Errors = append(res.Errors, fmt.Errorf("policy %s: %s: %w", cl.policy, *sql, err))
		}
	}
	var state string
	err = db.QueryRow(ctx, "SELECT "+c.fn("retention_detach_done")+"($1, $2, $3)", owner, cl.leaf, rows).Scan(&state)
	if err != nil {
		return false, wrapErr("retention_detach_done", err)
	}
	switch state {
	case "dropped", "detached":
		if cl.action != "drop" || cl.countSQL != nil { // counted by this call
			res.Detached++
			if rows != nil {
				res.Rows += *rows
				if res.RowsByPolicy == nil {
					res.RowsByPolicy = map[string]int64{}
				}
				res.RowsByPolicy[cl.policy] += *rows
			}
		}
		if state == "dropped" {
			res.Dropped++
		}
	case "pending":
		res.Pending++
	case "attached":
		res.Released++
	}
	return state == "pending" || lockTimeout, nil
}

// fatal tells whether err ends the call: a cancel, or an error the server did
// not raise as a statement's error (the connection is gone or broken).
func fatal(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true
	}
	sev := pgErr.SeverityUnlocalized
	if sev == "" {
		sev = pgErr.Severity
	}
	return sev == "FATAL" || sev == "PANIC"
}
