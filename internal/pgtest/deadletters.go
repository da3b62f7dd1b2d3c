package pgtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
)

// DeadLetters sends n messages ({"n": 1}, in lane when not empty) to queue,
// whose max_attempts must be 1, claims them and fails each with errText:
// they become dead letters. It returns their ids in claim order.
func DeadLetters(t testing.TB, c *pgsweep.Client, queue string, n int, errText, lane string) []int64 {
	t.Helper()
	ctx := context.Background()
	for range n {
		if _, _, err := c.Send(ctx, queue, pgsweep.Message{Payload: json.RawMessage(`{"n": 1}`), Lane: lane}); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := c.Claim(ctx, queue, "dead-letters", n, time.Minute)
	if err != nil || len(ds) != n {
		t.Fatalf("claim: %d of %d, %v", len(ds), n, err)
	}
	ids := make([]int64, n)
	for i, d := range ds {
		ids[i] = d.ID
		if _, err := c.Fail(ctx, queue, d.Token, []int64{d.ID}, errText, 0); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}
