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
	return newWorker(db, nil, h, opts)
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
