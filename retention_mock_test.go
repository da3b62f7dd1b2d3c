package pgsweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pashagolub/pgxmock/v3"
	"github.com/pgsweep/pgsweep"
)

func newMockConnClient(t *testing.T) (pgxmock.PgxConnIface, *pgsweep.Client) {
	t.Helper()
	return newMock(t, func() (pgxmock.PgxConnIface, error) { return pgxmock.NewConn() })
}

// A failed or cancelled call drops the session's hold on the policy's
// advisory lock before returning, so that a pooled connection cannot keep
// other cleaners out; the caller gets the call's error, wrapped.
func TestRetentionRunUnlocksAfterAFailedCall(t *testing.T) {
	mock, c := newMockConnClient(t)
	boom := errors.New("canceling statement due to user request")
	mock.ExpectQuery(`CALL "pgsweep".retention_run`).WithArgs("cap", (*string)(nil), time.Second).WillReturnError(boom)
	mock.ExpectExec(`SELECT "pgsweep".retention_step_unlock`).WithArgs("cap").
		WillReturnResult(pgxmock.NewResult("SELECT", 1))
	_, ran, err := c.RetentionRun(context.Background(), "cap", "", time.Second)
	if ran || !errors.Is(err, boom) || err.Error() != "pgsweep: retention_run: "+boom.Error() {
		t.Fatalf("got %v %v, want the call's error wrapped", ran, err)
	}
}

// No pass id: the policy was busy or keeps rows forever; nothing else is read.
func TestRetentionRunBusyIsNotAnError(t *testing.T) {
	mock, c := newMockConnClient(t)
	owner := "replica-1"
	mock.ExpectQuery(`CALL "pgsweep".retention_run`).WithArgs("cap", &owner, 30*time.Second).
		WillReturnRows(pgxmock.NewRows([]string{"p_pass_id"}).AddRow(nil))
	p, ran, err := c.RetentionRun(context.Background(), "cap", owner, 30*time.Second)
	if err != nil || ran || p.ID != 0 {
		t.Fatalf("got %+v %v %v, want not run", p, ran, err)
	}
}
