// Package consumer holds what the two consumers of a queue -- the Worker
// (package pgsweep) and the relay -- share about the messages they hold: the
// backoff of a call that failed, the renewal of leases one call per claim
// token, and the results waiting to be sent, grouped one call per token and
// outcome. The loops stay their own (a Worker runs a handler per message, the
// relay publishes a batch); what they hold, renew and send goes through here.
package consumer

import "time"

// Backoff is the delay before retrying a call that failed: Min after the
// first failure, doubling up to Max, zero again after Reset. The zero value
// is a Backoff from 0 to 0; set Min and Max.
type Backoff struct {
	Min, Max time.Duration
	d        time.Duration
}

// Next returns the delay before the next try: Min, then twice the last,
// at most Max.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, b.Min), b.Max)
	return b.d
}

// Reset starts over at Min: the call succeeded.
func (b *Backoff) Reset() { b.d = 0 }
