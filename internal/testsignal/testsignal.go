// Package testsignal is how a test waits for something production code did,
// instead of sleeping or polling: a Signal is a field of a production type
// that the code fires at the moment of interest ("claimed", "published",
// "pass done") and a test, having called Init first, waits on.
//
// In production a Signal is never initialised: its channel is nil and
// Signal returns at once (one nil check, no allocation, no lock). Modelled
// on River's rivershared/testsignal.
package testsignal

import "time"

// TB is the part of testing.TB a Signal uses (the package does not import
// testing: production code imports it).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Timeout is how long WaitOrTimeout waits: long enough for a shared,
// loaded CI machine, short enough that a missing signal fails the test
// instead of its whole binary's -timeout.
const Timeout = 30 * time.Second

// capacity is the buffer of an initialised Signal. The code that fires a
// signal never blocks on it: a value sent while the buffer is full is
// dropped. A test that needs every value waits for them as they come.
const capacity = 1000

// Signal carries values of type T from production code to a test. The zero
// value is off: Signal does nothing.
type Signal[T any] struct {
	ch chan T
}

// Init turns s on; call it before the code that fires s starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal sends v to the test waiting on s, when s is on; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// WaitC returns the channel the values arrive on (for a select with other
// channels); nil when s is off.
func (s *Signal[T]) WaitC() <-chan T { return s.ch }

// WaitOrTimeout returns the next value fired, failing tb if none comes
// within Timeout (or s was never initialised).
func (s *Signal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("testsignal: WaitOrTimeout on a Signal that was never initialised")
	}
	t := time.NewTimer(Timeout)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-t.C:
		tb.Fatalf("testsignal: no signal within %v", Timeout)
	}
	panic("unreachable")
}

// WaitUntil waits for values until one satisfies ok and returns it, failing
// tb if none does within Timeout.
func (s *Signal[T]) WaitUntil(tb TB, what string, ok func(T) bool) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("testsignal: WaitUntil on a Signal that was never initialised")
	}
	t := time.NewTimer(Timeout)
	defer t.Stop()
	for {
		select {
		case v := <-s.ch:
			if ok(v) {
				return v
			}
		case <-t.C:
			tb.Fatalf("testsignal: %s: not within %v", what, Timeout)
		}
	}
}

// RequireEmpty fails tb if a value is waiting on s: the code fired a signal
// the test says it must not have (yet).
func (s *Signal[T]) RequireEmpty(tb TB) {
	tb.Helper()
	select {
	case v := <-s.ch:
		tb.Fatalf("testsignal: unexpected signal %v", v)
	default:
	}
}
