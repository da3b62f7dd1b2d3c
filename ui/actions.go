package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/pgsweep/pgsweep"
)

// queueAction runs one of a queue's verbs from a form and shows the queue
// again: pause, resume; requeue the selected dead letters (dead_requeue);
// cancel the selected pending messages (message_cancel); skip a lane's
// dead letter (lane_skip). The database decides whether the role may, and
// checks every argument.
func (h *handler) queueAction(w http.ResponseWriter, r *http.Request) {
	if h.o.ReadOnly {
		http.Error(w, "the dashboard is read-only", http.StatusForbidden)
		return
	}
	if err := r.ParseForm(); err != nil {
		h.badRequest(w, r, err.Error())
		return
	}
	ctx, cancel := h.timeout(r)
	defer cancel()
	name := r.PathValue("queue")
	back := ""
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = h.c.QueuePause(ctx, name)
	case "resume":
		_, err = h.c.QueueResume(ctx, name)
	case "requeue", "cancel":
		ids, ferr := formIDs(r)
		if ferr != nil {
			h.badRequest(w, r, ferr.Error())
			return
		}
		if r.PathValue("action") == "requeue" {
			back = "?state=" + pgsweep.BrowseDead
			_, err = h.c.RequeueDead(ctx, name, ids, time.Time{})
		} else {
			back = "?state=" + pgsweep.BrowsePending
			_, err = h.c.CancelMessages(ctx, name, ids)
		}
	case "skip":
		_, err = h.c.LaneSkip(ctx, name, r.PostForm.Get("lane"))
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// Back to the queue's page, relative to this request's URL: the
	// browser resolves it under whatever prefix the handler is mounted at
	// (http.Redirect would make it absolute from the stripped path).
	w.Header().Set("Location", "../"+url.PathEscape(name)+back)
	w.WriteHeader(http.StatusSeeOther)
}

// formIDs reads the selected message ids (the form's id values).
func formIDs(r *http.Request) ([]int64, error) {
	vs := r.PostForm["id"]
	if len(vs) == 0 {
		return nil, errors.New("select at least one message")
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("id must be a message id (1 or more), got %q", v)
		}
		ids[i] = id
	}
	return ids, nil
}

// badRequest shows what was wrong with the request.
func (h *handler) badRequest(w http.ResponseWriter, r *http.Request, why string) {
	w.WriteHeader(http.StatusBadRequest)
	h.render(w, r, "error", "Bad request", "", why)
}
