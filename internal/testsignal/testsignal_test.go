package testsignal

import (
	"fmt"
	"testing"
)

// fakeTB records a Fatalf instead of ending the test, so that the failures
// themselves can be checked.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

func failure(f func(tb TB)) (msg string) {
	tb := &fakeTB{}
	defer func() {
		if r := recover(); r != nil && r != tb {
			panic(r)
		}
		msg = tb.failed
	}()
	f(tb)
	return ""
}

func TestOffSignalIsANoOp(t *testing.T) {
	var s Signal[int]
	s.Signal(1) // must neither block nor panic
	if s.WaitC() != nil {
		t.Fatal("an off Signal has a channel")
	}
	if msg := failure(func(tb TB) { s.WaitOrTimeout(tb) }); msg == "" {
		t.Fatal("WaitOrTimeout on an off Signal did not fail")
	}
}

func TestSignalDeliversInOrderAndNeverBlocks(t *testing.T) {
	var s Signal[int]
	s.Init()
	for i := range capacity + 10 { // past the buffer: dropped, not blocked
		s.Signal(i)
	}
	for i := range 3 {
		if got := s.WaitOrTimeout(t); got != i {
			t.Fatalf("got %d, want %d", got, i)
		}
	}
	if got := s.WaitUntil(t, "the last kept value", func(v int) bool { return v == capacity-1 }); got != capacity-1 {
		t.Fatalf("got %d", got)
	}
	s.RequireEmpty(t)
	s.Signal(7)
	if msg := failure(func(tb TB) { s.RequireEmpty(tb) }); msg == "" {
		t.Fatal("RequireEmpty passed with a value waiting")
	}
}
