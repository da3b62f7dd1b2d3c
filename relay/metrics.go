package relay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus collectors. Several relays (queues)
// may share one Metrics: every series has a queue label.
type Metrics struct {
	// Published counts messages the broker confirmed.
	Published *prometheus.CounterVec
	// Failed counts messages not confirmed, by what the relay did:
	// retry (failed, retried after the queue's backoff), dead (moved to
	// the dead letters: failed on their last attempt, or refused for good),
	// permanent (of those, refused for good, counted when the broker
	// answered), unavailable (the broker was not reached: given back).
	Failed *prometheus.CounterVec
	// Latency is the time from commit to the broker's confirmation: from
	// the Dispatch call (right after the commit) for path="direct", from the
	// send (the message's created_at on the database clock, so it includes
	// the sending transaction and any clock skew) for path="claim".
	Latency *prometheus.HistogramVec
	// Claimed counts messages claimed, by path (direct dispatch or claim).
	Claimed *prometheus.CounterVec
	// DispatchDropped counts ids Dispatch took but did not publish itself,
	// by reason (full, not_running, broker_down, error, not_claimable: the
	// message was in flight elsewhere, not due, or gone; shutdown). The
	// relay's claims publish them.
	DispatchDropped *prometheus.CounterVec
	// Released counts messages given back unpublished (attempt not spent).
	Released *prometheus.CounterVec
	// LeasesLost counts messages whose lease was taken over before their
	// outcome was recorded.
	LeasesLost *prometheus.CounterVec
	// BrokerUp is 1 while the broker answers, 0 after a publish found it
	// unreachable (until one goes through again).
	BrokerUp *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	q := []string{"queue"}
	m := &Metrics{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_published_total",
			Help: "Messages the broker confirmed."}, q),
		Failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_failed_total",
			Help: "Messages the broker did not confirm, by outcome: retry, dead, permanent, unavailable."}, []string{"queue", "outcome"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pgsweep_relay_dispatch_latency_seconds",
			Help:    "Commit (direct: the Dispatch call; claim: the send) to the broker's confirmation.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30, 60}}, []string{"queue", "path"}),
		Claimed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_claimed_total",
			Help: "Messages claimed, by path: direct (Dispatch) or claim."}, []string{"queue", "path"}),
		DispatchDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_dispatch_left_total",
			Help: "Ids handed to Dispatch that it left to the relay's claims, by reason."}, []string{"queue", "reason"}),
		Released: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_released_total",
			Help: "Messages given back unpublished (attempt not spent)."}, q),
		LeasesLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgsweep_relay_leases_lost_total",
			Help: "Messages whose lease was taken over before their outcome was recorded."}, q),
		BrokerUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pgsweep_relay_broker_up",
			Help: "1 while the broker answers, 0 after a publish found it unreachable."}, q),
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.Failed, m.Latency, m.Claimed, m.DispatchDropped, m.Released, m.LeasesLost, m.BrokerUp)
	}
	return m
}

// The methods below accept a nil *Metrics (no metrics).

func (m *Metrics) claimed(queue, path string, n int) {
	if m != nil && n > 0 {
		m.Claimed.WithLabelValues(queue, path).Add(float64(n))
	}
}

func (m *Metrics) failed(queue, outcome string, n int) {
	if m != nil && n > 0 {
		m.Failed.WithLabelValues(queue, outcome).Add(float64(n))
	}
}

func (m *Metrics) dispatchDropped(queue, reason string, n int) {
	if m != nil && n > 0 {
		m.DispatchDropped.WithLabelValues(queue, reason).Add(float64(n))
	}
}

func (m *Metrics) released(queue string, n int) {
	if m != nil && n > 0 {
		m.Released.WithLabelValues(queue).Add(float64(n))
	}
}

func (m *Metrics) leasesLost(queue string, n int) {
	if m != nil && n > 0 {
		m.LeasesLost.WithLabelValues(queue).Add(float64(n))
	}
}

func (m *Metrics) brokerUp(queue string, up bool) {
	if m != nil {
		v := 0.0
		if up {
			v = 1
		}
		m.BrokerUp.WithLabelValues(queue).Set(v)
	}
}
