package pgsweep_test

import (
	"context"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// installRelease installs, into schema, one of the migration sets main has
// shipped (set NN-commit of testdata/releases: migrations/ as it was at that
// commit), with tern, exactly as a database of that time was installed.
func installRelease(t *testing.T, ctx context.Context, conn *pgx.Conn, set, schema string) int32 {
	t.Helper()
	fsys, ok := releaseSets(t)[set]
	if !ok {
		t.Fatalf("no released migration set %s in %s/SETS", set, releaseStore)
	}
	return installSet(t, ctx, conn, fsys, set, schema)
}

// installSet creates schema and installs the migrations of fsys into it
// with tern; it returns how many there are.
func installSet(t *testing.T, ctx context.Context, conn *pgx.Conn, fsys fs.FS, name, schema string) int32 {
	t.Helper()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigratorEx(ctx, conn, schema+"."+pgsweep.VersionTable, &migrate.MigratorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Data["schema"] = schema
	if err := m.LoadMigrations(fsys); err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatalf("install %s: %v", name, err)
	}
	return int32(len(m.Migrations))
}

// TestUpgradeFromEveryReleaseMatchesFreshInstall installs every migration
// set main has shipped, upgrades it with today's migrations and compares the
// catalog (function bodies and settings, owners, ACLs, tables, columns,
// defaults, constraints, indexes, reloptions, grants, settings rows) with a
// fresh install.
func TestUpgradeFromEveryReleaseMatchesFreshInstall(t *testing.T) {
	fresh := pgtest.New(t, 1)
	ctx := context.Background()
	conn := pgtest.Conn(t, fresh.URL)
	want, err := pgtest.Signature(ctx, conn, fresh.Schema)
	if err != nil {
		t.Fatal(err)
	}
	latest := latestVersion(t)
	for _, dir := range releaseDirs(t) {
		t.Run(dir, func(t *testing.T) {
			t.Parallel() // on a connection of its own: the releases upgrade side by side
			conn := pgtest.Conn(t, fresh.URL)
			schema := pgtest.SchemaName(t)
			t.Cleanup(func() { pgtest.DropSchema(t, fresh.URL, schema) })
			v := installRelease(t, ctx, conn, dir, schema)
			if n, _ := strconv.Atoi(dir[:2]); int32(n) != v {
				t.Fatalf("%s holds %d migrations, its name says %d", dir, v, n)
			}
			res, err := pgsweep.Migrate(ctx, conn, schema)
			if err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			if res.From != v || res.To != latest {
				t.Fatalf("upgrade: got %+v, want %d -> %d", res, v, latest)
			}
			got, err := pgtest.Signature(ctx, conn, schema)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("upgraded from %s differs from a fresh install:\n%s", dir, lineDiff(want, got))
			}
		})
	}
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	am, bm := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !bm[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !am[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// liveDataSQL fills an install of the latest shipped release with every kind
// of state: queued, scheduled, in-flight, failed (waiting for a retry),
// processed inbox rows, dead letters, a lease and a retention policy.
const liveDataSQL = `
SELECT queue_create('out', 'outbox', 10);
SELECT queue_create('in', 'inbox', 1);
SELECT send('out', jsonb_build_object('n', g)) FROM generate_series(1, 20) g;
SELECT send('out', '{"later": true}', '{}', NULL, now() + interval '1 day');
SELECT send('in', jsonb_build_object('k', g), '{"h": 1}', 'key-' || g) FROM generate_series(1, 6) g;
SELECT count(*) FROM claim('out', 'old-worker', 5, interval '10 minutes');
SELECT count(*) FROM claim('in', 'old-worker', 6, interval '10 minutes');
SELECT complete('in', 'old-worker', ARRAY(SELECT id FROM message WHERE queue = 'in' ORDER BY id LIMIT 3));
SELECT fail('in', 'old-worker', ARRAY(SELECT id FROM message WHERE queue = 'in' AND owner IS NOT NULL ORDER BY id LIMIT 2), 'boom');
SELECT lease_acquire('nightly', 'host-a', interval '1 hour');
CREATE TABLE upgrade_events (id int PRIMARY KEY, at timestamptz NOT NULL);
INSERT INTO upgrade_events SELECT g, now() - g * interval '1 hour' FROM generate_series(1, 10) g;
SELECT retention_register('events', 'upgrade_events', 'at', interval '5 hours');
`

// stateQueries read what must survive an upgrade unchanged, in columns
// every release has.
var stateQueries = map[string]string{
	"message": `SELECT string_agg(format('%s/%s key=%s status=%s attempt=%s owner=%s payload=%s headers=%s visible=%s created=%s',
	        queue, id, key, status, attempt, owner, payload, headers, visible_at, created_at), E'\n' ORDER BY queue, id) FROM message`,
	"processed": `SELECT string_agg(format('%s/%s key=%s payload=%s attempts=%s', queue, id, key, payload, attempts), E'\n'
	        ORDER BY queue, id) FROM message_processed`,
	"dead": `SELECT string_agg(format('%s/%s key=%s payload=%s attempts=%s error=%s', queue, id, key, payload, attempts, last_error),
	        E'\n' ORDER BY queue, id) FROM message_dead`,
	"lease":  `SELECT string_agg(format('%s owner=%s token=%s expires=%s', name, owner, token, expires_at), E'\n' ORDER BY name) FROM lease`,
	"policy": `SELECT string_agg(format('%s %s.%s %s older=%s mode=%s', name, table_schema, table_name, time_column, older_than, mode), E'\n' ORDER BY name) FROM retention_policy`,
	"queue":  `SELECT string_agg(format('%s kind=%s max=%s', name, kind, max_attempts), E'\n' ORDER BY name) FROM queue`,
}

func readState(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) map[string]string {
	t.Helper()
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "RESET search_path") }()
	out := map[string]string{}
	for name, q := range stateQueries {
		var s *string
		if err := conn.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if s == nil {
			t.Fatalf("state %s is empty: the fixture did not create it", name)
		}
		out[name] = *s
	}
	return out
}

// TestUpgradeWithLiveData upgrades the latest shipped release while it holds
// messages in every state, leases and policies: nothing is lost, nothing
// changes meaning, and the upgraded install keeps working (a retention run
// deletes exactly the expired rows, in-flight rows stay claimed until their
// lease expires).
func TestUpgradeWithLiveData(t *testing.T) {
	dirs := releaseDirs(t)
	last := dirs[len(dirs)-1]
	url := pgtest.URL(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	installRelease(t, ctx, conn, last, schema)

	if _, err := conn.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, liveDataSQL); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	if _, err := conn.Exec(ctx, "RESET search_path"); err != nil {
		t.Fatal(err)
	}
	before := readState(t, ctx, conn, schema)
	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	after := readState(t, ctx, conn, schema)
	for k := range before {
		if before[k] != after[k] {
			t.Errorf("%s changed in the upgrade:\n%s", k, lineDiff(before[k], after[k]))
		}
	}

	client, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// The 5 outbox rows in flight stay with their lease: only the other 15 are claimable.
	ds, err := client.Claim(ctx, "out", "new-worker", 100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 15 {
		t.Fatalf("claimed %d outbox messages after the upgrade, want the 15 not in flight", len(ds))
	}
	if _, err := conn.Exec(ctx, "CALL "+pgx.Identifier{schema, "retention_run"}.Sanitize()+"('events')"); err != nil {
		t.Fatalf("retention_run after upgrade: %v", err)
	}
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "upgrade_events"}.Sanitize()).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 4 {
		t.Fatalf("retention after the upgrade left %d rows, want the 4 younger than 5 hours", left)
	}
}
