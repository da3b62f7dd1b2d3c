package pgsweep

import (
	"errors"
	"time"

	"github.com/pgsweep/pgsweep/internal/consumer"
)

// Hooks receive a Worker's counts for metrics. Each field is optional; a hook
// is called from the Worker's loop and must return quickly.
type Hooks struct {
	// Claimed: n messages were claimed (leased) from queue.
	Claimed func(queue string, n int)
	// Completed: n messages were completed.
	Completed func(queue string, n int)
	// Failed: n messages failed and will be retried.
	Failed func(queue string, n int)
	// DeadLettered: n messages failed on their last attempt and moved to the dead letters.
	DeadLettered func(queue string, n int)
	// LeasesLost: n leases were found taken over or recovered (renew,
	// complete or fail did not act on them: their claim's token no longer
	// holds them); their results were discarded.
	LeasesLost func(queue string, n int)
	// Released: n messages were given back to the queue (due at once,
	// attempt not spent): those claimed but never started, at shutdown, and
	// those whose handler returned GiveBack.
	Released func(queue string, n int)
	// Database is called after each claim and each call that records
	// results with the call's error: nil when the database answered. For a
	// health check; the Worker logs and retries the errors itself.
	Database func(queue string, err error)
}

func (h *Hooks) database(queue string, err error) {
	if h.Database != nil {
		h.Database(queue, err)
	}
}

func (h *Hooks) call(f func(string, int), queue string, n int) {
	if f != nil && n > 0 {
		f(queue, n)
	}
}

// retryAfterError asks the Worker to retry a message after a fixed delay.
type retryAfterError struct {
	err   error
	after time.Duration
}

// Error returns the wrapped error's text.
func (e *retryAfterError) Error() string { return e.err.Error() }

// Unwrap returns the handler's error that RetryAfter wrapped.
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps a handler's error so that the message is retried after d
// (0: at once) instead of after the queue's exponential backoff. On its last
// attempt it is dead-lettered all the same. d is passed to fail as it is: a
// delay fail refuses (negative, or above its p_retry_after maximum) gets
// ErrInvalidArgument, which the Worker logs, leaving the message to lease
// expiry and redelivery.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{err: err, after: d}
}

// outcomeError asks the Worker for an outcome other than a failure.
type outcomeError struct {
	err  error
	kind consumer.Kind // DeadLetter or Release
}

// Error returns the wrapped error's text.
func (e *outcomeError) Error() string { return e.err.Error() }

// Unwrap returns the handler's error.
func (e *outcomeError) Unwrap() error { return e.err }

// Permanent wraps a handler's error that no retry can mend (a message the
// downstream refuses for good): the Worker moves the message to the dead
// letters at once, with err's text, whatever attempts it has left.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &outcomeError{err: err, kind: consumer.DeadLetter}
}

// GiveBack wraps a handler's error that says the message was not processed
// for a reason of the handler's own (its downstream is unreachable): the
// Worker releases it (Client.Release), due again at once with its attempt
// not spent, so an outage never dead-letters a message. Pair it with
// WorkerOptions.ClaimLimit, or the Worker claims the message straight
// back.
func GiveBack(err error) error {
	if err == nil {
		err = errors.New("given back")
	}
	return &outcomeError{err: err, kind: consumer.Release}
}
