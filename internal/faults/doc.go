// Package faults is pgsweep's fault-injection suite (`make test-faults`).
//
// It starts a PostgreSQL cluster of its own (scripts/db.sh with
// PGSWEEP_DB_DIR and PGSWEEP_DB_PORT, so the shared test cluster is never
// disturbed), real Worker processes (cmd/faultworker), real `pgsweep run`
// runners and a producer, and injects faults while they work: kill -9 and
// SIGTERM of workers and runners, pg_terminate_backend, `pg_ctl restart -m
// immediate` and `-m fast`, the server stopped for a while, a low
// statement_timeout, a runner killed in the middle of a retention pass.
// Then it checks what docs/operations.md promises: nothing lost, duplicates
// only after crashes and never more than the messages in flight at the
// crashes, no overlapping maintenance runs, retention backlogs resumed at
// once, every process back at work by itself within documented bounds, and
// /healthz telling the truth.
//
// The suite is in faults_test.go, behind the build tag faults (the
// Makefile's test-faults target sets it) so that `go test ./...` does not
// run it.
package faults
