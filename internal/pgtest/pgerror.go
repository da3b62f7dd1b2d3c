package pgtest

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// PgError is the server's error in err's chain, or a zero PgError (Code
// "") when err is nil or carries none: a test compares its Code, Message or
// Hint without unwrapping err itself.
func PgError(err error) *pgconn.PgError {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr
	}
	return &pgconn.PgError{}
}
