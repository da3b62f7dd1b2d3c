package pgsweep_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pashagolub/pgxmock/v3"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The Worker's error paths without a database: each test scripts the exact
// calls the Worker must make, and the mock fails the test on any other call
// (such as a completion it must not send) or on a call that never came.

var claimCols = []string{"id", "key", "payload", "headers", "attempt", "created_at", "lease_expires_at", "token", "lane"}

// mockToken is the token of every mocked claim.
var mockToken = pgsweep.Token{0x8f, 0x6f, 0x1c, 0x52, 0x3a, 0x5e, 0x4d, 0x3c, 0x9d, 0x61, 0x0a, 0x4b, 0x2c, 0x1e, 0x7f, 0x90}

func oneDelivery(id int64) *pgxmock.Rows {
	now := time.Now()
	return pgxmock.NewRows(claimCols).AddRow(id, nil, []byte(`1`), []byte(`{}`), int32(1), now, now.Add(time.Minute), mockToken, nil)
}

// startRun runs w; stop cancels Run's context and returns Run's error, or
// fails the test when Run does not return.
func startRun(t *testing.T, w *pgsweep.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}
}

// runMockWorker runs a Worker on mock until until() is true, then stops it
// and returns Run's error.
func runMockWorker(t *testing.T, mock pgxmock.PgxPoolIface, h pgsweep.Handler, o pgsweep.WorkerOptions, until func() bool) error {
	t.Helper()
	o.Queue, o.Owner, o.Logger = "q", "w", quietLog
	w, err := pgsweep.NewWorkerOn(mock, h, o)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, w)
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("the scripted calls", until))
	return stop()
}

// A completion that fails on the way to the database is kept and sent again;
// the message is completed once.
func TestWorkerRetriesAFailedCompletion(t *testing.T) {
	mock, _ := newMockClient(t)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Minute).WillReturnRows(oneDelivery(7))
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{7}).WillReturnError(errors.New("connection reset"))
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{7}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(7)))
	runUntilCompleted(t, mock, 1)
}

// runUntilCompleted runs a Worker with a no-op handler (batch 10, lease a
// minute, no polling) on mock until n messages were completed.
func runUntilCompleted(t *testing.T, mock pgxmock.PgxPoolIface, n int64) {
	t.Helper()
	var completed atomic.Int64
	err := runMockWorker(t, mock, func(context.Context, *pgsweep.Delivery) error { return nil },
		pgsweep.WorkerOptions{Batch: 10, Lease: time.Minute, PollInterval: time.Hour,
			Hooks: pgsweep.Hooks{Completed: func(_ string, k int) { completed.Add(int64(k)) }}},
		func() bool { return completed.Load() == n })
	if err != nil {
		t.Fatal(err)
	}
}

// A claim cut at its deadline gives the next claim twice the time: a claim
// that starts cold (the cut closed its connection) and takes longer than a
// lease is not cut again and again (seen on Citus under load: nothing was
// claimed for minutes); a claim that returns resets it. The mock's first
// claim takes 1.5 s against a 1 s lease; what the test checks is the time
// each claim was given (its context's deadline), recorded by claimBudgets.
func TestWorkerGivesACutClaimMoreTime(t *testing.T) {
	mock, _ := newMockClient(t)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Second).
		WillReturnRows(oneDelivery(9)).WillDelayFor(1500 * time.Millisecond)
	for range 2 {
		mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Second).WillReturnRows(pgxmock.NewRows(claimCols))
	}
	db := &claimBudgets{DBTX: mock}
	w, err := pgsweep.NewWorkerOn(db, func(context.Context, *pgsweep.Delivery) error { return nil },
		pgsweep.WorkerOptions{Queue: "q", Owner: "w", Logger: quietLog, Batch: 10, Lease: time.Second, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, w)
	pgtest.Eventually(t, 20*time.Second, pgtest.Until("three claims", func() bool { return len(db.budgets()) >= 3 }))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b := db.budgets()
	if b[0] > time.Second || b[1] <= 1500*time.Millisecond || b[2] > time.Second {
		t.Fatalf("claims were given %v; want the lease (1 s), twice it after the cut, the lease again after a claim returned", b[:3])
	}
}

// claimBudgets records how long each claim may take (its context's
// deadline, from when it was sent).
type claimBudgets struct {
	pgsweep.DBTX
	mu sync.Mutex
	b  []time.Duration
}

func (c *claimBudgets) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, ".claim(") {
		if d, ok := ctx.Deadline(); ok {
			c.mu.Lock()
			c.b = append(c.b, time.Until(d))
			c.mu.Unlock()
		}
	}
	return c.DBTX.Query(ctx, sql, args...)
}

func (c *claimBudgets) budgets() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.b...)
}

// A claim that fails is retried after a short backoff, not after the whole
// poll interval, and does not stop Run.
func TestWorkerRetriesAFailedClaim(t *testing.T) {
	mock, _ := newMockClient(t)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Minute).WillReturnError(errors.New("connection refused"))
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Minute).WillReturnRows(oneDelivery(8))
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{8}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(8)))
	runUntilCompleted(t, mock, 1)
}

// While renewals fail, a lease is presumed lost once its expiry passed:
// the handler is cancelled, the loss counted, and its result never sent
// (another worker may hold the message by now).
func TestWorkerPresumesALeaseLostWhileRenewalsFail(t *testing.T) {
	mock, _ := newMockClient(t)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Second).WillReturnRows(oneDelivery(9))
	down := errors.New("connection refused")
	// Renewals every 333ms: the one that finds the lease past its expiry is
	// the 4th, or fewer when the ticker skipped a beat under load.
	mock.ExpectQuery(`SELECT "pgsweep".renew`).WithArgs("q", mockToken, []int64{9}, time.Second).WillReturnError(down)
	for range 3 {
		mock.ExpectQuery(`SELECT "pgsweep".renew`).WithArgs("q", mockToken, []int64{9}, time.Second).Maybe().WillReturnError(down)
	}
	var lost atomic.Int64
	cancelled := make(chan struct{})
	err := runMockWorker(t, mock, func(ctx context.Context, _ *pgsweep.Delivery) error {
		<-ctx.Done()
		close(cancelled)
		return nil // would complete; must be discarded
	}, pgsweep.WorkerOptions{Batch: 10, Lease: time.Second, PollInterval: time.Hour,
		Hooks: pgsweep.Hooks{LeasesLost: func(_ string, n int) { lost.Add(int64(n)) }}},
		func() bool { return lost.Load() == 1 })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler of the presumed-lost lease was not cancelled")
	}
}

// signalingDB tells on a channel when a query containing match starts.
type signalingDB struct {
	pgxmock.PgxPoolIface
	match   string
	started chan struct{}
}

func (s *signalingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, s.match) {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	return s.PgxPoolIface.Query(ctx, sql, args...)
}

// While the loop waits on a database call that hangs, a handler whose lease
// expires is still cancelled (by the watchdog): the loop is not needed for it.
func TestWorkerCancelsExpiredHandlersWhileACallHangs(t *testing.T) {
	mock, _ := newMockClient(t)
	now := time.Now()
	two := pgxmock.NewRows(claimCols).
		AddRow(int64(1), nil, []byte(`"fast"`), []byte(`{}`), int32(1), now, now.Add(time.Second), mockToken, nil).
		AddRow(int64(2), nil, []byte(`"slow"`), []byte(`{}`), int32(1), now, now.Add(time.Second), mockToken, nil)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Second).WillReturnRows(two)
	// The completion of the fast one hangs (an hour) until shutdown cuts it.
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{1}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(1))).WillDelayFor(time.Hour)
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{1}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(1)))
	// A renewal of the slow one may come between the two (its ticker fired
	// while the loop waited); not expected, the mock refuses it, which the
	// Worker logs like any failed renewal.
	db := &signalingDB{PgxPoolIface: mock, match: "complete", started: make(chan struct{}, 1)}
	cancelled := make(chan struct{})
	w, err := pgsweep.NewWorkerOn(db, func(ctx context.Context, d *pgsweep.Delivery) error {
		if string(d.Payload) == `"fast"` {
			return nil
		}
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}, pgsweep.WorkerOptions{Queue: "q", Owner: "w", Batch: 10, Lease: time.Second, PollInterval: time.Hour,
		ShutdownTimeout: 100 * time.Millisecond, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, w)
	<-db.started // the loop now waits on the hanging completion
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("the expired handler was not cancelled while the loop waited on the database")
	}
	if err := stop(); err != nil { // the shutdown deadline cuts the hanging call
		t.Fatal(err)
	}
}

// The shutdown deadline counts from the cancellation of Run's context and
// cuts a database call in flight: Run returns though a renewal hangs.
func TestWorkerShutdownDeadlineCutsAHangingCall(t *testing.T) {
	mock, _ := newMockClient(t)
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, time.Second).WillReturnRows(oneDelivery(5))
	mock.ExpectQuery(`SELECT "pgsweep".renew`).WithArgs("q", mockToken, []int64{5}, time.Second).
		WillReturnRows(pgxmock.NewRows([]string{"renew"}).AddRow(int64(5))).WillDelayFor(time.Hour)
	db := &signalingDB{PgxPoolIface: mock, match: "renew", started: make(chan struct{}, 1)}
	w, err := pgsweep.NewWorkerOn(db, func(ctx context.Context, _ *pgsweep.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	}, pgsweep.WorkerOptions{Queue: "q", Owner: "w", Batch: 10, Lease: time.Second, PollInterval: time.Hour,
		ShutdownTimeout: 100 * time.Millisecond, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	stop := startRun(t, w)
	<-db.started // the renewal hangs; the loop waits on it
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A flush that completes the ids of several claims commits one token at a
// time: when the second complete fails, the first token's ids stand and are
// reported, the second's are reported as not committed (nil), so the Worker
// keeps them for the next flush instead of counting them completed or lost.
func TestCompleteGroupsReportsWhatWasCommitted(t *testing.T) {
	mock, c := newMockClient(t)
	other := pgsweep.Token{1, 2, 3}
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{1, 2}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(1)))
	boom := errors.New("connection reset")
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", other, []int64{3}).WillReturnError(boom)
	byGroup, ds, err := pgsweep.CompleteGroupsAndClaim(c, "q", "w", []pgsweep.Token{mockToken, other}, [][]int64{{1, 2}, {3}}, 10, true)
	if !errors.Is(err, boom) || ds != nil {
		t.Fatalf("got deliveries %v, err %v; want the second complete's error and no claim", ds, err)
	}
	if len(byGroup) != 2 || len(byGroup[0]) != 1 || byGroup[0][0] != 1 || byGroup[1] != nil {
		t.Fatalf("per token %v, want [[1] nil]: id 1 completed (2's lease lost), token 2 not committed", byGroup)
	}

	// both committed, all leases lost on the second: an empty, non-nil result
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", mockToken, []int64{4}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}).AddRow(int64(4)))
	mock.ExpectQuery(`SELECT "pgsweep".complete`).WithArgs("q", other, []int64{5}).
		WillReturnRows(pgxmock.NewRows([]string{"complete"}))
	mock.ExpectQuery(`FROM "pgsweep".claim`).WithArgs("q", "w", 10, nil).WillReturnRows(oneDelivery(6))
	byGroup, ds, err = pgsweep.CompleteGroupsAndClaim(c, "q", "w", []pgsweep.Token{mockToken, other}, [][]int64{{4}, {5}}, 10, true)
	if err != nil || len(ds) != 1 || len(byGroup) != 2 || len(byGroup[0]) != 1 || byGroup[1] == nil || len(byGroup[1]) != 0 {
		t.Fatalf("got %v, %v, %v; want [[4] []] and one delivery", byGroup, ds, err)
	}
	if err := mock.ExpectationsWereMet(); err != nil {
		t.Fatal(err)
	}
}
