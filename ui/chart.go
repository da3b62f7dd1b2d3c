package ui

import "github.com/pgsweep/pgsweep"

// chartData is a queue's history in uPlot's column form: the times (Unix
// seconds), then one column a series. The page carries it as JSON in a data
// block (html/template encodes it; the CSP runs no inline script) and
// app.js draws it.
type chartData struct {
	Times    []int64   `json:"t"`
	Pending  []int64   `json:"pending"`
	InFlight []int64   `json:"in_flight"`
	Failed   []int64   `json:"failed"`
	Dead     []int64   `json:"dead"`
	SentPerS []float64 `json:"sent_per_s"`
	DonePerS []float64 `json:"completed_per_s"`
}

// chartOf turns snapshots (oldest first) into the chart's columns; the
// rates are each snapshot's counters over the time since the one before.
func chartOf(ss []pgsweep.QueueSnapshot) chartData {
	var c chartData
	for _, s := range ss {
		if s.TakenAt.IsZero() {
			continue
		}
		c.Times = append(c.Times, s.TakenAt.Unix())
		c.Pending = append(c.Pending, s.Pending)
		c.InFlight = append(c.InFlight, s.InFlight)
		c.Failed = append(c.Failed, s.Failed)
		c.Dead = append(c.Dead, s.Dead)
		secs := s.TakenAt.Sub(s.Since).Seconds()
		if s.Since.IsZero() || secs <= 0 {
			secs = 0
		}
		c.SentPerS = append(c.SentPerS, rate(s.Sent, secs))
		c.DonePerS = append(c.DonePerS, rate(s.Completed, secs))
	}
	return c
}

func rate(n int64, secs float64) float64 {
	if secs == 0 {
		return 0
	}
	return float64(n) / secs
}
