package relay

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// opener opens a Transport on a relay URL: name labels the connection at
// the broker, logger receives the transport's logs.
type opener func(rawURL, name string, logger *slog.Logger) (Transport, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]opener{}
)

// Register makes OpenURL open the URLs of schemes with open (a transport
// package's Open). The transport packages register themselves when
// imported: relay/nats (nats, tls) and relay/amqp (amqp, amqps). A scheme
// registered twice panics.
func Register[T Transport](open func(rawURL, name string, logger *slog.Logger) (T, error), schemes ...string) {
	o := func(rawURL, name string, logger *slog.Logger) (Transport, error) {
		t, err := open(rawURL, name, logger)
		if err != nil {
			return nil, err // not a nil T in a non-nil Transport
		}
		return t, nil
	}
	openersMu.Lock()
	defer openersMu.Unlock()
	for _, s := range schemes {
		s = strings.ToLower(s)
		if _, dup := openers[s]; dup {
			panic("relay: Register called twice for scheme " + s)
		}
		openers[s] = o
	}
}

// Schemes returns the URL schemes OpenURL opens, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	out := make([]string, 0, len(openers))
	for s := range openers {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// OpenURL opens the Transport that rawURL's scheme names (the transport's
// package must be imported: relay/nats, relay/amqp). The transport checks
// the rest of the URL. Errors never quote the URL (it may hold a password).
func OpenURL(rawURL, name string, logger *slog.Logger) (Transport, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("relay: not a URL")
	}
	openersMu.RLock()
	open := openers[strings.ToLower(u.Scheme)]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("relay: scheme must be one of %s, got %q", strings.Join(Schemes(), ", "), u.Scheme)
	}
	return open(rawURL, name, logger)
}
