package pgsweep_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The psql examples of the README and docs/queues.md must run as pasted: these
// tests take the ```sql blocks out of the markdown, point them at a fresh
// schema and run them with psql -v ON_ERROR_STOP=1, twice (the docs promise a
// second paste is harmless), then check what they did.

// readmeSQLBlocks returns the ```sql blocks of a markdown file between the
// line heading and the next "## " heading.
func readmeSQLBlocks(t *testing.T, path, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks     []string
		in, inSQL  bool
		found      bool
		cur        strings.Builder
		fenceOpen  bool
		lineNumber int
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		lineNumber++
		switch {
		case !fenceOpen && line == heading:
			in, found = true, true
			continue
		case !fenceOpen && in && strings.HasPrefix(line, "## "):
			in = false
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "```") {
			if !fenceOpen {
				fenceOpen, inSQL = true, strings.TrimSpace(line[3:]) == "sql"
				cur.Reset()
			} else {
				fenceOpen = false
				if inSQL {
					blocks = append(blocks, cur.String())
				}
			}
			continue
		}
		if fenceOpen && inSQL {
			cur.WriteString(line)
			cur.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("%s: no heading %q", path, heading)
	}
	if fenceOpen {
		t.Fatalf("%s: unclosed code fence (%d lines read)", path, lineNumber)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no ```sql block under %q", path, heading)
	}
	return blocks
}

// readmePsql finds psql: on PATH, else the Debian location of PostgreSQL 15.
// Without it the test is skipped, except under CI=true, where it fails.
func readmePsql(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	const debian = "/usr/lib/postgresql/15/bin/psql"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	if os.Getenv("CI") != "" { // as internal/pgtest: in CI nothing skips
		t.Fatalf("psql is not on PATH nor at %s (CI=%s requires it)", debian, os.Getenv("CI"))
	}
	t.Skipf("psql is not on PATH nor at %s", debian)
	return ""
}

// readmeRun runs sql in one psql session against db's schema: pgsweep. and the
// notification channel pgsweep_messages are rewritten to the test schema's,
// and search_path is the test schema, so the examples' own tables land there
// (and are dropped with it). It fails the test on the first error.
func readmeRun(t *testing.T, psql string, db *pgtest.DB, sql string) string {
	t.Helper()
	schema := db.Q()
	sql = strings.ReplaceAll(sql, "pgsweep.", schema+".")
	sql = strings.ReplaceAll(sql, "pgsweep_messages", pgx.Identifier{db.Schema + "_messages"}.Sanitize())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, "-X", "-v", "ON_ERROR_STOP=1", "-d", db.URL, "-f", "-")
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+db.Schema)
	cmd.Stdin = strings.NewReader(sql)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("psql: %v\nstderr:\n%s\nstdout:\n%s\nsql:\n%s", err, stderr.String(), stdout.String(), sql)
	}
	// Notices are fine; anything else on stderr (a warning, an error psql
	// did not stop for) is not.
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if l != "" && !strings.Contains(l, "NOTICE:") {
			t.Fatalf("psql wrote to stderr: %s\nstderr:\n%s", l, stderr.String())
		}
	}
	return stdout.String()
}

type readmeStats struct {
	pending, processing, failed, processed, dead int64
}

func readmeQueueStats(t *testing.T, db *pgtest.DB, queue string) readmeStats {
	t.Helper()
	var s readmeStats
	err := db.Pool.QueryRow(context.Background(),
		"SELECT pending, processing, failed, processed, dead FROM "+db.Rel("queue_stats")+
			" WHERE queue = $1", queue).Scan(&s.pending, &s.processing, &s.failed, &s.processed, &s.dead)
	if err != nil {
		t.Fatalf("queue_stats %s: %v", queue, err)
	}
	return s
}

// readmeInt runs a query for one number; pgsweep. in it means the test schema
// (the examples' orders table is there too).
func readmeInt(t *testing.T, db *pgtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	sql = strings.ReplaceAll(sql, "pgsweep.", db.Q()+".")
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// README.md, "Queues: outbox and inbox": two orders sent in the
// application's transaction, both claimed, one completed, one failed.
func TestReadmeQueueExample(t *testing.T) {
	psql := readmePsql(t)
	blocks := readmeSQLBlocks(t, "README.md", "## Queues: outbox and inbox")
	if len(blocks) != 1 {
		t.Fatalf("README.md: %d ```sql blocks under the queue heading, want 1", len(blocks))
	}
	db := pgtest.New(t, 0)

	readmeRun(t, psql, db, blocks[0])
	if got, want := readmeQueueStats(t, db, "orders"), (readmeStats{failed: 1}); got != want {
		t.Errorf("queue_stats after the first run = %+v, want %+v", got, want)
	}
	if n := readmeInt(t, db, "SELECT count(*) FROM pgsweep.orders WHERE id IN (42, 43)"); n != 2 {
		t.Errorf("orders: %d rows, want 42 and 43", n)
	}
	// Two sent (ids 1 and 2 in a fresh schema), the first completed (an outbox
	// row is deleted), the second failed with the example's error.
	if n := readmeInt(t, db, "SELECT last_value FROM pgsweep.message_id_seq"); n != 2 {
		t.Errorf("%d messages sent, want 2", n)
	}
	if n := readmeInt(t, db, `SELECT count(*) FROM pgsweep.message
	                           WHERE queue = 'orders' AND id = 2 AND status = 'failed' AND attempt = 1
	                             AND last_error = 'smtp timeout' AND payload = '{"order": 43}'`); n != 1 {
		t.Errorf("the failed message is not order 43 failed once with 'smtp timeout'")
	}

	// Pasted again: the table and queue exist, the orders are there, two more
	// messages are sent, and two rows are claimed (the new ones, or the
	// retried one and the first new one once its 1-second backoff passed):
	// one of them completed, one failed.
	readmeRun(t, psql, db, blocks[0])
	s := readmeQueueStats(t, db, "orders")
	if s.processing != 0 || s.pending+s.failed != 2 || s.failed < 1 || s.dead != 0 {
		t.Errorf("queue_stats after the second run = %+v, want 2 live rows, at least 1 failed, none processing or dead", s)
	}
	if n := readmeInt(t, db, "SELECT last_value FROM pgsweep.message_id_seq"); n != 4 {
		t.Errorf("%d messages sent after two runs, want 4", n)
	}
	if n := readmeInt(t, db, "SELECT count(*) FROM pgsweep.orders"); n != 2 {
		t.Errorf("orders: %d rows after two runs, want 2", n)
	}
}

// docs/queues.md, "From psql": every block in order in one session.
func TestReadmeDocsQueuesFromPsql(t *testing.T) {
	psql := readmePsql(t)
	blocks := readmeSQLBlocks(t, "docs/queues.md", "## From psql")
	if len(blocks) < 3 {
		t.Fatalf("docs/queues.md: %d ```sql blocks under From psql, want the queue, inbox and dead-letter blocks", len(blocks))
	}
	all := strings.Join(blocks, "\n")
	db := pgtest.New(t, 0)
	channel := db.Schema + "_messages"

	out := readmeRun(t, psql, db, all)
	// orders: 6 sent (42, the scheduled 43, a batch of 4), 5 due and claimed:
	// 2 completed, 2 failed (one after backoff, one after 5 minutes), 1
	// renewed and still held; the scheduled one pending.
	if got, want := readmeQueueStats(t, db, "orders"), (readmeStats{pending: 1, processing: 1, failed: 2}); got != want {
		t.Errorf("orders: queue_stats = %+v, want %+v", got, want)
	}
	if n := readmeInt(t, db, `SELECT count(*) FROM pgsweep.queue
	                           WHERE name = 'orders' AND max_attempts = 5 AND backoff_base = '2 seconds'
	                             AND lease_default = '1 minute' AND dead_retention = '90 days'`); n != 1 {
		t.Error("orders: queue_create/queue_configure settings not applied")
	}
	if n := readmeInt(t, db, `SELECT count(*) FROM pgsweep.message
	                           WHERE queue = 'orders' AND status = 'failed' AND last_error = 'rate limited'
	                             AND visible_at > now() + interval '4 minutes'`); n != 1 {
		t.Error("orders: no message failed with 'rate limited' to retry in 5 minutes")
	}
	if n := readmeInt(t, db, `SELECT count(*) FROM pgsweep.message
	                           WHERE queue = 'orders' AND status = 'pending' AND payload = '{"order": 43}'
	                             AND visible_at > now() + interval '50 minutes'`); n != 1 {
		t.Error("orders: order 43 is not scheduled an hour ahead")
	}
	// payments-in: msg-7f3a was sent once (the duplicates refused), died on
	// its one attempt and was requeued: pending again, attempt 0, its last
	// error kept.
	if got, want := readmeQueueStats(t, db, "payments-in"), (readmeStats{pending: 1}); got != want {
		t.Errorf("payments-in: queue_stats = %+v, want %+v", got, want)
	}
	if n := readmeInt(t, db, `SELECT count(*) FROM pgsweep.message
	                           WHERE queue = 'payments-in' AND key = 'msg-7f3a' AND attempt = 0
	                             AND last_error = 'card service down'`); n != 1 {
		t.Error("payments-in: msg-7f3a is not requeued with its last error")
	}
	// LISTEN came before the inbox sends: psql printed their notifications.
	if !strings.Contains(out, `notification "`+channel+`" with payload "payments-in"`) {
		t.Errorf("psql printed no notification on %s for payments-in; output:\n%s", channel, out)
	}

	// Pasted again: 6 more orders sent and 5 or 6 claimed (the first
	// smtp-timeout retry is due after its 2-second backoff), 2 more
	// completed; msg-7f3a stays one message and dies and is requeued again.
	readmeRun(t, psql, db, all)
	s := readmeQueueStats(t, db, "orders")
	if s.pending+s.processing+s.failed != 8 || s.dead != 0 {
		t.Errorf("orders after the second run: queue_stats = %+v, want 8 live rows (12 sent, 4 completed), none dead", s)
	}
	if got, want := readmeQueueStats(t, db, "payments-in"), (readmeStats{pending: 1}); got != want {
		t.Errorf("payments-in after the second run: queue_stats = %+v, want %+v", got, want)
	}
	if n := readmeInt(t, db, "SELECT count(*) FROM pgsweep.orders"); n != 1 {
		t.Errorf("orders: %d rows after two runs, want 1", n)
	}
}
