package relay

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Checker is implemented by a Transport that knows, without a round trip,
// whether it holds a connection to the broker (both of pgsweep's do). While
// it reports an error after a publish found the broker unreachable, the
// relay claims nothing; without it the relay probes with one message.
type Checker interface {
	Check() error
}

// healthState is guarded by Relay.mu.
type healthState struct {
	broker        bool
	brokerErr     string
	brokerSince   time.Time // when the broker's state last changed
	database      bool
	databaseErr   string
	published     int64
	lastPublished time.Time
}

// Health is what /healthz reports.
type Health struct {
	// Healthy: Run is running, the broker answers and so does the database.
	Healthy bool   `json:"healthy"`
	Queue   string `json:"queue"`
	Owner   string `json:"owner"`
	Running bool   `json:"running"`
	// Broker is "up" or "down" (a publish found it unreachable, or the
	// transport has no connection).
	Broker      string     `json:"broker"`
	BrokerError string     `json:"broker_error,omitempty"`
	BrokerSince *time.Time `json:"broker_since,omitempty"`
	// Database is "ok" or "error" (the last claim or acknowledgement failed).
	Database      string     `json:"database"`
	DatabaseError string     `json:"database_error,omitempty"`
	Published     int64      `json:"published"`
	LastPublished *time.Time `json:"last_published,omitempty"`
}

// Health reports the relay's state.
func (r *Relay) Health() Health {
	r.mu.Lock()
	s := r.health
	r.mu.Unlock()
	h := Health{Queue: r.queue, Owner: r.o.Owner, Running: r.running.Load(), Broker: "up", Database: "ok", Published: s.published}
	if !s.broker {
		h.Broker, h.BrokerError = "down", s.brokerErr
	} else if err := r.checkTransport(); err != nil {
		h.Broker, h.BrokerError = "down", err.Error()
	}
	if !s.brokerSince.IsZero() {
		t := s.brokerSince
		h.BrokerSince = &t
	}
	if !s.database {
		h.Database, h.DatabaseError = "error", s.databaseErr
	}
	if !s.lastPublished.IsZero() {
		t := s.lastPublished
		h.LastPublished = &t
	}
	h.Healthy = h.Running && h.Broker == "up" && h.Database == "ok"
	return h
}

func (r *Relay) checkTransport() error {
	if c, ok := r.t.(Checker); ok {
		return c.Check()
	}
	return nil
}

// transportUp: the transport says it holds a connection (or cannot say).
func (r *Relay) transportUp() bool { return r.checkTransport() == nil }

func (r *Relay) brokerDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.health.broker
}

// setBroker records a publish that went through (nil) or found the broker
// unreachable.
func (r *Relay) setBroker(err error) {
	r.mu.Lock()
	was := r.health.broker
	r.health.broker = err == nil
	r.health.brokerErr = ""
	if err != nil {
		r.health.brokerErr = err.Error()
	}
	if was != r.health.broker {
		r.health.brokerSince = time.Now()
	}
	if err == nil {
		r.probe.Reset() // the next outage probes from 100 ms again
		r.nextProbe = time.Time{}
	}
	r.mu.Unlock()
	r.m.brokerUp(r.queue, err == nil)
	switch {
	case was && err != nil:
		r.log.Error("broker unreachable; messages are given back and the relay waits for it", "err", err)
	case !was && err == nil:
		r.log.Info("broker reachable again; publishing")
	}
}

func (r *Relay) setDatabase(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.health.database = err == nil
	r.health.databaseErr = ""
	if err != nil {
		r.health.databaseErr = err.Error()
	}
}

// Handler serves /metrics (gatherer's collectors; nil: none) and /healthz
// (Health as JSON; status 503 while not healthy).
func Handler(r *Relay, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	if gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := r.Health()
		w.Header().Set("Content-Type", "application/json")
		if !h.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	return mux
}

// cleanText makes s storable as text: PostgreSQL rejects NUL bytes and
// invalid UTF-8.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
