package consumer

import (
	"context"
	"iter"
	"slices"
	"time"
)

// Kind is what becomes of a held message.
type Kind uint8

const (
	// Complete: processed (published); the message is done.
	Complete Kind = iota
	// Fail: retried after a backoff, dead-lettered after its last attempt.
	Fail
	// DeadLetter: no retry can succeed; dead-lettered at once.
	DeadLetter
	// Release: not processed; due again at once with its attempt back.
	Release
)

// String is the name of the database verb that records the outcome.
func (k Kind) String() string {
	return [...]string{"complete", "fail", "dead_letter", "release"}[k]
}

// Key is one call of the database: the messages of one claim (its token)
// with one outcome, error text and retry delay.
type Key[T comparable] struct {
	Token T
	Kind  Kind
	Text  string        // Fail, DeadLetter: the error text
	After time.Duration // Fail with Fixed: the delay the handler chose
	Fixed bool          // Fail: After is set; otherwise the queue's backoff
}

// Results are the outcomes that wait to be sent, one id list per Key.
// Not safe for concurrent use.
type Results[T comparable] struct {
	m map[Key[T]][]int64
}

// Add records that id's outcome is k.
func (r *Results[T]) Add(k Key[T], id int64) {
	if r.m == nil {
		r.m = map[Key[T]][]int64{}
	}
	r.m[k] = append(r.m[k], id)
}

// Len is the number of calls waiting.
func (r *Results[T]) Len() int { return len(r.m) }

// Only reports whether every call waiting is of kind.
func (r *Results[T]) Only(kind Kind) bool {
	for k := range r.m {
		if k.Kind != kind {
			return false
		}
	}
	return true
}

// Forget takes id, held under token, out of whatever call waits for it (its
// lease was lost: its outcome is not sent).
func (r *Results[T]) Forget(token T, id int64) {
	for k, ids := range r.m {
		if k.Token != token {
			continue
		}
		if ids = slices.DeleteFunc(ids, func(x int64) bool { return x == id }); len(ids) == 0 {
			delete(r.m, k)
		} else {
			r.m[k] = ids
		}
	}
}

// Done drops the call k: it was sent, or will never be.
func (r *Results[T]) Done(k Key[T]) { delete(r.m, k) }

// All yields every waiting call, completions first: they are what a crash
// would make a consumer do again.
func (r *Results[T]) All() iter.Seq2[Key[T], []int64] {
	return func(yield func(Key[T], []int64) bool) {
		for _, complete := range []bool{true, false} {
			for k, ids := range r.m {
				if (k.Kind == Complete) == complete && !yield(k, ids) {
					return
				}
			}
		}
	}
}

// Store sends the calls: the database verbs of one queue.
type Store[T comparable] struct {
	Complete   func(ctx context.Context, token T, ids []int64) ([]int64, error)
	Fail       func(ctx context.Context, token T, ids []int64, text string, after *time.Duration) (done, dead int, err error)
	DeadLetter func(ctx context.Context, token T, ids []int64, text string) ([]int64, error)
	Release    func(ctx context.Context, token T, ids []int64) ([]int64, error)
}

// Sent is what one call did.
type Sent struct {
	Done int // the ids it acted on; the others' leases were lost meanwhile
	Dead int // of Done, the failures that used their last attempt (Fail)
	Err  error
}

// Send makes the call k for ids.
func (s Store[T]) Send(ctx context.Context, k Key[T], ids []int64) Sent {
	var got []int64
	var err error
	switch k.Kind {
	case Complete:
		got, err = s.Complete(ctx, k.Token, ids)
	case Fail:
		var after *time.Duration
		if k.Fixed {
			after = &k.After
		}
		done, dead, err := s.Fail(ctx, k.Token, ids, k.Text, after)
		return Sent{Done: done, Dead: dead, Err: err}
	case DeadLetter:
		got, err = s.DeadLetter(ctx, k.Token, ids, k.Text)
	case Release:
		got, err = s.Release(ctx, k.Token, ids)
	}
	return Sent{Done: len(got), Err: err}
}
