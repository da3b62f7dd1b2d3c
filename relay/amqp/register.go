package amqp

import "github.com/pgsweep/pgsweep/relay"

// Importing this package makes relay.OpenURL open its URLs (amqp, amqps).
func init() { relay.Register(Open, "amqp", "amqps") }
