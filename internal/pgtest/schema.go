package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// New migrates a fresh schema for the test and returns a pool on it with
// room for maxConns connections (0: pgx's default).
func New(t testing.TB, maxConns int32) *DB {
	t.Helper()
	url := URL(t)
	schema := SchemaName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn := Conn(t, url)
	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatalf("migrate %s: %v", schema, err)
	}
	t.Cleanup(func() { DropSchema(t, url, schema) })

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return &DB{URL: url, Schema: schema, Pool: pool, Client: client}
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

// DropSchema removes a test schema and everything in it.
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
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}
