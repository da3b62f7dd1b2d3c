package relay

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// describedNop is a Transport that describes itself and publishes nothing.
type describedNop struct{}

func (describedNop) Publish(context.Context, []Message) []Result { return nil }
func (describedNop) Close() error                                { return nil }
func (describedNop) MessagingSystem() string                     { return "nop" }
func (describedNop) Destination(*Message) string                 { return "subject" }

// With tracing off (the global provider, a no-op until set) the publish
// span costs the same for 1 message as for 1,000: nothing per message,
// even when every message carries a creation context and some failed.
func TestPublishSpanOffCostsNothingPerMessage(t *testing.T) {
	r := &Relay{tracer: newTracer(nil), t: describedNop{}, queue: "q", o: Options{Owner: "o"}}
	allocs := func(n int) float64 {
		hs := make([]held, n)
		out := make([]outcome, n)
		res := make([]Result, n)
		for i := range hs {
			hs[i].msg = Message{Queue: "q", ID: int64(i + 1), Attempt: 1, CreatedAt: time.Now(),
				Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "n": strconv.Itoa(i)}}
			if i%2 == 1 {
				out[i], res[i] = failed, Result{Err: errors.New("refused")}
			} else {
				out[i] = accepted
			}
		}
		return testing.AllocsPerRun(100, func() { endPublish(r.startPublish(context.Background(), hs, pathClaim), out, res) })
	}
	one, many := allocs(1), allocs(1000)
	if many != one {
		t.Fatalf("tracing off: %v allocations for a publish of 1 message, %v for 1,000: want the same", one, many)
	}
	// the global provider's no-op Start: its span and the context
	// holding it (otel v1.47)
	if one > 3 {
		t.Fatalf("tracing off: %v allocations per publish span, want at most 3", one)
	}
}
