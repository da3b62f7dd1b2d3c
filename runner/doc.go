// Package runner is pgsweep's maintenance runner: the Go side of
// `pgsweep run`. It calls the SQL procedure maintain() in a loop, from any
// number of replicas at once; the database decides which replica runs which
// part of a pass (leases and advisory locks in maintain()), so the replicas
// need no configuration in common and no coordination of their own.
//
// Each pass opens one connection, runs CALL maintain(owner, budget), reads
// what the pass did (for metrics) and the runner settings (interval and
// jitter, so a change made by SQL applies to the next sleep), and closes the
// connection again: an idle runner holds no connection. Database errors back
// off exponentially up to a cap. Stopping cancels the pass in flight, waits
// for it to return, and releases every lease the runner holds, so another
// replica can take over at once instead of after the lease TTL.
package runner
