package pgsweep

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultConnectionCheckInterval is the client_connection_check_interval
// pgsweep's long-lived callers ask the server for: the runner's connections
// and the Worker's LISTEN connection, and what the Worker's pool should use
// (SetConnectionCheckInterval on the pool's ConnConfig). PostgreSQL does
// not notice a client that died (kill -9, OOM) while a statement runs: it
// notices only when it next writes to the socket, so without it the backend
// of a killed process goes on with its statement to the end (a CALL
// maintain() to the end of its budget) and commits. With it, the server
// polls the socket at this interval while a statement runs and ends the
// orphaned session, rolling back what was in flight, within about this long.
const DefaultConnectionCheckInterval = time.Second

// ConnectionCheckParam is the PostgreSQL setting (14 and later) behind
// DefaultConnectionCheckInterval.
const ConnectionCheckParam = "client_connection_check_interval"

// SetConnectionCheckInterval asks the server, through cfg's startup
// parameters, to check every d while a statement runs whether the client is
// still there (client_connection_check_interval, in whole milliseconds,
// rounded up). d <= 0 leaves the server's setting (off by default). A value
// the connection string already sets (…?client_connection_check_interval=…)
// is kept: the operator's word wins. Poolers that refuse unknown startup
// parameters (PgBouncer without ignore_startup_parameters) need it left out.
func SetConnectionCheckInterval(cfg *pgx.ConnConfig, d time.Duration) {
	if d <= 0 {
		return
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, set := cfg.RuntimeParams[ConnectionCheckParam]; set {
		return
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	cfg.RuntimeParams[ConnectionCheckParam] = strconv.FormatInt(int64(ms), 10)
}
