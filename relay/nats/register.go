package nats

import "github.com/pgsweep/pgsweep/relay"

// Importing this package makes relay.OpenURL open its URLs (nats, tls).
func init() { relay.Register(Open, "nats", "tls") }
