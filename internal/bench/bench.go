// Package bench holds the workloads of `pgsweep bench`: claim, cleanup and
// mixed. Each prints, in one run on one database, pgsweep's rate side by side
// with the baselines it competes with. The CLI (cmd/pgsweep) only parses the
// flags each workload registers and calls it.
//
// A workload creates, fills and drops only schemas it created and marked
// itself (package scratch refuses any other, before anything changes). The
// pgsweep a workload measures is installed into such a scratch schema too,
// --schema (claim: pgsweep_bench_<pid>_pgsweep, cleanup:
// pgsweep_bench_cleanup, mixed: pgsweep_mixed); claim and cleanup drop it at
// the end, every workload when it re-creates it, with the roles the install
// created (scratch.Drop uninstalls): a workload never installs into, upgrades or
// adds a queue or a retention policy to a real install (until 0.15, claim
// and cleanup migrated --schema, default pgsweep, and worked in it). A
// workload connects only where --database-url or the standard PG* variables
// say: never to PGSWEEP_DATABASE_URL, the runner's database.
package bench

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/scratch"
)

// ErrUsage is wrapped by the errors of bad flag values (scratch.ErrUsage).
var ErrUsage = scratch.ErrUsage

// claimed is one claim of a bench worker: what completing it needs.
// claim and claimed.complete are the only places the workloads call
// pgsweep's claim and complete (CompleteAndClaim aside), so that a change
// of that contract is made here once.
type claimed struct {
	token pgsweep.Token
	ids   []int64
}

// claim claims up to batch messages of queue for owner, with a 30 s lease.
func claim(ctx context.Context, c *pgsweep.Client, queue, owner string, batch int) (claimed, error) {
	ds, err := c.Claim(ctx, queue, owner, batch, 30*time.Second)
	if err != nil {
		return claimed{}, err
	}
	cl := claimed{ids: make([]int64, len(ds))}
	for i, d := range ds {
		cl.ids[i] = d.ID
		cl.token = d.Token // one token per claim call
	}
	return cl, nil
}

// complete completes the claimed messages and returns the ids it acted on.
func (cl claimed) complete(ctx context.Context, c *pgsweep.Client, queue string) ([]int64, error) {
	return c.Complete(ctx, queue, cl.token, cl.ids)
}

// median of xs (not empty); xs is not changed.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func countRows(rows pgx.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

func collectIDs(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var p []byte
		if err := rows.Scan(&id, &p); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
