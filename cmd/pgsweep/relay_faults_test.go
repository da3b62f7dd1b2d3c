//go:build faults

package main

// Fault tests of the relay's process that take long because the fault is
// long (a broker down for 30 s): `make test-faults` runs them, with
// internal/faults; the default `go test` does not.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
	"github.com/pgsweep/pgsweep/relay/relaytest"
)

// The broker is down for 30 s while messages keep coming: /healthz says so
// (503, broker down), nothing is lost or dead-lettered, no attempt is
// spent on the outage, and the relay recovers by itself when the broker is
// back (/healthz 200). SIGTERM then stops it with exit 0.
func TestRelayBrokerDownThirtySeconds(t *testing.T) {
	t.Parallel()
	broker := relaytest.Private(t, "nats")
	db, _ := relayDB(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := "D" + randSuffix()
	subject := "pgsweep.down." + name
	addr := freeAddr(t)
	p := startRelay(t, 0, "", "--database-url", db.URL, "--schema", db.Schema, "--queue", "q",
		"--to", broker.URL+"?subject="+subject+"&stream="+name, "--http-addr", addr, "--lease", "2s", "--poll-interval", "100ms")

	var sent atomic.Int64
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		for ctx.Err() == nil {
			if _, _, err := db.Client.Send(context.Background(), "q", pgsweep.Message{Payload: json.RawMessage(strconv.FormatInt(sent.Load(), 10))}); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			sent.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	health := func() (int, relay.Health) {
		code, body, err := get("http://" + addr + "/healthz")
		if err != nil {
			return 0, relay.Health{}
		}
		var h relay.Health
		_ = json.Unmarshal([]byte(body), &h)
		return code, h
	}
	var published int64 // as /healthz last said
	waitHealth := func(want int, broker string, within time.Duration) {
		t.Helper()
		pgtest.Eventually(t, within, func() error {
			code, h := health()
			if code != want || h.Broker != broker {
				return fmt.Errorf("/healthz %d %+v, want %d with broker %s; relay output:\n%s", code, h, want, broker, p.out.String())
			}
			published = h.Published
			return nil
		})
	}
	// publishing waits until the relay has published more than /healthz last said
	publishing := func() {
		t.Helper()
		before := published
		pgtest.Eventually(t, 30*time.Second, func() error {
			code, h := health()
			if code != 200 || h.Published <= before {
				return fmt.Errorf("/healthz %d %+v: nothing published since %d", code, h, before)
			}
			return nil
		})
	}
	waitHealth(200, "up", 20*time.Second)
	publishing()
	broker.Stop()
	downAt := time.Now()
	waitHealth(503, "down", 10*time.Second)
	t.Logf("/healthz reported the broker down %v after it stopped", time.Since(downAt).Round(time.Millisecond))
	time.Sleep(30*time.Second - time.Since(downAt)) // time under test: a 30 s outage
	broker.Start()
	upAt := time.Now()
	waitHealth(200, "up", 30*time.Second)
	t.Logf("/healthz reported the broker up %v after it restarted", time.Since(upAt).Round(time.Millisecond))
	publishing()
	cancel()
	<-senderDone
	pgtest.Eventually(t, 30*time.Second, queueEmpty(t, db, "q"))
	n := sent.Load()

	nc, err := natsgo.Connect(broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if int64(info.State.Msgs) != n {
		t.Errorf("the stream holds %d messages, %d were sent", info.State.Msgs, n)
	}
	if d := deadLetters(t, db); d != 0 {
		t.Errorf("%d dead letters after the outage", d)
	}
	code, body, err := get("http://" + addr + "/metrics")
	if err != nil || code != 200 || !strings.Contains(body, `pgsweep_relay_published_total{queue="q"}`) ||
		!strings.Contains(body, `pgsweep_relay_failed_total{outcome="unavailable",queue="q"}`) ||
		!strings.Contains(body, `pgsweep_relay_dispatch_latency_seconds_bucket{path="claim",queue="q"`) {
		t.Errorf("/metrics %d %v:\n%s", code, err, body)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 || !strings.Contains(p.out.String(), "stopped") {
		t.Fatalf("relay exited %d after SIGTERM:\n%s", code, p.out.String())
	}
	t.Logf("%d messages sent across a 30 s outage, each in the stream once", n)
}
