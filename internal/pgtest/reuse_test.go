package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

// A schema handed to a second test is indistinguishable from a fresh
// install (rows, sequences, catalog), whatever the first test did to its
// data; a test that changes the catalog or the roles does not hand its
// schema on.
func TestReusedInstallIsFresh(t *testing.T) {
	if !reuseOn() {
		t.Skip("PGSWEEP_TEST_REUSE=0")
	}
	ctx := context.Background()
	url := URL(t)
	conn := Conn(t, url)

	fresh := SchemaName(t)
	if _, err := pgsweep.Migrate(ctx, conn, fresh); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DropSchema(t, url, fresh) })
	want := SchemaState(t, conn, fresh)
	wantIDs := nextIDs(t, conn, fresh)

	var first string
	t.Run("dirty data", func(t *testing.T) {
		db := New(t, 2)
		first = db.Schema
		if err := db.Client.QueueCreate(ctx, "q", pgsweep.Outbox, 3); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.Client.Send(ctx, "q", pgsweep.Message{Key: "k", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		db.MustExec(t, "SELECT "+db.Q()+".setting_set('max_batch', '500')")
	})
	t.Run("gets it fresh", func(t *testing.T) {
		db := New(t, 2)
		if db.Schema != first {
			t.Fatalf("got %s, want the first test's %s back (reuse refused it)", db.Schema, first)
		}
		c := Conn(t, db.URL)
		if got := SchemaState(t, c, db.Schema); got != want {
			t.Errorf("a reused install differs from a fresh one:\n%s\n---\n%s", got, want)
		}
		if got := nextIDs(t, c, db.Schema); got != wantIDs {
			t.Errorf("sequences: got %v, a fresh install has %v", got, wantIDs)
		}
		// this test changes the catalog: its schema must not be handed on
		db.MustExec(t, "CREATE TABLE "+db.Rel("extra")+" ()")
	})
	t.Run("changed catalog is dropped", func(t *testing.T) {
		db := New(t, 2)
		if db.Schema == first {
			t.Fatalf("got %s again after a test created a table in it", first)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", first).Scan(&n); err != nil || n != 0 {
			t.Fatalf("schema %s: %d left, err %v; want it dropped", first, n, err)
		}
	})
}

// nextIDs is what the install's sequences give next, without using them.
func nextIDs(t *testing.T, conn *pgx.Conn, schema string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT string_agg(sequencename || '=' || coalesce(last_value::text, 'unused'), ',' ORDER BY sequencename)
	   FROM pg_sequences WHERE schemaname = $1`, schema).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
