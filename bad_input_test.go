package pgsweep_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// stateSum is a checksum of everything the schema keeps: each table's rows
// in a fixed order and each sequence's position (see bad_input_hostile.sql).
func stateSum(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) string {
	t.Helper()
	rows, err := conn.Query(ctx, `
		SELECT c.relname::pg_catalog.text, c.relkind OPERATOR(pg_catalog.=) 'S'::"char"
		  FROM pg_catalog.pg_class c
		 WHERE c.relnamespace OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regnamespace
		   AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,S}'::"char"[])
		 ORDER BY 1`, schema)
	if err != nil {
		t.Fatalf("list relations: %v", err)
	}
	type rel struct {
		name string
		seq  bool
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.name, &x.seq)
	})
	if err != nil {
		t.Fatalf("list relations: %v", err)
	}
	var b strings.Builder
	for _, r := range rels {
		q := "SELECT pg_catalog.count(*)::pg_catalog.text OPERATOR(pg_catalog.||) COALESCE(pg_catalog.md5(pg_catalog.string_agg(t::pg_catalog.text, ',' ORDER BY t::pg_catalog.text)), '') FROM " +
			pgx.Identifier{schema, r.name}.Sanitize() + " t"
		if r.seq {
			q = "SELECT last_value::pg_catalog.text OPERATOR(pg_catalog.||) is_called::pg_catalog.text FROM " + pgx.Identifier{schema, r.name}.Sanitize()
		}
		var v string
		if err := conn.QueryRow(ctx, q).Scan(&v); err != nil {
			t.Fatalf("checksum %s: %v", r.name, err)
		}
		b.WriteString(r.name + "=" + v + ";")
	}
	return b.String()
}

// TestInputCapsThroughClient: the Client surfaces the caps and the interval
// and name rules as *Error matching ErrInvalidArgument, naming the argument
// and the setting, and nothing is stored; a cap raised with setting_set lets
// the same value through.
func TestInputCapsThroughClient(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 4)
	conn := pgtest.Conn(t, db.URL)
	if err := c.QueueCreate(ctx, "q", "outbox", 3); err != nil {
		t.Fatal(err)
	}
	before := stateSum(t, ctx, conn, db.Schema)

	big := []byte(`{"x": "` + strings.Repeat("x", 2<<20) + `"}`) // 2 MiB: over max_payload_bytes (1 MiB)
	calls := []struct {
		name, want string
		call       func() error
	}{
		{"2 MiB payload", "p_payload must be at most 1048576 bytes (setting max_payload_bytes", func() error {
			_, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: big})
			return err
		}},
		{"1 µs lease TTL", "p_ttl must be between 1 second and 1 hour, got 0.000001 seconds", func() error {
			_, _, err := c.LeaseAcquire(ctx, "l", "o", time.Microsecond)
			return err
		}},
		{"owner with a newline", "p_owner must hold printable characters only", func() error {
			_, err := c.Claim(ctx, "q", "w\nFATAL: forged", 1, time.Minute)
			return err
		}},
		{"queue name with a zero-width space", "p_queue must hold printable characters only", func() error {
			return c.QueueCreate(ctx, "q\u200b", "outbox", 3)
		}},
	}
	for _, tc := range calls {
		err := tc.call()
		var pe *pgsweep.Error
		if !errors.Is(err, pgsweep.ErrInvalidArgument) || !errors.As(err, &pe) {
			t.Errorf("%s: got %v, want a *pgsweep.Error matching ErrInvalidArgument", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %q, want it to contain %q", tc.name, err.Error(), tc.want)
		}
	}
	if after := stateSum(t, ctx, conn, db.Schema); after != before {
		t.Fatalf("refused calls changed the schema's tables or sequences")
	}

	if _, err := conn.Exec(ctx, "SELECT "+db.Rel("setting_set")+"('max_payload_bytes', '4194304')"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Send(ctx, "q", pgsweep.Message{Payload: big}); err != nil {
		t.Fatalf("a 2 MiB payload after raising max_payload_bytes to 4 MiB: %v", err)
	}
}

// TestHostileRetentionRun runs the rows of bad_input_hostile.sql that pgTAP
// cannot: retention_run commits before it validates, so it must be called
// outside a transaction block. A member of S_admin calls it with hostile
// names and intervals: 22023 naming the argument each time, nothing changed.
func TestHostileRetentionRun(t *testing.T) {
	db := pgtest.New(t, 2)
	ctx := context.Background()
	su := pgtest.Conn(t, db.URL)
	role := db.Schema + "_hostile"
	if _, err := su.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" NOLOGIN IN ROLE "+pgx.Identifier{db.Schema + "_admin"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = su.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	conn := pgtest.Conn(t, db.URL)
	if _, err := conn.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	call := "CALL " + db.Rel("retention_run") +
		"($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.text::pg_catalog.interval)"

	names := map[string]string{
		"newline": "p\nFATAL:  forged", "bell": "p\a", "zero-width space": "p\u200bx", "BOM": "\ufeffp",
		"line separator": "p\u2028x", "bidi override": "\u202ep", "only spaces": "   ", "leading space": " p",
		"trailing space": "p ", "no-break space": "p\u00a0", "empty": "",
	}
	intervals := map[string]string{ // p_budget: 0 .. 1 day, a fixed length
		"mixed": "1 mon -30 days 1 sec", "mixed-days": "1 day -86340 sec", "month": "1 mon", "1000y": "1000 years",
	}
	type tc struct{ label, arg, name, owner, budget string }
	var cases []tc
	for tag, v := range names {
		cases = append(cases, tc{"p_name " + tag, "p_name", v, "o", "1 second"})
		cases = append(cases, tc{"p_owner " + tag, "p_owner", "none", v, "1 second"})
	}
	for tag, v := range intervals {
		cases = append(cases, tc{"p_budget " + tag, "p_budget", "none", "o", v})
	}
	before := stateSum(t, ctx, su, db.Schema)
	for _, c := range cases {
		_, err := conn.Exec(ctx, call, c.name, c.owner, c.budget)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" || !strings.HasPrefix(pgErr.Message, c.arg+" ") {
			t.Errorf("%s: got %v, want 22023 naming %s", c.label, err, c.arg)
		}
	}
	if after := stateSum(t, ctx, su, db.Schema); after != before {
		t.Fatalf("refused retention_run calls changed the schema's tables or sequences")
	}
}
