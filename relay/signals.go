package relay

import "github.com/pgsweep/pgsweep/internal/testsignal"

// signals tell a test what a Relay did (internal/testsignal; turned on by
// export_test.go's Signals): off in production, where each costs one nil
// check.
type signals struct {
	Published testsignal.Signal[int] // the broker confirmed n messages (before the database records them)
	Settled   testsignal.Signal[int] // the outcome of a claim's n messages was sent to the database
}
