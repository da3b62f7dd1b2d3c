package pgsweep

import "context"

// Test hooks for the external tests of package pgsweep_test.

// ObserveHeld makes w call f with the number of messages it holds (queued,
// running or awaiting their result's flush, plus handlers of lost leases
// still running) after every claim.
func ObserveHeld(w *Worker, f func(held int)) { w.observe = f }

// CrashWorker makes w's Run return at once as if its process died: no more
// renewals, nothing completed, failed or released, handlers cancelled.
func CrashWorker(w *Worker) { close(w.crash) }

// NewWorkerOn is NewWorker on any DBTX (such as a pgxmock pool), polling only.
func NewWorkerOn(db DBTX, h Handler, opts WorkerOptions) (*Worker, error) {
	return newWorker(db, nil, h, nil, opts)
}

// CompleteGroupsAndClaim is the Worker's flush with claim: it completes
// each token's ids (tokens[i] with ids[i]) and claims up to batch more,
// returning per token the ids completed (nil: not committed). lanes: the
// ids may hold lane messages (several tokens: one transaction each).
func CompleteGroupsAndClaim(c *Client, queue, owner string, tokens []Token, ids [][]int64, batch int, lanes bool) ([][]int64, []Delivery, error) {
	acks := make([]ackGroup, len(tokens))
	for i := range tokens {
		acks[i] = ackGroup{token: tokens[i], ids: ids[i], lanes: lanes}
	}
	return c.completeAndClaim(context.Background(), queue, owner, acks, batch, 0)
}

// WorkerSignalsT is the type of a Worker's test signals.
type WorkerSignalsT = workerSignals

// WorkerSignals turns w's test signals on and returns them; call it before
// Run. The lease-lost signal rides on the LeasesLost hook, the one place
// every lost lease is counted, so the Worker's loop needs no line for it.
func WorkerSignals(w *Worker) *workerSignals {
	s := &w.signals
	s.Claimed.Init()
	s.Flushed.Init()
	s.LeaseLost.Init()
	prev := w.o.Hooks.LeasesLost
	w.o.Hooks.LeasesLost = func(queue string, n int) {
		if prev != nil {
			prev(queue, n)
		}
		s.LeaseLost.Signal(n)
	}
	return s
}
