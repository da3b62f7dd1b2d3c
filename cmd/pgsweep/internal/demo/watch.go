package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// demoSnapshot is one progress line, read from the database.
type demoSnapshot struct {
	pending, inFlight, retrying, dead int64
	deleted, eligibleLeft, recovered  int64
	holders                           string
}

func demoRead(ctx context.Context, pool *pgxpool.Pool, schema string) (demoSnapshot, error) {
	q := pgx.Identifier{schema}.Sanitize()
	var s demoSnapshot
	err := pool.QueryRow(ctx, fmt.Sprintf(`
		SELECT coalesce(sum(qs.pending), 0), coalesce(sum(qs.processing), 0), coalesce(sum(qs.failed), 0), coalesce(sum(qs.dead), 0),
		       (SELECT coalesce(sum(rows_deleted), 0) FROM %[1]s.retention_passes WHERE policy = 'cap.published'),
		       (SELECT count(*) FROM %[1]s.cap_published WHERE "StatusName" IN ('Succeeded', 'Failed')),
		       (SELECT coalesce(sum((counts ->> 'lost_leases')::bigint), 0) FROM %[1]s.maintain_run WHERE part = 'recovery'),
		       (SELECT coalesce(string_agg(format('%%s#%%s=%%s', name, token, coalesce(owner, '-')), ' ' ORDER BY name), '-')
		          FROM %[1]s.leases WHERE name LIKE 'maintain:%%')
		  FROM %[1]s.queue_stats qs WHERE qs.queue = 'orders'`, q)).
		Scan(&s.pending, &s.inFlight, &s.retrying, &s.dead, &s.deleted, &s.eligibleLeft, &s.recovered, &s.holders)
	return s, err
}

// demoWatch prints progress once a second until everything converged (every
// message sent and gone from the queue, the retention backlog drained), an
// actor failed, or the timeout passed.
func demoWatch(ctx context.Context, pool *pgxpool.Pool, schema string, st *demoState, cfg demoConfig,
	step func(string, ...any), errc <-chan error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
			return fmt.Errorf("the demo did not converge within %v", cfg.timeout)
		case <-tick.C:
		}
		s, err := demoRead(ctx, pool, schema)
		if err != nil {
			return err
		}
		step("sent %5d  done %5d  pending %4d  in flight %3d  retrying %3d  dead %3d  recovered %3d  retention deleted %6d  leases: %s",
			st.sent.Load(), st.completed.Load(), s.pending, s.inFlight, s.retrying, s.dead, s.recovered, s.deleted, s.holders)
		if st.sent.Load() == int64(cfg.messages) && st.killed.Load() && s.pending+s.inFlight+s.retrying == 0 && s.eligibleLeft == 0 {
			return nil
		}
	}
}

// demoVerify checks the outcome from the database and the workers' reports:
// every message completed or dead-lettered, none completed twice, the
// retention backlog drained and nothing else deleted.
func demoVerify(ctx context.Context, pool *pgxpool.Pool, schema string, st *demoState, cfg demoConfig, out io.Writer) error {
	q := pgx.Identifier{schema}.Sanitize()
	var left, kept int64
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.message),
		(SELECT count(*) FROM %[1]s.cap_published WHERE "StatusName" = 'Scheduled')`, q)).Scan(&left, &kept); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT id, payload FROM %s.message_dead WHERE queue = 'orders'`, q))
	if err != nil {
		return err
	}
	dead := map[int64]bool{}
	var badDead []int64
	for rows.Next() {
		var id int64
		var payload []byte
		var body struct{ N int }
		if err := rows.Scan(&id, &payload); err != nil {
			return err
		}
		if err := json.Unmarshal(payload, &body); err != nil {
			return err
		}
		dead[id] = true
		if body.N%cfg.poisonMod != 0 {
			badDead = append(badDead, id)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	var neither, both, redelivered int
	for _, id := range st.ids {
		h := st.handled[id]
		switch {
		case h == 0 && !dead[id]:
			neither++
		case h > 0 && dead[id]:
			both++
		}
		if h > 1 {
			redelivered++
		}
	}
	poison := (cfg.messages-1)/cfg.poisonMod + 1
	completed := st.completed.Load()
	want := int64(len(st.ids) - len(dead))

	fmt.Fprintf(out, "\nverification:\n")
	check := func(ok bool, format string, args ...any) bool {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
		return ok
	}
	ok := check(len(st.ids) == cfg.messages, "%d messages sent", len(st.ids))
	ok = check(left == 0, "queue empty (%d rows left)", left) && ok
	ok = check(neither == 0 && both == 0, "every message completed or dead-lettered, not both (%d neither, %d both)", neither, both) && ok
	ok = check(completed == want, "completions acted on %d rows = %d sent - %d dead: none completed twice", completed, len(st.ids), len(dead)) && ok
	ok = check(len(dead) == poison && len(badDead) == 0, "dead letters are exactly the %d poison messages (%d dead, %d not poison)", poison, len(dead), len(badDead)) && ok
	var recovered int64
	if err := pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(sum((counts ->> 'lost_leases')::bigint), 0) FROM %s.maintain_run WHERE part = 'recovery'`, q)).Scan(&recovered); err != nil {
		return err
	}
	orphans := 0
	for _, id := range st.doomed {
		if st.handled[id] == 0 && !dead[id] {
			orphans++
		}
	}
	ok = check(len(st.doomed) > 0 && orphans == 0, "the %d messages the killed worker held were processed by others (%d orphaned); %d handed back by recovery, the rest re-claimed after their lease expired",
		len(st.doomed), orphans, recovered) && ok
	ok = check(kept == int64(cfg.capRows/5), "retention drained the backlog and kept the %d Scheduled rows (%d left)", cfg.capRows/5, kept) && ok
	fmt.Fprintf(out, "  info %d leases lost by workers, %d failures retried, %d handler runs repeated after a lost lease (at-least-once)\n",
		st.lost.Load(), st.failed.Load(), redelivered)
	if !ok {
		return fmt.Errorf("verification failed")
	}
	fmt.Fprintf(out, "\nall checks passed. Look around in psql (the demo's schema stays until the next run):\n"+
		"  SELECT * FROM %[1]s.maintenance_passes ORDER BY id DESC LIMIT 5;\n"+
		"  SELECT name, last_outcome, last_rows_deleted FROM %[1]s.retention_policies;\n"+
		"  SELECT * FROM %[1]s.message_dead LIMIT 5;\n", schema)
	return nil
}
