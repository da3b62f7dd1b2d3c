package pgsweep_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// An install of an earlier release, upgraded: every existing queue gets the
// default rights as rows (send and consume to S_worker, browse and manage
// to S_admin), so its workers keep working; a queue made after the upgrade
// gets the same from queue_create.
func TestQueueRightsUpgradeKeepsDefaults(t *testing.T) {
	t.Parallel()
	dirs := releaseDirs(t)
	url := pgtest.URL(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	installRelease(t, ctx, conn, dirs[len(dirs)-1], schema)
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "SELECT "+s+".queue_create('old_out', 'outbox', 3); SELECT "+s+".queue_create('old_in', 'inbox', 3)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT "+s+".queue_create('new_out')"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT string_agg(x, ', ' ORDER BY x) FROM (SELECT queue || ' ' || replace(grantee_name, $1, 'S') || ':' || privilege AS x FROM "+
		s+".queue_right) r", schema).Scan(&got); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, q := range []string{"new_out", "old_in", "old_out"} {
		for _, r := range []string{"S_admin:browse", "S_admin:manage", "S_worker:consume", "S_worker:send"} {
			want = append(want, q+" "+r)
		}
	}
	if got != strings.Join(want, ", ") {
		t.Errorf("rights after the upgrade:\n got %s\nwant %s", got, strings.Join(want, ", "))
	}
}
