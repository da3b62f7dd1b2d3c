package ui

import "github.com/pgsweep/pgsweep"

// chart is one uPlot chart in column form: the element it is drawn in, its
// series' labels, and the columns: the times (Unix seconds), then one
// column a series. A page carries its charts as JSON in a data block
// (html/template encodes it; the CSP runs no inline script) and app.js
// draws each in the element of its id.
type chart struct {
	ID     string      `json:"id"`
	Labels []string    `json:"labels"`
	Data   [][]float64 `json:"data"`
}

// queueCharts turns a queue's snapshots (oldest first) into its two
// charts: messages by state, and throughput (each snapshot's counters over
// the time since the one before).
func queueCharts(ss []pgsweep.QueueSnapshot) []chart {
	depth := chart{ID: "chart-depth", Labels: []string{"pending", "in flight", "failed", "dead"}, Data: make([][]float64, 5)}
	rates := chart{ID: "chart-rate", Labels: []string{"sent", "completed"}, Data: make([][]float64, 3)}
	for _, s := range ss {
		if s.TakenAt.IsZero() {
			continue
		}
		t := float64(s.TakenAt.Unix())
		depth.add(t, float64(s.Pending), float64(s.InFlight), float64(s.Failed), float64(s.Dead))
		secs := s.TakenAt.Sub(s.Since).Seconds()
		if s.Since.IsZero() || secs <= 0 {
			secs = 0
		}
		rates.add(t, rate(s.Sent, secs), rate(s.Completed, secs))
	}
	if len(depth.Data[0]) == 0 {
		return nil
	}
	return []chart{depth, rates}
}

// retentionChart is a policy's rows deleted per pass (oldest first), at
// each pass's start.
func retentionChart(ps []pgsweep.RetentionPass) []chart {
	c := chart{ID: "chart-deleted", Labels: []string{"rows deleted"}, Data: make([][]float64, 2)}
	for _, p := range ps {
		c.add(float64(p.StartedAt.Unix()), float64(p.RowsDeleted))
	}
	if len(c.Data[0]) == 0 {
		return nil
	}
	return []chart{c}
}

func (c *chart) add(t float64, vs ...float64) {
	c.Data[0] = append(c.Data[0], t)
	for i, v := range vs {
		c.Data[i+1] = append(c.Data[i+1], v)
	}
}

func rate(n int64, secs float64) float64 {
	if secs == 0 {
		return 0
	}
	return float64(n) / secs
}
