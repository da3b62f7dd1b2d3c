package amqp

import (
	"log/slog"

	"github.com/pgsweep/pgsweep/relay"
)

// Importing this package makes relay.OpenURL open its URLs (amqp, amqps).
func init() {
	relay.Register(func(rawURL, name string, logger *slog.Logger) (relay.Transport, error) {
		t, err := Open(rawURL, name, logger)
		if err != nil {
			return nil, err
		}
		return t, nil
	}, "amqp", "amqps")
}
