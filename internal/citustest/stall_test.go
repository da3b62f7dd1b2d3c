//go:build citus

package citustest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// watchStall logs, while ctx lives, a picture of the cluster each time the
// count returned by left has not moved for quiet: the queue's rows by state
// and owner, every node's sessions and ungranted locks, prepared
// transactions. It is a diagnosis aid for the worker stress test, never an
// assertion.
func watchStall(ctx context.Context, t *testing.T, in *Install, queue string, quiet time.Duration) {
	last, since := int64(-1), time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var n int64
		if err := in.Pool.QueryRow(ctx, "SELECT count(*) FROM "+in.Rel("message")+" WHERE queue = $1", queue).Scan(&n); err != nil {
			continue
		}
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) < quiet {
			continue
		}
		since = time.Now()
		t.Logf("STALL: %d messages left, unchanged for %v\n%s", n, quiet, snapshot(ctx, in, queue))
	}
}

func snapshot(ctx context.Context, in *Install, queue string) string {
	var b strings.Builder
	dump := func(title, url, sql string, args ...any) {
		fmt.Fprintf(&b, "== %s\n", title)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			fmt.Fprintf(&b, "  connect: %v\n", err)
			return
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			fmt.Fprintf(&b, "  %v\n", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			vals, _ := rows.Values()
			parts := make([]string, len(vals))
			for i, v := range vals {
				parts[i] = fmt.Sprint(v)
			}
			fmt.Fprintf(&b, "  %s\n", strings.Join(parts, " | "))
		}
	}
	dump("queue rows by status/owner/visible", in.URL, `SELECT status, owner, attempt, visible_at > now() AS future, parked_until IS NOT NULL AS parked, count(*)
		FROM `+in.Rel("message")+` WHERE queue = $1 GROUP BY 1,2,3,4,5 ORDER BY 6 DESC LIMIT 40`, queue)
	dump("queue row", in.URL, `SELECT * FROM `+in.Rel("queue")+` WHERE name = $1`, queue)
	nodes := append([]Node{in.Coordinator}, in.Workers...)
	for _, nd := range nodes {
		dump(nd.Name+" pg_stat_activity", nd.URL, `SELECT pid, application_name, state, wait_event_type, wait_event, backend_type,
			now() - xact_start AS xact_age, left(regexp_replace(query, '\s+', ' ', 'g'), 160)
			FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type NOT IN ('checkpointer','background writer','walwriter','logical replication launcher','autovacuum launcher') ORDER BY backend_type, state`)
		dump(nd.Name+" locks not granted", nd.URL, `SELECT l.pid, l.locktype, l.mode, l.relation::regclass, l.transactionid, pg_blocking_pids(l.pid)
			FROM pg_locks l WHERE NOT l.granted`)
		dump(nd.Name+" prepared xacts", nd.URL, `SELECT gid, prepared, owner FROM pg_prepared_xacts`)
		dump(nd.Name+" connections", nd.URL, `SELECT count(*), current_setting('max_connections') FROM pg_stat_activity`)
	}
	return b.String()
}
