package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/pgsweep/pgsweep"
)

// queueAction runs one of a queue's verbs from a form and shows the queue
// again: pause, resume; requeue or delete the selected dead letters
// (dead_requeue, dead_delete), or all those whose error contains the
// form's text (requeue-matching, delete-matching); cancel the selected
// pending messages (message_cancel); skip a lane's dead letter
// (lane_skip). The database decides whether the role may, and checks every
// argument.
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
	case "requeue", "delete", "cancel":
		ids, ferr := formIDs(r)
		if ferr != nil {
			h.badRequest(w, r, ferr.Error())
			return
		}
		var done []int64
		switch r.PathValue("action") {
		case "requeue":
			done, err = h.c.RequeueDead(ctx, name, ids, time.Time{})
			back = deadPage(r.PostForm.Get("error"), "requeued", int64(len(done)), false)
		case "delete":
			done, err = h.c.DeleteDead(ctx, name, ids)
			back = deadPage(r.PostForm.Get("error"), "deleted", int64(len(done)), false)
		default:
			back = "?state=" + pgsweep.BrowsePending
			_, err = h.c.CancelMessages(ctx, name, ids)
		}
	case "requeue-matching", "delete-matching":
		match := r.PostForm.Get("error")
		if match == "" {
			h.badRequest(w, r, "error: give the text the dead letters' errors contain")
			return
		}
		var n int64
		var more bool
		verb := "requeued"
		if r.PathValue("action") == "delete-matching" {
			verb = "deleted"
		}
		n, more, err = h.allMatching(ctx, name, match, verb == "deleted")
		back = deadPage(match, verb, n, more)
	case "skip":
		_, err = h.c.LaneSkip(ctx, name, r.PostForm.Get("lane"))
		if r.PostForm.Get("back") == "lanes" {
			back = "/lanes"
		}
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

// allMatching requeues (or deletes) every dead letter of queue whose error
// contains match, a page of 1000 at a time, until none is left or the
// request's time is up (more: some may be left; the page says so).
func (h *handler) allMatching(ctx context.Context, queue, match string, del bool) (n int64, more bool, err error) {
	var after int64
	for {
		if ctx.Err() != nil {
			return n, true, nil
		}
		page, err := h.c.BrowseMatching(ctx, queue, pgsweep.BrowseDead, match, after, 1000)
		if err != nil {
			if ctx.Err() != nil && n > 0 {
				return n, true, nil
			}
			return n, false, err
		}
		ids := make([]int64, len(page.Messages))
		for i, m := range page.Messages {
			ids[i] = m.ID
		}
		if len(ids) > 0 {
			var done []int64
			if del {
				done, err = h.c.DeleteDead(ctx, queue, ids)
			} else {
				done, err = h.c.RequeueDead(ctx, queue, ids, time.Time{})
			}
			if err != nil {
				if ctx.Err() != nil { // out of time: that page was rolled back
					return n, true, nil
				}
				return n, false, err
			}
			n += int64(len(done))
		}
		if page.End {
			return n, false, nil
		}
		after = page.Next
	}
}

// deadPage is the query of the dead letters' page after an action: the
// filter kept, and what was done.
func deadPage(match, verb string, n int64, more bool) string {
	q := url.Values{"state": {pgsweep.BrowseDead}, "done": {fmt.Sprintf("%s %d", verb, n)}}
	if match != "" {
		q.Set("error", match)
	}
	if more {
		q.Set("more", "1")
	}
	return "?" + q.Encode()
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
