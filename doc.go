// Package pgsweep is the Go client of pgsweep, a PostgreSQL toolkit for the
// storage side of reliable messaging: leadership leases, outbox/inbox queues
// claimed with FOR UPDATE SKIP LOCKED, recovery of stuck rows and coordinated
// retention across any number of application replicas.
//
// All behaviour lives in PL/pgSQL functions installed by [Migrate] (or by the
// tern CLI from the migrations/ directory). This package is a thin, typed
// wrapper: it never re-implements a rule that the SQL already holds.
package pgsweep
