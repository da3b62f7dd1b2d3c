package relay

// Test hooks for the external tests of package relay_test.

// Signals turns r's test signals on and returns them; call it before Run.
func Signals(r *Relay) *signals {
	r.signals.Published.Init()
	r.signals.Settled.Init()
	return &r.signals
}
