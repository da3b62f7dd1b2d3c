package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pashagolub/pgxmock/v3"
	"github.com/pgsweep/pgsweep"
)

// The package-level Send targets schema pgsweep and reports a duplicate
// (NULL id) as ok=false without an error.
func TestSendDefaultSchemaAndDuplicate(t *testing.T) {
	mock, err := pgxmock.NewPool()
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	mock.ExpectQuery(`SELECT "pgsweep".send\(\$1, \$2, \$3, \$4, \$5\)`).
		WithArgs("in", `{"a":1}`, nil, "k", nil).
		WillReturnRows(pgxmock.NewRows([]string{"send"}).AddRow(nil))
	id, ok, err := pgsweep.Send(context.Background(), mock, "in", pgsweep.Message{Payload: json.RawMessage(`{"a":1}`), Key: "k"})
	if err != nil || ok || id != 0 {
		t.Fatalf("got %d %v %v, want a refused duplicate", id, ok, err)
	}
	boom := errors.New("connection reset")
	mock.ExpectQuery(`SELECT "pgsweep".send`).WithArgs(pgxmock.AnyArg(), pgxmock.AnyArg(), pgxmock.AnyArg(), pgxmock.AnyArg(), pgxmock.AnyArg()).
		WillReturnError(boom)
	if _, _, err := pgsweep.Send(context.Background(), mock, "in", pgsweep.Message{Payload: json.RawMessage(`1`)}); !errors.Is(err, boom) || err.Error() != "pgsweep: send: connection reset" {
		t.Fatalf("driver error not wrapped with the operation: %v", err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}

// A claim that fails on the way to the database is reported, wrapped, and
// returns no deliveries.
func TestClaimWrapsDriverErrors(t *testing.T) {
	mock, c := newMockClient(t)
	boom := errors.New("broken pipe")
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, nil).WillReturnError(boom)
	ds, err := c.Claim(context.Background(), "q", "w", 10, 0)
	if ds != nil || !errors.Is(err, boom) || errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("got %v %v", ds, err)
	}
}
