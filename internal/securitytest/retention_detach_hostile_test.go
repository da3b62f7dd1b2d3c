package pgsweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
)

// TestRetentionDetachConcurrentlyHostile: an admin role that cannot act as
// the table's owner claims nothing and changes nothing; it cannot pass its
// own clock (p_now is the schema owner's), and it cannot record (or release)
// another runner's claim, nor count rows in its name.
func TestRetentionDetachConcurrentlyHostile(t *testing.T) {
	sd := newSecDB(t)
	ctx := context.Background()
	sd.login("owner", "admin")
	sd.login("hostile", "admin")
	ts := "sec_dt_" + sd.tag
	sd.names["@ts"] = pgx.Identifier{ts}.Sanitize()
	sd.exec(`CREATE SCHEMA @ts AUTHORIZATION @owner`)
	t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA @ts CASCADE`)) })
	owner := sd.connAs("owner")
	if _, err := owner.Exec(ctx, sd.sql(`CREATE TABLE @ts.ev (at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE @ts.ev_old PARTITION OF @ts.ev FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
		CREATE TABLE @ts.ev_new PARTITION OF @ts.ev FOR VALUES FROM (now() - interval '1 hour') TO (now() + interval '1 day');
		INSERT INTO @ts.ev SELECT now() - interval '10 days' + g * interval '1 second' FROM generate_series(1, 50) g;
		ANALYZE @ts.ev_old;
		SELECT @S.retention_register('ev', '@ts.ev', 'at', '1 day')`)); err != nil {
		t.Fatal(err)
	}
	hostile := sd.connAs("hostile")
	hc, err := pgsweep.NewClient(hostile, &pgsweep.ClientOptions{Schema: sd.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := hc.RetentionDetachConcurrently(ctx, "hostile", nil); err != nil || d.Claimed != 0 {
		t.Errorf("hostile: %+v %v, want nothing claimed", d, err)
	}
	now := time.Now().Add(24 * time.Hour * 365)
	if _, err := hc.RetentionDetachConcurrently(ctx, "hostile", &now); sqlstate(err) != "42501" {
		t.Errorf("hostile with its own clock: %v, want 42501", err)
	}
	// The owner's runner claims the leaf; the hostile role tries to record it.
	var leaf uint32
	if err := owner.QueryRow(ctx, sd.sql(`SELECT leaf FROM @S.retention_detach_claim('owner-runner')`)).Scan(&leaf); err != nil {
		t.Fatal(err)
	}
	var state string
	if err := hostile.QueryRow(ctx, sd.sql(`SELECT (@S.retention_detach_done('owner-runner', $1)).state`), leaf).Scan(&state); err != nil || state != "other" {
		t.Errorf("hostile records the owner's claim: %q %v, want other", state, err)
	}
	// The count is no caller's to say: retention_detach_done takes none.
	if err := sd.try(hostile, `SELECT @S.retention_detach_done('owner-runner', $1, 1000000000)`, leaf); sqlstate(err) != "42883" {
		t.Errorf("hostile passes its own row count: %v, want 42883 (no such function)", err)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @S.retention_unit WHERE owner = 'owner-runner'`); n != 1 {
		t.Errorf("the owner's claim: %d rows, want it kept", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @ts.ev`); n != 50 {
		t.Errorf("the owner's table holds %d rows, want 50", n)
	}
	// The owner's own runner finishes it.
	oc, err := pgsweep.NewClient(owner, &pgsweep.ClientOptions{Schema: sd.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	d, err := oc.RetentionDetachConcurrently(ctx, "owner-runner", nil)
	if err != nil || d.Detached != 1 || d.Rows != 50 {
		t.Errorf("the owner's runner: %+v %v, want its leaf detached, 50 rows (the estimate after ANALYZE)", d, err)
	}
	if d, err := hc.RetentionDetachConcurrently(ctx, "owner-runner", nil); err != nil || d.Claimed != 0 {
		t.Errorf("hostile, with the owner's runner's name: %+v %v, want nothing claimed (the detached table is not its to drop)", d, err)
	}
	if n := secValue[int64](sd, `SELECT coalesce(sum(rows_deleted), 0) FROM @S.retention_passes WHERE policy = 'ev'`); n != 50 {
		t.Errorf("the history counts %d rows, want 50", n)
	}
}
