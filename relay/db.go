package relay

import (
	"context"
	"time"

	"github.com/pgsweep/pgsweep"
)

// held is a message the relay holds a claim on.
type held struct {
	msg   Message
	token pgsweep.Token
	// dispatched is when Dispatch was called for it (about when the
	// transaction that sent it committed); zero for a message a claim found.
	dispatched time.Time
}

// db is the relay's side of pgsweep: every call goes through the Client
// (claim, claim_ids, dead_letter; the acknowledgements too).
type db struct {
	client *pgsweep.Client
	queue  string
	owner  string
	lease  time.Duration
}

// claimIDs leases exactly those of ids that are claimable now (claim_ids).
func (d *db) claimIDs(ctx context.Context, ids []int64) ([]held, error) {
	ds, err := d.client.ClaimIDs(ctx, d.queue, d.owner, ids, d.lease)
	if len(ds) == 0 {
		return nil, err
	}
	hs := make([]held, len(ds))
	for i := range ds {
		hs[i] = heldOf(&ds[i])
	}
	return hs, err
}

// heldOf turns a delivery of the client into the relay's claim.
func heldOf(d *pgsweep.Delivery) held {
	return held{token: d.Token, msg: Message{Queue: d.Queue, ID: d.ID, Key: d.Key, Lane: d.Lane,
		Payload: d.Payload, Headers: d.Headers, Attempt: d.Attempt, CreatedAt: d.CreatedAt}}
}
