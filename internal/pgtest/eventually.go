package pgtest

import (
	"fmt"
	"testing"
	"time"
)

// Eventually waits until cond returns nil, checking it at once and then at
// growing intervals (1 ms doubling to 50 ms), and fails t with cond's last
// error if it still fails after within. It is for conditions production
// code does not signal (rows in a table, a backend's state, a process's
// health endpoint); what a Worker, a relay or a runner did is waited on with
// their signals (internal/testsignal). within is a bound for a loaded
// machine, never a measurement: no test asserts on how long it took.
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", within, err)
		}
		timer.Reset(pause)
		<-timer.C
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Until is a condition for Eventually from a boolean test: while ok returns
// false, its error says the test still waits for what.
func Until(what string, ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return fmt.Errorf("still waiting for %s", what)
	}
}
