package nats

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
	"github.com/pgsweep/pgsweep/relay/relaytest"
)

// The publisher's ack matching against a real nats-server (scripts/brokers.sh).

func randName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// testStream creates a stream of its own on the server at base (cfg's name
// and subjects are filled in) and returns its subject and a JetStream handle.
func testStream(t *testing.T, base string, cfg jetstream.StreamConfig) (string, jetstream.Stream) {
	t.Helper()
	nc, err := natsgo.Connect(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "P" + randName()
	subject := "pgsweep.pubtest." + cfg.Name
	cfg.Subjects = []string{subject}
	if cfg.Duplicates == 0 {
		cfg.Duplicates = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, cfg.Name)
	})
	return subject, st
}

func open(t *testing.T, base, subject string) *Transport {
	t.Helper()
	tr, err := Open(base+"?subject="+subject, "pubtest", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func msgs(queue string, first, n int, payload string) []relay.Message {
	ms := make([]relay.Message, n)
	for i := range ms {
		ms[i] = relay.Message{Queue: queue, ID: int64(first + i), Payload: json.RawMessage(payload), Attempt: 1,
			CreatedAt: time.Now(), Headers: map[string]string{"trace": fmt.Sprint(first + i)}}
	}
	return ms
}

// idle: nothing waits for an ack any more.
func idle(t *testing.T, tr *Transport) {
	t.Helper()
	tr.ack.mu.Lock()
	defer tr.ack.mu.Unlock()
	if tr.ack.pending != 0 || len(tr.ack.rounds) != 0 {
		t.Errorf("after Publish: %d messages pending, %d rounds", tr.ack.pending, len(tr.ack.rounds))
	}
}

func withTimeout(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_ = cancel // ends with d
	return ctx
}

// Every message of concurrent batches is acked and matched to its own
// result; a replay (same identity) is a Duplicate ack and counts as
// accepted; the stream holds each once, with its headers.
func TestPublisherAcksAndDuplicates(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	subject, st := testStream(t, base, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	tr := open(t, base, subject)
	const workers, batches, size = 4, 20, 100
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range batches {
				ms := msgs("q", (w*batches+b)*size, size, `{"a":1}`)
				for i, r := range tr.Publish(withTimeout(30*time.Second), ms) {
					if r.Err != nil {
						t.Errorf("message %d: %v", ms[i].ID, r.Err)
					}
				}
			}
		})
	}
	wg.Wait()
	// replays, with some new ones among them
	ms := append(msgs("q", 0, 50, `{"a":1}`), msgs("q", workers*batches*size, 10, `{"a":2}`)...)
	for i, r := range tr.Publish(withTimeout(30*time.Second), ms) {
		if r.Err != nil {
			t.Errorf("replay of %d: %v", ms[i].ID, r.Err)
		}
	}
	idle(t, tr)
	info, err := st.Info(withTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(workers*batches*size + 10); info.State.Msgs != want {
		t.Errorf("stream holds %d messages, want %d (each once)", info.State.Msgs, want)
	}
	m, err := st.GetLastMsgForSubject(withTimeout(10*time.Second), subject)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(workers*batches*size + 9)
	if m.Header.Get("Nats-Msg-Id") != "q/"+id || m.Header.Get(relay.HeaderID) != id || m.Header.Get("trace") != id ||
		m.Header.Get(relay.HeaderQueue) != "q" || string(m.Data) != `{"a":2}` {
		t.Errorf("last message: headers %v, data %s", m.Header, m.Data)
	}
}

// A stream that refuses messages answers with error acks: "maximum messages
// exceeded" (discard new) is retried, a message above the stream's maximum
// size is permanent; the others of the batch are accepted.
func TestPublisherErrorAcks(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	subject, _ := testStream(t, base, jetstream.StreamConfig{Storage: jetstream.MemoryStorage, MaxMsgs: 3,
		Discard: jetstream.DiscardNew, MaxMsgSize: 512})
	tr := open(t, base, subject)
	ms := msgs("full", 1, 5, `{"a":1}`)
	ms[1].Payload = json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)
	rs := tr.Publish(withTimeout(30*time.Second), ms)
	// 1, 3, 4 fit; 2 is too large; 5 finds the stream full
	for _, i := range []int{0, 2, 3} {
		if rs[i].Err != nil {
			t.Errorf("message %d: %v", ms[i].ID, rs[i].Err)
		}
	}
	if r := rs[1]; r.Err == nil || !r.Permanent || errors.Is(r.Err, relay.ErrUnavailable) {
		t.Errorf("too large: %+v, want a permanent error", r)
	}
	if r := rs[4]; r.Err == nil || r.Permanent || errors.Is(r.Err, relay.ErrUnavailable) ||
		!strings.Contains(r.Err.Error(), "maximum messages exceeded") {
		t.Errorf("stream full: %+v, want a retried error", r)
	}
	var apiErr *jetstream.APIError
	if !errors.As(rs[4].Err, &apiErr) || apiErr.ErrorCode == 0 {
		t.Errorf("stream full: %v is not the stream's API error", rs[4].Err)
	}
	idle(t, tr)
}

// No stream holds the subject: published again twice, 250 ms apart, then
// unavailable. A subject someone listens to but no stream acks: the
// context's deadline ends the wait, unavailable.
func TestPublisherNoResponseAndTimeout(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	tr := open(t, base, "pgsweep.pubtest.nostream."+randName())
	start := time.Now()
	rs := tr.Publish(withTimeout(30*time.Second), msgs("q", 1, 3, `1`))
	if d := time.Since(start); d < 2*noRespRetryWait || d > 10*time.Second {
		t.Errorf("no responders answered after %v, want two retries 250 ms apart", d)
	}
	for _, r := range rs {
		if !errors.Is(r.Err, relay.ErrUnavailable) || !errors.Is(r.Err, jetstream.ErrNoStreamResponse) {
			t.Errorf("no stream: %v, want unavailable (no response from stream)", r.Err)
		}
	}
	idle(t, tr)

	nc, err := natsgo.Connect(base)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	silent := "pgsweep.pubtest.silent." + randName()
	if _, err := nc.Subscribe(silent, func(*natsgo.Msg) {}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	tr2 := open(t, base, silent)
	start = time.Now()
	rs = tr2.Publish(withTimeout(300*time.Millisecond), msgs("q", 1, 3, `1`))
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("no ack: returned after %v, want the context's 300 ms", d)
	}
	for _, r := range rs {
		if !errors.Is(r.Err, relay.ErrUnavailable) || !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("no ack: %v, want unavailable (deadline)", r.Err)
		}
	}
	idle(t, tr2)
}

// The connection drops while a batch waits for its acks: the batch fails
// at once with ErrDisconnected (unavailable), not at its deadline; after
// the server is back the transport publishes again (the inbox
// subscription comes back with the connection).
func TestPublisherDisconnectMidBatch(t *testing.T) {
	t.Parallel()
	b := relaytest.Private(t, "nats")
	subject, _ := testStream(t, b.URL, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	// a listener that takes the messages and never answers: the batch waits
	nc, err := natsgo.Connect(b.URL, natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	silent := subject + ".silent"
	got := make(chan struct{}, 1000)
	if _, err := nc.Subscribe(silent, func(*natsgo.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	tr := open(t, b.URL, subject)
	tr.o.SubjectHeader = "subject"
	ms := msgs("q", 1, 10, `1`)
	for i := range ms {
		if i%2 == 1 {
			ms[i].Headers["subject"] = silent
		}
	}
	var rs []relay.Result
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		rs = tr.Publish(withTimeout(time.Minute), ms)
	}()
	for range 5 {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the silent listener got no message")
		}
	}
	// Still a wait on time: the stream acks the others to Publish in the
	// background, and nothing outside the transport sees when.
	time.Sleep(300 * time.Millisecond)
	b.Stop()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Publish still waits 20 s after the server stopped")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Publish returned after %v", d)
	}
	for i, r := range rs {
		if i%2 == 0 {
			if r.Err != nil {
				t.Errorf("message %d (to the stream): %v", ms[i].ID, r.Err)
			}
			continue
		}
		if !errors.Is(r.Err, relay.ErrUnavailable) || !errors.Is(r.Err, natsgo.ErrDisconnected) {
			t.Errorf("message %d (no ack): %v, want unavailable (disconnected)", ms[i].ID, r.Err)
		}
	}
	idle(t, tr)
	// down: fails at once
	if rs := tr.Publish(withTimeout(10*time.Second), msgs("q", 100, 2, `1`)); !errors.Is(rs[0].Err, relay.ErrUnavailable) {
		t.Errorf("while the server is down: %v, want unavailable", rs[0].Err)
	}
	b.Start()
	pgtest.Eventually(t, 20*time.Second, tr.Check) // the reconnect
	// the stream may take a moment to come back (no responders, then unavailable)
	pgtest.Eventually(t, 20*time.Second, func() error {
		rs := tr.Publish(withTimeout(10*time.Second), msgs("q", 200, 5, `1`))
		if rs[0].Err != nil {
			return fmt.Errorf("after the restart: %w", rs[0].Err)
		}
		for i, r := range rs {
			if r.Err != nil {
				t.Errorf("after the restart, message %d: %v", i, r.Err)
			}
		}
		return nil
	})
	idle(t, tr)
}

// The pure parts: reply subjects and acks.
func TestParseReplyAndAck(t *testing.T) {
	for _, c := range []struct {
		subj string
		rn   uint64
		i    int
		ok   bool
	}{
		{"_INBOX.abc.7.12", 7, 12, true},
		{"_INBOX.abc.0.0", 0, 0, true},
		{"_INBOX.abc.7", 0, 0, false},
		{"_INBOX.abc.7.", 0, 0, false},
		{"_INBOX.abc..1", 0, 0, false},
		{"_INBOX.abc.x.1", 0, 0, false},
		{"_INBOX.other.7.1", 0, 0, false},
		{"_INBOX.abc.", 0, 0, false},
	} {
		rn, i, ok := parseReply(c.subj, "_INBOX.abc.")
		if ok != c.ok || (ok && (rn != c.rn || i != c.i)) {
			t.Errorf("parseReply(%q) = %d, %d, %v", c.subj, rn, i, ok)
		}
	}
	for _, c := range []struct {
		ack  string
		want error
	}{
		{`{"stream":"S","seq":1}`, nil},
		{`{"stream":"S","seq":1,"duplicate":true}`, nil},
		{`{"stream":"S","domain":"d","seq":1}`, nil},
		{`{"seq":1,"stream":"S"}`, nil},
		{`{"stream":"","seq":1}`, jetstream.ErrInvalidJSAck},
		{`{"seq":1}`, jetstream.ErrInvalidJSAck},
		{`nonsense`, jetstream.ErrInvalidJSAck},
		{``, jetstream.ErrInvalidJSAck},
		{`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}`,
			&jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}},
	} {
		got := parseAck([]byte(c.ack))
		if (got == nil) != (c.want == nil) || (got != nil && got.Error() != c.want.Error()) {
			t.Errorf("parseAck(%s) = %v, want %v", c.ack, got, c.want)
		}
	}
	if r := classify(parseAck([]byte(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`))); !r.Permanent {
		t.Errorf("message too large: %+v, want permanent", r)
	}
}
