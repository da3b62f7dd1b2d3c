package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/relay/relaytest"
)

// --tracing off,memory runs the Worker contender once per mode, side by
// side, and reports the ratio; in memory every message's process span and
// every send's span reach the span processor: 2,000 process spans and one
// send span (one SendBatch of up to 10,000).
func TestBenchClaimTracing(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema,
		"--messages", "2000", "--workers", "2", "--batch", "50", "--only", "worker", "--tracing", "off,memory"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"worker         2000 msgs", "worker/memory     2000 msgs", "(round 1 of 1, 2001 spans)",
		"pgsweep Go Worker, no-op handler, tracing memory", "Worker: tracing memory / off (target >= 0.8)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	err = runWorkload(context.Background(), []string{"claim", "--database-url", db.URL, "--schema", db.Schema, "--tracing", "off,otlp"}, &out)
	if err == nil || !strings.Contains(err.Error(), `--tracing takes off and memory, comma-separated; got "otlp"`) {
		t.Fatalf("--tracing otlp: %v", err)
	}
}

// bench relay --tracing off,memory: burn-down, direct and notify per mode,
// on a real nats-server.
func TestBenchRelayTracing(t *testing.T) {
	db := scratchDB(t)
	var out bytes.Buffer
	err := runWorkload(context.Background(), []string{"relay", "--database-url", db.URL, "--schema", db.Schema, "--to", relaytest.NATS(t),
		"--messages", "500", "--relays", "2", "--workers", "2", "--batch", "50", "--rate", "100", "--duration", "500ms",
		"--tracing", "off,memory"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"burn-down       500 msgs", "burn-down/memory      500 msgs", "direct/memory", "notify/memory", "tracing memory: ",
		"relay burn-down (claim, publish, ack, complete), tracing memory", "burn-down: tracing memory / off (target >= 0.8)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
