// Package ui is pgsweep's dashboard: an http.Handler that shows queues
// (with their flow control and groups), lanes, maintenance passes, leases
// and retention policies, refreshes itself, and offers the actions the
// database role may take (pause, resume). Every figure comes from
// pgsweep's SQL through the Client, which a monitor role can call from
// psql too; every action is the SQL verb, so PostgreSQL, not this package,
// decides whether the role may take it.
//
// Mount it under any path prefix:
//
//	h, err := ui.NewHandler(pool, ui.Options{})
//	mux.Handle("/pgsweep/", http.StripPrefix("/pgsweep", h))
//
// or run `pgsweep ui --database-url URL`. Pages use relative links only, and
// the front-end libraries (htmx, uPlot) are embedded: no CDN, no internet.
package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgsweep/pgsweep"
)

// Options configure the dashboard. The zero value is valid.
type Options struct {
	// Schema pgsweep is installed in (pgsweep when empty).
	Schema string
	// ReadOnly hides every action, whatever the database role may do (the
	// handler also refuses them).
	ReadOnly bool
	// BasicAuth, when set, is asked for every request's user and password;
	// a request it refuses gets 401.
	BasicAuth func(user, password string) bool
	// Refresh is the pages' default refresh interval (default 5 s); each
	// page lets its reader choose another or pause.
	Refresh time.Duration
	// Logger receives the handler's errors (default slog.Default()).
	Logger *slog.Logger
	// AllowedHosts, when set, are the only Host headers (host or host:port)
	// the handler answers; others get 421. A dashboard reachable at a
	// loopback address should set them: a web page whose name an attacker
	// re-points to 127.0.0.1 (DNS rebinding) is same-origin to the
	// browser, so the cross-origin check alone lets it read the pages and
	// post the actions. pgsweep ui sets them from --addr.
	AllowedHosts []string
}

// handler serves the pages.
type handler struct {
	c   *pgsweep.Client
	o   Options
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the dashboard on pool. Requests that change something
// are POSTs, refused when they come from another origin (Sec-Fetch-Site or
// Origin; http.CrossOriginProtection) and when Options.ReadOnly is set.
func NewHandler(pool *pgxpool.Pool, o Options) (http.Handler, error) {
	if pool == nil {
		return nil, errors.New("ui: pool is required")
	}
	c, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: o.Schema})
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	if o.Schema == "" {
		o.Schema = "pgsweep"
	}
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &handler{c: c, o: o, log: o.Logger, mux: http.NewServeMux()}
	h.routes()
	var out http.Handler = h.mux
	out = http.NewCrossOriginProtection().Handler(out)
	out = securityHeaders(out)
	if len(o.AllowedHosts) > 0 {
		out = allowHosts(o.AllowedHosts, out)
	}
	if o.BasicAuth != nil {
		out = basicAuth(o.BasicAuth, out)
	}
	return out, nil
}

func (h *handler) routes() {
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", staticFiles()))
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /queues/{queue}", h.queue)
	h.mux.HandleFunc("GET /queues/{queue}/messages/{id}", h.message)
	h.mux.HandleFunc("GET /queues/{queue}/lanes", h.lanes)
	h.mux.HandleFunc("GET /maintenance", h.maintenance)
	h.mux.HandleFunc("GET /leases", h.leases)
	h.mux.HandleFunc("GET /health", list(h, "health", "Health", h.c.Health))
	h.mux.HandleFunc("GET /retention", list(h, "retention", "Retention", h.c.RetentionPolicies))
	h.mux.HandleFunc("GET /retention/{policy}", h.policy)
	h.mux.HandleFunc("POST /queues/{queue}/{action}", h.queueAction)
}

// securityHeaders forbid what the pages never need: scripts and styles from
// elsewhere, inline scripts, framing.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// allowHosts answers only requests whose Host is one of hosts.
func allowHosts(hosts []string, next http.Handler) http.Handler {
	ok := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		ok[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok[strings.ToLower(r.Host)] {
			http.Error(w, "unknown host: the dashboard answers only its own names (ui.Options.AllowedHosts, pgsweep ui --host)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func basicAuth(ok func(user, password string) bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, has := r.BasicAuth()
		if !has || !ok(u, p) {
			w.Header().Set("WWW-Authenticate", `Basic realm="pgsweep", charset="UTF-8"`)
			http.Error(w, "authorization required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// timeout bounds each page's database calls.
func (h *handler) timeout(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}
