package relay_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/relay"
	_ "github.com/pgsweep/pgsweep/relay/amqp"
	_ "github.com/pgsweep/pgsweep/relay/nats"
)

// OpenURL picks the transport by the URL's scheme, from what the imported
// transport packages registered; the transport checks the rest.
func TestOpenURLBySchemes(t *testing.T) {
	if got, want := relay.Schemes(), []string{"amqp", "amqps", "nats", "tls"}; !slices.Equal(got, want) {
		t.Fatalf("schemes %v, want %v", got, want)
	}
	for _, c := range []struct{ url, want string }{
		{"kafka://user:secret@127.0.0.1:1/", `scheme must be one of amqp, amqps, nats, tls, got "kafka"`},
		{"NATS://127.0.0.1:1", "subject=SUBJ is required"},                // the nats transport's own check
		{"amqp://guest:secret@127.0.0.1:1/", "routing_key=K is required"}, // the amqp transport's
	} {
		tr, err := relay.OpenURL(c.url, "test", nil)
		if err == nil || tr != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("OpenURL(%s): %v, %v; want no transport and %q", c.url, tr, err, c.want)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("OpenURL(%s): the password is in the error: %v", c.url, err)
		}
	}
}
