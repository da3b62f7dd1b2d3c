package pgsweep

import "github.com/jackc/pgx/v5"

// SafeSearchPath is the search_path of every connection pgsweep opens
// itself (the runner's, the CLI's, the relay's and bench's, the LISTEN
// connections of the Worker and the relay): pg_catalog, then the session's
// own temporary schema, and no schema another role can create objects in.
//
// pgsweep's statements do not need it: every function and operator they use
// is schema-qualified and every parameter that picks an overload is typed,
// so they resolve the same whatever the search_path (docs/security.md, "Go
// statements and search_path"). It is the second wall: a statement added
// later without qualification still cannot reach a function or operator that
// a role with CREATE on public (or on a schema named after the connecting
// role) put there.
const SafeSearchPath = "pg_catalog, pg_temp"

// SearchPathParam is the PostgreSQL setting behind SafeSearchPath.
const SearchPathParam = "search_path"

// PinSearchPath sets search_path to SafeSearchPath in cfg's startup
// parameters (for a pool: its ConnConfig), replacing any search_path the
// connection string set: pgsweep's own statements never rely on one. Every
// connection pgsweep opens itself goes through it; it is the one place
// that rule lives. A pooler in front of the server must pass search_path on
// (PgBouncer: track_extra_parameters, or it refuses an unknown startup
// parameter).
func PinSearchPath(cfg *pgx.ConnConfig) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams[SearchPathParam] = SafeSearchPath
}
