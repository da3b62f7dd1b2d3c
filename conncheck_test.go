package pgsweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The setting reaches the server, in whole milliseconds rounded up, and a
// value the connection string already sets wins.
func TestSetConnectionCheckInterval(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	for _, c := range []struct {
		url  string
		d    time.Duration
		want string
	}{
		{url, pgsweep.DefaultConnectionCheckInterval, "1s"},
		{url, 1500*time.Microsecond + 250*time.Millisecond, "252ms"},
		{url, 0, "0"},
		{url + "&client_connection_check_interval=3000", time.Second, "3s"},
	} {
		cfg, err := pgx.ParseConfig(c.url)
		if err != nil {
			t.Fatal(err)
		}
		pgsweep.SetConnectionCheckInterval(cfg, c.d)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := conn.QueryRow(ctx, "SHOW client_connection_check_interval").Scan(&got); err != nil {
			t.Fatal(err)
		}
		_ = conn.Close(ctx)
		if got != c.want {
			t.Errorf("SetConnectionCheckInterval(%v) on %q: server has %s, want %s", c.d, c.url, got, c.want)
		}
	}
}
