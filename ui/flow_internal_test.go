package ui

import (
	"testing"

	"github.com/pgsweep/pgsweep"
)

// A rate's N is read from both forms flow_stats writes; anything else is
// no rate.
func TestRateN(t *testing.T) {
	for rate, want := range map[string]int{"10/s": 10, "50/min": 50, "1000000/s": 1000000, "": 0, "10": 0, "10/h": 0, "x/s": 0, "-1/s": 0} {
		if got := rateN(rate); got != want {
			t.Errorf("rateN(%q) = %d, want %d", rate, got, want)
		}
	}
}

// A limit is reached at its value and above it (a lowered limit), never
// when it is not set; the groups past n are left out and said to be.
func TestFlowMarksLimitsReached(t *testing.T) {
	for _, c := range []struct {
		s         pgsweep.FlowStats
		full, dry bool
	}{
		{pgsweep.FlowStats{MaxInFlight: 5, InFlight: 4, Rate: "10/s", RateBurst: 20, RateUsed: 19}, false, false},
		{pgsweep.FlowStats{MaxInFlight: 5, InFlight: 5, Rate: "10/s", RateBurst: 20, RateUsed: 20}, true, true},
		{pgsweep.FlowStats{MaxInFlight: 2, InFlight: 3}, true, false},
		{pgsweep.FlowStats{GroupMaxInFlight: 2, GroupRate: "5/s"}, false, false},
	} {
		if v := newFlowView(c.s); v.Full != c.full || v.Dry != c.dry {
			t.Errorf("%+v: full %v, dry %v; want %v, %v", c.s, v.Full, v.Dry, c.full, c.dry)
		}
	}
	gs := []pgsweep.GroupStats{
		{Group: "a", InFlight: 2, MaxInFlight: 2},
		{Group: "b", InFlight: 1, MaxInFlight: 2, Rate: "5/min", RateUsed: 5},
		{Group: "c", InFlight: 3, Rate: "5/s", RateUsed: 4},
		{Group: "d"},
	}
	v := newGroupsView(gs, 3)
	if !v.More || len(v.Rows) != 3 {
		t.Fatalf("3 of 4 groups: more %v, %d rows", v.More, len(v.Rows))
	}
	for i, want := range [][2]bool{{true, false}, {false, true}, {false, false}} {
		if r := v.Rows[i]; r.Full != want[0] || r.Dry != want[1] || r.AtLimit() != (want[0] || want[1]) {
			t.Errorf("group %s: full %v, dry %v; want %v", r.Group, r.Full, r.Dry, want)
		}
	}
	if v := newGroupsView(gs[:3], 3); v.More || len(v.Rows) != 3 {
		t.Fatalf("3 of 3 groups: more %v, %d rows", v.More, len(v.Rows))
	}
}
