package pgsweep

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
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
	// Skipped are the leaves left alone because they, or their parent, are
	// owned by another role than the policy's owner (not claims).
	Skipped []DetachSkip
	// Rows is the rows of the leaves detached by this call, the catalog's
	// estimate (see RetentionDetachConcurrently); RowsByPolicy the same per
	// policy.
	Rows         int64
	RowsByPolicy map[string]int64
	// Errors holds each statement that failed, naming the leaf; a lock
	// timeout is one of them. They change nothing above: the catalog is read
	// again after each leaf.
	Errors []error
}

// DetachSkip is a leaf RetentionDetachConcurrently left alone, and why.
type DetachSkip struct {
	// Policy is the retention policy, Table the leaf ("schema.name", quoted
	// as needed).
	Policy, Table string
	// Reason says why: the leaf, or its parent, is owned by another role
	// than the policy's owner, and the runner acts only on that role's own
	// tables.
	Reason string
}

type detachClaim struct {
	policy, action                                 string
	leaf, parent                                   uint32
	leafSchema, leafName, parentSchema, parentName *string
	renameTo, actAs, reason                        *string
	lockTimeoutMS                                  *int64
}

// table is the claim's leaf, quoted and qualified.
func (cl detachClaim) table() string {
	return pgx.Identifier{deref(cl.leafSchema), deref(cl.leafName)}.Sanitize()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// RetentionDetachConcurrently removes the expired partitions of partitioned
// retention policies that are due, one leaf at a time, without the ACCESS
// EXCLUSIVE lock on the parent a plain DETACH takes: it claims them
// (retention_detach_claim), runs ALTER TABLE ... DETACH PARTITION ...
// CONCURRENTLY (or FINALIZE for a leaf a killed call left half-detached)
// and renames the detached table pgsweep_detached_c<oid> on its connection,
// with lock_timeout = retention_lock_timeout, and records each leaf
// (retention_detach_done); the next call drops the detached tables.
//
// No SQL text comes from the database: the claim returns typed values
// (schema and relation names, the name to rename to, the role to act as)
// and each statement is built here, names quoted with pgx.Identifier. Each
// runs as the policy's owner: SET ROLE to it for exactly that statement,
// then back to the connection's role, with search_path pg_catalog, pg_temp
// for the whole call (both restored at the end). The connection's role must
// be able to SET ROLE to the policy's owner (a superuser, or a member:
// GRANT <owner> TO <runner role>); retention_detach_claim lists nothing
// else. A leaf or parent owned by another role than the policy's owner is
// not claimed but reported in DetachResult.Skipped; the maintenance pass
// decides about it. Leaves whose parent has a DEFAULT partition are left to
// the pass: PostgreSQL refuses CONCURRENTLY there.
//
// The rows of a detached leaf (DetachResult.Rows) are the catalog's
// estimate (the statistics' live tuples, else pg_class.reltuples, else 0),
// read by retention_detach_done: nothing reads the leaf, so none of its
// owner's row-level security code runs, and no partition is scanned.
//
// now, when not nil, is the time the cutoffs are computed from (tests and
// benchmarks; a role other than the schema's owner cannot pass it). The
// client's DBTX must not be a transaction. The error is for what stopped the
// call (the connection, the claim); a statement that failed on one leaf is
// in DetachResult.Errors.
func (c *Client) RetentionDetachConcurrently(ctx context.Context, owner string, now *time.Time) (DetachResult, error) {
	var res DetachResult
	db := c.db
	var pooled *pgxpool.Conn
	if a, ok := db.(acquirer); ok {
		conn, err := a.Acquire(ctx)
		if err != nil {
			return res, wrapErr("retention_detach_claim", err)
		}
		defer conn.Release()
		db, pooled = conn, conn
	}
	claims, err := c.detachClaims(ctx, db, owner, now)
	if err != nil || len(claims) == 0 {
		return res, err
	}
	var s detachSession
	if err := s.begin(ctx, db); err != nil {
		return res, wrapErr("retention_detach_claim", err)
	}
	defer func() {
		if err := s.end(ctx, db); err != nil && pooled != nil {
			// The connection's role or settings could not be put back:
			// it must not go back to the pool.
			_ = pooled.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	// A parent whose leaf stayed half-detached (its second transaction
	// reached lock_timeout) detaches no other leaf until it is finalized:
	// PostgreSQL refuses a second one; those claims are only recorded (and
	// so released). The same goes after a DETACH that did not get its lock:
	// the next would wait as long again.
	stuck := map[uint32]bool{}
	seen := map[uint32]bool{} // a table under two policies is claimed for each
	for _, cl := range claims {
		if cl.action == "skip" {
			res.Skipped = append(res.Skipped, DetachSkip{Policy: cl.policy, Table: cl.table(), Reason: deref(cl.reason)})
			continue
		}
		res.Claimed++
		if seen[cl.leaf] {
			continue
		}
		seen[cl.leaf] = true
		blocked, err := c.detachOne(ctx, db, &s, owner, cl, stuck[cl.parent] && cl.action != "drop", &res)
		if err != nil {
			return res, err
		}
		stuck[cl.parent] = stuck[cl.parent] || blocked
	}
	return res, nil
}

func (c *Client) detachClaims(ctx context.Context, db DBTX, owner string, now *time.Time) ([]detachClaim, error) {
	params, args := "$1::pg_catalog.text", []any{owner}
	if now != nil { // the p_now overload
		params, args = "$1::pg_catalog.text, $2::pg_catalog.timestamptz", []any{owner, *now}
	}
	rows, err := db.Query(ctx, "SELECT c.policy, c.leaf, c.parent, c.action, c.leaf_schema::pg_catalog.text, c.leaf_name::pg_catalog.text, "+
		"c.parent_schema::pg_catalog.text, c.parent_name::pg_catalog.text, c.rename_to::pg_catalog.text, c.act_as::pg_catalog.text, "+
		"c.lock_timeout_ms, c.reason FROM "+c.fn("retention_detach_claim")+"("+params+") c", args...)
	if err != nil {
		return nil, wrapErr("retention_detach_claim", err)
	}
	claims, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (detachClaim, error) {
		var cl detachClaim
		err := r.Scan(&cl.policy, &cl.leaf, &cl.parent, &cl.action, &cl.leafSchema, &cl.leafName,
			&cl.parentSchema, &cl.parentName, &cl.renameTo, &cl.actAs, &cl.lockTimeoutMS, &cl.reason)
		return cl, err
	})
	if err == nil {
		for _, cl := range claims {
			if err = cl.check(); err != nil {
				break
			}
		}
	}
	return claims, wrapErr("retention_detach_claim", err)
}

// check refuses a claim that lacks a value its statements are built from.
func (cl detachClaim) check() error {
	switch cl.action {
	case "skip":
		return nil
	case "detach", "finalize":
		if cl.parentSchema == nil || cl.parentName == nil || cl.renameTo == nil {
			return fmt.Errorf("claim of leaf %d (%s): no parent or new name", cl.leaf, cl.action)
		}
	case "drop":
	default:
		return fmt.Errorf("claim of leaf %d: unknown action %q", cl.leaf, cl.action)
	}
	if cl.leafSchema == nil || cl.leafName == nil || cl.actAs == nil || *cl.actAs == "" || cl.lockTimeoutMS == nil {
		return fmt.Errorf("claim of leaf %d (%s): no name, role or lock timeout", cl.leaf, cl.action)
	}
	return nil
}

// detachSession is the connection's state for a call: its role, lock_timeout
// and search_path before it, put back by end.
type detachSession struct {
	role, lockTimeout, searchPath string
	begun                         bool
}

func (s *detachSession) begin(ctx context.Context, db DBTX) error {
	if err := db.QueryRow(ctx, "SELECT pg_catalog.current_setting('role'), pg_catalog.current_setting('lock_timeout'), "+
		"pg_catalog.current_setting('search_path')").Scan(&s.role, &s.lockTimeout, &s.searchPath); err != nil {
		return err
	}
	s.begun = true
	_, err := db.Exec(ctx, "SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)")
	return err
}

// end puts the role, lock_timeout and search_path back (even after a
// cancel, for at most 5 seconds).
func (s *detachSession) end(ctx context.Context, db DBTX) error {
	if !s.begun {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := db.Exec(cctx, "SELECT pg_catalog.set_config('role', $1::pg_catalog.text, false), "+
		"pg_catalog.set_config('lock_timeout', $2::pg_catalog.text, false), pg_catalog.set_config('search_path', $3::pg_catalog.text, false)",
		s.role, s.lockTimeout, s.searchPath)
	return err
}

// asOwner runs stmt (built here, no parameters) as role: SET ROLE for that
// statement, then the connection's own role again. An error from stmt is
// returned as stmtErr; err is what leaves the connection unusable (the
// role could not be set back), which ends the call.
func (s *detachSession) asOwner(ctx context.Context, db DBTX, role, stmt string) (stmtErr, err error) {
	if _, err := db.Exec(ctx, "SELECT pg_catalog.set_config('role', $1::pg_catalog.text, false)", role); err != nil {
		if fatal(ctx, err) {
			return nil, err
		}
		return err, nil // not a role the connection's role may act as (any more)
	}
	_, stmtErr = db.Exec(ctx, stmt)
	if _, err := db.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.set_config('role', $1::pg_catalog.text, false)", s.role); err != nil {
		return stmtErr, fmt.Errorf("set the role back after %s: %w", stmt, err)
	}
	return stmtErr, nil
}

// detachOne works one claim: DETACH (or FINALIZE) and rename, or DROP,
// each in its own transaction and as the policy's owner, then records what
// the catalog says. skip: only record it (its parent is stuck). Only an
// error that leaves the connection unusable (or a cancel) stops the call.
// blocked: the leaf's parent detaches nothing more in this call (its leaf
// stayed half-detached, or its DETACH did not get its lock in time).
func (c *Client) detachOne(ctx context.Context, db DBTX, s *detachSession, owner string, cl detachClaim, skip bool, res *DetachResult) (blocked bool, err error) {
	if _, err := db.Exec(ctx, "SELECT pg_catalog.set_config('lock_timeout', $1::pg_catalog.text, false)",
		strconv.FormatInt(*cl.lockTimeoutMS, 10)+"ms"); err != nil {
		return false, wrapErr("retention_detach_claim", err)
	}
	leaf := cl.table()
	var stmts []string
	switch {
	case skip:
	case cl.action == "drop":
		// Recorded first: a table a runner renamed but did not record (it
		// died in between) is counted while the catalog still has it; and
		// a table that is no longer the runner's detached one is not
		// dropped.
		state, err := c.detachDone(ctx, db, owner, cl, res)
		if err != nil {
			return false, err
		}
		if state != "detached" {
			return false, nil
		}
		stmts = []string{"DROP TABLE " + leaf}
	default:
		mode := " CONCURRENTLY"
		if cl.action == "finalize" {
			mode = " FINALIZE"
		}
		stmts = []string{
			"ALTER TABLE " + pgx.Identifier{*cl.parentSchema, *cl.parentName}.Sanitize() + " DETACH PARTITION " + leaf + mode,
			"ALTER TABLE " + leaf + " RENAME TO " + pgx.Identifier{*cl.renameTo}.Sanitize(),
		}
	}
	lockTimeout := false
	for _, stmt := range stmts {
		stmtErr, err := s.asOwner(ctx, db, *cl.actAs, stmt)
		if err != nil {
			return false, wrapErr("retention_detach_claim", err)
		}
		if stmtErr != nil {
			if fatal(ctx, stmtErr) {
				return false, wrapErr("retention_detach_claim", stmtErr)
			}
			res.Errors = append(res.Errors, fmt.Errorf("policy %s: %s: %w", cl.policy, stmt, stmtErr))
			var pgErr *pgconn.PgError
			lockTimeout = errors.As(stmtErr, &pgErr) && pgErr.Code == "55P03"
			break
		}
	}
	state, err := c.detachDone(ctx, db, owner, cl, res)
	if err != nil {
		return false, err
	}
	switch state {
	case "dropped":
		res.Dropped++
	case "pending":
		res.Pending++
	case "attached":
		res.Released++
	}
	return state == "pending" || lockTimeout, nil
}

// detachDone records a claim (retention_detach_done) and adds the rows it
// counted to res.
func (c *Client) detachDone(ctx context.Context, db DBTX, owner string, cl detachClaim, res *DetachResult) (string, error) {
	var state string
	var rows *int64
	err := db.QueryRow(ctx, "SELECT d.state, d.rows FROM "+c.fn("retention_detach_done")+"($1::pg_catalog.text, $2::pg_catalog.oid) d",
		owner, cl.leaf).Scan(&state, &rows)
	if err != nil {
		return "", wrapErr("retention_detach_done", err)
	}
	if rows != nil { // counted by this call
		res.Detached++
		res.Rows += *rows
		if res.RowsByPolicy == nil {
			res.RowsByPolicy = map[string]int64{}
		}
		res.RowsByPolicy[cl.policy] += *rows
	}
	return state, nil
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
