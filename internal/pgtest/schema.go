package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// DB is a test's own pgsweep installation: a fresh schema in the test
// database, migrated, and dropped when the test ends.
type DB struct {
	URL    string
	Schema string
	Pool   *pgxpool.Pool
	Client *pgsweep.Client
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// SchemaName returns a unique schema name derived from the test's name.
func SchemaName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	return "t_" + base + "_" + hex.EncodeToString(b[:])
}

// New gives the test a fresh install and returns a pool on it with room
// for maxConns connections (0: pgx's default). The install is a new
// schema, or one that an earlier test of the process left exactly as fresh
// (reuse.go says how that is proven; PGSWEEP_TEST_REUSE=0 turns it off).
func New(t testing.TB, maxConns int32) *DB {
	t.Helper()
	url := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, reused := reusable{schema: SchemaName(t)}, false
	if reuseOn() {
		r, reused = takeReusable(t, url)
	}
	if !reused {
		conn := Conn(t, url)
		if _, err := pgsweep.Migrate(ctx, conn, r.schema); err != nil {
			DropSchema(t, url, r.schema)
			t.Fatalf("migrate %s: %v", r.schema, err)
		}
		if reuseOn() {
			var err error
			if r.state, err = record(ctx, conn, r.schema); err != nil {
				DropSchema(t, url, r.schema)
				t.Fatalf("record %s: %v", r.schema, err)
			}
		}
	}
	schema := r.schema
	if reuseOn() {
		t.Cleanup(func() { giveBack(t, url, r) })
	} else {
		t.Cleanup(func() { DropSchema(t, url, schema) })
	}

	pool, err := Pool(ctx, url, maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return &DB{URL: url, Schema: schema, Pool: pool, Client: client}
}

// NewQueue is New plus one queue (queue_create through the Client): the
// install most tests of the queue verbs start from.
func NewQueue(t testing.TB, maxConns int32, queue string, kind pgsweep.QueueKind, maxAttempts int) *DB {
	t.Helper()
	db := New(t, maxConns)
	if err := db.Client.QueueCreate(context.Background(), queue, kind, maxAttempts); err != nil {
		t.Fatalf("queue_create %s: %v", queue, err)
	}
	return db
}

// Start is how most tests of an install begin: a fresh install (New), its
// Client, and the context of the test's calls. The context is
// context.Background, not t.Context: cleanups that use it run after the
// test, when t.Context is already cancelled.
func Start(t testing.TB, maxConns int32) (context.Context, *DB, *pgsweep.Client) {
	t.Helper()
	db := New(t, maxConns)
	return context.Background(), db, db.Client
}

// StartQueue is Start on NewQueue's install: one queue created.
func StartQueue(t testing.TB, maxConns int32, queue string, kind pgsweep.QueueKind, maxAttempts int) (context.Context, *DB, *pgsweep.Client) {
	t.Helper()
	db := NewQueue(t, maxConns, queue, kind, maxAttempts)
	return context.Background(), db, db.Client
}

// Q is the install's schema, quoted.
func (db *DB) Q() string { return pgx.Identifier{db.Schema}.Sanitize() }

// Rel is a relation (or function) of the install, quoted with its schema.
func (db *DB) Rel(name string) string { return pgx.Identifier{db.Schema, name}.Sanitize() }

// Int runs a query that returns one integer on the test's pool, or ends
// the test.
func (db *DB) Int(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	return queryInt(t, db.Pool, sql, args...)
}

// MustExec runs sql (with args) on the test's pool and fails t when it fails.
func (db *DB) MustExec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Conn opens a dedicated connection that is closed when the test ends.
func Conn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// DropSchema removes a test schema, everything in it, and the roles its
// install created (every install creates four, cluster-wide): it uninstalls
// with pgsweep.Uninstall (Force). A schema that is not a complete install
// (a migration failed half way, or it never was one) falls back to DROP
// SCHEMA … CASCADE and dropping whichever of <schema>_owner, _admin, _worker
// and _monitor exist: test schema names are unique, so those roles are the
// test's.
func DropSchema(t testing.TB, url, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := pgsweep.Uninstall(ctx, conn, schema, pgsweep.UninstallOptions{Force: true}); err == nil {
		return
	} else if !errors.Is(err, pgsweep.ErrNotInstalled) {
		t.Logf("drop schema %s: uninstall failed, dropping schema and roles by name: %v", schema, err)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[]) ORDER BY 1", pgsweep.RoleNames(schema))
	roles, err := collectStrings(rows, err)
	if err != nil {
		t.Errorf("drop roles of %s: %v", schema, err)
		return
	}
	for _, r := range roles {
		id := pgx.Identifier{r}.Sanitize()
		if _, err := conn.Exec(ctx, "DROP OWNED BY "+id+"; DROP ROLE "+id); err != nil {
			t.Errorf("drop role %s: %v", r, err)
		}
	}
}

func collectStrings(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
