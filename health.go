package pgsweep

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Health findings (sql/functions/health.sql; docs/dashboard.md lists every
// kind and what to do about it). The monitor role may call Health; to see
// other roles' sessions (long transactions, idle-in-transaction sessions,
// lock waits) the calling role needs pg_monitor or pg_read_all_stats, and
// without it Health says so in a finding of kind "health_limited".

// Finding is one thing health() found wrong.
type Finding struct {
	// Severity is "critical", "warning" or "info".
	Severity string `json:"severity"`
	// Kind names the check, e.g. "idle_in_transaction", "replication_slot",
	// "queue_behind", "maintenance_not_running".
	Kind string `json:"kind"`
	// Object is what the finding is about: "pid 123", "slot s", "gid g",
	// "queue q", "table s.t", "policy p", "part retention", "maintain", "server".
	Object string `json:"object"`
	// Detail gives the figures (ages, counts, the error).
	Detail string `json:"detail"`
	// Advice says what to do about it.
	Advice string `json:"advice"`
}

// FindingKinds are the kinds health() reports (a test checks this list
// against sql/functions/health.sql). A kind whose findings exceed the
// health_max_per_kind setting ends with one finding of that kind whose
// Object is "N more".
var FindingKinds = []string{
	// the server (health_server: the caller's eyes)
	"long_transaction", "idle_in_transaction", "prepared_transaction", "replication_slot", "lock_wait",
	"autovacuum_disabled", "cron_failing", "health_limited",
	// the install (health_install)
	"queue_behind", "blocked_lanes", "dead_letters_growing", "maintenance_not_running", "maintenance_failing",
	"retention_failing", "retention_behind", "dead_tuples", "index_bloat",
}

var severityRank = map[string]int{"critical": 0, "warning": 1, "info": 2}

// Health returns every finding, the most severe first (then in the order
// health() returns them).
func (c *Client) Health(ctx context.Context) ([]Finding, error) {
	rows, err := c.db.Query(ctx, "SELECT severity, kind, object, detail, advice FROM "+c.fn("health")+"()")
	if err != nil {
		return nil, wrapErr("health", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Finding, error) {
		var f Finding
		err := r.Scan(&f.Severity, &f.Kind, &f.Object, &f.Detail, &f.Advice)
		return f, err
	})
	if err != nil {
		return nil, wrapErr("health", err)
	}
	slices.SortStableFunc(out, func(a, b Finding) int { return severityRank[a.Severity] - severityRank[b.Severity] })
	return out, nil
}
