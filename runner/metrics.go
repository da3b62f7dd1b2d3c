package runner

import (
	"github.com/pgsweep/pgsweep"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the runner's Prometheus metrics, registered on their own
// registry (no global state); serve them with Handler.
type Metrics struct {
	// Registry holds every metric below plus the Go runtime and process collectors.
	Registry *prometheus.Registry

	passes          prometheus.Counter
	passErrors      prometheus.Counter
	passDuration    prometheus.Histogram
	partRuns        *prometheus.CounterVec
	leasesAcquired  *prometheus.CounterVec
	leasesLost      *prometheus.CounterVec
	rowsDeleted     *prometheus.CounterVec
	rowsRecovered   prometheus.Counter
	claimsExpired   prometheus.Counter
	deadLettered    prometheus.Counter
	scheduledSent   prometheus.Counter
	queueDepth      *prometheus.GaugeVec
	oldestPending   *prometheus.GaugeVec
	snapshotAt      *prometheus.GaugeVec
	findings        *prometheus.GaugeVec
	severities      *prometheus.GaugeVec
	lastSuccess     prometheus.Gauge
	consecutiveFail prometheus.Gauge
	detached        *prometheus.CounterVec
}

// NewMetrics creates the metrics on a new registry, together with the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_maintain_passes_total", Help: "Maintenance passes attempted (CALL maintain), successful or not."}),
		passErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_maintain_pass_errors_total", Help: "Maintenance passes that failed: connection errors and errors raised by maintain()."}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "pgsweep_maintain_pass_duration_seconds", Help: "Wall time of a maintenance pass, connect to disconnect.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}}),
		partRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgsweep_maintain_parts_total", Help: "What each part of this runner's passes did: done, failed, lost, busy, not due, no budget."},
			[]string{"part", "status"}),
		leasesAcquired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgsweep_maintain_leases_acquired_total", Help: "maintain:<part> leases this runner acquired (parts it ran)."}, []string{"part"}),
		leasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgsweep_maintain_leases_lost_total", Help: "maintain:<part> leases taken over by another owner while this runner ran the part."}, []string{"part"}),
		rowsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgsweep_retention_rows_deleted_total", Help: "Rows deleted by retention in this runner's passes, per policy."}, []string{"policy"}),
		rowsRecovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_recovery_rows_recovered_total", Help: "Messages whose expired claim recovery made claimable again."}),
		claimsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_recovery_lost_leases_total", Help: "Message claims (worker leases) recovery found expired."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_recovery_dead_lettered_total", Help: "Messages recovery moved to the dead letters (no attempts left)."}),
		scheduledSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pgsweep_schedules_sent_total", Help: "Messages the periodic schedules sent in this runner's passes (one per slot)."}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgsweep_queue_depth", Help: "Messages per queue and state (pending, due, processing, failed, processed, dead), from the queue's latest snapshot (stats_latest), read after each pass."},
			[]string{"queue", "kind", "state"}),
		oldestPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgsweep_queue_oldest_pending_age_seconds", Help: "Age of the oldest due message per queue, from its latest snapshot."},
			[]string{"queue"}),
		snapshotAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgsweep_queue_snapshot_timestamp_seconds", Help: "Unix time of the queue's latest snapshot (the figures above are as of then)."},
			[]string{"queue"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgsweep_health_findings", Help: "Findings of health() per kind, read after each pass (docs/dashboard.md lists the kinds and what to do)."},
			[]string{"kind"}),
		severities: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgsweep_health_findings_by_severity", Help: "Findings of health() per severity: critical, warning, info."},
			[]string{"severity"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgsweep_runner_last_success_timestamp_seconds", Help: "Unix time of the last successful pass."}),
		consecutiveFail: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pgsweep_runner_consecutive_failures", Help: "Failed passes since the last successful one (drives the backoff)."}),
		detached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgsweep_retention_partitions_concurrently_total",
			Help: "Expired partitions this runner handled with DETACH ... CONCURRENTLY, by result: detached, dropped, pending (left for FINALIZE), released (left to the pass), error (a statement failed)."},
			[]string{"result"}),
	}
	r.MustRegister(m.passes, m.passErrors, m.passDuration, m.partRuns, m.leasesAcquired, m.leasesLost,
		m.rowsDeleted, m.rowsRecovered, m.claimsExpired, m.deadLettered, m.scheduledSent, m.queueDepth, m.oldestPending, m.snapshotAt, m.findings, m.severities,
		m.lastSuccess, m.consecutiveFail, m.detached,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observePass adds what one pass did to the counters.
func (m *Metrics) observePass(p *Pass) {
	for part, status := range p.Parts {
		m.partRuns.WithLabelValues(part, status).Inc()
		switch status {
		case "done", "failed", "lost":
			m.leasesAcquired.WithLabelValues(part).Inc()
		}
		if status == "lost" {
			m.leasesLost.WithLabelValues(part).Inc()
		}
	}
	m.rowsRecovered.Add(float64(p.Recovery.Recovered))
	m.claimsExpired.Add(float64(p.Recovery.LostLeases))
	m.deadLettered.Add(float64(p.Recovery.DeadLettered))
	m.scheduledSent.Add(float64(p.Schedules.Sent))
	for policy, n := range p.Deleted {
		m.rowsDeleted.WithLabelValues(policy).Add(float64(n))
	}
}

// setSnapshots replaces the queue gauges with the queues' latest snapshots
// (queues that disappeared disappear from the metrics too; a queue without
// a snapshot yet has none).
func (m *Metrics) setSnapshots(snaps []pgsweep.QueueSnapshot) {
	m.queueDepth.Reset()
	m.oldestPending.Reset()
	m.snapshotAt.Reset()
	for _, q := range snaps {
		if q.TakenAt.IsZero() {
			continue
		}
		for state, n := range map[string]int64{"pending": q.Pending, "due": q.Due, "processing": q.InFlight, "failed": q.Failed,
			"processed": q.Processed, "dead": q.Dead} {
			m.queueDepth.WithLabelValues(q.Queue, q.Kind, state).Set(float64(n))
		}
		m.oldestPending.WithLabelValues(q.Queue).Set(q.OldestDueAge.Seconds())
		m.snapshotAt.WithLabelValues(q.Queue).Set(float64(q.TakenAt.UnixMilli()) / 1000)
	}
}

// setFindings replaces the health gauges. Every known kind and severity
// is set, to 0 when absent, so that an alert on one sees it clear instead
// of going stale.
func (m *Metrics) setFindings(fs []pgsweep.Finding) {
	m.findings.Reset()
	m.severities.Reset()
	for _, k := range pgsweep.FindingKinds {
		m.findings.WithLabelValues(k).Set(0)
	}
	for _, s := range []string{"critical", "warning", "info"} {
		m.severities.WithLabelValues(s).Set(0)
	}
	for _, f := range fs {
		m.findings.WithLabelValues(f.Kind).Inc()
		m.severities.WithLabelValues(f.Severity).Inc()
	}
}

// observeDetach adds one RetentionDetachConcurrently call to the counters.
func (m *Metrics) observeDetach(d pgsweep.DetachResult) {
	m.detached.WithLabelValues("detached").Add(float64(d.Detached))
	m.detached.WithLabelValues("dropped").Add(float64(d.Dropped))
	m.detached.WithLabelValues("pending").Add(float64(d.Pending))
	m.detached.WithLabelValues("released").Add(float64(d.Released))
	m.detached.WithLabelValues("error").Add(float64(len(d.Errors)))
	for policy, n := range d.RowsByPolicy {
		m.rowsDeleted.WithLabelValues(policy).Add(float64(n))
	}
}
