package pgsweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pashagolub/pgxmock/v3"
	"github.com/pgsweep/pgsweep"
)

// mock is what the pgxmock pool and connection mocks have in common here.
type mock interface {
	pgsweep.DBTX
	ExpectationsWereMet() error
}

// newMock returns a Client on a fresh pgxmock (pgxmock.NewPool or
// pgxmock.NewConn) whose expectations must all be met by the test's end.
func newMock[M mock](t *testing.T, open func() (M, error)) (M, *pgsweep.Client) {
	t.Helper()
	m, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.ExpectationsWereMet(); err != nil {
			t.Error(err)
		}
	})
	c, err := pgsweep.NewClient(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func newMockClient(t *testing.T) (pgxmock.PgxPoolIface, *pgsweep.Client) {
	t.Helper()
	return newMock(t, func() (pgxmock.PgxPoolIface, error) { return pgxmock.NewPool() })
}

func TestLeaseAcquireWrapsDriverErrors(t *testing.T) {
	mock, c := newMockClient(t)
	boom := errors.New("connection reset")
	mock.ExpectQuery(`SELECT "pgsweep".lease_acquire`).WithArgs("job", "a", time.Second).WillReturnError(boom)
	_, ok, err := c.LeaseAcquire(context.Background(), "job", "a", time.Second)
	if ok || !errors.Is(err, boom) {
		t.Fatalf("got %v %v, want the driver error wrapped", ok, err)
	}
	if errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatal("a connection error must not look like an invalid argument")
	}
	if got := err.Error(); got != "pgsweep: lease_acquire: connection reset" {
		t.Fatalf("message %q does not name the operation", got)
	}
}

func TestLeaseAcquireNullMeansNotHeld(t *testing.T) {
	mock, c := newMockClient(t)
	mock.ExpectQuery(`SELECT "pgsweep".lease_acquire`).WithArgs("job", "a", time.Second).
		WillReturnRows(pgxmock.NewRows([]string{"lease_acquire"}).AddRow(nil))
	tok, ok, err := c.LeaseAcquire(context.Background(), "job", "a", time.Second)
	if err != nil || ok || tok != 0 {
		t.Fatalf("got %d %v %v, want not held", tok, ok, err)
	}
}

func TestInvalidArgumentIsRecognised(t *testing.T) {
	mock, c := newMockClient(t)
	mock.ExpectQuery(`SELECT "pgsweep".lease_renew`).WithArgs("job", "a", 2*time.Hour).
		WillReturnError(&pgconn.PgError{Code: "22023", Message: "p_ttl must be between 1 second and 1 hour, got 2 hours"})
	_, err := c.LeaseRenew(context.Background(), "job", "a", 2*time.Hour)
	if !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("got %v, want ErrInvalidArgument", err)
	}
}

func TestLeaseReleaseOwnerRowError(t *testing.T) {
	mock, c := newMockClient(t)
	mock.ExpectQuery(`SELECT "pgsweep".lease_release_owner`).WithArgs("me").
		WillReturnRows(pgxmock.NewRows([]string{"n"}).AddRow("a").RowError(0, errors.New("lost")))
	if _, err := c.LeaseReleaseOwner(context.Background(), "me"); err == nil {
		t.Fatal("row error was swallowed")
	}
}

func TestNewClientValidates(t *testing.T) {
	if _, err := pgsweep.NewClient(nil, nil); err == nil {
		t.Fatal("nil db accepted")
	}
	mock, _ := pgxmock.NewPool()
	if _, err := pgsweep.NewClient(mock, &pgsweep.ClientOptions{Schema: "Bad-Name"}); err == nil {
		t.Fatal("bad schema accepted")
	}
}
