package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/pgsweep/pgsweep"
)

// Fleet runs Workers in slots the way a fleet of processes replaces the
// ones that die: each slot runs one incarnation after another (a new
// Worker, a new owner, a pool of its own) until Stop. The Worker's crash
// tests and the Citus tier's share it.
type Fleet struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
}

// Incarnation is one life of a slot.
type Incarnation struct {
	Slot, N int
	// Owner is "sSS.N": the Worker's owner label, unique to the
	// incarnation.
	Owner string
	// Ctx is done once the fleet stops: the context of the Worker's Run.
	Ctx context.Context
	rng *rand.Rand
	mu  *sync.Mutex
}

// Float64 draws from the slot's random source (seeded by the slot and the
// fleet's seed); safe for the handlers' goroutines.
func (in *Incarnation) Float64() float64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.Float64()
}

// IntN draws a number in [0, n) from the slot's random source.
func (in *Incarnation) IntN(n int) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.rng.IntN(n)
}

// StartFleet starts slots slots. life runs one incarnation: it returns once
// its Worker's Run returned; nil starts the next incarnation (unless the
// fleet stops), an error ends the slot and Stop returns it.
func StartFleet(ctx context.Context, slots int, seed uint64, life func(in *Incarnation) error) *Fleet {
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{cancel: cancel}
	for slot := range slots {
		f.wg.Go(func() {
			rng, mu := rand.New(rand.NewPCG(uint64(slot), seed)), &sync.Mutex{}
			for n := 0; ctx.Err() == nil; n++ {
				in := &Incarnation{Slot: slot, N: n, Owner: fmt.Sprintf("s%02d.%d", slot, n), Ctx: ctx, rng: rng, mu: mu}
				if err := life(in); err != nil {
					f.mu.Lock()
					if f.err == nil {
						f.err = fmt.Errorf("slot %d, incarnation %d: %w", slot, n, err)
					}
					f.mu.Unlock()
					return
				}
			}
		})
	}
	return f
}

// Err returns the first error of a life so far (the slots that are left
// go on).
func (f *Fleet) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Stop ends every slot (the Runs' contexts are done), waits for them, and
// returns the first error of a life.
func (f *Fleet) Stop() error {
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Counts are the Worker's Hooks counted: what the tests check.
type Counts struct {
	Claimed, Completed, Failed, Dead, Lost, Released atomic.Int64
}

// Hooks returns hooks that count into c.
func (c *Counts) Hooks() pgsweep.Hooks {
	add := func(n *atomic.Int64) func(string, int) { return func(_ string, k int) { n.Add(int64(k)) } }
	return pgsweep.Hooks{Claimed: add(&c.Claimed), Completed: add(&c.Completed), Failed: add(&c.Failed),
		DeadLettered: add(&c.Dead), LeasesLost: add(&c.Lost), Released: add(&c.Released)}
}
