// Package runner is pgsweep's maintenance runner: the Go side of
// `pgsweep run`. It calls the SQL procedure maintain() in a loop, from any
// number of replicas at once; the database decides which replica runs which
// part of a pass (leases and advisory locks in maintain()), so the replicas
// need no configuration in common and no coordination of their own.
//
// Each pass opens one connection, runs CALL maintain(owner, budget), reads
// what the pass did (for metrics) and the runner settings (interval and
// jitter, so a change made by SQL applies to the next sleep), and closes the
// connection again: an idle runner holds no connection. A pass that lasts
// longer than a few seconds is watched on a second connection for committed
// steps, so that Health (and /healthz) counts a long pass that makes progress
// as alive. Database errors back off exponentially up to a cap; a pass whose
// connection died is recorded on a fresh one. Stopping cancels the pass in
// flight, waits for it to return, and releases every lease the runner holds,
// so another replica can take over at once instead of after the lease TTL.
//
// Each pass is traced with OpenTelemetry (Options.TracerProvider, by
// default the global provider): a span SpanPass with a child per part that
// ran, its counts as attributes (docs/operations.md, "Tracing").
//
// The connections of ConnectConfig set client_connection_check_interval
// (DefaultConnectionCheckInterval), so that the server stops the work of a
// runner that was killed within about a second instead of running its pass
// to the end of the budget.
package runner
