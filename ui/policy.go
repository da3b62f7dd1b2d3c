package ui

import (
	"net/http"
	"slices"

	"github.com/pgsweep/pgsweep"
)

// policyData is a retention policy's page.
type policyData struct {
	Policy pgsweep.RetentionStatus
	Passes []pgsweep.RetentionPass // the latest, newest first
	Charts []chart
}

// policyPasses is how many passes the policy's page lists (the chart shows
// every recorded one: history_retention and history_max_rows bound them).
const policyPasses = 50

// policy shows one retention policy: its settings, a chart of the rows each
// recorded pass deleted, and its latest passes with their outcome and error.
func (h *handler) policy(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	name := r.PathValue("policy")
	ps, err := h.c.RetentionPolicies(ctx)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	i := slices.IndexFunc(ps, func(p pgsweep.RetentionStatus) bool { return p.Name == name })
	if i < 0 {
		w.WriteHeader(http.StatusNotFound)
		h.render(w, r, "error", "Not found", "", "no retention policy named "+name)
		return
	}
	passes, err := h.c.RetentionPasses(ctx, name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := policyData{Policy: ps[i], Charts: retentionChart(passes)}
	for j := len(passes) - 1; j >= 0 && len(d.Passes) < policyPasses; j-- {
		d.Passes = append(d.Passes, passes[j])
	}
	h.render(w, r, "policy", "Retention policy "+name, nav("retention"), d)
}
