package runner

import "github.com/pgsweep/pgsweep/internal/testsignal"

// signals tell a test what a Runner did (internal/testsignal; a test turns
// them on with Init before Run): off in production, where each costs one
// nil check.
type signals struct {
	// PassDone: Run's pass ended, with its error (nil: it succeeded).
	PassDone testsignal.Signal[error]
	// PartDone: the progress watcher saw the pass in flight commit a part's
	// step (the progress it counts for Health).
	PartDone testsignal.Signal[progressMark]
}
