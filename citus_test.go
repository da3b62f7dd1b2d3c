package pgsweep_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Client.CitusDistribute on a database without Citus: the SQL refuses with
// 55000 and a hint, and the error says which call failed and wraps both.
// (On a Citus coordinator: internal/citustest, TestCitusBenchClaim and the
// bench's --citus, which distribute through it.)
func TestClientCitusDistributeWithoutCitus(t *testing.T) {
	db := pgtest.New(t, 2)
	objs, err := db.Client.CitusDistribute(context.Background())
	var pgErr *pgconn.PgError
	var e *pgsweep.Error
	if objs != nil || !errors.As(err, &e) || e.Op != "citus_distribute" || !errors.As(err, &pgErr) || pgErr.Code != "55000" ||
		!strings.Contains(pgErr.Message, "needs the Citus extension") || pgErr.Hint == "" {
		t.Fatalf("CitusDistribute without Citus: %v, %v; want a pgsweep.Error for citus_distribute wrapping 55000 with a hint", objs, err)
	}
}
