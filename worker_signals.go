package pgsweep

import "github.com/pgsweep/pgsweep/internal/testsignal"

// workerSignals tell a test what a Worker did (internal/testsignal; turned
// on by export_test.go's WorkerSignals): off in production, where each
// costs one nil check.
type workerSignals struct {
	Claimed   testsignal.Signal[int] // a claim returned: how many messages it got (0 too)
	Flushed   testsignal.Signal[int] // results were sent: how many claim groups' results still wait (0: all recorded)
	LeaseLost testsignal.Signal[int] // n leases were found lost (through Hooks.LeasesLost)
}
