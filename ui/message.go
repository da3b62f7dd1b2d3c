package ui

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/pgsweep/pgsweep"
)

// messageData is the message page's.
type messageData struct {
	Queue   string
	M       pgsweep.BrowsedMessage
	Payload string // pretty-printed; empty without the queue's browse right
	Headers string
}

// message shows one message by id, in whichever state it is: its figures,
// last error, headers and payload (pretty-printed, escaped; only with the
// queue's browse right), and the actions its state allows.
func (h *handler) message(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.timeout(r)
	defer cancel()
	queue := r.PathValue("queue")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.badRequest(w, r, "the message id must be a number from 1, got "+r.PathValue("id"))
		return
	}
	m, found, err := h.c.BrowseMessage(ctx, queue, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !found {
		w.WriteHeader(http.StatusNotFound)
		h.render(w, r, "error", "Not found", "", "queue "+queue+" holds no message "+strconv.FormatInt(id, 10)+
			" (completed, removed by retention, or never sent)")
		return
	}
	d := messageData{Queue: queue, M: m, Payload: indent(m.Payload), Headers: indent(m.Headers)}
	h.render(w, r, "message", "Message "+strconv.FormatInt(id, 10)+" of "+queue, nav("queue"), d)
}

// indent pretty-prints a JSON document (as is when it is not one).
func indent(doc json.RawMessage) string {
	if doc == nil {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, doc, "", "  ") != nil {
		return string(doc)
	}
	return b.String()
}
