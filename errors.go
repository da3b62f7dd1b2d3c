package pgsweep

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrInvalidArgument matches (with errors.Is) every error that the database
// raised because an argument was out of range (SQLSTATE 22023). Nothing was
// changed when such an error is returned.
var ErrInvalidArgument = errors.New("invalid argument")

// ErrPermissionDenied matches (with errors.Is) every error that the database
// raised because the calling role lacks a privilege (SQLSTATE 42501): a
// per-queue right (RightSend, RightConsume, RightBrowse, RightManage; the
// message names the queue and the right) or a function grant. Nothing was
// changed when such an error is returned.
var ErrPermissionDenied = errors.New("permission denied")

// Error is returned by every Client method that failed in the database or on
// the way to it. Op names the SQL function that was called.
type Error struct {
	// Op is the SQL function (or step) that failed, such as "claim".
	Op string
	// Err is the cause: often a *pgconn.PgError, or a network error.
	Err error
}

// Error returns "pgsweep: <op>: <cause>".
func (e *Error) Error() string { return "pgsweep: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the underlying error (often a *pgconn.PgError).
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether the error is an invalid-argument (ErrInvalidArgument,
// SQLSTATE 22023) or a permission-denied (ErrPermissionDenied, SQLSTATE
// 42501) error from the database.
func (e *Error) Is(target error) bool {
	var code string
	switch target {
	case ErrInvalidArgument:
		code = "22023"
	case ErrPermissionDenied:
		code = "42501"
	default:
		return false
	}
	var pgErr *pgconn.PgError
	return errors.As(e.Err, &pgErr) && pgErr.Code == code
}

func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Err: err}
}

func errorf(op, format string, args ...any) error {
	return &Error{Op: op, Err: fmt.Errorf(format, args...)}
}
