package pgtest

import (
	"context"
	"testing"
)

// RunUntilCleanup runs run (a Worker's or a relay's Run) in a goroutine
// until the test ends: its cleanup cancels run's context, waits for it to
// return and fails the test with what it returned, if anything.
func RunUntilCleanup(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}
